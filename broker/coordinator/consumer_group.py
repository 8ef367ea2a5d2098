"""KIP-848 consumer groups: the ConsumerGroupHeartbeat protocol's state machine.

Owns: `ConsumerGroups`, a pure state machine over `ConsumerGroup`s and their `GroupMember`s
(time passed in as `now_ms`, effects returned as broker.coordinator.effects' `Reply`,
`Append` and `Emit`), the records it writes (`GroupEpoch`, `MemberMetadata`,
`TargetMember`, `TargetEpoch`, `CurrentAssignment`, `GroupTombstone`: the consumer-group
records of __consumer_offsets, by topic name; broker.coordinator.cg_records turns them into
Kafka's bytes) and `replay`, which rebuilds groups from them on load. What it shares with
share groups is broker.coordinator.server_assigned's.

The rules are Kafka 4.0's group coordinator (GroupMetadataManager.consumerGroupHeartbeat,
CurrentAssignmentBuilder, TargetAssignmentBuilder):

- The **group epoch** goes up whenever what the assignment depends on changes: a member
  joins, leaves or is fenced, a subscription changes, or a subscribed topic's partition
  count changes.
- The **target assignment** is computed by the server-side assignor (`uniform` by default,
  or `range`: the one most members ask for) whenever the group epoch is ahead of the
  target's epoch, starting from the previous target so that it is sticky.
- Each **member** reconciles towards its target one heartbeat at a time, with no barrier:
  partitions it keeps and may keep stay; partitions that go elsewhere are *pending
  revocation* (state UNREVOKED_PARTITIONS, its epoch unchanged) until a heartbeat no longer
  lists them as owned; only then does it take its new epoch and the partitions of its
  target that no other member still holds. Those still held elsewhere wait
  (UNRELEASED_PARTITIONS) and are added at a later heartbeat, once released. So no
  partition is ever owned by two members, and members that keep their partitions never
  stop.
- **Fencing**: a heartbeat with an epoch ahead of the member's, or behind it other than the
  previous epoch with owned partitions within its assignment (a lost response), is
  FENCED_MEMBER_EPOCH; an unknown member id is UNKNOWN_MEMBER_ID. The client then rejoins
  with epoch 0, owning nothing.
- **Timeouts**: a member whose heartbeats stop for `session_timeout_ms`
  (group.consumer.session.timeout.ms, or the group's own consumer.session.timeout.ms set
  with IncrementalAlterConfigs: `group_configs`) is removed; a member that does not revoke within its
  rebalance timeout is removed too.
- **Static members** (`instance_id`) that leave with epoch -2 keep their assignment for a
  session timeout; a member that joins with the same instance id takes it over, epoch and
  partitions, without a new group epoch. An instance id held by an active member is
  UNRELEASED_INSTANCE_ID.
- Heartbeats with epoch -1 leave the group (-2: a static member's temporary leave).
- A member still reconciling is asked back sooner (a tenth of the heartbeat interval), so
  that released partitions reach their new owners without waiting a whole interval.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Mapping

from broker.coordinator import assignors as server_assignors
from broker.coordinator.effects import Append, Emit, Reply
from broker.coordinator.group import Group, GroupType
from broker.coordinator.server_assigned import (
    Assignment, HeartbeatRefused, Pairs, ServerAssignedGroup, ServerAssignedGroups, fenced_epoch,
    frozen, heartbeat_error, thawed, unknown_member)
from broker.coordinator.timers import TimerService
from protocol.errors import ErrorCode

E = ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
RECONCILING_INTERVAL_MIN_MS = 100
STATIC_LEAVE_EPOCH = -2
# the timers it keeps, keyed (kind, group id, member id)
TIMER_KINDS = frozenset({"session", "revocation"})


class MemberState(enum.Enum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class GroupState(enum.Enum):
    """What DescribeGroups / ConsumerGroupDescribe / ListGroups call a consumer group's
    state (Kafka's ConsumerGroupState)."""
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors; 1st default
    max_size: int = 2**31 - 1  # group.consumer.max.size


# -- the records (by topic name; cg_records encodes them as Kafka's) -------------------------

@dataclass(frozen=True)
class GroupEpoch:
    group_id: str
    epoch: int


@dataclass(frozen=True)
class MemberMetadata:
    group_id: str
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int


@dataclass(frozen=True)
class TargetMember:
    group_id: str
    member_id: str
    partitions: Pairs


@dataclass(frozen=True)
class TargetEpoch:
    group_id: str
    epoch: int


@dataclass(frozen=True)
class CurrentAssignment:
    group_id: str
    member_id: str
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Pairs
    pending_revocation: Pairs


@dataclass(frozen=True)
class Tombstone:
    """The deletion of one record: `kind` is the record class's name."""
    kind: str
    group_id: str
    member_id: str | None = None


Record = GroupEpoch | MemberMetadata | TargetMember | TargetEpoch | CurrentAssignment | Tombstone


# -- the state --------------------------------------------------------------------------------

@dataclass
class GroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300000
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def metadata_record(self, group_id: str) -> MemberMetadata:
        return MemberMetadata(group_id, self.member_id, self.instance_id, self.rack_id,
                              self.client_id, self.client_host,
                              tuple(sorted(self.subscribed_topic_names)),
                              self.subscribed_topic_regex, self.server_assignor,
                              self.rebalance_timeout_ms)

    def assignment_record(self, group_id: str) -> CurrentAssignment:
        return CurrentAssignment(group_id, self.member_id, self.member_epoch,
                                 self.previous_member_epoch, self.state.value,
                                 frozen(self.assigned), frozen(self.pending_revocation))


@dataclass
class ConsumerGroup(ServerAssignedGroup[GroupMember]):
    group_type: ClassVar[GroupType] = GroupType.CONSUMER

    @property
    def state(self) -> GroupState:
        if self.dead:
            return GroupState.DEAD
        if not self.members:
            return GroupState.EMPTY
        if self.target_epoch != self.group_epoch:
            return GroupState.ASSIGNING
        if any(m.member_epoch != self.target_epoch or m.state != MemberState.STABLE
               for m in self.members.values()):
            return GroupState.RECONCILING
        return GroupState.STABLE

    def static_member(self, instance_id: str) -> GroupMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def owner_of(self, topic: str, partition: int, other_than: str) -> str | None:
        """The member other than `other_than` that holds the partition: assigned, or
        pending its revocation."""
        for m in self.members.values():
            if m.member_id == other_than:
                continue
            if partition in m.assigned.get(topic, ()) or \
                    partition in m.pending_revocation.get(topic, ()):
                return m.member_id
        return None

    def preferred_assignor(self, default: str) -> str:
        votes = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if not votes:
            return default
        best = max(votes.values())
        return sorted(a for a, n in votes.items() if n == best)[0]


@dataclass
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat by topic name (the handler maps topic ids). None means
    "unchanged since the last heartbeat", as on the wire."""
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


def _held_target(group: ConsumerGroup, member: GroupMember) -> dict[str, frozenset[int]]:
    """What the assignor is to keep in place for a member: its last target, less what it
    does not hold yet. Kafka passes the whole last target; a partition targeted but not
    yet taken (its new owner has not heartbeated since) costs nothing to move, so this
    lets it go where it is needed now. In a rolling bounce the leaver's partitions, handed
    to the others' targets and not taken yet, go straight back to the member that
    restarted, without a revocation (the bench's rolling bounce)."""
    if member.member_epoch == STATIC_LEAVE_EPOCH:
        return {t: frozenset(ps) for t, ps in group.target.get(member.member_id, {}).items()}
    held: dict[str, frozenset[int]] = {}
    for t, ps in group.target.get(member.member_id, {}).items():
        kept = ps & (member.assigned.get(t, frozenset())
                     | member.pending_revocation.get(t, frozenset()))
        if kept:
            held[t] = kept
    return held


def _subset(owned: Assignment, of: Assignment) -> bool:
    return all(ps <= of.get(t, frozenset()) for t, ps in owned.items())


def _owns_any(owned: Assignment | None, revoking: Assignment) -> bool:
    if owned is None:  # not said: assume it still owns them
        return bool(revoking)
    return any(owned.get(t, frozenset()) & ps for t, ps in revoking.items())


@dataclass
class ConsumerGroups(ServerAssignedGroups[ConsumerGroup, Record]):
    config: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    # the coordinator's one map and one timer service, shared with the classic machine: it
    # sees only the ConsumerGroups in the map and fires only its own TIMER_KINDS
    groups: dict[str, Group] = field(default_factory=dict)
    timers: TimerService[tuple] = field(default_factory=TimerService)
    new_member_id: Callable[[], str] = lambda: uuid.uuid4().hex
    # a group's own configs (KIP-848 group configs, from the metadata image): its
    # consumer.session.timeout.ms and consumer.heartbeat.interval.ms win over `config`
    group_configs: Callable[[str], Mapping[str, str]] = lambda group_id: {}
    group_class: ClassVar[type] = ConsumerGroup
    timer_kinds: ClassVar[frozenset[str]] = TIMER_KINDS
    member_record_kinds: ClassVar[tuple[str, str, str]] = (
        "CurrentAssignment", "TargetMember", "MemberMetadata")
    group_record_kinds: ClassVar[tuple[str, str]] = ("TargetEpoch", "GroupEpoch")

    def _epoch_record(self, group_id: str, epoch: int) -> Record:
        return GroupEpoch(group_id, epoch)

    def _tombstone(self, kind: str, group_id: str, member_id: str | None = None) -> Record:
        return Tombstone(kind, group_id, member_id)

    def _group_setting(self, group_id: str, name: str, default: int) -> int:
        try:
            return int(self.group_configs(group_id).get(name, default))
        except ValueError:  # the controller validated it: never, but never fatal either
            return default

    def session_timeout_ms(self, group_id: str) -> int:
        return self._group_setting(group_id, "consumer.session.timeout.ms",
                                   self.config.session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._group_setting(group_id, "consumer.heartbeat.interval.ms",
                                   self.config.heartbeat_interval_ms)

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------

    def heartbeat(self, waiter: Any, req: HeartbeatRequest, now_ms: int,
                  topics: Mapping[str, int]) -> list:
        """One heartbeat. `topics`: the existing topics' partition counts, by name."""
        try:
            return self._heartbeat(waiter, req, now_ms, topics)
        except HeartbeatRefused as e:
            return [Reply(waiter, heartbeat_error(e.error, e.message, req.member_id))]

    def _validate(self, req: HeartbeatRequest) -> None:
        bad = E.INVALID_REQUEST
        if not req.group_id:
            raise HeartbeatRefused(bad, "GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id:
            raise HeartbeatRefused(bad, "InstanceId can't be empty.")
        if req.member_epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms < 0:
                raise HeartbeatRefused(bad, "RebalanceTimeoutMs must be provided in first "
                                            "request.")
            if req.owned:
                raise HeartbeatRefused(bad, "TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise HeartbeatRefused(bad, "SubscribedTopicNames or SubscribedTopicRegex "
                                            "must be set in first request.")
        elif req.member_epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                raise HeartbeatRefused(bad, "InstanceId can't be null when leaving with "
                                            "epoch -2.")
        elif req.member_epoch < STATIC_LEAVE_EPOCH:
            raise HeartbeatRefused(bad, f"MemberEpoch {req.member_epoch} is invalid.")
        if req.member_epoch != JOIN_EPOCH and not req.member_id:
            raise HeartbeatRefused(E.UNKNOWN_MEMBER_ID, "MemberId can't be empty.")
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            raise HeartbeatRefused(E.UNSUPPORTED_ASSIGNOR,
                                   f"ServerAssignor {req.server_assignor} is not supported. "
                                   f"Supported assignors: {', '.join(self.config.assignors)}.")
        if req.subscribed_topic_regex:
            try:
                re.compile(req.subscribed_topic_regex)
            except re.error as e:
                raise HeartbeatRefused(E.INVALID_REGULAR_EXPRESSION,
                                       f"SubscribedTopicRegex `{req.subscribed_topic_regex}` "
                                       f"is not a valid regular expression: {e}.") from None

    def _heartbeat(self, waiter: Any, req: HeartbeatRequest, now_ms: int,
                   topics: Mapping[str, int]) -> list:
        self._validate(req)
        out: list = []
        records: list[Record] = []
        group = self.group(req.group_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(waiter, group, req, now_ms)
        if group is None or group.dead:
            if req.member_epoch != JOIN_EPOCH:
                raise unknown_member(req.member_id, req.group_id)
            group = self.groups[req.group_id] = ConsumerGroup(req.group_id)
        member, bump = self._member_for(group, req, now_ms, records)
        before_assigned = dict(member.assigned)

        # what the member says of itself
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            client_id=req.client_id or member.client_id,
            client_host=req.client_host or member.client_host,
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0
                                  else member.rebalance_timeout_ms),
            server_assignor=(req.server_assignor if req.server_assignor is not None
                             else member.server_assignor),
            subscribed_topic_names=(tuple(sorted(set(req.subscribed_topic_names)))
                                    if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(req.subscribed_topic_regex or None
                                    if req.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex))
        if updated.metadata_record(group.group_id) != member.metadata_record(group.group_id):
            records.append(updated.metadata_record(group.group_id))
            if (updated.subscribed_topic_names, updated.subscribed_topic_regex,
                    updated.server_assignor) != (member.subscribed_topic_names,
                                                 member.subscribed_topic_regex,
                                                 member.server_assignor):
                bump = True
        group.members[updated.member_id] = member = updated

        self._bump_epoch(group, bump, topics, records)

        if group.group_epoch > group.target_epoch:
            records += self._compute_target(group, topics)

        reconciled = self._reconcile(group, member, req.owned, topics)
        if reconciled != member:
            group.members[member.member_id] = member = reconciled
            records.append(member.assignment_record(group.group_id))
        self._schedule(group, member, now_ms)

        if records:
            out.append(Append(group.group_id, records))
        include = (req.member_epoch == JOIN_EPOCH or member.assigned != before_assigned
                   or (req.owned is not None and req.owned != member.assigned))
        out.append(Reply(waiter, {
            "throttle_time_ms": 0, "error_code": E.NONE, "error_message": None,
            "member_id": member.member_id, "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": self._interval_for(group, member),
            "assignment": dict(member.assigned) if include else None}))
        if member.assigned != before_assigned:
            out.append(Emit("consumer_group_assignment", {
                "group": group.group_id, "member": member.member_id,
                "member_epoch": member.member_epoch, "state": member.state.name,
                "assigned": [f"{t}-{p}" for t, ps in sorted(member.assigned.items())
                             for p in sorted(ps)],
                "pending_revocation": [f"{t}-{p}" for t, ps in
                                       sorted(member.pending_revocation.items())
                                       for p in sorted(ps)]}))
        return out

    def _interval_for(self, group: ConsumerGroup, member: GroupMember) -> int:
        """group.consumer.heartbeat.interval.ms, except for a member still reconciling:
        one waiting for partitions others have yet to release, or one yet to revoke, is
        asked back in a tenth of it (100 ms at least). The coordinator cannot push, so a
        released partition would otherwise wait up to a whole interval for its new owner's
        next heartbeat; a member at its target, the usual case, keeps the full interval.
        (Kafka 4.0 answers the configured interval always; clients take whatever comes.)"""
        interval = self.heartbeat_interval_ms(group.group_id)
        if member.state == MemberState.STABLE and member.member_epoch == group.target_epoch:
            return interval
        return max(RECONCILING_INTERVAL_MIN_MS, interval // 10)

    def _member_for(self, group: ConsumerGroup, req: HeartbeatRequest, now_ms: int,
                    records: list[Record]) -> tuple[GroupMember, bool]:
        """The member the heartbeat is from (new, taken over, or known and its epoch
        valid), and whether it changes the group's epoch."""
        if req.member_epoch == JOIN_EPOCH:
            member_id = req.member_id or self.new_member_id()
            if req.instance_id is not None:
                old = group.static_member(req.instance_id)
                if old is not None and old.member_id != member_id:
                    if old.member_epoch != STATIC_LEAVE_EPOCH:
                        raise HeartbeatRefused(
                            E.UNRELEASED_INSTANCE_ID,
                            f"Static member {old.member_id} with instance id "
                            f"{req.instance_id} is not released yet.")
                    # it takes over the old member's place: epoch and partitions
                    taken = replace(old, member_id=member_id,
                                    member_epoch=old.previous_member_epoch)
                    target = group.target.get(old.member_id, {})
                    records += self._remove_records(group, old.member_id)
                    self._forget(group, old.member_id)
                    group.members[member_id] = taken
                    group.target[member_id] = target
                    records.append(taken.metadata_record(group.group_id))
                    records.append(TargetMember(group.group_id, member_id,
                                                frozen(group.target[member_id])))
                    records.append(taken.assignment_record(group.group_id))
                    return taken, False
            known = group.members.get(member_id)
            if known is not None:
                # a rejoin of a known member, which now owns nothing: as fenced, then new
                records += self._remove_records(group, member_id)
                self._forget(group, member_id)
            if len(group.members) >= self.config.max_size:
                raise HeartbeatRefused(E.GROUP_MAX_SIZE_REACHED,
                                       f"The consumer group has reached its maximum "
                                       f"capacity of {self.config.max_size} members.")
            member = GroupMember(member_id, client_id=req.client_id,
                                 client_host=req.client_host)
            return member, True
        known_member = group.members.get(req.member_id)
        if known_member is None:
            raise unknown_member(req.member_id, group.group_id)
        member = known_member
        if req.member_epoch > member.member_epoch:
            raise fenced_epoch("consumer", req.member_epoch, member.member_epoch)
        if req.member_epoch < member.member_epoch:
            lost_answer = (req.member_epoch == member.previous_member_epoch
                           and req.owned is not None and _subset(req.owned, member.assigned))
            if not lost_answer:
                raise fenced_epoch("consumer", req.member_epoch, member.member_epoch)
        return member, False

    def _subscribed(self, member: GroupMember, topics: Mapping[str, int]) -> set[str]:
        names = {t for t in member.subscribed_topic_names if t in topics}
        if member.subscribed_topic_regex:
            pattern = re.compile(member.subscribed_topic_regex)
            names |= {t for t in topics if pattern.fullmatch(t) and not t.startswith("__")}
        return names

    def _compute_target(self, group: ConsumerGroup, topics: Mapping[str, int]) -> list[Record]:
        assignor = server_assignors.ASSIGNORS[group.preferred_assignor(self.config.assignors[0])]
        specs = {
            m.member_id: server_assignors.MemberSpec(
                m.member_id, frozenset(self._subscribed(m, topics)), _held_target(group, m),
                rack=m.rack_id, instance_id=m.instance_id)
            # a static member away (epoch -2) keeps its place in the target
            for m in group.members.values()}
        subscribed = {t: topics[t] for s in specs.values() for t in s.subscribed_topics}
        new_target = {mid: {t: frozenset(ps) for t, ps in a.items() if ps}
                      for mid, a in assignor(specs, subscribed).items()}
        records: list[Record] = []
        for mid in group.members:
            target = new_target.get(mid, {})
            if target != group.target.get(mid):
                records.append(TargetMember(group.group_id, mid, frozen(target)))
        group.target = {mid: new_target.get(mid, {}) for mid in group.members}
        group.target_epoch = group.group_epoch
        records.append(TargetEpoch(group.group_id, group.target_epoch))
        return records

    def _reconcile(self, group: ConsumerGroup, member: GroupMember, owned: Assignment | None,
                   topics: Mapping[str, int]) -> GroupMember:
        """One step of CurrentAssignmentBuilder: the member's next state."""
        if member.state == MemberState.UNREVOKED_PARTITIONS and \
                _owns_any(owned, member.pending_revocation):
            return member  # still revoking: nothing moves until it has
        if member.state == MemberState.STABLE and member.member_epoch == group.target_epoch:
            return member
        target = group.target.get(member.member_id, {})
        subscribed = self._subscribed(member, topics)
        keep: Assignment = {}
        revoke: Assignment = {}
        add: Assignment = {}
        unreleased = False
        for t in set(target) | set(member.assigned):
            want = target.get(t, frozenset()) if t in subscribed else frozenset()
            has = member.assigned.get(t, frozenset())
            if has & want:
                keep[t] = has & want
            if has - want:
                revoke[t] = has - want
            free = set()
            for p in want - has:
                if group.owner_of(t, p, member.member_id) is None or \
                        p in member.pending_revocation.get(t, ()):
                    free.add(p)
                else:
                    unreleased = True
            if free:
                add[t] = frozenset(free)
        if revoke and _owns_any(owned, revoke):
            return replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=keep,
                           pending_revocation=revoke)
        assigned = {t: keep.get(t, frozenset()) | add.get(t, frozenset())
                    for t in set(keep) | set(add)}
        epoch = group.target_epoch
        previous = member.member_epoch if epoch != member.member_epoch \
            else member.previous_member_epoch
        return replace(member, member_epoch=epoch, previous_member_epoch=previous,
                       state=(MemberState.UNRELEASED_PARTITIONS if unreleased
                              else MemberState.STABLE),
                       assigned={t: ps for t, ps in assigned.items() if ps},
                       pending_revocation={})

    def _schedule(self, group: ConsumerGroup, member: GroupMember, now_ms: int) -> None:
        key = (group.group_id, member.member_id)
        self.timers.schedule(("session",) + key,
                             now_ms + self.session_timeout_ms(group.group_id))
        revoke_key = ("revocation",) + key
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if self.timers.deadline(revoke_key) is None:
                self.timers.schedule(revoke_key, now_ms + member.rebalance_timeout_ms)
        else:
            self.timers.cancel(revoke_key)

    # -- leaving and fencing --------------------------------------------------------------

    def _leave(self, waiter: Any, group: ConsumerGroup | None, req: HeartbeatRequest,
               now_ms: int) -> list:
        member = group.members.get(req.member_id) if group is not None else None
        if group is not None and member is None and req.instance_id is not None:
            member = group.static_member(req.instance_id)
        if group is None or member is None:
            raise unknown_member(req.member_id, req.group_id)
        reply = Reply(waiter, {"throttle_time_ms": 0, "error_code": E.NONE,
                               "error_message": None, "member_id": member.member_id,
                               "member_epoch": req.member_epoch, "heartbeat_interval_ms": 0,
                               "assignment": None})
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # kept, partitions and all, for a session timeout: the same instance may return
            left = replace(member, previous_member_epoch=member.member_epoch,
                           member_epoch=STATIC_LEAVE_EPOCH)
            group.members[member.member_id] = left
            self.timers.cancel(("revocation", group.group_id, member.member_id))
            self.timers.schedule(("session", group.group_id, member.member_id),
                                 now_ms + self.session_timeout_ms(group.group_id))
            return [Append(group.group_id, [left.assignment_record(group.group_id)]),
                    Emit("consumer_group_leave", {"group": group.group_id,
                                                  "member": member.member_id,
                                                  "static": True}),
                    reply]
        records = self._fence(group, member.member_id)
        return [Append(group.group_id, records),
                Emit("consumer_group_leave", {"group": group.group_id,
                                              "member": member.member_id, "static": False}),
                reply]

    def on_timer(self, key: tuple, now_ms: int) -> list:
        """A session or revocation deadline passed: the member is fenced."""
        kind, group_id, member_id = key
        group = self.group(group_id)
        if group is None or member_id not in group.members:
            return []
        records = self._fence(group, member_id)
        return [Append(group_id, records),
                Emit("consumer_group_fenced", {"group": group_id, "member": member_id,
                                               "reason": "session timeout"
                                               if kind == "session" else
                                               "rebalance timeout (partitions not revoked)"})]

    # -- reading ------------------------------------------------------------------------

    def commit_error(self, group_id: str, member_id: str, member_epoch: int) -> ErrorCode:
        """OffsetCommit against a consumer group (Kafka's ConsumerGroup.validateOffsetCommit):
        a member's commit must carry its current epoch; a commit without a member is
        accepted only while the group is empty."""
        group = self.group(group_id)
        assert group is not None  # the coordinator asks only of its consumer groups
        if member_epoch < 0 and not member_id:
            return E.NONE if not group.members else E.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    def fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        group = self.group(group_id)
        assert group is not None  # the coordinator asks only of its consumer groups
        if member_epoch < 0:
            return E.NONE  # an admin's or a classic client's fetch
        member = group.members.get(member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    # -- replay (loading a __consumer_offsets partition) ----------------------------------

    def replay(self, record: Record) -> None:
        """Apply one record read from the log, in log order: the state they describe is
        the state (the live group already is what it wrote)."""
        gid = record.group_id
        group = self.group(gid)
        if isinstance(record, Tombstone):
            self._replay_tombstone(group, record.kind, record.member_id)
            return
        if group is None:
            other = self.groups.get(gid)
            if other is not None and not other.is_empty:
                return  # never written so: a group changes type only once empty
            # in log order: the empty classic group this one was before it changed type
            group = self.groups[gid] = ConsumerGroup(gid)
        match record:
            case GroupEpoch(epoch=epoch):
                group.group_epoch = epoch
            case TargetEpoch(epoch=epoch):
                group.target_epoch = epoch
            case TargetMember(member_id=mid, partitions=parts):
                group.target[mid] = thawed(parts)
            case MemberMetadata():
                old = group.members.get(record.member_id) or GroupMember(record.member_id)
                group.members[record.member_id] = replace(
                    old, instance_id=record.instance_id, rack_id=record.rack_id,
                    client_id=record.client_id, client_host=record.client_host,
                    subscribed_topic_names=record.subscribed_topic_names,
                    subscribed_topic_regex=record.subscribed_topic_regex,
                    server_assignor=record.server_assignor,
                    rebalance_timeout_ms=record.rebalance_timeout_ms)
            case CurrentAssignment():
                old = group.members.get(record.member_id) or GroupMember(record.member_id)
                try:
                    state = MemberState(record.state)
                except ValueError:
                    state = MemberState.UNKNOWN
                group.members[record.member_id] = replace(
                    old, member_epoch=record.member_epoch,
                    previous_member_epoch=record.previous_member_epoch, state=state,
                    assigned=thawed(record.assigned),
                    pending_revocation=thawed(record.pending_revocation))

    def finish_load(self, group_ids: list[str], now_ms: int) -> None:
        """After a load: every member gets a full session to heartbeat the new
        coordinator, as Kafka reschedules them on load."""
        for gid in group_ids:
            group = self.group(gid)
            if group is None:
                continue
            if not group.members and group.group_epoch == 0:
                continue
            for m in group.members.values():
                self._schedule(group, m, now_ms)
