"""The active controller: admin and broker-lifecycle requests in, metadata records out.

Owns `QuorumController`, a pure state machine after Kafka's `QuorumController` and the
managers it delegates to (`ClusterControlManager`, `BrokerHeartbeatManager`,
`ReplicationControlManager`, `ConfigurationControlManager`, `ProducerIdControlManager`),
simplified. Every request becomes a `ControllerResult`: the metadata records to append as
ONE Raft entry, and the response to send once that entry commits (at once when there are
no records). Nothing here does I/O or reads a clock: `now_ms` is an argument, randomness
(topic ids, placement's start index) comes from the injected `random.Random`.

The image. `image` is the metadata image including every record this controller has
produced, committed or not, as in Kafka, where the active controller replays its own
records as soon as it appends them. A method never changes `image` itself: the caller
appends a result's records and then hands them back through `replay` (decoded, as a
follower would read them) before the next call, so that the active controller and every
standby build their image by the one code path (`MetadataImage.apply`). Within one
operation the records are built on a scratch image, so that, say, fencing a broker and
then electing leaders sees the fence.

Controller memory that is not in the log: each broker's session deadline (a heartbeat
refreshes it; `tick` fences a broker whose deadline has passed) and when the next
automatic leader rebalance is due. A new active controller (`activate`) gives every
registered broker a fresh session, as Kafka does, rather than fence brokers whose
heartbeats went to the old one.

Controlled shutdown is written to the log as a RegisterBrokerRecord that repeats the
broker's registration with in_controlled_shutdown set: every image then agrees the broker
may not lead or join an ISR.

Log directories (KIP-858): a broker registers its directory ids (BrokerRegistration v2+,
kept in RegisterBrokerRecord.log_dirs) and names the ones that failed in its heartbeats
(offline_log_dirs, v1+). A heartbeat naming a directory the registration still has online
takes it offline, as Kafka's ReplicationControlManager.handleDirectoriesOffline does: a
BrokerRegistrationChangeRecord lists the directories left (LOST_DIR when none is) and,
when none is, the broker leaves every ISR and leadership by the fencing rule, new leaders
coming from the rest of the ISR. It stays registered and unfenced, but is not active, so
no election, ISR expansion or placement picks it until it registers again with the
directory online (after a restart). Replicas are not assigned to directories, so a broker
that still has a directory online keeps its replicas.

Error codes and messages follow Kafka's; the admin request bodies are the construct
Containers of protocol/messages, the responses plain dicts with the response
declarations' field names, so the runtime encodes them at the request's version.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from broker.controller import (
    acl_control, config_control, producer_id_control, scram_control,
)
from broker.controller.config_control import render_config_value
from broker.controller.controller_result import (
    Batch, ControllerResult, Record, error, get,
)
from broker.controller.image import (
    TOPIC_RESOURCE, BrokerRegistration, MetadataImage, is_reserved_dir,
)
from broker.controller.replication_control import ReplicationControlManager
from protocol.errors import ErrorCode
from protocol.metadata_records import MetadataRecordType as T

METADATA_VERSION = "metadata.version"
BOOTSTRAP_METADATA_VERSION = 21  # Kafka 3.9-IV0
NO_DEADLINE = 2**63 - 1

# RegisterBrokerRecord needs version 1+ for in_controlled_shutdown and 3+ for log_dirs
REGISTER_BROKER_VERSION = 3


@dataclass(frozen=True)
class ControllerSettings:
    """The controller's configuration, with Kafka's property defaults."""

    node_id: int
    voters: tuple[int, ...]
    default_num_partitions: int = 1
    default_replication_factor: int = 1
    offsets_topic_replication_factor: int = 3
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    heartbeat_interval_ms: int = 2000
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300000
    leader_imbalance_per_broker_percentage: int = 10
    producer_id_block_size: int = 1000
    max_partitions_per_request: int = 10000
    delete_topic_enable: bool = True


class LegacyTopicSource(Protocol):
    """What `activate` reads of a migrated topic (any object with these attributes)."""

    @property
    def name(self) -> str: ...
    @property
    def topic_id(self) -> uuid.UUID: ...
    @property
    def partitions(self) -> int: ...
    @property
    def configs(self) -> Mapping[str, Any]: ...


class LegacySource(Protocol):
    """What `activate` reads of a migrated data directory (broker.metadata.LegacyMetadata,
    which the broker loads)."""

    @property
    def topics(self) -> Sequence[LegacyTopicSource]: ...
    @property
    def producer_id_limit(self) -> int: ...


class QuorumController:
    """The active controller's state machine (see the module docstring)."""

    def __init__(self, settings: ControllerSettings, rng: random.Random,
                 image: MetadataImage = MetadataImage.EMPTY) -> None:
        self.settings = settings
        self.rng = rng
        self.image = image
        self.replication = ReplicationControlManager(
            rng, default_num_partitions=settings.default_num_partitions,
            default_replication_factor=settings.default_replication_factor,
            offsets_topic_replication_factor=min(settings.offsets_topic_replication_factor,
                                                 len(settings.voters)),
            max_partitions_per_request=settings.max_partitions_per_request,
            delete_topic_enable=settings.delete_topic_enable,
            unclean_leader_election_enable=settings.unclean_leader_election_enable,
            leader_imbalance_per_broker_percentage=(
                settings.leader_imbalance_per_broker_percentage))
        self._sessions: dict[int, int] = {}  # broker id -> session deadline (ms)
        # broker id -> the metadata offset its last heartbeat reported
        self._metadata_offsets: dict[int, int] = {}
        # broker id -> offset of the entry that began its controlled shutdown
        self._shutdown_offsets: dict[int, int] = {}
        self._next_rebalance_ms: int | None = None

    # --- the log --------------------------------------------------------------------

    def replay(self, records: Iterable[tuple[int, int, Any]]) -> None:
        """Apply decoded records: this controller's own, after it appended them, or a
        standby's view of the log."""
        self.image = self.image.replay(records)

    def reset(self, image: MetadataImage) -> None:
        """Leadership lost or the image rebuilt (a snapshot loaded): start from `image`,
        forgetting sessions, which only the active controller keeps."""
        self.image = image
        self._sessions = {}
        self._metadata_offsets = {}
        self._shutdown_offsets = {}
        self._next_rebalance_ms = None

    def activate(self, now_ms: int,
                 legacy: LegacySource | None = None) -> ControllerResult | None:
        """This node became the active controller: fresh sessions for every registered
        broker, and the bootstrap records a new cluster (or a migrated data dir) needs."""
        s = self.settings
        self._sessions = {b: now_ms + s.session_timeout_ms for b in self.image.brokers}
        self._metadata_offsets = {}
        self._shutdown_offsets = {}
        self._next_rebalance_ms = (now_ms + s.leader_imbalance_check_interval_ms
                                   if s.auto_leader_rebalance_enable else None)
        batch = Batch(self.image)
        if METADATA_VERSION not in self.image.features:
            batch.add(T.FEATURE_LEVEL_RECORD, 0, {"name": METADATA_VERSION,
                                                  "feature_level": BOOTSTRAP_METADATA_VERSION})
        if legacy is not None and not self.image.topics_by_id:
            self._migrate(batch, legacy)
        return batch.result(None) if batch.records else None

    def _migrate(self, batch: Batch, legacy: LegacySource) -> None:
        node = self.settings.node_id
        for topic in legacy.topics:
            batch.add(T.TOPIC_RECORD, 0, {"name": topic.name, "topic_id": topic.topic_id})
            for p in range(topic.partitions):
                batch.add(T.PARTITION_RECORD, 0, {
                    "partition_id": p, "topic_id": topic.topic_id, "replicas": [node],
                    "isr": [node], "leader": node, "leader_epoch": 0, "partition_epoch": 0})
            for name, value in sorted(topic.configs.items()):
                rendered = render_config_value(value)
                if rendered is not None:
                    batch.add(T.CONFIG_RECORD, 0, {
                        "resource_type": TOPIC_RESOURCE, "resource_name": topic.name,
                        "name": name, "value": rendered})
        if legacy.producer_id_limit > batch.image.next_producer_id:
            batch.add(T.PRODUCER_IDS_RECORD, 0, {
                "broker_id": node, "broker_epoch": -1,
                "next_producer_id": legacy.producer_id_limit})

    # --- brokers --------------------------------------------------------------------

    def _has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        """Kafka's BrokerHeartbeatManager.hasValidSession: a fenced broker has none, so a
        restarted broker may register at once after it was fenced, even by a controller
        that activated since (and gave every registered broker a fresh deadline)."""
        registration = self.image.brokers.get(broker_id)
        if registration is not None and registration.fenced:
            return False
        return now_ms < self._sessions.get(broker_id, now_ms)

    def register_broker(self, body: Any, now_ms: int, offset: int) -> ControllerResult:
        """BrokerRegistration; `offset`, the Raft offset of this entry, is the new epoch."""
        broker_id = body.broker_id
        existing = self.image.brokers.get(broker_id)
        previous_epoch = get(body, "previous_broker_epoch", -1)
        if (existing is not None and existing.incarnation_id != body.incarnation_id
                and self._has_valid_session(broker_id, now_ms)
                and previous_epoch != existing.epoch):
            return ControllerResult((), {
                "error_code": int(ErrorCode.DUPLICATE_BROKER_REGISTRATION), "broker_epoch": -1})
        log_dirs = list(get(body, "log_dirs", []) or [])
        if not self._valid_log_dirs(broker_id, log_dirs):
            return ControllerResult((), {"error_code": int(ErrorCode.INVALID_REGISTRATION),
                                         "broker_epoch": -1})
        batch = Batch(self.image)
        if existing is not None and existing.active:
            # the old incarnation went without a clean shutdown: it leads nothing now
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
        self._sessions[broker_id] = now_ms + self.settings.session_timeout_ms
        return batch.result({"error_code": int(ErrorCode.NONE), "broker_epoch": offset})

    def _valid_log_dirs(self, broker_id: int, log_dirs: list[uuid.UUID]) -> bool:
        """Kafka's checks on BrokerRegistration.LogDirs: no reserved id, no duplicate, none
        registered by another broker. Naming none is allowed, for brokers predating them."""
        if any(is_reserved_dir(d) for d in log_dirs) or len(set(log_dirs)) != len(log_dirs):
            return False
        return not any(set(other.log_dirs) & set(log_dirs)
                       for other in self.image.brokers.values() if other.broker_id != broker_id)

    def broker_heartbeat(self, body: Any, now_ms: int,
                         offset: int | None = None) -> ControllerResult:
        """BrokerHeartbeat: keep the session, and move the broker between fenced,
        unfenced, controlled shutdown and shut down (Kafka's BrokerControlState).

        `offset`, when given, is the Raft offset this heartbeat's entry would get, as for
        `register_broker`. A broker whose controlled shutdown began at a known offset is
        told to shut down only once it leads nothing and every active broker has reported
        a metadata offset past that entry (Kafka's controlledShutdownOffset <=
        lowestActiveOffset), so that the new leaders know they lead before it stops."""
        broker_id = body.broker_id
        broker = self.image.brokers.get(broker_id)
        if broker is None or broker.epoch != body.broker_epoch:
            return ControllerResult((), {
                "error_code": int(ErrorCode.STALE_BROKER_EPOCH), "is_caught_up": False,
                "is_fenced": True, "should_shut_down": False})
        self._sessions[broker_id] = now_ms + self.settings.session_timeout_ms
        self._metadata_offsets[broker_id] = body.current_metadata_offset
        caught_up = body.current_metadata_offset >= broker.epoch
        batch = Batch(self.image)
        # before any transition, so that an unfencing elects no leader on a failed directory
        self.replication.handle_directories_offline(
            batch, broker, get(body, "offline_log_dirs", []) or [])
        broker = batch.image.brokers[broker_id]
        fenced, shut_down = broker.fenced, False
        if not broker.in_controlled_shutdown:
            self._shutdown_offsets.pop(broker_id, None)
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
                    self._shutdown_offsets[broker_id] = offset
            elif self._ready_to_shut_down(batch.image, broker_id):
                self._fence(batch, broker_id)
                fenced, shut_down = True, True
        return batch.result({"error_code": int(ErrorCode.NONE), "is_caught_up": caught_up,
                             "is_fenced": fenced, "should_shut_down": shut_down})

    def unregister_broker(self, body: Any, now_ms: int) -> ControllerResult:
        """UnregisterBroker. UnregisterBrokerRecord is not declared, so the registration
        stays, fenced, and leaves every leadership and ISR: the effect on partitions is
        Kafka's."""
        del now_ms
        broker = self.image.brokers.get(body.broker_id)
        if broker is None:
            return ControllerResult((), error(ErrorCode.BROKER_ID_NOT_REGISTERED,
                                              f"Broker ID {body.broker_id} is not registered."))
        batch = Batch(self.image)
        if not broker.fenced:
            self._fence(batch, broker.broker_id)
        self._sessions.pop(broker.broker_id, None)
        return batch.result(error(ErrorCode.NONE))

    def _unfence(self, batch: Batch, broker: BrokerRegistration) -> None:
        batch.add(T.UNFENCE_BROKER_RECORD, 0, {"id": broker.broker_id, "epoch": broker.epoch})
        self.replication.handle_broker_unfenced(batch, broker.broker_id)

    def _fence(self, batch: Batch, broker_id: int) -> None:
        """Leaderships and ISR places go, then the fence."""
        self.replication.handle_broker_fenced(batch, broker_id)
        broker = batch.image.brokers[broker_id]
        batch.add(T.FENCE_BROKER_RECORD, 0, {"id": broker_id, "epoch": broker.epoch})

    def _begin_controlled_shutdown(self, batch: Batch, broker: BrokerRegistration) -> None:
        body = self._registration_body(broker)
        body["in_controlled_shutdown"] = True
        batch.add(T.REGISTER_BROKER_RECORD, REGISTER_BROKER_VERSION, body)
        self.replication.handle_broker_in_controlled_shutdown(batch, broker.broker_id)

    @staticmethod
    def _registration_body(broker: BrokerRegistration) -> dict:
        return {"broker_id": broker.broker_id, "incarnation_id": broker.incarnation_id,
                "broker_epoch": broker.epoch,
                "end_points": [{"name": e.name, "host": e.host, "port": e.port,
                                "security_protocol": e.security_protocol}
                               for e in broker.endpoints],
                "rack": broker.rack, "fenced": broker.fenced,
                "in_controlled_shutdown": broker.in_controlled_shutdown,
                "log_dirs": list(broker.log_dirs)}

    def _ready_to_shut_down(self, image: MetadataImage, broker_id: int) -> bool:
        if any(p.leader == broker_id for t in image.topics_by_id.values()
               for p in t.partitions.values()):
            return False
        began = self._shutdown_offsets.get(broker_id)
        if began is None:  # began under another controller: nothing to wait for
            return True
        return all(self._metadata_offsets.get(b, -1) >= began
                   for b in image.active_broker_ids())

    # --- time -----------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[ControllerResult]:
        """Fence brokers whose session expired (one result each) and, when due, run the
        automatic preferred leader rebalance."""
        results = []
        image = self.image
        for broker_id, deadline in sorted(self._sessions.items()):
            broker = image.brokers.get(broker_id)
            if broker is None or broker.fenced or now_ms < deadline:
                continue
            batch = Batch(image)
            self._fence(batch, broker_id)
            results.append(batch.result(None))
            image = batch.image
        if self._next_rebalance_ms is not None and now_ms >= self._next_rebalance_ms:
            self._next_rebalance_ms = now_ms + self.settings.leader_imbalance_check_interval_ms
            batch = Batch(image)
            self.replication.balance_partition_leaders(batch)
            if batch.records:
                results.append(batch.result(None))
        return results

    def next_deadline(self) -> int:
        """When `tick` next has something to do (NO_DEADLINE when nothing is pending)."""
        deadlines = [d for b, d in self._sessions.items()
                     if b in self.image.brokers and not self.image.brokers[b].fenced]
        if self._next_rebalance_ms is not None:
            deadlines.append(self._next_rebalance_ms)
        return min(deadlines, default=NO_DEADLINE)

    # --- topics and partitions (broker.controller.replication_control) -----------------

    def create_topics(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.create_topics(self.image, body)

    def delete_topics(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.delete_topics(self.image, body)

    def create_partitions(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.create_partitions(self.image, body)

    def elect_leaders(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.elect_leaders(self.image, body)

    def alter_partition(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.alter_partition(self.image, body)

    # --- configs (broker.controller.config_control) ----------------------------------

    def incremental_alter_configs(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return config_control.incremental_alter_configs(self.image, body,
                                                        self.replication.maybe_elect_unclean)

    # --- producer ids (broker.controller.producer_id_control) -------------------------

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ControllerResult:
        return self._records_result(*producer_id_control.allocate_producer_ids(
            self.image, broker_id, broker_epoch, self.settings.producer_id_block_size))

    # --- SCRAM credentials (broker.controller.scram_control) ---------------------------

    def alter_user_scram_credentials(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self._records_result(
            *scram_control.alter_user_scram_credentials(self.image, body))

    # --- ACLs (the records and answers are broker.controller.acl_control's) ------------

    def create_acls(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self._records_result(*acl_control.create_acls(
            self.image, body, lambda: uuid.UUID(int=self.rng.getrandbits(128), version=4)))

    def delete_acls(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self._records_result(*acl_control.delete_acls(self.image, body))

    def _records_result(self, records: list[Record], response: dict) -> ControllerResult:
        """A stateless manager's records and answer, checked on a scratch image as every
        operation's are."""
        batch = Batch(self.image)
        batch.extend(records)
        return batch.result(response)
