"""The broker's log directory and its failure (Kafka's LogDirFailureChannel; KIP-858).

Owns: `LogDirFailureChannel`, which holds the data directory's id (meta.properties'
directory.id, which the broker registers with the controller) and whether it is offline.
A storage error is reported here (`storage_failed`, hooked into Partition's failed
appends, failed log creation and reads that hit EIO). Taking the directory offline
(`mark_offline`) tells the `listeners`: the broker writes the `log_dir_failure` event and
its lifecycle sends a heartbeat at once, whose offline_log_dirs makes the controller move
the directory's leaderships to in-sync replicas on other brokers. From then until a
restart, every partition of the directory answers KAFKA_STORAGE_ERROR to Produce and
Fetch (handlers/common.py's lookup), as Kafka's offline partitions do.

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
import uuid
from collections.abc import Callable

log = logging.getLogger("minibroker.log_dirs")


class LogDirFailureChannel:
    """One data directory (log.dirs names one) and whether it has failed."""

    def __init__(self, path: str, directory_id: uuid.UUID, *,
                 can_fail_over: Callable[[], bool] = lambda: True) -> None:
        self.path = path
        self.directory_id = directory_id
        self.reason: str | None = None  # why it went offline
        # called once, with the reason, when the directory goes offline
        self.listeners: list[Callable[[str], object]] = []
        self._can_fail_over = can_fail_over

    @property
    def offline(self) -> bool:
        return self.reason is not None

    def dir_ids(self) -> list[uuid.UUID]:
        """Every directory of this broker, online or not (BrokerRegistration.log_dirs)."""
        return [self.directory_id]

    def offline_dir_ids(self) -> list[uuid.UUID]:
        """The failed ones (BrokerHeartbeat.offline_log_dirs)."""
        return [self.directory_id] if self.offline else []

    def storage_failed(self, reason: str) -> bool:
        """The file system refused a write or a read of this directory; whether that took
        it offline (see the module docstring for when it does)."""
        if self.offline or not self._can_fail_over():
            return False
        return self.mark_offline(reason)

    def mark_offline(self, reason: str) -> bool:
        """Take the directory offline until the broker restarts; False if it already was."""
        if self.offline:
            return False
        self.reason = reason
        log.error("log directory %s is offline until restart: %s", self.path, reason)
        for listener in self.listeners:
            listener(reason)
        return True
