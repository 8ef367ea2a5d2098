"""AdminClient's transaction calls against the in-process broker on virtual time
(tests/inproc.py): list_transactions and its filters, describe_transactions on the
coordinator, describe_producers on the leader, and abort_transaction's ABORT marker ending
an open transaction so that the last stable offset moves and read_committed readers go on.
"""

from __future__ import annotations

import pytest
import trio

from client import errors
from client.admin import AdminClient, ProducerState, TransactionListing
from client.consumer.consumer import Consumer
from client.producer.producer import Producer
from client.types import TopicPartition
from tests.inproc import InProcessBroker
from tests.util import unique, wait_for

DEADLINE_S = 60


def _admin(inproc: InProcessBroker) -> AdminClient:
    return AdminClient(bootstrap_servers=inproc.bootstrap, default_api_timeout_ms=10_000)


def _pid_epoch(inproc: InProcessBroker, transactional_id: str) -> tuple[int, int]:
    md = inproc.broker.transactions.coordinator.transactions[transactional_id]
    return md.producer_id, md.producer_epoch


async def test_list_and_describe_an_ongoing_transaction(inproc, autojump_clock):
    t, tid, idle = unique("t"), unique("tx"), unique("idle")
    await inproc.create_topic(t, 2)
    node = inproc.broker.node_id
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=inproc.bootstrap, transactional_id=idle), \
                Producer(bootstrap_servers=inproc.bootstrap, transactional_id=tid,
                         transaction_timeout_ms=120_000) as producer, _admin(inproc) as admin:
            producer.begin_transaction()
            for partition in (1, 0):
                await (await producer.send(t, b"v", partition=partition))
            pid, epoch = _pid_epoch(inproc, tid)
            idle_pid, _ = _pid_epoch(inproc, idle)
            started = inproc.broker.now_ms()
            await trio.sleep(30)  # virtual: the transaction runs 30 s

            assert await admin.list_transactions() == [
                TransactionListing(t_id, p, state, node) for t_id, p, state in sorted(
                    [(tid, pid, "Ongoing"), (idle, idle_pid, "Empty")])]
            assert [x.transactional_id for x in await admin.list_transactions(
                state_filters=["Ongoing"])] == [tid]
            assert [x.transactional_id for x in await admin.list_transactions(
                producer_id_filters=[idle_pid])] == [idle]
            assert [x.transactional_id for x in await admin.list_transactions(
                transactional_id_pattern="idle-.*")] == [idle]
            assert [x.transactional_id for x in await admin.list_transactions(
                duration_filter_ms=20_000)] == [tid]
            assert await admin.list_transactions(duration_filter_ms=60_000) == []

            described = (await admin.describe_transactions([tid]))[tid]
            assert (described.coordinator, described.state, described.producer_id,
                    described.producer_epoch, described.transaction_timeout_ms) == (
                node, "Ongoing", pid, epoch, 120_000)
            assert described.topic_partitions == (TopicPartition(t, 0), TopicPartition(t, 1))
            assert described.transaction_start_time_ms is not None
            assert 0 <= started - described.transaction_start_time_ms < 5_000
            # an idle id has no transaction started; an unknown one is an error
            assert (await admin.describe_transactions([idle]))[idle].state == "Empty"
            with pytest.raises(errors.TransactionalIdNotFoundError):
                await admin.describe_transactions([unique("never")])


async def test_describe_producers_and_abort_an_open_transaction(inproc, autojump_clock):
    t, tid = unique("t"), unique("tx")
    await inproc.create_topic(t, 1)
    tp = TopicPartition(t, 0)
    partition = inproc.broker.partition(t, 0)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=inproc.bootstrap,
                            transactional_id=tid) as txn, \
                Producer(bootstrap_servers=inproc.bootstrap) as plain, \
                _admin(inproc) as admin:
            await (await plain.send(t, b"before", partition=0))           # offset 0
            txn.begin_transaction()
            await (await txn.send(t, b"open", partition=0))               # 1, never ended
            await (await plain.send(t, b"after", partition=0))            # 2
            assert partition.last_stable_offset == 1  # held at the open transaction

            pid, epoch = _pid_epoch(inproc, tid)
            producers = (await admin.describe_producers([tp]))[tp]
            mine = next(p for p in producers if p.producer_id == pid)
            assert mine == ProducerState(pid, epoch, 0, mine.last_timestamp, None, 1)
            assert [p.current_transaction_start_offset for p in producers
                    if p.producer_id != pid] == [None]
            # the replica on a named broker answers the same
            assert (await admin.describe_producers(
                [tp], broker_id=inproc.broker.node_id))[tp] == producers
            with pytest.raises(errors.UnknownTopicOrPartitionError):
                await admin.describe_producers([TopicPartition(t, 3)])
            with pytest.raises(errors.BrokerNotAvailableError):
                await admin.describe_producers([tp], broker_id=77)

            with pytest.raises(errors.UnknownTopicOrPartitionError):
                await admin.abort_transaction(unique("nope"), 0, pid, epoch, 0)
            assert partition.last_stable_offset == 1

            # no marker has reached the partition yet: coordinator epoch 0, as Kafka's tool
            await admin.abort_transaction(t, 0, pid, epoch, 0)
            await wait_for(lambda: partition.last_stable_offset == partition.high_watermark
                           == 4, 10, "the LSO past the ABORT marker")
            mine = next(p for p in (await admin.describe_producers([tp]))[tp]
                        if p.producer_id == pid)
            assert (mine.current_transaction_start_offset, mine.coordinator_epoch) == (None, 0)

            async with Consumer(bootstrap_servers=inproc.bootstrap,
                                auto_offset_reset="earliest",
                                isolation_level="read_committed") as consumer:
                consumer.assign([tp])
                assert await consumer.end_offsets([tp]) == {tp: 4}
                got: list[bytes] = []
                while await consumer.position(tp) < 4:
                    got += [r.value for rs in (await consumer.getmany(timeout_ms=200)).values()
                            for r in rs]
            assert got == [b"before", b"after"]


async def test_abort_needs_a_producer_epoch_no_older_than_the_partitions(
        inproc, autojump_clock):
    t, tid = unique("t"), unique("tx")
    await inproc.create_topic(t, 1)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=inproc.bootstrap, transactional_id=tid):
            pass
        # a second session of the same id: a newer epoch
        async with Producer(bootstrap_servers=inproc.bootstrap,
                            transactional_id=tid) as txn, _admin(inproc) as admin:
            txn.begin_transaction()
            await (await txn.send(t, b"open", partition=0))
            pid, epoch = _pid_epoch(inproc, tid)
            assert epoch >= 1
            with pytest.raises(errors.InvalidProducerEpochError):
                await admin.abort_transaction(t, 0, pid, epoch - 1, 0)
            assert inproc.broker.partition(t, 0).last_stable_offset == 0
