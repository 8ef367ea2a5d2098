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
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from broker.config import ConfigError, validate_topic_configs
from broker.controller import (
    acl_control, config_control, election, producer_id_control, scram_control,
)
from broker.controller.config_control import render_config_value
from broker.controller.controller_result import (
    Batch, ControllerResult, Record, error, get,
)
from broker.controller.election import (
    NO_LEADER, NO_LEADER_CHANGE, LeaderRecoveryState, PartitionRegistration,
)
from broker.controller.image import (
    LOST_DIR, TOPIC_RESOURCE, BrokerRegistration, MetadataImage, is_reserved_dir,
)
from broker.controller.placement import (
    PlacementError, UsableBroker, assign_replicas_to_brokers, validate_replica_assignment,
)
from protocol.errors import ErrorCode
from protocol.metadata_records import MetadataRecordType as T
from protocol.names import topic_name_error

OFFSETS_TOPIC = "__consumer_offsets"
METADATA_VERSION = "metadata.version"
BOOTSTRAP_METADATA_VERSION = 21  # Kafka 3.9-IV0
UNCLEAN_CONFIG = "unclean.leader.election.enable"
NO_DEADLINE = 2**63 - 1
ZERO_UUID = uuid.UUID(int=0)

# record versions written; RegisterBrokerRecord needs 1+ for in_controlled_shutdown and 3+
# for log_dirs, BrokerRegistrationChangeRecord 2+ for log_dirs
REGISTER_BROKER_VERSION = 3
REGISTRATION_CHANGE_VERSION = 2

# ElectLeaders election types (Kafka's ElectionType)
PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1

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


def _each_name_once(topics: Sequence[Any]) -> Iterator[tuple[Any, bool]]:
    """Each topic of a request once, in request order, with whether the request names it
    more than once (Kafka answers such a name INVALID_REQUEST, once, and acts on none)."""
    counts = Counter(t.name for t in topics)
    seen: set[str] = set()
    for t in topics:
        if t.name not in seen:
            seen.add(t.name)
            yield t, counts[t.name] > 1


