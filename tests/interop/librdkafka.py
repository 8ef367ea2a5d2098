"""librdkafka (confluent-kafka) helpers shared by interop tests: create a topic, produce,
read everything back from the beginning without a group."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    admin = _admin(bootstrap)  # the client must outlive its futures
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)])
    futures[name].result(timeout=10)


def produce(bootstrap: str, topic: str, messages, flush_s: float = 15, **config) -> list:
    """Produce (key, value, headers[, partition]) tuples; returns delivered messages in order.
    `flush_s`: how long every message may take to be delivered."""
    delivered, errors = [], []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})

    def on_delivery(err, msg):
        (errors if err else delivered).append(err or msg)

    for m in messages:
        key, value, headers = m[:3]
        kwargs = {"partition": m[3]} if len(m) > 3 else {}
        producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery,
                         **kwargs)
    assert producer.flush(flush_s) == 0
    assert errors == []
    return delivered


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int,
                timeout_s: float = 20) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-" + topic,
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    assert len(got) == expected, f"consumed {len(got)} of {expected}"
    return got
