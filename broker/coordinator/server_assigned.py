"""What KIP-848 consumer groups and KIP-932 share groups have in common: groups whose
assignment the coordinator computes, members that heartbeat for it.

Owns: `ServerAssignedGroup`, the state both keep (group epoch, target epoch, members, each
member's target, the subscribed topics' sizes as of the last epoch, dead); and
`ServerAssignedGroups`, the parts of their state machines that do not depend on the
protocol: finding a group of the machine's own type in the coordinator's one map, the
epoch bump when subscriptions or subscribed topics' sizes change, removing and fencing a
member, deleting and unloading groups, and replaying tombstones. Also the heartbeat's
refusal (`HeartbeatRefused`, `heartbeat_error`, whose fields ConsumerGroupHeartbeat and
ShareGroupHeartbeat responses share), the `frozen`/`thawed` forms of an assignment that
the records carry, and their topics by id on the log (`pairs_by_id`, `pairs_by_name`, for
broker.coordinator.cg_records and share_records). What differs (reconciliation and revocation, static members,
regex subscriptions, the assignors, the records' own types) stays in
broker.coordinator.consumer_group and broker.coordinator.share_group.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Generic, Mapping, TypeVar

from broker.coordinator.group import Group
from broker.coordinator.timers import TimerService
from protocol.errors import ErrorCode

E = ErrorCode
Assignment = dict[str, frozenset[int]]  # topic -> partitions
Pairs = tuple[tuple[str, tuple[int, ...]], ...]  # an assignment as the records carry it

M = TypeVar("M")


def frozen(assignment: Mapping[str, frozenset[int]]) -> Pairs:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)


def thawed(pairs: Pairs) -> Assignment:
    return {t: frozenset(ps) for t, ps in pairs if ps}


# the records' topics are by id on the log: the caller maps through the metadata image
IdOf = Callable[[str], "uuid.UUID | None"]
NameOf = Callable[[uuid.UUID], "str | None"]


def pairs_by_id(pairs: Pairs, id_of: IdOf, with_names: bool = False) -> list[dict]:
    """An assignment as a record's topic-partitions field writes it (`with_names`: with
    each topic's name too, as ShareGroupStatePartitionMetadata has it)."""
    out = []
    for topic, partitions in pairs:
        topic_id = id_of(topic)
        if topic_id is not None:  # deleted meanwhile: nothing of it is held any more
            entry: dict = {"topic_id": topic_id, "partitions": list(partitions)}
            if with_names:
                entry["topic_name"] = topic
            out.append(entry)
    return out


def pairs_by_name(items: Any, name_of: NameOf) -> Pairs:
    """A record's decoded topic-partitions field, less the topics since deleted."""
    out = []
    for item in items or []:
        name = name_of(item.topic_id)
        if name is not None:
            out.append((name, tuple(sorted(item.partitions))))
    return tuple(sorted(out))


def heartbeat_error(error: ErrorCode, message: str | None = None, member_id: str = "",
                    epoch: int = -1) -> dict:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message,
            "member_id": member_id or None, "member_epoch": epoch,
            "heartbeat_interval_ms": 0, "assignment": None}


