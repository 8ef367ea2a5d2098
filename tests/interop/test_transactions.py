"""Transactions with real clients against one broker process: confluent-kafka (librdkafka),
aiokafka and kafka-python commit and abort, read_committed readers see committed records
only and wait for open transactions, a second producer with the same transactional id
fences the first, an abandoned transaction is aborted after its timeout, and a
consume-transform-produce loop with an abort in the middle produces each output exactly
once and commits exactly the offsets it consumed."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer

from tests.util import unique

pytestmark = pytest.mark.interop

# a short abort interval, so an abandoned transaction is aborted within the test
SHARED_BROKER_OVERRIDES = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
}
TIMEOUT_S = 30


def _topic(broker, prefix: str, partitions: int = 1) -> str:
    name = unique(prefix)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(20)
    return name


def _producer(broker, transactional_id: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": transactional_id, **extra})
    producer.init_transactions(TIMEOUT_S)
    return producer


def _read(broker, topic: str, isolation: str, expect: int | None = None,
          partitions: int = 1, idle_s: float = 2.0) -> list[bytes]:
    """Every record value of `topic` an `isolation` reader sees: until `expect` records
    arrived, or until nothing came for `idle_s` once the end of every partition was reached."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("r"),
                         "auto.offset.reset": "earliest", "isolation.level": isolation,
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if (expect is None and len(eof) == partitions
                        and time.monotonic() - quiet_since > idle_s):
                    break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            values.append(msg.value())
            quiet_since = time.monotonic()
            if expect is not None and len(values) >= expect:
                break
    finally:
        consumer.close()
    return values


def test_confluent_commit_is_visible_and_abort_is_not(shared_broker):
    topic = _topic(shared_broker, "txn", 2)
    producer = _producer(shared_broker, unique("tx"))
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"c{i}".encode(), partition=i % 2)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"a{i}".encode(), partition=i % 2)
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"last", partition=0)
    producer.commit_transaction(TIMEOUT_S)

    committed = _read(shared_broker, topic, "read_committed", partitions=2)
    assert sorted(committed) == sorted([f"c{i}".encode() for i in range(10)] + [b"last"])
    # read_uncommitted sees the aborted records too, never the markers
    everything = _read(shared_broker, topic, "read_uncommitted", partitions=2)
    assert sorted(everything) == sorted(committed + [f"a{i}".encode() for i in range(10)])


def test_an_open_transaction_holds_back_read_committed_readers(shared_broker):
    topic = _topic(shared_broker, "held")
    plain = Producer({"bootstrap.servers": shared_broker.bootstrap})
    plain.produce(topic, b"before", partition=0)
    plain.flush(TIMEOUT_S)
    producer = _producer(shared_broker, unique("tx"))
    producer.begin_transaction()
    producer.produce(topic, b"in-txn", partition=0)
    producer.flush(TIMEOUT_S)
    plain.produce(topic, b"after", partition=0)  # past the open transaction's first offset
    plain.flush(TIMEOUT_S)
    # the LSO stops at the open transaction: "after" is held back with it
    assert _read(shared_broker, topic, "read_committed") == [b"before"]
    assert _read(shared_broker, topic, "read_uncommitted", expect=3) == [
        b"before", b"in-txn", b"after"]
    producer.commit_transaction(TIMEOUT_S)
    assert _read(shared_broker, topic, "read_committed", expect=3) == [
        b"before", b"in-txn", b"after"]


