"""One partition this broker holds a replica of: its log, its leader epochs, its
replication state (leader or follower, ISR, high watermark) and its producer state, with
the transactions open in it and its last stable offset.

Owns: `Partition.append_batch` (the produce path as leader, after request validation:
idempotence and transaction checks, offset assignment, leader epoch, append; a write the
file system refuses answers KAFKA_STORAGE_ERROR and is reported to `on_storage_failure`,
the log directory's failure channel, broker/log_dirs.py), `append_control_batch` (a
transaction's COMMIT or ABORT marker, as WriteTxnMarkers asks), `last_stable_offset`,
`append_as_follower` (batches fetched from the leader, their offsets and epochs kept),
`truncate_to` (a follower whose log diverged), `read` through `log`, and the role changes
the metadata asks for (`make_leader`, `make_follower`, `update_isr`). The rules of the HW
and the ISR are broker.replication.state's; the leader epochs are
broker.replication.leader_epochs'; the producer and transaction rules
broker.producer_state's. Record batches stay opaque: only their 61-byte headers are read,
and the one record of a control batch (a marker).

Transactions follow Kafka's UnifiedLog: a marker that aborts a transaction is indexed in
the .txnindex of its segment with the LSO it leaves, then the transaction completes, and
it stays unstable until the HW passes the marker. The producer state survives a restart
through snapshots (broker/log/producer_snapshots.py) written at every roll: a start loads
the newest at or before the active segment and replays the log from there, which finds
the transactions still open wherever they began and re-indexes the aborted transactions of
segments whose .txnindex recovery could not vouch for (`LogSegment.txn_index_stale`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker.log.config import LogConfig
from broker.log.errors import KafkaStorageError, LogError
from broker.log.log import PartitionLog
from broker.log.producer_snapshots import (
    delete_snapshots, list_snapshots, read_snapshot, remove_unfinished, write_snapshot,
)
from broker.log.txn_index import AbortedTxn
from broker.producer_state import CorruptSnapshotError, ProducerStateManager, end_txn_marker_of
from broker.replication.leader_epochs import LeaderEpochCache
from broker.replication.state import FetchUpdate, PartitionState
from protocol.control_records import EndTransactionMarker, end_txn_marker_batch
from protocol.errors import ErrorCode
from protocol.record_errors import RecordError
from protocol.records import BatchHeader, iter_batch_headers, parse_batch_header

log = logging.getLogger("minibroker.partition")

# where a leader's batch comes from (Kafka's AppendOrigin)
CLIENT = "client"
COORDINATOR = "coordinator"


class StaleLeaderEpoch(Exception):
    """A leadership at an epoch the partition's log has already passed."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    last_offset: int = -1
    high_watermark_changed: bool = False


