"""The group coordinator of one broker: which groups it owns, their membership and offsets.

Owns: `GroupCoordinator`, the pure facade the handlers call. It keeps the one map of groups
(`groups`: ClassicGroup, ConsumerGroup or ShareGroup by id, as Kafka's GroupMetadataManager)
and the one timer service the protocols' machines share, and turns "a group of another type" into
Kafka's errors with a type check on that map. It routes a group to its __consumer_offsets
partition (Utils.abs(hashCode) % partitions), refuses groups whose partition this broker
does not lead (NOT_COORDINATOR) or is still loading (COORDINATOR_LOAD_IN_PROGRESS), applies
OffsetCommit's generation and member checks, builds the GroupMetadata records, and replays
records — both those it wrote and, at load, those on disk. Classic membership lives in
broker.coordinator.membership, KIP-848 groups in .consumer_group, KIP-932 share groups in
.share_group, offsets in .offsets.

Which partitions are led here is the only thing replication will change: `begin_load` /
`finish_load` / `unload` are called when this broker gains or loses a partition's leadership.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import uuid

from broker.coordinator import cg_records, consumer_group, membership, share_group, share_records
from broker.coordinator.consumer_group import (
    ConsumerGroup, ConsumerGroupConfig, ConsumerGroups, HeartbeatRequest, heartbeat_error,
)
from broker.coordinator.effects import Append, Emit, Reply
from broker.coordinator.group import ClassicGroup, Group, GroupState, GroupType, Member
from broker.coordinator.membership import (
    GroupConfig, JoinRequest, Membership, group_id_error, join_error, sync_body,
)
from broker.coordinator.offsets import OffsetRecord, OffsetStore, partition_of
from broker.coordinator.share_group import (
    ShareGroup, ShareGroupConfig, ShareGroups, ShareHeartbeatRequest,
)
from broker.coordinator.timers import TimerService
from protocol.consumer_protocol import decode_assignment, decode_subscription, partition_names
from protocol.errors import DecodeError, ErrorCode
from protocol.messages import offsets_topic
from protocol.messages.offsets_topic import ConsumerGroupKey, GroupKey, OffsetKey, ShareGroupKey

E = ErrorCode
S = GroupState
CONSUMER = "consumer"
SHARE = "share"


@dataclass(frozen=True)
class CoordinatorConfig:
    num_partitions: int = 50  # offsets.topic.num.partitions
    offsets_retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.minutes
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    group: GroupConfig = field(default_factory=GroupConfig)
    consumer_group: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    share_group: ShareGroupConfig = field(default_factory=ShareGroupConfig)


def _partitions_named(protocol_type: str, assignment: bytes) -> list[str]:
    if protocol_type != CONSUMER or not assignment:
        return []
    try:
        parts = decode_assignment(assignment).partitions
    except DecodeError:
        return []
    return partition_names(parts, sort=True)


def _owned_partitions(protocol_type: str, protocols: list[tuple[str, bytes]]) -> list[str]:
    if protocol_type != CONSUMER or not protocols:
        return []
    try:
        owned = decode_subscription(protocols[0][1]).owned_partitions
    except DecodeError:
        return []
    return partition_names(owned, sort=True)


class GroupCoordinator:
    def __init__(self, config: CoordinatorConfig = CoordinatorConfig(),
                 new_member_id: Callable[[str], str] | None = None):
        self.config = config
        # every group this coordinator holds, of either type, and every timer of either
        # protocol: the two machines below share them
        self.groups: dict[str, Group] = {}
        self.timers: TimerService[tuple] = TimerService()
        self.membership = Membership(config.group, groups=self.groups, timers=self.timers,
                                     group_record=self.group_record,
                                     owned_of=_owned_partitions, assigned_of=_partitions_named)
        if new_member_id is not None:
            self.membership.new_member_id = new_member_id
        self.offsets = OffsetStore(config.offset_metadata_max_bytes)
        self.consumer_groups = ConsumerGroups(config.consumer_group, groups=self.groups,
                                              timers=self.timers)
        self.share_groups = ShareGroups(config.share_group, groups=self.groups,
                                        timers=self.timers)
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        # whether the metadata makes this broker the leader of a partition: one it leads
        # there but has not begun to load (its log still being made, the delta still being
        # applied) answers COORDINATOR_LOAD_IN_PROGRESS, as Kafka's does, not
        # NOT_COORDINATOR: FindCoordinator names this broker meanwhile, and librdkafka, told
        # NOT_COORDINATOR by the coordinator it was just sent to again, never asked again
        self.leads_in_metadata: Callable[[int], bool] = lambda partition: False
        # the metadata image's topics, set by the runtime (none in pure tests): every
        # topic's partition count by name, and a topic's id from its name and back
        self.topics: Callable[[], dict[str, int]] = dict
        self.topic_id: Callable[[str], uuid.UUID | None] = lambda name: None
        self.topic_name: Callable[[uuid.UUID], str | None] = lambda topic_id: None

    def next_deadline(self) -> int | None:
        """The earliest timer of either group protocol."""
        return self.timers.next_deadline()

    def _encoded(self, effects: list) -> list:
        """The consumer-group machine's Appends with its records as Kafka's bytes."""
        return [Append(e.group_id, [cg_records.encode(r, self.topic_id) for r in e.records])
                if isinstance(e, Append) else e for e in effects]

    def _share_encoded(self, effects: list) -> list:
        """The share-group machine's Appends with its records as Kafka's bytes."""
        return [Append(e.group_id, [share_records.encode(r, self.topic_id) for r in e.records])
                if isinstance(e, Append) else e for e in effects]

    # -- routing ------------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_of(group_id, self.config.num_partitions)

    def check(self, group_id: str | None, allow_empty: bool = False) -> ErrorCode:
        """Whether this coordinator may serve the group right now.

        `allow_empty`: Kafka accepts the empty group id on OffsetCommit, OffsetFetch,
        DescribeGroups and DeleteGroups (isValidGroupId keeps it for old clients), and refuses
        it everywhere else."""
        error = group_id_error(group_id)
        if group_id is None or (error != E.NONE and not (allow_empty and group_id == "")):
            return error
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned:
            return (E.COORDINATOR_LOAD_IN_PROGRESS if self.leads_in_metadata(partition)
                    else E.NOT_COORDINATOR)
        return E.NONE

    # -- membership, after the routing check ---------------------------------------------------

    def join(self, waiter: Any, req: JoinRequest, now_ms: int) -> list:
        error = self.check(req.group_id)
        if error != E.NONE:
            return [Reply(waiter, join_error(error, req.member_id))]
        group = self.groups.get(req.group_id)
        if isinstance(group, ShareGroup):
            # Kafka converts between classic and consumer groups only, never share groups
            return [Reply(waiter, join_error(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))]
        if isinstance(group, ConsumerGroup):
            if group.members:
                # Kafka 4.0 can seat a classic member in a consumer group (its migration
                # policy); here a group keeps the protocol it has while it has members
                return [Reply(waiter, join_error(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))]
            del self.groups[req.group_id]  # empty: it may change protocol
        return self.membership.join(waiter, req, now_ms)

    # -- KIP-848 consumer groups ---------------------------------------------------------------

    def consumer_group_heartbeat(self, waiter: Any, req: HeartbeatRequest, now_ms: int) -> list:
        error = self.check(req.group_id)
        if error != E.NONE:
            return [Reply(waiter, heartbeat_error(error, None, req.member_id))]
        classic = self.groups.get(req.group_id)
        if isinstance(classic, ShareGroup):
            return [Reply(waiter, heartbeat_error(
                E.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.",
                req.member_id))]
        if isinstance(classic, ClassicGroup):
            if classic.members or classic.state not in (S.EMPTY, S.DEAD):
                return [Reply(waiter, heartbeat_error(
                    E.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.",
                    req.member_id))]
            del self.groups[req.group_id]  # an empty classic group becomes a consumer group
        return self._encoded(self.consumer_groups.heartbeat(waiter, req, now_ms, self.topics()))

    def consumer_group_describe(self, group_id: str) -> dict:
        """ConsumerGroupDescribe's entry for one group (topics by name; the handler adds
        their ids)."""
        error = self.check(group_id)
        body: dict[str, Any] = {"error_code": error, "error_message": None, "group_id": group_id,
                                "group_state": "Dead", "group_epoch": -1,
                                "assignment_epoch": -1, "assignor_name": "", "members": [],
                                "authorized_operations": -2**31}
        if error != E.NONE:
            return body
        group = self.consumer_groups.group(group_id)
        if group is None:
            message = (f"Group {group_id} is not a consumer group." if group_id in self.groups
                       else f"Group {group_id} not found.")
            body.update(error_code=E.GROUP_ID_NOT_FOUND, error_message=message)
            return body
        default = self.config.consumer_group.assignors[0]
        body.update(group_state=group.state.value, group_epoch=group.group_epoch,
                    assignment_epoch=group.target_epoch,
                    assignor_name=group.preferred_assignor(default), members=[
                        {"member_id": m.member_id, "instance_id": m.instance_id,
                         "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "subscribed_topic_names": list(m.subscribed_topic_names),
                         "subscribed_topic_regex": m.subscribed_topic_regex,
                         "assignment": m.assigned,
                         "target_assignment": group.target.get(m.member_id, {})}
                        for m in group.members.values()])
        return body

    # -- KIP-932 share groups ------------------------------------------------------------------

    def share_group_heartbeat(self, waiter: Any, req: ShareHeartbeatRequest,
                              now_ms: int) -> list:
        if not self.config.share_group.enabled:
            return [Reply(waiter, heartbeat_error(
                E.UNSUPPORTED_VERSION, "Share groups are not enabled (group.share.enable).",
                req.member_id))]
        error = self.check(req.group_id)
        if error != E.NONE:
            return [Reply(waiter, heartbeat_error(error, None, req.member_id))]
        return self._share_encoded(self.share_groups.heartbeat(waiter, req, now_ms,
                                                               self.topics()))

    def share_group_describe(self, group_id: str) -> dict:
        """ShareGroupDescribe's entry for one group (topics by name; the handler adds
        their ids)."""
        error = self.check(group_id)
        if error == E.NONE and self.share_groups.group(group_id) is not None:
            return self.share_groups.describe(group_id)
        body: dict[str, Any] = {"error_code": error, "error_message": None, "group_id": group_id,
                                "group_state": "Dead", "group_epoch": -1,
                                "assignment_epoch": -1, "assignor_name": "", "members": [],
                                "authorized_operations": -2**31}
        if error == E.NONE:
            message = (f"Group {group_id} is not a share group." if group_id in self.groups
                       else f"Group {group_id} not found.")
            body.update(error_code=E.GROUP_ID_NOT_FOUND, error_message=message)
        return body

    def share_state_partitions(self, group_id: str, require_empty: bool = False
                               ) -> tuple[ErrorCode, str | None, dict[str, frozenset[int]]]:
        """The topic partitions a share group may have state on, for the offsets admin APIs:
        (error, message, partitions). `require_empty`: altering or deleting offsets, which a
        group with members refuses (NON_EMPTY_GROUP), as in Kafka."""
        error = self.check(group_id)
        if error != E.NONE:
            return error, None, {}
        group = self.share_groups.group(group_id)
        if group is None:
            message = (f"Group {group_id} is not a share group." if group_id in self.groups
                       else f"Group {group_id} not found.")
            return E.GROUP_ID_NOT_FOUND, message, {}
        if require_empty and group.members:
            return E.NON_EMPTY_GROUP, f"Group {group_id} is not empty.", {}
        return E.NONE, None, dict(group.state_partitions)

    def share_state_partitions_changed(self, group_id: str,
                                       added: Mapping[str, frozenset[int]],
                                       removed_topics: list[str]) -> list:
        """The effects recording that a share group's state now covers `added` too, and no
        longer `removed_topics` (AlterShareGroupOffsets, DeleteShareGroupOffsets)."""
        group = self.share_groups.group(group_id)
        if group is None:
            return []
        records = (self.share_groups.add_state_partitions(group, added)
                   + self.share_groups.remove_state_topics(group, removed_topics))
        return self._share_encoded([Append(group_id, records)]) if records else []

    def share_group_member_epoch(self, group_id: str, member_id: str) -> int | None:
        """The epoch of a member of a share group this coordinator holds, or None: for a
        share-partition leader in this process that wants to know whether a member is
        still one."""
        return self.share_groups.member_epoch(group_id, member_id)

    def sync(self, waiter: Any, group_id: str, generation: int, member_id: str,
             group_instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
             assignments: dict[str, bytes], now_ms: int) -> list:
        error = self.check(group_id)
        if error != E.NONE:
            return [Reply(waiter, sync_body(error))]
        return self.membership.sync(waiter, group_id, generation, member_id, group_instance_id,
                                    protocol_type, protocol_name, assignments, now_ms)

    def heartbeat(self, waiter: Any, group_id: str, generation: int, member_id: str,
                  group_instance_id: str | None, now_ms: int) -> list:
        error = self.check(group_id)
        if error != E.NONE:
            return [Reply(waiter, {"throttle_time_ms": 0, "error_code": error})]
        return self.membership.heartbeat(waiter, group_id, generation, member_id,
                                         group_instance_id, now_ms)

    def leave(self, waiter: Any, group_id: str, identities: list[tuple[str, str | None]],
              now_ms: int) -> list:
        error = self.check(group_id)
        if error != E.NONE:
            return [Reply(waiter, {"throttle_time_ms": 0, "error_code": error, "members": [
                {"member_id": m, "group_instance_id": i, "error_code": error}
                for m, i in identities]})]
        return self.membership.leave(waiter, group_id, identities, now_ms)

    def on_timers(self, now_ms: int) -> list:
        """Fire every due timer, of either protocol, in deadline order. Until nothing is
        due: a timer may reschedule itself for this very instant (an initial delay of 0
        extended by a member that arrived during it)."""
        out: list = []
        while (key := self.timers.pop_due(now_ms)) is not None:
            if key[0] in membership.TIMER_KINDS:
                out += self.membership.fire(key, now_ms)
            elif key[0] in consumer_group.TIMER_KINDS:
                out += self._encoded(self.consumer_groups.on_timer(key, now_ms))
            elif key[0] in share_group.TIMER_KINDS:
                out += self._share_encoded(self.share_groups.on_timer(key, now_ms))
            else:
                raise AssertionError(f"a timer neither protocol keeps: {key!r}")
        return out

    # -- offsets ------------------------------------------------------------------------------

    def commit_error(self, group_id: str, generation: int, member_id: str,
                     group_instance_id: str | None) -> ErrorCode:
        """Kafka's ClassicGroup.validateOffsetCommit, plus the routing check."""
        error = self.check(group_id, allow_empty=True)
        if error != E.NONE:
            return error
        if isinstance(self.groups.get(group_id), ConsumerGroup):
            return self.consumer_groups.commit_error(group_id, member_id, generation)
        if isinstance(self.groups.get(group_id), ShareGroup):
            return E.GROUP_ID_NOT_FOUND  # a share group keeps no committed offsets
        group = self.membership.group(group_id)
        if group is None:
            # a group that does not use Kafka for membership may still store offsets
            return E.NONE if generation < 0 and not member_id else E.ILLEGAL_GENERATION
        if group.state == S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and not member_id and group.state == S.EMPTY:
            return E.NONE  # a standalone commit
        if group_instance_id is not None and group.static_members.get(group_instance_id,
                                                                        member_id) != member_id:
            return E.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return E.ILLEGAL_GENERATION
        if group.state == S.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def commit(self, waiter: Any, group_id: str, generation: int, member_id: str,
               group_instance_id: str | None,
               offsets: list[tuple[str, int, int, int, str | None]], now_ms: int) -> list:
        """OffsetCommit: the answer follows the append of its records, never precedes it."""
        error = self.commit_error(group_id, generation, member_id, group_instance_id)
        if error != E.NONE:
            return [Reply(waiter, {(t, p): error for t, p, *_ in offsets})]
        group = self.groups.get(group_id)
        if group is None:  # a standalone commit creates the group, Empty
            group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
        if isinstance(group, ClassicGroup) and member_id in group.members and \
                group.state == S.STABLE:
            self.membership._heartbeat_reset(group, group.members[member_id], now_ms)
        records, errors = self.offsets.prepare_commit(group_id, offsets, now_ms)
        out: list = []
        if records:
            out.append(Append(group_id, records))
        out.append(Emit("offset_commit", {
            "group": group_id, "generation": generation, "member": member_id,
            "offsets": [f"{t}-{p}={o}" for t, p, o, *_ in offsets if errors[(t, p)] == E.NONE]}))
        out.append(Reply(waiter, errors))
        return out

    def txn_commit_error(self, group_id: str, generation: int, member_id: str,
                         group_instance_id: str | None) -> ErrorCode:
        """Kafka's checks of a TxnOffsetCommit (KIP-447): a request without a member and
        generation (before v3) is not checked against the group; one with them must be
        the group's current member and generation, as an OffsetCommit's."""
        error = self.check(group_id, allow_empty=True)
        if error != E.NONE:
            return error
        if generation < 0 and not member_id:
            group = self.membership.group(group_id)
            return E.COORDINATOR_NOT_AVAILABLE if group is not None and \
                group.state == S.DEAD else E.NONE
        return self.commit_error(group_id, generation, member_id, group_instance_id)

    def txn_commit(self, waiter: Any, group_id: str, producer_id: int, producer_epoch: int,
                   generation: int, member_id: str, group_instance_id: str | None,
                   offsets: list[tuple[str, int, int, int, str | None]], now_ms: int) -> list:
        """TxnOffsetCommit: the offsets are written in the producer's transaction and count
        only once its COMMIT marker reaches this partition (`complete_txn`)."""
        error = self.txn_commit_error(group_id, generation, member_id, group_instance_id)
        if error == E.REBALANCE_IN_PROGRESS:
            error = E.NONE  # Kafka lets a transactional commit through a rebalance
        if error != E.NONE:
            return [Reply(waiter, {(t, p): error for t, p, *_ in offsets})]
        if group_id not in self.groups:  # as a standalone commit, it creates the group
            self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
        records, errors = self.offsets.prepare_commit(group_id, offsets, now_ms)
        out: list = []
        if records:
            out.append(Append(group_id, records, producer_id, producer_epoch))
        out.append(Emit("txn_offset_commit", {
            "group": group_id, "producer_id": producer_id,
            "offsets": [f"{t}-{p}={o}" for t, p, o, *_ in offsets if errors[(t, p)] == E.NONE]}))
        out.append(Reply(waiter, errors))
        return out

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                      member_id: str | None = None, member_epoch: int = -1):
        """(error, {(topic, partition): CommittedOffset | None}). OffsetFetch v9 may name a
        consumer group's member and epoch, which must then be current."""
        error = self.check(group_id, allow_empty=True)
        if error != E.NONE:
            return error, {}
        if member_epoch >= 0 or member_id:
            if isinstance(self.groups.get(group_id), ConsumerGroup):
                error = self.consumer_groups.fetch_error(group_id, member_id, member_epoch)
            elif member_epoch >= 0:
                error = E.UNKNOWN_MEMBER_ID  # a member of a group that does not exist
            if error != E.NONE:
                return error, {}
        return E.NONE, self.offsets.fetch(group_id, partitions)

    def expire_offsets(self, now_ms: int) -> list:
        """Tombstones for offsets past offsets.retention.minutes (KIP-211's rules, those of
        a classic group: a consumer group's offsets count as a group without members)."""
        def is_empty(group_id: str) -> bool:
            group = self.membership.group(group_id)
            return group is None or group.state == S.EMPTY

        def subscribed(group_id: str, topic: str) -> bool:
            group = self.membership.group(group_id)
            if group is None or group.state != S.STABLE or group.protocol_type != CONSUMER:
                return True  # Kafka expires per topic only for a stable consumer group
            return topic in self._subscribed_topics(group)

        def empty_since(group_id: str) -> int | None:
            group = self.membership.group(group_id)
            return group.state_timestamp_ms if group is not None else None

        records = self.offsets.expire(now_ms, self.config.offsets_retention_ms, is_empty,
                                      subscribed, empty_since)
        by_group: dict[str, list[OffsetRecord]] = {}
        for record in records:  # expire's tombstones carry their group in `entry`
            assert record.entry is not None
            by_group.setdefault(record.entry[0], []).append(record)
        return [Append(g, rs) for g, rs in by_group.items()]

    # -- administration -------------------------------------------------------------------------

    def describe(self, group_id: str) -> dict:
        error = self.check(group_id, allow_empty=True)
        group = self.membership.group(group_id)
        body: dict[str, Any] = {"error_code": error, "error_message": None, "group_id": group_id,
                "group_state": S.DEAD.value, "protocol_type": "", "protocol_data": "",
                "members": [], "authorized_operations": -2**31}
        if error == E.NONE and isinstance(self.groups.get(group_id), (ConsumerGroup, ShareGroup)):
            # Kafka 4.0 (KIP-1043): DescribeGroups describes classic groups only
            body.update(error_code=E.GROUP_ID_NOT_FOUND,
                        error_message=f"Group {group_id} is not a classic group.")
            return body
        if error != E.NONE or group is None:
            return body
        stable = group.state == S.STABLE
        body.update(group_state=group.state.value, protocol_type=group.protocol_type or "",
                    protocol_data=group.protocol or "" if stable else "", members=[
                        {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata(group.protocol) if stable else b"",
                         "member_assignment": m.assignment if stable else b""}
                        for m in group.members.values()])
        return body

    def list_groups(self, states: set[str] | None = None) -> list[dict]:
        """Groups of either type, and groups that only hold offsets (classic, Empty)."""
        out = []
        for name in sorted(set(self.groups) | self.offsets.groups()):
            if self.check(name) != E.NONE:
                continue
            group = self.groups.get(name)
            state = group.state_name if group is not None else S.EMPTY.value
            if states and state not in states:
                continue
            if isinstance(group, ClassicGroup):
                if group.state == S.DEAD:
                    continue  # deleted, its tombstone not replayed yet
                protocol_type = group.protocol_type or CONSUMER
            elif isinstance(group, ShareGroup):
                protocol_type = SHARE  # Kafka's ShareGroup.PROTOCOL_TYPE
            else:
                protocol_type = CONSUMER
            group_type = group.group_type if group is not None else GroupType.CLASSIC
            out.append({"group_id": name, "protocol_type": protocol_type, "group_state": state,
                        "group_type": group_type.value})
        return out

    def delete_group(self, group_id: str, now_ms: int) -> tuple[ErrorCode, list]:
        error = self.check(group_id, allow_empty=True)
        if error != E.NONE:
            return error, []
        share = self.share_groups.group(group_id)
        if share is not None:
            if share.members:
                return E.NON_EMPTY_GROUP, []
            records = self.offsets.delete_group(group_id)
            records += [share_records.encode(r, self.topic_id)
                        for r in self.share_groups.delete(group_id)]
            return E.NONE, [Append(group_id, records),
                            Emit("share_group_deleted", {"group": group_id})]
        consumer_group = self.consumer_groups.group(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return E.NON_EMPTY_GROUP, []
            records = self.offsets.delete_group(group_id)
            records += [cg_records.encode(r, self.topic_id)
                        for r in self.consumer_groups.delete(group_id)]
            return E.NONE, [Append(group_id, records)]
        group = self.membership.group(group_id)
        if group is None and not self.offsets.has_offsets(group_id):
            return E.GROUP_ID_NOT_FOUND, []
        if group is not None and group.state != S.EMPTY:
            return E.NON_EMPTY_GROUP, []
        records = self.offsets.delete_group(group_id)
        records.append(OffsetRecord(offsets_topic.encode_group_key(group_id), None))
        if group is not None:
            previous = group.transition_to(S.DEAD, now_ms)
            effects = [Emit("group_state", {
                "group": group_id, "generation": group.generation, "old_state": previous.value,
                "new_state": S.DEAD.value, "protocol_type": group.protocol_type or "",
                "protocol": group.protocol or "", "members": 0, "reason": "deleted"})]
        else:
            effects = []
        return E.NONE, [Append(group_id, records), *effects]

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]):
        """OffsetDelete: (group error, {tp: error}, effects)."""
        error = self.check(group_id)
        if error != E.NONE:
            return error, {}, []
        group = self.membership.group(group_id)
        if group is None and not self.offsets.has_offsets(group_id):
            return E.GROUP_ID_NOT_FOUND, {}, []
        subscribed = self._subscribed_topics(group) if group and group.state != S.EMPTY else set()
        errors = {tp: E.GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in subscribed else E.NONE
                  for tp in partitions}
        records = self.offsets.delete_offsets(group_id, [tp for tp, e in errors.items()
                                                         if e == E.NONE])
        return E.NONE, errors, [Append(group_id, records)] if records else []

    def _subscribed_topics(self, group: ClassicGroup) -> set[str]:
        if group.protocol_type != CONSUMER:
            return set()
        topics: set[str] = set()
        for member in group.members.values():
            try:
                topics.update(decode_subscription(member.metadata(group.protocol)).topics)
            except DecodeError:
                pass
        return topics

    # -- records and replay -------------------------------------------------------------------

    def group_record(self, group: ClassicGroup) -> list[OffsetRecord]:
        value = {
            "protocol_type": group.protocol_type or "", "generation": group.generation,
            "protocol": group.protocol, "leader": group.leader_id if group.members else None,
            "current_state_timestamp": group.state_timestamp_ms,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "rebalance_timeout": m.rebalance_timeout_ms,
                         "session_timeout": m.session_timeout_ms,
                         "subscription": m.metadata(group.protocol), "assignment": m.assignment}
                        for m in group.members.values()],
        }
        return [OffsetRecord(offsets_topic.encode_group_key(group.group_id),
                             offsets_topic.encode_group_value(value))]

    def replay_record(self, record: OffsetRecord, now_ms: int) -> None:
        """Replay a record this coordinator just wrote (offsets without re-parsing)."""
        if record.entry is not None:
            self.offsets.replay_record(record)
        else:
            self.replay(record.key, record.value, now_ms)

    def replay(self, key: bytes, value: bytes | None, now_ms: int, loading: bool = False) -> None:
        """Apply one __consumer_offsets record: offsets always; a group record rebuilds the
        group only while loading (a live group already is what its record says), and a group
        tombstone removes it."""
        decoded = offsets_topic.decode_key(key, kip848=True, kip932=True)
        if isinstance(decoded, OffsetKey):
            self.offsets.replay_offset(decoded, value)
            return
        if decoded is None:
            return  # a record type this broker does not know: skipped
        if isinstance(decoded, ShareGroupKey):
            # as for a consumer group: a live share group already is what it wrote
            if loading:
                share_record = share_records.decode(
                    decoded, offsets_topic.decode_value(decoded, value), self.topic_name)
                if share_record is not None:
                    self.share_groups.replay(share_record)
            return
        if isinstance(decoded, ConsumerGroupKey):
            # a live consumer group already is what it wrote; a load rebuilds it
            if loading:
                record = cg_records.decode(decoded, offsets_topic.decode_value(decoded, value),
                                           self.topic_name)
                if record is not None:
                    self.consumer_groups.replay(record)
            return
        existing = self.groups.get(decoded.group)
        if value is None:
            if isinstance(existing, ClassicGroup):
                del self.groups[decoded.group]
            return
        if existing is None or (loading and (isinstance(existing, ClassicGroup)
                                             or existing.is_empty)):
            # a load replays in log order: a consumer group already here is what this group
            # was before it changed type, which it did only once empty
            self.groups[decoded.group] = self._group_from_record(
                decoded, offsets_topic.decode_value(decoded, value), now_ms)

    def _group_from_record(self, key: GroupKey, v, now_ms: int) -> ClassicGroup:
        group = ClassicGroup(key.group, generation=v.generation,
                             protocol_type=v.protocol_type or None, protocol=v.protocol,
                             leader_id=v.leader, state_timestamp_ms=v.current_state_timestamp)
        for m in v.members:
            member = Member(m.member_id, m.get("group_instance_id"), m.client_id, m.client_host,
                            m.get("rebalance_timeout", -1), m.session_timeout, v.protocol_type,
                            [(v.protocol, m.subscription)], m.assignment, is_new=False,
                            last_heartbeat_ms=now_ms)
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        group.state = S.STABLE if group.members else S.EMPTY
        return group

    def begin_load(self, partition: int) -> None:
        self.loading.add(partition)

    def finish_load(self, partition: int, now_ms: int) -> None:
        """Loaded members get a full session to heartbeat, as after a coordinator move."""
        self.loading.discard(partition)
        self.owned.add(partition)
        here = [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]
        self.consumer_groups.finish_load(
            [g.group_id for g in here if isinstance(g, ConsumerGroup)], now_ms)
        self.share_groups.finish_load(
            [g.group_id for g in here if isinstance(g, ShareGroup)], now_ms, self.topics())
        for group in here:
            if isinstance(group, ClassicGroup):
                for member in group.members.values():
                    self.membership._heartbeat_reset(group, member, now_ms)

    def unload(self, partition: int, now_ms: int) -> list:
        """This broker no longer leads the partition: its groups go, members must find the
        new coordinator (NOT_COORDINATOR from here on)."""
        self.owned.discard(partition)
        self.loading.discard(partition)
        out: list = []
        here = [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]
        self.consumer_groups.unload([g.group_id for g in here if isinstance(g, ConsumerGroup)])
        self.share_groups.unload([g.group_id for g in here if isinstance(g, ShareGroup)])
        for group in here:
            if not isinstance(group, ClassicGroup):
                continue
            group_id = group.group_id
            del self.groups[group_id]
            # its timers would fire on nothing now, but on a reloaded group if this broker
            # leads the partition again: they go with the group
            for kind in ("join", "sync", "initial"):
                self.timers.cancel((kind, group_id))
            for member_id in group.pending_members:
                self.timers.cancel(("pending", group_id, member_id))
            self.membership._initial_remaining.pop(group_id, None)
            for member in group.members.values():
                self.timers.cancel(("heartbeat", group_id, member.member_id))
                # the bodies the waiting handlers shape, so they can answer in any version
                if member.awaiting_join is not None:
                    out.append(Reply(member.awaiting_join,
                                     join_error(E.NOT_COORDINATOR, member.member_id)))
                    member.awaiting_join = None
                if member.awaiting_sync is not None:
                    out.append(Reply(member.awaiting_sync, sync_body(E.NOT_COORDINATOR)))
                    member.awaiting_sync = None
        self.offsets.unload(lambda g: self.partition_for(g) == partition)
        return out

    def offsets_topic_partitions(self) -> Iterable[int]:
        return range(self.config.num_partitions)
