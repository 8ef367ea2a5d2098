"""The log of one topic-partition: an ordered list of segments in ``<topic>-<partition>/``.

Owns (Kafka's UnifiedLog/LocalLog for one partition): offset assignment on append
(BaseOffset and PartitionLeaderEpoch rewritten in place; the CRC stays valid), segment
rolling, reads of whole batches, ListOffsets lookups, truncation (followers), log start
offset movement (DeleteRecords), retention, and swapping the log cleaner's output in for
the segments it compacted (`replace_segments`; the cleaning itself is cleaner.py's), and
the aborted-transaction indexes of its segments as a whole (`append_aborted_txn` into the
segment of the marker, `collect_aborted_txns` for a read_committed fetch). Loading and
crash recovery are loader.py's. The producer state is the partition's
(broker/partition.py), which hooks in where it must know of the log: `on_roll` (a
snapshot at each new segment) and `last_stable_offset` (how far the cleaner may go).

It knows the log end offset (LEO), the log start offset and the recovery point (the offset
up to which everything is fsynced). The high watermark (HW) is *not* the log's: callers own
it and pass it in where Kafka's log uses it (the upper bound of a consumer read, the limit
for retention). Time is injected as ``now_ms``; nothing here reads a clock.

Durability: appends go to the page cache; a segment is fsynced when it is rolled, on
`flush()` (also after flush.messages messages) and on `close()`.

Storage faults: an append or roll the file system refuses (ENOSPC, EACCES, EIO) raises
KafkaStorageError and leaves the log as it was before the call -- the LEO unchanged, a
partly written batch cut off again, a half-made roll either finished or not begun -- so the
same append succeeds once there is room again. Whether it is retried or the whole log
directory goes offline until restart, as in Kafka, is broker/log_dirs.py's policy.

Events go to ``on_event(kind, **fields)``, with exactly the fields broker/events.py
declares: ``segment_roll`` (topic, partition, base_offset of the new segment) and
``segment_delete`` (topic, partition, base_offset, reason: retention_ms, retention_bytes,
log_start_offset or truncate). Recovery is reported by return value (`RecoveryReport`).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from protocol.batch_walk import CORRUPT, BatchWalk
from broker.storage import REAL, FileHandle, FileSystem
from protocol.records import (
    ATTRIBUTES_POS,
    MAX_TIMESTAMP_POS,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    batch_crc_ok,
    parse_batch_header,
    refresh_crc,
    set_base_offset,
    set_partition_leader_epoch,
    validate_produced_batch,
)

from .config import LogConfig
from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
)
from .loader import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    RecoveryReport,
    fsync_dir,
    load_segments,
    new_segment,
)
from .segment import (
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    LogSegment,
    OffsetAndTimestamp,
)
from .txn_index import AbortedTxn

EventSink = Callable[..., None]

# ListOffsets special timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3



def _no_event(kind: str, **fields: Any) -> None:
    pass


class FlushPlan(NamedTuple):
    """A flush to run off the event loop: fsync ``files``, then hand it to log.flushed."""

    log: PartitionLog
    files: list[FileHandle]
    log_end_offset: int
    truncations: int


def fsync_plans(plans: list[FlushPlan]) -> list[FlushPlan]:
    """fsync every plan's files (on a worker thread); returns the plans that fully
    succeeded. A file closed meanwhile belonged to a segment that was rolled or closed,
    which fsyncs it anyway, so its plan is just dropped."""
    done = []
    for plan in plans:
        try:
            for f in plan.files:
                f.fsync()
        except OSError:
            continue
        done.append(plan)
    return done


class AppendInfo(NamedTuple):
    """Offsets a Produce response reports; log_append_time is -1 under CreateTime."""

    base_offset: int
    last_offset: int
    log_append_time: int


class PartitionLog:
    """The segments of one partition. Construct with `PartitionLog.open`."""

    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 on_event: EventSink | None = None, fs: FileSystem = REAL) -> None:
        self.directory = directory
        self.fs = fs
        self.topic = topic
        self.partition = partition
        self.config = config
        self._on_event = on_event or _no_event
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []  # segments' base offsets, for bisect
        self._leo = 0
        self._log_start_offset = 0
        self.recovery_point = 0
        self._truncations = 0  # lets a flush that ran off the event loop detect a truncation
        self._unflushed_messages = 0
        # Renamed-to-.deleted files waiting for file.delete.delay.ms: [due_ms or None, paths].
        self._pending_deletes: list[list[Any]] = []
        self.recovery_report: RecoveryReport | None = None
        self.unsynced: list[str] = []  # see `open(sync=False)`
        # Told the new active segment's base offset after every roll, before anything is
        # appended to it: the partition snapshots its producer state there.
        self.on_roll: Callable[[int], None] | None = None
        # The partition's last stable offset, when a partition owns this log: the log
        # cleaner never goes past it (an open transaction's batches stay as written).
        self.last_stable_offset: Callable[[], int] | None = None

    # ------------------------------------------------------------------ loading

    @classmethod
    def open(cls, directory: str, topic: str, partition: int, config: LogConfig, *,
             recovery_point: int = 0, log_start_offset: int = 0, clean_shutdown: bool = True,
             now_ms: int | None = None, on_event: EventSink | None = None,
             sync: bool = True, fs: FileSystem = REAL) -> "PartitionLog":
        """Load (creating if absent) the log in ``directory``; after an unclean shutdown,
        recover the segments at/after ``recovery_point`` (see loader.py for the rules).
        `recovery_report` tells what recovery did (None if nothing was recovered).
        ``sync=False``: the paths recovery changed are left in `unsynced` for the caller to
        fsync (then `mark_synced`) before the log's recovery point is checkpointed."""
        log = cls(directory, topic, partition, config, on_event, fs)
        loaded = load_segments(directory, topic, partition, config,
                               recovery_point=recovery_point, log_start_offset=log_start_offset,
                               clean_shutdown=clean_shutdown, now_ms=now_ms, sync=sync, fs=fs)
        log.unsynced = loaded.unsynced
        log.segments = loaded.segments
        log._bases = [s.base_offset for s in loaded.segments]
        log._leo = loaded.log_end_offset
        log._log_start_offset = loaded.log_start_offset
        # Everything up to the LEO is on disk: a clean close fsynced it, recovery just did.
        log.recovery_point = loaded.log_end_offset
        log.recovery_report = loaded.report
        return log

    def mark_synced(self) -> None:
        """The caller fsynced `unsynced` (see `open`)."""
        for segment in self.segments:
            segment.mark_synced()
        self.unsynced = []

    def _new_segment(self, base_offset: int, created_ms: int | None) -> LogSegment:
        return new_segment(self.directory, base_offset, self.config, created_ms, fs=self.fs)

    # ------------------------------------------------------------------ properties

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def size(self) -> int:
        """Bytes of all segments' .log files (what retention.bytes bounds)."""
        return sum(s.size for s in self.segments)

    def _emit(self, kind: str, **fields: Any) -> None:
        self._on_event(kind, topic=self.topic, partition=self.partition, **fields)

    # ------------------------------------------------------------------ appending

    def append(self, batch: bytes | bytearray, *, leader_epoch: int = 0, now_ms: int,
               origin: str = "client", validated: BatchHeader | None = None) -> AppendInfo:
        """Append one batch as leader: validate, assign offsets from the LEO, stamp the
        leader epoch, roll if needed, write.

        A ``bytearray`` is rewritten in place (no copy); ``bytes`` are copied once. Checks
        are `protocol.records.validate_produced_batch`'s, with max.message.bytes, in its
        (Kafka's) order -- CorruptRecordError (bad magic/length/CRC), InvalidRecordError
        (not exactly one batch, RecordsCount != LastOffsetDelta + 1, a control batch from
        a client), RecordTooLargeError (> max.message.bytes), UnsupportedCodecError --
        then RecordBatchTooLargeError (> segment.bytes); nothing is written on any of them.
        ``origin="coordinator"`` (Kafka's AppendOrigin.COORDINATOR) may write control
        batches (transaction markers); clients may not.

        ``validated``: the header `protocol.records.validate_produced_batch` returned for
        these very bytes. The caller has checked structure, CRC and max.message.bytes, so
        only the segment-size check remains (saves a second CRC pass over the batch).
        """
        buf = batch if isinstance(batch, bytearray) else bytearray(batch)
        if validated is None:
            validated = validate_produced_batch(buf, self.config.max_message_bytes,
                                                allow_control=origin != "client")
        # Kafka's UnifiedLog.append checks segment.bytes after the batch is validated.
        if validated.size > self.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"batch of {validated.size} bytes exceeds segment.bytes {self.config.segment_bytes}")
        set_base_offset(buf, 0, self._leo)
        set_partition_leader_epoch(buf, 0, leader_epoch)
        log_append_time = -1
        if self.config.log_append_time:
            # Kafka's setMaxTimestamp(LOG_APPEND_TIME, now): the timestamp-type bit and
            # MaxTimestamp are inside the CRC (which covers Attributes onwards), so this is
            # the one case that re-computes it.
            attributes = struct.unpack_from(">h", buf, ATTRIBUTES_POS)[0] | TIMESTAMP_TYPE_MASK
            struct.pack_into(">h", buf, ATTRIBUTES_POS, attributes)
            struct.pack_into(">q", buf, MAX_TIMESTAMP_POS, now_ms)
            refresh_crc(buf, 0)
            log_append_time = now_ms
        header = parse_batch_header(buf, 0)
        self._roll_if_needed(header.size, header.max_timestamp, header.base_offset,
                             header.last_offset, now_ms)
        with self._undo_on_storage_error():
            self.active.append(buf, header)
            self._leo = header.last_offset + 1
            self._count_unflushed(header.records_count)
        return AppendInfo(header.base_offset, header.last_offset, log_append_time)

    def _roll_if_needed(self, size: int, max_timestamp: int, first_offset: int,
                        last_offset: int, now_ms: int) -> None:
        try:
            self._maybe_roll(size, max_timestamp, first_offset, last_offset, now_ms)
        except OSError as exc:  # the roll left the old segment active and whole
            raise self._storage_error(exc) from exc

    @contextlib.contextmanager
    def _undo_on_storage_error(self) -> Iterator[None]:
        """Undo an append into the active segment that hit an OSError -- the batch, its
        index entries, a failed flush.messages fsync -- and raise KafkaStorageError, so
        nothing unacknowledged can be read now or be found after a restart."""
        leo, unflushed = self._leo, self._unflushed_messages
        segment = self.active
        mark = segment.mark()
        try:
            yield
        except OSError as exc:
            segment.rollback(mark)
            self._leo, self._unflushed_messages = leo, unflushed
            raise self._storage_error(exc) from exc

    def _storage_error(self, exc: OSError) -> KafkaStorageError:
        return KafkaStorageError(
            f"{self.topic}-{self.partition}: cannot append at offset {self._leo}: {exc}")

    def append_as_follower(self, data: bytes | bytearray, *, now_ms: int) -> tuple[int, int] | None:
        """Append batches fetched from the leader, keeping their offsets and leader epochs.

        Whole batches only: a trailing partial batch (fetch responses may end in one) is
        ignored. Every batch must pass its CRC and start at or after the LEO, in order.
        Returns (first offset, last offset) appended, or None if ``data`` held no batch.
        """
        view = memoryview(data)
        headers: list[tuple[int, BatchHeader]] = []
        expected = self._leo
        walk = BatchWalk(view)
        for pos, header in walk:
            if not batch_crc_ok(view, pos, header):
                raise CorruptRecordError(f"batch CRC-32C mismatch at {pos}")
            if header.base_offset < expected:
                raise InvalidRecordError(
                    f"follower append at offset {header.base_offset} below expected {expected}")
            headers.append((pos, header))
            expected = header.last_offset + 1
        stop = walk.stop
        assert stop is not None
        if stop.reason == CORRUPT:
            raise CorruptRecordError(f"bad batch header at {stop.position}: {stop.problem}")
        if not headers:
            return None
        pos = stop.position  # the end of the last whole batch
        first, last = headers[0][1], headers[-1][1]
        self._roll_if_needed(pos, max(h.max_timestamp for _, h in headers), first.base_offset,
                             last.last_offset, now_ms)
        with self._undo_on_storage_error():
            self.active.append_chunk(view[:pos], headers)
            self._leo = last.last_offset + 1
            self._count_unflushed(sum(h.records_count for _, h in headers))
        return first.base_offset, last.last_offset

    def _count_unflushed(self, messages: int) -> None:
        self._unflushed_messages += messages
        if self._unflushed_messages >= self.config.flush_interval_messages:
            self.flush()

    # ------------------------------------------------------------------ rolling

    def _maybe_roll(self, size: int, max_timestamp: int, first_offset: int, last_offset: int,
                    now_ms: int) -> None:
        reason = self.active.should_roll(
            batch_size=size, max_timestamp=max_timestamp, last_offset=last_offset,
            now_ms=now_ms, segment_bytes=self.config.segment_bytes,
            segment_ms=self.config.segment_ms)
        if reason is not None:  # size, time, index_full or offset_overflow
            self.roll(now_ms, base_offset=max(self._leo, first_offset))

    def roll(self, now_ms: int, *, base_offset: int | None = None) -> LogSegment:
        """Close the active segment for appends (fsyncing it) and start a new one at the
        LEO (or ``base_offset``, for a follower whose next batch starts past a gap)."""
        new_base = self._leo if base_offset is None else max(base_offset, self._leo)
        old = self.active
        if old.size == 0 and old.base_offset == new_base:
            return old  # already an empty segment at the right offset
        # Every step up to creating the new segment may fail (full disk, unwritable
        # directory) and leaves `old` active and whole, so the roll can be retried.
        if old.size:
            old.on_become_inactive()
        # Stale files at the new name (left by an earlier truncation) must not be reused.
        stale = os.path.join(self.directory, f"{new_base:020d}")
        for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES):
            if self.fs.exists(stale + suffix):
                self.fs.remove(stale + suffix)
        seg = self._new_segment(new_base, created_ms=now_ms)
        if old.size == 0:
            # An empty segment holds nothing: replace it rather than keep an empty file.
            self.segments.pop()
            try:
                old.delete()
            except OSError:
                pass  # an empty segment file left over is harmless (loaded as empty)
        self.segments.append(seg)
        self._bases = [s.base_offset for s in self.segments]
        fsync_dir(self.directory, self.fs)
        # Every older segment was fsynced when it stopped being active.
        self.recovery_point = max(self.recovery_point, new_base)
        if old.size:
            self._emit("segment_roll", base_offset=new_base)
        if self.on_roll is not None:
            self.on_roll(new_base)
        return seg

    # ------------------------------------------------------------------ reading

    def _segment_index(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (floor by base offset)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> bytes:
        """Bytes of whole batches from the batch containing ``fetch_offset``: one pread.

        At most ``max_bytes``, except that the first batch comes whole even if larger
        (``min_one_message``, as for the first partition of a Fetch). ``max_offset`` is an
        exclusive bound -- the caller's HW for consumers -- : a batch is served only if its
        last offset is below it. Returns b'' at the LEO (or at ``max_offset``). Raises
        OffsetOutOfRangeError if ``fetch_offset`` < log start offset or > LEO.
        """
        leo = self._leo
        if fetch_offset < self._log_start_offset or fetch_offset > leo:
            raise OffsetOutOfRangeError(fetch_offset, self._log_start_offset, leo)
        upper = leo if max_offset is None else min(max_offset, leo)
        if fetch_offset >= upper:
            return b""
        upper_segment = self._segment_index(upper) if upper < leo else None
        i = self._segment_index(fetch_offset)
        while i < len(self.segments):
            seg = self.segments[i]
            max_position = None
            if upper_segment is not None:
                if i > upper_segment:
                    return b""
                if i == upper_segment:
                    found = seg.translate_offset(upper)
                    max_position = found[0] if found is not None else None
            found_range = seg.read(fetch_offset, max_bytes, max_position, min_one_message)
            if found_range is None:
                if i == upper_segment:
                    return b""
                i += 1  # nothing at/after fetch_offset here (a gap): try the next segment
                continue
            position, size = found_range
            return seg.pread(position, size) if size else b""
        return b""

    # ------------------------------------------------------------------ ListOffsets

    def earliest(self) -> OffsetAndTimestamp:
        return OffsetAndTimestamp(self._log_start_offset, -1)

    def latest(self) -> OffsetAndTimestamp:
        return OffsetAndTimestamp(self._leo, -1)

    def max_timestamp_offset(self) -> OffsetAndTimestamp | None:
        """ListOffsets -3 (KIP-734): the largest timestamp and the last offset of the batch
        carrying it (batch granularity, as Kafka before 3.8); None if no timestamps."""
        best = max(self.segments, key=lambda s: s.max_timestamp)
        if best.max_timestamp < 0:
            return None
        return OffsetAndTimestamp(best.offset_of_max_timestamp, best.max_timestamp)

    def active_segment_headers(self) -> Iterator[BatchHeader]:
        """Headers of the active segment's batches, oldest first (records are not read)."""
        for _pos, header in self.active.headers():
            yield header

    def batches_from(self, offset: int) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        """(segment, position, header) of every batch whose last offset is at or past
        `offset`, oldest first, by their headers (for replaying producer state: the
        caller reads a batch's bytes with `segment.pread` only where it must)."""
        first = self._segment_index(offset)
        for seg in self.segments[first:]:
            found = seg.translate_offset(offset)
            if found is None:
                continue  # nothing at or past the offset here (a gap, or an empty segment)
            for pos, header in seg.walk_from(found[0]):
                yield seg, pos, header

    def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """ListOffsets by time (Kafka's fetchOffsetByTimestamp).

        -2 earliest, -1 latest (the LEO: the caller caps it at HW for consumers), -3 the
        batch holding the largest timestamp; otherwise the first batch at or after the log
        start offset whose max timestamp is >= ``timestamp`` (see
        `LogSegment.find_offset_by_timestamp` for the batch-granularity rule). None when
        no batch qualifies.
        """
        if timestamp == EARLIEST_TIMESTAMP:
            return self.earliest()
        if timestamp == LATEST_TIMESTAMP:
            return self.latest()
        if timestamp == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        for seg in self.segments:
            if seg.max_timestamp >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return found
        return None

    # ------------------------------------------------------------------ aborted transactions

    def append_aborted_txn(self, txn: AbortedTxn, *, unless_present: bool = False) -> None:
        """Record an aborted transaction in the .txnindex of the segment holding its ABORT
        marker (`txn.last_offset`, appended already); `unless_present`: not if that index
        already reaches its marker (a replay over entries kept). OSError: not recorded."""
        seg = self.segments[self._segment_index(txn.last_offset)]
        last = seg.txn_index.last_offset
        if unless_present and last is not None and last >= txn.last_offset:
            return
        seg.append_aborted_txn(txn)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), for a
        read_committed Fetch (Kafka's LocalLog.collectAbortedTransactions): from the segment
        holding the fetch offset onward, until an entry's LSO shows no later segment can
        hold one (TransactionIndex.collect_aborted)."""
        found: list[AbortedTxn] = []
        for seg in self.segments[self._segment_index(fetch_offset):]:
            result = seg.collect_aborted_txns(fetch_offset, upper_bound_offset)
            found.extend(result.aborted)
            if result.is_complete:
                break
        return found

    def has_aborted_txns_from(self, offset: int) -> bool:
        """Whether a segment from the one holding `offset` on indexes an aborted
        transaction (most logs have none: their read_committed reads skip the search)."""
        return any(len(seg.txn_index) for seg in self.segments[self._segment_index(offset):])

    def txn_index_stale_from(self) -> int | None:
        """The base offset of the first segment whose .txnindex may miss entries (see
        LogSegment.txn_index_stale), or None."""
        return next((s.base_offset for s in self.segments if s.txn_index_stale), None)

    def mark_txn_indexes_rebuilt(self) -> None:
        for seg in self.segments:
            seg.txn_index_stale = False

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at or after ``offset`` (a follower diverged from its leader).

        A batch straddling ``offset`` goes whole, so the new LEO may be below ``offset``.
        Returns True if anything was removed.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._leo:
            return False
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while len(self.segments) > 1 and self.active.base_offset > offset:
            self._schedule_delete(self.segments.pop(), "truncate")
        self._bases = [s.base_offset for s in self.segments]
        self.active.truncate_to(offset)
        self.active.flush()
        self._leo = self.active.read_next_offset()
        self._log_start_offset = min(self._log_start_offset, self._leo)
        self.recovery_point = min(self.recovery_point, self._leo)
        self._truncations += 1
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log, empty, at ``offset`` (LEO = log start)."""
        for seg in self.segments:
            self._schedule_delete(seg, "truncate")
        self.segments = [self._new_segment(offset, created_ms=None)]
        self._bases = [offset]
        fsync_dir(self.directory, self.fs)
        self._leo = self._log_start_offset = self.recovery_point = offset
        self._truncations += 1

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset to ``offset`` (never backwards).

        The caller checks ``offset`` <= HW. Segments wholly below the new start go at the
        next `apply_retention`. Returns the log start offset.
        """
        if offset > self._leo or offset < 0:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, self._leo)
        self._log_start_offset = max(self._log_start_offset, offset)
        return self._log_start_offset

    # ------------------------------------------------------------------ retention

    def apply_retention(self, now_ms: int, *, high_watermark: int | None = None) -> list[int]:
        """Delete the oldest segments Kafka's deleteOldSegments would; return their bases.

        In order: segments wholly below the log start offset; then, when cleanup.policy
        includes "delete", segments whose largest timestamp is more than retention.ms old
        and the oldest segments while the log exceeds retention.bytes. A segment is only
        eligible if the next one starts at or below the HW (default: the LEO), so nothing
        a consumer has not been allowed to see is deleted; the empty active segment never
        goes, and if every segment goes the log first rolls so one remains. The log start
        offset moves to the new first segment. Also unlinks .deleted files that have
        waited file.delete.delay.ms.
        """
        self._purge_deleted(now_ms)
        hw = self._leo if high_watermark is None else min(high_watermark, self._leo)
        deleted = self._delete_old(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset,
            "log_start_offset", hw, now_ms)
        if self.config.deletes and self.config.retention_ms >= 0:
            deleted += self._delete_old(
                lambda seg, nxt: now_ms - seg.largest_timestamp > self.config.retention_ms,
                "retention_ms", hw, now_ms)
        if self.config.deletes and self.config.retention_bytes >= 0:
            excess = self.size - self.config.retention_bytes

            def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            if excess > 0:
                deleted += self._delete_old(over_size, "retention_bytes", hw, now_ms)
        self._purge_deleted(now_ms)
        return deleted

    def _delete_old(self, predicate: Callable[[LogSegment, LogSegment | None], bool],
                    reason: str, hw: int, now_ms: int) -> list[int]:
        doomed: list[LogSegment] = []
        for i, seg in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            upper = nxt.base_offset if nxt is not None else self._leo
            last_and_empty = nxt is None and seg.size == 0
            if last_and_empty or hw < upper or not predicate(seg, nxt):
                break
            doomed.append(seg)
        if not doomed:
            return []
        if len(doomed) == len(self.segments):
            self.roll(now_ms)  # keep an active segment to append to
        del self.segments[:len(doomed)]
        self._bases = [s.base_offset for s in self.segments]
        self._log_start_offset = max(self._log_start_offset, self.segments[0].base_offset)
        failed: OSError | None = None
        for seg in doomed:
            try:
                self._schedule_delete(seg, reason)
            except OSError as exc:
                # the files keep their names (their descriptors are closed): they lie below
                # the log start offset, so the next start's retention deletes them
                failed = failed or exc
        if failed is not None:
            raise failed
        fsync_dir(self.directory, self.fs)
        return [seg.base_offset for seg in doomed]

    def _schedule_delete(self, seg: LogSegment, reason: str) -> None:
        # Due time unknown here (no clock): the next _purge_deleted(now_ms) sets it.
        self._pending_deletes.append([None, seg.rename_to_deleted()])
        self._emit("segment_delete", base_offset=seg.base_offset, reason=reason)

    def _purge_deleted(self, now_ms: int | None) -> None:
        """Unlink .deleted files whose delay has passed (all of them if now_ms is None)."""
        keep = []
        for entry in self._pending_deletes:
            if entry[0] is None and now_ms is not None:
                entry[0] = now_ms + self.config.file_delete_delay_ms
            if now_ms is None or entry[0] <= now_ms:
                for path in entry[1]:
                    try:
                        self.fs.remove(path)
                    except FileNotFoundError:
                        pass
            else:
                keep.append(entry)
        self._pending_deletes = keep

    # ------------------------------------------------------------------ compaction

    def replace_segments(self, new: LogSegment, old: list[LogSegment], *,
                         now_ms: int | None = None) -> None:
        """Swap the log cleaner's output ``new`` (files ``*.cleaned``, complete and
        fsynced) in for the consecutive non-active segments ``old`` (Kafka's
        replaceSegments). Crash points, each finished or undone by the loader:
        ``.cleaned`` -> ``.swap`` (from here the swap is complete and wins), the old
        segments renamed ``.deleted`` (unlinked after file.delete.delay.ms), ``.swap`` ->
        final names. ``new`` must hold exactly ``old``'s surviving batches and the last
        old segment must end below ``new``'s next offset unless ``old`` is one segment
        of ``new``'s base offset (the loader deletes the bases in that range). No event:
        the caller reports the clean."""
        first = self.segments.index(old[0])
        if (self.segments[first:first + len(old)] != old or first + len(old) >= len(self.segments)
                or new.base_offset != old[0].base_offset):
            raise ValueError("replace_segments: not consecutive non-active segments of this log")
        new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self.directory, self.fs)
        due = None if now_ms is None else now_ms + self.config.file_delete_delay_ms
        for seg in old:
            self._pending_deletes.append([due, seg.rename_to_deleted()])
        new.change_file_suffixes(SWAP_SUFFIX, "")
        fsync_dir(self.directory, self.fs)
        self.segments[first:first + len(old)] = [new]
        self._bases = [s.base_offset for s in self.segments]

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """fsync the active segment (older ones were fsynced on roll); recovery point = LEO."""
        self.active.flush()
        self.recovery_point = self._leo
        self._unflushed_messages = 0

    def flush_plan(self) -> FlushPlan:
        """What a flush off the event loop must fsync to move the recovery point to the
        current LEO (segments before the active one were fsynced when rolled)."""
        return FlushPlan(self, self.active.files(), self._leo, self._truncations)

    def flushed(self, plan: FlushPlan) -> None:
        """The plan's files are fsynced: move the recovery point, unless the log was
        truncated meanwhile (records below the planned LEO may then be new and unsynced)."""
        if plan.truncations == self._truncations:
            self.recovery_point = max(self.recovery_point, min(plan.log_end_offset, self._leo))

    def close(self, *, flush: bool = True) -> None:
        """Flush and close every segment; pending .deleted files are unlinked now. Every
        segment is closed even if one cannot be flushed; the first OSError is raised.
        `flush=False`: a log about to be deleted, closed without fsyncs."""
        failed: OSError | None = None
        for seg in self.segments:
            try:
                seg.close(flush=flush)
            except OSError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
        self.recovery_point = self._leo
        self._purge_deleted(None)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self._log_start_offset}, "
                f"leo={self._leo}, segments={len(self.segments)})")
