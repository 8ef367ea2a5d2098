"""One partition this broker holds a replica of: its log, its leader epochs, its
replication state (leader or follower, ISR, high watermark) and its producer state.

Owns: `Partition.append_batch` (the produce path as leader, after request validation:
idempotence check, offset assignment, leader epoch, append; a write the file system refuses
answers KAFKA_STORAGE_ERROR and is reported to `on_storage_failure`, the log directory's
failure channel, broker/log_dirs.py), `append_as_follower` (batches fetched from the leader, their
offsets and epochs kept), `truncate_to` (a follower whose log diverged), `read` through
`log`, and the role changes the metadata asks for (`make_leader`, `make_follower`,
`update_isr`). The rules of the HW and the ISR are broker.replication.state's; the leader
epochs are broker.replication.leader_epochs'. Record batches stay opaque: only their
61-byte headers are read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker.log.config import LogConfig
from broker.log.errors import KafkaStorageError, LogError
from broker.log.log import PartitionLog
from broker.producer_state import ProducerStateManager
from broker.replication.leader_epochs import LeaderEpochCache
from broker.replication.state import FetchUpdate, PartitionState
from protocol.errors import ErrorCode
from protocol.records import BatchHeader, iter_batch_headers

log = logging.getLogger("minibroker.partition")


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
        self.storage_failures = 0  # appends refused by the file system since the last success
        self.on_storage_failure = on_storage_failure  # told why, at each refused append
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
                       broker_epoch: int = -1) -> FetchUpdate | None:
        return self.state.on_follower_fetch(replica_id, fetch_offset, self.log.log_end_offset,
                                            now_ms, broker_epoch)

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

    def append_batch(self, batch: bytearray, header: BatchHeader, now_ms: int) -> AppendResult:
        if header.producer_id >= 0:
            check = self.producers.check(header.producer_id, header.producer_epoch,
                                         header.base_sequence, header.records_count)
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
            self.producers.update(header.producer_id, header.producer_epoch,
                                  header.base_sequence, header.records_count, base_offset,
                                  header.max_timestamp, now_ms)
        if self.epochs.assign(self.leader_epoch, base_offset):
            self.epochs.make_durable()  # only if make_leader had not assigned it (no epoch)
        moved = self.state.on_leader_append(self.log.log_end_offset)
        return AppendResult(ErrorCode.NONE, base_offset, append_time, self.log.log_start_offset,
                            last_offset, moved)

    def append_as_follower(self, data: bytes | bytearray,
                           now_ms: int) -> tuple[int, int] | None:
        """Batches fetched from the leader, with the leader's offsets and epochs; the
        producer state and the epoch cache follow them, so this replica can lead next with
        the same idempotence answers (Kafka's appendAsFollower)."""
        try:
            appended = self.log.append_as_follower(data, now_ms=now_ms)
        except KafkaStorageError as e:
            self._storage_failed(e)
            raise
        if appended is None:
            return None
        last = appended[1]
        for _pos, header in iter_batch_headers(data):
            if header.base_offset < appended[0]:
                continue
            if header.last_offset > last:
                break
            if header.partition_leader_epoch >= 0:
                self.epochs.assign(header.partition_leader_epoch, header.base_offset)
                self.epochs.make_durable()  # an epoch change of the leader's: rare
            if header.producer_id >= 0:
                self.producers.update(header.producer_id, header.producer_epoch,
                                      header.base_sequence, header.records_count,
                                      header.base_offset, header.max_timestamp, now_ms)
        return appended

    def truncate_to(self, offset: int) -> bool:
        """Remove what lies at or past `offset` (a follower diverged from its leader):
        epochs that began there go, the HW cannot stay past the log, and the producer
        state is rebuilt from what remains (Kafka's UnifiedLog.truncateTo)."""
        removed = self.log.truncate_to(offset)
        # even when no batch goes: an epoch this replica began as leader at its log end,
        # with nothing written in it, must not outlive the leadership
        self.epochs.truncate_from_end(self.log.log_end_offset)
        if not removed:
            return False
        self.state.on_truncation(self.log.log_end_offset)
        self.producers = ProducerStateManager()
        self._rebuild_producer_state()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The leader's log starts past everything here: start over, empty, at `offset`."""
        self.log.truncate_fully_and_start_at(offset)
        self.epochs.clear()
        self.state.on_truncation(offset)
        self.state.high_watermark = offset
        self.producers = ProducerStateManager()

    def _storage_failed(self, error: KafkaStorageError) -> None:
        # One line when a partition starts failing, one when it recovers: a full disk
        # must not also flood the broker's own log.
        if not self.storage_failures:
            log.warning("%s; producers get KAFKA_STORAGE_ERROR until writes succeed again",
                        error)
        self.storage_failures += 1
        if self.on_storage_failure is not None:
            self.on_storage_failure(str(error))

    def _rebuild_producer_state(self) -> None:
        """Replay producer batches of the active segment after a restart (headers only).

        Kafka snapshots producer state at each roll; we rescan the active segment, which holds
        the batches a producer can still be retrying right after a broker restart. A producer
        whose last batch lies in an older segment starts afresh (allowed for unknown ids).
        """
        for header in self.log.active_segment_headers():
            if header.producer_id >= 0:
                self.producers.update(header.producer_id, header.producer_epoch,
                                      header.base_sequence, header.records_count,
                                      header.base_offset, header.max_timestamp,
                                      header.max_timestamp)
