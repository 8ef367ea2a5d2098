"""The transactional Producer against our broker's transaction coordinator, in the test's
own trio run on virtual time (tests/inproc.py): what needs the coordinator only.

Each test looks at the coordinator's own state (`broker.transactions.coordinator`) and the
group coordinator's pending transactional offsets for what the client's requests did.
None of them needs a partition leader to take transactional batches, write markers or
take the group coordinator's transactional offsets: an ended transaction is checked to be
PrepareCommit/PrepareAbort (the decision written) or Complete* (its markers written too),
and a record sent may be refused by the leader or not (the producer's epoch is bumped
after an abort that follows a refusal; max_block_ms bounds that here, where an abort's
markers may never be written). What needs the leaders' side, TxnOffsetCommit included, is
tests/client/test_transactions_e2e.py.
"""

from __future__ import annotations

import pytest
import trio

from client import errors
from client.errors import FatalTransactionError, IllegalStateError
from client.producer.producer import Producer
from client.types import TopicPartition
from tests.inproc import InProcessBroker
from tests.util import unique, wait_for

DEADLINE_S = 60
COMMITTED = ("PrepareCommit", "CompleteCommit")
ABORTED = ("PrepareAbort", "CompleteAbort")


def _txn_state(broker: InProcessBroker, transactional_id: str):
    return broker.broker.transactions.coordinator.transactions.get(transactional_id)


def _producer(broker: InProcessBroker, transactional_id: str, **config) -> Producer:
    return Producer(bootstrap_servers=broker.bootstrap, transactional_id=transactional_id,
                    **config)


def test_a_transactional_id_implies_idempotence_and_refuses_what_conflicts():
    p = Producer(transactional_id="tx")
    assert p.config.enable_idempotence is True and p.config.acks == -1
    assert p.config.transaction_timeout_ms == 60000
    for bad in ({"enable_idempotence": False}, {"acks": 1}, {"transactional_id": ""}):
        with pytest.raises(ValueError):
            Producer(**{"transactional_id": "tx", **bad})


async def test_start_gets_the_producer_id_from_the_transaction_coordinator(
        inproc, autojump_clock):
    tid = unique("tx")
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid, transaction_timeout_ms=30_000):
            md = _txn_state(inproc, tid)
            assert md is not None and md.state.value == "Empty"
            assert (md.producer_epoch, md.txn_timeout_ms) == (0, 30_000)
            first_id = md.producer_id
        # a restart of the same transactional id: same producer id, a new epoch
        async with _producer(inproc, tid):
            md = _txn_state(inproc, tid)
            assert (md.producer_id, md.producer_epoch) == (first_id, 1)


async def test_an_empty_transaction_ends_without_a_request(inproc, autojump_clock):
    tid = unique("tx")
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid) as producer:
            producer.begin_transaction()
            await producer.commit_transaction()
            producer.begin_transaction()
            await producer.abort_transaction()
            async with producer.transaction():
                pass
            # no partition and no offsets were added: the coordinator never heard of them
            assert _txn_state(inproc, tid).state.value == "Empty"


async def test_calls_the_state_does_not_allow_raise_illegal_state_errors(
        inproc, autojump_clock):
    tid = unique("tx")
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid) as producer:
            with pytest.raises(IllegalStateError, match="begin_transaction"):
                await producer.send("t", b"outside")
            with pytest.raises(IllegalStateError, match="no transaction to commit"):
                await producer.commit_transaction()
            with pytest.raises(IllegalStateError, match="no transaction to abort"):
                await producer.abort_transaction()
            with pytest.raises(IllegalStateError, match="begin_transaction"):
                await producer.send_offsets_to_transaction({TopicPartition("t", 0): 1}, "g")
            producer.begin_transaction()
            with pytest.raises(IllegalStateError, match="already open"):
                producer.begin_transaction()
            await producer.commit_transaction()  # the transaction was not harmed
        async with Producer(bootstrap_servers=inproc.bootstrap) as plain:
            with pytest.raises(IllegalStateError, match="transactional_id"):
                plain.begin_transaction()


