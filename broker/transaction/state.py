"""One transactional id's transaction, and the states it moves through.

Owns: `TransactionState` with its legal transitions declared as data
(`VALID_PREVIOUS_STATES`, as Kafka's TransactionState declares them), `TransactionResult`,
`TxnTransitMetadata` (the target of one transition) and `TransactionMetadata` (Kafka's
TransactionMetadata: what the coordinator keeps per transactional id). Pure: no clock, no I/O.

A transition is two steps, as in Kafka. A `prepare_*` method checks that the transition is
legal and returns the transit, setting the metadata's pending state, which refuses any other
transition until this one ends; nothing else changes. The transit is written to
__transaction_state; when its record is replayed, `complete_transition` applies it (and
checks it again). An append that fails ends it with `abort_pending`. An illegal transition
raises `IllegalTransactionTransition`: the coordinator checks requests before it prepares
anything, so one reaching here is always a coordinator bug.

The states (Kafka's names; ids are what the log's TransactionStatus stores):

- EMPTY: no transaction open. InitProducerId lands here (epoch bumped or a new producer id).
  -> ONGOING when a partition (or a group's offsets) is added.
- ONGOING: partitions were added. -> PREPARE_COMMIT / PREPARE_ABORT on EndTxn;
  -> PREPARE_EPOCH_FENCE when a new producer or the timeout fences it.
- PREPARE_COMMIT, PREPARE_ABORT: the decision is in the log; markers are being written to
  the transaction's partitions. -> COMPLETE_COMMIT / COMPLETE_ABORT once they all are.
- COMPLETE_COMMIT, COMPLETE_ABORT: done; the partitions are forgotten. -> EMPTY on
  InitProducerId, ONGOING on the next transaction's first partition.
- DEAD: the transactional id expired; its tombstone is on the way. Never left.
- PREPARE_EPOCH_FENCE: the epoch is being bumped to fence the producer before an abort.
  Never written: it is at once replaced by the PREPARE_ABORT it leads to.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

NO_PRODUCER_ID = -1  # Kafka's RecordBatch.NO_PRODUCER_ID
NO_PRODUCER_EPOCH = -1  # RecordBatch.NO_PRODUCER_EPOCH
MAX_EPOCH = 32767  # Short.MaxValue

TopicPartition = tuple[str, int]


class IllegalTransactionTransition(Exception):
    """A transition the state diagram (or Kafka's completion checks) forbids: a bug."""


class TransactionState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        """TransactionLogValue's TransactionStatus."""
        return _IDS[self]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for state, i in _IDS.items():
            if i == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @property
    def is_expiration_allowed(self) -> bool:
        """Whether transactional.id.expiration.ms may remove an id idle in this state."""
        return self in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)


S = TransactionState
_IDS = {S.EMPTY: 0, S.ONGOING: 1, S.PREPARE_COMMIT: 2, S.PREPARE_ABORT: 3,
        S.COMPLETE_COMMIT: 4, S.COMPLETE_ABORT: 5, S.DEAD: 6, S.PREPARE_EPOCH_FENCE: 7}

VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class TransactionResult(enum.Enum):
    """What EndTxn asks for, and the kind of marker written (WriteTxnMarkers' Committed)."""
    ABORT = False
    COMMIT = True

    @property
    def prepare_state(self) -> TransactionState:
        return S.PREPARE_COMMIT if self is TransactionResult.COMMIT else S.PREPARE_ABORT

    @property
    def complete_state(self) -> TransactionState:
        return S.COMPLETE_COMMIT if self is TransactionResult.COMMIT else S.COMPLETE_ABORT


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka keeps Short.MaxValue back, so that a producer can always be fenced by one bump."""
    return producer_epoch >= MAX_EPOCH - 1


@dataclass(frozen=True)
class TxnTransitMetadata:
    """The metadata one transition leads to: what its record says, plus the last epoch
    (which the log does not keep) and the state.

    `previous_producer_id` is what the metadata's will be after the transition (Kafka's
    transit always carries the current id there and applies it only for EMPTY; the result
    is the same)."""
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(eq=False)
class TransactionMetadata:
    """What the coordinator keeps about one transactional id (Kafka's TransactionMetadata)."""
    transactional_id: str
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: TransactionState = S.EMPTY
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    # the transition prepared and not yet replayed (or failed); never in the log
    pending: TxnTransitMetadata | None = None

    @property
    def pending_state(self) -> TransactionState | None:
        return self.pending.txn_state if self.pending is not None else None

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT)

    # -- prepare ------------------------------------------------------------------------------

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """A bump that fences the current producer before its transaction is aborted. The
        epoch is never handed to a client: the abort that follows is written with it."""
        if self.producer_epoch == MAX_EPOCH:
            raise IllegalTransactionTransition(
                f"{self.transactional_id!r}: cannot fence epoch {MAX_EPOCH}, it would overflow")
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, self.producer_epoch + 1,
                             NO_PRODUCER_EPOCH, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_increment_producer_epoch(self, new_txn_timeout_ms: int,
                                         expected_producer_epoch: int | None,
                                         now_ms: int) -> TxnTransitMetadata | None:
        """InitProducerId on an id that has no transaction open: the next epoch, or None when
        the expected epoch says the caller has been fenced (PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransactionTransition(
                f"{self.transactional_id!r}: no epochs left for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            # a new producer instance: a retry of an older call can no longer match
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or \
                expected_producer_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch  # KIP-360: the producer goes on
        elif expected_producer_epoch == self.last_producer_epoch:
            # a retry of a bump that succeeded but whose answer was lost: the same answer
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(S.EMPTY, self.producer_id, epoch, last, new_txn_timeout_ms,
                             frozenset(), -1, now_ms, previous_producer_id=self.producer_id)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_txn_timeout_ms: int,
                                     now_ms: int, record_last_epoch: bool) -> TxnTransitMetadata:
        """The epochs of the current producer id are exhausted: a new id, epoch 0."""
        if self.has_pending_transaction:
            raise IllegalTransactionTransition(
                f"{self.transactional_id!r}: cannot rotate producer ids with a transaction open")
        return self._prepare(S.EMPTY, new_producer_id, 0,
                             self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             new_txn_timeout_ms, frozenset(), -1, now_ms,
                             previous_producer_id=self.producer_id)

    def prepare_add_partitions(self, added: frozenset[TopicPartition] | set[TopicPartition],
                               now_ms: int) -> TxnTransitMetadata:
        # the transaction starts with its first partition
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) \
            else self.txn_start_timestamp
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms,
                             frozenset(self.topic_partitions | set(added)), start, now_ms)

    def prepare_abort_or_commit(self, new_state: TransactionState,
                                now_ms: int) -> TxnTransitMetadata:
        """EndTxn (transactions V1: the epoch stays)."""
        if new_state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransactionTransition(f"EndTxn cannot lead to {new_state.value}")
        return self._prepare(new_state, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), self.txn_start_timestamp, now_ms)

    def prepare_fenced_abort(self, now_ms: int) -> TxnTransitMetadata:
        """Fence the producer and abort its transaction: PREPARE_EPOCH_FENCE, at once
        replaced by the PREPARE_ABORT written with the bumped epoch (as Kafka's
        endTransaction does when it finds the fence pending)."""
        fence = self.prepare_fence_producer_epoch()
        self.pending = None
        return self._prepare(S.PREPARE_ABORT, self.producer_id, fence.producer_epoch,
                             NO_PRODUCER_EPOCH, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), self.txn_start_timestamp, now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """Every marker is written: the transaction is over and its partitions forgotten."""
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransactionTransition(
                f"{self.transactional_id!r}: cannot complete from {self.state.value}")
        new_state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        # Kafka records the epoch that ended the transaction as the last one
        return self._prepare(new_state, self.producer_id, self.producer_epoch,
                             self.producer_epoch, self.txn_timeout_ms, frozenset(),
                             self.txn_start_timestamp, now_ms)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms, frozenset(),
                             self.txn_start_timestamp, self.txn_last_update_timestamp)

    def _prepare(self, state: TransactionState, producer_id: int, epoch: int, last_epoch: int,
                 txn_timeout_ms: int, partitions: frozenset[TopicPartition], start_ms: int,
                 update_ms: int, previous_producer_id: int | None = None) -> TxnTransitMetadata:
        if self.pending is not None:
            raise IllegalTransactionTransition(
                f"{self.transactional_id!r}: preparing {state.value} while "
                f"{self.pending.txn_state.value} is pending")
        if producer_id < 0:
            raise IllegalTransactionTransition(f"illegal new producer id {producer_id}")
        if state != S.DEAD and epoch < 0:
            raise IllegalTransactionTransition(f"illegal new producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransactionTransition(
                f"{self.transactional_id!r}: {self.state.value} -> {state.value} is illegal")
        self.pending = TxnTransitMetadata(
            producer_id,
            self.previous_producer_id if previous_producer_id is None else previous_producer_id,
            NO_PRODUCER_ID, epoch, last_epoch, txn_timeout_ms, state, partitions, start_ms,
            update_ms)
        return self.pending

    # -- complete ------------------------------------------------------------------------------

    def abort_pending(self) -> None:
        """The transit's record could not be written: nothing changed after all."""
        self.pending = None

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """Apply a prepared transit once its record is replayed, with Kafka's checks of
        completeTransitionTo: the transit is the one pending, epochs move only as the
        transition allows, an Ongoing transaction's partitions only grow, time never goes
        back."""
        if self.pending is None or self.pending != transit:
            self._refuse(transit, "it is not the pending transition")
        to = transit.txn_state
        same_producer = (transit.producer_id == self.producer_id
                         and transit.producer_epoch == self.producer_epoch)
        if transit.txn_last_update_timestamp < self.txn_last_update_timestamp:
            self._refuse(transit, "the update time goes back")
        if to == S.EMPTY:
            bumped = (transit.producer_epoch == self.producer_epoch + 1
                      or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id))
            retry = same_producer  # a retry of the last bump answers the same epoch
            if not (bumped or retry) or transit.topic_partitions or \
                    transit.txn_start_timestamp != -1:
                self._refuse(transit, "not an epoch bump of an empty transaction")
        elif to == S.ONGOING:
            if not same_producer or not self.topic_partitions <= transit.topic_partitions or \
                    transit.txn_timeout_ms != self.txn_timeout_ms:
                self._refuse(transit, "partitions must only grow under the same producer")
        elif to in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            # only an abort may bump the epoch, by one: the fence's
            fenced = (to == S.PREPARE_ABORT and transit.producer_id == self.producer_id
                      and transit.producer_epoch == self.producer_epoch + 1)
            if not (same_producer or fenced) or \
                    transit.topic_partitions != frozenset(self.topic_partitions) or \
                    transit.txn_timeout_ms != self.txn_timeout_ms or \
                    transit.txn_start_timestamp != self.txn_start_timestamp:
                self._refuse(transit, "the decision must be on the transaction as it stands")
        elif to in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if not same_producer or transit.txn_timeout_ms != self.txn_timeout_ms or \
                    transit.txn_start_timestamp == -1:
                self._refuse(transit, "completion of another transaction")
        else:
            # PREPARE_EPOCH_FENCE is always replaced before it is written; DEAD ends in a
            # tombstone, which removes the metadata rather than completing a transition
            self._refuse(transit, f"{to.value} is never completed")
        self._apply(transit)

    def _apply(self, transit: TxnTransitMetadata) -> None:
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.next_producer_id = transit.next_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.txn_state
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending = None

    def _refuse(self, transit: TxnTransitMetadata, why: str) -> None:
        raise IllegalTransactionTransition(
            f"{self.transactional_id!r} ({self.state.value}, producer {self.producer_id} epoch "
            f"{self.producer_epoch}) cannot complete {transit}: {why}")
