"""Where each leader epoch begins in one replica's log, and the file that remembers it
(Kafka's LeaderEpochFileCache and LeaderEpochCheckpointFile, KIP-101).

Owns: the ascending (epoch, start offset) entries of one partition log -- the offset of the
first batch each leader epoch wrote -- and ``leader-epoch-checkpoint`` in the partition
directory, Kafka's text format: a version line ``0``, a count line, then one
``epoch start_offset`` line per entry.

A leader answers OffsetForLeaderEpoch from `LeaderEpochCache.end_offset_for`; a follower
compares that answer with its own cache to find where its log diverged
(broker.replication.truncation). Both epochs and start offsets strictly increase along the
entries; `assign` keeps it so by dropping the entries a new one contradicts.

What the owner of the log must do for the checkpoint to be trusted:

- `assign` a batch's (partition leader epoch, base offset), and `make_durable`, *before*
  appending the batch, so a crash leaves the checkpoint ahead of the log, never behind it
  (a leader assigns its epoch at the log end when it takes the leadership, and makes it
  durable before its first append);
- after loading the log, cut the entries recovery made stale: `truncate_from_end` with the
  log end offset and `truncate_from_start` with the log start offset (`open_cache` does both
  when given the offsets);
- `truncate_from_end` whenever the log is truncated -- a follower also when the truncation
  keeps every batch, to drop an epoch it assigned as leader and never wrote in --
  `truncate_from_start` whenever its start offset moves, `clear` when it is emptied.

A truncation is written at once without fsync (Kafka flushes truncations in the
background: one lost to a crash is redone when the log is loaded); an assignment is
written, with fsync, by `make_durable`. A missing or malformed checkpoint is rebuilt from
the log's batch headers, which carry the same facts.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from broker.log.manager import CheckpointError as LogCheckpointError
from broker.storage import REAL, FileHandle, FileSystem, write_atomically

log = logging.getLogger("minibroker.leader_epochs")

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

_MAX_EPOCH = 2**31 - 1          # PartitionLeaderEpoch is an int32 in every batch header
_MAX_OFFSET = 2**63 - 1
# the longest well-formed line, "2147483647 9223372036854775807", with room for blanks
_MAX_LINE = 64
_ENTRY_LINE = re.compile(rb"([0-9]{1,10})[ \t]+([0-9]{1,19})")
_COUNT_LINE = re.compile(rb"[0-9]{1,19}")


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Leader epoch `epoch` wrote its first batch at `start_offset`."""

    epoch: int
    start_offset: int


class CheckpointError(LogCheckpointError):
    """A leader-epoch checkpoint file that does not follow the format."""


