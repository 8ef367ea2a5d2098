"""KIP-932 share groups: the ShareGroupHeartbeat protocol's state machine (membership only).

Owns: `ShareGroups`, a pure state machine over `ShareGroup`s and their `ShareMember`s (time
passed in as `now_ms`, effects returned as broker.coordinator.effects' `Reply`, `Append`,
`Emit` and `ShareMemberGone`), `simple_assign` (Kafka's SimpleAssignor), the records it
writes (`ShareGroupEpoch`, `ShareMemberMetadata`, `ShareTargetMember`, `ShareTargetEpoch`,
`ShareCurrentAssignment`, `ShareStatePartitions`, `ShareTombstone`: the share group records of __consumer_offsets by
topic name; broker.coordinator.share_records turns them into Kafka's bytes) and `replay`,
which rebuilds groups from them on load (what it shares with consumer groups is
broker.coordinator.server_assigned's). Which records a share consumer is handed, and
their acquisition locks, are the share-partition side's, not this module's.

The rules are Kafka 4.1's group coordinator (GroupMetadataManager.shareGroupHeartbeat,
ShareGroupAssignmentBuilder, SimpleAssignor):

- The **group epoch** goes up when a member joins, leaves or is fenced, when a member's
  subscription changes, or when a subscribed topic's partition count changes.
- The **target assignment** is computed by the `simple` assignor whenever the group epoch
  is ahead of the target's. A partition may go to several members: sharing is the point.
- A **member** takes its target as soon as it heartbeats: share groups have no revocation,
  since no member owns a partition exclusively (Kafka's ShareGroupAssignmentBuilder sets
  the target epoch and partitions in one step). Its state is always STABLE.
- **Fencing**: an epoch ahead of the member's, or behind it other than its previous epoch
  (a lost response), is FENCED_MEMBER_EPOCH; an unknown member id is UNKNOWN_MEMBER_ID.
- A member silent for `session_timeout_ms` (group.share.session.timeout.ms) is removed;
  epoch -1 leaves. Either way a `ShareMemberGone` effect tells the share-partition side.
- A group id that names a classic or consumer group is GROUP_ID_NOT_FOUND ("Group g is not
  a share group."), as in Kafka, which does not convert between share and other groups.
- A full group (group.share.max.size) refuses a new member with GROUP_MAX_SIZE_REACHED.
- The group's **state partitions** (Kafka's ShareGroupStatePartitionMetadata) are every
  topic partition it was ever assigned, or given a start offset by AlterShareGroupOffsets,
  until DeleteShareGroupOffsets or the group's deletion: where the share coordinator may
  hold its state, which the offsets admin APIs list and delete.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Mapping

from broker.coordinator.effects import Append, Emit, Reply, ShareMemberGone
from broker.coordinator.group import Group, GroupType
from broker.coordinator.server_assigned import (
    Assignment, HeartbeatRefused, Pairs, ServerAssignedGroup, ServerAssignedGroups, fenced_epoch,
    frozen, heartbeat_error, thawed, unknown_member)
from broker.coordinator.timers import TimerService
from protocol.errors import ErrorCode

E = ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STABLE_MEMBER_STATE = 0  # Kafka's MemberState.STABLE, the only one a share member has
ASSIGNOR_NAME = "simple"
# the timers it keeps, keyed (kind, group id, member id)
SESSION_TIMER = "share-session"
TIMER_KINDS = frozenset({SESSION_TIMER})


class ShareGroupState(enum.Enum):
    """Kafka's ShareGroup.ShareGroupState, as ListGroups and ShareGroupDescribe name it."""
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ShareGroupConfig:
    enabled: bool = True  # group.share.enable
    session_timeout_ms: int = 45000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size


# -- the records (by topic name; share_records encodes them as Kafka's) ----------------------

@dataclass(frozen=True)
class ShareGroupEpoch:
    group_id: str
    epoch: int


