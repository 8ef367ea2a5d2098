"""Compaction seen from outside: a busy group's __consumer_offsets partition stays small and
its committed offsets survive cleaning and a kill -9; compacted topics refuse null keys."""

from __future__ import annotations

import glob
import os

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.coordinator.offsets import partition_of
from broker.events import read_events
from protocol.errors import ErrorCode
from protocol.records import Record, encode_batch
from tests.interop import raw as raw_api
from tests.interop.librdkafka import create_topic
from tests.util import wait_until

pytestmark = pytest.mark.interop
GROUP = "compacted-group"


def _partition_bytes(broker, topic: str, index: int) -> int:
    return sum(os.path.getsize(p) for p in
               glob.glob(os.path.join(broker.data_dir, f"{topic}-{index}", "*.log")))


def test_a_busy_groups_offsets_partition_is_compacted_and_survives_restart(make_broker):
    broker = make_broker(**{"offsets.topic.segment.bytes": "2048", "log.cleaner.backoff.ms": "200",
                            "log.cleaner.min.cleanable.ratio": "0.1"})
    create_topic(broker.bootstrap, "busy", partitions=2)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False})
    tps = [TopicPartition("busy", p) for p in range(2)]
    try:
        for i in range(1, 301):  # 600 commits of two keys: many segments of dead values
            consumer.commit(offsets=[TopicPartition("busy", p, i) for p in range(2)],
                            asynchronous=False)
    finally:
        consumer.close()
    index = partition_of(GROUP, 50)
    cleaned = wait_until(lambda: [e for e in read_events(broker.data_dir)
                                  if e["type"] == "log_clean"
                                  and e["topic"] == "__consumer_offsets"
                                  and e["partition"] == index], 30,
                         message="the cleaner never compacted the group's partition")
    assert cleaned[0]["records_removed"] > 0 and cleaned[0]["bytes_after"] < cleaned[0]["bytes_before"]
    broker.restart(kill=True)
    again = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP})
    try:
        committed = wait_until(lambda: again.committed(tps, timeout=5), 20)
    finally:
        again.close()
    assert [tp.offset for tp in committed] == [300, 300]


def test_compacted_topics_refuse_records_without_keys(raw):
    r = raw()
    assert raw_api.create_topic(r, "compacted-keys", **{"cleanup.policy": "compact"}).error_code == 0
    keyless = encode_batch([Record(0, 1, b"k", b"v", []), Record(1, 1, None, b"v", [])])
    assert raw_api.produce(r, "compacted-keys", keyless).error_code == ErrorCode.INVALID_RECORD
    keyed = encode_batch([Record(0, 1, b"k", b"v", [])])
    assert raw_api.produce(r, "compacted-keys", keyed).error_code == ErrorCode.NONE
