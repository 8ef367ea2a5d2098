"""The transaction coordinator of one broker: transactional ids, their producers and their
transactions, without I/O.

Owns: `TransactionConfig` (Kafka's settings, names and defaults) and
`TransactionCoordinator`, the pure facade a transaction runtime will host as
broker.coordinator.runtime hosts the GroupCoordinator. It follows Kafka's
TransactionCoordinator and TransactionStateManager (transactions V1: the epoch changes on
InitProducerId and on fencing, not on every EndTxn):

- InitProducerId: a new transactional id gets a producer id from the injected allocator;
  a known one gets its epoch bumped (KIP-360's expected id and epoch, a retry answered the
  same), or a new producer id once the epochs run out. A transaction left open by the
  previous producer is aborted first under a bumped epoch, which fences that producer, and
  the caller is told CONCURRENT_TRANSACTIONS to retry once the abort is complete.
- AddPartitionsToTxn, AddOffsetsToTxn (the group's __consumer_offsets partition), and
  KIP-890's verification of a partition by its leader (`verify_partitions`).
- EndTxn: PrepareCommit or PrepareAbort is written, the answer sent, the markers written
  (an effect for the runtime), and CompleteCommit or CompleteAbort written once they all
  are (`markers_written`).
- Time: transactions open past their timeout are aborted with an epoch bump
  (`abort_timed_out`), ids idle past transactional.id.expiration.ms are removed (`expire`);
  `tick` runs both on their intervals.

Records, then replay (docs/ARCHITECTURE.md §5): an operation prepares a transition (the
metadata's pending state refuses others meanwhile) and returns the record as an `Append`;
the state changes only when `replay` applies that record. Loading a __transaction_state
partition is the same replay over its records, which rebuilds the same metadata (but for
the last producer epoch, which Kafka's record does not keep). Two things are in memory
only, as in Kafka: the pending transition, and the placeholder metadata (epoch -1) of a
new transactional id, created with its producer id before its first record is written so
that a retry after a failed append reuses the id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from broker.coordinator.effects import Reply
from broker.coordinator.offsets import partition_of
from broker.transaction.effects import Append, TxnEffect, WriteTxnMarkers
from broker.transaction.records import TransactionLogValue, matches, metadata_from, value_of
from broker.transaction.state import (
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, IllegalTransactionTransition, TopicPartition,
    TransactionMetadata, TransactionResult, TransactionState, TxnTransitMetadata,
    is_epoch_exhausted,
)
from protocol.errors import ErrorCode

E = ErrorCode
S = TransactionState
OFFSETS_TOPIC = "__consumer_offsets"

# The request versions before which a client knows PRODUCER_FENCED only as
# INVALID_PRODUCER_EPOCH (KafkaApis downgrades it): InitProducerId, AddPartitionsToTxn,
# AddOffsetsToTxn, EndTxn by api key.
_PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}


# The request versions from which a client knows TRANSACTION_ABORTABLE (KIP-890): Produce
# and TxnOffsetCommit, the two requests whose partitions a leader verifies.
_TRANSACTION_ABORTABLE_SINCE = {0: 11, 28: 4}


def error_for_version(error: ErrorCode, api_key: int, version: int) -> ErrorCode:
    if error == E.PRODUCER_FENCED and version < _PRODUCER_FENCED_SINCE.get(api_key, 0):
        return E.INVALID_PRODUCER_EPOCH
    return error


def verification_error_for_version(error: ErrorCode, api_key: int, version: int) -> ErrorCode:
    """What a partition leader answers a Produce or TxnOffsetCommit whose partition
    `verify_partitions` did not verify, as Kafka's AddPartitionsToTxnManager maps it: a
    fenced producer hears INVALID_PRODUCER_EPOCH (what producers expect there, whatever
    the version), and a client too old for TRANSACTION_ABORTABLE hears INVALID_TXN_STATE."""
    if error == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if error == E.TRANSACTION_ABORTABLE and version < _TRANSACTION_ABORTABLE_SINCE[api_key]:
        return E.INVALID_TXN_STATE
    return error


@dataclass(frozen=True)
class TransactionConfig:
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    num_partitions: int = 50  # transaction.state.log.num.partitions
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions, for AddOffsetsToTxn


def _init_body(error: ErrorCode, producer_id: int = NO_PRODUCER_ID,
               producer_epoch: int = NO_PRODUCER_EPOCH) -> dict:
    return {"error_code": error, "producer_id": producer_id, "producer_epoch": producer_epoch}


_end_body = _init_body  # EndTxn v5 answers the producer id and epoch too


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig = TransactionConfig(),
                 allocate_producer_id: Callable[[], int | None] = lambda: None):
        self.config = config
        # a new producer id, or None while none is at hand (the runtime fetches blocks from
        # the controller ahead of need; Kafka answers COORDINATOR_LOAD_IN_PROGRESS meanwhile)
        self.allocate_producer_id = allocate_producer_id
        self.transactions: dict[str, TransactionMetadata] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.coordinator_epochs: dict[int, int] = {}  # partition -> its leader epoch here
        self._next_abort_ms: int | None = None
        self._next_expiry_ms: int | None = None

    # -- routing ------------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_of(transactional_id, self.config.num_partitions)

    def check(self, transactional_id: str) -> ErrorCode:
        partition = self.partition_for(transactional_id)
        if partition in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned:
            return E.NOT_COORDINATOR
        return E.NONE

    def _coordinator_epoch(self, transactional_id: str) -> int:
        return self.coordinator_epochs.get(self.partition_for(transactional_id), 0)

    # -- InitProducerId ------------------------------------------------------------------------

    def handle_init_producer_id(self, waiter: Any, transactional_id: str | None,
                                transaction_timeout_ms: int, producer_id: int,
                                producer_epoch: int, now_ms: int) -> list[TxnEffect]:
        def reply(error: ErrorCode) -> list[TxnEffect]:
            return [Reply(waiter, _init_body(error))]

        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return reply(E.INVALID_REQUEST)  # one of the two without the other
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        if transactional_id is None:
            # an idempotent producer: a new producer id, no state kept here
            new_id = self.allocate_producer_id()
            if new_id is None:
                return reply(E.COORDINATOR_LOAD_IN_PROGRESS)
            return [Reply(waiter, _init_body(E.NONE, new_id, 0))]
        if transactional_id == "":
            return reply(E.INVALID_REQUEST)
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return reply(E.INVALID_TRANSACTION_TIMEOUT)
        error = self.check(transactional_id)
        if error != E.NONE:
            return reply(error)
        md = self.transactions.get(transactional_id)
        if md is None:
            new_id = self.allocate_producer_id()
            if new_id is None:
                return reply(E.COORDINATOR_LOAD_IN_PROGRESS)
            md = self.transactions[transactional_id] = TransactionMetadata(
                transactional_id, new_id, txn_timeout_ms=transaction_timeout_ms,
                txn_last_update_timestamp=now_ms)
        if md.pending_transition_in_progress:
            return reply(E.CONCURRENT_TRANSACTIONS)
        if expected is not None and not self._is_valid_producer_id(md, *expected):
            return reply(E.PRODUCER_FENCED)
        if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return reply(E.CONCURRENT_TRANSACTIONS)
        if md.state == S.ONGOING:
            # abort the previous producer's transaction under a bumped epoch, which fences
            # it; that epoch is never handed out: the caller retries and bumps again
            return self._fence_and_abort(md, now_ms, Reply(waiter, _init_body(
                E.CONCURRENT_TRANSACTIONS)))
        if md.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            raise IllegalTransactionTransition(
                f"{transactional_id!r} found in {md.state.value}, which is never kept")
        transit: TxnTransitMetadata | None
        if md.is_producer_epoch_exhausted and (expected is None or
                                               expected[1] == md.producer_epoch):
            new_id = self.allocate_producer_id()
            if new_id is None:
                return reply(E.COORDINATOR_LOAD_IN_PROGRESS)
            transit = md.prepare_producer_id_rotation(new_id, transaction_timeout_ms, now_ms,
                                                      record_last_epoch=expected is not None)
        else:
            transit = md.prepare_increment_producer_epoch(
                transaction_timeout_ms, expected[1] if expected is not None else None, now_ms)
            if transit is None:
                return reply(E.PRODUCER_FENCED)
        return [Append(transactional_id, value_of(transit)),
                Reply(waiter, _init_body(E.NONE, transit.producer_id, transit.producer_epoch))]

    @staticmethod
    def _is_valid_producer_id(md: TransactionMetadata, producer_id: int, epoch: int) -> bool:
        """Whether a request naming its producer id and epoch may go on (its epoch is checked
        next): the id is new here (the producer recovers from UNKNOWN_PRODUCER_ID), it is the
        current id, or it is the previous one with its epochs exhausted (a retry of the
        rotation whose answer was lost)."""
        return (md.producer_epoch == NO_PRODUCER_EPOCH or producer_id == md.producer_id
                or (producer_id == md.previous_producer_id and is_epoch_exhausted(epoch)))

    # -- AddPartitionsToTxn, AddOffsetsToTxn, verification --------------------------------------

    def _producer_error(self, transactional_id: str | None, producer_id: int,
                        producer_epoch: int) -> ErrorCode:
        """The checks every request of an initialised producer passes first, in Kafka's
        order."""
        if not transactional_id:
            return E.INVALID_REQUEST
        error = self.check(transactional_id)
        if error != E.NONE:
            return error
        md = self.transactions.get(transactional_id)
        if md is None or md.producer_id != producer_id or md.producer_epoch == NO_PRODUCER_EPOCH:
            # no producer id was handed out for it yet, or another one was
            return E.INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED
        return E.NONE

    def handle_add_partitions(self, waiter: Any, transactional_id: str, producer_id: int,
                              producer_epoch: int, partitions: Iterable[TopicPartition],
                              now_ms: int) -> list[TxnEffect]:
        """AddPartitionsToTxn (and AddOffsetsToTxn's one partition): one error for all."""
        added = frozenset(partitions)
        error = self._producer_error(transactional_id, producer_id, producer_epoch)
        if error != E.NONE:
            return [Reply(waiter, {"error_code": error})]
        md = self.transactions[transactional_id]
        if md.pending_transition_in_progress or md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return [Reply(waiter, {"error_code": E.CONCURRENT_TRANSACTIONS})]
        if md.state == S.ONGOING and added <= md.topic_partitions:
            return [Reply(waiter, {"error_code": E.NONE})]  # nothing new to write
        transit = md.prepare_add_partitions(added, now_ms)
        return [Append(transactional_id, value_of(transit)),
                Reply(waiter, {"error_code": E.NONE})]

    def handle_add_offsets(self, waiter: Any, transactional_id: str, producer_id: int,
                           producer_epoch: int, group_id: str, now_ms: int) -> list[TxnEffect]:
        """AddOffsetsToTxn: the group's __consumer_offsets partition joins the transaction,
        so that its TxnOffsetCommits get the transaction's marker."""
        partition = (OFFSETS_TOPIC, partition_of(group_id, self.config.offsets_topic_num_partitions))
        return self.handle_add_partitions(waiter, transactional_id, producer_id, producer_epoch,
                                          [partition], now_ms)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 part 1 (AddPartitionsToTxn with VerifyOnly): whether each partition is in
        the ongoing transaction of this producer id and epoch, asked by a partition leader
        before it appends a transactional batch. Reads only: the pending state is not
        consulted, as in Kafka (partitions join the metadata when their record is replayed
        and leave it when the transaction completes). A partition not in the transaction is
        TRANSACTION_ABORTABLE, as from Kafka 3.8 (3.6 answered INVALID_TXN_STATE): the
        leader turns it back into INVALID_TXN_STATE for a client that does not know it
        (`verification_error_for_version`)."""
        wanted = list(partitions)
        error = self._producer_error(transactional_id, producer_id, producer_epoch)
        if error == E.NONE and self.transactions[transactional_id].state in (S.PREPARE_COMMIT,
                                                                             S.PREPARE_ABORT):
            error = E.CONCURRENT_TRANSACTIONS
        if error != E.NONE:
            return {tp: error for tp in wanted}
        md = self.transactions[transactional_id]
        return {tp: E.NONE if tp in md.topic_partitions else E.TRANSACTION_ABORTABLE
                for tp in wanted}

    # -- EndTxn and the markers -----------------------------------------------------------------

    def handle_end_txn(self, waiter: Any, transactional_id: str, producer_id: int,
                       producer_epoch: int, committed: bool, now_ms: int) -> list[TxnEffect]:
        result = TransactionResult(committed)

        def reply(error: ErrorCode) -> list[TxnEffect]:
            return [Reply(waiter, _end_body(error))]

        error = self._producer_error(transactional_id, producer_id, producer_epoch)
        if error != E.NONE:
            return reply(error)
        md = self.transactions[transactional_id]
        if md.pending_transition_in_progress:
            return reply(E.CONCURRENT_TRANSACTIONS)
        if md.state == S.ONGOING:
            transit = md.prepare_abort_or_commit(result.prepare_state, now_ms)
            return [Append(transactional_id, value_of(transit)),
                    Reply(waiter, _end_body(E.NONE, transit.producer_id, transit.producer_epoch)),
                    self._markers(transactional_id, transit, result)]
        if md.state == result.complete_state:
            # a retry of an EndTxn that completed: the same answer
            return [Reply(waiter, _end_body(E.NONE, md.producer_id, md.producer_epoch))]
        if md.state == result.prepare_state:
            return reply(E.CONCURRENT_TRANSACTIONS)  # a retry while its markers are written
        # Empty, or the other decision than the one taken
        return reply(E.INVALID_TXN_STATE)

    def markers_written(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        result: TransactionResult, now_ms: int) -> list[TxnEffect]:
        """Every partition has the marker of a WriteTxnMarkers effect: the transaction
        completes. Markers of a transaction that is no longer the one prepared (the partition
        moved and came back, a duplicate report) change nothing."""
        md = self.transactions.get(transactional_id)
        if md is None or md.pending_transition_in_progress or md.state != result.prepare_state \
                or md.producer_id != producer_id or md.producer_epoch != producer_epoch:
            return []
        return [Append(transactional_id, value_of(md.prepare_complete(now_ms)))]

    def _markers(self, transactional_id: str, transit: TxnTransitMetadata,
                 result: TransactionResult) -> WriteTxnMarkers:
        return WriteTxnMarkers(transactional_id, transit.producer_id, transit.producer_epoch,
                               result, transit.topic_partitions,
                               self._coordinator_epoch(transactional_id))

    def _fence_and_abort(self, md: TransactionMetadata, now_ms: int,
                         *then: Reply) -> list[TxnEffect]:
        transit = md.prepare_fenced_abort(now_ms)
        return [Append(md.transactional_id, value_of(transit)), *then,
                self._markers(md.transactional_id, transit, TransactionResult.ABORT)]

    # -- time ---------------------------------------------------------------------------------

    def abort_timed_out(self, now_ms: int) -> list[TxnEffect]:
        """Abort every transaction open longer than its timeout, bumping the epoch so that
        its producer is fenced (its next request is PRODUCER_FENCED)."""
        out: list[TxnEffect] = []
        for transactional_id in sorted(self.transactions):
            md = self.transactions[transactional_id]
            if md.state == S.ONGOING and not md.pending_transition_in_progress and \
                    md.txn_start_timestamp + md.txn_timeout_ms < now_ms and \
                    self.check(transactional_id) == E.NONE:
                out += self._fence_and_abort(md, now_ms)
        return out

    def expire(self, now_ms: int) -> list[TxnEffect]:
        """Tombstones for transactional ids without a transaction that have not been used
        for transactional.id.expiration.ms."""
        out: list[TxnEffect] = []
        horizon = now_ms - self.config.transactional_id_expiration_ms
        for transactional_id in sorted(self.transactions):
            md = self.transactions[transactional_id]
            if md.pending_transition_in_progress or not md.state.is_expiration_allowed or \
                    md.txn_last_update_timestamp > horizon or \
                    self.check(transactional_id) != E.NONE:
                continue
            if md.producer_epoch == NO_PRODUCER_EPOCH:
                # a placeholder whose first record failed: nothing in the log to remove
                del self.transactions[transactional_id]
                continue
            md.prepare_dead()
            out.append(Append(transactional_id, None))
        return out

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self._next_abort_ms, self._next_expiry_ms) if d is not None]
        return min(deadlines) if deadlines else None

    def tick(self, now_ms: int) -> list[TxnEffect]:
        """Run the timeout abort and the expiry when each is due (the first tick schedules
        them), as Kafka's scheduler runs them at their intervals."""
        config = self.config
        out: list[TxnEffect] = []
        if self._next_abort_ms is None or self._next_expiry_ms is None:
            self._next_abort_ms = now_ms + config.abort_timed_out_transaction_cleanup_interval_ms
            self._next_expiry_ms = now_ms + config.remove_expired_transaction_cleanup_interval_ms
            return out
        if now_ms >= self._next_abort_ms:
            out += self.abort_timed_out(now_ms)
            self._next_abort_ms = now_ms + config.abort_timed_out_transaction_cleanup_interval_ms
        if now_ms >= self._next_expiry_ms:
            out += self.expire(now_ms)
            self._next_expiry_ms = now_ms + config.remove_expired_transaction_cleanup_interval_ms
        return out

    # -- records and replay -------------------------------------------------------------------

    def replay(self, transactional_id: str, value: TransactionLogValue | None,
               loading: bool = False) -> None:
        """Apply one __transaction_state record. A record this coordinator wrote completes
        the transition it prepared; while loading, a record is the id's state, and a
        tombstone removes it."""
        md = self.transactions.get(transactional_id)
        if loading:
            if value is None:
                self.transactions.pop(transactional_id, None)
            else:
                self.transactions[transactional_id] = metadata_from(transactional_id, value)
            return
        if md is None or md.pending is None:
            raise IllegalTransactionTransition(
                f"{transactional_id!r}: a record with no transition prepared: {value}")
        if value is None:
            if md.pending.txn_state != S.DEAD:
                raise IllegalTransactionTransition(
                    f"{transactional_id!r}: a tombstone while {md.pending.txn_state.value} is "
                    "pending")
            del self.transactions[transactional_id]
            return
        if not matches(value, md.pending):
            raise IllegalTransactionTransition(
                f"{transactional_id!r}: record {value} is not the pending {md.pending}")
        md.complete_transition(md.pending)

    def append_failed(self, transactional_id: str) -> None:
        """The record of the pending transition was not written: the transition is off
        (Kafka resets the pending state), and the metadata is what it was."""
        md = self.transactions.get(transactional_id)
        if md is not None:
            md.abort_pending()

    # -- leadership of __transaction_state partitions -------------------------------------------

    def begin_load(self, partition: int, coordinator_epoch: int) -> None:
        self.loading.add(partition)
        self.coordinator_epochs[partition] = coordinator_epoch

    def finish_load(self, partition: int) -> list[WriteTxnMarkers]:
        """Loaded: serve the partition's ids, and write again the markers of the
        transactions whose decision was taken and not yet completed."""
        self.loading.discard(partition)
        self.owned.add(partition)
        out: list[WriteTxnMarkers] = []
        for transactional_id in sorted(self.transactions):
            md = self.transactions[transactional_id]
            if self.partition_for(transactional_id) != partition:
                continue
            for result in TransactionResult:
                if md.state == result.prepare_state:
                    out.append(WriteTxnMarkers(
                        transactional_id, md.producer_id, md.producer_epoch, result,
                        frozenset(md.topic_partitions), self.coordinator_epochs[partition]))
        return out

    def unload(self, partition: int) -> None:
        """Another broker leads the partition now: its ids go (NOT_COORDINATOR from here)."""
        self.owned.discard(partition)
        self.loading.discard(partition)
        self.coordinator_epochs.pop(partition, None)
        for transactional_id in [t for t in self.transactions
                                 if self.partition_for(t) == partition]:
            del self.transactions[transactional_id]
