"""Incremental fetch sessions (KIP-227) with real clients against the broker process.

kafka-python's consumer (its FetchSessionHandler, as Java's) and ours open a session with
their first Fetch and then send incremental ones; a session epoch that keeps advancing
means the broker accepted each incremental request and each answer passed the client's
checks (kafka-python drops the session on an incremental answer naming a partition outside
it, or a full answer missing one). librdkafka does not implement KIP-227 (it sends
session 0, epoch -1: src/rdkafka_fetcher.c, and INTRODUCTION document lists KIP-227 as not
supported), so it is answered sessionless, as before.
"""

from __future__ import annotations

import logging
import re
import time

import pytest
import trio
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KPTopicPartition

from client.consumer.consumer import Consumer
from client.types import TopicPartition
from tests.interop.librdkafka import create_topic, produce
from tests.util import unique

pytestmark = pytest.mark.interop
PARTITIONS = 8


def test_kafka_python_consumes_through_an_incremental_session(shared_broker):
    topic = unique("kp-sessions")
    create_topic(shared_broker.bootstrap, topic, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_wait_ms=100)
    try:
        consumer.assign([KPTopicPartition(topic, p) for p in range(PARTITIONS)])
        got: dict[int, list[bytes]] = {}
        sent: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 30
        for round_ in range(10):  # a record to one partition at a time, the rest idle
            partition = round_ % 3
            value = f"r{round_}".encode()
            producer.send(topic, value, partition=partition).get(timeout=10)
            sent.setdefault(partition, []).append(value)
            while sum(map(len, got.values())) < round_ + 1:
                assert time.monotonic() < deadline, f"only {got} of {sent}"
                for tp, records in consumer.poll(timeout_ms=500).items():
                    got.setdefault(tp.partition, []).extend(r.value for r in records)
        assert got == sent
        handlers = consumer._fetcher._session_handlers
        (handler,) = handlers.values()
        assert handler.next_metadata.session_id != 0
        # one full fetch, then at least one accepted incremental fetch per round
        assert handler.next_metadata.epoch >= 10
    finally:
        consumer.close()
        producer.close()


async def test_our_consumer_consumes_through_an_incremental_session(shared_broker):
    topic = unique("our-sessions")
    create_topic(shared_broker.bootstrap, topic, PARTITIONS)
    messages = [(None, f"v{i}".encode(), [], i % PARTITIONS) for i in range(40)]
    produce(shared_broker.bootstrap, topic, messages)
    with trio.fail_after(30):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
            c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            values: list[bytes] = []
            while len(values) < len(messages):
                for records in (await c.getmany(timeout_ms=1000)).values():
                    values.extend(r.value for r in records)
            for _ in range(3):  # idle rounds: incremental fetches with nothing to say
                assert await c.getmany(timeout_ms=300) == {}
            (session,) = c.fetcher._sessions.values()
            assert session.session_id != 0 and session.epoch >= 3
    assert sorted(values) == sorted(m[1] for m in messages)


def test_librdkafka_fetches_by_topic_id_without_a_session(shared_broker):
    """librdkafka 2.16 speaks Fetch v16 (topics by id) to a broker that serves it, always
    with session 0 / epoch -1: its own debug log names the version it sent."""
    topic = unique("rdk-v16")
    create_topic(shared_broker.bootstrap, topic, 2)
    produce(shared_broker.bootstrap, topic, [(None, b"a", [], 0), (None, b"b", [], 1)])
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())
    logger = logging.getLogger(f"rdk-{topic}")
    logger.addHandler(Collect())
    logger.setLevel(logging.DEBUG)
    c = CKConsumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": topic,
                    "auto.offset.reset": "earliest", "debug": "protocol"}, logger=logger)
    try:
        c.assign([CKTopicPartition(topic, p, 0) for p in range(2)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert sorted(got) == [b"a", b"b"]
    finally:
        c.close()
    versions = {int(v) for v in re.findall(r"Sent FetchRequest \(v(\d+)", "\n".join(lines))}
    assert versions == {16}, versions