class QuorumController:
    """The active controller's state machine (see the module docstring)."""

    def __init__(self, settings: ControllerSettings, rng: random.Random,
                 image: MetadataImage = MetadataImage.EMPTY) -> None:
        self.settings = settings
        self.rng = rng
        self.image = image
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
            self._remove_from_partitions(batch, broker_id, shutdown=False)
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
        self._offline_dirs(batch, broker, get(body, "offline_log_dirs", []) or [])
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

    def _offline_dirs(self, batch: Batch, broker: BrokerRegistration,
                      offline: Sequence[uuid.UUID]) -> None:
        """Kafka's handleDirectoriesOffline: the directories of `offline` that the
        registration still has online go offline (see the module docstring)."""
        newly = [d for d in broker.log_dirs if d in offline and not is_reserved_dir(d)]
        if not newly:
            return
        online = [d for d in broker.log_dirs if d not in offline]
        if not online:
            self._remove_from_partitions(batch, broker.broker_id, shutdown=False)
        batch.add(T.BROKER_REGISTRATION_CHANGE_RECORD, REGISTRATION_CHANGE_VERSION, {
            "broker_id": broker.broker_id, "broker_epoch": broker.epoch,
            "log_dirs": online or [LOST_DIR]})

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
        """Kafka's handleBrokerUnfenced: leaderless partitions it can lead elect it."""
        batch.add(T.UNFENCE_BROKER_RECORD, 0, {"id": broker.broker_id, "epoch": broker.epoch})
        active = batch.image.active_broker_ids()
        for topic in list(batch.image.topics_by_id.values()):
            unclean = self._unclean_enabled(batch.image, topic.name)
            for pid, partition in sorted(topic.partitions.items()):
                if partition.leader == NO_LEADER and broker.broker_id in partition.replicas:
                    batch.change(election.elect_leader(
                        partition, topic.topic_id, pid, active,
                        unclean_leader_election_enable=unclean))

    def _fence(self, batch: Batch, broker_id: int) -> None:
        """Kafka's handleBrokerFenced: leaderships and ISR places go, then the fence."""
        self._remove_from_partitions(batch, broker_id, shutdown=False)
        broker = batch.image.brokers[broker_id]
        batch.add(T.FENCE_BROKER_RECORD, 0, {"id": broker_id, "epoch": broker.epoch})

    def _begin_controlled_shutdown(self, batch: Batch, broker: BrokerRegistration) -> None:
        body = self._registration_body(broker)
        body["in_controlled_shutdown"] = True
        batch.add(T.REGISTER_BROKER_RECORD, REGISTER_BROKER_VERSION, body)
        self._remove_from_partitions(batch, broker.broker_id, shutdown=True)

    def _remove_from_partitions(self, batch: Batch, broker_id: int, *, shutdown: bool) -> None:
        active = batch.image.active_broker_ids() - {broker_id}
        rule = election.controlled_shutdown if shutdown else election.fence_broker
        for topic in list(batch.image.topics_by_id.values()):
            unclean = self._unclean_enabled(batch.image, topic.name)
            for pid, partition in sorted(topic.partitions.items()):
                if broker_id in partition.isr or partition.leader == broker_id:
                    batch.change(rule(partition, topic.topic_id, pid, broker_id, active,
                                      unclean_leader_election_enable=unclean))

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

    def _unclean_enabled(self, image: MetadataImage, topic: str) -> bool:
        """unclean.leader.election.enable: the topic's config, else the cluster-wide
        dynamic default, else the controller's setting."""
        for configs in (image.topic_configs(topic), image.broker_configs("")):
            value = configs.get(UNCLEAN_CONFIG)
            if value is not None:
                return value.strip().lower() == "true"
        return self.settings.unclean_leader_election_enable

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
            self._rebalance(batch)
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

    def _rebalance(self, batch: Batch) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: a broker that is the preferred
        leader of more than leader.imbalance.per.broker.percentage partitions it does not
        lead gets them back, where it is active and in the ISR."""
        image = batch.image
        active = image.active_broker_ids()
        preferred: dict[int, list[tuple[uuid.UUID, int, PartitionRegistration]]] = {}
        for topic in image.topics_by_id.values():
            for pid, partition in sorted(topic.partitions.items()):
                preferred.setdefault(partition.preferred_leader, []).append(
                    (topic.topic_id, pid, partition))
        for broker_id, partitions in sorted(preferred.items()):
            not_led = [p for p in partitions if p[2].leader != broker_id]
            ratio = len(not_led) * 100 / len(partitions)
            if ratio <= self.settings.leader_imbalance_per_broker_percentage:
                continue
            for topic_id, pid, partition in not_led:
                if election.preferred_leader_imbalanced(partition, active):
                    batch.change(election.elect_preferred_leader(
                        partition, topic_id, pid, active))

    # --- topics ---------------------------------------------------------------------

    def _usable_brokers(self, image: MetadataImage) -> list[UsableBroker]:
        return [UsableBroker(b.broker_id, b.rack, fenced=not b.active)
                for b in image.brokers.values()]

    def _new_topic_id(self, image: MetadataImage) -> uuid.UUID:
        while True:
            # Kafka's Uuid.randomUuid never returns the zero id or 1 (the metadata topic's)
            topic_id = uuid.UUID(int=self.rng.getrandbits(128), version=4)
            if topic_id.int > 1 and topic_id not in image.topics_by_id:
                return topic_id

    def create_topics(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        batch = Batch(self.image)
        validate_only = bool(get(body, "validate_only", False))
        results = []
        total = 0
        for t, named_twice in _each_name_once(body.topics):
            out: dict[str, Any] = {"name": t.name, "topic_id": ZERO_UUID,
                                   "num_partitions": -1, "replication_factor": -1,
                                   "configs": None}
            if named_twice:
                out.update(error(ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
                results.append(out)
                continue
            try:
                replicas, configs = self._plan_topic(batch.image, t)
            except PlacementError as e:
                out.update(error(e.error_code, e.message))
                results.append(out)
                continue
            if total + len(replicas) > self.settings.max_partitions_per_request:
                out.update(error(ErrorCode.INVALID_PARTITIONS,
                                  f"Creating {len(replicas)} partition(s) would exceed the "
                                  f"limit of {self.settings.max_partitions_per_request} "
                                  "partitions per request."))
                results.append(out)
                continue
            total += len(replicas)
            out.update(error(ErrorCode.NONE), num_partitions=len(replicas),
                       replication_factor=len(replicas[0]))
            if not validate_only:
                topic_id = self._new_topic_id(batch.image)
                self._add_topic(batch, t.name, topic_id, replicas, configs)
                out["topic_id"] = topic_id
            results.append(out)
        return batch.result({"throttle_time_ms": 0, "topics": results})

    def _plan_topic(self, image: MetadataImage,
                    t: Any) -> tuple[list[tuple[int, ...]], dict[str, str]]:
        """The replicas of each partition and the configs of a new topic; PlacementError
        carries the error code of anything refused."""
        if reason := topic_name_error(t.name):
            raise PlacementError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        if t.name in image.topic_ids_by_name:
            raise PlacementError(ErrorCode.TOPIC_ALREADY_EXISTS,
                                 f"Topic '{t.name}' already exists.")
        raw_configs: dict[str, str | None] = {}
        for c in get(t, "configs", []):
            if c.name in raw_configs:
                raise PlacementError(ErrorCode.INVALID_CONFIG,
                                     f"Duplicate config key {c.name!r}.")
            raw_configs[c.name] = c.value
        try:
            validate_topic_configs(raw_configs)
        except ConfigError as e:
            raise PlacementError(ErrorCode.INVALID_CONFIG, str(e)) from None
        configs = {k: v for k, v in raw_configs.items() if v is not None}
        brokers = self._usable_brokers(image)
        assignments = get(t, "assignments", [])
        if assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                raise PlacementError(ErrorCode.INVALID_REQUEST,
                                     "A manual partition assignment was specified, but "
                                     "numPartitions or replicationFactor was not set to -1.")
            return validate_replica_assignment(
                [(a.partition_index, list(a.broker_ids)) for a in assignments],
                brokers), configs
        partitions = t.num_partitions
        if partitions == -1:
            partitions = self.settings.default_num_partitions
        rf = t.replication_factor
        if rf == -1:
            rf = self.settings.default_replication_factor
            if t.name == OFFSETS_TOPIC:
                rf = min(self.settings.offsets_topic_replication_factor,
                         len(self.settings.voters))
        if partitions <= 0:
            raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                                 f"Number of partitions was set to an invalid non-positive "
                                 f"value {partitions}.")
        if partitions > self.settings.max_partitions_per_request:
            raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                                 f"Number of partitions must be at most "
                                 f"{self.settings.max_partitions_per_request}.")
        if rf <= 0:
            raise PlacementError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Replication factor must be larger than 0, or -1 to use "
                                 f"the default value; was {rf}.")
        return assign_replicas_to_brokers(brokers, partitions, rf, rng=self.rng), configs

    def _add_topic(self, batch: Batch, name: str, topic_id: uuid.UUID,
                   replicas: Sequence[tuple[int, ...]], configs: Mapping[str, str]) -> None:
        batch.add(T.TOPIC_RECORD, 0, {"name": name, "topic_id": topic_id})
        self._add_partitions(batch, topic_id, 0, replicas)
        for key, value in sorted(configs.items()):
            batch.add(T.CONFIG_RECORD, 0, {"resource_type": TOPIC_RESOURCE,
                                           "resource_name": name, "name": key, "value": value})

    @staticmethod
    def _add_partitions(batch: Batch, topic_id: uuid.UUID, first: int,
                        replicas: Sequence[tuple[int, ...]]) -> None:
        active = batch.image.active_broker_ids()
        records: list[Record] = []
        record_type = int(T.PARTITION_RECORD)
        for i, rs in enumerate(replicas):
            # PartitionRegistration.for_new_partition's rule, without building one of each
            # (thousands of partitions in one request)
            isr = election.new_partition_isr(rs, active)
            records.append((record_type, 0, {
                "partition_id": first + i, "topic_id": topic_id, "replicas": list(rs),
                "isr": list(isr), "leader": isr[0], "leader_epoch": 0, "partition_epoch": 0}))
        batch.extend(records)  # one replay: a copy of the topic's partitions, not one each

    def delete_topics(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        batch = Batch(self.image)
        topics = get(body, "topics")
        if topics:
            wanted = [(t.name, t.topic_id) for t in topics]
        else:
            wanted = [(name, ZERO_UUID) for name in get(body, "topic_names", [])]
        results = []
        done: set[uuid.UUID] = set()
        for name, topic_id in wanted:
            by_id = name is None
            if by_id:
                topic = batch.image.topic_by_id(topic_id) or self.image.topic_by_id(topic_id)
            else:
                topic = batch.image.topic(name) or self.image.topic(name)
            out = {"name": topic.name if topic else name,
                   "topic_id": topic.topic_id if topic else topic_id}
            if not self.settings.delete_topic_enable:
                out.update(error(ErrorCode.TOPIC_DELETION_DISABLED,
                                  "Topic deletion is disabled."))
            elif name is not None and topic_id not in (None, ZERO_UUID):
                out.update(error(ErrorCode.INVALID_REQUEST,
                                  "You may not specify both topic name and topic id."))
            elif topic is None:
                out.update(error(ErrorCode.UNKNOWN_TOPIC_ID if by_id
                                  else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  "This server does not host this topic."))
            elif topic.name == OFFSETS_TOPIC:
                # the group coordinator's own log: deleting it would lose every group's
                # offsets, so no client may, as the single-node broker refused it too
                out.update(error(ErrorCode.INVALID_REQUEST,
                                  f"Topic {topic.name} is an internal topic and cannot be "
                                  "deleted."))
            elif topic.topic_id in done:
                out.update(error(ErrorCode.INVALID_REQUEST, "Duplicate topic in request."))
            else:
                done.add(topic.topic_id)
                batch.add(T.REMOVE_TOPIC_RECORD, 0, {"topic_id": topic.topic_id})
                out.update(error(ErrorCode.NONE))
            results.append(out)
        return batch.result({"throttle_time_ms": 0, "responses": results})

    def create_partitions(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        batch = Batch(self.image)
        validate_only = bool(get(body, "validate_only", False))
        results = []
        for t, named_twice in _each_name_once(body.topics):
            if named_twice:
                results.append({"name": t.name, **error(ErrorCode.INVALID_REQUEST,
                                                         "Duplicate topic name.")})
                continue
            try:
                first, replicas = self._plan_partitions(batch.image, t)
            except PlacementError as e:
                results.append({"name": t.name, **error(e.error_code, e.message)})
                continue
            if not validate_only:
                topic = batch.image.topic(t.name)
                assert topic is not None
                self._add_partitions(batch, topic.topic_id, first, replicas)
            results.append({"name": t.name, **error(ErrorCode.NONE)})
        return batch.result({"throttle_time_ms": 0, "results": results})

    def _plan_partitions(self, image: MetadataImage,
                         t: Any) -> tuple[int, list[tuple[int, ...]]]:
        topic = image.topic(t.name)
        if topic is None:
            raise PlacementError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 "This server does not host this topic.")
        current = len(topic.partitions)
        if t.count < current:
            raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                                 f"Topic currently has {current} partitions, which is higher "
                                 f"than the requested {t.count}.")
        if t.count == current:
            raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                                 f"Topic already has {current} partitions.")
        if t.count - current > self.settings.max_partitions_per_request:
            raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                                 f"Cannot add more than "
                                 f"{self.settings.max_partitions_per_request} partitions "
                                 "in one request.")
        rf = len(topic.partitions[0].replicas) if 0 in topic.partitions else None
        brokers = self._usable_brokers(image)
        additional = t.count - current
        assignments = get(t, "assignments")
        if assignments is not None:
            if len(assignments) != additional:
                raise PlacementError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(assignments)} assignment(s) were specified.")
            return current, validate_replica_assignment(
                [(current + i, list(a.broker_ids)) for i, a in enumerate(assignments)],
                brokers, start_partition_id=current, replication_factor=rf)
        return current, assign_replicas_to_brokers(
            brokers, additional, rf or 1, rng=self.rng, start_partition_id=current)

    # --- configs --------------------------------------------------------------------

    def _maybe_elect_unclean(self, batch: Batch, topic_name: str) -> None:
        """Turning unclean.leader.election.enable on elects leaders for the topic's
        offline partitions at once, as Kafka does."""
        topic = batch.image.topic(topic_name)
        if topic is None or not self._unclean_enabled(batch.image, topic_name):
            return
        active = batch.image.active_broker_ids()
        for pid, partition in sorted(topic.partitions.items()):
            if partition.leader == NO_LEADER:
                batch.change(election.elect_leader(partition, topic.topic_id, pid, active,
                                                   unclean_leader_election_enable=True))

    # --- elections ------------------------------------------------------------------

    def elect_leaders(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        election_type = get(body, "election_type", PREFERRED_ELECTION)
        if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            return ControllerResult((), {
                "throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                "replica_election_results": []})
        batch = Batch(self.image)
        by_topic: dict[str, list[dict]] = {}
        requested = get(body, "topic_partitions")
        if requested is None:
            for topic in sorted(self.image.topics_by_id.values(), key=lambda t: t.name):
                for pid in sorted(topic.partitions):
                    code, message = self._elect_one(batch, topic.name, pid, election_type)
                    if code != ErrorCode.ELECTION_NOT_NEEDED:
                        by_topic.setdefault(topic.name, []).append(
                            {"partition_id": pid, "error_code": int(code),
                             "error_message": message})
        else:
            for tp in requested:
                for pid in dict.fromkeys(tp.partitions):
                    code, message = self._elect_one(batch, tp.topic, pid, election_type)
                    by_topic.setdefault(tp.topic, []).append(
                        {"partition_id": pid, "error_code": int(code),
                         "error_message": message})
        return batch.result({
            "throttle_time_ms": 0, "error_code": int(ErrorCode.NONE),
            "replica_election_results": [{"topic": name, "partition_result": parts}
                                         for name, parts in by_topic.items()]})

    def _elect_one(self, batch: Batch, name: str, pid: int,
                   election_type: int) -> tuple[ErrorCode, str | None]:
        topic = batch.image.topic(name)
        partition = None if topic is None else topic.partitions.get(pid)
        if topic is None or partition is None:
            return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "The partition does not exist.")
        active = batch.image.active_broker_ids()
        if election_type == PREFERRED_ELECTION:
            if partition.leader == partition.preferred_leader:
                return ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
            change = election.elect_preferred_leader(partition, topic.topic_id, pid, active)
            if change is None or change.leader != partition.preferred_leader:
                return (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                        f"Failed to elect leader for partition {name}-{pid} under strategy "
                        "PreferredReplicaPartitionLeaderElectionStrategy")
        else:
            if partition.leader != NO_LEADER and partition.leader in active:
                return ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
            change = election.elect_leader(partition, topic.topic_id, pid, active,
                                           unclean_leader_election_enable=True)
            if change is None or change.leader in (NO_LEADER, NO_LEADER_CHANGE):
                return (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                        f"Failed to elect leader for partition {name}-{pid} under strategy "
                        "UncleanLeaderElectionStrategy")
        batch.change(change)
        return ErrorCode.NONE, None

    # --- ISR changes ----------------------------------------------------------------

    def alter_partition(self, body: Any, now_ms: int) -> ControllerResult:
        """AlterPartition: a leader shrinks or expands its ISR (Kafka's
        ReplicationControlManager.alterPartition). Topics are named by topic_id (v2+) or
        topic_name; replicas by new_isr_with_epochs (v3+), whose broker epochs must be
        current, or new_isr. Each partition answers with its state after the change."""
        del now_ms
        leader = self.image.brokers.get(body.broker_id)
        if leader is None or leader.epoch != body.broker_epoch:
            return ControllerResult((), {"throttle_time_ms": 0,
                                         "error_code": int(ErrorCode.STALE_BROKER_EPOCH),
                                         "topics": []})
        batch = Batch(self.image)
        topics_out = []
        for t in body.topics:
            topic_id = get(t, "topic_id")
            by_id = topic_id is not None and topic_id != ZERO_UUID
            topic = (batch.image.topic_by_id(topic_id) if by_id
                     else batch.image.topic(get(t, "topic_name", "")))
            parts_out = []
            for p in t.partitions:
                if topic is None:
                    parts_out.append({"partition_index": p.partition_index, "error_code": int(
                        ErrorCode.UNKNOWN_TOPIC_ID if by_id
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)})
                    continue
                code = self._alter_one(batch, topic.topic_id, body.broker_id, p)
                out: dict[str, Any] = {"partition_index": p.partition_index,
                                       "error_code": int(code)}
                now = batch.image.topics_by_id[topic.topic_id].partitions.get(p.partition_index)
                if code in (ErrorCode.NONE, ErrorCode.NEW_LEADER_ELECTED) and now is not None:
                    out.update(leader_id=now.leader, leader_epoch=now.leader_epoch,
                               isr=list(now.isr), partition_epoch=now.partition_epoch,
                               leader_recovery_state=int(now.leader_recovery_state))
                parts_out.append(out)
            topics_out.append({"topic_name": get(t, "topic_name", ""),
                               "topic_id": topic_id if by_id else ZERO_UUID,
                               "partitions": parts_out})
        return batch.result({"throttle_time_ms": 0, "error_code": int(ErrorCode.NONE),
                             "topics": topics_out})

    def _alter_one(self, batch: Batch, topic_id: uuid.UUID, broker_id: int,
                   p: Any) -> ErrorCode:
        partition = batch.image.topics_by_id[topic_id].partitions.get(p.partition_index)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if p.leader_epoch != partition.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if broker_id != partition.leader:
            return ErrorCode.INVALID_REQUEST
        if p.partition_epoch != partition.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        with_epochs = get(p, "new_isr_with_epochs")
        if with_epochs:
            isr = [m.broker_id for m in with_epochs]
            epochs = {m.broker_id: m.broker_epoch for m in with_epochs}
        else:
            isr = list(get(p, "new_isr", []))
            epochs = {}
        recovery = get(p, "leader_recovery_state", 0)
        recovering = LeaderRecoveryState.RECOVERING
        if not isr or len(set(isr)) != len(isr) or any(r not in partition.replicas for r in isr):
            return ErrorCode.INVALID_REQUEST
        if recovery == recovering and (len(isr) > 1 or
                                       partition.leader_recovery_state != recovering):
            return ErrorCode.INVALID_REQUEST
        active = batch.image.active_broker_ids()
        for r in isr:
            registration = batch.image.brokers.get(r)
            # KIP-903: an epoch of -1 is unknown (the follower's fetch had no ReplicaState)
            # and skips the epoch check, as Kafka's ReplicationControlManager does
            epoch = epochs.get(r, -1)
            if r not in partition.isr and (
                    r not in active or registration is None
                    or (epoch != -1 and epoch != registration.epoch)):
                return ErrorCode.INELIGIBLE_REPLICA
        change = election.change_isr(partition, topic_id, p.partition_index, isr, active)
        if recovery != partition.leader_recovery_state:
            change = replace(change or election.PartitionChangeRecord(
                topic_id=topic_id, partition_id=p.partition_index),
                leader_recovery_state=int(recovery))
        batch.change(change)
        if change is not None and change.leader not in (NO_LEADER_CHANGE, broker_id):
            return ErrorCode.NEW_LEADER_ELECTED
        return ErrorCode.NONE

    # --- configs (broker.controller.config_control) ----------------------------------

    def incremental_alter_configs(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return config_control.incremental_alter_configs(self.image, body,
                                                        self._maybe_elect_unclean)

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
