"""Real clients on the API versions Kafka 4 clients prefer: each client negotiates the
highest version both sides know, and the versions it actually sent are read from its own
debug log.

- librdkafka 2.16 (confluent-kafka) caps ListOffsets at v7, Produce at v10 and
  FindCoordinator at v2 (rdkafka_request.c, rdkafka_msgset_writer.c), so of these only
  Metadata moves up, to v13; its describe_topics() asks Metadata, not DescribeTopicPartitions.
- kafka-python 3.0 sends FindCoordinator v6, ListOffsets v10 and Metadata v13, looks up
  EARLIEST_LOCAL (-4, v8) and LATEST_TIERED (-5, v9), and its describe_topic_partitions()
  pages through DescribeTopicPartitions (KIP-966).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka import TopicPartition as RdTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec as RdOffsetSpec
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer.offsets import OffsetSpec

from protocol import versions
from protocol.messages import ALL_APIS
from tests.util import unique

pytestmark = pytest.mark.interop

TS = 1_700_000_000_000
ADVERTISED = {ALL_APIS[key].name: high for key, _low, high in versions.advertised()}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _sent(lines: list[str], pattern: str) -> dict[str, set[int]]:
    """{api name: versions} of every request the log says was sent."""
    out: dict[str, set[int]] = {}
    for line in lines:
        for match in re.finditer(pattern, line):
            out.setdefault(match.group(1), set()).add(int(match.group(2)))
    return out


@contextmanager
def _kafka_python_log() -> Iterator[list[str]]:
    handler = _Lines()
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_librdkafka_speaks_metadata_v13_and_still_produces_consumes_and_looks_up(shared_broker):
    handler = _Lines()
    logger = logging.getLogger(unique("rdkafka"))
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    conf = {"bootstrap.servers": shared_broker.bootstrap, "debug": "protocol",
            "logger": logger}
    name = unique("rdk-newer")
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(10)
    producer = Producer({**conf, "linger.ms": 1})
    for i in range(5):
        producer.produce(name, value=b"v%d" % i, partition=0, timestamp=TS + 10 * i)
    assert producer.flush(15) == 0

    consumer = Consumer({**conf, "group.id": unique("rdk-newer-g"),
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([name])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        assert got == [b"v%d" % i for i in range(5)]
        [found] = consumer.offsets_for_times([RdTopicPartition(name, 0, TS + 15)], 10)
        assert found.offset == 2
    finally:
        consumer.close()
    offsets = admin.list_offsets({RdTopicPartition(name, 0): RdOffsetSpec.latest(),
                                  RdTopicPartition(name, 1): RdOffsetSpec.max_timestamp()})
    assert {tp.partition: f.result(10).offset for tp, f in offsets.items()} == {0: 5, 1: -1}
    described = admin.describe_topics(TopicCollection([name]))[name].result(10)
    assert [p.id for p in described.partitions] == [0, 1]

    sent = _sent(handler.lines, r"Sent (\w+)Request \(v(\d+)")
    assert sent["Metadata"] == {13}
    # its own caps, below ours: the versions Kafka 4 added are not librdkafka's yet
    assert sent["Produce"] == {10} and sent["ListOffsets"] == {7}
    assert sent["FindCoordinator"] == {2}
    assert all(max(vs) <= ADVERTISED[api] for api, vs in sent.items() if api in ADVERTISED)


def test_kafka_python_looks_up_tiered_offsets_and_pages_through_topic_partitions(
        shared_broker):
    first, second = sorted([unique("kp-newer"), unique("kp-newer")])
    missing = unique("zz-kp-newer")  # after both in name order
    with _kafka_python_log() as lines:
        admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
        try:
            admin.create_topics([_kp_topic(first, 3), _kp_topic(second, 2)])
            producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
            for i in range(4):
                producer.send(first, value=b"v%d" % i, partition=0, timestamp_ms=TS + 10 * i)
            producer.flush(15)
            producer.close()

            tp = TopicPartition(first, 0)
            answers = {spec: admin.list_partition_offsets({tp: spec})[tp] for spec in OffsetSpec}
            assert {spec.name: (a.offset, a.timestamp) for spec, a in answers.items()} == {
                "LATEST": (4, -1), "EARLIEST": (0, -1), "MAX_TIMESTAMP": (3, TS + 30),
                "EARLIEST_LOCAL": (0, -1),  # the whole log is local
                "LATEST_TIERED": (-1, -1)}  # nothing is tiered

            pages = []
            cursor = None
            while True:
                page = admin.describe_topic_partitions(
                    [second, first, missing], response_partition_limit=2,
                    cursor=cursor)
                pages.append([(t["name"], t["error_code"],
                               [p["partition_index"] for p in t["partitions"]])
                              for t in page["topics"]])
                cursor = page["next_cursor"]
                if cursor is None:
                    break
                assert len(pages) < 10
            # two partitions a page, in name order; the unknown topic is
            # UNKNOWN_TOPIC_OR_PARTITION (3)
            assert pages == [[(first, 0, [0, 1])],
                             [(first, 0, [2]), (second, 0, [0])],
                             [(second, 0, [1]), (missing, 3, [])]]
        finally:
            admin.close()

        consumer = KafkaConsumer(first, bootstrap_servers=shared_broker.bootstrap,
                                 group_id=unique("kp-newer-g"), auto_offset_reset="earliest",
                                 consumer_timeout_ms=10_000)
        try:
            got = []
            for message in consumer:
                got.append(message.value)
                if len(got) == 4:
                    break
            assert got == [b"v%d" % i for i in range(4)]
            consumer.commit()
            assert consumer.committed(tp) == 4
        finally:
            consumer.close()
    sent = _sent(lines, r"(\w+)Request\(version=(\d+)")
    assert sent["FindCoordinator"] == {6}
    assert sent["Metadata"] == {13}
    assert 10 in sent["ListOffsets"]
    assert sent["DescribeTopicPartitions"] == {0}


def _kp_topic(name: str, partitions: int):
    from kafka.admin import NewTopic as KpNewTopic
    return KpNewTopic(name, num_partitions=partitions, replication_factor=1)
