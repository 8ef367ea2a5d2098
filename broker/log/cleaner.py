"""The log cleaner of compacted topics (Kafka's LogCleaner / Cleaner, cleanup.policy "compact").

Owns: `clean`, one cleaning pass over one partition log (pure file work: no threads, no
clock -- ``now_ms`` is passed in), its result `CleanResult`, and the helpers that say how
dirty a log is (`first_dirty_offset`, `cleanable_bytes`). `LogManager.clean_compacted`
decides which logs to clean and keeps the cleaner checkpoints.

A pass, as Kafka's Cleaner.doClean:

1. The *dirty* section runs from the cleaner checkpoint (the first offset not yet
   cleaned) to the active segment's base offset; the active segment is never touched.
   Every record with a key in it goes into an offset map: key -> its latest offset.
2. Every non-active segment (the clean section too) is rewritten, batch by batch. A record
   survives if its offset is >= the map's entry for its key (a key absent from the map
   counts as -1: the record is kept) -- Kafka's Cleaner.shouldRetainRecord. Records with a
   null key are dropped (Kafka counts them as invalid: a compacted topic rejects them at
   produce time with INVALID_RECORD). Control batches follow the transaction rules below.
3. Tombstones (null value) follow KIP-534 (Kafka >= 2.8): the first pass that keeps a
   tombstone rewrites its batch with the delete-horizon attribute bit (0x40) set and
   BaseTimestamp = now_ms + delete.retention.ms (record timestamp deltas are re-based on
   it, so record timestamps do not change). A later pass at now_ms >= that horizon drops
   the tombstone. A tombstone therefore outlives at least one whole pass plus
   delete.retention.ms, so a consumer that read past the older values in time sees it.
4. A batch that keeps every record (and needs no horizon) is copied byte for byte. A
   batch that lost records is re-encoded with the records kept, each with its original
   offset and timestamp, and the original BaseOffset, LastOffsetDelta (Kafka preserves
   the batch's last offset, so the producer's last sequence stays meaningful), producer
   id/epoch/base sequence, partition leader epoch, timestamp type, transactional flag and
   codec (re-compressed with it). A batch left with no record is dropped entirely (Kafka
   keeps the last batch of each producer as an empty header for idempotence state; we do
   not: producer state is rebuilt from the active segment only, which is never cleaned).
   Offsets never change: the log has gaps afterwards, which reads and indexes handle.

Transactions, as Kafka's Cleaner and CleanedTransactionMetadata: a pass never goes past the
partition's last stable offset (only segments wholly below it are cleaned), so every
transaction it meets is decided. The records of aborted transactions (the .txnindex knows
them) never enter the offset map, where they would hide a committed value of their key,
and are removed. A marker stays while its transaction still has batches in the log: an
ABORT marker kept for that keeps its .txnindex entry in the cleaned segment. Once the
transaction's batches are all gone the marker is removable: the pass that finds it so
sets its delete horizon as for a tombstone (delete.retention.ms: a consumer that read the
transaction's records in time still sees the marker), and a pass after the horizon drops
it.

Output: consecutive segments are grouped into one cleaned segment (named after the first
one's base offset) while the cleaned bytes plus the next input stay within segment.bytes,
its indexes within segment.index.bytes and its offsets within an int32 of the base. The
last segment of a group always keeps at least one batch, so the group is exactly the
segments whose base offsets lie in [group base, cleaned segment's next offset) -- what the
loader relies on to finish a swap. A segment that keeps nothing and would end a group
instead starts the next group, or, at the very end, is replaced by an empty segment of
its own base offset. A single segment that comes out unchanged is left alone.

Crash safety, Kafka's way: the cleaned segment is written as ``<base>.log.cleaned`` (plus
``.index.cleaned``/``.timeindex.cleaned``) and fsynced, renamed ``.swap``, the segments it
replaces are renamed ``.deleted``, then ``.swap`` is stripped
(`PartitionLog.replace_segments`). On start-up the loader deletes ``.cleaned`` leftovers
and completes any ``.swap``. The cleaner checkpoint is written only after a pass, so a
crash at worst repeats a pass, which is idempotent.

Not done (Kafka has them): a bounded dedupe buffer (the offset map is a dict of the dirty
section's distinct keys; Kafka caps it with log.cleaner.dedupe.buffer.size and cleans in
several passes), min/max.compaction.lag.ms, keeping each active producer's last batch
(Kafka keeps it as an empty batch for its sequence; here the producer-state snapshots
carry it), cleaner threads and I/O throttling.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterator
from typing import NamedTuple

from protocol.batch_walk import CORRUPT, TORN, BatchWalk
from protocol.control_records import ControlRecordType, decode_control_type
from protocol.record_errors import RecordError
from protocol.records import (
    ATTRIBUTES_POS,
    DELETE_HORIZON_MASK,
    LAST_OFFSET_DELTA_POS,
    BatchHeader,
    Record,
    decode_batch,
    encode_batch,
    parse_batch_header,
    refresh_crc,
)

from .errors import CorruptSegmentError
from .loader import CLEANED_SUFFIX, new_segment
from .log import PartitionLog
from .segment import INDEX_SUFFIXES, LOG_SUFFIX, LogSegment, segment_name
from .txn_index import AbortedTxn

_INT32_MAX = (1 << 31) - 1
_READ_CHUNK = 1024 * 1024


class CleanResult(NamedTuple):
    """What one `clean` pass did.

    ``new_checkpoint``: the first offset not yet cleaned (persist it as the partition's
    cleaner checkpoint). ``bytes_before``/``bytes_after``: the non-active segments' bytes
    before and after. ``records_removed``: every record dropped (superseded, tombstones past
    their horizon, null keys); ``tombstones_removed``: how many of those were tombstones
    (superseded or past their delete horizon). ``duration_ms``: how long the pass took,
    filled in by `LogManager.clean_compacted` (this module reads no clock).
    """

    new_checkpoint: int
    bytes_before: int
    bytes_after: int
    records_removed: int
    tombstones_removed: int
    duration_ms: float = 0.0


def first_dirty_offset(log: PartitionLog, cleaner_checkpoint: int) -> int:
    """Where the dirty section starts: the checkpoint, or the log start offset when the
    checkpoint lies outside [log start, LEO] (retention moved past it, or the log was
    truncated below it -- Kafka's LogCleanerManager.cleanableOffsets)."""
    start = log.log_start_offset
    if cleaner_checkpoint < start or cleaner_checkpoint > log.log_end_offset:
        return start
    return cleaner_checkpoint


def cleanable_bytes(log: PartitionLog, cleaner_checkpoint: int) -> tuple[int, int]:
    """(dirty bytes, total bytes) of the non-active segments: a segment is dirty when it
    holds offsets at or after the first dirty offset. The dirty ratio is dirty / total
    (Kafka's LogToClean.cleanableRatio); the active segment counts in neither."""
    first_dirty = first_dirty_offset(log, cleaner_checkpoint)
    segments = log.segments
    dirty = total = 0
    for i, seg in enumerate(segments[:-1]):
        total += seg.size
        if segments[i + 1].base_offset > first_dirty:
            dirty += seg.size
    return dirty, total


def cleanable_segments(log: PartitionLog) -> tuple[list[LogSegment], int]:
    """The segments a pass may rewrite, and the offset they end at: the non-active ones
    wholly below the log's last stable offset (`PartitionLog.last_stable_offset`, when the
    partition has told the log how to learn it; Kafka's firstUncleanableDirtyOffset)."""
    segments = log.segments
    limit = log.active.base_offset
    if log.last_stable_offset is not None:
        limit = min(limit, log.last_stable_offset())
    taken: list[LogSegment] = []
    end = segments[0].base_offset
    for i, seg in enumerate(segments[:-1]):
        next_base = segments[i + 1].base_offset
        if next_base > limit:
            break
        taken.append(seg)
        end = next_base
    return taken, end


def clean(log: PartitionLog, *, now_ms: int, cleaner_checkpoint: int) -> CleanResult:
    """Compact ``log``'s non-active segments below its LSO once (see the module docstring).

    ``cleaner_checkpoint`` is the partition's first uncleaned offset (0 if never
    cleaned). Raises RecordError (a batch that does not decode) or CorruptSegmentError;
    segments swapped in before the failure stay (each swap is complete and consistent),
    the group being written is discarded and the checkpoint must not advance.
    Must run where the log's other operations run (it replaces segments in place).
    """
    segments, end = cleanable_segments(log)
    first_dirty = first_dirty_offset(log, cleaner_checkpoint)
    new_checkpoint = max(first_dirty, end)
    bytes_before = sum(s.size for s in segments)
    if not segments:
        return CleanResult(new_checkpoint, 0, 0, 0, 0)
    offset_map = _build_offset_map(log, segments, first_dirty, end)
    cleaner = _Cleaner(log, offset_map, now_ms,
                       _TxnMetadata(_aborted_txns(log, segments[0].base_offset, end)))
    try:
        for i, seg in enumerate(segments):
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else end
            cleaner.add(seg, next_base)
        cleaner.finish()
    except BaseException:
        cleaner.abort()
        raise
    bytes_after = sum(s.size for s in log.segments[:-1])
    return CleanResult(new_checkpoint, bytes_before, bytes_after,
                       cleaner.records_removed, cleaner.tombstones_removed)


# ---------------------------------------------------------------------- internals

def _batches(seg: LogSegment) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of every batch of ``seg``, read in large chunks. A non-active
    segment holds whole batches only: anything else is a CorruptSegmentError."""
    walk = BatchWalk(seg.pread, 0, seg.size, read_size=_READ_CHUNK)
    for pos, header in walk:
        data = walk.batch(pos, header)
        if len(data) < header.size:
            raise CorruptSegmentError(f"{seg.log_path}: incomplete batch at {pos}")
        yield header, bytes(data)
    stop = walk.stop
    assert stop is not None
    if stop.reason == TORN:
        raise CorruptSegmentError(f"{seg.log_path}: incomplete batch at {stop.position}")
    if stop.reason == CORRUPT:
        raise CorruptSegmentError(
            f"{seg.log_path}: corrupt batch header at {stop.position}: {stop.problem}")


def _aborted_txns(log: PartitionLog, start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions with batches in [start, end), by first offset."""
    found = {(t.producer_id, t.first_offset): t for t in log.collect_aborted_txns(start, end)}
    return sorted(found.values(), key=lambda t: t.first_offset)


def _build_offset_map(log: PartitionLog, segments: list[LogSegment], start: int,
                      end: int) -> dict[bytes, int]:
    """key -> latest offset over the records with offsets in [start, end), those of aborted
    transactions left out (they are removed: they must not hide an older value)."""
    offset_map: dict[bytes, int] = {}
    txns = _TxnMetadata(_aborted_txns(log, start, end))
    for i, seg in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else end
        if next_base <= start:
            continue  # wholly in the clean section
        for header, data in _batches(seg):
            if header.is_control:
                txns.on_control_batch(header, data)
                continue
            if txns.on_data_batch(header) or header.last_offset < start:
                continue
            for record in decode_batch(data)[1]:
                if record.key is not None and start <= record.offset < end:
                    offset_map[record.key] = record.offset
    return offset_map


class _TxnMetadata:
    """What a pass knows of the transactions whose batches it meets, in log order (Kafka's
    CleanedTransactionMetadata): `on_data_batch` says whether a batch belongs to an
    aborted transaction (then its records go), `on_control_batch` whether a marker's
    transaction has no batch left (then the marker may go), and `kept_aborted` collects
    the index entries of the ABORT markers kept because their transaction still has
    batches."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = deque(aborted)  # by first offset, not yet reached
        self._ongoing_aborted: dict[int, list] = {}  # producer -> [txn, batch seen]
        self._ongoing_committed: set[int] = set()
        self.kept_aborted: list[AbortedTxn] = []

    def _reach(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.popleft()
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, False])

    def on_data_batch(self, header: BatchHeader) -> bool:
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1] = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, data: bytes) -> bool:
        self._reach(header.last_offset)
        try:
            records = decode_batch(data)[1]
            kind = decode_control_type(records[0].key) if records else None
        except (RecordError, IndexError):
            kind = None
        if kind == ControlRecordType.ABORT:
            ongoing = self._ongoing_aborted.pop(header.producer_id, None)
            if ongoing is not None and ongoing[1]:
                self.kept_aborted.append(ongoing[0])
                return False
            return True
        if kind == ControlRecordType.COMMIT:
            if header.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(header.producer_id)
                return False
            return True
        return False  # a control batch of another kind, or emptied: kept as it is


def _reencode(header: BatchHeader, records: list[Record], delete_horizon: int | None) -> bytes:
    """A batch of ``records`` carrying ``header``'s identity (see the module docstring)."""
    out = bytearray(encode_batch(
        records, base_offset=header.base_offset, base_timestamp=delete_horizon,
        compression=header.compression, producer_id=header.producer_id,
        producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        timestamp_type=header.timestamp_type, is_transactional=header.is_transactional,
        is_control=header.is_control))
    # encode_batch knows neither the delete-horizon bit nor a LastOffsetDelta beyond the
    # last record: both are inside the CRC, so set them and recompute it.
    attributes = header.attributes | (DELETE_HORIZON_MASK if delete_horizon is not None else 0)
    struct.pack_into(">h", out, ATTRIBUTES_POS, attributes)
    struct.pack_into(">i", out, LAST_OFFSET_DELTA_POS, header.last_offset_delta)
    refresh_crc(out, 0)
    return bytes(out)


class _Cleaner:
    """One pass's state: the group being written and the counters."""

    def __init__(self, log: PartitionLog, offset_map: dict[bytes, int], now_ms: int,
                 txns: _TxnMetadata) -> None:
        self.log = log
        self.config = log.config
        self.offset_map = offset_map
        self.now_ms = now_ms
        self.txns = txns
        self.records_removed = 0
        self.tombstones_removed = 0
        # The open group: its cleaned segment and, per member, whether it produced output
        # and whether anything of it changed.
        self.out: LogSegment | None = None
        self.members: list[LogSegment] = []
        self.has_output: list[bool] = []
        self.changed: list[bool] = []

    # -------------------------------------------------------------- grouping

    def add(self, seg: LogSegment, next_base: int) -> None:
        """Clean ``seg`` (whose offsets end below ``next_base``) into the open group."""
        while self.members and not self._fits(seg, next_base):
            self._close(final=False)
        if self.out is None:
            self.out = self._new_output(seg.base_offset)
        before = self.out.size
        changed = self._clean_into(seg, self.out)
        self.members.append(seg)
        self.has_output.append(self.out.size > before)
        self.changed.append(changed)

    def _fits(self, seg: LogSegment, next_base: int) -> bool:
        # Kafka's groupSegmentsBySize, on the cleaned bytes so far (known here) plus the
        # next segment's input bytes (its output is at most about that).
        out = self.out
        assert out is not None
        return (out.size + seg.size <= self.config.segment_bytes
                and next_base - 1 - out.base_offset <= _INT32_MAX
                and len(out.offset_index) + len(seg.offset_index) < out.offset_index.max_entries
                and len(out.time_index) + len(seg.time_index) + 1 < out.time_index.max_entries)

    def finish(self) -> None:
        if self.members:
            self._close(final=True)
        elif self.out is not None:
            self.out.delete()
            self.out = None

    def abort(self) -> None:
        if self.out is not None:
            self.out.delete()
            self.out = None

    def _close(self, *, final: bool) -> None:
        out = self.out
        assert out is not None
        last = max((i for i, h in enumerate(self.has_output) if h), default=-1)
        take = last + 1 if last >= 0 else 1
        replaced, carry = self.members[:take], self.members[take:]
        carried_changed = self.changed[take:]
        unchanged = take == 1 and not self.changed[0]
        # From here `out` is no longer ours to discard: once replace_segments has renamed
        # it .swap it is the partition's data (a failure is finished by the loader).
        self.out, self.members, self.has_output, self.changed = None, [], [], []
        if unchanged:
            out.delete()  # one segment, unchanged: leave it be
        else:
            self._swap(out, replaced)
        if not carry:
            return
        if final:
            # Segments that kept nothing, after the last that kept something: each becomes
            # an empty segment of its own base (unless it already was one).
            for seg, changed in zip(carry, carried_changed):
                if changed:
                    self._swap(self._new_output(seg.base_offset), [seg])
            return
        # Not final: they start the next group, whose cleaned segment takes their base.
        self.out = self._new_output(carry[0].base_offset)
        self.members = carry
        self.has_output = [False] * len(carry)
        self.changed = carried_changed

    def _new_output(self, base_offset: int) -> LogSegment:
        stem = os.path.join(self.log.directory, segment_name(base_offset))
        for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES):
            try:
                self.log.fs.remove(stem + suffix + CLEANED_SUFFIX)  # a failed earlier pass
            except FileNotFoundError:
                pass
        return new_segment(self.log.directory, base_offset, self.config, None, CLEANED_SUFFIX,
                           fs=self.log.fs)

    def _swap(self, out: LogSegment, replaced: list[LogSegment]) -> None:
        out.on_become_inactive()  # final time index entry, fsync
        # Keep the newest modification time of the originals, as Kafka does (time
        # retention falls back to it for segments without timestamps).
        fs = self.log.fs
        mtime_ns = max(fs.mtime_ns(s.log_path) for s in replaced)
        fs.set_mtime_ns(out.log_path, mtime_ns)
        out.file.fsync()
        self.log.replace_segments(out, replaced, now_ms=self.now_ms)

    # -------------------------------------------------------------- records

    def _clean_into(self, seg: LogSegment, out: LogSegment) -> bool:
        """Append ``seg``'s surviving batches to ``out``, and the index entries of the ABORT
        markers kept; True if any batch changed."""
        changed = False
        for header, data in _batches(seg):
            kept = self._filter(header, data)
            if kept is not data:
                changed = True
            if kept is not None:
                out.append(kept, header if kept is data else parse_batch_header(kept, 0))
            for txn in self.txns.kept_aborted:
                out.append_aborted_txn(txn)
            self.txns.kept_aborted.clear()
        return changed

    def _filter_marker(self, header: BatchHeader, data: bytes) -> bytes | None:
        if not self.txns.on_control_batch(header, data):
            return data
        if header.attributes & DELETE_HORIZON_MASK:
            return None if self.now_ms >= header.base_timestamp else data
        # its transaction has no batch left: it goes once delete.retention.ms has passed
        return _reencode(header, decode_batch(data)[1],
                         self.now_ms + self.config.delete_retention_ms)

    def _filter(self, header: BatchHeader, data: bytes) -> bytes | None:
        """The batch to write for ``data``: itself, a re-encoded one, or None (dropped)."""
        if header.is_control:
            return self._filter_marker(header, data)
        if self.txns.on_data_batch(header):
            self.records_removed += header.records_count  # an aborted transaction's
            return None
        records = decode_batch(data)[1]
        horizon = header.base_timestamp if header.attributes & DELETE_HORIZON_MASK else None
        kept: list[Record] = []
        for record in records:
            if record.key is None:
                keep = False  # invalid in a compacted topic
            elif record.offset < self.offset_map.get(record.key, -1):
                keep = False  # a later record of the key is in the dirty section
            elif record.value is None and horizon is not None and self.now_ms >= horizon:
                keep = False  # a tombstone past its delete horizon
            else:
                keep = True
            if keep:
                kept.append(record)
            else:
                self.records_removed += 1
                if record.value is None:
                    self.tombstones_removed += 1
        set_horizon = horizon is None and any(r.value is None for r in kept)
        if len(kept) == len(records) and not set_horizon:
            return data
        if not kept:
            return None
        if set_horizon:
            horizon = self.now_ms + self.config.delete_retention_ms
        return _reencode(header, kept, horizon)
