"""All partition logs of one data directory (Kafka's LogManager, one log.dirs entry).

Owns: the data directory layout -- one ``<topic>-<partition>`` directory per partition,
the clean-shutdown marker ``.kafka_cleanshutdown``, the two checkpoint files
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` (Kafka's text
format: a version line ``0``, a count line, then ``topic partition offset`` lines), and
the log cleaner's ``cleaner-offset-checkpoint`` (same format: each compacted partition's
first uncleaned offset), written after each `clean_compacted` that cleaned something.

Start-up (`open`): the marker is read and removed at once (so a crash from here on is
unclean), the checkpoints are read, every partition directory is loaded -- recovering the
unflushed segments when the marker was missing; ``recovery_threads`` logs at a time, their
fsyncs issued together once all are loaded, before the checkpoints move past them -- and a
`RecoveryReport` is returned for each partition where something had to be recovered.
`close` flushes everything, writes the checkpoints, then the marker, so its presence
promises all three are durable. The marker holds the broker epoch the broker had when it
shut down, as Kafka's CleanShutdownFileHandler writes it (``{"version":0,"brokerEpoch":N}``):
the next registration names it as previous_broker_epoch, which is how the controller tells
a clean restart from an unclean one (KIP-966). `clean_shutdown_broker_epoch` is -1 when
there was no marker, or an empty one (an older version's).

Topic deletion renames each partition directory to ``<topic>-<partition>.<uuid>-delete``
(Kafka's name), fsyncs the data dir, then removes it. The rename makes deletion atomic
across a crash: a half-removed directory never looks like a live partition, and start-up
removes any ``-delete`` leftovers.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from protocol.names import (
    TopicPartition,
    METADATA_LOG_TOPIC,
    parse_partition_dir,
    partition_dir_name,
    validate_topic_name,
)

from broker.storage import REAL, FileSystem, read_file, write_atomically

from .cleaner import CleanResult, clean, cleanable_bytes
from .config import LogConfig
from .errors import LogError, RecordError
from .loader import RecoveryReport, fsync_all, fsync_dir
from .log import EventSink, FlushPlan, PartitionLog

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"  # a replica being moved here from another directory (dirs.py)
_CHECKPOINT_VERSION = 0


def _marker_broker_epoch(data: bytes) -> int:
    """The broker epoch a clean-shutdown marker names; -1 for an empty marker (written
    before markers held one) or one that does not parse."""
    try:
        epoch = json.loads(data.decode("utf-8"))["brokerEpoch"]
    except (ValueError, KeyError, TypeError):
        return -1
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else -1


class CheckpointError(ValueError):
    """A checkpoint file that does not follow the format."""


def read_checkpoint(path: str, *, fs: FileSystem = REAL) -> dict[TopicPartition, int]:
    """Parse a Kafka offset checkpoint file; a missing file is an empty checkpoint."""
    try:
        lines = read_file(path, fs=fs).decode("utf-8").splitlines()
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not UTF-8") from exc
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError) as exc:
        raise CheckpointError(f"{path}: bad header") from exc
    if version != _CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: unsupported version {version}")
    entries = [line for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    result: dict[TopicPartition, int] = {}
    for line in entries:
        fields = line.split()
        if len(fields) != 3:
            raise CheckpointError(f"{path}: malformed line {line!r}")
        try:
            result[(fields[0], int(fields[1]))] = int(fields[2])
        except ValueError as exc:
            raise CheckpointError(f"{path}: malformed line {line!r}") from exc
    return result


def write_checkpoint(path: str, offsets: Mapping[TopicPartition, int], *,
                     fs: FileSystem = REAL) -> None:
    """Write atomically and durably: temp file, fsync, rename, fsync the directory
    (Kafka's CheckpointFile), so a crash leaves either the old or the new file."""
    lines = [str(_CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    write_atomically(path, "\n".join(lines) + "\n", fs=fs)


def base64_uuid(u: uuid.UUID) -> str:
    """A Uuid as Kafka prints it: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def write_partition_metadata(directory: str, topic_id: uuid.UUID, *, sync: bool = True,
                             fs: FileSystem = REAL) -> None:
    """Kafka's ``partition.metadata``: which topic incarnation the directory belongs to.
    Written once (a topic id never changes), temp file + rename like the checkpoints;
    ``sync=False``: not fsynced here (`LogManager.sync_new_logs` does it)."""
    path = os.path.join(directory, PARTITION_METADATA_FILE)
    if fs.exists(path):
        return
    write_atomically(path, f"version: 0\ntopic_id: {base64_uuid(topic_id)}\n", sync_dir=False,
                     sync=sync, fs=fs)


def read_partition_metadata(directory: str, *, fs: FileSystem = REAL) -> uuid.UUID | None:
    """The topic id a partition directory's ``partition.metadata`` names; None when there
    is no such file or it is not what `write_partition_metadata` writes (a directory from
    before topic ids, or a torn file: nothing can be concluded from it)."""
    try:
        text = read_file(os.path.join(directory, PARTITION_METADATA_FILE), fs=fs,
                         limit=256).decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            try:
                return uuid.UUID(bytes=base64.urlsafe_b64decode(value.strip() + "=="))
            except ValueError:
                return None
    return None


def _no_event(kind: str, **fields: Any) -> None:
    pass


class LogManager:
    """The partition logs under ``data_dir``.

    ``config_for(topic)`` gives a topic's LogConfig when its log is loaded at start-up
    (default: ``default_config``); `get_or_create` may pass one explicitly.
    """

    def __init__(self, data_dir: str, default_config: LogConfig | None = None, *,
                 config_for: Callable[[str], LogConfig] | None = None,
                 on_event: EventSink | None = None, recovery_threads: int = 1,
                 fs: FileSystem = REAL) -> None:
        self.data_dir = data_dir
        self.fs = fs
        # num.recovery.threads.per.data.dir: how many logs `open` loads at once
        self.recovery_threads = recovery_threads
        self.default_config = default_config or LogConfig()
        self._config_for = config_for or (lambda topic: self.default_config)
        self._on_event = on_event or _no_event
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self.had_clean_shutdown: bool | None = None
        self.clean_shutdown_broker_epoch = -1  # from the marker `open` found
        # Problems start-up worked around (a malformed checkpoint), for the broker to log.
        self.warnings: list[str] = []
        # Cleaner checkpoints, read on first use; partitions whose cleaning failed are
        # skipped until restart (Kafka's uncleanable partitions).
        self._cleaner_checkpoints: dict[TopicPartition, int] | None = None
        self._uncleanable: set[TopicPartition] = set()
        # deleted replicas' directories are removed by this worker (created on first need)
        self._deleter: concurrent.futures.ThreadPoolExecutor | None = None
        # the future replicas `open` found here (a move into this directory, dirs.py),
        # left for LogDirs to resume or remove
        self.future_dirs: list[tuple[TopicPartition, str]] = []

    # ------------------------------------------------------------------ start-up

    @property
    def recovered_uncleanly(self) -> bool:
        """True when `open` found no clean-shutdown marker."""
        return self.had_clean_shutdown is False

    def open(self, now_ms: int | None = None) -> list[RecoveryReport]:
        """Load every partition directory; return what recovery did (empty if nothing).

        ``now_ms`` is the creation time given to loaded segments (time-based rolling of
        segments whose batches carry no timestamps)."""
        fs = self.fs
        fs.makedirs(self.data_dir)
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
        clean = fs.exists(marker)
        if clean:
            self.clean_shutdown_broker_epoch = _marker_broker_epoch(read_file(marker, fs=fs))
            fs.remove(marker)
            fsync_dir(self.data_dir, fs)
        self.had_clean_shutdown = clean
        recovery_points = self._read_checkpoint_or_empty(RECOVERY_POINT_CHECKPOINT)
        log_starts = self._read_checkpoint_or_empty(LOG_START_OFFSET_CHECKPOINT)
        found: list[tuple[TopicPartition, str]] = []
        for name in sorted(fs.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if not fs.isdir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                fs.rmtree(path)  # a topic delete the crash interrupted
                continue
            if name.endswith(FUTURE_DIR_SUFFIX):
                future = parse_partition_dir(name.rsplit(".", 1)[0])
                if future is None:
                    fs.rmtree(path)
                else:
                    self.future_dirs.append((future, path))
                continue
            tp = parse_partition_dir(name)
            if tp is None or tp[0] == METADATA_LOG_TOPIC:
                # not ours (lost+found, -future/-stray dirs, ...), or the metadata log,
                # which the controller quorum keeps in its own format
                continue
            found.append((tp, path))

        def load(entry: tuple[TopicPartition, str]) -> PartitionLog:
            (topic, partition), path = entry
            return PartitionLog.open(
                path, topic, partition, self._config_for(topic),
                recovery_point=recovery_points.get((topic, partition), 0),
                log_start_offset=log_starts.get((topic, partition), 0),
                clean_shutdown=clean, now_ms=now_ms, on_event=self._on_event, sync=False,
                fs=fs)

        # Each log touches only its own directory, so several load at once (Kafka's
        # num.recovery.threads.per.data.dir): their reads and index rebuilds overlap.
        if self.recovery_threads > 1 and len(found) > 1 and fs.threaded:
            with concurrent.futures.ThreadPoolExecutor(
                    min(self.recovery_threads, len(found)),
                    thread_name_prefix="log-recovery") as pool:
                logs = list(pool.map(load, found))
        else:
            logs = [load(entry) for entry in found]
        # What recovery read becomes durable before the checkpoint below says so: every
        # log's fsyncs issued together, a few journal commits rather than one per log.
        fsync_all([path for log in logs for path in log.unsynced], fs)
        reports: list[RecoveryReport] = []
        for (tp, _path), log in zip(found, logs):
            log.mark_synced()
            self._logs[tp] = log
            if log.recovery_report is not None:
                reports.append(log.recovery_report)
        # Recovery moved recovery points up to the LEOs; record that before serving.
        self.checkpoint()
        return reports

    def _read_checkpoint_or_empty(self, name: str) -> dict[TopicPartition, int]:
        # Kafka refuses to start on a malformed checkpoint. We treat it as absent instead:
        # recovery point 0 means "recover everything", which is slower but always safe;
        # log start 0 only means retention re-deletes what it already deleted.
        try:
            return read_checkpoint(os.path.join(self.data_dir, name), fs=self.fs)
        except CheckpointError as exc:
            self.warnings.append(f"ignored {name}: {exc}")
            return {}

    # ------------------------------------------------------------------ partitions

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None, *,
                      topic_id: uuid.UUID | None = None) -> PartitionLog:
        """The log of a partition, created (empty) if absent. An already open log keeps its
        config. ``topic_id`` is recorded in ``partition.metadata`` (Kafka's file) if given.
        Raises OSError, with nothing left behind, when the file system refuses."""
        log = self._logs.get((topic, partition))
        if log is not None:
            return log
        existed = self.fs.exists(os.path.join(self.data_dir, partition_dir_name(topic, partition)))
        log = self.make_log(topic, partition, config, topic_id=topic_id)
        try:
            self.sync_new_logs([log])
        except OSError:
            self.discard_new_log(log, remove=not existed)
            raise
        self._logs[(topic, partition)] = log
        return log

    def make_log(self, topic: str, partition: int, config: LogConfig | None = None, *,
                 topic_id: uuid.UUID | None = None) -> PartitionLog:
        """A new partition's log (its directory, first segment and ``partition.metadata``),
        neither fsynced nor registered: safe on a worker thread, since it touches nothing
        the manager holds. The caller makes a batch of them durable with `sync_new_logs`,
        then registers each with `adopt` (or gives it up with `discard_new_log`). Raises
        OSError, with nothing left behind, when the file system refuses."""
        validate_topic_name(topic)
        if partition < 0:
            raise ValueError(f"illegal partition {partition}")
        path = os.path.join(self.data_dir, partition_dir_name(topic, partition))
        existed = self.fs.exists(path)
        log = None
        try:
            log = PartitionLog.open(path, topic, partition, config or self._config_for(topic),
                                    on_event=self._on_event, fs=self.fs)
            if topic_id is not None:
                write_partition_metadata(path, topic_id, sync=False, fs=self.fs)
        except OSError:
            # a full disk or an unwritable data dir: leave no open files and, if we made
            # it, no directory that a later start would load as a partition
            if log is not None:
                try:
                    log.close()
                except OSError:
                    pass
            if not existed:
                self.fs.rmtree(path)
            raise
        return log

    def sync_new_logs(self, logs: list[PartitionLog]) -> None:
        """Make logs from `make_log` durable: each one's ``partition.metadata`` and
        directory, then the data directory once. The fsyncs run side by side (`fsync_all`),
        so creating a thousand partitions costs a few journal commits, not four thousand."""
        paths = []
        for log in logs:
            metadata = os.path.join(log.directory, PARTITION_METADATA_FILE)
            if self.fs.exists(metadata):
                paths.append(metadata)
            paths.append(log.directory)
        fsync_all(paths, self.fs)
        if logs:
            fsync_dir(self.data_dir, self.fs)

    def discard_new_log(self, log: PartitionLog, *, remove: bool = True) -> None:
        """Close a log from `make_log` that will not be adopted and (``remove``) remove its
        directory, so that a later start does not load it as a partition."""
        try:
            log.close()
        except OSError:
            pass
        if remove:
            self.fs.rmtree(log.directory)

    def adopt(self, log: PartitionLog) -> None:
        """Register a log from `make_log` (on the event loop, once durable)."""
        self._logs[(log.topic, log.partition)] = log

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._logs)

    def partition_count(self) -> int:
        return len(self._logs)

    def logs(self) -> Iterable[PartitionLog]:
        return list(self._logs.values())

    def delete_topic(self, topic: str) -> list[int]:
        """Delete every partition of ``topic``; returns the partitions deleted."""
        parts = sorted(p for t, p in self._logs if t == topic)
        for p in parts:
            self.delete_partition(topic, p)
        return parts

    delete = delete_topic

    def delete_partition(self, topic: str, partition: int, *,
                         background: bool = False) -> bool:
        log = self._logs.pop((topic, partition), None)
        if log is None:
            return False
        # No fsync on the way out: a deletion runs on the event loop (a reassignment's
        # last step, a topic deleted), and an fsync behind a busy disk's writeback stalls
        # every request the broker serves meanwhile. A rename a crash undoes leaves the
        # directory where it was: a stray log, which the next start deletes again.
        try:
            log.close(flush=False)
        except OSError:
            pass  # being deleted: what could not be closed no longer matters
        doomed = os.path.join(
            self.data_dir,
            f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        self.fs.rename(log.directory, doomed)
        # Unlinking a replica's segments (megabytes to gigabytes) is the disk's work, not
        # the loop's: with `background`, a worker thread does it; the rename has already
        # taken the directory out of the way, and one a crash leaves is removed at start.
        if background and self.fs.threaded:
            if self._deleter is None:
                self._deleter = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="log-delete")
            self._deleter.submit(self.fs.rmtree, doomed)
        else:
            self.fs.rmtree(doomed)
        self._uncleanable.discard((topic, partition))
        if self._cleaner_offsets().pop((topic, partition), None) is not None:
            # A re-created partition must not inherit the old one's cleaned range.
            self._write_cleaner_checkpoint()
        return True

    # ------------------------------------------------------------------ periodic work

    def apply_retention(self, now_ms: int, high_watermarks: Mapping[TopicPartition, int] | None = None
                        ) -> dict[TopicPartition, list[int]]:
        """Run retention on every log; returns the deleted segment base offsets per
        partition (only partitions where something was deleted). ``high_watermarks``
        bounds deletion per partition (default: the LEO)."""
        deleted: dict[TopicPartition, list[int]] = {}
        for tp, log in list(self._logs.items()):
            hw = high_watermarks.get(tp) if high_watermarks is not None else None
            bases = log.apply_retention(now_ms, high_watermark=hw)
            if bases:
                deleted[tp] = bases
        return deleted

    def clean_compacted(self, now_ms: int) -> list[tuple[str, int, CleanResult]]:
        """Run the log cleaner (cleaner.py) on every log whose cleanup.policy contains
        "compact" and whose dirty ratio (dirty bytes / non-active bytes) is at least its
        min.cleanable.dirty.ratio, with something dirty; then persist the cleaner
        checkpoints. Returns (topic, partition, CleanResult) per log cleaned. A log whose
        cleaning fails on bad data is skipped until restart (a line in `warnings`)."""
        checkpoints = self._cleaner_offsets()
        results: list[tuple[str, int, CleanResult]] = []
        for tp, log in sorted(self._logs.items()):
            if not log.config.compacts or tp in self._uncleanable:
                continue
            checkpoint = checkpoints.get(tp, 0)
            dirty, total = cleanable_bytes(log, checkpoint)
            if dirty == 0 or dirty / total < log.config.min_cleanable_dirty_ratio:
                continue
            started = time.perf_counter()  # only to report how long the pass took
            try:
                result = clean(log, now_ms=now_ms, cleaner_checkpoint=checkpoint)
            except (RecordError, LogError) as exc:
                self._uncleanable.add(tp)
                self.warnings.append(f"cleaning {tp[0]}-{tp[1]} failed, skipped until restart: {exc}")
                continue
            checkpoints[tp] = result.new_checkpoint
            duration_ms = round((time.perf_counter() - started) * 1000, 3)
            results.append((tp[0], tp[1], result._replace(duration_ms=duration_ms)))
        if results:
            self._write_cleaner_checkpoint()
        return results

    def cleaner_checkpoint(self, topic: str, partition: int) -> int:
        """The first offset of the partition's log not yet cleaned (0 if never)."""
        return self._cleaner_offsets().get((topic, partition), 0)

    def set_cleaner_checkpoint(self, topic: str, partition: int, offset: int) -> None:
        """A partition moved here from another directory keeps its cleaned range."""
        self._cleaner_offsets()[(topic, partition)] = offset
        self._write_cleaner_checkpoint()

    def _cleaner_offsets(self) -> dict[TopicPartition, int]:
        if self._cleaner_checkpoints is None:
            self._cleaner_checkpoints = self._read_checkpoint_or_empty(CLEANER_OFFSET_CHECKPOINT)
        return self._cleaner_checkpoints

    def _write_cleaner_checkpoint(self) -> None:
        offsets = self._cleaner_offsets()
        write_checkpoint(os.path.join(self.data_dir, CLEANER_OFFSET_CHECKPOINT),
                         {tp: off for tp, off in offsets.items() if tp in self._logs}, fs=self.fs)

    def flush_all(self) -> None:
        for log in self._logs.values():
            log.flush()

    def flush_plans(self) -> list[FlushPlan]:
        """What `flush_all` would fsync, for a flush run off the event loop."""
        return [plan for log in self._logs.values() if (plan := log.flush_plan()).files]

    def checkpoints(self) -> dict[str, dict[TopicPartition, int]]:
        """The contents of both checkpoint files now, by file name."""
        return {
            RECOVERY_POINT_CHECKPOINT:
                {tp: log.recovery_point for tp, log in self._logs.items()},
            LOG_START_OFFSET_CHECKPOINT:
                {tp: log.log_start_offset for tp, log in self._logs.items()},
        }

    def write_checkpoints(self, checkpoints: dict[str, dict[TopicPartition, int]]) -> None:
        """Write what `checkpoints` returned (safe on a worker thread: touches no log)."""
        for name, offsets in checkpoints.items():
            write_checkpoint(os.path.join(self.data_dir, name), offsets, fs=self.fs)

    def checkpoint(self) -> None:
        """Write both checkpoint files (Kafka does this every
        log.flush.offset.checkpoint.interval.ms; the broker does it on a timer, off the
        event loop, through `checkpoints` and `write_checkpoints`)."""
        self.write_checkpoints(self.checkpoints())

    def close_offline(self) -> None:
        """Close the logs of a failed directory as far as it lets us: no checkpoint and no
        marker, so the next start recovers it as after a crash."""
        for log in self._logs.values():
            try:
                log.close()
            except OSError:
                pass
        self._logs.clear()

    def close(self, broker_epoch: int = -1) -> None:
        """Clean shutdown: flush and close every log, checkpoint, then write the marker,
        naming `broker_epoch` (the broker's registration, -1 for none). If a log cannot
        be flushed (OSError) every log is still closed, no marker is written -- the next
        start recovers what was not flushed, and registers as after a crash -- and the
        error raised."""
        if self._deleter is not None:  # the deletions under way finish first
            self._deleter.shutdown(wait=True)
            self._deleter = None
        failed: OSError | None = None
        for log in self._logs.values():
            try:
                log.close()
            except OSError as exc:
                failed = failed or exc
        if failed is not None:
            self._logs.clear()
            raise failed
        self.checkpoint()
        write_atomically(os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE),
                         json.dumps({"version": 0, "brokerEpoch": broker_epoch},
                                    separators=(",", ":")), fs=self.fs)
        self._logs.clear()