@dataclass(frozen=True)
class ShareMemberMetadata:
    group_id: str
    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True)
class ShareTargetMember:
    group_id: str
    member_id: str
    partitions: Pairs


@dataclass(frozen=True)
class ShareTargetEpoch:
    group_id: str
    epoch: int


@dataclass(frozen=True)
class ShareCurrentAssignment:
    group_id: str
    member_id: str
    member_epoch: int
    previous_member_epoch: int
    assigned: Pairs


@dataclass(frozen=True)
class ShareStatePartitions:
    """The topic partitions whose share-partition state the group may have."""
    group_id: str
    partitions: Pairs


@dataclass(frozen=True)
class ShareTombstone:
    """The deletion of one record: `kind` is the record class's name."""
    kind: str
    group_id: str
    member_id: str | None = None


ShareRecord = (ShareGroupEpoch | ShareMemberMetadata | ShareTargetMember | ShareTargetEpoch
               | ShareCurrentAssignment | ShareStatePartitions | ShareTombstone)


# -- the simple assignor ---------------------------------------------------------------------

def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, int32 overflow): Kafka's
    SimpleAssignor places a member by it, so the same member ids land where Kafka's would."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _java_index(member_id: str, size: int) -> int:
    """Math.abs(memberId.hashCode() % size): Java's % keeps the dividend's sign."""
    return abs(java_string_hash(member_id)) % size


TopicPartition = tuple[str, int]


