"""A group as the coordinator keeps it, and the classic group in particular.

Owns: `Group`, what every group in the coordinator's one map shares whatever its protocol
(Kafka's Group interface: its id, its `GroupType`, its state's name, whether it is empty);
and for the classic protocol `GroupState` with its legal transitions declared as data,
`Member`, and `ClassicGroup`, a pure structure (no I/O, no clock) that the coordinator
drives. (The KIP-848 `ConsumerGroup` is broker.coordinator.consumer_group's.) The classic
states are those of Kafka's ClassicGroupState:

- EMPTY: no members. A new group starts here; so does one whose last member left. Offsets
  may still be committed (standalone commits). -> PREPARING_REBALANCE when a member joins;
  -> DEAD when the group is deleted.
- PREPARING_REBALANCE: waiting for every member to (re)join. Heartbeats answer
  REBALANCE_IN_PROGRESS, which is how running members learn to rejoin.
  -> COMPLETING_REBALANCE when all have joined or the rebalance timeout passes;
  -> EMPTY when the last member leaves; -> DEAD.
- COMPLETING_REBALANCE (AwaitingSync in older Kafka): join responses sent, waiting for the
  leader's SyncGroup with the assignment. -> STABLE on it; -> PREPARING_REBALANCE when a
  member joins or leaves; -> DEAD.
- STABLE: assignment handed out. -> PREPARING_REBALANCE on a join, leave, expiry or a
  changed subscription; -> DEAD.
- DEAD: removed (deleted, or its __consumer_offsets partition moved away). Final.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Protocol


class GroupType(enum.Enum):
    """Which protocol a group speaks: ListGroups' GroupsType, Kafka's Group.GroupType."""
    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"


class Group(Protocol):
    """What the coordinator asks of any group in its map before it knows the type; all
    else is asked of a ClassicGroup or a ConsumerGroup once its type is checked. Both
    derive from it, for `state_name` and `is_empty`."""
    group_id: str
    group_type: ClassVar[GroupType]
    members: Mapping[str, object]

    @property
    def state(self) -> enum.Enum: ...

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_empty(self) -> bool:
        return not self.members


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({
        GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(Exception):
    """A transition the state diagram forbids: always a coordinator bug."""


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    assignment: bytes = b""
    awaiting_join: object | None = None  # the runtime's waiter for a JoinGroup response
    awaiting_sync: object | None = None  # the runtime's waiter for a SyncGroup response
    is_new: bool = True
    last_heartbeat_ms: int = 0

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass
class ClassicGroup(Group):
    group_type: ClassVar[GroupType] = GroupType.CLASSIC
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # member ids handed out with MEMBER_ID_REQUIRED that have not joined yet (KIP-394)
    pending_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    synced: set[str] = field(default_factory=set)  # members whose SyncGroup arrived
    new_member_added: bool = False  # a join during the initial delay extends it
    state_timestamp_ms: int = -1

    def transition_to(self, target: GroupState, now_ms: int) -> GroupState:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state.value} -> {target.value} is illegal")
        previous, self.state = self.state, target
        self.state_timestamp_ms = now_ms
        return previous

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id  # the first member to join leads

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        self.synced.discard(member_id)
        if member is None:
            return None
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            # prefer a member already waiting in this rebalance, as Kafka does
            waiting = [m for m in self.members.values() if m.awaiting_join is not None]
            successors = waiting or list(self.members.values())
            self.leader_id = successors[0].member_id if successors else None
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """A static member restarted: its new member id takes over its place and assignment."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.synced:
            self.synced.discard(old_id)
            self.synced.add(new_id)
        return member

    # -- protocols --------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [set(m.protocol_names) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: list[str]) -> bool:
        """Whether a member with these protocols may join (INCONSISTENT_GROUP_PROTOCOL if not)."""
        if not protocol_type or not protocols:
            return False
        if self.is_empty:
            return True
        return protocol_type == self.protocol_type and bool(
            self.candidate_protocols() & set(protocols))

    def select_protocol(self) -> str:
        """Each member votes for its first protocol that all support; most votes wins.

        Ties go to the protocol earliest in the leader's preference order, so the choice is
        deterministic (Kafka leaves ties arbitrary).
        """
        candidates = self.candidate_protocols()
        votes = Counter(next(p for p in m.protocol_names if p in candidates)
                        for m in self.members.values())
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        leader = leader or next(iter(self.members.values()))
        order = {p: i for i, p in enumerate(leader.protocol_names)}
        return max(votes, key=lambda p: (votes[p], -order.get(p, len(order))))

    # -- rebalance bookkeeping ----------------------------------------------------------------

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.awaiting_join is not None for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def init_next_generation(self, now_ms: int) -> None:
        """A new generation: +1, protocol chosen, CompletingRebalance (Empty if no members)."""
        self.generation += 1
        self.synced.clear()
        if self.members:
            self.protocol = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol = None
            self.transition_to(GroupState.EMPTY, now_ms)
