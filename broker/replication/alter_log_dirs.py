"""Moving a replica between this broker's log directories while it serves (KIP-113;
Kafka's ReplicaAlterLogDirsManager and ReplicaAlterLogDirsThread).

Owns: `ReplicaAlterLogDirs`. `start_move` makes the partition's future log in the target
directory (broker/log/dirs.py: ``<topic>-<partition>.<uuid>-future``); `run` copies the
current log's batches into it, offsets and leader epochs kept, a chunk at a time on the
event loop, while the current log goes on taking produce and serving fetches; the
partition truncates the future log with its own (Partition.truncate_to), and a log start
offset that moved past the copy restarts it there. When the copy reaches the current log
end offset, the swap happens in the same step, with no await between the check and the
swap, so no append can come between: the log directories swap the directories
(`LogDirs.replace_current_with_future`), the partition takes the new log, its leader-epoch
checkpoint is written in the new directory and the producer state snapshotted there.

What Kafka does that this does not: its copy runs on a thread of its own, throttled by
replica.alter.log.dirs.io.max.bytes.per.second (here: `CHUNK_BYTES` per event-loop turn,
unthrottled). A move survives a restart, as Kafka's: the future log is loaded at start
(LogDirs.open, recovered whole) and the copy goes on from its end once the partition is
open (Broker._partition hands it to the partition). The new directory is
reported to the controller after the swap (AssignReplicasToDirs, through
directory_assignments.py), not when the future log is made as Kafka 3.7+ does: until the
swap, a failure of the source directory is what must move the leadership.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import trio

from broker.log.errors import KafkaStorageError
from broker.replication.leader_epochs import relocate_cache
from protocol.errors import ErrorCode

# the broker (broker.broker.Broker) is typed loosely: it imports this module
Broker = Any

log = logging.getLogger("minibroker.alter_log_dirs")

CHUNK_BYTES = 1 << 20  # copied per step; the event loop runs other work between steps


class ReplicaAlterLogDirs:
    """The moves between log directories in progress on one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._wanted = trio.Event()
        self.moves_done = 0  # swaps completed since start (for tests and metrics)

    def start_move(self, topic: str, index: int, target: str) -> ErrorCode:
        """Move this broker's replica of topic-index to log directory `target` (one of
        log.dirs, offline or not: the handler checked). NONE when the move is under way
        (or the replica is there already: a move elsewhere in progress is dropped, as
        Kafka's abortAndPauseCleaning of the future replica)."""
        broker = self.broker
        key = (topic, index)
        if key in broker.offline_partitions or broker.log_dirs.is_offline(target):
            return ErrorCode.KAFKA_STORAGE_ERROR
        partition = broker.partitions.get(key)
        if partition is None:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        current = broker.logs.dir_of(topic, index)
        future = broker.logs.future_dir(topic, index)
        if current is not None and _same(current, target):
            self.cancel(topic, index)
            return ErrorCode.NONE
        if future is not None:
            if _same(future, target):
                return ErrorCode.NONE
            self.cancel(topic, index)
        topic_image = broker.metadata_cache.topic(topic)
        try:
            partition.future_log = broker.logs.make_future_log(
                topic, index, target, partition.log.config,
                topic_image.topic_id if topic_image is not None else None)
        except OSError as e:
            broker.log_dirs.storage_failed(f"cannot make the future log of {topic}-{index}: {e}",
                                           target)
            return ErrorCode.KAFKA_STORAGE_ERROR
        log.info("moving %s-%d from %s to %s", topic, index, current, target)
        self._wanted.set()
        return ErrorCode.NONE

    def cancel(self, topic: str, index: int) -> None:
        """Drop a move in progress (the partition went, or its directory failed)."""
        partition = self.broker.partitions.get((topic, index)) or \
            self.broker.offline_partitions.get((topic, index))
        if partition is not None:
            partition.future_log = None
        self.broker.logs.abandon_future(topic, index)

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        # moves found at start (LogDirs.open) resume once the replicas have their image
        await self.broker.first_publish.wait()
        if self.broker.logs.futures:
            self._wanted.set()
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            while self.broker.logs.futures:
                for topic, index in list(self.broker.logs.futures):
                    try:
                        self._step(topic, index)
                    except (OSError, KafkaStorageError) as e:
                        self._failed(topic, index, e)
                    await trio.lowlevel.checkpoint()  # requests go between chunks

    def _step(self, topic: str, index: int) -> None:
        """Copy one chunk of topic-index into its future log; swap when caught up."""
        broker = self.broker
        partition = broker.partitions.get((topic, index))
        future = broker.logs.futures.get((topic, index))
        if future is None:
            return
        if partition is None:
            self.cancel(topic, index)
            return
        current = partition.log
        if future.log_end_offset < current.log_start_offset:
            # retention or DeleteRecords passed the copy: what is missing is gone anyway
            future.truncate_fully_and_start_at(current.log_start_offset)
        if future.log_end_offset < current.log_end_offset:
            try:
                data = current.read(future.log_end_offset, CHUNK_BYTES, min_one_message=True)
            except (OSError, KafkaStorageError) as e:  # the source's fault, not the target's
                self.cancel(topic, index)
                broker.log_dirs.storage_failed(f"{topic}-{index}: {e}", current.directory)
                return
            if data:
                future.append_as_follower(data, now_ms=broker.now_ms())
        if future.log_end_offset >= current.log_end_offset:
            self._swap(topic, index)

    def _swap(self, topic: str, index: int) -> None:
        broker = self.broker
        partition = broker.partitions[(topic, index)]
        source = broker.logs.dir_of(topic, index)
        new = broker.logs.replace_current_with_future(topic, index)
        partition.log = new
        partition.future_log = None
        partition.epochs = relocate_cache(partition.epochs, new.directory, fs=broker.fs)
        partition._take_snapshot(new.log_end_offset)  # best effort: a shortcut for a restart
        self.moves_done += 1
        registration = broker.metadata_cache.partition(topic, index)
        if registration is not None:  # the controller learns the new directory
            broker.dir_assignments.check(topic, index, registration)
        target = os.path.dirname(os.path.normpath(new.directory))
        log.info("moved %s-%d from %s to %s at offset %d", topic, index, source, target,
                 new.log_end_offset)
        broker.events.emit("log_dir_move", topic=topic, partition=index,
                           source=str(source), target=target,
                           log_end_offset=new.log_end_offset)

    def _failed(self, topic: str, index: int, error: Exception) -> None:
        """Writing the copy (or swapping it in) failed: the target directory's fault."""
        broker = self.broker
        target = broker.logs.future_dir(topic, index)
        log.error("moving %s-%d to %s failed: %s", topic, index, target, error)
        self.cancel(topic, index)
        if target is not None:
            broker.log_dirs.storage_failed(f"moving {topic}-{index}: {error}", target)


def _same(a: str, b: str) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))