class HeartbeatRefused(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error, self.message = error, message


def unknown_member(member_id: str, group_id: str) -> HeartbeatRefused:
    return HeartbeatRefused(E.UNKNOWN_MEMBER_ID,
                            f"Member {member_id} is not a member of group {group_id}.")


def fenced_epoch(group_kind: str, sent: int, known: int) -> HeartbeatRefused:
    """FENCED_MEMBER_EPOCH, with Kafka's message; `group_kind`: "consumer" or "share"."""
    side = "greater" if sent > known else "smaller"
    return HeartbeatRefused(E.FENCED_MEMBER_EPOCH,
                            f"The {group_kind} group member has a {side} member epoch "
                            f"({sent}) than the one known by the group coordinator "
                            f"({known}). The member must abandon all its partitions and "
                            f"rejoin.")


@dataclass
class ServerAssignedGroup(Group, Generic[M]):
    group_id: str
    group_epoch: int = 0
    target_epoch: int = 0
    members: dict[str, M] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member -> its target
    # topic -> partition count as of the last epoch bump: a change bumps the epoch again
    subscribed_partitions: dict[str, int] = field(default_factory=dict)
    dead: bool = False


G = TypeVar("G", bound=ServerAssignedGroup[Any])
R = TypeVar("R")


class ServerAssignedGroups(Generic[G, R]):
    """The shared half of a machine over `G` groups writing `R` records. A subclass (a
    dataclass) has the fields `groups` and `timers`, sets the class attributes below, and
    makes its own group-epoch and tombstone records."""
    groups: dict[str, Group]  # the coordinator's one map, shared with the other machines
    timers: TimerService[tuple]
    group_class: ClassVar[type]
    timer_kinds: ClassVar[frozenset[str]]  # the only timers it keeps and fires
    # the kinds of record a member's removal deletes, in Kafka's order: current
    # assignment, target, then the member's metadata
    member_record_kinds: ClassVar[tuple[str, str, str]]
    # the kinds of record a group's deletion deletes: target epoch, then group epoch
    group_record_kinds: ClassVar[tuple[str, str]]

    def _epoch_record(self, group_id: str, epoch: int) -> R:
        raise NotImplementedError

    def _tombstone(self, kind: str, group_id: str, member_id: str | None = None) -> R:
        raise NotImplementedError

    def _subscribed(self, member: Any, topics: Mapping[str, int]) -> set[str]:
        """The existing topics the member subscribes to."""
        raise NotImplementedError

    def group(self, group_id: str) -> G | None:
        """The group of that id if it is of this machine's type; another type's is none of
        its own."""
        group = self.groups.get(group_id)
        return group if isinstance(group, self.group_class) else None  # type: ignore[return-value]

    def _subscribed_sizes(self, group: G, topics: Mapping[str, int]) -> dict[str, int]:
        return {t: topics[t] for m in group.members.values()
                for t in self._subscribed(m, topics)}

    def _bump_epoch(self, group: G, bump: bool, topics: Mapping[str, int],
                    records: list[R]) -> None:
        """A new group epoch if `bump` (a member joined, or a subscription changed) or a
        subscribed topic was created, deleted or grew since the last one."""
        sizes = self._subscribed_sizes(group, topics)
        if sizes != group.subscribed_partitions:
            bump = True
        if bump:
            group.group_epoch += 1
            group.subscribed_partitions = sizes
            records.append(self._epoch_record(group.group_id, group.group_epoch))

    def _fence(self, group: G, member_id: str) -> list[R]:
        """Remove a member: its records deleted, and a new group epoch (the others' targets
        are recomputed when they next heartbeat)."""
        records = self._remove_records(group, member_id)
        self._forget(group, member_id)
        group.group_epoch += 1
        records.append(self._epoch_record(group.group_id, group.group_epoch))
        return records

    def _remove_records(self, group: G, member_id: str) -> list[R]:
        return [self._tombstone(kind, group.group_id, member_id)
                for kind in self.member_record_kinds]

    def _forget(self, group: G, member_id: str) -> None:
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        for kind in sorted(self.timer_kinds):
            self.timers.cancel((kind, group.group_id, member_id))

    def delete(self, group_id: str) -> list[R]:
        """Delete an empty group (the caller checked it is empty)."""
        group = self.group(group_id)
        if group is None:
            return []
        del self.groups[group_id]
        for mid in list(group.members):
            self._forget(group, mid)
        group.dead = True
        return [self._tombstone(kind, group_id) for kind in self.group_record_kinds]

    def unload(self, group_ids: list[str]) -> None:
        for gid in group_ids:
            group = self.group(gid)
            if group is not None:
                del self.groups[gid]
                for mid in list(group.members):
                    self._forget(group, mid)

    def _replay_tombstone(self, group: G | None, kind: str, member_id: str | None) -> None:
        """A tombstone read from the log: the group's epoch record deleted is the group
        gone; a member's metadata or target deleted is that much of it gone."""
        if group is None:
            return
        _current, target_kind, metadata_kind = self.member_record_kinds
        if kind == self.group_record_kinds[1]:
            del self.groups[group.group_id]
        elif member_id is not None and kind == metadata_kind:
            group.members.pop(member_id, None)
        elif member_id is not None and kind == target_kind:
            group.target.pop(member_id, None)