async def test_partitions_join_the_transaction_before_their_first_batch(
        inproc, autojump_clock):
    topic, tid = unique("t"), unique("tx")
    await inproc.create_topic(topic, 3)
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid, linger_ms=50) as producer:
            producer.begin_transaction()
            for partition in (0, 2, 0):
                await producer.send(topic, b"v", partition=partition)
            # both partitions in one AddPartitionsToTxn, sent while the batches linger
            await wait_for(lambda: _txn_state(inproc, tid).topic_partitions ==
                           {(topic, 0), (topic, 2)}, 10, "partitions 0 and 2 added")
            assert _txn_state(inproc, tid).state.value == "Ongoing"
        # leaving with the transaction open aborted it
        assert _txn_state(inproc, tid).state.value in ABORTED


async def test_a_second_producer_with_the_same_id_fences_the_first(inproc, autojump_clock):
    topic, tid = unique("t"), unique("tx")
    await inproc.create_topic(topic, 2)
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid, max_block_ms=5000) as first:
            async with _producer(inproc, tid, max_block_ms=5000) as second:
                assert _txn_state(inproc, tid).producer_epoch == 1
                first.begin_transaction()
                handle = await first.send(topic, b"zombie", partition=0)
                # AddPartitionsToTxn with the old epoch: PRODUCER_FENCED, before any batch
                with pytest.raises(errors.ProducerFencedError):
                    await handle
                assert isinstance(errors.ProducerFencedError(), FatalTransactionError)
                for call in (first.commit_transaction, first.abort_transaction):
                    with pytest.raises(errors.ProducerFencedError):
                        await call()
                with pytest.raises(errors.ProducerFencedError):
                    first.begin_transaction()
                with pytest.raises(errors.ProducerFencedError):
                    await first.send(topic, b"again")
                # the newer producer is unaffected: its partition joins its transaction
                second.begin_transaction()
                await second.send(topic, b"v", partition=1)
                await wait_for(lambda: _txn_state(inproc, tid).topic_partitions ==
                               {(topic, 1)}, 10, "the second producer's partition added")
        # nothing of the first producer's reached its partition
        assert inproc.broker.partition(topic, 0).log.log_end_offset == 0


async def test_the_fenced_producers_offsets_request_is_refused_too(inproc, autojump_clock):
    tid = unique("tx")
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid) as first:
            async with _producer(inproc, tid):
                first.begin_transaction()
                with pytest.raises(errors.ProducerFencedError):
                    await first.send_offsets_to_transaction({TopicPartition("t", 0): 1}, "g")
        assert _txn_state(inproc, tid).state.value == "Empty"


async def test_a_failed_record_makes_the_transaction_abortable_until_aborted(
        inproc, autojump_clock):
    topic, tid = unique("t"), unique("tx")
    await inproc.create_topic(topic, 1)
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid, max_request_size=2000) as producer:
            producer.begin_transaction()
            too_big = await producer.send(topic, b"x" * 5000, partition=0)
            with pytest.raises(errors.MessageTooLargeError):
                await too_big
            with pytest.raises(errors.TransactionAbortableError) as raised:
                await producer.send(topic, b"small", partition=0)
            assert isinstance(raised.value.__cause__, errors.MessageTooLargeError)
            with pytest.raises(errors.TransactionAbortableError):
                await producer.commit_transaction()
            with pytest.raises(errors.TransactionAbortableError):
                await producer.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "g")
            await producer.abort_transaction()
            # the producer goes on
            producer.begin_transaction()
            await producer.commit_transaction()

            # the context manager aborts a transaction whose commit must abort
            with pytest.raises(errors.TransactionAbortableError):
                async with producer.transaction():
                    await producer.send(topic, b"x" * 5000, partition=0)
            producer.begin_transaction()  # nothing was left open
            await producer.abort_transaction()


async def test_the_context_manager_aborts_when_the_block_raises(inproc, autojump_clock):
    topic, tid = unique("t"), unique("tx")
    await inproc.create_topic(topic, 1)
    with trio.fail_after(DEADLINE_S):
        async with _producer(inproc, tid, max_block_ms=5000) as producer:
            with pytest.raises(ZeroDivisionError):
                async with producer.transaction():
                    await producer.send(topic, b"v", partition=0)
                    await wait_for(lambda: _txn_state(inproc, tid).topic_partitions, 10,
                                   "the partition added")
                    raise ZeroDivisionError("the work of the transaction failed")
            assert _txn_state(inproc, tid).state.value in ABORTED
