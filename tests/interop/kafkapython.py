"""kafka-python helpers shared by interop tests."""

from __future__ import annotations

from kafka import KafkaConsumer, TopicPartition


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    """Read `expected` records from the start of every partition, without a group."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    got = []
    try:
        for msg in consumer:
            got.append(msg)
            if len(got) == expected:
                break
    finally:
        consumer.close()
    assert len(got) == expected, f"read {len(got)} of {expected} records"
    return got
