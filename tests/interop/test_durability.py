"""Nothing acknowledged is lost when the broker is killed with SIGKILL and restarted."""

from __future__ import annotations

import glob
import os
import uuid

import pytest
from confluent_kafka import Producer

from tests.interop.librdkafka import consume_all, create_topic

pytestmark = pytest.mark.interop


def _produce_acked(bootstrap: str, topic: str, count: int, partitions: int) -> list[bytes]:
    acked = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                         "enable.idempotence": True})
    for i in range(count):
        value = b"%08d" % i
        producer.produce(topic, value=value, partition=i % partitions,
                         on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    return acked


def test_kill_9_then_restart_loses_nothing_acknowledged(broker):
    topic = f"durable-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=3)
    acked = _produce_acked(broker.bootstrap, topic, 20_000, 3)
    assert len(acked) == 20_000
    broker.restart(kill=True)
    got = consume_all(broker.bootstrap, topic, 3, len(acked))
    assert sorted(m.value() for m in got) == sorted(acked)
    # and the broker keeps appending after the restart, at the offsets that follow
    more = _produce_acked(broker.bootstrap, topic, 30, 3)
    got = consume_all(broker.bootstrap, topic, 3, len(acked) + len(more))
    assert sorted(m.value() for m in got) == sorted(acked + more)


def test_torn_tail_is_truncated_and_everything_before_it_survives(broker):
    topic = f"torn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    acked = _produce_acked(broker.bootstrap, topic, 500, 1)
    broker.stop(kill=True)
    (segment,) = glob.glob(os.path.join(broker.data_dir, f"{topic}-0", "*.log"))
    with open(segment, "ab") as f:
        f.write(os.urandom(777))  # a write torn by the crash
    broker.start()
    got = consume_all(broker.bootstrap, topic, 1, len(acked))
    assert [m.value() for m in got] == acked
    assert [m.offset() for m in got] == list(range(len(acked)))
