"""The transactional producer's pure state machine (client/producer/transaction_manager.py):
the transitions Java's TransactionManager allows, the errors a call meets in each state,
the partitions' way into a transaction, and what each coordinator answer leads to."""

from __future__ import annotations

import pytest

from client import errors
from client.errors import FatalTransactionError, IllegalStateError, KafkaError, for_code
from client.producer.transaction_manager import (
    Outcome, TransactionManager, TransactionState, error_for, outcome_of,
)
from client.types import TopicPartition
from protocol.errors import ErrorCode

E = ErrorCode
S = TransactionState
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def _ready() -> TransactionManager:
    txn = TransactionManager("tx")
    txn.begin_init()
    txn.initialized()
    return txn


def _open() -> TransactionManager:
    txn = _ready()
    txn.begin()
    return txn


def test_a_transaction_goes_from_ready_to_committing_and_back():
    txn = TransactionManager("tx")
    assert txn.state is S.UNINITIALIZED
    with pytest.raises(IllegalStateError):
        txn.begin()  # no producer id yet
    txn.begin_init()
    txn.initialized()
    txn.begin()
    txn.check_send()  # allowed now
    assert txn.begin_commit() is False and txn.state is S.COMMITTING_TRANSACTION
    txn.complete()
    assert txn.state is S.READY and txn.last_error is None


def test_calls_out_of_order_are_illegal_state_errors_and_change_nothing():
    txn = _ready()
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        txn.check_send()  # a send outside a transaction
    with pytest.raises(IllegalStateError, match="no transaction to commit"):
        txn.begin_commit()
    with pytest.raises(IllegalStateError, match="no transaction to abort"):
        txn.begin_abort()
    assert txn.state is S.READY
    txn.begin()
    with pytest.raises(IllegalStateError, match="already open"):
        txn.begin()
    assert txn.state is S.IN_TRANSACTION
    txn.begin_commit()
    with pytest.raises(IllegalStateError, match="committing"):
        txn.check_send()  # no record joins a transaction being committed
    with pytest.raises(IllegalStateError):
        txn.begin_abort()  # Java: no abort once the commit is under way
    # IllegalStateError is Kafka's INVALID_TXN_STATE and never retried
    with pytest.raises(errors.InvalidTxnStateError) as raised:
        txn.begin()
    assert not raised.value.retriable


def test_an_interrupted_commit_or_abort_goes_on_when_called_again():
    txn = _open()
    assert txn.begin_commit() is False
    assert txn.begin_commit() is True  # KafkaTimeoutError the first time: call it again
    txn.complete()
    txn.begin()
    assert txn.begin_abort() is False
    assert txn.begin_abort() is True


def test_a_failed_record_makes_the_transaction_abortable_until_it_is_aborted():
    txn = _open()
    cause = for_code(E.MESSAGE_TOO_LARGE, "one record")
    txn.record_failed(cause)
    assert txn.state is S.ABORTABLE_ERROR and txn.has_error and txn.dropping
    for call in (txn.check_send, txn.begin_commit, txn.begin):
        with pytest.raises(errors.TransactionAbortableError) as raised:
            call()
        assert raised.value.__cause__ is cause and "abort_transaction" in str(raised.value)
    # what is still queued fails as abortable, caused by the first failure
    dropped = txn.drop_error()
    assert isinstance(dropped, errors.TransactionAbortableError) and dropped.__cause__ is cause
    assert txn.begin_abort() is False and txn.state is S.ABORTING_TRANSACTION
    assert isinstance(txn.drop_error(), errors.TransactionAbortedError)
    txn.complete()
    assert txn.state is S.READY and txn.last_error is None
    txn.begin()  # the producer goes on


def test_the_first_failure_is_the_cause_and_failures_while_aborting_change_nothing():
    txn = _open()
    first, second = for_code(E.NOT_ENOUGH_REPLICAS), for_code(E.CORRUPT_MESSAGE)
    txn.record_failed(first)
    txn.record_failed(second)
    assert txn.last_error is first
    txn.begin_abort()
    txn.record_failed(errors.TransactionAbortedError())  # the records the abort drops
    assert txn.state is S.ABORTING_TRANSACTION and txn.last_error is None


def test_a_commit_whose_records_fail_while_flushing_must_be_aborted():
    txn = _open()
    txn.begin_commit()
    txn.record_failed(for_code(E.INVALID_TXN_STATE, "from the leader"))
    assert txn.state is S.ABORTABLE_ERROR
    with pytest.raises(errors.TransactionAbortableError):
        txn.maybe_fail()
    txn.begin_abort()
    txn.complete()
    assert txn.state is S.READY


@pytest.mark.parametrize("code", [E.PRODUCER_FENCED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                  E.INVALID_PRODUCER_ID_MAPPING])
def test_a_fatal_error_ends_the_producer_whatever_is_called_next(code):
    txn = _open()
    txn.record_failed(for_code(E.NOT_ENOUGH_REPLICAS))  # abortable first
    fatal = for_code(code, "the coordinator said so")
    assert isinstance(fatal, FatalTransactionError) and not fatal.retriable
    txn.record_failed(fatal)
    assert txn.state is S.FATAL_ERROR and txn.last_error is fatal
    for call in (txn.check_send, txn.begin_commit, txn.begin_abort, txn.begin, txn.maybe_fail):
        with pytest.raises(FatalTransactionError) as raised:
            call()
        assert raised.value.code is code and raised.value is not fatal  # a fresh copy
    txn.abortable_error(for_code(E.CORRUPT_MESSAGE))
    assert txn.state is S.FATAL_ERROR and txn.last_error is fatal


