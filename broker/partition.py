"""One partition this broker holds a replica of: its log, leader, leader epoch, high
watermark and producer state.

Owns: `Partition.append_batch` (the produce path after request validation: idempotence
check, offset assignment, append; a write the file system refuses answers
KAFKA_STORAGE_ERROR and is reported to `on_storage_failure`, the log directory's failure
channel, broker/log_dirs.py) and `Partition.read` (the fetch path: whole batches below
the high watermark, as bytes off disk).

With a single replica the ISR is this broker alone, so the high watermark is the log end
offset as soon as an append returns; replication will move the HW rule into a pure
PartitionState without changing this interface. Record batches stay opaque: only their
61-byte header is read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker.log.errors import KafkaStorageError, LogError
from broker.log.log import PartitionLog
from broker.producer_state import ProducerStateManager
from protocol.errors import ErrorCode
from protocol.records import BatchHeader

log = logging.getLogger("minibroker.partition")


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1


class Partition:
    def __init__(self, topic: str, index: int, log: PartitionLog, leader_epoch: int = 0,
                 leader_id: int = -1, node_id: int | None = None,
                 on_storage_failure: Callable[[str], object] | None = None):
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = leader_epoch
        self.leader_id = leader_id  # as the metadata image says; -1 while offline
        self.node_id = node_id  # this broker's id: it leads when leader_id is this
        self.producers = ProducerStateManager()
        self.storage_failures = 0  # appends refused by the file system since the last success
        self.on_storage_failure = on_storage_failure  # told why, at each refused append
        self._rebuild_producer_state()

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

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
                                    self.log.log_start_offset)
        try:
            base_offset, _last, append_time = self.log.append(
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
        return AppendResult(ErrorCode.NONE, base_offset, append_time, self.log.log_start_offset)

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
