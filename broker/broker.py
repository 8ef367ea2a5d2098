"""The broker's state, shared by every handler: config, metadata, partitions, events.

Owns: `Broker`, which opens the data directory (metadata image, log recovery), creates and
deletes topics and partitions (a change the file system refuses raises KafkaStorageError
with nothing half made), and wakes long-polling fetches when data arrives. It does no
socket I/O (broker.server does) and reads the clock only through `now_ms`, which tests can
replace.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import trio

from broker.config import BrokerConfig, topic_log_config
from broker.events import EventLog
from broker.log.errors import KafkaStorageError
from broker.log.manager import LogManager
from broker.metadata import MetadataImage, TopicInfo
from broker.partition import Partition

VERSION = "0.1.0"

log = logging.getLogger("minibroker.broker")


@dataclass(frozen=True)
class Listener:
    host: str
    port: int


def parse_listener(text: str) -> Listener:
    """'HOST:PORT' or Kafka's 'PLAINTEXT://HOST:PORT'."""
    if "://" in text:
        text = text.split("://", 1)[1]
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"listener must be HOST:PORT, got {text!r}")
    return Listener(host.strip("[]"), int(port))


class Broker:
    def __init__(self, config: BrokerConfig, clock: Callable[[], float] = time.time):
        self.config = config
        self.node_id: int = config.broker_id
        self.listener = parse_listener(config.listeners)
        self.advertised = parse_listener(config.advertised_listeners or config.listeners)
        self.data_dir = config.log_dirs
        self._clock = clock
        self.events = EventLog(self.data_dir, self.node_id,
                               segment_bytes=config.events_segment_bytes,
                               retention_files=config.events_retention_files, clock=clock)
        self.metadata = MetadataImage(self.data_dir, self.node_id)
        self.logs = LogManager(self.data_dir, on_event=self.events.emit)
        self.partitions: dict[tuple[str, int], Partition] = {}
        # fetches long-polling each partition; an append wakes only its own partition's
        self._fetch_waiters: dict[tuple[str, int], set[trio.Event]] = {}
        from broker.coordinator.runtime import CoordinatorRuntime
        self.groups = CoordinatorRuntime(self)
        self.started_ms = self.now_ms()
        self.clean_start = True

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- life cycle -------------------------------------------------------------------------

    def open(self) -> None:
        fresh = not self.metadata.topics  # a new data directory has nothing to recover
        reports = self.logs.open(now_ms=self.now_ms())
        self.clean_start = fresh or not self.logs.recovered_uncleanly
        for r in reports:
            self.events.emit("log_recovery", topic=r.topic, partition=r.partition,
                             truncated_bytes=r.truncated_bytes,
                             segments_recovered=r.segments_recovered,
                             log_end_offset=r.log_end_offset, duration_ms=r.duration_ms)
        for info in self.metadata.topics.values():
            for index in range(info.partitions):
                self._open_partition(info, index)
        self.events.emit("broker_start", listener=f"{self.listener.host}:{self.listener.port}",
                         data_dir=str(self.data_dir), cluster_id=self.metadata.cluster_id,
                         clean_shutdown=self.clean_start, version=VERSION)
        self.events.flush()

    def close(self, reason: str = "shutdown") -> None:
        try:
            self.logs.close()
        except OSError as e:
            log.error("could not flush the logs at shutdown (%s); the next start recovers "
                      "them as after a crash", e)
        self.events.emit("broker_stop", reason=reason, uptime_ms=self.now_ms() - self.started_ms)
        self.events.close()

    # -- topics -----------------------------------------------------------------------------

    def _open_partition(self, info: TopicInfo, index: int) -> Partition:
        log = self.logs.get_or_create(info.name, index, topic_log_config(self.config, info.configs),
                                      topic_id=info.topic_id)
        partition = self.partitions[(info.name, index)] = Partition(info.name, index, log)
        return partition

    def _forget_partitions(self, topic: str, start: int, end: int) -> None:
        """Drop partitions [start, end) of a topic and delete their directories. Deletion is
        best effort: a directory the file system will not let go is named in the log."""
        for index in range(start, end):
            self.partitions.pop((topic, index), None)
            try:
                self.logs.delete_partition(topic, index)
            except OSError as e:
                log.error("could not finish deleting %s-%d (%s); if its directory is still "
                          "there, remove it before creating the topic again", topic, index, e)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1,
                     configs: dict[str, Any] | None = None, *, auto: bool = False,
                     internal: bool = False) -> TopicInfo:
        try:
            info = self.metadata.create_topic(name, partitions, replication_factor, configs,
                                              internal)
        except OSError as e:
            raise KafkaStorageError(f"cannot create topic {name}: {e}") from e
        try:
            for index in range(partitions):
                self._open_partition(info, index)
        except OSError as e:  # full disk or unwritable data dir: the topic was never made
            self._forget_partitions(name, 0, partitions)
            try:
                self.metadata.delete_topic(name)
            except OSError:
                # still listed on disk (its partitions are then made at the next start),
                # but not in this run, which has none of them
                self.metadata.topics.pop(name, None)
            raise KafkaStorageError(f"cannot create topic {name}: {e}") from e
        self.events.emit("topic_create", topic=name, topic_id=str(info.topic_id),
                         partitions=partitions, replication_factor=replication_factor,
                         configs=json.dumps(info.configs, default=str), auto=auto)
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        try:
            info = self.metadata.delete_topic(name)
        except OSError as e:
            raise KafkaStorageError(f"cannot delete topic {name}: {e}") from e
        self._forget_partitions(name, 0, info.partitions)
        self.events.emit("topic_delete", topic=name, topic_id=str(info.topic_id))
        for index in range(info.partitions):  # fetches waiting on them answer at once
            self.notify_data_arrived(name, index)
        return info

    def create_partitions(self, name: str, count: int) -> None:
        info = self.metadata.topics[name]
        old = info.partitions
        try:
            self.metadata.set_partitions(name, count)
        except OSError as e:
            raise KafkaStorageError(f"cannot add partitions to {name}: {e}") from e
        try:
            for index in range(old, count):
                self._open_partition(info, index)
        except OSError as e:
            self._forget_partitions(name, old, count)
            try:
                self.metadata.set_partitions(name, old)
            except OSError:
                info.partitions = old  # on disk still the new count: made at the next start
            raise KafkaStorageError(f"cannot add partitions to {name}: {e}") from e
        self.events.emit("partitions_create", topic=name, old_count=old, new_count=count)

    # -- data arrival, for long-polling fetches -------------------------------------------

    def notify_data_arrived(self, topic: str, partition: int) -> None:
        """Wake the fetches waiting on this partition, and only those."""
        for event in self._fetch_waiters.pop((topic, partition), ()):
            event.set()

    async def wait_for_data(self, partitions: list[tuple[str, int]]) -> None:
        """Return when any of these partitions has an append (the caller bounds the wait)."""
        event = trio.Event()
        for tp in partitions:
            self._fetch_waiters.setdefault(tp, set()).add(event)
        try:
            await event.wait()
        finally:
            for tp in partitions:
                waiters = self._fetch_waiters.get(tp)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._fetch_waiters[tp]

    # -- housekeeping -----------------------------------------------------------------------

    def apply_retention(self) -> None:
        self.logs.apply_retention(self.now_ms())

    def clean_compacted(self) -> None:
        for topic, partition, r in self.logs.clean_compacted(self.now_ms()):
            self.events.emit("log_clean", topic=topic, partition=partition,
                             bytes_before=r.bytes_before, bytes_after=r.bytes_after,
                             records_removed=r.records_removed,
                             tombstones_removed=r.tombstones_removed, duration_ms=r.duration_ms)