def test_partitions_join_once_each_and_their_batches_wait_until_they_have():
    txn = _open()
    txn.maybe_add_partition(A0)
    txn.maybe_add_partition(A1)
    assert txn.has_partitions_to_add and not txn.is_send_allowed(A0)
    assert txn.take_partitions_to_add() == [A0, A1]
    txn.maybe_add_partition(A0)  # pending: not asked for again
    txn.maybe_add_partition(B0)  # goes in the next request
    assert txn.new_partitions == {B0} and not txn.started
    txn.partitions_added([A0, A1])
    assert txn.started and txn.is_send_allowed(A0) and not txn.is_send_allowed(B0)
    txn.maybe_add_partition(A0)  # added: nothing to do
    assert txn.take_partitions_to_add() == [B0]
    txn.begin_commit()
    txn.complete()
    assert not txn.started and not txn.is_send_allowed(A0) and not txn.pending_partitions


def test_offsets_alone_start_a_transaction():
    txn = _open()
    assert not txn.started  # nothing for EndTxn to end: commit sends no request
    txn.offsets_added()
    assert txn.started


def test_an_abort_that_left_a_sequence_gap_bumps_the_epoch_before_the_next_transaction():
    txn = _open()
    txn.record_failed(for_code(E.NOT_ENOUGH_REPLICAS))
    txn.begin_abort()
    txn.epoch_bump_required = True
    txn.complete()
    assert txn.state is S.INITIALIZING
    with pytest.raises(IllegalStateError, match="call abort_transaction"):
        txn.begin()  # the bump failed (a timeout): the application calls abort again
    txn.initialized()
    txn.begin()
    assert txn.state is S.IN_TRANSACTION


@pytest.mark.parametrize("api,code,outcome", [
    # Java's InitProducerIdHandler
    ("InitProducerId", E.NOT_COORDINATOR, Outcome.REFIND),
    ("InitProducerId", E.COORDINATOR_NOT_AVAILABLE, Outcome.REFIND),
    ("InitProducerId", E.COORDINATOR_LOAD_IN_PROGRESS, Outcome.RETRY),
    ("InitProducerId", E.CONCURRENT_TRANSACTIONS, Outcome.RETRY),
    ("InitProducerId", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Outcome.FATAL),
    ("InitProducerId", E.PRODUCER_FENCED, Outcome.FATAL),
    ("InitProducerId", E.INVALID_TRANSACTION_TIMEOUT, Outcome.FATAL),
    # AddPartitionsToTxnHandler
    ("AddPartitionsToTxn", E.NONE, Outcome.DONE),
    ("AddPartitionsToTxn", E.CONCURRENT_TRANSACTIONS, Outcome.RETRY),
    ("AddPartitionsToTxn", E.UNKNOWN_TOPIC_OR_PARTITION, Outcome.RETRY),
    ("AddPartitionsToTxn", E.INVALID_PRODUCER_EPOCH, Outcome.FATAL),
    ("AddPartitionsToTxn", E.INVALID_TXN_STATE, Outcome.FATAL),
    ("AddPartitionsToTxn", E.TOPIC_AUTHORIZATION_FAILED, Outcome.ABORTABLE),
    ("AddPartitionsToTxn", E.OPERATION_NOT_ATTEMPTED, Outcome.ABORTABLE),
    # AddOffsetsToTxnHandler
    ("AddOffsetsToTxn", E.GROUP_AUTHORIZATION_FAILED, Outcome.ABORTABLE),
    ("AddOffsetsToTxn", E.NOT_COORDINATOR, Outcome.REFIND),
    ("AddOffsetsToTxn", E.PRODUCER_FENCED, Outcome.FATAL),
    # TxnOffsetCommitHandler (the group's coordinator)
    ("TxnOffsetCommit", E.COORDINATOR_LOAD_IN_PROGRESS, Outcome.RETRY),
    ("TxnOffsetCommit", E.UNKNOWN_TOPIC_OR_PARTITION, Outcome.RETRY),
    ("TxnOffsetCommit", E.REQUEST_TIMED_OUT, Outcome.REFIND),
    ("TxnOffsetCommit", E.ILLEGAL_GENERATION, Outcome.ABORTABLE),
    ("TxnOffsetCommit", E.FENCED_INSTANCE_ID, Outcome.ABORTABLE),
    ("TxnOffsetCommit", E.INVALID_PRODUCER_EPOCH, Outcome.FATAL),
    # EndTxnHandler
    ("EndTxn", E.CONCURRENT_TRANSACTIONS, Outcome.RETRY),
    ("EndTxn", E.COORDINATOR_NOT_AVAILABLE, Outcome.REFIND),
    ("EndTxn", E.INVALID_TXN_STATE, Outcome.FATAL),
    ("EndTxn", E.INVALID_PRODUCER_ID_MAPPING, Outcome.FATAL),
    # a lost connection or a timeout: look the coordinator up again
    ("EndTxn", E.NETWORK_EXCEPTION, Outcome.REFIND),
])
def test_what_each_answer_leads_to(api, code, outcome):
    assert outcome_of(api, code) is outcome


def test_an_older_coordinators_invalid_producer_epoch_is_producer_fenced():
    error = error_for("EndTxn", E.INVALID_PRODUCER_EPOCH)
    assert isinstance(error, errors.ProducerFencedError) and error.code is E.PRODUCER_FENCED
    assert "INVALID_PRODUCER_EPOCH" in str(error)


def test_a_zombie_members_offsets_are_a_commit_failed_error():
    error = error_for("TxnOffsetCommit", E.ILLEGAL_GENERATION, "t-0 for group 'g'")
    assert isinstance(error, errors.CommitFailedError) and error.code is E.ILLEGAL_GENERATION
    assert isinstance(error_for("TxnOffsetCommit", E.GROUP_AUTHORIZATION_FAILED), KafkaError)
