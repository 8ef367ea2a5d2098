"""Real consumers reading transactions the broker process ended itself: transactional
batches produced and markers written with raw requests (no transaction coordinator
involved: KIP-890's verification is off for this module's broker), then librdkafka and kafka-python consume with read_committed, which skips the
aborted records by the Fetch answer's aborted_transactions and stops at the last stable
offset, and with read_uncommitted, which sees everything."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from protocol.errors import ErrorCode
from protocol.messages import PRODUCE, WRITE_TXN_MARKERS
from protocol.records import Record, encode_batch
from tests.interop import raw as raw_api
from tests.util import unique

pytestmark = pytest.mark.interop

SHARED_BROKER_OVERRIDES = {"transaction.partition.verification.enable": "false"}


def _produce(r, topic: str, pid: int, seq: int, *values: bytes,
             transactional: bool = True) -> None:
    batch = encode_batch([Record(i, 1_000, b"k", v) for i, v in enumerate(values)],
                         producer_id=pid, producer_epoch=0, base_sequence=seq,
                         is_transactional=transactional)
    body = r.call(PRODUCE, 9, {"transactional_id": "tx" if transactional else None,
                               "acks": -1, "timeout_ms": 5000, "topic_data": [
                                   {"name": topic, "partition_data": [
                                       {"index": 0, "records": batch}]}]})
    assert body.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def _end(r, topic: str, pid: int, commit: bool) -> None:
    body = r.call(WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": 0, "transaction_result": commit,
        "coordinator_epoch": 0, "topics": [{"name": topic, "partition_indexes": [0]}]}]})
    assert body.markers[0].topics[0].partitions[0].error_code == ErrorCode.NONE


def _librdkafka(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("rc"),
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
        # nothing more arrives: what read_committed holds back stays held back
        got += [m.value() for m in consumer.consume(num_messages=100, timeout=1)]
    finally:
        consumer.close()
    return got


def _kafka_python(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = KafkaTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    try:
        return [m.value for m in consumer]
    finally:
        consumer.close()


def test_consumers_skip_aborted_transactions_and_wait_for_open_ones(raw, shared_broker):
    r = raw()
    topic = unique("read-committed")
    assert raw_api.create_topic(r, topic).error_code == 0
    _produce(r, topic, 7, 0, b"a1", b"a2")                       # 0-1
    _produce(r, topic, 8, 0, b"c1")                              # 2
    _produce(r, topic, 9, 0, b"p1", transactional=False)         # 3
    _produce(r, topic, 7, 2, b"a3")                              # 4
    _end(r, topic, 7, commit=False)                              # 5
    _end(r, topic, 8, commit=True)                               # 6
    _produce(r, topic, 9, 1, b"p2", transactional=False)         # 7
    _produce(r, topic, 10, 0, b"open")                           # 8: never ended
    _produce(r, topic, 9, 2, b"p3", transactional=False)         # 9: past the LSO
    everything = [b"a1", b"a2", b"c1", b"p1", b"a3", b"p2", b"open", b"p3"]
    committed = [b"c1", b"p1", b"p2"]
    bootstrap = shared_broker.bootstrap
    assert _librdkafka(bootstrap, topic, "read_committed", 3) == committed
    assert _librdkafka(bootstrap, topic, "read_uncommitted", 8) == everything
    assert _kafka_python(bootstrap, topic, "read_committed") == committed
    assert _kafka_python(bootstrap, topic, "read_uncommitted") == everything