def simple_assign(subscriptions: Mapping[str, frozenset[str]], topics: Mapping[str, int],
                  current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's SimpleAssignor (KIP-932): each member is first hashed to one partition of
    its subscribed topics; partitions nobody got that way and nobody had before are dealt
    round-robin to their topic's subscribers; then each member keeps what it had before of
    a subscribed topic, except partitions the first step placed afresh. So with fewer
    partitions than members a partition goes to several members (one partition, four
    members: all four get it), and with more, each partition goes to at least one.

    `subscriptions`: member -> subscribed topics (existing ones); `topics`: partition
    counts; `current`: each member's previous target. Members and topics are walked in
    sorted order, where Kafka walks its hash sets: the rules are Kafka's, the tie order
    ours."""
    members = sorted(subscriptions)
    if not members:
        return {}
    subscribed = {m: sorted(t for t in subscriptions[m] if t in topics) for m in members}
    homogeneous = len({tuple(s) for s in subscribed.values()}) == 1
    current_by_partition: dict[TopicPartition, list[str]] = {}
    for m in members:
        for t, ps in current.get(m, {}).items():
            for p in ps:
                current_by_partition.setdefault((t, p), []).append(m)

    def partitions_of(ts: list[str]) -> list[TopicPartition]:
        return [(t, p) for t in ts for p in range(topics[t])]

    new: dict[TopicPartition, list[str]] = {}
    if homogeneous:
        targets = partitions_of(subscribed[members[0]])
        if not targets:
            return {m: {} for m in members}
        for m in members:  # step 1: hash
            new.setdefault(targets[_java_index(m, len(targets))], []).append(m)
        unassigned = [tp for tp in targets if tp not in new and tp not in current_by_partition]
        for i, tp in enumerate(unassigned):  # step 2: round-robin
            new.setdefault(tp, []).append(members[i % len(members)])
        subscribers_of = {t: set(members) for t in subscribed[members[0]]}
    else:
        subscribers_of = {}
        for m in members:
            own = partitions_of(subscribed[m])
            if own:
                new.setdefault(own[_java_index(m, len(own))], []).append(m)
            for t in subscribed[m]:
                subscribers_of.setdefault(t, set()).add(m)
        every = [tp for m in members for tp in partitions_of(subscribed[m])]
        for t in sorted(subscribers_of):
            unassigned = [tp for tp in dict.fromkeys(every) if tp[0] == t
                          and tp not in new and tp not in current_by_partition]
            takers = sorted(subscribers_of[t])
            for i, tp in enumerate(unassigned):
                new.setdefault(tp, []).append(takers[i % len(takers)])
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for (t, p), ms in new.items():
        for m in ms:
            out[m].setdefault(t, set()).add(p)
    for (t, p), ms in current_by_partition.items():  # step 3: keep the rest of the current
        if (t, p) in new or p >= topics.get(t, 0):
            continue
        for m in ms:
            if m in subscribers_of.get(t, ()):
                out[m].setdefault(t, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


# -- the state --------------------------------------------------------------------------------

@dataclass
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)

    def metadata_record(self, group_id: str) -> ShareMemberMetadata:
        return ShareMemberMetadata(group_id, self.member_id, self.rack_id, self.client_id,
                                   self.client_host, tuple(sorted(self.subscribed_topic_names)))

    def assignment_record(self, group_id: str) -> ShareCurrentAssignment:
        return ShareCurrentAssignment(group_id, self.member_id, self.member_epoch,
                                      self.previous_member_epoch, frozen(self.assigned))


@dataclass
class ShareGroup(ServerAssignedGroup[ShareMember]):
    group_type: ClassVar[GroupType] = GroupType.SHARE
    state_partitions: Assignment = field(default_factory=dict)

    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def members_of(self, topic: str, partition: int) -> list[str]:
        """The members whose current assignment holds the partition."""
        return sorted(m.member_id for m in self.members.values()
                      if partition in m.assigned.get(topic, ()))


@dataclass
class ShareHeartbeatRequest:
    """A ShareGroupHeartbeat by topic name. `subscribed_topic_names` None: unchanged since
    the last heartbeat, as on the wire. `member_id_required`: v1, where the client chooses
    its member id (KIP-1082), so an empty one is refused; v0 gets one generated."""
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: list[str] | None = None
    client_id: str = ""
    client_host: str = ""
    member_id_required: bool = True


@dataclass
class ShareGroups(ServerAssignedGroups[ShareGroup, ShareRecord]):
    config: ShareGroupConfig = field(default_factory=ShareGroupConfig)
    # the coordinator's one map and one timer service, shared with the other protocols'
    # machines: it sees only the ShareGroups in the map and fires only its TIMER_KINDS
    groups: dict[str, Group] = field(default_factory=dict)
    timers: TimerService[tuple] = field(default_factory=TimerService)
    new_member_id: Callable[[], str] = lambda: str(uuid.uuid4())
    group_class: ClassVar[type] = ShareGroup
    timer_kinds: ClassVar[frozenset[str]] = TIMER_KINDS
    member_record_kinds: ClassVar[tuple[str, str, str]] = (
        "ShareCurrentAssignment", "ShareTargetMember", "ShareMemberMetadata")
    group_record_kinds: ClassVar[tuple[str, str]] = ("ShareTargetEpoch", "ShareGroupEpoch")

    def _epoch_record(self, group_id: str, epoch: int) -> ShareRecord:
        return ShareGroupEpoch(group_id, epoch)

    def _tombstone(self, kind: str, group_id: str, member_id: str | None = None
                   ) -> ShareRecord:
        return ShareTombstone(kind, group_id, member_id)

    def _subscribed(self, member: ShareMember, topics: Mapping[str, int]) -> set[str]:
        return {t for t in member.subscribed_topic_names if t in topics}

    # -- ShareGroupHeartbeat ---------------------------------------------------------------

    def heartbeat(self, waiter: Any, req: ShareHeartbeatRequest, now_ms: int,
                  topics: Mapping[str, int]) -> list:
        """One heartbeat. `topics`: the existing topics' partition counts, by name."""
        try:
            return self._heartbeat(waiter, req, now_ms, topics)
        except HeartbeatRefused as e:
            return [Reply(waiter, heartbeat_error(e.error, e.message, req.member_id))]

    def _validate(self, req: ShareHeartbeatRequest) -> None:
        bad = E.INVALID_REQUEST
        if not req.group_id:
            raise HeartbeatRefused(bad, "GroupId can't be empty.")
        if req.rack_id is not None and not req.rack_id:
            raise HeartbeatRefused(bad, "RackId can't be empty.")
        if req.member_epoch > 0 or req.member_epoch == LEAVE_EPOCH:
            if not req.member_id:
                raise HeartbeatRefused(bad, "MemberId can't be empty.")
        elif req.member_epoch == JOIN_EPOCH:
            if req.member_id_required and not req.member_id:
                raise HeartbeatRefused(bad, "MemberId can't be empty.")
            if not req.subscribed_topic_names:
                raise HeartbeatRefused(bad,
                                       "SubscribedTopicNames must be set in first request.")
        else:
            raise HeartbeatRefused(bad, "MemberEpoch is invalid.")

    def _group_for(self, group_id: str, create: bool) -> ShareGroup:
        other = self.groups.get(group_id)
        if other is not None and not isinstance(other, ShareGroup):
            raise HeartbeatRefused(E.GROUP_ID_NOT_FOUND,
                                   f"Group {group_id} is not a share group.")
        if other is None or other.dead:
            if not create:
                raise HeartbeatRefused(E.GROUP_ID_NOT_FOUND,
                                       f"Share group {group_id} not found.")
            other = self.groups[group_id] = ShareGroup(group_id)
        return other

    def _heartbeat(self, waiter: Any, req: ShareHeartbeatRequest, now_ms: int,
                   topics: Mapping[str, int]) -> list:
        self._validate(req)
        if req.member_epoch == LEAVE_EPOCH:
            return self._leave(waiter, req)
        joining = req.member_epoch == JOIN_EPOCH
        group = self._group_for(req.group_id, create=joining)
        if len(group.members) >= self.config.max_size and (
                not req.member_id or req.member_id not in group.members):
            raise HeartbeatRefused(E.GROUP_MAX_SIZE_REACHED,
                                   f"The share group has reached its maximum capacity of "
                                   f"{self.config.max_size} members.")
        records: list[ShareRecord] = []
        bump = False
        if joining:
            member_id = req.member_id or self.new_member_id()
            if member_id in group.members:
                # a known member joining again: it starts over, as a new one
                records += self._remove_records(group, member_id)
                self._forget(group, member_id)
            member = ShareMember(member_id)
            bump = True
        else:
            member = self._known_member(group, req)
        before_assigned = dict(member.assigned)

        updated = replace(
            member,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            client_id=req.client_id or member.client_id,
            client_host=req.client_host or member.client_host,
            subscribed_topic_names=(tuple(sorted(set(req.subscribed_topic_names)))
                                    if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names))
        if joining or updated.metadata_record(group.group_id) != \
                member.metadata_record(group.group_id):
            records.append(updated.metadata_record(group.group_id))
            if updated.subscribed_topic_names != member.subscribed_topic_names:
                bump = True
        group.members[updated.member_id] = member = updated

        self._bump_epoch(group, bump, topics, records)
        if group.group_epoch > group.target_epoch:
            records += self._compute_target(group, topics)

        if member.member_epoch != group.target_epoch:
            # no revocation in a share group: the member takes its target at once
            member = replace(member, previous_member_epoch=member.member_epoch,
                             member_epoch=group.target_epoch,
                             assigned=dict(group.target.get(member.member_id, {})))
            group.members[member.member_id] = member
            records.append(member.assignment_record(group.group_id))
        self.timers.schedule((SESSION_TIMER, group.group_id, member.member_id),
                             now_ms + self.config.session_timeout_ms)

        out: list = []
        if records:
            out.append(Append(group.group_id, records))
        changed = member.assigned != before_assigned
        out.append(Reply(waiter, {
            "throttle_time_ms": 0, "error_code": E.NONE, "error_message": None,
            "member_id": member.member_id, "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": self.config.heartbeat_interval_ms,
            "assignment": dict(member.assigned) if joining or changed else None}))
        if joining:
            out.append(Emit("share_group_join", {"group": group.group_id,
                                                 "member": member.member_id,
                                                 "group_epoch": group.group_epoch}))
        if changed:
            out.append(Emit("share_group_assignment", {
                "group": group.group_id, "member": member.member_id,
                "member_epoch": member.member_epoch,
                "assigned": [f"{t}-{p}" for t, ps in sorted(member.assigned.items())
                             for p in sorted(ps)]}))
        return out

    def _known_member(self, group: ShareGroup, req: ShareHeartbeatRequest) -> ShareMember:
        member = group.members.get(req.member_id)
        if member is None:
            raise unknown_member(req.member_id, group.group_id)
        if req.member_epoch > member.member_epoch or (
                req.member_epoch < member.member_epoch
                and req.member_epoch != member.previous_member_epoch):
            raise fenced_epoch("share", req.member_epoch, member.member_epoch)
        return member

    def _compute_target(self, group: ShareGroup, topics: Mapping[str, int]) -> list[ShareRecord]:
        subscriptions = {m.member_id: frozenset(t for t in m.subscribed_topic_names
                                                if t in topics)
                         for m in group.members.values()}
        new_target = simple_assign(subscriptions, topics, group.target)
        records: list[ShareRecord] = []
        for mid in group.members:
            target = {t: ps for t, ps in new_target.get(mid, {}).items() if ps}
            if target != group.target.get(mid):
                records.append(ShareTargetMember(group.group_id, mid, frozen(target)))
            group.target[mid] = target
        group.target_epoch = group.group_epoch
        records.append(ShareTargetEpoch(group.group_id, group.target_epoch))
        assigned = [(t, ps) for target in new_target.values() for t, ps in target.items()]
        return records + self.add_state_partitions(group, dict(assigned))

    # -- the state partitions (the offsets admin APIs') ---------------------------------------

    def add_state_partitions(self, group: ShareGroup,
                             partitions: Mapping[str, frozenset[int]]) -> list[ShareRecord]:
        """Record that the group may have state on `partitions` too; nothing when it
        already knew them all."""
        merged = dict(group.state_partitions)
        for topic, ps in partitions.items():
            merged[topic] = merged.get(topic, frozenset()) | frozenset(ps)
        if merged == group.state_partitions:
            return []
        group.state_partitions = {t: ps for t, ps in merged.items() if ps}
        return [ShareStatePartitions(group.group_id, frozen(group.state_partitions))]

    def remove_state_topics(self, group: ShareGroup, topics: list[str]) -> list[ShareRecord]:
        """Forget the group's state partitions of `topics` (their state was deleted)."""
        kept = {t: ps for t, ps in group.state_partitions.items() if t not in topics}
        if kept == group.state_partitions:
            return []
        group.state_partitions = kept
        return [ShareStatePartitions(group.group_id, frozen(kept))]

    def delete(self, group_id: str) -> list[ShareRecord]:
        group = self.group(group_id)
        first = ([ShareTombstone("ShareStatePartitions", group_id)]
                 if group is not None and group.state_partitions else [])
        return first + super().delete(group_id)

    # -- leaving and fencing --------------------------------------------------------------

    def _leave(self, waiter: Any, req: ShareHeartbeatRequest) -> list:
        group = self._group_for(req.group_id, create=False)
        if req.member_id not in group.members:
            raise unknown_member(req.member_id, req.group_id)
        records = self._fence(group, req.member_id)
        return [Append(group.group_id, records),
                Emit("share_group_leave", {"group": group.group_id, "member": req.member_id}),
                ShareMemberGone(group.group_id, req.member_id, "left"),
                Reply(waiter, {"throttle_time_ms": 0, "error_code": E.NONE,
                               "error_message": None, "member_id": req.member_id,
                               "member_epoch": LEAVE_EPOCH, "heartbeat_interval_ms": 0,
                               "assignment": None})]

    def on_timer(self, key: tuple, now_ms: int) -> list:
        """A member's session ran out: it is fenced."""
        _kind, group_id, member_id = key
        group = self.group(group_id)
        if group is None or member_id not in group.members:
            return []
        records = self._fence(group, member_id)
        return [Append(group_id, records),
                Emit("share_group_fenced", {"group": group_id, "member": member_id,
                                            "reason": "session timeout"}),
                ShareMemberGone(group_id, member_id, "session timeout")]

    # -- reading ------------------------------------------------------------------------

    def describe(self, group_id: str) -> dict:
        """ShareGroupDescribe's entry for a share group (topics by name)."""
        group = self.group(group_id)
        assert group is not None  # the coordinator asks only of its share groups
        return {"error_code": E.NONE, "error_message": None, "group_id": group_id,
                "group_state": group.state.value, "group_epoch": group.group_epoch,
                "assignment_epoch": group.target_epoch, "assignor_name": ASSIGNOR_NAME,
                "members": [{"member_id": m.member_id, "rack_id": m.rack_id,
                             "member_epoch": m.member_epoch, "client_id": m.client_id,
                             "client_host": m.client_host,
                             "subscribed_topic_names": list(m.subscribed_topic_names),
                             "assignment": dict(m.assigned)}
                            for m in group.members.values()],
                "authorized_operations": -2**31}

    def member_epoch(self, group_id: str, member_id: str) -> int | None:
        """The member's current epoch, or None when it is not a member of that share group:
        what a share-partition leader on this broker may ask before it serves a member."""
        group = self.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        return member.member_epoch if member is not None else None

    # -- replay (loading a __consumer_offsets partition) ----------------------------------

    def replay(self, record: ShareRecord) -> None:
        """Apply one record read from the log, in log order."""
        gid = record.group_id
        group = self.group(gid)
        if isinstance(record, ShareTombstone):
            if record.kind == "ShareStatePartitions":
                if group is not None:
                    group.state_partitions = {}
                return
            self._replay_tombstone(group, record.kind, record.member_id)
            return
        if group is None:
            if gid in self.groups:
                return  # a group of another type by that id: never written so
            group = self.groups[gid] = ShareGroup(gid)
        match record:
            case ShareGroupEpoch(epoch=epoch):
                group.group_epoch = epoch
            case ShareTargetEpoch(epoch=epoch):
                group.target_epoch = epoch
            case ShareTargetMember(member_id=mid, partitions=parts):
                group.target[mid] = thawed(parts)
            case ShareStatePartitions(partitions=parts):
                group.state_partitions = thawed(parts)
            case ShareMemberMetadata():
                old = group.members.get(record.member_id) or ShareMember(record.member_id)
                group.members[record.member_id] = replace(
                    old, rack_id=record.rack_id, client_id=record.client_id,
                    client_host=record.client_host,
                    subscribed_topic_names=record.subscribed_topic_names)
            case ShareCurrentAssignment():
                old = group.members.get(record.member_id) or ShareMember(record.member_id)
                group.members[record.member_id] = replace(
                    old, member_epoch=record.member_epoch,
                    previous_member_epoch=record.previous_member_epoch,
                    assigned=thawed(record.assigned))

    def finish_load(self, group_ids: list[str], now_ms: int, topics: Mapping[str, int]) -> None:
        """After a load: every member gets a full session to heartbeat the new coordinator.
        The subscribed topics' sizes are read off the metadata image now (no record keeps
        them, as Kafka 4.1 keeps none), so a failover alone does not bump the epoch; a topic
        that grew in the moments the group had no coordinator is seen at its next growth."""
        for gid in group_ids:
            group = self.group(gid)
            if group is None:
                continue
            group.subscribed_partitions = self._subscribed_sizes(group, topics)
            for m in group.members.values():
                self.timers.schedule((SESSION_TIMER, gid, m.member_id),
                                     now_ms + self.config.session_timeout_ms)
