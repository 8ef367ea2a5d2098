"""Loading one partition log from disk at start-up, with crash recovery (Kafka's LogLoader).

Owns: the start-up pass over a ``<topic>-<partition>`` directory -- clearing leftovers of
interrupted deletes/cleanings and orphan indexes, completing interrupted cleaner swaps, opening the segments, deciding which to
trust and which to recover, and describing what recovery did (`RecoveryReport`).

Rules (Kafka's LogLoader; docs/ARCHITECTURE.md §5):

* clean shutdown: segments are trusted; only a missing or insane index, or an active
  segment whose tail does not parse, makes a segment be recovered;
* unclean shutdown: every segment holding offsets >= the recovery point (the segment
  containing it and all later ones) is recovered: each batch's size and CRC-32C checked,
  both indexes rebuilt, the .log cut at the first invalid byte. When a segment had to be
  cut, every later segment is deleted -- nothing after corruption can be trusted;
* what recovery read is made durable before the recovery point moves past it: by
  `load_segments` itself, or (``sync=False``) by the caller, which fsyncs the paths it is
  handed for many partitions at once (`fsync_all`: `LogManager.open` loads the partitions
  on ``num.recovery.threads.per.data.dir`` threads and issues all their fsyncs together,
  where Kafka fsyncs each log as it recovers it). A segment that was empty and still is
  has nothing to make durable, so idle partitions cost no fsync;
* if the checkpointed log start offset lies beyond what survived, the log restarts empty
  there;
* the log cleaner (cleaner.py) writes ``*.cleaned`` files, renames them ``*.swap`` once
  complete and fsynced, renames the segments they replace ``*.deleted``, then strips
  ``.swap``. So ``*.cleaned`` and ``*.deleted`` leftovers are deleted, while a
  ``<base>.log.swap`` is complete and is finished here (Kafka's LogLoader): every segment
  whose base offset lies in [base, the swap's next offset) -- the ones it replaces, the
  cleaner guarantees exactly those -- is deleted, the swap renamed into place, and its
  indexes rebuilt from the .log (index ``*.swap`` files are dropped, as Kafka does);
* a segment's .txnindex cannot be rebuilt from its .log alone (its entries carry the LSO
  the producer state had): a recovered segment, or a swap finished here, keeps what it can
  and is marked `txn_index_stale`, and the partition replays its producer state over it
  (broker/partition.py).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import time

from protocol.batch_walk import BatchWalk

from broker.storage import REAL, FileSystem

from .config import LogConfig
from .errors import CorruptSegmentError
from .index import CorruptIndexError
from .segment import DELETED_SUFFIX, LogSegment

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
_SWAP_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)\.swap$")
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def fsync_dir(path: str | os.PathLike, fs: FileSystem = REAL) -> None:
    """Make file creations/renames/unlinks in ``path`` durable (Kafka's Utils.flushDir)."""
    fs.fsync_dir(os.fspath(path))


FSYNC_WORKERS = 16


def fsync_all(paths: list[str], fs: FileSystem = REAL) -> None:
    """fsync every file or directory in ``paths``, several at once: the file system commits
    concurrent fsyncs together (ext4's journal takes them in one commit), so a thousand cost
    about what a few do one after another. The first OSError is raised once all are done.
    (In order, inline, on a file system that wants no threads: a simulated one.)"""
    if len(paths) <= 1 or not fs.threaded:
        for path in paths:
            fsync_dir(path, fs)
        return
    with concurrent.futures.ThreadPoolExecutor(min(FSYNC_WORKERS, len(paths))) as pool:
        for _ in pool.map(fsync_dir, paths, [fs] * len(paths)):
            pass


@dataclasses.dataclass(frozen=True)
class RecoveryReport:
    """What loading one partition recovered (only made when something was)."""

    topic: str
    partition: int
    truncated_bytes: int      # bytes cut from .log files (torn/corrupt tails)
    segments_recovered: int   # segments re-scanned with indexes rebuilt
    segments_deleted: int     # segments dropped because they followed a corrupt one
    log_end_offset: int
    duration_ms: float


@dataclasses.dataclass
class LoadedLog:
    segments: list[LogSegment]
    log_end_offset: int
    log_start_offset: int
    report: RecoveryReport | None
    # with sync=False: the files and directory recovery changed, for the caller to fsync
    # (then `LogSegment.mark_synced` on the segments) before it trusts the loaded log
    unsynced: list[str] = dataclasses.field(default_factory=list)


def new_segment(directory: str, base_offset: int, config: LogConfig,
                created_ms: int | None, file_suffix: str = "", fs: FileSystem = REAL) -> LogSegment:
    return LogSegment(directory, base_offset,
                      index_interval_bytes=config.index_interval_bytes,
                      max_index_size=config.segment_index_bytes, created_ms=created_ms,
                      file_suffix=file_suffix, fs=fs)


def _swap_next_offset(path: str, base_offset: int, fs: FileSystem) -> int:
    """The offset after the last whole batch of a .swap file (its base if it has none)."""
    next_offset = base_offset
    f = fs.open(path, create=False)
    try:
        # A torn or corrupt tail ends the walk: the batches before it are the swap's.
        for _pos, header in BatchWalk(f.pread, 0, f.size()):
            next_offset = max(next_offset, header.last_offset + 1)
    finally:
        f.close()
    return next_offset


def complete_swaps(directory: str, fs: FileSystem = REAL) -> list[int]:
    """Finish cleaner swaps a crash interrupted (see the module docstring); returns the
    base offsets of the ``.log.swap`` files completed. Their .txnindex, like their other
    indexes, is dropped: the caller marks it stale, for the partition to rebuild."""
    swaps: dict[int, dict[str, str]] = {}
    for name in fs.listdir(directory):
        m = _SWAP_FILE.match(name)
        if m:
            swaps.setdefault(int(m.group(1)), {})[m.group(2)] = os.path.join(directory, name)
    completed = []
    for base, files in sorted(swaps.items()):
        for kind in ("index", "timeindex", "txnindex"):
            if kind in files:
                fs.remove(files[kind])  # rebuilt from the .log, or the swap is undone
        if "log" not in files:
            continue  # a .cleaned -> .swap (or .swap -> "") rename cut short: nothing to finish
        end = max(_swap_next_offset(files["log"], base, fs), base + 1)
        for name in fs.listdir(directory):
            m = _SEGMENT_FILE.match(name)
            if m and base <= int(m.group(1)) < end:
                fs.remove(os.path.join(directory, name))
        fs.rename(files["log"], files["log"][:-len(SWAP_SUFFIX)])
        completed.append(base)
    if swaps:
        fsync_dir(directory, fs)
    return completed


def scan_directory(directory: str, fs: FileSystem = REAL) -> tuple[list[int], list[int]]:
    """Base offsets of the segments on disk, after completing interrupted cleaner swaps
    (``*.swap``) and removing leftovers of interrupted deletes (``*.deleted``), cleaner
    output (``*.cleaned``) and orphan index files; and the bases of the swaps completed.
    """
    swapped = complete_swaps(directory, fs)
    logs: set[int] = set()
    indexes: list[tuple[int, str]] = []
    for name in fs.listdir(directory):
        path = os.path.join(directory, name)
        if name.endswith(DELETED_SUFFIX) or name.endswith(CLEANED_SUFFIX):
            fs.remove(path)
            continue
        m = _SEGMENT_FILE.match(name)
        if not m:
            continue  # partition.metadata, leader-epoch-checkpoint, *.swap, ...
        if m.group(2) == "log":
            logs.add(int(m.group(1)))
        else:
            indexes.append((int(m.group(1)), path))
    for base, path in indexes:
        if base not in logs:
            fs.remove(path)
    return sorted(logs), swapped


def load_segments(directory: str, topic: str, partition: int, config: LogConfig, *,
                  recovery_point: int, log_start_offset: int, clean_shutdown: bool,
                  now_ms: int | None, sync: bool = True, fs: FileSystem = REAL) -> LoadedLog:
    """Open (creating if absent) and, where needed, recover the segments of one log.

    ``now_ms`` becomes the creation time of loaded segments (Kafka uses the time of
    opening) for time-based rolling when batches carry no timestamps. ``sync=False``
    leaves the fsyncs recovery needs to the caller (`LoadedLog.unsynced`).
    """
    started = time.monotonic()  # only to report how long recovery took
    fs.makedirs(directory)
    bases, swapped = scan_directory(directory, fs)
    segments = [new_segment(directory, base, config, now_ms, fs=fs) for base in bases]
    for seg in segments:
        # a swap finished here lost its .txnindex with its other indexes
        seg.txn_index_stale = seg.base_offset in swapped
    recovered = deleted = truncated = 0
    i = 0
    while i < len(segments):
        seg = segments[i]
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if not clean_shutdown and (next_base is None or next_base > recovery_point):
            cut = seg.recover()
            recovered += 1
            truncated += cut
            if cut:
                for dead in segments[i + 1:]:
                    dead.delete()
                deleted += len(segments) - i - 1
                del segments[i + 1:]
        else:
            try:
                seg.load()
            except CorruptIndexError:
                truncated += seg.recover()
                recovered += 1
        i += 1
    if not segments:
        segments.append(new_segment(directory, log_start_offset, config, now_ms, fs=fs))
    try:
        leo = segments[-1].read_next_offset()
    except CorruptSegmentError:
        # A clean shutdown should never leave a torn tail; if it did, trust nothing there.
        truncated += segments[-1].recover()
        recovered += 1
        leo = segments[-1].read_next_offset()
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    if leo < log_start_offset:
        # The checkpointed log start lies beyond what survived: everything below it is
        # gone by definition, so the log restarts, empty, there.
        for seg in segments:
            seg.delete()
        deleted += len(segments)
        segments = [new_segment(directory, log_start_offset, config, now_ms, fs=fs)]
        leo = log_start_offset
    report = None
    unsynced: list[str] = []
    if recovered or deleted:
        dirty = [seg for seg in segments if seg.dirty]
        if dirty or deleted:
            if sync:
                for seg in dirty:
                    seg.flush()
                fsync_dir(directory, fs)
            else:
                unsynced = [path for seg in dirty for path in seg.paths()] + [directory]
        report = RecoveryReport(topic, partition, truncated, recovered, deleted, leo,
                                (time.monotonic() - started) * 1000.0)
    return LoadedLog(segments, leo, log_start_offset, report, unsynced)