class LeaderEpochCache:
    """In-memory, ascending (epoch, start_offset) entries; persists through an optional
    `store` callable(list[EpochEntry]) called after every change (None = in memory only).

    With a `flush` callable(list[EpochEntry]) as well, which writes the entries durably,
    an `assign` is neither stored nor flushed at once: `make_durable` flushes it, and the
    owner calls that before it appends a batch of the epoch (a crash must not leave
    batches whose epoch the checkpoint does not know). Until a batch is written an
    assignment is an epoch beginning at the log's end, which loading would cut anyway, so
    leading thousands of partitions writes no file. Truncations are stored (`store` need
    not be durable: Kafka flushes them asynchronously) and never flushed on their own: a
    checkpoint that lost one only holds entries past the log's end or before its start,
    which loading cuts again.

    `entries` given to the constructor are assigned one by one (as Kafka loads its
    checkpoint), so entries out of order are dropped, not trusted; `store` is not called
    for them."""

    def __init__(self, entries: Iterable[EpochEntry] = (),
                 store: Callable[[list[EpochEntry]], None] | None = None,
                 flush: Callable[[list[EpochEntry]], None] | None = None) -> None:
        self._entries: list[EpochEntry] = []
        self._store: Callable[[list[EpochEntry]], None] | None = None
        self._flush: Callable[[list[EpochEntry]], None] | None = None
        self._unflushed_assign = False
        for entry in entries:
            self.assign(entry.epoch, entry.start_offset)
        self._store, self._flush = store, flush

    def __repr__(self) -> str:
        pairs = ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries)
        return f"LeaderEpochCache([{pairs}])"

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` begins at `start_offset`; True if the entries changed.

        A batch of the latest epoch at or after its start changes nothing (every batch of
        an epoch is offered, only the first counts). Anything else becomes the new last
        entry, and the entries it contradicts -- an epoch not older than it, or a start
        not before it -- are dropped first (Kafka's maybeTruncateNonMonotonicEntries)."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry: epoch {epoch} at {start_offset}")
        latest = self.latest_entry
        if latest is not None and epoch == latest.epoch and start_offset >= latest.start_offset:
            return False
        removed = []
        while self._entries and (self._entries[-1].epoch >= epoch
                                 or self._entries[-1].start_offset >= start_offset):
            removed.append(self._entries.pop())
        new = EpochEntry(epoch, start_offset)
        # a removed entry that started where the new one does held no data: expected, quiet
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning("leader epoch %d at %d dropped the entries it contradicts: %s",
                        epoch, start_offset, removed)
        self._entries.append(new)
        if self._flush is not None:
            self._unflushed_assign = True  # written by make_durable
        else:
            self._changed()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(the largest epoch <= `requested_epoch`, the offset where it ends), Kafka's
        endOffsetFor: an epoch ends where the next one starts, the latest at
        `log_end_offset`.

        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) when the cache is empty or the request is
        UNDEFINED_EPOCH. A request older than every entry answers (requested, the first
        entry's start) -- Kafka's answer since the log's start may have removed older
        epochs: nothing this log holds can be of that epoch, so whoever asks must cut back
        to where this log's history begins. A request newer than the latest entry answers
        the latest, ending at `log_end_offset` (Kafka answers UNDEFINED, but only its
        leaders, which assign their epoch on election, can be asked; ours may not)."""
        if requested_epoch < 0 or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        latest = self._entries[-1]
        if requested_epoch >= latest.epoch:
            return latest.epoch, log_end_offset
        # entries[:i] have epoch <= requested; entries[i] exists since requested < latest
        i = bisect.bisect_right(self._entries, requested_epoch, key=lambda e: e.epoch)
        higher = self._entries[i]
        if i == 0:
            return requested_epoch, higher.start_offset
        return self._entries[i - 1].epoch, higher.start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the batch at `offset`: that of the last entry starting at or
        before it; None before the first entry."""
        i = bisect.bisect_right(self._entries, offset, key=lambda e: e.start_offset)
        return self._entries[i - 1].epoch if i else None

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to `end_offset`: drop the epochs that started at or
        after it (Kafka's truncateFromEnd)."""
        if end_offset < 0:
            return
        before = len(self._entries)
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        if len(self._entries) != before:
            self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log's start moved to `start_offset`: drop the epochs that began at or before
        it, then keep the last of them as starting at `start_offset`, since the batches
        from there on until the next epoch are still its (Kafka's truncateFromStart)."""
        i = bisect.bisect_right(self._entries, start_offset, key=lambda e: e.start_offset)
        if i == 0:
            return
        kept = EpochEntry(self._entries[i - 1].epoch, start_offset)
        new = [kept, *self._entries[i:]]
        if new != self._entries:
            self._entries = new
            self._changed()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._changed()

    def make_durable(self) -> None:
        """Flush the stored entries if an assignment is not durable yet (cheap otherwise)."""
        if self._unflushed_assign and self._flush is not None:
            self._flush(list(self._entries))
            self._unflushed_assign = False

    def _changed(self) -> None:
        if self._store is not None:
            self._store(list(self._entries))


def read_checkpoint(path: str | os.PathLike, *, fs: FileSystem = REAL) -> list[EpochEntry] | None:
    """The entries of the checkpoint at `path`; None when there is no file.

    Raises CheckpointError on anything our writer would not have written: another version,
    a count that disagrees with the lines present, a line that is not two non-negative
    integers, or entries that do not strictly increase. The file is read a line at a time
    and no line is longer than `_MAX_LINE`, so a corrupt file costs no more memory than
    its entries take."""
    try:
        f = fs.open(os.fspath(path), create=False)
    except FileNotFoundError:
        return None
    try:
        lines = _checkpoint_lines(f, path)
        version = next(lines, None)
        if version is None:
            raise CheckpointError(f"{path}: empty file")
        if version != str(CHECKPOINT_VERSION).encode():
            raise CheckpointError(f"{path}: unsupported version {version[:20]!r}")
        count_line = next(lines, None)
        if count_line is None or not _COUNT_LINE.fullmatch(count_line):
            raise CheckpointError(f"{path}: bad count line {count_line!r}")
        count = int(count_line)
        entries: list[EpochEntry] = []
        for line in lines:
            if len(entries) == count:
                raise CheckpointError(f"{path}: more than the {count} entries it announces")
            entries.append(_parse_entry(line, path, entries[-1] if entries else None))
        if len(entries) != count:
            raise CheckpointError(f"{path}: announces {count} entries, holds {len(entries)}")
        return entries
    finally:
        f.close()


def _checkpoint_lines(f: FileHandle, path: str | os.PathLike) -> Iterator[bytes]:
    position, size = 0, f.size()
    while position < size:
        raw = f.pread(_MAX_LINE + 1, position)
        end = raw.find(b"\n")
        if end < 0:
            raise CheckpointError(f"{path}: a line too long or not terminated: {raw[:20]!r}")
        position += end + 1
        yield raw[:end]


def _parse_entry(line: bytes, path: str | os.PathLike, previous: EpochEntry | None) -> EpochEntry:
    match = _ENTRY_LINE.fullmatch(line)
    if match is None:
        raise CheckpointError(f"{path}: malformed entry {line!r}")
    entry = EpochEntry(int(match[1]), int(match[2]))
    if entry.epoch > _MAX_EPOCH or entry.start_offset > _MAX_OFFSET:
        raise CheckpointError(f"{path}: entry out of range {line!r}")
    if previous is not None and (entry.epoch <= previous.epoch
                                 or entry.start_offset <= previous.start_offset):
        raise CheckpointError(f"{path}: entry {line!r} does not follow {previous}")
    return entry


def write_checkpoint(path: str | os.PathLike, entries: list[EpochEntry], *,
                     sync: bool = True, fs: FileSystem = REAL) -> None:
    """Replace the checkpoint at `path` with `entries`: temp file, fsync, rename, fsync the
    directory, so a crash leaves the old file or the new one (a leftover temp file is
    never read). ``sync=False`` leaves out the fsyncs: a process that dies still leaves
    the old file or the new one; a machine that dies may leave neither whole, which
    `open_cache` rebuilds from the batches' headers."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{e.epoch} {e.start_offset}" for e in entries]
    write_atomically(path, "\n".join(lines) + "\n", sync=sync, fs=fs)


def entries_from_headers(headers: Iterable[tuple[int, int]]) -> list[EpochEntry]:
    """The entries of a log from its batches' (partition leader epoch, base offset) pairs,
    in log order: one entry where the epoch changes. Batches without an epoch (-1, written
    before epochs existed) are passed over."""
    cache = LeaderEpochCache()
    for epoch, base_offset in headers:
        if epoch != UNDEFINED_EPOCH:
            cache.assign(epoch, base_offset)
    return cache.entries


def open_cache(partition_dir: str | os.PathLike,
               headers_if_missing: Callable[[], Iterable[tuple[int, int]]], *,
               log_start_offset: int | None = None,
               log_end_offset: int | None = None, fs: FileSystem = REAL) -> LeaderEpochCache:
    """The cache of the log in `partition_dir`, persisting to its checkpoint.

    Read from the checkpoint; when there is none (a data directory from before
    checkpoints, or a log that never had a batch) or it is malformed (warned about),
    rebuilt from `headers_if_missing()` -- the log's (partition leader epoch, base offset)
    pairs -- and written, unless there is no file and the loaded log is empty. Given the
    loaded log's offsets, entries past its end or before its start are cut, since the
    checkpoint is written before the batches it describes; the cut is not written back
    (every load cuts the same), so a restart rewrites no file."""
    path = os.path.join(partition_dir, CHECKPOINT_FILE)
    try:
        entries = read_checkpoint(path, fs=fs)
    except CheckpointError as exc:
        log.warning("%s; rebuilding it from the log's batch headers", exc)
        entries = None
    if entries is None:
        entries = entries_from_headers(headers_if_missing())
        # An empty log rebuilds to nothing: a missing file says the same, so none is
        # written (a restart of thousands of idle partitions would otherwise fsync a file
        # and its directory for each, one after another, before serving). A log with
        # batches gets its file, so that the next start need not walk them again.
        empty = log_end_offset is not None and log_end_offset <= (log_start_offset or 0)
        if entries or not empty or fs.exists(path):
            write_checkpoint(path, entries, fs=fs)
    # what loading cuts is not written back: the next load cuts it again, and the next
    # change writes the whole (a restart rewrote every partition's file for this)
    cache = LeaderEpochCache(entries)
    if log_end_offset is not None:
        cache.truncate_from_end(log_end_offset)
    if log_start_offset is not None:
        cache.truncate_from_start(log_start_offset)
    return _checkpointed(path, cache.entries, fs)


def new_log_cache(partition_dir: str | os.PathLike,
                  leader_epoch: int | None = None, *, fs: FileSystem = REAL) -> LeaderEpochCache:
    """The cache of a log just made, empty, and no file yet: the checkpoint is written when
    the first assignment is made durable, before the first batch (`open_cache` rebuilds a
    missing checkpoint from the log's batches: none), so making thousands of partitions
    writes no thousand checkpoints. Given the `leader_epoch` this replica is to lead at,
    that epoch is assigned now, by the caller's thread (the worker making the log)."""
    cache = _checkpointed(os.path.join(partition_dir, CHECKPOINT_FILE), [], fs)
    if leader_epoch is not None and leader_epoch >= 0:
        cache.assign(leader_epoch, 0)
    return cache


def _checkpointed(path: str, entries: list[EpochEntry], fs: FileSystem) -> LeaderEpochCache:
    """A cache persisting to the checkpoint at `path`: truncations written at once without
    fsync, assignments written durably by `make_durable` (see LeaderEpochCache)."""
    return LeaderEpochCache(entries,
                            store=lambda new: write_checkpoint(path, new, sync=False, fs=fs),
                            flush=lambda new: write_checkpoint(path, new, fs=fs))


def relocate_cache(cache: LeaderEpochCache, partition_dir: str | os.PathLike, *,
                   fs: FileSystem = REAL) -> LeaderEpochCache:
    """The same entries persisting to the checkpoint of `partition_dir`, written there now
    (a replica moved to another log directory: broker/replication/alter_log_dirs.py)."""
    path = os.path.join(partition_dir, CHECKPOINT_FILE)
    entries = list(cache.entries)
    write_checkpoint(path, entries, fs=fs)
    return _checkpointed(path, entries, fs)
