"""Transactions end to end with our client library against the in-process broker, on
virtual time (tests/inproc.py): the transactional Producer, the read_committed Consumer,
and exactly-once consume-transform-produce.

These need the partition side of transactions as well as the coordinator: leaders that
take transactional batches, write the coordinators' end-transaction markers
(WriteTxnMarkers), serve read_committed Fetch up to the last stable offset with the
aborted transactions, and the group coordinator's transactional offsets (TxnOffsetCommit
appended as the producer's transactional batch). tests/client/test_transactions_inproc.py
has what the transaction coordinator alone answers.
"""

from __future__ import annotations

import pytest
import trio

from client import errors
from client.consumer.consumer import Consumer
from client.producer.producer import Producer
from client.types import ConsumerGroupMetadata, TopicPartition
from protocol.records import iter_batch_headers
from tests.inproc import InProcessBroker
from tests.interop.group_helpers import FAST_GROUP
from tests.util import unique, wait_for

DEADLINE_S = 60


def _producer(broker: InProcessBroker, transactional_id: str, **config) -> Producer:
    return Producer(bootstrap_servers=broker.bootstrap, transactional_id=transactional_id,
                    **config)


def _consumer(broker: InProcessBroker, isolation: str, **config) -> Consumer:
    return Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                    isolation_level=isolation, **config)


def _txn_state(broker: InProcessBroker, transactional_id: str) -> str:
    return broker.broker.transactions.coordinator.transactions[transactional_id].state.value


async def _read_to_end(consumer: Consumer, tps: list[TopicPartition]) -> list:
    """Every record up to the end this consumer sees (read_committed: the last stable
    offset), by polling until each position reaches it."""
    consumer.assign(tps)
    ends = await consumer.end_offsets(tps)
    got: list = []
    while True:
        positions = {tp: await consumer.position(tp) for tp in tps}
        if all(positions[tp] >= ends[tp] for tp in tps):
            return got
        for records in (await consumer.getmany(timeout_ms=200)).values():
            got += records


async def test_committed_records_are_read_committed_and_flagged_transactional(
        inproc, autojump_clock):
    topic, tid = unique("t"), unique("tx")
    await inproc.create_topic(topic, 2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid) as producer:
            async with producer.transaction():
                handles = [await producer.send(topic, b"c%d" % i, partition=i % 2)
                           for i in range(10)]
            metas = [await h for h in handles]  # delivered before the commit returned
            assert _txn_state(inproc, tid) == "CompleteCommit"
            producer_id = inproc.broker.transactions.coordinator.transactions[tid].producer_id
        async with _consumer(inproc, "read_committed") as consumer:
            got = await _read_to_end(consumer, tps)
    assert sorted(r.value for r in got) == sorted(b"c%d" % i for i in range(10))
    assert {(r.partition, r.offset) for r in got} == {(m.partition, m.offset) for m in metas}
    # on disk: the data batches carry the transactional bit and the producer id, and each
    # partition ends with the COMMIT marker (a control batch)
    for tp in tps:
        log = inproc.broker.partition(tp.topic, tp.partition).log
        headers = [h for _, h in iter_batch_headers(log.read(0, 1 << 20))]
        assert all(h.is_transactional and h.producer_id == producer_id for h in headers)
        assert [h.is_control for h in headers] == [False] * (len(headers) - 1) + [True]


async def test_aborted_records_are_invisible_to_read_committed_only(inproc, autojump_clock):
    topic, tid = unique("t"), unique("tx")
    await inproc.create_topic(topic, 1)
    tp = TopicPartition(topic, 0)
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid) as producer:
            producer.begin_transaction()
            for i in range(5):
                await producer.send(topic, b"aborted%d" % i, partition=0)
            await producer.flush()  # written to the log, then aborted
            await producer.abort_transaction()
            with pytest.raises(ZeroDivisionError):
                async with producer.transaction():
                    await producer.send(topic, b"aborted-by-the-block", partition=0)
                    await producer.flush()
                    raise ZeroDivisionError("the work failed")
            async with producer.transaction():
                await producer.send(topic, b"committed", partition=0)
        async with _consumer(inproc, "read_committed") as consumer:
            committed = await _read_to_end(consumer, [tp])
            # the position went past the aborted records and every marker
            assert await consumer.position(tp) == inproc.broker.partition(
                topic, 0).log.log_end_offset
        async with _consumer(inproc, "read_uncommitted") as consumer:
            everything = await _read_to_end(consumer, [tp])
    assert [r.value for r in committed] == [b"committed"]
    assert [r.value for r in everything] == [b"aborted%d" % i for i in range(5)] + [
        b"aborted-by-the-block", b"committed"]


