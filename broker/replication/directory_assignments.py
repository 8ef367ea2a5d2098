"""Telling the controller which log directory holds each replica (KIP-858; Kafka's
AssignmentsManager).

Owns: `DirectoryAssignments`. A broker with several log directories compares, at every
registration it applies (Broker._follow) and after every move between directories
(alter_log_dirs.py), the directory the metadata names for its replica
(PartitionRegistration.directory_of) with the one that holds it; where they differ it
queues an assignment, and `run` sends what is queued in one AssignReplicasToDirs to the
active controller, again after a pause when the controller cannot be reached or refuses
the request as a whole (dropped instead when it names a directory the registration does
not list: one that failed meanwhile). The controller records it as a PartitionChangeRecord; when a
directory later fails, that is how it knows which leaderships to move
(ReplicationControlManager.handle_directories_offline). A broker with one directory sends
none: every replica it has is in that directory, and its heartbeat naming it offline takes
the whole broker out of the ISRs.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import trio

from broker import timeouts
from broker.controller_channel import ControllerUnavailable
from protocol import messages as m
from protocol.errors import ErrorCode

# the broker (broker.broker.Broker) is typed loosely: it imports this module
Broker = Any

log = logging.getLogger("minibroker.directory_assignments")

ASSIGN_VERSION = 0
RETRY_S = 0.5
BATCH = 1000  # partitions per request


class DirectoryAssignments:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.pending: dict[tuple[uuid.UUID, int], uuid.UUID] = {}
        self._wanted = trio.Event()
        self.sent = 0  # assignments the controller accepted (for tests)

    def check(self, topic: str, index: int, registration: Any) -> None:
        """Queue an assignment when the metadata does not place this broker's replica of
        topic-index where it is."""
        broker = self.broker
        if len(broker.log_dirs.dirs) < 2:
            return
        path = broker.logs.dir_of(topic, index)
        directory = broker.log_dirs.dir_of(path) if path is not None else None
        topic_image = broker.metadata_cache.topic(topic)
        if directory is None or topic_image is None:
            return
        if registration.directory_of(broker.node_id) != directory.directory_id:
            self.pending[(topic_image.topic_id, index)] = directory.directory_id
            self._wanted.set()

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            while self.pending:
                if self.broker.lifecycle.broker_epoch < 0:
                    await timeouts.sleep(RETRY_S)  # not registered yet
                    continue
                batch = dict(list(self.pending.items())[:BATCH])
                for key in batch:
                    del self.pending[key]
                offline = set(self.broker.log_dirs.offline_dir_ids())
                batch = {k: d for k, d in batch.items() if d not in offline}
                if not batch:
                    continue
                if not await self._send(batch):
                    for key, directory in batch.items():
                        self.pending.setdefault(key, directory)
                    await timeouts.sleep(RETRY_S)

    async def _send(self, batch: dict[tuple[uuid.UUID, int], uuid.UUID]) -> bool:
        by_dir: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
        for (topic_id, index), directory in batch.items():
            by_dir.setdefault(directory, {}).setdefault(topic_id, []).append(index)
        body = m.request_body(m.ASSIGN_REPLICAS_TO_DIRS, ASSIGN_VERSION, {
            "broker_id": self.broker.node_id,
            "broker_epoch": self.broker.lifecycle.broker_epoch,
            "directories": [{"id": d, "topics": [
                {"topic_id": t, "partitions": [{"partition_index": i} for i in sorted(ps)]}
                for t, ps in topics.items()]} for d, topics in by_dir.items()]})
        try:
            response = await self.broker.controller_channel.forward(
                m.ASSIGN_REPLICAS_TO_DIRS, ASSIGN_VERSION, body)
        except ControllerUnavailable as e:
            log.warning("AssignReplicasToDirs for %d replicas got no answer (%s); sending "
                        "again", len(batch), e)
            return False
        code = response.get("error_code", 0)
        if code == ErrorCode.INVALID_REQUEST:
            # a directory the registration does not list (it failed meanwhile): dropped;
            # the next registration applied here queues what is still out of place
            log.warning("AssignReplicasToDirs refused: %s; dropped", ErrorCode(code).name)
            return True
        if code != ErrorCode.NONE:
            log.warning("AssignReplicasToDirs refused: %s", ErrorCode(code).name)
            return False
        for d in response.get("directories", []):
            for t in d["topics"]:
                for p in t["partitions"]:
                    if p["error_code"] == ErrorCode.NONE:
                        self.sent += 1
                    else:  # the replica went meanwhile: nothing to say about it
                        log.debug("assignment of %s-%d refused: %s", t["topic_id"],
                                  p["partition_index"], ErrorCode(p["error_code"]).name)
        return True