def test_a_second_producer_with_the_same_id_fences_the_first(shared_broker):
    topic = _topic(shared_broker, "fence")
    transactional_id = unique("tx")
    first = _producer(shared_broker, transactional_id)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(TIMEOUT_S)
    second = _producer(shared_broker, transactional_id)  # aborts the first's transaction
    second.begin_transaction()
    second.produce(topic, b"alive", partition=0)
    second.commit_transaction(TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        first.produce(topic, b"late", partition=0)
        first.commit_transaction(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED,
                                             KafkaError.PRODUCER_FENCED,
                                             KafkaError.INVALID_PRODUCER_EPOCH)
    assert _read(shared_broker, topic, "read_committed") == [b"alive"]


def test_an_abandoned_transaction_is_aborted_after_its_timeout(shared_broker):
    topic = _topic(shared_broker, "abandoned")
    producer = _producer(shared_broker, unique("tx"), **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, b"forgotten", partition=0)
    producer.flush(TIMEOUT_S)
    # no commit, no abort: the coordinator aborts it once 2 s have passed
    plain = Producer({"bootstrap.servers": shared_broker.bootstrap})
    plain.produce(topic, b"later", partition=0)
    plain.flush(TIMEOUT_S)
    assert _read(shared_broker, topic, "read_committed", expect=1) == [b"later"]


def test_consume_transform_produce_with_an_abort_in_the_middle_is_exactly_once(shared_broker):
    source, sink = _topic(shared_broker, "in"), _topic(shared_broker, "out")
    group = unique("ctp")
    feeder = Producer({"bootstrap.servers": shared_broker.bootstrap})
    for i in range(30):
        feeder.produce(source, str(i).encode(), partition=0)
    feeder.flush(TIMEOUT_S)

    def run(abort_after: int | None) -> int:
        """Copy source to sink, doubling each number, 5 records per transaction; abort
        the transaction after `abort_after` records and stop there."""
        consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "isolation.level": "read_committed"})
        consumer.subscribe([source])
        producer = _producer(shared_broker, f"{group}-tx")
        copied = 0
        try:
            deadline = time.monotonic() + TIMEOUT_S
            batch: list = []
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    if copied and not batch:
                        break
                    continue
                assert not msg.error(), msg.error()
                if not batch:
                    producer.begin_transaction()
                producer.produce(sink, str(int(msg.value()) * 2).encode(), partition=0)
                batch.append(msg)
                if abort_after is not None and copied + len(batch) >= abort_after:
                    producer.abort_transaction(TIMEOUT_S)
                    return copied
                if len(batch) == 5:
                    offsets = [TopicPartition(source, 0, batch[-1].offset() + 1)]
                    producer.send_offsets_to_transaction(
                        offsets, consumer.consumer_group_metadata(), TIMEOUT_S)
                    producer.commit_transaction(TIMEOUT_S)
                    copied += len(batch)
                    batch = []
            return copied
        finally:
            consumer.close()

    assert run(abort_after=12) == 10  # two transactions committed, the third aborted
    assert run(abort_after=None) == 20  # a restart resumes from the committed offset 10
    outputs = _read(shared_broker, sink, "read_committed", expect=30)
    assert sorted(int(v) for v in outputs) == [2 * i for i in range(30)]
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions
    [future] = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(source, 0)])]).values()
    assert [tp.offset for tp in future.result(20).topic_partitions] == [30]


def test_aiokafka_transactions_commit_and_abort(shared_broker):
    topic = _topic(shared_broker, "aio")

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                                    transactional_id=unique("tx"))
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"kept", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"dropped", partition=0)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait(topic, b"kept-too", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=shared_broker.bootstrap,
                                    auto_offset_reset="earliest",
                                    isolation_level="read_committed")
        await consumer.start()
        try:
            seen: list[bytes] = []
            async with asyncio.timeout(TIMEOUT_S):
                while len(seen) < 2:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        seen += [r.value for r in records]
            return seen
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == [b"kept", b"kept-too"]


def test_kafka_python_transactions_commit_and_abort(shared_broker):
    topic = _topic(shared_broker, "kp")
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                             transactional_id=unique("tx"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kept", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"dropped", partition=0)
        producer.abort_transaction()
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(topic, bootstrap_servers=shared_broker.bootstrap,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             consumer_timeout_ms=3000)
    try:
        assert [r.value for r in consumer] == [b"kept"]
    finally:
        consumer.close()