async def test_an_open_transaction_holds_read_committed_back_until_it_ends(
        inproc, autojump_clock):
    topic, tid = unique("t"), unique("tx")
    await inproc.create_topic(topic, 1)
    tp = TopicPartition(topic, 0)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=inproc.bootstrap) as plain, \
                _producer(inproc, tid) as producer:
            await plain.send_and_wait(topic, b"before", partition=0)  # offset 0
            producer.begin_transaction()
            await producer.send(topic, b"in-txn", partition=0)  # offset 1
            await producer.flush()
            await plain.send_and_wait(topic, b"after", partition=0)  # offset 2
            async with _consumer(inproc, "read_committed") as committed, \
                    _consumer(inproc, "read_uncommitted") as uncommitted:
                committed.assign([tp])
                # the last stable offset is the open transaction's first offset
                assert await committed.end_offsets([tp]) == {tp: 1}
                assert await uncommitted.end_offsets([tp]) == {tp: 3}
                assert [r.value for r in await _read_to_end(uncommitted, [tp])] == [
                    b"before", b"in-txn", b"after"]
                got = []
                while not got:
                    got += (await committed.getmany(timeout_ms=200)).get(tp, [])
                assert [r.value for r in got] == [b"before"]
                # nothing more while the transaction is open, however long one waits
                assert await committed.getmany(timeout_ms=2000) == {}
                assert await committed.position(tp) == 1
                await producer.commit_transaction()
                while len(got) < 3:
                    got += (await committed.getmany(timeout_ms=200)).get(tp, [])
                assert [r.value for r in got] == [b"before", b"in-txn", b"after"]


async def test_offsets_sent_to_a_transaction_count_when_it_commits(group_broker,
                                                                   autojump_clock):
    broker = group_broker
    topic, group, tid = unique("t"), unique("g"), unique("tx")
    await broker.create_topic(topic, 1)
    tp = TopicPartition(topic, 0)
    with trio.fail_after(DEADLINE_S):
        async with Consumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                            **FAST_GROUP) as consumer, _producer(broker, tid) as producer:
            while consumer.group_metadata().generation_id < 0:
                await consumer.getmany(timeout_ms=100)
            meta = consumer.group_metadata()
            producer.begin_transaction()
            await producer.send_offsets_to_transaction({tp: 7}, meta)
            # pending in the transaction: not committed yet
            assert broker.broker.groups.coordinator.offsets.has_pending_txn(group, [(topic, 0)])
            assert await consumer.committed(tp) is None
            await producer.commit_transaction()
            await wait_for(lambda: _txn_state(broker, tid) == "CompleteCommit", 10,
                           "the commit's markers written")
            assert await consumer.committed(tp) == 7

            # aborted offsets are dropped
            producer.begin_transaction()
            await producer.send_offsets_to_transaction({tp: (9, "meta")}, meta)
            await producer.abort_transaction()
            await wait_for(lambda: _txn_state(broker, tid) == "CompleteAbort", 10,
                           "the abort's markers written")
            assert await consumer.committed(tp) == 7

            # a zombie's offsets (a generation that is not the group's) are refused
            producer.begin_transaction()
            stale = ConsumerGroupMetadata(group, meta.generation_id + 5, meta.member_id, None)
            with pytest.raises(errors.CommitFailedError):
                await producer.send_offsets_to_transaction({tp: 11}, stale)
            with pytest.raises(errors.TransactionAbortableError):
                await producer.commit_transaction()
            await producer.abort_transaction()
            assert await consumer.committed(tp) == 7


async def test_a_new_producer_aborts_the_fenced_ones_open_transaction(inproc, autojump_clock):
    topic, tid = unique("t"), unique("tx")
    await inproc.create_topic(topic, 1)
    tp = TopicPartition(topic, 0)
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid) as zombie:
            zombie.begin_transaction()
            await zombie.send(topic, b"zombie", partition=0)
            await zombie.flush()
            # the new producer's InitProducerId aborts the open transaction (its markers
            # written) before it gets its epoch: CONCURRENT_TRANSACTIONS is retried
            async with _producer(inproc, tid) as successor:
                with pytest.raises(errors.ProducerFencedError):
                    await zombie.commit_transaction()
                async with successor.transaction():
                    await successor.send(topic, b"successor", partition=0)
        async with _consumer(inproc, "read_committed") as consumer:
            assert [r.value for r in await _read_to_end(consumer, [tp])] == [b"successor"]


async def test_consume_transform_produce_is_exactly_once_across_an_abort(
        group_broker, autojump_clock):
    broker = group_broker
    source, sink, group, tid = unique("in"), unique("out"), unique("g"), unique("tx")
    await broker.create_topic(source, 2)
    await broker.create_topic(sink, 1)
    await broker.produce(source, [(i % 2, b"%d" % i) for i in range(40)])
    failed_once = False
    with trio.fail_after(DEADLINE_S):
        async with Consumer(source, bootstrap_servers=broker.bootstrap, group_id=group,
                            isolation_level="read_committed", max_poll_records=7,
                            **FAST_GROUP) as consumer, \
                _producer(broker, tid) as producer:
            done = 0
            while done < 40:
                batches = await consumer.getmany(timeout_ms=200)
                if not batches:
                    continue
                try:
                    async with producer.transaction():
                        for records in batches.values():
                            for r in records:
                                await producer.send(sink, b"x" + r.value, partition=0)
                        if not failed_once and done >= 10:
                            failed_once = True
                            raise RuntimeError("the transform failed half way")
                        await producer.send_offsets_to_transaction(
                            {tp: records[-1].offset + 1 for tp, records in batches.items()},
                            consumer.group_metadata())
                except RuntimeError:
                    # aborted: back to where the batch began (the offsets last committed)
                    for tp, records in batches.items():
                        consumer.seek(tp, records[0].offset)
                    continue
                done += sum(len(records) for records in batches.values())
        async with _consumer(broker, "read_committed") as reader:
            out = await _read_to_end(reader, [TopicPartition(sink, 0)])
    assert failed_once
    assert sorted(r.value for r in out) == sorted(b"x%d" % i for i in range(40))
