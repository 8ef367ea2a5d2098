"""The controller's topics and partitions (Kafka's ReplicationControlManager).

Owns `ReplicationControlManager`: CreateTopics, DeleteTopics and CreatePartitions (names,
configs and replica placement checked, partitions written with their first leader and
ISR), ElectLeaders (preferred and unclean), AlterPartition (a leader's ISR changes), and
what a broker's changes of state do to the partitions it holds a place in: fenced (it
leaves the ISRs, into the ELRs), registered again after a clean shutdown over a live
registration (the same), registered again after an unclean shutdown (Kafka's
handleBrokerUncleanShutdown: it leaves the ISRs and the ELRs, since it lost what it had
not fsynced), in controlled shutdown, unfenced (leaderless partitions it can lead elect
it), or with a log directory offline (KIP-858, handleDirectoriesOffline: a
BrokerRegistrationChangeRecord lists the directories left, LOST_DIR when none is; when
none is the broker leaves every ISR and leadership by the fencing rule, else only those
of the partitions the metadata places in the failed directory). AssignReplicasToDirs
records which directory holds each replica (PartitionRecord/PartitionChangeRecord
directories; a replica that joins has UNASSIGNED_DIR until its broker says). It also runs the
automatic preferred-leader rebalance, the unclean election that turning
unclean.leader.election.enable on sets off, and the clearing of the eligible leader
replicas (KIP-966) of a topic whose min.insync.replicas changes; and decides whether
unclean election is enabled for a topic (its config, else the cluster-wide dynamic
default, else the controller's setting) and a partition's effective min.insync.replicas
(the topic's config, else the controller's own setting, which every node's broker shares,
capped at the partition's replica count: what the leader's HW rule uses).

The election rules themselves are broker.controller.election's, placement
broker.controller.placement's. Pure: the image comes in (or a Batch, when the change is
part of another operation), records and the answer go out; randomness (topic ids,
placement's start index) comes from the injected `random.Random`.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from broker.config import ConfigError, validate_topic_configs
from broker.controller import election, reassignment
from broker.controller.controller_result import Batch, ControllerResult, Record, error, get
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
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
# the coordinators' own logs: deleting one would lose every group's offsets, every
# transaction's state or every share group's acknowledgements, so no client may
COORDINATOR_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC,
                                SHARE_GROUP_STATE_TOPIC})
UNCLEAN_CONFIG = "unclean.leader.election.enable"
MIN_ISR_CONFIG = "min.insync.replicas"
ZERO_UUID = uuid.UUID(int=0)

# BrokerRegistrationChangeRecord needs version 2+ for log_dirs
REGISTRATION_CHANGE_VERSION = 2
# PartitionRecord v2, whose eligible leader replicas (KIP-966) a new partition leaves empty
PARTITION_VERSION = 2

# ElectLeaders election types (Kafka's ElectionType)
PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1


def _each_name_once(topics: Sequence[Any]) -> Iterator[tuple[Any, bool]]:
    """Each topic of a request once, in request order, with whether the request names it
    more than once (Kafka answers such a name INVALID_REQUEST, once, and acts on none)."""
    counts = Counter(t.name for t in topics)
    seen: set[str] = set()
    for t in topics:
        if t.name not in seen:
            seen.add(t.name)
            yield t, counts[t.name] > 1


class ReplicationControlManager:
    """Topics, partitions, their leaders and ISRs (see the module docstring)."""

    def __init__(self, rng: random.Random, *, default_num_partitions: int,
                 default_replication_factor: int, offsets_topic_replication_factor: int,
                 transaction_state_replication_factor: int = 3,
                 share_state_replication_factor: int = 3,
                 max_partitions_per_request: int, delete_topic_enable: bool,
                 unclean_leader_election_enable: bool,
                 leader_imbalance_per_broker_percentage: int,
                 min_insync_replicas: int = 1) -> None:
        self.rng = rng
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        # already capped by the number of voters
        self.offsets_topic_replication_factor = offsets_topic_replication_factor
        self.transaction_state_replication_factor = transaction_state_replication_factor
        self.share_state_replication_factor = share_state_replication_factor
        self.max_partitions_per_request = max_partitions_per_request
        self.delete_topic_enable = delete_topic_enable
        self.unclean_leader_election_enable = unclean_leader_election_enable
        self.leader_imbalance_per_broker_percentage = leader_imbalance_per_broker_percentage
        self.min_insync_replicas = min_insync_replicas

    # --- topics ---------------------------------------------------------------------

    def create_topics(self, image: MetadataImage, body: Any) -> ControllerResult:
        batch = Batch(image)
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
            if total + len(replicas) > self.max_partitions_per_request:
                out.update(error(ErrorCode.INVALID_PARTITIONS,
                                 f"Creating {len(replicas)} partition(s) would exceed the "
                                 f"limit of {self.max_partitions_per_request} "
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
            partitions = self.default_num_partitions
        rf = t.replication_factor
        if rf == -1:
            rf = self.default_replication_factor
            if t.name == OFFSETS_TOPIC:
                rf = self.offsets_topic_replication_factor
            elif t.name == TRANSACTION_STATE_TOPIC:
                rf = self.transaction_state_replication_factor
            elif t.name == SHARE_GROUP_STATE_TOPIC:
                rf = self.share_state_replication_factor
        if partitions <= 0:
            raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                                 f"Number of partitions was set to an invalid non-positive "
                                 f"value {partitions}.")
        if partitions > self.max_partitions_per_request:
            raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                                 f"Number of partitions must be at most "
                                 f"{self.max_partitions_per_request}.")
        if rf <= 0:
            raise PlacementError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Replication factor must be larger than 0, or -1 to use "
                                 f"the default value; was {rf}.")
        return assign_replicas_to_brokers(brokers, partitions, rf, rng=self.rng), configs

    def _usable_brokers(self, image: MetadataImage) -> list[UsableBroker]:
        return [UsableBroker(b.broker_id, b.rack, fenced=not b.active)
                for b in image.brokers.values()]

    def _new_topic_id(self, image: MetadataImage) -> uuid.UUID:
        while True:
            # Kafka's Uuid.randomUuid never returns the zero id or 1 (the metadata topic's)
            topic_id = uuid.UUID(int=self.rng.getrandbits(128), version=4)
            if topic_id.int > 1 and topic_id not in image.topics_by_id:
                return topic_id

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
            records.append((record_type, PARTITION_VERSION, {
                "partition_id": first + i, "topic_id": topic_id, "replicas": list(rs),
                "isr": list(isr), "leader": isr[0], "leader_epoch": 0, "partition_epoch": 0,
                "directories": []}))
        batch.extend(records)  # one replay: a copy of the topic's partitions, not one each

    def delete_topics(self, image: MetadataImage, body: Any) -> ControllerResult:
        batch = Batch(image)
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
                topic = batch.image.topic_by_id(topic_id) or image.topic_by_id(topic_id)
            else:
                topic = batch.image.topic(name) or image.topic(name)
            out = {"name": topic.name if topic else name,
                   "topic_id": topic.topic_id if topic else topic_id}
            if not self.delete_topic_enable:
                out.update(error(ErrorCode.TOPIC_DELETION_DISABLED,
                                 "Topic deletion is disabled."))
            elif name is not None and topic_id not in (None, ZERO_UUID):
                out.update(error(ErrorCode.INVALID_REQUEST,
                                 "You may not specify both topic name and topic id."))
            elif topic is None:
                out.update(error(ErrorCode.UNKNOWN_TOPIC_ID if by_id
                                 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 "This server does not host this topic."))
            elif topic.name in COORDINATOR_TOPICS:
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

    def create_partitions(self, image: MetadataImage, body: Any) -> ControllerResult:
        batch = Batch(image)
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
        if t.count - current > self.max_partitions_per_request:
            raise PlacementError(ErrorCode.INVALID_PARTITIONS,
                                 f"Cannot add more than "
                                 f"{self.max_partitions_per_request} partitions "
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

    # --- elections ------------------------------------------------------------------

    def elect_leaders(self, image: MetadataImage, body: Any) -> ControllerResult:
        election_type = get(body, "election_type", PREFERRED_ELECTION)
        if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            return ControllerResult((), {
                "throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                "replica_election_results": []})
        batch = Batch(image)
        by_topic: dict[str, list[dict]] = {}
        requested = get(body, "topic_partitions")
        if requested is None:
            for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
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
            change = election.elect_preferred_leader(
                partition, topic.topic_id, pid, active,
                min_isr=self._min_isr(batch.image, name, partition))
            if change is None or change.leader != partition.preferred_leader:
                return (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                        f"Failed to elect leader for partition {name}-{pid} under strategy "
                        "PreferredReplicaPartitionLeaderElectionStrategy")
        else:
            if partition.leader != NO_LEADER and partition.leader in active:
                return ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
            change = election.elect_leader(partition, topic.topic_id, pid, active,
                                           min_isr=self._min_isr(batch.image, name, partition),
                                           unclean_leader_election_enable=True)
            if change is None or change.leader in (NO_LEADER, NO_LEADER_CHANGE):
                return (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                        f"Failed to elect leader for partition {name}-{pid} under strategy "
                        "UncleanLeaderElectionStrategy")
        batch.change(change)
        return ErrorCode.NONE, None

    # --- ISR changes ----------------------------------------------------------------

    def alter_partition(self, image: MetadataImage, body: Any) -> ControllerResult:
        """AlterPartition: a leader shrinks or expands its ISR (Kafka's
        ReplicationControlManager.alterPartition). Topics are named by topic_id (v2+) or
        topic_name; replicas by new_isr_with_epochs (v3+), whose broker epochs must be
        current, or new_isr. Each partition answers with its state after the change."""
        leader = image.brokers.get(body.broker_id)
        if leader is None or leader.epoch != body.broker_epoch:
            return ControllerResult((), {"throttle_time_ms": 0,
                                         "error_code": int(ErrorCode.STALE_BROKER_EPOCH),
                                         "topics": []})
        batch = Batch(image)
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
        change = election.change_isr(
            partition, topic_id, p.partition_index, isr, active,
            min_isr=self._min_isr(batch.image, batch.image.topics_by_id[topic_id].name,
                                  partition))
        if recovery != partition.leader_recovery_state:
            change = replace(change or election.PartitionChangeRecord(
                topic_id=topic_id, partition_id=p.partition_index),
                leader_recovery_state=int(recovery))
        batch.change(change)
        # a reassignment's new replicas all in sync now: it completes in the same entry
        reassignment.maybe_complete(batch, topic_id, p.partition_index, self._min_isr)
        now = batch.image.topics_by_id[topic_id].partitions.get(p.partition_index)
        if now is not None and now.leader != broker_id:
            return ErrorCode.NEW_LEADER_ELECTED
        return ErrorCode.NONE

    def alter_partition_reassignments(self, image: MetadataImage,
                                      body: Any) -> ControllerResult:
        """AlterPartitionReassignments (KIP-455): broker.controller.reassignment."""
        return reassignment.alter_partition_reassignments(Batch(image), body, self._min_isr)

    # --- a broker's changes of state (its own records are ClusterControlManager's) -------

    def handle_broker_fenced(self, batch: Batch, broker_id: int) -> None:
        """Kafka's handleBrokerFenced: the broker's leaderships and ISR places go (into
        the ELRs), before its fence is written. A new incarnation registering after a clean
        shutdown over a live one (Kafka's handleBrokerShutdown) and a broker with no
        directory left take this path."""
        self._remove_from_partitions(batch, broker_id, election.fence_broker)

    def handle_broker_in_controlled_shutdown(self, batch: Batch, broker_id: int) -> None:
        """Kafka's handleBrokerInControlledShutdown: leaderships move to the rest of the
        ISR, after the registration that marks the shutdown."""
        self._remove_from_partitions(batch, broker_id, election.controlled_shutdown)

    def handle_broker_unclean_shutdown(self, batch: Batch, broker_id: int) -> None:
        """Kafka's handleBrokerUncleanShutdown: a new incarnation registers and its last
        registration's epoch is not the one its clean shutdown recorded, so its log may
        have lost what it had not fsynced. It leaves every ISR and ELR, and any
        leadership, before its new registration is written; the old registration may be
        fenced already or still live."""
        self._remove_from_partitions(batch, broker_id, election.unclean_shutdown,
                                     elr_too=True)

    def handle_broker_unregistered(self, batch: Batch, broker_id: int) -> None:
        """Kafka's handleBrokerUnregistered: before its UnregisterBrokerRecord, the broker
        leaves every ISR and ELR and any leadership. It stays among the replicas of the
        partitions that name it, which a reassignment is for."""
        self._remove_from_partitions(batch, broker_id, election.unclean_shutdown,
                                     elr_too=True)

    def _remove_from_partitions(self, batch: Batch, broker_id: int,
                                rule: Callable[..., election.PartitionChangeRecord | None],
                                *, elr_too: bool = False,
                                only: Callable[[PartitionRegistration], bool] | None = None
                                ) -> None:
        active = batch.image.active_broker_ids() - {broker_id}
        for topic in list(batch.image.topics_by_id.values()):
            unclean = self._unclean_enabled(batch.image, topic.name)
            for pid, partition in sorted(topic.partitions.items()):
                if only is not None and not only(partition):
                    continue
                if (broker_id in partition.isr or partition.leader == broker_id
                        or (elr_too and broker_id in partition.elr)):
                    batch.change(rule(partition, topic.topic_id, pid, broker_id, active,
                                      min_isr=self._min_isr(batch.image, topic.name,
                                                            partition),
                                      unclean_leader_election_enable=unclean))

    def handle_directories_offline(self, batch: Batch, broker: BrokerRegistration,
                                   offline: Sequence[uuid.UUID]) -> None:
        """Kafka's handleDirectoriesOffline: the directories of `offline` that the
        registration still has online go offline (see the module docstring). The
        broker's replicas the metadata places in one of them (PartitionRecord.directories,
        from its AssignReplicasToDirs) leave the ISR and the ELR, and their leaderships
        move, as after an unclean shutdown (their log is gone until it restarts); its
        replicas in directories still online stay as they are."""
        newly = [d for d in broker.log_dirs if d in offline and not is_reserved_dir(d)]
        if not newly:
            return
        online = [d for d in broker.log_dirs if d not in offline]
        if not online:
            self.handle_broker_fenced(batch, broker.broker_id)
        else:
            lost = set(newly)
            self._remove_from_partitions(
                batch, broker.broker_id, election.unclean_shutdown, elr_too=True,
                only=lambda p: p.directory_of(broker.broker_id) in lost)
        batch.add(T.BROKER_REGISTRATION_CHANGE_RECORD, REGISTRATION_CHANGE_VERSION, {
            "broker_id": broker.broker_id, "broker_epoch": broker.epoch,
            "log_dirs": online or [LOST_DIR]})

    def assign_replicas_to_dirs(self, image: MetadataImage, body: Any) -> ControllerResult:
        """AssignReplicasToDirs (KIP-858): a broker names the log directory of each of its
        replicas; each assignment that changes the partition's directories is a
        PartitionChangeRecord of `directories` alone. Per partition: UNKNOWN_TOPIC_ID,
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER for a broker holding no replica
        of it; the whole request STALE_BROKER_EPOCH for an old registration, and
        INVALID_REQUEST for a directory the broker did not register."""
        batch = Batch(image)
        broker = image.brokers.get(body.broker_id)
        code = ErrorCode.NONE
        if broker is None or broker.epoch != body.broker_epoch:
            code = ErrorCode.STALE_BROKER_EPOCH
        elif any(d.id not in broker.log_dirs and d.id not in (LOST_DIR,)
                 for d in body.directories):
            code = ErrorCode.INVALID_REQUEST
        answer: list[dict] = []
        for d in body.directories:
            topics = []
            for t in d.topics:
                parts = []
                for p in t.partitions:
                    error = code
                    if code == ErrorCode.NONE:
                        error = self._assign_dir(batch, body.broker_id, d.id, t.topic_id,
                                                 p.partition_index)
                    parts.append({"partition_index": p.partition_index, "error_code": error})
                topics.append({"topic_id": t.topic_id, "partitions": parts})
            answer.append({"id": d.id, "topics": topics})
        return batch.result({"error_code": code, "directories": answer})

    @staticmethod
    def _assign_dir(batch: Batch, broker_id: int, directory: uuid.UUID,
                    topic_id: uuid.UUID, index: int) -> ErrorCode:
        topic = batch.image.topic_by_id(topic_id)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_ID
        partition = topic.partitions.get(index)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if broker_id not in partition.replicas:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if partition.directory_of(broker_id) == directory:
            return ErrorCode.NONE
        dirs = (list(partition.directories) if len(partition.directories) == len(partition.replicas)
                else [election.UNASSIGNED_DIR] * len(partition.replicas))
        dirs[partition.replicas.index(broker_id)] = directory
        batch.change(election.PartitionChangeRecord(topic_id=topic_id, partition_id=index,
                                                    directories=tuple(dirs)))
        return ErrorCode.NONE

    def handle_broker_unfenced(self, batch: Batch, broker_id: int) -> None:
        """Kafka's handleBrokerUnfenced: after its unfence is written, leaderless
        partitions the broker can lead elect it (from their ISR, else their ELR, else as
        their last known leader)."""
        active = batch.image.active_broker_ids()
        for topic in list(batch.image.topics_by_id.values()):
            unclean = self._unclean_enabled(batch.image, topic.name)
            for pid, partition in sorted(topic.partitions.items()):
                if partition.leader == NO_LEADER and broker_id in partition.replicas:
                    batch.change(election.elect_leader(
                        partition, topic.topic_id, pid, active,
                        min_isr=self._min_isr(batch.image, topic.name, partition),
                        unclean_leader_election_enable=unclean))

    # --- elections the controller starts itself -----------------------------------------

    def topic_configs_altered(self, batch: Batch, topic_name: str,
                              keys: Collection[str]) -> None:
        """What a topic's new configs (`keys` changed) set off, after their records."""
        if MIN_ISR_CONFIG in keys:
            self.clear_elrs(batch, topic_name)
        self.maybe_elect_unclean(batch, topic_name)

    def clear_elrs(self, batch: Batch, topic_name: str) -> None:
        """A new min.insync.replicas: the topic's eligible leader replicas were kept by
        the old one's HW rule, so they are forgotten, as Kafka 4 does (its
        ClearElrRecord); the next change of each partition computes them afresh."""
        topic = batch.image.topic(topic_name)
        if topic is None:
            return
        for pid, partition in sorted(topic.partitions.items()):
            batch.change(election.clear_elr(partition, topic.topic_id, pid))

    def maybe_elect_unclean(self, batch: Batch, topic_name: str) -> None:
        """Turning unclean.leader.election.enable on elects leaders for the topic's
        offline partitions at once, as Kafka does."""
        topic = batch.image.topic(topic_name)
        if topic is None or not self._unclean_enabled(batch.image, topic_name):
            return
        active = batch.image.active_broker_ids()
        for pid, partition in sorted(topic.partitions.items()):
            if partition.leader == NO_LEADER:
                batch.change(election.elect_leader(
                    partition, topic.topic_id, pid, active,
                    min_isr=self._min_isr(batch.image, topic_name, partition),
                    unclean_leader_election_enable=True))

    def balance_partition_leaders(self, batch: Batch) -> None:
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
            if ratio <= self.leader_imbalance_per_broker_percentage:
                continue
            for topic_id, pid, partition in not_led:
                if election.preferred_leader_imbalanced(partition, active):
                    name = image.topics_by_id[topic_id].name
                    batch.change(election.elect_preferred_leader(
                        partition, topic_id, pid, active,
                        min_isr=self._min_isr(image, name, partition)))

    def _min_isr(self, image: MetadataImage, topic: str,
                 partition: PartitionRegistration) -> int:
        """The partition's effective min.insync.replicas: the topic's config, else this
        controller's setting, at most its replica count (Kafka's getTopicEffectiveMinIsr,
        and the cap the leader's HW rule applies). Not the cluster-wide dynamic default:
        the brokers' HW rule does not read it, and the ELR is only sound when both agree."""
        value = image.topic_configs(topic).get(MIN_ISR_CONFIG)
        try:
            min_isr = int(value) if value is not None else self.min_insync_replicas
        except ValueError:  # validated when set: a newer version's value
            min_isr = self.min_insync_replicas
        return max(1, min(min_isr, len(partition.replicas)))

    def _unclean_enabled(self, image: MetadataImage, topic: str) -> bool:
        """unclean.leader.election.enable: the topic's config, else the cluster-wide
        dynamic default, else the controller's setting."""
        for configs in (image.topic_configs(topic), image.broker_configs("")):
            value = configs.get(UNCLEAN_CONFIG)
            if value is not None:
                return value.strip().lower() == "true"
        return self.unclean_leader_election_enable
