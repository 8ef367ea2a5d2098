"""A transaction across its coordinator's kill -9, in a three-node cluster: the leader of
the transactional id's __transaction_state partition is killed while the transaction is
open; the partition's new leader loads the transaction from the records the old one
replicated, and the producer (librdkafka) commits afterwards: every record of the
transaction is read by a read_committed consumer exactly once."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.cluster.harness import FAST, TRANSACTION_KEY, coordinator_of
from tests.cluster.test_replication import create
from tests.util import unique, wait_until

pytestmark = pytest.mark.interop

PARTITIONS = 3
RECORDS = 30


def test_a_transaction_commits_after_its_coordinators_kill(make_cluster):
    cluster = make_cluster(overrides={**FAST, "transaction.state.log.num.partitions": 5})
    topic, transactional_id = unique("txn-failover"), unique("txn-failover-id")
    create(cluster, topic, PARTITIONS, min_isr=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": transactional_id, "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    producer.begin_transaction()
    values = [f"v{i}".encode() for i in range(RECORDS)]
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS)
    assert producer.flush(60) == 0

    coordinator = coordinator_of(cluster, transactional_id, TRANSACTION_KEY)
    cluster.kill(coordinator)
    wait_until(lambda: coordinator_of(cluster, transactional_id, TRANSACTION_KEY)
               != coordinator, 30,
               message="a new transaction coordinator", ignore_exceptions=(AssertionError,))
    producer.commit_transaction(60)

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique("r"),
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    read: list[bytes] = []
    ends: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and (len(read) < RECORDS or
                                               len(ends) < PARTITIONS):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                ends.add(msg.partition())
                continue
            read.append(msg.value())
    finally:
        consumer.close()
    assert sorted(read) == sorted(values)  # all of them, each once
