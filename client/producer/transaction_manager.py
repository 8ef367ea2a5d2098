"""The transactional producer's state, pure (no I/O, no trio): Kafka's TransactionManager.

Owns: `TransactionState`, `TransactionManager` (the state of the transactional id's
current transaction: which partitions are in it, which wait to be added, whether the
coordinator knows of it yet, the error that ended it) and `Outcome` / `outcome_of` (what
the producer does with each error code a transaction coordinator, a group coordinator or a
leader answers: retry, look the coordinator up again, abort the transaction, or stop).

The states and their transitions are Java's:

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING_TRANSACTION -> READY
                                                  |   ^               |
                                                  v   |               v
                                ABORTABLE_ERROR <-----+---------- (a record failed)
                                       |
                                       v
                              ABORTING_TRANSACTION -> READY (or INITIALIZING for an epoch bump)
    any state -> FATAL_ERROR (fenced, not authorized: the producer must be closed)

A call the state does not allow raises before anything is sent: `IllegalStateError`
(begin_transaction twice, commit or abort without a transaction, send outside one),
`TransactionAbortableError` once a record or request of the transaction failed (commit,
send and send_offsets_to_transaction refuse; only abort_transaction goes on), and the
fatal error itself, again, in FATAL_ERROR.

    txn = TransactionManager("orders-tx")
    txn.begin_init(); txn.initialized()        # InitProducerId answered
    txn.begin()                                # IN_TRANSACTION
    txn.maybe_add_partition(tp)                # a batch for a partition not in it yet
    tps = txn.take_partitions_to_add()         # AddPartitionsToTxn for these
    txn.partitions_added(tps)                  # their batches may go now
    txn.begin_commit()                         # flush, then EndTxn(commit) if txn.started
    txn.complete()                             # READY
"""

from __future__ import annotations

import enum
from typing import Iterable

from client.errors import (
    CommitFailedError, FatalTransactionError, IllegalStateError, KafkaError,
    TransactionAbortedError, for_code,
)
from client.types import TopicPartition
from protocol.errors import ErrorCode

__all__ = ["Outcome", "TransactionManager", "TransactionState", "outcome_of"]

E = ErrorCode


class TransactionState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING_TRANSACTION = "committing"
    ABORTING_TRANSACTION = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


S = TransactionState

# target -> the states it may be reached from (Java's State.isTransitionValid)
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION,
                                  S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(TransactionState),
}


class Outcome(enum.Enum):
    DONE = "done"
    RETRY = "retry"  # after the backoff, to the same coordinator
    REFIND = "refind"  # look the coordinator up again, then retry
    ABORTABLE = "abortable"  # the transaction must be aborted
    FATAL = "fatal"  # the producer must be closed


# What Java's TransactionManager handlers do with each code (InitProducerIdHandler,
# AddPartitionsToTxnHandler, AddOffsetsToTxnHandler, TxnOffsetCommitHandler,
# EndTxnHandler): where a code is not named, it is fatal for the transaction coordinator's
# requests and abortable for TxnOffsetCommit's group coordinator.
_REFIND = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.REQUEST_TIMED_OUT,
                     E.NETWORK_EXCEPTION})
_RETRY = frozenset({E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS})
_FENCED = frozenset({E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH})
_ABORTABLE: dict[str, frozenset[ErrorCode]] = {
    "InitProducerId": frozenset(),
    "AddPartitionsToTxn": frozenset({E.TOPIC_AUTHORIZATION_FAILED, E.OPERATION_NOT_ATTEMPTED,
                                     E.UNKNOWN_PRODUCER_ID, E.TRANSACTION_ABORTABLE}),
    "AddOffsetsToTxn": frozenset({E.GROUP_AUTHORIZATION_FAILED, E.UNKNOWN_PRODUCER_ID,
                                  E.TRANSACTION_ABORTABLE}),
    "EndTxn": frozenset({E.UNKNOWN_PRODUCER_ID}),
}
_GROUP_RETRY = frozenset({E.COORDINATOR_LOAD_IN_PROGRESS, E.UNKNOWN_TOPIC_OR_PARTITION})
_GROUP_FATAL = frozenset({E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.INVALID_PRODUCER_EPOCH,
                          E.PRODUCER_FENCED, E.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                          E.UNSUPPORTED_VERSION})


