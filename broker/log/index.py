"""Sparse segment indexes: the offset index (.index) and the time index (.timeindex).

Owns: `OffsetIndex` (relative offset -> file position) and `TimeIndex` (max timestamp so far
-> relative offset), their file formats and their sanity checks. Both are Kafka's formats
byte for byte, so Kafka's ``kafka-dump-log.sh`` and our Spark reader can read them:

* ``.index``     entries of int32 relative offset + int32 file position, 8 bytes, big-endian.
* ``.timeindex`` entries of int64 timestamp + int32 relative offset, 12 bytes, big-endian.

Relative offset = absolute offset - segment base offset, so a segment can never span more
than 2**31 offsets (the log rolls first).

On-disk choice (differs from Kafka, on purpose): Kafka preallocates each index file to
``segment.index.bytes`` and mmaps it, trimming it to its real size on roll/close. We keep
the entries in memory (``array`` columns, searched with ``bisect``) and append each new entry
to the file with one positioned write; the file therefore always holds exactly the entries and
never needs trimming, and a crash can at worst leave a torn or stale tail -- which the
sanity check on load catches (the segment is then re-indexed from its .log). Memory is
8 or 12 bytes per entry, i.e. at most ``segment.index.bytes`` per segment, as with mmap.

Neither class knows about record batches; `LogSegment` decides what to index.
"""

from __future__ import annotations

import bisect
import struct
import sys
from array import array

from broker.storage import REAL, FileHandle, FileSystem

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class CorruptIndexError(Exception):
    """An index file failed its sanity check; the owner rebuilds it from the .log."""


def _column(typecode: str, raw: bytes) -> array:
    """Big-endian packed column bytes -> array in native order."""
    col = array(typecode)
    col.frombytes(raw)
    if sys.byteorder == "little":
        col.byteswap()
    return col


