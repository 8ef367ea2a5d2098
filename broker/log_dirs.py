"""The broker's log directories and their failure (Kafka's LogDirFailureChannel; KIP-858).

Owns: `LogDirFailureChannel`, which holds each log directory (`LogDir`: its path, its id
from meta.properties' directory.id, which the broker registers with the controller) and
whether it is offline. A storage error is reported here with the path it hit
(`storage_failed`, hooked into Partition's failed appends, failed log creation and reads
that hit EIO). Taking a directory offline (`mark_offline`) tells the `listeners`: the
broker writes the `log_dir_failure` event, stops serving the directory's partitions (they
answer KAFKA_STORAGE_ERROR, as Kafka's offline partitions do) and its lifecycle sends a
heartbeat at once, whose offline_log_dirs makes the controller move the directory's
leaderships to in-sync replicas on other brokers and take this broker out of those
partitions' ISRs. The other directories go on serving. From then until a restart, the
directory gets no new partition, checkpoint, retention or cleaning.

The policy: offline when leadership can move, recover in place when it cannot.

- Kafka takes a directory offline at its first I/O error and serves it again only after a
  restart: its replicas elsewhere take over at once, and it cannot vouch for the state of
  its memory-mapped index files after a failed write. A full disk on one broker then costs
  clients a leader change, not data or a wait for the operator.
- A minibroker append is undone exactly when the file system refuses it (broker/log/log.py),
  so a partition could take writes again as soon as there is room; docs/BROKER.md
  ("Storage faults") describes that behaviour. A broker with no other broker to take over
  (a single node, or the last broker alive) keeps it: offline would mean every partition is
  gone until someone restarts the broker, where a full disk is usually cured by retention or
  by deleting a topic, without one.

So `storage_failed` takes the directory offline only while another active broker is
registered (`can_fail_over`); else the failed request gets KAFKA_STORAGE_ERROR and the next
one tries again, as before. The choice is made at each failure: a broker that fails alone
and later has company goes offline at its next failure. A partition whose only in-sync
replica is on the failed directory has no leader until this broker restarts with the
directory online, as in Kafka.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Sequence

log = logging.getLogger("minibroker.log_dirs")


class LogDir:
    """One log directory (one entry of log.dirs)."""

    def __init__(self, path: str, directory_id: uuid.UUID) -> None:
        self.path = path
        self.directory_id = directory_id
        self.reason: str | None = None  # why it went offline

    @property
    def offline(self) -> bool:
        return self.reason is not None

    def holds(self, path: str) -> bool:
        """Whether `path` is this directory or something directly in it."""
        norm, mine = os.path.normpath(path), os.path.normpath(self.path)
        return norm == mine or os.path.dirname(norm) == mine


class LogDirFailureChannel:
    """The log directories (log.dirs, in order) and which of them have failed."""

    def __init__(self, dirs: Sequence[tuple[str, uuid.UUID]], *,
                 can_fail_over: Callable[[], bool] = lambda: True) -> None:
        self.dirs = [LogDir(path, directory_id) for path, directory_id in dirs]
        # called once per directory, with it and the reason, when it goes offline
        self.listeners: list[Callable[[LogDir, str], object]] = []
        self._can_fail_over = can_fail_over

    @property
    def path(self) -> str:
        """The first directory: the metadata log's and the event log's."""
        return self.dirs[0].path

    def dir_of(self, path: str) -> LogDir | None:
        """The directory `path` (a log directory, or a partition's directory) is in."""
        return next((d for d in self.dirs if d.holds(path)), None)

    def by_id(self, directory_id: uuid.UUID) -> LogDir | None:
        return next((d for d in self.dirs if d.directory_id == directory_id), None)

    def is_offline(self, path: str) -> bool:
        d = self.dir_of(path)
        return d is not None and d.offline

    @property
    def all_offline(self) -> bool:
        return all(d.offline for d in self.dirs)

    def dir_ids(self) -> list[uuid.UUID]:
        """Every directory of this broker, online or not (BrokerRegistration.log_dirs)."""
        return [d.directory_id for d in self.dirs]

    def offline_dir_ids(self) -> list[uuid.UUID]:
        """The failed ones (BrokerHeartbeat.offline_log_dirs)."""
        return [d.directory_id for d in self.dirs if d.offline]

    def storage_failed(self, reason: str, path: str | None = None) -> bool:
        """The file system refused a write or a read under `path` (None: the first
        directory); whether that took its directory offline (see the module docstring
        for when it does)."""
        directory = self.dirs[0] if path is None else self.dir_of(path)
        if directory is None or directory.offline or not self._can_fail_over():
            return False
        return self.mark_offline(directory, reason)

    def mark_offline(self, directory: LogDir, reason: str) -> bool:
        """Take the directory offline until the broker restarts; False if it already was."""
        if directory.offline:
            return False
        directory.reason = reason
        log.error("log directory %s is offline until restart: %s", directory.path, reason)
        for listener in self.listeners:
            listener(directory, reason)
        return True