def outcome_of(api: str, code: ErrorCode) -> Outcome:
    """What the transactional producer does with `code` in answer to `api`
    ("InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
    "TxnOffsetCommit")."""
    if code is E.NONE:
        return Outcome.DONE
    if code in _REFIND:
        return Outcome.REFIND
    if api == "TxnOffsetCommit":  # the group's coordinator
        if code in _GROUP_RETRY:
            return Outcome.RETRY
        return Outcome.FATAL if code in _GROUP_FATAL else Outcome.ABORTABLE
    if code in _RETRY or (api == "AddPartitionsToTxn" and code is E.UNKNOWN_TOPIC_OR_PARTITION):
        return Outcome.RETRY
    if code in _ABORTABLE[api]:
        return Outcome.ABORTABLE
    return Outcome.FATAL  # fenced, not authorized, INVALID_TXN_STATE, anything unexpected


def error_for(api: str, code: ErrorCode, message: str | None = None) -> KafkaError:
    """The exception the application sees for `code` from `api`: INVALID_PRODUCER_EPOCH
    from a transactional request is PRODUCER_FENCED (as Java: an older coordinator's
    name for it), an out-of-generation TxnOffsetCommit a CommitFailedError."""
    text = f"{api}: {message}" if message else api
    if code in _FENCED:
        return for_code(E.PRODUCER_FENCED, f"{text} ({code.name}): a newer producer with "
                                           "this transactional id has started")
    if api == "TxnOffsetCommit" and code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
        return CommitFailedError(f"{text}: the consumer group metadata sent with the offsets "
                                 f"is not the group's current generation ({code.name})", code)
    return for_code(code, text)


