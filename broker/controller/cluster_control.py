"""The controller's brokers: registration, heartbeats, fencing and controlled shutdown
(Kafka's ClusterControlManager and BrokerHeartbeatManager).

Owns `ClusterControlManager`, which turns BrokerRegistration, BrokerHeartbeat and
UnregisterBroker into RegisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord and
UnregisterBrokerRecord (and, through ReplicationControlManager, what each change of state
does to the broker's partitions), and `BrokerHeartbeatManager`, the controller memory that
is not in the log: each broker's session deadline (a heartbeat refreshes it; an expired one is fenced), the
metadata offset each broker last reported and the offset at which each controlled shutdown
began. A new active controller (`activate`) gives every registered broker a fresh session,
as Kafka does, rather than fence brokers whose heartbeats went to the old one.

A broker's epoch is the Raft offset of its registration's entry. A new incarnation whose
previous_broker_epoch (the epoch its clean shutdown recorded, -1 after a crash) is not
the epoch of the registration it replaces shut down uncleanly: before its new registration
it leaves every ISR and eligible leader replica set (KIP-966), whether the old
registration was fenced already or still live; one that shut down cleanly over a live
registration leaves the ISRs as a fenced broker does. Controlled shutdown is
written as a RegisterBrokerRecord that repeats the broker's registration with
in_controlled_shutdown set: every image then agrees the broker may not lead or join an ISR.
Log directories (KIP-858) are checked at registration (no reserved id, no duplicate, none
another broker registered); a heartbeat's offline_log_dirs are handed to
ReplicationControlManager.handle_directories_offline before any change of state, so an
unfencing elects no leader on a failed directory.

Pure: the image and `now_ms` come in, records and the answer go out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from broker.controller.controller_result import Batch, ControllerResult, error, get
from broker.controller.image import BrokerRegistration, MetadataImage, is_reserved_dir
from broker.controller.replication_control import ReplicationControlManager
from protocol.errors import ErrorCode
from protocol.metadata_records import MetadataRecordType as T

# RegisterBrokerRecord needs version 1+ for in_controlled_shutdown and 3+ for log_dirs
REGISTER_BROKER_VERSION = 3


class BrokerHeartbeatManager:
    """Broker sessions and the metadata offsets their heartbeats report; only the active
    controller keeps them."""

    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.sessions: dict[int, int] = {}  # broker id -> session deadline (ms)
        # broker id -> the metadata offset its last heartbeat reported
        self.metadata_offsets: dict[int, int] = {}
        # broker id -> offset of the entry that began its controlled shutdown
        self.shutdown_offsets: dict[int, int] = {}

    def reset(self, broker_ids: Iterable[int] = (), now_ms: int = 0) -> None:
        """Forget everything, giving each of `broker_ids` a fresh session."""
        self.sessions = {b: now_ms + self.session_timeout_ms for b in broker_ids}
        self.metadata_offsets = {}
        self.shutdown_offsets = {}

    def touch(self, broker_id: int, now_ms: int) -> None:
        self.sessions[broker_id] = now_ms + self.session_timeout_ms

    def has_valid_session(self, image: MetadataImage, broker_id: int, now_ms: int) -> bool:
        """Kafka's BrokerHeartbeatManager.hasValidSession: a fenced broker has none, so a
        restarted broker may register at once after it was fenced, even by a controller
        that activated since (and gave every registered broker a fresh deadline)."""
        registration = image.brokers.get(broker_id)
        if registration is not None and registration.fenced:
            return False
        return now_ms < self.sessions.get(broker_id, now_ms)

    def caught_up_since(self, image: MetadataImage, broker_id: int) -> bool:
        """Has every active broker reported a metadata offset past the entry that began
        `broker_id`'s controlled shutdown (Kafka's controlledShutdownOffset <=
        lowestActiveOffset)?"""
        began = self.shutdown_offsets.get(broker_id)
        if began is None:  # began under another controller: nothing to wait for
            return True
        return all(self.metadata_offsets.get(b, -1) >= began
                   for b in image.active_broker_ids())

    def deadlines(self, image: MetadataImage) -> list[int]:
        """The session deadlines of the unfenced brokers."""
        return [d for b, d in self.sessions.items()
                if b in image.brokers and not image.brokers[b].fenced]


class ClusterControlManager:
    """Broker registrations and their life cycle (see the module docstring)."""

    def __init__(self, session_timeout_ms: int,
                 replication: ReplicationControlManager) -> None:
        self.heartbeats = BrokerHeartbeatManager(session_timeout_ms)
        self.replication = replication

    def register_broker(self, image: MetadataImage, body: Any, now_ms: int,
                        offset: int, *, own_broker: bool = False) -> ControllerResult:
        """BrokerRegistration; `offset`, the Raft offset of this entry, is the new epoch.
        A new incarnation is refused (DUPLICATE_BROKER_REGISTRATION) while the old one's
        session lasts, unless it names the old one's epoch as its previous_broker_epoch
        (it shut down cleanly) or is `own_broker`, the broker of this controller's own
        process, whose earlier incarnation is certainly gone."""
        broker_id = body.broker_id
        existing = image.brokers.get(broker_id)
        previous_epoch = get(body, "previous_broker_epoch", -1)
        if (existing is not None and existing.incarnation_id != body.incarnation_id
                and not own_broker
                and self.heartbeats.has_valid_session(image, broker_id, now_ms)
                and previous_epoch != existing.epoch):
            return ControllerResult((), {
                "error_code": int(ErrorCode.DUPLICATE_BROKER_REGISTRATION), "broker_epoch": -1})
        log_dirs = list(get(body, "log_dirs", []) or [])
        if not self._valid_log_dirs(image, broker_id, log_dirs):
            return ControllerResult((), {"error_code": int(ErrorCode.INVALID_REGISTRATION),
                                         "broker_epoch": -1})
        batch = Batch(image)
        if existing is not None:
            if (existing.incarnation_id != body.incarnation_id
                    and previous_epoch != existing.epoch):
                # the last incarnation did not record a clean shutdown at that epoch: its
                # log may have lost what it had not fsynced, so it leaves the ISRs and
                # the ELRs (Kafka's handleBrokerUncleanShutdown), fenced already or not
                self.replication.handle_broker_unclean_shutdown(batch, broker_id)
            elif existing.active:
                # shut down cleanly without the controller seeing it go: it leads
                # nothing now (Kafka's handleBrokerShutdown, for a clean one)
                self.replication.handle_broker_fenced(batch, broker_id)
        batch.add(T.REGISTER_BROKER_RECORD, REGISTER_BROKER_VERSION, {
            "broker_id": broker_id, "incarnation_id": body.incarnation_id,
            "broker_epoch": offset,
            "end_points": [{"name": e.name, "host": e.host, "port": e.port,
                            "security_protocol": e.security_protocol}
                           for e in body.listeners],
            "features": [{"name": f.name, "min_supported_version": f.min_supported_version,
                          "max_supported_version": f.max_supported_version}
                         for f in get(body, "features", [])],
            "rack": get(body, "rack"), "fenced": True, "in_controlled_shutdown": False,
            "log_dirs": log_dirs})
        self.heartbeats.touch(broker_id, now_ms)
        return batch.result({"error_code": int(ErrorCode.NONE), "broker_epoch": offset})

    @staticmethod
    def _valid_log_dirs(image: MetadataImage, broker_id: int,
                        log_dirs: list[uuid.UUID]) -> bool:
        """Kafka's checks on BrokerRegistration.LogDirs: no reserved id, no duplicate, none
        registered by another broker. Naming none is allowed, for brokers predating them."""
        if any(is_reserved_dir(d) for d in log_dirs) or len(set(log_dirs)) != len(log_dirs):
            return False
        return not any(set(other.log_dirs) & set(log_dirs)
                       for other in image.brokers.values() if other.broker_id != broker_id)

    def broker_heartbeat(self, image: MetadataImage, body: Any, now_ms: int,
                         offset: int | None = None) -> ControllerResult:
        """BrokerHeartbeat: keep the session, and move the broker between fenced,
        unfenced, controlled shutdown and shut down (Kafka's BrokerControlState).

        `offset`, when given, is the Raft offset this heartbeat's entry would get, as for
        `register_broker`. A broker whose controlled shutdown began at a known offset is
        told to shut down only once it leads nothing and every active broker has reported
        a metadata offset past that entry (Kafka's controlledShutdownOffset <=
        lowestActiveOffset), so that the new leaders know they lead before it stops."""
        broker_id = body.broker_id
        broker = image.brokers.get(broker_id)
        if broker is None or broker.epoch != body.broker_epoch:
            return ControllerResult((), {
                "error_code": int(ErrorCode.STALE_BROKER_EPOCH), "is_caught_up": False,
                "is_fenced": True, "should_shut_down": False})
        heartbeats = self.heartbeats
        heartbeats.touch(broker_id, now_ms)
        heartbeats.metadata_offsets[broker_id] = body.current_metadata_offset
        caught_up = body.current_metadata_offset >= broker.epoch
        batch = Batch(image)
        # before any transition, so that an unfencing elects no leader on a failed directory
        self.replication.handle_directories_offline(
            batch, broker, get(body, "offline_log_dirs", []) or [])
        broker = batch.image.brokers[broker_id]
        fenced, shut_down = broker.fenced, False
        if not broker.in_controlled_shutdown:
            heartbeats.shutdown_offsets.pop(broker_id, None)
        if broker.fenced:
            if body.want_shut_down or broker.in_controlled_shutdown:
                # never served anything, or already told to go: it stays fenced and goes
                shut_down = True
            elif caught_up and not body.want_fence:
                self._unfence(batch, broker)
                fenced = False
        elif body.want_fence:
            self._fence(batch, broker_id)
            fenced = True
        elif body.want_shut_down or broker.in_controlled_shutdown:
            if not broker.in_controlled_shutdown:
                self._begin_controlled_shutdown(batch, broker)
                if offset is not None:
                    heartbeats.shutdown_offsets[broker_id] = offset
            elif self._ready_to_shut_down(batch.image, broker_id):
                self._fence(batch, broker_id)
                fenced, shut_down = True, True
        return batch.result({"error_code": int(ErrorCode.NONE), "is_caught_up": caught_up,
                             "is_fenced": fenced, "should_shut_down": shut_down})

    def unregister_broker(self, image: MetadataImage, body: Any) -> ControllerResult:
        """UnregisterBroker (Kafka's ReplicationControlManager.unregisterBroker): the broker
        leaves every ISR, ELR and leadership, then UnregisterBrokerRecord removes its
        registration. Like Kafka it refuses only an id not registered
        (BROKER_ID_NOT_REGISTERED): a broker still running finds its epoch stale at its
        next heartbeat and registers again, so the node is stopped first."""
        broker = image.brokers.get(body.broker_id)
        if broker is None:
            return ControllerResult((), error(ErrorCode.BROKER_ID_NOT_REGISTERED,
                                              f"Broker ID {body.broker_id} is not registered."))
        batch = Batch(image)
        self.replication.handle_broker_unregistered(batch, broker.broker_id)
        batch.add(T.UNREGISTER_BROKER_RECORD, 0, {"broker_id": broker.broker_id,
                                                  "broker_epoch": broker.epoch})
        self.heartbeats.sessions.pop(broker.broker_id, None)
        self.heartbeats.metadata_offsets.pop(broker.broker_id, None)
        self.heartbeats.shutdown_offsets.pop(broker.broker_id, None)
        return batch.result(error(ErrorCode.NONE))

    def fence_stale_brokers(self, image: MetadataImage,
                            now_ms: int) -> tuple[list[ControllerResult], MetadataImage]:
        """Fence every unfenced broker whose session expired, one result each, and the
        image they leave (Kafka's maybeFenceOneStaleBroker, for all of them)."""
        results = []
        for broker_id, deadline in sorted(self.heartbeats.sessions.items()):
            broker = image.brokers.get(broker_id)
            if broker is None or broker.fenced or now_ms < deadline:
                continue
            batch = Batch(image)
            self._fence(batch, broker_id)
            results.append(batch.result(None))
            image = batch.image
        return results, image

    def _unfence(self, batch: Batch, broker: BrokerRegistration) -> None:
        batch.add(T.UNFENCE_BROKER_RECORD, 0, {"id": broker.broker_id, "epoch": broker.epoch})
        self.replication.handle_broker_unfenced(batch, broker.broker_id)

    def _fence(self, batch: Batch, broker_id: int) -> None:
        """Leaderships and ISR places go, then the fence."""
        self.replication.handle_broker_fenced(batch, broker_id)
        broker = batch.image.brokers[broker_id]
        batch.add(T.FENCE_BROKER_RECORD, 0, {"id": broker_id, "epoch": broker.epoch})

    def _begin_controlled_shutdown(self, batch: Batch, broker: BrokerRegistration) -> None:
        body = _registration_body(broker)
        body["in_controlled_shutdown"] = True
        batch.add(T.REGISTER_BROKER_RECORD, REGISTER_BROKER_VERSION, body)
        self.replication.handle_broker_in_controlled_shutdown(batch, broker.broker_id)

    def _ready_to_shut_down(self, image: MetadataImage, broker_id: int) -> bool:
        if any(p.leader == broker_id for t in image.topics_by_id.values()
               for p in t.partitions.values()):
            return False
        return self.heartbeats.caught_up_since(image, broker_id)


def _registration_body(broker: BrokerRegistration) -> dict:
    """A RegisterBrokerRecord that repeats `broker`'s registration."""
    return {"broker_id": broker.broker_id, "incarnation_id": broker.incarnation_id,
            "broker_epoch": broker.epoch,
            "end_points": [{"name": e.name, "host": e.host, "port": e.port,
                            "security_protocol": e.security_protocol}
                           for e in broker.endpoints],
            "rack": broker.rack, "fenced": broker.fenced,
            "in_controlled_shutdown": broker.in_controlled_shutdown,
            "log_dirs": list(broker.log_dirs)}
