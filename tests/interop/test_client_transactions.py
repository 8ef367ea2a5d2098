"""Our client's transactions against the real broker, crossed with librdkafka's: what our
transactional Producer commits and aborts as a confluent-kafka read_committed consumer
sees it, and what a confluent-kafka transactional producer commits and aborts as our
read_committed Consumer sees it. (Needs the partition side of transactions: markers and
read_committed Fetch.)"""

from __future__ import annotations

import time

import pytest
import trio
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition

from client import AdminClient, Consumer, Producer, TopicPartition
from tests.util import unique

pytestmark = pytest.mark.interop

TIMEOUT_S = 30


async def _create(bootstrap: str, name: str, partitions: int) -> None:
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics({name: partitions})


def _ck_read(bootstrap: str, topic: str, isolation: str, partitions: int) -> list[bytes]:
    """Every value librdkafka's `isolation` consumer sees, up to the end of each partition."""
    consumer = CKConsumer({"bootstrap.servers": bootstrap, "group.id": unique("r"),
                           "auto.offset.reset": "earliest", "isolation.level": isolation,
                           "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([CKTopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(eof) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == CKError._PARTITION_EOF:
                    eof.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            eof.discard(msg.partition())
            values.append(msg.value())
    finally:
        consumer.close()
    assert len(eof) == partitions, "the end of every partition was not reached in time"
    return values


async def _read(bootstrap: str, topic: str, isolation: str, partitions: int) -> list[bytes]:
    """Every value our `isolation` Consumer sees, up to the end it sees of each partition."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    values: list[bytes] = []
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                        isolation_level=isolation) as consumer:
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                return values
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values += [r.value for r in records]


def test_our_transactions_as_librdkafka_reads_them(shared_broker):
    bootstrap, topic = shared_broker.bootstrap, unique("ours")

    async def produce() -> None:
        await _create(bootstrap, topic, 2)
        with trio.fail_after(TIMEOUT_S):
            async with Producer(bootstrap_servers=bootstrap,
                                transactional_id=unique("tx")) as producer:
                async with producer.transaction():
                    for i in range(6):
                        await producer.send(topic, b"c%d" % i, partition=i % 2)
                producer.begin_transaction()
                for i in range(4):
                    await producer.send(topic, b"a%d" % i, partition=i % 2)
                await producer.flush()
                await producer.abort_transaction()
                async with producer.transaction():
                    await producer.send(topic, b"last", partition=0)

    trio.run(produce)
    committed = [b"c%d" % i for i in range(6)] + [b"last"]
    assert sorted(_ck_read(bootstrap, topic, "read_committed", 2)) == sorted(committed)
    assert sorted(_ck_read(bootstrap, topic, "read_uncommitted", 2)) == sorted(
        committed + [b"a%d" % i for i in range(4)])


def test_librdkafkas_transactions_as_our_consumer_reads_them(shared_broker):
    bootstrap, topic = shared_broker.bootstrap, unique("theirs")
    trio.run(_create, bootstrap, topic, 2)
    producer = CKProducer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, b"c%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, b"a%d" % i, partition=i % 2)
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"last", partition=1)
    producer.commit_transaction(TIMEOUT_S)

    async def read(isolation: str) -> list[bytes]:
        with trio.fail_after(TIMEOUT_S):
            return await _read(bootstrap, topic, isolation, 2)

    committed = [b"c%d" % i for i in range(6)] + [b"last"]
    assert sorted(trio.run(read, "read_committed")) == sorted(committed)
    assert sorted(trio.run(read, "read_uncommitted")) == sorted(
        committed + [b"a%d" % i for i in range(4)])
