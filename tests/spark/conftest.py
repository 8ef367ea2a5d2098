"""Fixtures for the Spark readers' tests.

`spark`: ONE SparkSession for the whole test session, built by spark_jobs.session.get_spark
with fast-test settings (local[2], no UI, 2 shuffle partitions, a JVM tuned for
short runs, all scratch space under pytest's tmp dir). The JVM's cold start costs ~10 s, so
tests share it and stay tiny.

`broker_data`: a real data directory written by our broker (tests/interop's BrokerProcess)
through librdkafka, in every codec, plus a consumer group's commits; see BrokerData.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_jobs.session import get_spark
from tests.util import wait_until

FAST_TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    # Short-lived test JVMs: the serial collector and C1 only start and warm up fastest.
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    session = get_spark(master="local[2]", app_name="minibroker-tests",
                        local_dir=tmp_path_factory.mktemp("spark"), conf=FAST_TEST_CONF)
    yield session
    session.stop()


# --- a real data directory ---------------------------------------------------------

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
GROUP = "spark-group"
MULTI_TOPIC = "orders-eu"      # a '-' in the name: the partition is after the last one
MULTI_PARTITIONS = 3
LOG_APPEND_TOPIC = "appended"  # message.timestamp.type=LogAppendTime


@dataclass
class BrokerData:
    """A stopped broker's data directory and what was produced into it."""
    data_dir: Path
    produced: list[dict]  # topic, partition, offset, timestamp, key, value, headers

    def of(self, topic: str, partition: int | None = None) -> list[dict]:
        return [m for m in self.produced
                if m["topic"] == topic and (partition is None or m["partition"] == partition)]


def _message(i: int, tag: str) -> tuple:
    # Keyed and unkeyed, with and without headers (one with a null value); values repeat
    # a pattern so every codec actually shrinks them and keeps the batch compressed.
    key = f"key-{i % 7}".encode() if i % 2 == 0 else None
    headers = [("trace", f"t{i}".encode()), ("empty", None)] if i % 3 == 0 else []
    return key, (f"{tag}:{i}:" + "abcdefgh" * 8).encode(), headers


def _produce(bootstrap: str, topic: str, messages: list[tuple], **config) -> list[dict]:
    """Produce and return what the log must now hold; delivery reports carry no headers,
    so those come from what was sent (each value is unique)."""
    from tests.interop.librdkafka import produce

    sent_headers = {m[1]: m[2] for m in messages}
    return [{"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
             "timestamp": m.timestamp()[1], "key": m.key(), "value": m.value(),
             "headers": sent_headers[m.value()]}
            for m in produce(bootstrap, topic, messages, **config)]


def _commit_as_group(bootstrap: str, topic: str, expected: int) -> None:
    """Consume `topic` in a consumer group and commit, so __consumer_offsets holds group
    metadata and offset commits; closing leaves the group (one more metadata record)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "client.id": "spark-tests"})
    consumer.subscribe([topic])
    seen = []
    try:
        def consumed_all():
            for msg in consumer.consume(num_messages=500, timeout=0.2):
                assert msg.error() is None, msg.error()
                seen.append(msg)
            return len(seen) >= expected
        wait_until(consumed_all, 30, message=f"group {GROUP} to consume {expected} messages")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


@pytest.fixture(scope="session")
def broker_data(tmp_path_factory) -> BrokerData:
    """Runs our broker, writes every codec (keyed, unkeyed, headers), a multi-partition
    topic with small segments, a LogAppendTime topic and a committing consumer group, then
    stops the broker so the files hold still."""
    from tests.interop.conftest import BrokerProcess
    from tests.interop.librdkafka import create_topic

    broker = BrokerProcess(tmp_path_factory.mktemp("spark-broker"), {
        "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3})
    broker.start()
    produced = []
    try:
        for codec in CODECS:
            topic = f"codec-{codec}"
            create_topic(broker.bootstrap, topic)
            produced += _produce(
                broker.bootstrap, topic, [_message(i, codec) for i in range(40)],
                **{"compression.type": codec, "batch.num.messages": 8})
        create_topic(broker.bootstrap, MULTI_TOPIC, MULTI_PARTITIONS, **{"segment.bytes": "2048"})
        produced += _produce(
            broker.bootstrap, MULTI_TOPIC,
            [(*_message(i, "orders"), i % MULTI_PARTITIONS) for i in range(60)],
            **{"batch.num.messages": 4})
        create_topic(broker.bootstrap, LOG_APPEND_TOPIC,
                     **{"message.timestamp.type": "LogAppendTime"})
        produced += _produce(broker.bootstrap, LOG_APPEND_TOPIC,
                             [_message(i, "appended") for i in range(5)])
        _commit_as_group(broker.bootstrap, MULTI_TOPIC, 60)
    finally:
        broker.stop()
    return BrokerData(broker.data_dir, produced)