class _IndexFile:
    """The shared file plumbing: open, append at the end, truncate, fsync, rename, delete."""

    entry_size: int

    def __init__(self, path: str, base_offset: int, max_index_size: int, *,
                 fs: FileSystem = REAL) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fs = fs
        # Same bound as Kafka's mmap size: a full index forces the segment to roll.
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._file: FileHandle | None = fs.open(path)

    @property
    def file(self) -> FileHandle:
        if self._file is None:
            raise ValueError(f"index {self.path} is closed")
        return self._file

    @property
    def open_file(self) -> FileHandle | None:
        """The handle, or None once closed."""
        return self._file

    def _raw(self) -> bytes:
        raw = self.file.pread(self.file.size(), 0)
        if len(raw) % self.entry_size:
            raise CorruptIndexError(
                f"{self.path}: size {len(raw)} is not a multiple of {self.entry_size}")
        return raw

    def _append_bytes(self, data: bytes, entries_before: int) -> None:
        self.file.pwrite(data, entries_before * self.entry_size)

    def _truncate_file(self, entries: int) -> None:
        self.file.truncate(entries * self.entry_size)

    def __len__(self) -> int:
        raise NotImplementedError

    def _drop_entries(self, keep: int) -> None:
        raise NotImplementedError

    def _truncate_entries(self, keep: int) -> None:
        # Memory first: if the file cannot be cut (EIO), lookups already see the right
        # entries, and the next append overwrites the stale tail in place.
        self._drop_entries(keep)
        self._truncate_file(keep)

    def forget_after(self, keep: int) -> None:
        """Drop entries past the first ``keep`` in memory only (undoing a failed append);
        `sync_file_length` then cuts the file, when the file system lets it."""
        self._drop_entries(keep)

    def sync_file_length(self) -> None:
        self._truncate_file(len(self))

    def flush(self) -> None:
        if self._file is not None:
            self._file.fsync()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def rename(self, new_path: str) -> None:
        # The fd stays valid across a rename; only the name moves.
        self._fs.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        try:
            self._fs.remove(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(_IndexFile):
    """Sparse map from offset to the .log position of a batch (Kafka's OffsetIndex).

    An entry (offset, position) says: the batch starting at ``position`` has last offset
    ``offset`` (Kafka indexes a batch by its *last* offset). `lookup(target)` returns the
    largest entry with offset <= target, from which a forward scan of batch headers finds
    the batch containing ``target``.
    """

    entry_size = _OFFSET_ENTRY.size

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10 * 1024 * 1024, *,
                 fs: FileSystem = REAL) -> None:
        super().__init__(path, base_offset, max_index_size, fs=fs)
        self._rel = array("i")
        self._pos = array("i")

    def load(self, log_size: int) -> None:
        """Read the file into memory and sanity-check it against the .log size.

        Kafka's OffsetIndex.sanityCheck plus the checks a torn or junk tail would fail:
        entries strictly increasing in offset and position, positions inside the log.
        """
        raw = self._raw()
        cols = _column("i", raw)
        rel, pos = cols[0::2], cols[1::2]
        prev_rel, prev_pos = -1, -1
        for r, p in zip(rel, pos):
            if r <= prev_rel or p <= prev_pos or r < 0 or p < 0 or p >= max(log_size, 1):
                raise CorruptIndexError(f"{self.path}: entry ({r}, {p}) out of order or range")
            prev_rel, prev_pos = r, p
        if len(rel) > self.max_entries:
            raise CorruptIndexError(f"{self.path}: {len(rel)} entries exceed the maximum")
        self._rel, self._pos = rel, pos

    def __len__(self) -> int:
        return len(self._rel)

    @property
    def is_full(self) -> bool:
        return len(self._rel) >= self.max_entries

    @property
    def last_offset(self) -> int:
        """Absolute offset of the last entry, or the base offset when empty."""
        return self.base_offset + self._rel[-1] if self._rel else self.base_offset

    def entry(self, n: int) -> tuple[int, int]:
        return self.base_offset + self._rel[n], self._pos[n]

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            raise ValueError(f"index entry ({offset}, {position}) not after the last entry")
        if self.is_full:
            raise ValueError(f"index {self.path} is full")
        self._append_bytes(_OFFSET_ENTRY.pack(rel, position), len(self._rel))
        self._rel.append(rel)
        self._pos.append(position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target as (absolute offset, position); else (base, 0)."""
        n = bisect.bisect_right(self._rel, target_offset - self.base_offset) - 1
        if n < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[n], self._pos[n]

    def lookup_position(self, position: int) -> tuple[int, int]:
        """Largest entry with position <= ``position`` as (absolute offset, position);
        else (base, 0). Every entry marks a batch boundary, so a reader can jump to it."""
        n = bisect.bisect_right(self._pos, position) - 1
        if n < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[n], self._pos[n]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset`` (the log is being cut there)."""
        keep = bisect.bisect_left(self._rel, offset - self.base_offset)
        self._truncate_entries(keep)

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry pointing at or beyond ``position``."""
        keep = bisect.bisect_left(self._pos, position)
        self._truncate_entries(keep)

    def reset(self) -> None:
        self._truncate_entries(0)

    def _drop_entries(self, keep: int) -> None:
        del self._rel[keep:]
        del self._pos[keep:]


class TimeIndex(_IndexFile):
    """Sparse map from timestamp to offset (Kafka's TimeIndex).

    An entry (ts, offset) says: the largest timestamp among batches up to and including the
    batch whose last offset is ``offset`` is ``ts``. Timestamps strictly increase, so
    `lookup(ts)` (largest entry with timestamp <= ts) gives an offset from which a forward
    scan finds the first batch whose max timestamp is >= ts.
    """

    entry_size = _TIME_ENTRY.size

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10 * 1024 * 1024, *,
                 fs: FileSystem = REAL) -> None:
        super().__init__(path, base_offset, max_index_size, fs=fs)
        self._ts = array("q")
        self._rel = array("i")

    def load(self) -> None:
        """Read the file into memory; Kafka's TimeIndex.sanityCheck plus monotonicity."""
        raw = self._raw()
        n = len(raw) // self.entry_size
        ts = array("q")
        rel = array("i")
        for t, r in _TIME_ENTRY.iter_unpack(raw):
            ts.append(t)
            rel.append(r)
        prev_ts, prev_rel = None, -1
        for t, r in zip(ts, rel):
            if r < prev_rel or r < 0 or (prev_ts is not None and t <= prev_ts):
                raise CorruptIndexError(f"{self.path}: entry ({t}, {r}) out of order")
            prev_ts, prev_rel = t, r
        if n > self.max_entries:
            raise CorruptIndexError(f"{self.path}: {n} entries exceed the maximum")
        self._ts, self._rel = ts, rel

    def __len__(self) -> int:
        return len(self._ts)

    @property
    def is_full(self) -> bool:
        return len(self._ts) >= self.max_entries

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, absolute offset) of the last entry, or (-1, base offset) when empty."""
        if not self._ts:
            return -1, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Append only if ``timestamp`` is a new maximum (Kafka's TimeIndex.maybeAppend).

        ``skip_full_check`` is for the final entry written when a segment becomes
        inactive: Kafka lets that one in even when the index is full.
        """
        if self._ts and timestamp <= self._ts[-1]:
            return
        rel = offset - self.base_offset
        if self._rel and rel < self._rel[-1]:
            raise ValueError(f"time index offset {offset} before the last entry")
        if self.is_full and not skip_full_check:
            raise ValueError(f"time index {self.path} is full")
        self._append_bytes(_TIME_ENTRY.pack(timestamp, rel), len(self._ts))
        self._ts.append(timestamp)
        self._rel.append(rel)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Largest entry with timestamp <= ts as (timestamp, abs offset); else (-1, base)."""
        n = bisect.bisect_right(self._ts, timestamp) - 1
        if n < 0:
            return -1, self.base_offset
        return self._ts[n], self.base_offset + self._rel[n]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        keep = bisect.bisect_left(self._rel, offset - self.base_offset)
        self._truncate_entries(keep)

    def reset(self) -> None:
        self._truncate_entries(0)

    def _drop_entries(self, keep: int) -> None:
        del self._ts[keep:]
        del self._rel[keep:]
