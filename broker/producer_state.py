"""Idempotent and transactional producer state of one partition: sequence checks, retry
de-duplication, and the transactions open in the partition.

Owns: `ProducerStateManager`, a pure structure (time is passed in) that remembers, per
producer id, the epoch, the last 5 appended batches (Kafka's ProducerStateEntry keeps
5, because max.in.flight.requests.per.connection <= 5 is what idempotence allows), the
epoch of the last transaction coordinator that wrote a marker, and the first offset of the
producer's ongoing transaction; and, per partition, the ongoing transactions and the
completed ones not yet below the high watermark, from which the last stable offset (LSO)
follows. `CompletedTxn` is what an end-transaction marker produces.

The sequence rules (Kafka's ProducerAppendInfo):
- an epoch older than the one we know is fenced: INVALID_PRODUCER_EPOCH;
- a newer epoch must start at sequence 0: OUT_OF_ORDER_SEQUENCE_NUMBER otherwise;
- within an epoch, a batch equal to one of the cached five is a retry: answer with the
  original offsets and append nothing;
- otherwise its first sequence must follow the last one (int32 wraps to 0), or the batch is
  out of order;
- a producer id we know nothing of (new, or expired) may start anywhere (KIP-360).

The transaction rules (ProducerAppendInfo, ProducerStateManager):
- a transactional data batch from a producer with no ongoing transaction opens one at its
  first offset (`currentTxnFirstOffset`); a non-transactional batch while one is open is
  INVALID_TXN_STATE;
- an end-transaction marker (a control batch) with an epoch older than the producer's is
  INVALID_PRODUCER_EPOCH, and one whose coordinator epoch is older than that of the
  producer's last marker is TRANSACTION_COORDINATOR_FENCED (a zombie coordinator; a
  follower copying the leader's log appends it anyway, as Kafka's replication origin
  does, so only the leader checks); a newer one is accepted and bumps the epoch (markers of
  transaction versions 0 and 1, the ones our coordinator writes). It ends the producer's
  transaction and returns its `CompletedTxn`, or None when none was open (Kafka writes
  such a marker and completes nothing);
- the caller then computes the LSO to record with an aborted transaction
  (`last_stable_offset_of`), writes the transaction index, and calls `complete_txn`: the
  transaction stays unstable until the high watermark passes its marker
  (`on_high_watermark_updated`), since a new leader might not have the marker;
- LSO = min(first unstable offset, high watermark);
- a producer with an open transaction never expires.

Snapshots (`snapshot_bytes`, `load_snapshot`): Kafka's ProducerSnapshot v1 bytes, so that
its tools read ours: int16 version 1, uint32 CRC-32C of what follows, int32 count, then per
producer its id, epoch, last sequence, last data offset, offset delta of its last batch,
timestamp, coordinator epoch and the first offset of its ongoing transaction (-1: none).
Only a producer's last batch is kept, as in Kafka; the partition (broker/partition.py)
writes one when its log rolls and replays the log from the newest one at start-up. A
snapshot that does not decode or check is `CorruptSnapshotError`.

Not modelled: the stricter epoch rule of transaction version 2.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

from crc32c import crc32c

from protocol.batch_header import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from protocol.control_records import ControlRecordType, EndTransactionMarker, decode_end_txn_marker
from protocol.errors import ErrorCode
from protocol.records import decode_batch

CACHED_BATCHES = 5
_INT32_MAX = 2**31 - 1
NO_COORDINATOR_EPOCH = -1

SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">hI")  # version, CRC-32C of everything after it
_SNAPSHOT_COUNT = struct.Struct(">i")
# producer id, epoch, last sequence, last offset, offset delta, timestamp, coordinator
# epoch, current transaction's first offset
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(ValueError):
    """Producer-state snapshot bytes that are not a whole, checked snapshot we can read."""


def next_sequence(seq: int, delta: int = 1) -> int:
    """Sequence arithmetic wraps from Integer.MAX_VALUE to 0 (DefaultRecordBatch)."""
    return (seq + delta) % (_INT32_MAX + 1)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_update_ms: int = 0
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int | None = None

    def set_epoch(self, epoch: int) -> None:
        # the cached batches belong to the old epoch; an ongoing transaction does not
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    error: ErrorCode
    duplicate: BatchMetadata | None = None


OK = SequenceCheck(ErrorCode.NONE)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker: its first data offset, the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True)
class TxnMetadata:
    """A transaction in the partition: open while `last_offset` (its marker's) is None."""

    producer_id: int
    first_offset: int
    last_offset: int | None = None


def end_txn_marker_of(batch, pos: int = 0) -> EndTransactionMarker | None:
    """The end-transaction marker a control batch carries in its first record, or None for
    a control batch the cleaner emptied. Control batches are one small record and are the
    only batches whose records the producer state reads (docs/ARCHITECTURE.md §3).

    Raises InvalidRecordError for a control record that is no transaction marker, and
    CorruptRecordError for a batch that does not decode."""
    _, records = decode_batch(batch, pos)
    if not records:
        return None
    return decode_end_txn_marker(records[0].key, records[0].value)


class ProducerStateManager:
    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}
        # by first offset: the transactions with no marker yet...
        self.ongoing_txns: dict[int, TxnMetadata] = {}
        # ...and those whose marker is not yet below the high watermark
        self.unreplicated_txns: dict[int, TxnMetadata] = {}

    # --- data batches ------------------------------------------------------------------

    def check(self, producer_id: int, epoch: int, first_seq: int, record_count: int, *,
              is_transactional: bool = False, verify_sequence: bool = True) -> SequenceCheck:
        """May this data batch be appended? `verify_sequence=False` for a batch a
        coordinator writes (Kafka's AppendOrigin.COORDINATOR: transactional offset commits
        carry no meaningful sequence): only the epoch and transaction rules, no
        de-duplication."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return OK
        if epoch < entry.epoch:
            return SequenceCheck(ErrorCode.INVALID_PRODUCER_EPOCH)
        if not verify_sequence:
            return self._check_txn_state(entry, is_transactional)
        if epoch > entry.epoch:
            if first_seq != 0:
                return SequenceCheck(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
            return self._check_txn_state(entry, is_transactional)
        last_seq = next_sequence(first_seq, record_count - 1)
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return SequenceCheck(ErrorCode.NONE, batch)
        if entry.batches and first_seq != next_sequence(entry.batches[-1].last_seq):
            return SequenceCheck(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        return self._check_txn_state(entry, is_transactional)

    @staticmethod
    def _check_txn_state(entry: ProducerEntry, is_transactional: bool) -> SequenceCheck:
        if entry.current_txn_first_offset is not None and not is_transactional:
            return SequenceCheck(ErrorCode.INVALID_TXN_STATE)
        return OK

    def update(self, producer_id: int, epoch: int, first_seq: int, record_count: int,
               first_offset: int, timestamp_ms: int, now_ms: int, *,
               is_transactional: bool = False) -> None:
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        entry.set_epoch(epoch)
        entry.batches.append(BatchMetadata(first_seq, next_sequence(first_seq, record_count - 1),
                                           first_offset, first_offset + record_count - 1,
                                           timestamp_ms))
        entry.last_update_ms = now_ms
        if is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self.ongoing_txns[first_offset] = TxnMetadata(producer_id, first_offset)

    # --- end-transaction markers -------------------------------------------------------

    def check_marker(self, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int) -> ErrorCode:
        """May this producer's marker be written? Epochs of transaction versions 0 and 1:
        the marker's may be the producer's or newer, never older. Nor may its coordinator
        epoch be older than the last marker's: a coordinator that lost its
        __transaction_state partition and has not yet learnt it must not end a transaction
        its successor already ended (checked after the producer epoch, as Kafka does)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return ErrorCode.NONE
        if producer_epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED
        return ErrorCode.NONE

    def append_marker(self, producer_id: int, producer_epoch: int,
                      marker: EndTransactionMarker, offset: int, now_ms: int) -> CompletedTxn | None:
        """Record a marker appended at `offset` (checked with `check_marker` first). Ends
        the producer's transaction and returns it, or None if none was open; the
        transaction stays in `ongoing_txns` until `complete_txn`."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_epoch)
        completed = None
        if entry.current_txn_first_offset is not None:
            completed = CompletedTxn(producer_id, entry.current_txn_first_offset, offset,
                                     marker.type == ControlRecordType.ABORT)
        entry.set_epoch(producer_epoch)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.current_txn_first_offset = None
        entry.last_update_ms = now_ms
        return completed

    # --- whole batches by their headers ------------------------------------------------

    def check_batch(self, header: BatchHeader, marker: EndTransactionMarker | None = None, *,
                    verify_sequence: bool = True) -> SequenceCheck:
        """`check` or `check_marker` for a batch, by its header (and, for a control batch,
        its marker: `end_txn_marker_of`)."""
        if header.is_control:
            # a control batch the cleaner emptied has no coordinator epoch to fence
            coordinator_epoch = (NO_COORDINATOR_EPOCH if marker is None
                                 else marker.coordinator_epoch)
            return SequenceCheck(self.check_marker(header.producer_id, header.producer_epoch,
                                                   coordinator_epoch))
        return self.check(header.producer_id, header.producer_epoch, header.base_sequence,
                          header.records_count, is_transactional=header.is_transactional,
                          verify_sequence=verify_sequence)

    def append_batch(self, header: BatchHeader, now_ms: int,
                     marker: EndTransactionMarker | None = None) -> CompletedTxn | None:
        """`update` or `append_marker` for a batch appended at `header.base_offset`. A
        control batch without a marker (emptied by the cleaner) changes nothing."""
        if header.is_control:
            if marker is None:
                return None
            return self.append_marker(header.producer_id, header.producer_epoch, marker,
                                      header.base_offset, now_ms)
        self.update(header.producer_id, header.producer_epoch, header.base_sequence,
                    header.records_count, header.base_offset, header.max_timestamp, now_ms,
                    is_transactional=header.is_transactional)
        return None

    # --- completion and the last stable offset -----------------------------------------

    def last_stable_offset_of(self, completed: CompletedTxn) -> int:
        """The LSO once `completed` is complete, as its aborted-transaction index entry
        records it: the first offset of the oldest other producer's open transaction, else
        just past the marker (Kafka's lastStableOffset(CompletedTxn)). Call it before
        `complete_txn`."""
        for first_offset in sorted(self.ongoing_txns):
            if self.ongoing_txns[first_offset].producer_id != completed.producer_id:
                return first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Move an ended transaction from the open ones to those waiting for the high
        watermark to pass its marker."""
        txn = self.ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(f"{completed} completes a transaction that was not open")
        txn.last_offset = completed.last_offset
        self.unreplicated_txns[completed.first_offset] = txn

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is now below the HW become stable."""
        self._remove_unreplicated_before(high_watermark)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated_before(log_start_offset)

    def _remove_unreplicated_before(self, offset: int) -> None:
        for first_offset, txn in list(self.unreplicated_txns.items()):
            if txn.last_offset is not None and txn.last_offset < offset:
                del self.unreplicated_txns[first_offset]

    def first_undecided_offset(self) -> int | None:
        """The first offset of the oldest transaction with no marker yet."""
        return min(self.ongoing_txns, default=None)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction that is open, or ended by a marker the
        high watermark has not yet passed; None if there is none."""
        return min(self.ongoing_txns.keys() | self.unreplicated_txns.keys(), default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        """What a read_committed consumer may read up to (UnifiedLog.lastStableOffset)."""
        first_unstable = self.first_unstable_offset()
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    # --- snapshots ---------------------------------------------------------------------

    def snapshot_bytes(self) -> bytes:
        """The producers as Kafka's ProducerSnapshot v1 (see the module docstring)."""
        body = bytearray(_SNAPSHOT_COUNT.pack(len(self.producers)))
        for pid, entry in self.producers.items():
            last = entry.batches[-1] if entry.batches else None
            body += _SNAPSHOT_ENTRY.pack(
                pid, entry.epoch, last.last_seq if last else NO_SEQUENCE,
                last.last_offset if last else -1,
                last.last_offset - last.first_offset if last else 0,
                entry.last_update_ms, entry.coordinator_epoch,
                -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset)
        return _SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)

    def load_snapshot(self, data: bytes) -> None:
        """Replace the producers with a snapshot's, their open transactions included
        (Kafka's loadFromSnapshot); the completed ones are forgotten, as in Kafka: a
        snapshot is taken below the high watermark. CorruptSnapshotError changes nothing."""
        if len(data) < _SNAPSHOT_HEADER.size + _SNAPSHOT_COUNT.size:
            raise CorruptSnapshotError(f"a snapshot of {len(data)} bytes is too short")
        version, crc = _SNAPSHOT_HEADER.unpack_from(data)
        if version != SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"snapshot version {version}, not {SNAPSHOT_VERSION}")
        body = memoryview(data)[_SNAPSHOT_HEADER.size:]
        if crc32c(body) != crc:
            raise CorruptSnapshotError("snapshot CRC-32C mismatch")
        (count,) = _SNAPSHOT_COUNT.unpack_from(body)
        if count < 0 or len(body) != _SNAPSHOT_COUNT.size + count * _SNAPSHOT_ENTRY.size:
            raise CorruptSnapshotError(f"snapshot of {len(body)} bytes for {count} producers")
        producers: dict[int, ProducerEntry] = {}
        ongoing: dict[int, TxnMetadata] = {}
        for (pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch,
             txn_first) in _SNAPSHOT_ENTRY.iter_unpack(body[_SNAPSHOT_COUNT.size:]):
            entry = ProducerEntry(epoch, last_update_ms=timestamp,
                                  coordinator_epoch=coordinator_epoch,
                                  current_txn_first_offset=txn_first if txn_first >= 0 else None)
            if last_offset >= 0:
                entry.batches.append(BatchMetadata(
                    next_sequence(last_seq, -delta), last_seq, last_offset - delta,
                    last_offset, timestamp))
            if txn_first >= 0:
                if txn_first in ongoing:
                    raise CorruptSnapshotError(f"two transactions begin at offset {txn_first}")
                ongoing[txn_first] = TxnMetadata(pid, txn_first)
            producers[pid] = entry
        self.producers = producers
        self.ongoing_txns = ongoing
        self.unreplicated_txns = {}

    # --- expiry and truncation ---------------------------------------------------------

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers idle longer than producer.id.expiration.ms, except those with
        an open transaction (its LSO would be lost with them); returns their ids."""
        gone = [pid for pid, e in self.producers.items()
                if e.current_txn_first_offset is None
                and now_ms - e.last_update_ms > expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return gone

    def truncate_after(self, offset: int) -> None:
        """Drop cached batches and transactions at or beyond `offset` (the log was truncated
        there). A transaction whose marker went, but whose data did not, is open again:
        truncation happens above the high watermark, so its marker was unreplicated."""
        for first_offset in [o for o in self.ongoing_txns if o >= offset]:
            txn = self.ongoing_txns.pop(first_offset)
            entry = self.producers.get(txn.producer_id)
            if entry is not None:
                entry.current_txn_first_offset = None
        for first_offset, txn in list(self.unreplicated_txns.items()):
            if first_offset >= offset:
                del self.unreplicated_txns[first_offset]
            elif txn.last_offset is not None and txn.last_offset >= offset:
                del self.unreplicated_txns[first_offset]
                self.ongoing_txns[first_offset] = TxnMetadata(txn.producer_id, first_offset)
                entry = self.producers.get(txn.producer_id)
                if entry is None:  # expired after its marker: any epoch may end it again
                    entry = self.producers[txn.producer_id] = ProducerEntry(NO_PRODUCER_EPOCH)
                entry.current_txn_first_offset = first_offset
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if not kept and entry.current_txn_first_offset is None:
                del self.producers[pid]
            else:
                entry.batches = deque(kept, maxlen=CACHED_BATCHES)