class Partition:
    def __init__(self, topic: str, index: int, log: PartitionLog, node_id: int,
                 epochs: LeaderEpochCache | None = None,
                 on_storage_failure: Callable[[str], object] | None = None):
        self.topic = topic
        self.index = index
        self.log = log
        self.node_id = node_id
        self.state = PartitionState(node_id,
                                    min_insync_replicas=log.config.min_insync_replicas)
        self.epochs = epochs if epochs is not None else LeaderEpochCache()
        self.producers = ProducerStateManager()
        self._verifications: dict[int, object] = {}  # producer id -> KIP-890 guard
        self.storage_failures = 0  # appends refused by the file system since the last success
        self.on_storage_failure = on_storage_failure  # told why, at each refused append
        # the copy of this replica being made in another log directory (AlterReplicaLogDirs,
        # broker/replication/alter_log_dirs.py), truncated with the log
        self.future_log: PartitionLog | None = None
        self._rebuild_producer_state()

    @property
    def is_leader(self) -> bool:
        return self.state.is_leader

    @property
    def leader_id(self) -> int:
        return self.state.leader_id  # as the metadata image says; -1 while offline

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.state.high_watermark

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr

    @property
    def partition_epoch_known(self) -> bool:
        """Whether this replica has had a registration yet (a first one changes nothing)."""
        return self.state.partition_epoch >= 0

    # -- roles, as the metadata image gives them ------------------------------------------

    def make_leader(self, *, leader_epoch: int, partition_epoch: int,
                    replicas: tuple[int, ...], isr: tuple[int, ...], now_ms: int) -> bool:
        """Lead from `leader_epoch` (Kafka's Partition.makeLeader): the epoch starts at the
        LEO in the epoch cache. Returns True when the HW moved.

        A leader epoch older than the latest in the log's epoch cache comes from a metadata
        image older than the log, which a live image never is: the controller only raises
        a partition's leader epoch, and every epoch in the cache was one of its. Such a
        leadership is refused (StaleLeaderEpoch) rather than taken, since leading at that
        epoch would cut the cache's history back to it and stamp new batches with it."""
        latest = self.epochs.latest_epoch
        if latest is not None and 0 <= leader_epoch < latest:
            raise StaleLeaderEpoch(f"{self.topic}-{self.index}: leader epoch {leader_epoch} "
                                   f"is older than epoch {latest} in the log")
        if leader_epoch >= 0 and leader_epoch != latest:
            self.epochs.assign(leader_epoch, self.log.log_end_offset)
        return self.state.become_leader(leader_epoch=leader_epoch,
                                        partition_epoch=partition_epoch, replicas=replicas,
                                        isr=isr, log_end_offset=self.log.log_end_offset,
                                        now_ms=now_ms)

    def make_follower(self, *, leader_id: int, leader_epoch: int, partition_epoch: int,
                      replicas: tuple[int, ...], isr: tuple[int, ...]) -> bool:
        """Follow `leader_id` (-1: no leader). Returns True when the leader or its epoch
        changed, so the fetcher must start over (with truncation) for this partition."""
        changed = (leader_id != self.state.leader_id or leader_epoch != self.state.leader_epoch)
        self.state.become_follower(leader_id=leader_id, leader_epoch=leader_epoch,
                                   partition_epoch=partition_epoch, replicas=replicas, isr=isr)
        return changed

    def update_isr(self, *, partition_epoch: int, replicas: tuple[int, ...],
                   isr: tuple[int, ...]) -> bool:
        return self.state.update_metadata(partition_epoch=partition_epoch, replicas=replicas,
                                          isr=isr, log_end_offset=self.log.log_end_offset)

    def follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                       broker_epoch: int = -1, log_start_offset: int = -1
                       ) -> FetchUpdate | None:
        return self.state.on_follower_fetch(replica_id, fetch_offset, self.log.log_end_offset,
                                            now_ms, broker_epoch, log_start_offset)

    # -- the log start offset (DeleteRecords) ---------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset forward to `offset` (never back): the records below
        are gone for every reader at once, their segments at the next retention pass.
        Returns the log start offset."""
        start = self.log.delete_records_before(offset)
        self.producers.on_log_start_offset_incremented(start)
        return start

    def follow_log_start_offset(self, leader_log_start_offset: int) -> bool:
        """A follower takes its leader's log start offset as far as its own high
        watermark (Kafka's follower does the same after each fetch); True when it moved."""
        target = min(leader_log_start_offset, self.high_watermark, self.log.log_end_offset)
        if target <= self.log.log_start_offset:
            return False
        self.delete_records_before(target)
        return True

    def under_min_isr(self) -> bool:
        """The ISR is below min.insync.replicas (capped at the replica count): acks=all
        is refused, and the HW does not advance."""
        return self.state.under_min_isr()

    def set_config(self, config: LogConfig) -> bool:
        """The topic's configs changed. Returns True when the HW moved (a lower
        min.insync.replicas may let it)."""
        self.log.config = config
        return self.state.set_min_insync_replicas(config.min_insync_replicas,
                                                  self.log.log_end_offset)

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: what a read_committed consumer may read up to, min(the first offset of
        the oldest transaction not yet decided or whose marker the HW has not passed, the
        HW) (Kafka's UnifiedLog.lastStableOffset). Derived from the HW each time it is
        read, so it follows every move of the HW, whichever path moved it."""
        hw = self.state.high_watermark
        producers = self.producers
        if not producers.ongoing_txns and not producers.unreplicated_txns:
            return hw
        producers.on_high_watermark_updated(hw)
        return producers.last_stable_offset(hw)

    # -- KIP-890 part 1: a transaction's first batch here, verified first ---------------

    def needs_verification(self, producer_id: int) -> bool:
        """Whether a transactional batch of this producer would open a transaction here
        (none is open), and so must be verified with its coordinator first."""
        entry = self.producers.producers.get(producer_id)
        return entry is None or entry.current_txn_first_offset is None

    def start_verification(self, producer_id: int) -> object:
        """The guard of a verification about to be asked for (Kafka's VerificationGuard):
        the append that follows must present it, and a marker written meanwhile for the
        producer withdraws it, so a verification answered for a transaction that has since
        ended cannot open a new, hanging one."""
        return self._verifications.setdefault(producer_id, object())

    def append_batch(self, batch: bytearray, header: BatchHeader, now_ms: int, *,
                     origin: str = CLIENT, verification: object | None = None) -> AppendResult:
        """A producer's batch, validated by the caller: the idempotence and transaction
        checks, then the append as leader. A transactional batch opens its producer's
        transaction here, which holds the LSO at its first offset until its marker.
        `origin=COORDINATOR` (Kafka's AppendOrigin.COORDINATOR: a group coordinator's
        transactional offset commit, with the producer's id and epoch) skips the sequence
        checks and de-duplication, keeping the epoch and transaction rules. `verification`,
        when given, is the guard of `start_verification` for a transaction's first batch
        here: withdrawn meanwhile, the batch is INVALID_TXN_STATE."""
        if (verification is not None and header.is_transactional
                and self.needs_verification(header.producer_id)
                and self._verifications.get(header.producer_id) is not verification):
            return AppendResult(ErrorCode.INVALID_TXN_STATE)
        return self._append_as_leader(batch, header, now_ms, verify_sequence=origin == CLIENT)

    def append_control_batch(self, producer_id: int, producer_epoch: int,
                             coordinator_epoch: int, commit: bool, now_ms: int) -> AppendResult:
        """Write the COMMIT or ABORT marker that ends this producer's transaction here
        (WriteTxnMarkers; Kafka's appendRecordsToLeader with AppendOrigin.COORDINATOR),
        as leader only (NOT_LEADER_OR_FOLLOWER otherwise). Refused with
        INVALID_PRODUCER_EPOCH for an epoch older than the producer's, and with
        TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than its last
        marker's. An ABORT is recorded in the .txnindex with the LSO of that moment; the
        transaction stays unstable until the HW passes the marker. A producer with no
        open transaction gets its marker too, completing nothing (as in Kafka)."""
        if not self.is_leader:
            return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        marker = EndTransactionMarker(commit, coordinator_epoch)
        batch = bytearray(end_txn_marker_batch(marker, producer_id=producer_id,
                                               producer_epoch=producer_epoch,
                                               timestamp_ms=now_ms))
        return self._append_as_leader(batch, parse_batch_header(batch), now_ms, marker)

    def _append_as_leader(self, batch: bytearray, header: BatchHeader, now_ms: int,
                          marker: EndTransactionMarker | None = None, *,
                          verify_sequence: bool = True) -> AppendResult:
        if header.producer_id >= 0:
            check = self.producers.check_batch(header, marker, verify_sequence=verify_sequence)
            if check.error != ErrorCode.NONE:
                return AppendResult(check.error)
            if check.duplicate is not None:
                return AppendResult(ErrorCode.NONE, check.duplicate.first_offset, -1,
                                    self.log.log_start_offset, check.duplicate.last_offset)
        try:
            # the epoch this leader assigned must be on disk before a batch stamped with it
            try:
                self.epochs.make_durable()
            except OSError as e:
                raise KafkaStorageError(f"{self.topic}-{self.index}: cannot make its "
                                        f"leader-epoch checkpoint durable: {e}") from e
            base_offset, last_offset, append_time = self.log.append(
                batch, leader_epoch=self.leader_epoch, now_ms=now_ms, validated=header)
        except KafkaStorageError as e:
            self._storage_failed(e)
            return AppendResult(e.error_code)
        except LogError as e:  # e.g. a batch larger than segment.bytes
            return AppendResult(e.error_code)
        if self.storage_failures:
            log.warning("%s-%d accepts writes again after %d failed appends", self.topic,
                        self.index, self.storage_failures)
            self.storage_failures = 0
        if header.producer_id >= 0:
            try:
                self._apply_producer_batch(header._replace(base_offset=base_offset), marker,
                                           now_ms)
            except OSError as e:
                # An ABORT whose .txnindex entry the disk refused: read_committed consumers
                # would take the aborted records for committed ones. Nobody can have read
                # the marker yet (the HW has not moved), so it goes again, as a failed
                # append does, and the coordinator retries it.
                return AppendResult(self._undo_append(base_offset, e))
        if self.epochs.assign(self.leader_epoch, base_offset):
            self.epochs.make_durable()  # only if make_leader had not assigned it (no epoch)
        moved = self.state.on_leader_append(self.log.log_end_offset)
        return AppendResult(ErrorCode.NONE, base_offset, append_time,
                            self.log.log_start_offset, last_offset, moved)

    def _undo_append(self, base_offset: int, error: OSError) -> ErrorCode:
        storage = KafkaStorageError(f"{self.topic}-{self.index}: cannot write its aborted-"
                                    f"transaction index: {error}")
        self._storage_failed(storage)
        try:
            self.log.truncate_to(base_offset)
            self._rebuild_producer_state()
        except OSError as e:
            log.error("%s-%d: cannot take back the marker at offset %d (%s); its aborted "
                      "transaction is indexed again at the next start", self.topic,
                      self.index, base_offset, e)
        return storage.error_code

    def _apply_producer_batch(self, header: BatchHeader, marker: EndTransactionMarker | None,
                              now_ms: int, *, rebuilding: bool = False) -> None:
        """A producer's batch now in the log at `header.base_offset`: the producer state
        follows it, and a marker that ends a transaction completes it, an aborted one
        recorded in the .txnindex first with the LSO it leaves (Kafka's UnifiedLog.append:
        updateTxnIndex, then completeTxn). While `rebuilding`, an entry the index holds
        already is not written again. OSError: the index refused the entry (the
        transaction is completed all the same: the marker is in the log)."""
        if marker is not None:
            self._verifications.pop(header.producer_id, None)
        completed = self.producers.append_batch(header, now_ms, marker)
        if completed is None:
            return
        try:
            if completed.is_aborted:
                self.log.append_aborted_txn(
                    AbortedTxn(completed.producer_id, completed.first_offset,
                               completed.last_offset,
                               self.producers.last_stable_offset_of(completed)),
                    unless_present=rebuilding)
        finally:
            self.producers.complete_txn(completed)

    def append_as_follower(self, data: bytes | bytearray,
                           now_ms: int) -> tuple[int, int] | None:
        """Batches fetched from the leader, with the leader's offsets and epochs; the
        producer state (its transactions included: a follower that becomes leader knows
        which are open), the .txnindex and the epoch cache follow them, so this replica
        can lead next with the same answers (Kafka's appendAsFollower). Markers are
        appended whatever their epochs, as Kafka's replication origin does."""
        try:
            appended = self.log.append_as_follower(data, now_ms=now_ms)
        except KafkaStorageError as e:
            self._storage_failed(e)
            raise
        if appended is None:
            return None
        last = appended[1]
        for pos, header in iter_batch_headers(data):
            if header.base_offset < appended[0]:
                continue
            if header.last_offset > last:
                break
            if header.partition_leader_epoch >= 0:
                self.epochs.assign(header.partition_leader_epoch, header.base_offset)
                self.epochs.make_durable()  # an epoch change of the leader's: rare
            if header.producer_id >= 0:
                marker = _marker_of(data, pos) if header.is_control else None
                try:
                    self._apply_producer_batch(header, marker, now_ms)
                except OSError as e:
                    # the fetcher stops on this partition; a restart indexes it again
                    storage = KafkaStorageError(f"{self.topic}-{self.index}: cannot write "
                                                f"its aborted-transaction index: {e}")
                    self._storage_failed(storage)
                    raise storage from e
        return appended

    def truncate_to(self, offset: int) -> bool:
        """Remove what lies at or past `offset` (a follower diverged from its leader):
        epochs that began there go, the HW cannot stay past the log, and the producer
        state is rebuilt from what remains (Kafka's UnifiedLog.truncateTo, with
        ProducerStateManager.truncateAndReload: the snapshots past the new end go)."""
        removed = self.log.truncate_to(offset)
        if self.future_log is not None:  # a move to another directory follows the log
            self.future_log.truncate_to(offset)
        # even when no batch goes: an epoch this replica began as leader at its log end,
        # with nothing written in it, must not outlive the leadership
        self.epochs.truncate_from_end(self.log.log_end_offset)
        if not removed:
            return False
        self.state.on_truncation(self.log.log_end_offset)
        self._rebuild_producer_state()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The leader's log starts past everything here: start over, empty, at `offset`."""
        self.log.truncate_fully_and_start_at(offset)
        if self.future_log is not None:
            self.future_log.truncate_fully_and_start_at(offset)
        self.epochs.clear()
        self.state.on_truncation(offset)
        self.state.high_watermark = offset
        self.producers = ProducerStateManager()
        self._delete_snapshots(lambda _offset: True)

    def _storage_failed(self, error: KafkaStorageError) -> None:
        # One line when a partition starts failing, one when it recovers: a full disk
        # must not also flood the broker's own log.
        if not self.storage_failures:
            log.warning("%s; producers get KAFKA_STORAGE_ERROR until writes succeed again",
                        error)
        self.storage_failures += 1
        if self.on_storage_failure is not None:
            self.on_storage_failure(str(error))

    # -- producer state across restarts --------------------------------------------------

    def _take_snapshot(self, offset: int) -> None:
        """The log rolled to a segment at `offset`: snapshot the producer state there (what
        a restart replays from), and forget the snapshots older than the log's first
        segment. Best effort: a snapshot is a shortcut, and a refused write only makes the
        next restart replay more."""
        directory, fs = self.log.directory, self.log.fs
        try:
            write_snapshot(directory, offset, self.producers.snapshot_bytes(), fs=fs)
            first = self.log.segments[0].base_offset
            delete_snapshots(directory, lambda o: o < first, fs=fs)
        except OSError as e:
            log.warning("%s-%d: no producer-state snapshot at offset %d: %s", self.topic,
                        self.index, offset, e)

    def _delete_snapshots(self, doomed: Callable[[int], bool]) -> None:
        try:
            delete_snapshots(self.log.directory, doomed, sync=True, fs=self.log.fs)
        except OSError as e:
            log.warning("%s-%d: cannot delete stale producer-state snapshots: %s",
                        self.topic, self.index, e)

    def _rebuild_producer_state(self) -> None:
        """The producer state of the log as it is, and the .txnindex entries it lacks:
        from the newest snapshot at or before the active segment (and before any segment
        whose .txnindex is stale), replay every batch after it, headers only save for the
        markers (Kafka's LogLoader and rebuildProducerState). So the transactions still
        open are known wherever their first batch lies, and the last five batches of each
        producer in the active segment answer retries as before the restart. With no
        usable snapshot the replay starts at the log's first segment, and leaves one at
        the active segment for the next start."""
        plog = self.log
        leo = plog.log_end_offset
        self.producers = ProducerStateManager()
        try:
            remove_unfinished(plog.directory, plog.fs)
        except OSError:
            pass  # a leftover temporary file costs nothing
        self._delete_snapshots(lambda o: o > leo)
        stale = plog.txn_index_stale_from()
        limit = plog.active.base_offset if stale is None else min(stale, plog.active.base_offset)
        start = plog.segments[0].base_offset
        try:
            snapshots = list_snapshots(plog.directory, plog.fs)
        except OSError:
            snapshots = []
        for offset in reversed(snapshots):
            if offset > limit or offset > leo:
                continue
            try:
                self.producers.load_snapshot(read_snapshot(plog.directory, offset, plog.fs))
            except (OSError, CorruptSnapshotError) as e:
                log.warning("%s-%d: producer-state snapshot at %d unusable (%s); trying an "
                            "older one", self.topic, self.index, offset, e)
                continue
            start = max(offset, start)
            break
        active = plog.active
        snapshot_active = active.base_offset not in snapshots and start < active.base_offset
        for seg, pos, header in plog.batches_from(start):
            if snapshot_active and seg is active:
                self._take_snapshot(active.base_offset)
                snapshot_active = False
            if header.producer_id < 0 or header.base_offset < start:
                continue
            marker = _marker_of(seg.pread(pos, header.size), 0) if header.is_control else None
            try:
                self._apply_producer_batch(header, marker, header.max_timestamp,
                                           rebuilding=True)
            except OSError as e:
                log.error("%s-%d: cannot index the aborted transaction ending at %d (%s); "
                          "read_committed fetches of it see it as committed until a restart "
                          "indexes it", self.topic, self.index, header.base_offset, e)
        if snapshot_active and active.size == 0:
            self._take_snapshot(active.base_offset)
        plog.mark_txn_indexes_rebuilt()
        plog.on_roll = self._take_snapshot
        plog.last_stable_offset = lambda: self.last_stable_offset


def _marker_of(data: bytes | bytearray | memoryview, pos: int) -> EndTransactionMarker | None:
    """The end-transaction marker of the control batch at `pos`, or None for one emptied by
    the cleaner or one that does not decode (then it changes no producer state)."""
    try:
        return end_txn_marker_of(data, pos)
    except RecordError:
        return None
