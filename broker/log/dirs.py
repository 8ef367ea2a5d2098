"""Every log directory of the broker (Kafka's LogManager over several log.dirs: JBOD).

Owns: `LogDirs`, one `LogManager` per directory (manager.py: its partitions, checkpoint
files and clean-shutdown marker, as Kafka keeps them per directory), seen as one: a
partition's log is in exactly one directory, and `get`, `logs`, `delete_partition` and the
periodic work go to whichever holds it. With one directory it is that directory's manager.

Placement of a new replica (`choose_dir`): the online directory holding the fewest
partitions (future replicas and logs being made count), ties broken by the most free
bytes, then by log.dirs order. Kafka 3.7+ places by partition count alone
(LogManager.nextLogDirs); free space first would pile every new partition on an empty
disk, count first spreads them and still prefers room between equals.

Moving a replica (AlterReplicaLogDirs, KIP-113): `make_future_log` makes
``<topic>-<partition>.<uuid>-future`` in the target directory; the copy fills it
(broker/replication/alter_log_dirs.py); `replace_current_with_future` swaps it in: the
current log's aborted-transaction index entries copied over, both logs closed after a flush, the future directory renamed to the partition's own name (two
directories of the partition now exist, with the same batches), then the old one renamed
``-delete`` and removed, and the new log opened again. A crash between the two renames
leaves duplicates: `open` keeps the one with the higher log end offset (they are equal
when the crash came between the renames) and deletes the other. A ``-future`` directory
found at start is an unfinished move: it resumes (`futures`, recovered whole) when the
partition is in another directory, else it is removed.

An offline directory (`is_offline(path)`, broker/log_dirs.py's channel) gets no new
partition, checkpoint, flush, retention or cleaning, and its logs are left as they are.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from protocol.names import TopicPartition, partition_dir_name

from broker.storage import REAL, FileSystem

from .cleaner import CleanResult
from .config import LogConfig
from .loader import RecoveryReport, fsync_dir
from .log import EventSink, FlushPlan, PartitionLog
from .manager import (
    FUTURE_DIR_SUFFIX, PARTITION_METADATA_FILE, LogManager,
    write_partition_metadata, read_partition_metadata,
)


def disk_usage(path: str, real: bool) -> tuple[int, int]:
    """The total and free bytes of `path`'s file system (-1, -1 for the simulation's disks,
    which have no size, or when the file system will not say)."""
    if not real:
        return -1, -1
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1, -1
    return usage.total, usage.free


class LogDirs:
    """The partition logs of every directory in `paths` (log.dirs, in order)."""

    def __init__(self, paths: Sequence[str], default_config: LogConfig | None = None, *,
                 config_for: Callable[[str], LogConfig] | None = None,
                 on_event: EventSink | None = None, recovery_threads: int = 1,
                 fs: FileSystem = REAL,
                 is_offline: Callable[[str], bool] = lambda path: False) -> None:
        if not paths:
            raise ValueError("no log directory")
        self.fs = fs
        self.managers = [LogManager(p, default_config, config_for=config_for,
                                    on_event=on_event, recovery_threads=recovery_threads, fs=fs)
                         for p in paths]
        self.data_dir = self.managers[0].data_dir
        self._is_offline = is_offline
        # logs made but not adopted yet, and future logs, by directory: placement counts them
        self._pending: dict[str, int] = {}
        # (topic, partition) -> the future log of a move in progress
        self.futures: dict[TopicPartition, PartitionLog] = {}

    # ------------------------------------------------------------------ directories

    @property
    def paths(self) -> list[str]:
        return [m.data_dir for m in self.managers]

    def manager(self, path: str) -> LogManager | None:
        """The manager of log directory `path`, or of the log directory holding `path`."""
        norm = os.path.normpath(path)
        for m in self.managers:
            d = os.path.normpath(m.data_dir)
            if norm == d or os.path.dirname(norm) == d:
                return m
        return None

    def online(self) -> list[LogManager]:
        return [m for m in self.managers if not self._is_offline(m.data_dir)]

    def choose_dir(self, exclude: Iterable[str] = ()) -> LogManager | None:
        """Where a new replica goes (module docstring); None when no directory is online."""
        skip = {os.path.normpath(p) for p in exclude}
        candidates = [m for m in self.online() if os.path.normpath(m.data_dir) not in skip]
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]

        def key(item: tuple[int, LogManager]) -> tuple[int, int, int]:
            order, m = item
            count = m.partition_count() + self._pending.get(m.data_dir, 0)
            return count, -disk_usage(m.data_dir, self.fs.threaded)[1], order
        return min(enumerate(candidates), key=key)[1]

    # ------------------------------------------------------------------ start-up

    def open(self, now_ms: int | None = None) -> list[RecoveryReport]:
        reports: list[RecoveryReport] = []
        for m in self.managers:
            reports += m.open(now_ms=now_ms)
        self._resolve_duplicates()
        self._resume_futures()
        return reports

    def _resume_futures(self) -> None:
        """The future replicas found at start: a move resumes (its log recovered whole,
        since the copy's recovery point is not checkpointed) when the partition's current
        log is in another directory and of the same topic; else the copy is removed."""
        for m in self.managers:
            for tp, path in m.future_dirs:
                holder = self._holder(*tp)
                current = holder.get(*tp) if holder is not None else None
                future_id = read_partition_metadata(path, fs=self.fs)
                current_id = (read_partition_metadata(current.directory, fs=self.fs)
                              if current is not None else None)
                if (current is None or holder is m or tp in self.futures
                        or (future_id is not None and current_id is not None
                            and future_id != current_id)):
                    self.fs.rmtree(path)
                    continue
                try:
                    self.futures[tp] = PartitionLog.open(
                        path, tp[0], tp[1], current.config, clean_shutdown=False, now_ms=None,
                        fs=self.fs)
                except OSError as exc:
                    self.warnings.append(f"could not resume moving {tp[0]}-{tp[1]} to "
                                         f"{m.data_dir}: {exc}")
                    self.fs.rmtree(path)
                    continue
                self._pending[m.data_dir] = self._pending.get(m.data_dir, 0) + 1
            m.future_dirs = []

    def _resolve_duplicates(self) -> None:
        seen: dict[TopicPartition, LogManager] = {}
        for m in self.managers:
            for tp in m.partitions():
                other = seen.get(tp)
                if other is None:
                    seen[tp] = m
                    continue
                mine, theirs = m.get(*tp), other.get(*tp)
                assert mine is not None and theirs is not None
                loser = m if mine.log_end_offset <= theirs.log_end_offset else other
                self.warnings.append(
                    f"{tp[0]}-{tp[1]} was in both {other.data_dir} and {m.data_dir} (a move "
                    f"interrupted by a crash): kept the copy outside {loser.data_dir}")
                loser.delete_partition(*tp)
                seen[tp] = other if loser is m else m

    @property
    def warnings(self) -> list[str]:
        return self.managers[0].warnings

    @property
    def had_clean_shutdown(self) -> bool | None:
        states = [m.had_clean_shutdown for m in self.managers]
        return None if None in states else all(states)

    @property
    def recovered_uncleanly(self) -> bool:
        return any(m.recovered_uncleanly for m in self.managers)

    @property
    def clean_shutdown_broker_epoch(self) -> int:
        """The broker epoch every directory's marker names; -1 if they differ or one has
        none (a directory that crashed makes the whole start unclean)."""
        epochs = {m.clean_shutdown_broker_epoch for m in self.managers}
        return epochs.pop() if len(epochs) == 1 else -1

    # ------------------------------------------------------------------ partitions

    def _holder(self, topic: str, partition: int) -> LogManager | None:
        for m in self.managers:
            if m.get(topic, partition) is not None:
                return m
        return None

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        m = self._holder(topic, partition)
        return m.get(topic, partition) if m is not None else None

    def dir_of(self, topic: str, partition: int) -> str | None:
        m = self._holder(topic, partition)
        return m.data_dir if m is not None else None

    def _for_new(self, topic: str, partition: int) -> LogManager:
        name = partition_dir_name(topic, partition)
        for m in self.online():  # a directory left by a failed creation: used again
            if self.fs.exists(os.path.join(m.data_dir, name)):
                return m
        chosen = self.choose_dir()
        if chosen is None:
            raise OSError(f"no log directory is online (of {', '.join(self.paths)})")
        return chosen

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None, *,
                      topic_id: uuid.UUID | None = None) -> PartitionLog:
        log = self.get(topic, partition)
        if log is not None:
            return log
        return self._for_new(topic, partition).get_or_create(topic, partition, config,
                                                            topic_id=topic_id)

    def make_log(self, topic: str, partition: int, config: LogConfig | None = None, *,
                 topic_id: uuid.UUID | None = None) -> PartitionLog:
        m = self._for_new(topic, partition)
        log = m.make_log(topic, partition, config, topic_id=topic_id)
        self._pending[m.data_dir] = self._pending.get(m.data_dir, 0) + 1
        return log

    def _unpend(self, log: PartitionLog) -> None:
        m = self.manager(log.directory)
        if m is not None and self._pending.get(m.data_dir, 0) > 0:
            self._pending[m.data_dir] -= 1

    def sync_new_logs(self, logs: list[PartitionLog]) -> None:
        by_dir: dict[str, list[PartitionLog]] = {}
        for log in logs:
            by_dir.setdefault(os.path.dirname(os.path.normpath(log.directory)), []).append(log)
        for path, some in by_dir.items():
            m = self.manager(path)
            assert m is not None
            m.sync_new_logs(some)

    def discard_new_log(self, log: PartitionLog, *, remove: bool = True) -> None:
        self._unpend(log)
        m = self.manager(log.directory)
        assert m is not None
        m.discard_new_log(log, remove=remove)

    def adopt(self, log: PartitionLog) -> None:
        self._unpend(log)
        m = self.manager(log.directory)
        assert m is not None
        m.adopt(log)

    def partitions(self) -> list[TopicPartition]:
        return sorted(tp for m in self.managers for tp in m.partitions())

    def logs(self) -> Iterable[PartitionLog]:
        return [log for m in self.managers for log in m.logs()]

    def delete_topic(self, topic: str) -> list[int]:
        return sorted(p for m in self.managers for p in m.delete_topic(topic))

    delete = delete_topic

    def delete_partition(self, topic: str, partition: int, *,
                         background: bool = False) -> bool:
        self.abandon_future(topic, partition)
        m = self._holder(topic, partition)
        return (m.delete_partition(topic, partition, background=background)
                if m is not None else False)

    def cleaner_checkpoint(self, topic: str, partition: int) -> int:
        m = self._holder(topic, partition)
        return m.cleaner_checkpoint(topic, partition) if m is not None else 0

    # ------------------------------------------------------------------ moves (KIP-113)

    def make_future_log(self, topic: str, partition: int, target: str,
                        config: LogConfig, topic_id: uuid.UUID | None) -> PartitionLog:
        """An empty future log of the partition in directory `target`, durable."""
        m = self.manager(target)
        assert m is not None
        path = os.path.join(m.data_dir, f"{partition_dir_name(topic, partition)}."
                                         f"{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}")
        log = PartitionLog.open(path, topic, partition, config, fs=self.fs)
        try:
            if topic_id is not None:
                write_partition_metadata(path, topic_id, fs=self.fs)
            fsync_dir(path, self.fs)
            fsync_dir(m.data_dir, self.fs)
        except OSError:
            log.close()
            self.fs.rmtree(path)
            raise
        self.futures[(topic, partition)] = log
        self._pending[m.data_dir] = self._pending.get(m.data_dir, 0) + 1
        return log

    def future_dir(self, topic: str, partition: int) -> str | None:
        future = self.futures.get((topic, partition))
        return os.path.dirname(os.path.normpath(future.directory)) if future else None

    def abandon_future(self, topic: str, partition: int) -> bool:
        """Drop a move in progress: the future log is closed and removed."""
        future = self.futures.pop((topic, partition), None)
        if future is None:
            return False
        self._unpend(future)
        try:
            future.close()
        except OSError:
            pass
        try:
            self.fs.rmtree(future.directory)
        except OSError:
            pass
        return True

    def replace_current_with_future(self, topic: str, partition: int) -> PartitionLog:
        """Swap a caught-up future log in for the current one (module docstring); the
        caller has checked that both end at the same offset. Returns the new current log,
        opened again in its final directory."""
        tp = (topic, partition)
        future = self.futures.pop(tp)
        self._unpend(future)
        source = self._holder(topic, partition)
        target = self.manager(future.directory)
        assert source is not None and target is not None
        current = source.get(topic, partition)
        assert current is not None
        topic_id = read_partition_metadata(current.directory, fs=self.fs)
        log_start = current.log_start_offset
        cleaned = source.cleaner_checkpoint(topic, partition)
        # the copy took the batches; the aborted transactions' index goes with them, or a
        # read_committed fetch of the moved log would return aborted records
        for seg in current.segments:
            for txn in seg.txn_index.all_aborted_txns():
                if future.log_start_offset <= txn.last_offset < future.log_end_offset:
                    future.append_aborted_txn(txn, unless_present=True)
        future.close()
        final = os.path.join(target.data_dir, partition_dir_name(topic, partition))
        self.fs.rename(future.directory, final)
        fsync_dir(target.data_dir, self.fs)
        # from here a crash leaves two copies with the same batches: `open` keeps one
        source.delete_partition(topic, partition)
        if topic_id is not None and not self.fs.exists(os.path.join(final, PARTITION_METADATA_FILE)):
            write_partition_metadata(final, topic_id, fs=self.fs)
        log = PartitionLog.open(final, topic, partition, current.config,
                                log_start_offset=log_start,
                                on_event=target._on_event, fs=self.fs)
        if log.log_start_offset < log_start:
            log.delete_records_before(log_start)
        target.adopt(log)
        if cleaned:
            target.set_cleaner_checkpoint(topic, partition, cleaned)
        return log

    # ------------------------------------------------------------------ periodic work

    def apply_retention(self, now_ms: int, high_watermarks: Mapping[TopicPartition, int] | None = None
                        ) -> dict[TopicPartition, list[int]]:
        deleted: dict[TopicPartition, list[int]] = {}
        for m in self.online():
            deleted.update(m.apply_retention(now_ms, high_watermarks))
        return deleted

    def clean_compacted(self, now_ms: int) -> list[tuple[str, int, CleanResult]]:
        return [r for m in self.online() for r in m.clean_compacted(now_ms)]

    def flush_all(self) -> None:
        for m in self.online():
            m.flush_all()

    def flush_plans(self) -> list[FlushPlan]:
        plans = [p for m in self.online() for p in m.flush_plans()]
        plans += [p for f in self.futures.values() if (p := f.flush_plan()).files]
        return plans

    def checkpoints(self) -> dict[str, dict[str, dict[TopicPartition, int]]]:
        """Each online directory's checkpoint files' contents, by directory."""
        return {m.data_dir: m.checkpoints() for m in self.online()}

    def write_checkpoints(self, checkpoints: dict[str, dict[str, dict[TopicPartition, int]]]
                          ) -> None:
        for path, files in checkpoints.items():
            m = self.manager(path)
            if m is not None:
                m.write_checkpoints(files)

    def checkpoint(self) -> None:
        self.write_checkpoints(self.checkpoints())

    def close(self, broker_epoch: int = -1) -> None:
        """Each online directory as `LogManager.close` (flushed, checkpointed, marked
        clean); an offline one's logs are closed as they can be and get no marker. Moves
        in progress are closed (flushed), to resume at the next start. The first error is
        raised after every directory had its turn."""
        failed: OSError | None = None
        for future in list(self.futures.values()):
            try:
                future.close()
            except OSError as exc:
                failed = failed or exc
        self.futures.clear()
        for m in self.managers:
            try:
                if self._is_offline(m.data_dir):
                    m.close_offline()
                else:
                    m.close(broker_epoch=broker_epoch)
            except OSError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