class TransactionManager:
    """The state of one transactional id's transactions (module docstring)."""

    def __init__(self, transactional_id: str):
        self.transactional_id = transactional_id
        self.state = S.UNINITIALIZED
        self.last_error: KafkaError | None = None
        # whether the coordinator knows of the transaction (a partition or a group's offsets
        # were added): only then is there anything for EndTxn to end
        self.started = False
        self.epoch_bump_required = False
        self.partitions: set[TopicPartition] = set()  # added: their batches may be sent
        self.new_partitions: set[TopicPartition] = set()  # to add in the next request
        self.pending_partitions: set[TopicPartition] = set()  # in AddPartitionsToTxn now

    def __repr__(self) -> str:
        return (f"<TransactionManager {self.transactional_id!r} {self.state.value}"
                f"{f' ({self.last_error})' if self.last_error is not None else ''}>")

    # -- transitions -------------------------------------------------------------------

    def _transition(self, target: TransactionState, error: KafkaError | None = None) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateError(
                f"transactional id {self.transactional_id!r}: cannot go from "
                f"{self.state.value} to {target.value}")
        self.state = target
        if target in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
            assert error is not None
            self.last_error = error
        else:
            self.last_error = None

    def maybe_fail(self) -> None:
        """Raise what the transaction's error state says, if it is in one: the fatal
        error (a fresh copy), or TransactionAbortableError caused by the failure."""
        error = self.last_error
        if self.state is S.FATAL_ERROR and error is not None:
            raise error.clone()
        if self.state is S.ABORTABLE_ERROR and error is not None:
            raise self.abortable_exception()

    def abortable_exception(self) -> KafkaError:
        error = for_code(E.TRANSACTION_ABORTABLE,
                         f"transactional id {self.transactional_id!r}: the transaction must be "
                         f"aborted (abort_transaction()) after: {self.last_error}")
        error.__cause__ = self.last_error
        return error

    def begin_init(self) -> None:
        self._transition(S.INITIALIZING)

    def initialized(self) -> None:
        """InitProducerId answered with the producer id and epoch."""
        self._transition(S.READY)
        self.epoch_bump_required = False

    def begin(self) -> None:
        self.maybe_fail()
        if self.state is S.IN_TRANSACTION:
            raise IllegalStateError(f"transactional id {self.transactional_id!r}: a "
                                    "transaction is already open (begin_transaction twice)")
        if self.state is S.INITIALIZING and self.epoch_bump_required:
            raise IllegalStateError(f"transactional id {self.transactional_id!r}: the last "
                                    "abort did not get its new epoch: call "
                                    "abort_transaction() again")
        if self.state is not S.READY:
            raise IllegalStateError(f"transactional id {self.transactional_id!r}: cannot "
                                    f"begin a transaction while {self.state.value}")
        self._transition(S.IN_TRANSACTION)

    def check_send(self) -> None:
        """Java's failIfNotReadyForSend: records go only inside an open transaction."""
        self.maybe_fail()
        if self.state is not S.IN_TRANSACTION:
            raise IllegalStateError(
                f"transactional id {self.transactional_id!r}: cannot send while "
                f"{self.state.value}" + (" (call begin_transaction() first)"
                                         if self.state is S.READY else ""))

    def begin_commit(self) -> bool:
        """Start committing; True when resuming a commit that was interrupted (a timeout,
        a cancellation), which goes on where it stopped."""
        if self.state is S.COMMITTING_TRANSACTION:
            return True
        self.maybe_fail()
        if self.state is not S.IN_TRANSACTION:
            raise IllegalStateError(f"transactional id {self.transactional_id!r}: no "
                                    f"transaction to commit ({self.state.value})")
        self._transition(S.COMMITTING_TRANSACTION)
        return False

    def begin_abort(self) -> bool:
        """Start aborting (from an open transaction or an abortable error); True when
        resuming an interrupted abort."""
        if self.state is S.ABORTING_TRANSACTION:
            return True
        if self.state is not S.ABORTABLE_ERROR:
            self.maybe_fail()
        if self.state not in (S.IN_TRANSACTION, S.ABORTABLE_ERROR):
            raise IllegalStateError(f"transactional id {self.transactional_id!r}: no "
                                    f"transaction to abort ({self.state.value})")
        self._transition(S.ABORTING_TRANSACTION)
        self.new_partitions.clear()
        return False

    def complete(self) -> None:
        """EndTxn answered (or there was nothing to end): READY, or INITIALIZING when the
        epoch must be bumped first (Java's completeTransaction)."""
        self._transition(S.INITIALIZING if self.epoch_bump_required else S.READY)
        self.started = False
        self.partitions.clear()
        self.new_partitions.clear()
        self.pending_partitions.clear()

    def abortable_error(self, error: KafkaError) -> None:
        """A record or request of the transaction failed: only abort may follow. The
        first failure is kept as the cause (the later ones follow from it); while
        aborting, or after a fatal error, nothing changes."""
        if isinstance(error, FatalTransactionError):
            self.fatal_error(error)
            return
        if self.state is S.ABORTABLE_ERROR or self.state not in _VALID_PREVIOUS[
                S.ABORTABLE_ERROR]:
            return
        self._transition(S.ABORTABLE_ERROR, error)
        self.new_partitions.clear()
        self.pending_partitions.clear()

    def fatal_error(self, error: KafkaError) -> None:
        if self.state is S.FATAL_ERROR:
            return
        self._transition(S.FATAL_ERROR, error)
        self.new_partitions.clear()
        self.pending_partitions.clear()

    def record_failed(self, error: BaseException) -> None:
        """A record of the transaction was not delivered (Java's
        maybeTransitionToErrorState): fatal for a FatalTransactionError, else the
        transaction must be aborted. (Whether the epoch must be bumped before the next
        one, a partition's sequence having a gap, is the accumulator's to say.)"""
        if not isinstance(error, KafkaError):
            error = KafkaError(E.UNKNOWN_SERVER_ERROR, repr(error))
        self.abortable_error(error)

    # -- partitions --------------------------------------------------------------------

    @property
    def has_error(self) -> bool:
        return self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR)

    @property
    def dropping(self) -> bool:
        """Whether queued records are to be failed rather than sent: the transaction is
        being aborted or can only be aborted, or the producer is fenced."""
        return self.state in (S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION, S.FATAL_ERROR)

    def drop_error(self) -> KafkaError:
        """What a record dropped unsent while `dropping` fails with: the fatal error, the
        TransactionAbortableError caused by the first failure, or TransactionAbortedError
        (aborted by the application)."""
        if self.state is S.FATAL_ERROR and self.last_error is not None:
            return self.last_error
        if self.state is S.ABORTABLE_ERROR and self.last_error is not None:
            return self.abortable_exception()
        return TransactionAbortedError()

    @property
    def may_add(self) -> bool:
        """Whether partitions may be added now (the transaction is open or committing)."""
        return self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION)

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        if tp not in self.partitions and tp not in self.pending_partitions:
            self.new_partitions.add(tp)

    def take_partitions_to_add(self) -> list[TopicPartition]:
        """The partitions for the next AddPartitionsToTxn (those waiting, and those whose
        request is to be sent again), now pending."""
        self.pending_partitions |= self.new_partitions
        self.new_partitions.clear()
        return sorted(self.pending_partitions)

    def partitions_added(self, tps: Iterable[TopicPartition]) -> None:
        tps = set(tps)
        self.pending_partitions -= tps
        self.partitions |= tps
        self.started = True

    def offsets_added(self) -> None:
        """AddOffsetsToTxn answered: the group's offsets partition is in the transaction."""
        self.started = True

    def is_send_allowed(self, tp: TopicPartition) -> bool:
        return self.state is not S.FATAL_ERROR and tp in self.partitions

    @property
    def has_partitions_to_add(self) -> bool:
        return bool(self.new_partitions)
