"""One log segment: a .log file of whole RecordBatch v2 batches plus its two sparse indexes
and its aborted-transaction index.

Owns: the files ``<20-digit base offset>.log/.index/.timeindex/.txnindex`` of one segment
(Kafka's LogSegment): appending batches (and deciding when to add index entries), locating
the batch that contains an offset or the first batch at/after a timestamp, reading byte
ranges of whole batches, recovery (re-scan + CRC check + index rebuild + truncation of the
first invalid byte onward), truncation, and the segment's roll conditions.

The .txnindex (broker/log/txn_index.py) holds the aborted transactions whose ABORT marker
lies in this segment. Its entries carry the LSO at the time of the marker, which only the
partition's producer state knows, so the segment cannot rebuild it from its own bytes:
recovery keeps the entries below the recovered end and marks the index `txn_index_stale`
for the partition to re-derive the rest by replaying its producer state (Kafka's
LogSegment.recover does the same with the ProducerStateManager it is handed).

Batches are opaque here: only the 61-byte batch header is ever parsed (runs of batches
through protocol/batch_walk, which also says where a torn or corrupt tail starts),
records are never decoded. Plain synchronous positioned reads and writes through the
storage seam (broker/storage; on the real disk, raw descriptors and ``os.pread``/
``os.pwrite``): appends land in the page cache, ``flush()`` fsyncs. The .log file holds
exactly the valid bytes -- there is no preallocation.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

from protocol.batch_walk import CORRUPT, BatchWalk
from protocol.records import (
    BATCH_OVERHEAD,
    DELETE_HORIZON_MASK,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    RecordError,
    batch_crc_ok,
    decode_batch,
    parse_batch_header,
)

from broker.storage import REAL, FileHandle, FileSystem

from .errors import CorruptSegmentError
from .index import CorruptIndexError, OffsetIndex, TimeIndex
from .txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
DELETED_SUFFIX = ".deleted"

HEADER_SIZE = BATCH_OVERHEAD  # the 61-byte RecordBatch v2 header (docs/PROTOCOL.md §3)
_INT32_MAX = (1 << 31) - 1
# Header walks read this much at a time so a scan over many small batches costs one
# syscall per chunk, not one per batch. Recovery reads bigger chunks (it reads everything).
_WALK_CHUNK = 64 * 1024
_READ_ENDS = 8  # read ends a segment remembers: a few readers per partition
_RECOVER_CHUNK = 1024 * 1024


def segment_name(base_offset: int) -> str:
    """Kafka's file stem: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


class OffsetAndTimestamp(NamedTuple):
    """Answer of a ListOffsets lookup (Kafka's TimestampAndOffset, offset first as the
    ListOffsets response lists them); timestamp -1 where none applies."""

    offset: int
    timestamp: int


def _header(buf: bytes | bytearray | memoryview, pos: int) -> BatchHeader:
    """Parse and minimally validate one header; any defect -> CorruptSegmentError.

    The checks are the ones Kafka's FileLogInputStream makes before trusting a size:
    magic 2, and a length that at least covers the header itself.
    """
    try:
        header = parse_batch_header(buf, pos)
    except (ValueError, struct.error) as exc:
        raise CorruptSegmentError(f"unparsable batch header: {exc}") from exc
    if header.magic != MAGIC:
        raise CorruptSegmentError(f"batch magic {header.magic} != 2")
    if header.size < HEADER_SIZE or header.last_offset_delta < 0:
        raise CorruptSegmentError(f"impossible batch length {header.batch_length}")
    return header


class LogSegment:
    """A segment of a partition log, starting at ``base_offset``.

    Invariants: the .log holds whole batches only; every batch's base offset is >= the
    segment base offset and its last offset fits a relative int32; index entries point
    at batch starts.
    """

    def __init__(self, directory: str, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10 * 1024 * 1024, created_ms: int | None = None,
                 file_suffix: str = "", fs: FileSystem = REAL) -> None:
        # ``file_suffix`` (e.g. ".cleaned") names the files ``<base>.log<suffix>`` etc.: the
        # log cleaner writes its output under such names, then `change_file_suffixes`.
        self.directory = directory
        self.base_offset = base_offset
        self._fs = fs
        self.index_interval_bytes = index_interval_bytes
        stem = os.path.join(directory, segment_name(base_offset))
        self.log_path = stem + LOG_SUFFIX + file_suffix
        # Remember whether the indexes were there before we (re)create them: a missing
        # index is rebuilt from the .log (as Kafka's LogLoader does).
        self.indexes_existed = (fs.exists(stem + INDEX_SUFFIX + file_suffix)
                                and fs.exists(stem + TIME_INDEX_SUFFIX + file_suffix))
        self._file: FileHandle | None = fs.open(self.log_path)
        try:
            self.size = self._file.size()
            self.offset_index = OffsetIndex(stem + INDEX_SUFFIX + file_suffix, base_offset,
                                            max_index_size, fs=fs)
            try:
                self.time_index = TimeIndex(stem + TIME_INDEX_SUFFIX + file_suffix, base_offset,
                                            max_index_size, fs=fs)
            except BaseException:
                self.offset_index.close()
                raise
            # opened lazily: most segments never hold an aborted transaction
            self.txn_index = TransactionIndex(stem + TXN_INDEX_SUFFIX + file_suffix,
                                              base_offset, fs=fs)
        except BaseException:
            # e.g. a roll into a directory that became unwritable: leak no descriptor; the
            # empty .log left behind is replaced when the roll is retried
            self._file.close()
            self._file = None
            raise
        self._bytes_since_last_index_entry = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        # Wall-clock creation time for time-based rolling when batches carry no timestamps.
        # Unknown for segments loaded from disk until the first roll check sees `now_ms`.
        self.created_ms = created_ms
        self._first_batch_timestamp: int | None = None
        # offset -> position where recent `read`s ended: every batch before the position
        # ends below the offset. Fetches are sequential (a follower's or consumer's next
        # fetch starts where its last ended), so a lookup from there reads one header where
        # the offset index's entry, up to index.interval.bytes back, meant walking every
        # small batch since. Several, oldest first: a partition's followers and consumers
        # read it at their own offsets, and one remembered end served only the last of
        # them. Forgotten whenever the segment is cut back.
        self._read_ends: dict[int, int] = {}
        # Written since the last fsync? Sealed segments are clean, so closing a log with
        # many segments costs fsyncs only for the ones that changed.
        self._dirty = False
        # A failed append was undone in memory but the files could not be cut back yet;
        # the next append cuts them first.
        self._torn = False
        # Entries may be missing from the .txnindex (recovery re-read the .log, a cleaner
        # swap was finished at start-up, or the file did not pass its check): the
        # partition replays its producer state over this segment to add them.
        self.txn_index_stale = False

    # ------------------------------------------------------------------ loading / recovery

    def load(self) -> None:
        """Load both indexes (clean path). Raises CorruptIndexError if either is missing
        or fails its sanity check; the caller then runs `recover()`."""
        if not self.indexes_existed and self.size > 0:
            raise CorruptIndexError(f"index files of {self.log_path} are missing")
        self.offset_index.load(self.size)
        self.time_index.load()
        self.load_txn_index()
        # After a clean close the time index's last entry is the segment's max timestamp
        # (close and roll append it), as in Kafka's LogSegment.
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        if self.max_timestamp < 0:
            self.offset_of_max_timestamp = -1

    def recover(self) -> int:
        """Re-scan every batch, rebuild both indexes, cut the .log at the first invalid byte.

        A batch is valid when its header parses (magic 2, sane length), it lies wholly
        inside the file, its offsets are monotonic and fit the segment, and its CRC-32C
        matches. Returns the number of bytes truncated (0 if the segment was intact).
        """
        had_index_entries = (self.offset_index.file.size() > 0
                             or self.time_index.file.size() > 0)
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = -1, -1
        self._bytes_since_last_index_entry = 0
        self._first_batch_timestamp = None
        file_size = self.file.size()
        next_offset = self.base_offset
        valid_end = 0
        # A torn tail or a corrupt header ends the walk; so do, here, offsets going
        # backwards or past the segment's range and a CRC mismatch.
        walk = BatchWalk(self.pread, 0, file_size, read_size=_RECOVER_CHUNK)
        for pos, header in walk:
            if header.base_offset < next_offset or header.last_offset - self.base_offset > _INT32_MAX:
                break
            data = walk.batch(pos, header)
            if len(data) < header.size or not batch_crc_ok(data, 0, header):
                break
            self._index_batch(header, pos)
            next_offset = header.last_offset + 1
            valid_end = pos + header.size
            self._bytes_since_last_index_entry += header.size
        truncated = file_size - valid_end
        if truncated:
            self.file.truncate(valid_end)
        self.size = valid_end
        self._read_ends.clear()
        # What was read may sit only in the page cache (a kill -9 keeps it, a power cut
        # would not): it is made durable before the recovery point moves past it. A segment
        # that was empty, indexes included, and still is has nothing to make durable.
        self._dirty = file_size > 0 or had_index_entries
        # Kafka's recover() ends by recording the final max timestamp in the time index.
        self._seal_max_timestamp()
        self.load_txn_index()
        self.txn_index.truncate_to(next_offset)
        self.txn_index_stale = True
        return truncated

    def load_txn_index(self) -> None:
        """Read the .txnindex (absent: none aborted here). One that fails its check is
        emptied and marked stale, for the partition's producer-state replay to rebuild."""
        try:
            self.txn_index.load()
        except CorruptIndexError:
            self.txn_index.reset()
            self.txn_index_stale = True

    def read_next_offset(self) -> int:
        """The offset after this segment's last batch (its share of the LEO).

        Walks headers from the last offset-index entry to the end, as Kafka's
        readNextOffset does. Raises CorruptSegmentError if the walk does not end exactly at
        the end of the file (a tail that a clean shutdown should never leave).
        """
        _, position = self.offset_index.lookup((1 << 63) - 1)
        next_offset = self.base_offset
        end = position
        for pos, header in self._walk(position, self.size):
            if header.base_offset < next_offset:
                raise CorruptSegmentError(f"{self.log_path}: offsets go backwards at {pos}")
            next_offset = header.last_offset + 1
            end = pos + header.size
        if end != self.size:
            raise CorruptSegmentError(f"{self.log_path}: incomplete batch at {end}")
        return next_offset

    # ------------------------------------------------------------------ appending

    def mark(self) -> tuple:
        """What `rollback` needs to undo the appends made after this call."""
        return (self.size, self.max_timestamp, self.offset_of_max_timestamp,
                self._first_batch_timestamp, self._bytes_since_last_index_entry,
                len(self.offset_index), len(self.time_index))

    def rollback(self, mark: tuple) -> None:
        """Undo the appends since `mark` after a failed write (ENOSPC may leave part of a
        batch in the file, an index entry may point past the end). Memory is restored
        at once, so reads never see the torn bytes; the files are cut now if the file
        system allows, else before the next append (`repair`)."""
        (self.size, self.max_timestamp, self.offset_of_max_timestamp,
         self._first_batch_timestamp, self._bytes_since_last_index_entry,
         offset_entries, time_entries) = mark
        self.offset_index.forget_after(offset_entries)
        self.time_index.forget_after(time_entries)
        self._torn = True
        try:
            self.repair()
        except OSError:
            pass  # still refused: the next append retries first, and fails if it must

    def repair(self) -> None:
        """Cut the files back to what memory says they hold (after a `rollback` that could
        not). Raises OSError while the file system still refuses."""
        if not self._torn:
            return
        self.file.truncate(self.size)
        self.offset_index.sync_file_length()
        self.time_index.sync_file_length()
        self._torn = False

    def append(self, batch: bytes | bytearray | memoryview, header: BatchHeader) -> int:
        """Append one batch (already validated, offsets assigned); returns its position.
        On OSError the caller undoes it with `rollback` (see PartitionLog.append)."""
        self.repair()
        position = self.size
        self._dirty = True
        self._index_batch(header, position)
        self.file.pwrite(batch, position)
        self.size += header.size
        self._bytes_since_last_index_entry += header.size
        return position

    def append_chunk(self, data: bytes | bytearray | memoryview,
                     headers: list[tuple[int, BatchHeader]]) -> None:
        """Append several contiguous batches in one write (follower replication);
        ``headers`` are (position within ``data``, header) of each batch."""
        self.repair()
        base = self.size
        self._dirty = True
        for rel, header in headers:
            self._index_batch(header, base + rel)
            self._bytes_since_last_index_entry += header.size
        self.file.pwrite(data, base)
        self.size += len(data)

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction whose ABORT marker is in this segment (after the
        marker itself was appended). On OSError the entry is not recorded."""
        self._dirty = True
        self.txn_index.append(txn)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        return self.txn_index.collect_aborted(fetch_offset, upper_bound_offset)

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        # Kafka's LogSegment.append: track the max timestamp (and the last offset of the
        # batch carrying it), and add an index entry for this batch once more than
        # index.interval.bytes have gone by since the last one.
        if self._first_batch_timestamp is None and position == 0:
            self._first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if (self._bytes_since_last_index_entry > self.index_interval_bytes
                and not self.offset_index.is_full and not self.time_index.is_full):
            # (A full index only happens when rebuilding after segment.index.bytes shrank;
            # lookups past the last entry then just scan further.)
            self.offset_index.append(header.last_offset, position)
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0

    def should_roll(self, *, batch_size: int, max_timestamp: int, last_offset: int,
                    now_ms: int, segment_bytes: int, segment_ms: int) -> str | None:
        """Why the next batch must go to a new segment, or None (Kafka's shouldRoll).

        * ``size``: this segment would grow past segment.bytes;
        * ``time``: the segment is older than segment.ms, measured between the first
          batch's max timestamp and the incoming one (wall clock ``now_ms`` against the
          creation time when batches carry no timestamps);
        * ``index_full``: an index reached segment.index.bytes;
        * ``offset_overflow``: the batch's last offset does not fit a relative int32.
        """
        if self.created_ms is None:
            self.created_ms = now_ms
        if self.size > 0 and self.size > segment_bytes - batch_size:
            return "size"
        if self.size > 0 and self._time_waited_for_roll(now_ms, max_timestamp) > segment_ms:
            return "time"
        if self.offset_index.is_full or self.time_index.is_full:
            return "index_full"
        if last_offset - self.base_offset > _INT32_MAX:
            return "offset_overflow"
        return None

    def _time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        first = self.first_batch_timestamp()
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - (self.created_ms if self.created_ms is not None else now_ms)

    def first_batch_timestamp(self) -> int | None:
        if self._first_batch_timestamp is None and self.size >= HEADER_SIZE:
            self._first_batch_timestamp = _header(self._pread(HEADER_SIZE, 0), 0).max_timestamp
        return self._first_batch_timestamp

    def on_become_inactive(self) -> None:
        """The log rolled past this segment: record its final max timestamp and fsync it."""
        self._seal_max_timestamp()
        self.flush()

    def _seal_max_timestamp(self) -> None:
        # Kafka appends the segment's max timestamp to the time index when the segment
        # becomes inactive, is recovered or closed, so a reopen finds it in the last entry.
        if self.max_timestamp >= 0:
            before = len(self.time_index)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                         skip_full_check=True)
            self._dirty = self._dirty or len(self.time_index) != before

    # ------------------------------------------------------------------ reading

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``."""
        _, position = self.offset_index.lookup(offset)
        for end_offset, end in self._read_ends.items():
            if end_offset <= offset and end > position:
                position = end
        for pos, header in self._walk(max(position, start_position), self.size):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(self, start_offset: int, max_bytes: int, max_position: int | None = None,
             min_one_message: bool = True) -> tuple[int, int] | None:
        """Byte range (position, size) of whole batches from the batch containing
        ``start_offset``, at most ``max_bytes`` long and ending at or before
        ``max_position`` -- except that with ``min_one_message`` the first batch is
        returned whole even if it alone exceeds ``max_bytes`` (Kafka's minOneMessage).

        None when no batch at/after ``start_offset`` starts before ``max_position``;
        size 0 when the first batch exceeds ``max_bytes`` and ``min_one_message`` is off.
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start = found[0]
        limit = self.size if max_position is None else min(max_position, self.size)
        if start >= limit:
            return None
        # Batches between `start` and the last indexed batch start at or before
        # start + max_bytes are whole and in range: jump there and walk headers only over
        # the last stretch (at most ~index.interval.bytes), not over every small batch.
        _, jump = self.offset_index.lookup_position(min(limit, start + max_bytes))
        end = max(start, jump)
        next_offset = None  # after the last batch taken, when the walk saw it
        for pos, header in self._walk(end, limit):
            batch_end = pos + header.size
            if batch_end - start > max_bytes:
                if end == start and min_one_message:
                    end, next_offset = batch_end, header.last_offset + 1
                break
            end, next_offset = batch_end, header.last_offset + 1
        if next_offset is not None:
            ends = self._read_ends
            ends.pop(next_offset, None)
            ends[next_offset] = end
            if len(ends) > _READ_ENDS:
                del ends[next(iter(ends))]
        return start, end - start

    def pread(self, position: int, size: int) -> bytes:
        """The bytes of a range returned by `read` (one positioned read)."""
        return self._pread(size, position)

    def find_offset_by_timestamp(self, timestamp: int,
                                 starting_offset: int | None = None) -> OffsetAndTimestamp | None:
        """The first record at/after ``starting_offset`` whose timestamp is >= ``timestamp``
        (ListOffsets by time, Kafka's LogSegment.findOffsetByTimestamp).

        Headers locate the first batch whose MaxTimestamp is >= the target. The answer is
        that batch's first record when BaseTimestamp (the first record's timestamp)
        already qualifies, or the batch uses LogAppendTime (every record carries
        MaxTimestamp). Only otherwise -- the qualifying record is inside the batch -- is
        that one batch decoded, as Kafka does; this is ListOffsets, not the fetch path.
        If it cannot be decoded we answer its base offset and MaxTimestamp (never after
        Kafka's answer, so a consumer seeking there skips nothing).
        """
        if self.max_timestamp < timestamp:
            return None
        begin = self.base_offset if starting_offset is None else starting_offset
        _, ts_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(ts_offset, begin))
        for pos, header in self._walk(position, self.size):
            if header.last_offset < begin or header.max_timestamp < timestamp:
                continue
            # A batch the log cleaner rewrote may have lost its first records (BaseOffset is
            # then no record's offset) and, with the delete-horizon bit, its BaseTimestamp is
            # the horizon, not a record's timestamp: only decoding answers for those.
            whole = (header.records_count == header.last_offset_delta + 1
                     and not header.attributes & DELETE_HORIZON_MASK)
            if whole and header.attributes & TIMESTAMP_TYPE_MASK:
                return OffsetAndTimestamp(max(header.base_offset, begin), header.max_timestamp)
            if whole and header.base_timestamp >= timestamp and header.base_offset >= begin:
                return OffsetAndTimestamp(header.base_offset, header.base_timestamp)
            try:
                _, records = decode_batch(self._pread(header.size, pos))
            except RecordError:
                return OffsetAndTimestamp(max(header.base_offset, begin), header.max_timestamp)
            for record in records:
                if record.offset >= begin and record.timestamp >= timestamp:
                    return OffsetAndTimestamp(record.offset, record.timestamp)
        return None

    def headers(self) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch in the segment."""
        return self._walk(0, self.size)

    def walk_from(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch from the one at `position` to the end."""
        return self._walk(position, self.size)

    def _walk(self, position: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of each complete batch in [position, end), reading
        headers in chunks. Stops at the first batch that does not end by ``end``; raises
        CorruptSegmentError at a header that cannot be walked past."""
        walk = BatchWalk(self.pread, position, end, read_size=_WALK_CHUNK)
        yield from walk
        stop = walk.stop
        if stop is not None and stop.reason == CORRUPT:
            raise CorruptSegmentError(
                f"{self.log_path}: corrupt batch header at {stop.position}: {stop.problem}")

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset`` (a batch straddling
        ``offset`` goes whole, as in Kafka); returns the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.file.truncate(position)
        self.size = position
        self._read_ends.clear()
        self._dirty = True
        self._bytes_since_last_index_entry = 0
        if position == 0:
            self._first_batch_timestamp = None
        self._recompute_max_timestamp()
        return removed

    def _recompute_max_timestamp(self) -> None:
        # The time index's last entry covers every batch up to its offset; only batches
        # after it need their headers read to get the exact max again.
        ts, ts_offset = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = (ts, ts_offset) if ts >= 0 else (-1, -1)
        _, position = self.offset_index.lookup(ts_offset)
        for _pos, header in self._walk(position, self.size):
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset

    # ------------------------------------------------------------------ files

    @property
    def file(self) -> FileHandle:
        if self._file is None:
            raise ValueError(f"segment {self.log_path} is closed")
        return self._file

    @property
    def largest_timestamp(self) -> int:
        """Max batch timestamp, or the file's mtime when batches carry none (Kafka's
        LogSegment.largestTimestamp; used by time retention)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self._fs.mtime_ns(self.log_path) // 1_000_000

    def _pread(self, size: int, position: int) -> bytes:
        return self.file.pread(size, position)

    def files(self) -> list[FileHandle]:
        """The open files a flush fsyncs ([] when nothing was written since the last)."""
        if self._file is None or not self._dirty:
            return []
        return [f for f in (self._file, self.offset_index.open_file, self.time_index.open_file,
                            self.txn_index.open_file)
                if f is not None]

    def flush(self) -> None:
        """fsync the .log and both indexes if anything was written since the last flush."""
        if self._file is None or not self._dirty:
            return
        self._file.fsync()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()
        self._dirty = False

    @property
    def dirty(self) -> bool:
        """Written since the last fsync."""
        return self._dirty

    def mark_synced(self) -> None:
        """The caller fsynced `paths()` itself (`loader.fsync_all`, many segments at once)."""
        self._dirty = False

    def close(self, *, flush: bool = True) -> None:
        """Record the final max timestamp (so a clean reopen knows it), fsync, close.
        The files are closed even when sealing or fsyncing raises OSError. `flush=False`
        (a segment about to be deleted) only closes the files."""
        if self._file is None:
            return
        if not flush:
            self._dirty = False
        try:
            if flush:
                try:
                    self.repair()
                except OSError:
                    pass  # the loader cuts a torn tail at the next start
                self._seal_max_timestamp()
            self.flush()
        finally:  # a refused fsync must not leak the descriptors
            self._file.close()
            self._file = None
            self.offset_index.close()
            self.time_index.close()
            self.txn_index.close()

    def paths(self) -> list[str]:
        """The segment's files: the .txnindex only when there is one (most have none)."""
        paths = [self.log_path, self.offset_index.path, self.time_index.path]
        if self.txn_index.open_file is not None or self._fs.exists(self.txn_index.path):
            paths.append(self.txn_index.path)
        return paths

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the three files from ``...<old_suffix>`` to ``...<new_suffix>`` (Kafka's
        LogSegment.changeFileSuffixes; the cleaner's .cleaned -> .swap -> ""). Open
        descriptors stay valid. The indexes go first and the .log last: the .log's name
        is what the loader acts on, so it commits the step."""
        def renamed(path: str) -> str:
            if not path.endswith(old_suffix):
                raise ValueError(f"{path} does not end in {old_suffix!r}")
            return path[:len(path) - len(old_suffix)] + new_suffix

        self.offset_index.rename(renamed(self.offset_index.path))
        self.time_index.rename(renamed(self.time_index.path))
        self.txn_index.rename(renamed(self.txn_index.path))
        new_log_path = renamed(self.log_path)
        self._fs.rename(self.log_path, new_log_path)
        self.log_path = new_log_path

    def rename_to_deleted(self) -> list[str]:
        """Close the files and give them the ``.deleted`` suffix (Kafka's async delete:
        the names vanish from the log at once, the bytes after file.delete.delay.ms)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        renamed = []
        for path in self.paths():
            try:
                self._fs.rename(path, path + DELETED_SUFFIX)
                renamed.append(path + DELETED_SUFFIX)
            except FileNotFoundError:
                pass
        return renamed

    def delete(self) -> None:
        """Close and unlink all three files now."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        try:
            self._fs.remove(self.log_path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
