"""The classic group membership protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
timers that expire members and complete rebalances.

Owns: `Membership`, a pure state machine over `ClassicGroup`s. Every operation takes the
time as `now_ms` and returns effects (broker.coordinator.effects: `Reply` to a waiting
request, `Append` of records to __consumer_offsets, `Emit` of an event) that
broker.coordinator.runtime carries out in order. Waiters are opaque tokens the runtime
hands in; a JoinGroup or SyncGroup that must wait for the rest of the group is answered
later, by the operation that completes it.

The rules follow Kafka's classic group coordinator (GroupMetadataManager, ClassicGroup):
- a join starts or joins a rebalance; the rebalance completes when every known member has
  rejoined, or when the rebalance timeout (the largest of the members') passes, and members
  that did not rejoin are removed; a new group first waits group.initial.rebalance.delay.ms,
  extended while members keep arriving, up to the rebalance timeout;
- the generation goes up by one per completed rebalance; the protocol is chosen by vote;
  the first member to join leads and alone receives the members' metadata;
- the leader's SyncGroup carries the assignment for all; the others wait for it; members
  that have not synced within the rebalance timeout are removed and the group rebalances;
- a member whose heartbeats stop for session.timeout.ms is removed and the group rebalances;
  heartbeats answer REBALANCE_IN_PROGRESS while a rebalance is being prepared;
- static members (group.instance.id) that rejoin with a new member id take over their old
  place without a rebalance when the group is stable and their protocols are unchanged; the
  member id they replaced is fenced (FENCED_INSTANCE_ID).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from broker.coordinator.effects import Append, Emit, Reply
from broker.coordinator.group import ClassicGroup, Group, GroupState, Member
from broker.coordinator.timers import TimerService
from protocol.errors import ErrorCode

E = ErrorCode
S = GroupState
MAX_GROUP_ID_BYTES = 32767  # the group id must fit the int16-length key of its records
# the timers it keeps, keyed (kind, group id[, member id])
TIMER_KINDS = frozenset({"heartbeat", "pending", "join", "initial", "sync"})


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size


@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True  # JoinGroup v4+ (KIP-394)
    reason: str | None = None


def group_id_error(group_id: str | None) -> ErrorCode:
    if not group_id or len(group_id.encode("utf-8")) > MAX_GROUP_ID_BYTES:
        return E.INVALID_GROUP_ID
    return E.NONE


def join_error(error: ErrorCode, member_id: str = "") -> dict:
    return {"error_code": error, "generation_id": -1, "protocol_type": None,
            "protocol_name": None, "leader": "", "skip_assignment": False,
            "member_id": member_id, "members": []}


@dataclass
class Membership:
    config: GroupConfig = field(default_factory=GroupConfig)
    new_member_id: Callable[[str], str] = lambda prefix: f"{prefix}-{uuid.uuid4()}"
    # the coordinator's one map and one timer service, shared with the KIP-848 machine: it
    # sees only the ClassicGroups in the map and fires only its own TIMER_KINDS
    groups: dict[str, Group] = field(default_factory=dict)
    timers: TimerService[tuple] = field(default_factory=TimerService)
    # the group-metadata record for a group, built by the coordinator (it owns the formats)
    group_record: Callable[[ClassicGroup], list] = lambda group: []
    # partitions named in a member's protocol bytes, for events ("t-0", ...); the
    # coordinator decodes them when the protocol type is "consumer"
    owned_of: Callable[[str, list[tuple[str, bytes]]], list[str]] = lambda ptype, protocols: []
    assigned_of: Callable[[str, bytes], list[str]] = lambda ptype, assignment: []
    _initial_remaining: dict[str, int] = field(default_factory=dict)

    def group(self, group_id: str) -> ClassicGroup | None:
        """The classic group of that id; a consumer group of that id is none of its own."""
        group = self.groups.get(group_id)
        return group if isinstance(group, ClassicGroup) else None

    # -- JoinGroup ----------------------------------------------------------------------------

    def join(self, waiter: Any, req: JoinRequest, now_ms: int) -> list:
        out: list = []
        error = group_id_error(req.group_id)
        if error == E.NONE and not (self.config.min_session_timeout_ms <= req.session_timeout_ms
                                    <= self.config.max_session_timeout_ms):
            error = E.INVALID_SESSION_TIMEOUT
        if error != E.NONE:
            return [Reply(waiter, join_error(error, req.member_id))]
        group = self.group(req.group_id)
        if group is None:
            if req.member_id:
                return [Reply(waiter, join_error(E.UNKNOWN_MEMBER_ID, req.member_id))]
            group = self.groups[req.group_id] = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)
        if group.state == S.DEAD:
            return [Reply(waiter, join_error(E.COORDINATOR_NOT_AVAILABLE, req.member_id))]
        if not group.supports(req.protocol_type, [name for name, _ in req.protocols]):
            return [Reply(waiter, join_error(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))]
        if not req.member_id:
            self._join_unknown_member(waiter, group, req, now_ms, out)
        else:
            self._join_known_member(waiter, group, req, now_ms, out)
        return out

    def _join_unknown_member(self, waiter, group: ClassicGroup, req: JoinRequest, now_ms, out):
        instance = req.group_instance_id
        if instance is not None and instance in group.static_members:
            self._replace_static_member(waiter, group, req, now_ms, out)
            return
        if len(group.members) + len(group.pending_members) >= self.config.max_size:
            out.append(Reply(waiter, join_error(E.GROUP_MAX_SIZE_REACHED)))
            return
        member_id = self.new_member_id(instance if instance is not None else req.client_id)
        if req.require_known_member_id and instance is None:
            # KIP-394: hand out the id first, so a client that dies before rejoining
            # leaves only a pending id behind, not a member the group must wait for
            group.pending_members.add(member_id)
            self.timers.schedule(("pending", group.group_id, member_id),
                                 now_ms + req.session_timeout_ms)
            out.append(Reply(waiter, join_error(E.MEMBER_ID_REQUIRED, member_id)))
            return
        self._add_member_and_rebalance(waiter, group, req, member_id, now_ms, out)

    def _join_known_member(self, waiter, group: ClassicGroup, req: JoinRequest, now_ms, out):
        member_id = req.member_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.timers.cancel(("pending", group.group_id, member_id))
            self._add_member_and_rebalance(waiter, group, req, member_id, now_ms, out)
            return
        fenced = self._fenced(group, member_id, req.group_instance_id)
        if fenced != E.NONE:
            out.append(Reply(waiter, join_error(fenced, member_id)))
            return
        member = group.members[member_id]
        if member.awaiting_join is not None:  # a retried join: the newer request waits instead
            out.append(Reply(member.awaiting_join, join_error(E.REBALANCE_IN_PROGRESS, member_id)))
        changed = member.protocols != req.protocols
        if group.state == S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(waiter, group, member, req, now_ms, out)
        elif group.state == S.COMPLETING_REBALANCE and not changed:
            out.append(Reply(waiter, self._join_body(group, member)))  # lost its join response
        elif group.state == S.STABLE and not changed and member_id != group.leader_id:
            out.append(Reply(waiter, self._join_body(group, member)))  # nothing to change
        else:
            self._update_member_and_rebalance(waiter, group, member, req, now_ms, out)

    def _replace_static_member(self, waiter, group: ClassicGroup, req: JoinRequest, now_ms, out):
        instance = req.group_instance_id
        assert instance is not None  # only a static member is replaced
        old_id = group.static_members[instance]
        old = group.members[old_id]
        new_id = self.new_member_id(instance)
        for pending in (old.awaiting_join, old.awaiting_sync):
            if pending is not None:  # the instance it replaces is fenced
                out.append(Reply(pending, join_error(E.FENCED_INSTANCE_ID, old_id)))
        old.awaiting_join = old.awaiting_sync = None
        self.timers.cancel(("heartbeat", group.group_id, old_id))
        member = group.replace_static_member(instance, old_id, new_id)
        member.client_id, member.client_host = req.client_id, req.client_host
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.protocols = req.protocols
        out.append(Emit("group_join", self._join_event(group, member, req, "static rejoin")))
        # As Kafka: only a change of the group's chosen protocol forces a rebalance. The
        # subscription bytes differ on every restart (they carry the generation and owned
        # partitions), and a leader whose topics changed learns so from skip_assignment.
        if group.state == S.STABLE and group.protocol == group.select_protocol():
            # a restart within the session timeout: same place, same assignment, no rebalance
            self._heartbeat_reset(group, member, now_ms)
            out.append(Append(group.group_id, self.group_record(group)))
            body = self._join_body(group, member)
            body["skip_assignment"] = member.member_id == group.leader_id
            out.append(Reply(waiter, body))
            return
        member.awaiting_join = waiter
        self._heartbeat_reset(group, member, now_ms)
        self._maybe_prepare_rebalance(group, now_ms, f"static member {instance} rejoined", out)

    def _add_member_and_rebalance(self, waiter, group, req: JoinRequest, member_id, now_ms, out):
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                        req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type,
                        list(req.protocols), awaiting_join=waiter, last_heartbeat_ms=now_ms)
        group.add(member)
        group.new_member_added = True
        self._heartbeat_reset(group, member, now_ms)
        out.append(Emit("group_join", self._join_event(group, member, req, "new member")))
        self._maybe_prepare_rebalance(group, now_ms, f"member {member_id} joined", out)

    def _update_member_and_rebalance(self, waiter, group, member: Member, req, now_ms, out):
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.awaiting_join = waiter
        out.append(Emit("group_join", self._join_event(group, member, req, "rejoin")))
        self._maybe_prepare_rebalance(group, now_ms, req.reason or f"member {member.member_id} rejoined",
                                      out)

    # -- rebalance ----------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, now_ms, reason: str, out) -> None:
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self._prepare_rebalance(group, now_ms, reason, out)
        elif group.state == S.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms, out)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms, reason: str, out) -> None:
        if group.state == S.COMPLETING_REBALANCE:
            # members waiting for an assignment that will never come must rejoin
            for member in group.members.values():
                if member.awaiting_sync is not None:
                    out.append(Reply(member.awaiting_sync, sync_body(E.REBALANCE_IN_PROGRESS)))
                    member.awaiting_sync = None
            self.timers.cancel(("sync", group.group_id))
        was_empty = group.state == S.EMPTY
        self._transition(group, S.PREPARING_REBALANCE, now_ms, reason, out)
        if was_empty:
            timeout = group.rebalance_timeout_ms()
            delay = min(self.config.initial_rebalance_delay_ms, timeout)
            self._initial_remaining[group.group_id] = max(timeout - delay, 0)
            group.new_member_added = False
            self.timers.schedule(("initial", group.group_id), now_ms + delay)
        else:
            self.timers.schedule(("join", group.group_id), now_ms + group.rebalance_timeout_ms())
            self._try_complete_join(group, now_ms, out)

    def _try_complete_join(self, group: ClassicGroup, now_ms, out) -> None:
        waiting_initial = self.timers.deadline(("initial", group.group_id)) is not None
        if group.state == S.PREPARING_REBALANCE and not waiting_initial \
                and group.has_all_members_joined():
            self.timers.cancel(("join", group.group_id))
            self._complete_join(group, now_ms, out)

    def _complete_join(self, group: ClassicGroup, now_ms, out) -> None:
        for member in group.not_yet_rejoined():
            self._remove_member(group, member, now_ms, "did not rejoin in time", out,
                                update_group=False)
        for member_id in list(group.pending_members):
            self.timers.cancel(("pending", group.group_id, member_id))
        group.pending_members.clear()
        if group.state == S.DEAD:
            return
        previous = group.state
        group.init_next_generation(now_ms)
        out.append(self._state_event(group, previous, "rebalance complete"))
        if group.state == S.EMPTY:
            out.append(Append(group.group_id, self.group_record(group)))
            return
        for member in group.members.values():
            out.append(Reply(member.awaiting_join, self._join_body(group, member)))
            member.awaiting_join = None
            member.is_new = False
            self._heartbeat_reset(group, member, now_ms)
        self.timers.schedule(("sync", group.group_id), now_ms + group.rebalance_timeout_ms())

    # -- SyncGroup ----------------------------------------------------------------------------

    def sync(self, waiter, group_id: str, generation: int, member_id: str,
             group_instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
             assignments: dict[str, bytes], now_ms: int) -> list:
        group = self.group(group_id)
        error = group_id_error(group_id)
        if error == E.NONE and group is None:
            error = E.UNKNOWN_MEMBER_ID
        if error != E.NONE or group is None:
            return [Reply(waiter, sync_body(error))]
        error = self._fenced(group, member_id, group_instance_id)
        if error == E.NONE and group.state == S.DEAD:
            error = E.COORDINATOR_NOT_AVAILABLE
        if error == E.NONE and generation != group.generation:
            error = E.ILLEGAL_GENERATION
        if error == E.NONE and ((protocol_type and protocol_type != group.protocol_type) or
                                (protocol_name and protocol_name != group.protocol)):
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if error == E.NONE and group.state == S.EMPTY:
            error = E.UNKNOWN_MEMBER_ID
        if error == E.NONE and group.state == S.PREPARING_REBALANCE:
            error = E.REBALANCE_IN_PROGRESS
        if error != E.NONE:
            return [Reply(waiter, sync_body(error))]
        member = group.members[member_id]
        self._heartbeat_reset(group, member, now_ms)
        if group.state == S.STABLE:
            return [Reply(waiter, self._sync_reply(group, member))]
        out: list = []
        member.awaiting_sync = waiter
        group.synced.add(member_id)
        out.append(Emit("group_sync", {"group": group_id, "generation": group.generation,
                                       "member": member_id, "leader": member_id == group.leader_id}))
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self.timers.cancel(("sync", group_id))
            previous = group.state
            group.transition_to(S.STABLE, now_ms)
            out.append(Append(group_id, self.group_record(group)))
            out.append(self._state_event(group, previous, "assignment received"))
            for m in group.members.values():
                out.append(Emit("group_assignment", {
                    "group": group_id, "generation": group.generation,
                    "protocol": group.protocol or "", "member": m.member_id,
                    "client_id": m.client_id, "leader": m.member_id == group.leader_id,
                    "assigned": self.assigned_of(group.protocol_type or "", m.assignment)}))
            for m in group.members.values():
                if m.awaiting_sync is not None:
                    out.append(Reply(m.awaiting_sync, self._sync_reply(group, m)))
                    m.awaiting_sync = None
        return out

    def _sync_reply(self, group: ClassicGroup, member: Member) -> dict:
        body = sync_body(E.NONE)
        body.update(protocol_type=group.protocol_type, protocol_name=group.protocol,
                    assignment=member.assignment)
        return body

    # -- Heartbeat and LeaveGroup -------------------------------------------------------------

    def heartbeat(self, waiter, group_id: str, generation: int, member_id: str,
                  group_instance_id: str | None, now_ms: int) -> list:
        group = self.group(group_id)
        error = group_id_error(group_id)
        if error == E.NONE and group is None:
            error = E.UNKNOWN_MEMBER_ID
        if error != E.NONE or group is None:
            return [Reply(waiter, {"throttle_time_ms": 0, "error_code": error})]
        error = self._fenced(group, member_id, group_instance_id)
        if error == E.NONE and group.state == S.DEAD:
            error = E.COORDINATOR_NOT_AVAILABLE
        if error == E.NONE and group.state == S.EMPTY:
            error = E.UNKNOWN_MEMBER_ID
        if error == E.NONE and generation != group.generation:
            error = E.ILLEGAL_GENERATION
        if error == E.NONE:
            self._heartbeat_reset(group, group.members[member_id], now_ms)
            if group.state == S.PREPARING_REBALANCE:
                error = E.REBALANCE_IN_PROGRESS  # how running members learn to rejoin
        return [Reply(waiter, {"throttle_time_ms": 0, "error_code": error})]

    def leave(self, waiter, group_id: str, identities: list[tuple[str, str | None]],
              now_ms: int) -> list:
        out: list = []
        group = self.group(group_id)
        error = group_id_error(group_id)
        if error == E.NONE and group is None:
            error = E.UNKNOWN_MEMBER_ID
        if error == E.NONE and group is not None and group.state == S.DEAD:
            error = E.COORDINATOR_NOT_AVAILABLE
        results = []
        for member_id, instance in identities:
            result = error
            if result == E.NONE:
                assert group is not None  # no error so far: the group exists
                if not member_id and instance is not None:
                    member_id = group.static_members.get(instance, "")
                    result = E.NONE if member_id else E.UNKNOWN_MEMBER_ID
                else:
                    result = self._fenced(group, member_id, instance, allow_pending=True)
                if result == E.NONE and member_id in group.pending_members:
                    group.pending_members.discard(member_id)
                    self.timers.cancel(("pending", group_id, member_id))
                    self._try_complete_join(group, now_ms, out)
                elif result == E.NONE:
                    self._remove_member(group, group.members[member_id], now_ms,
                                        "left the group", out)
            results.append({"member_id": member_id, "group_instance_id": instance,
                            "error_code": result})
        out.append(Reply(waiter, {"throttle_time_ms": 0, "error_code": error,
                                  "members": results}))
        return out

    # -- timers -------------------------------------------------------------------------------

    def fire(self, key: tuple, now_ms: int) -> list:
        """One of its timers (its kind in TIMER_KINDS) is due: the effects."""
        out: list = []
        self._fire(key, now_ms, out)
        return out

    def _fire(self, key: tuple, now_ms: int, out: list) -> None:
        kind, group_id = key[0], key[1]
        group = self.group(group_id)
        if group is None or group.state == S.DEAD:
            return
        if kind == "heartbeat":
            member = group.members.get(key[2])
            if member is None:
                return
            if member.awaiting_join is not None or member.awaiting_sync is not None:
                # a member inside a rebalance is bounded by the rebalance timeouts
                self._heartbeat_reset(group, member, now_ms)
            else:
                self._remove_member(group, member, now_ms, "session timeout", out)
        elif kind == "pending":
            group.pending_members.discard(key[2])
            self._try_complete_join(group, now_ms, out)
        elif kind == "join" and group.state == S.PREPARING_REBALANCE:
            self._complete_join(group, now_ms, out)
        elif kind == "initial" and group.state == S.PREPARING_REBALANCE:
            remaining = self._initial_remaining.get(group_id, 0)
            if group.new_member_added and remaining > 0:
                delay = min(self.config.initial_rebalance_delay_ms, remaining)
                self._initial_remaining[group_id] = remaining - delay
                group.new_member_added = False
                self.timers.schedule(("initial", group_id), now_ms + delay)
            else:
                self._initial_remaining.pop(group_id, None)
                self._complete_join(group, now_ms, out)
        elif kind == "sync" and group.state == S.COMPLETING_REBALANCE:
            for member in [m for m in group.members.values()
                           if m.member_id not in group.synced]:
                self._remove_member(group, member, now_ms, "did not sync in time", out,
                                    update_group=False)
            self._prepare_rebalance(group, now_ms, "members did not sync in time", out)

    # -- helpers ------------------------------------------------------------------------------

    def _fenced(self, group: ClassicGroup, member_id: str, instance: str | None,
                allow_pending: bool = False) -> ErrorCode:
        if instance is not None and instance in group.static_members and \
                group.static_members[instance] != member_id:
            return E.FENCED_INSTANCE_ID
        if member_id in group.members or (allow_pending and member_id in group.pending_members):
            return E.NONE
        return E.UNKNOWN_MEMBER_ID

    def _remove_member(self, group: ClassicGroup, member: Member, now_ms, reason: str, out,
                       update_group: bool = True) -> None:
        self.timers.cancel(("heartbeat", group.group_id, member.member_id))
        if member.awaiting_join is not None:
            out.append(Reply(member.awaiting_join, join_error(E.UNKNOWN_MEMBER_ID, member.member_id)))
        if member.awaiting_sync is not None:
            out.append(Reply(member.awaiting_sync, sync_body(E.UNKNOWN_MEMBER_ID)))
        group.remove(member.member_id)
        out.append(Emit("group_leave", {"group": group.group_id, "generation": group.generation,
                                        "member": member.member_id,
                                        "group_instance_id": member.group_instance_id,
                                        "reason": reason}))
        if not update_group:
            return
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms, f"member {member.member_id} {reason}", out)
        elif group.state == S.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms, out)

    def _heartbeat_reset(self, group: ClassicGroup, member: Member, now_ms: int) -> None:
        member.last_heartbeat_ms = now_ms
        self.timers.schedule(("heartbeat", group.group_id, member.member_id),
                             now_ms + member.session_timeout_ms)

    def _transition(self, group: ClassicGroup, target: GroupState, now_ms, reason, out) -> None:
        previous = group.transition_to(target, now_ms)
        out.append(self._state_event(group, previous, reason))

    def _state_event(self, group: ClassicGroup, previous: GroupState, reason: str) -> Emit:
        return Emit("group_state", {"group": group.group_id, "generation": group.generation,
                                    "old_state": previous.value, "new_state": group.state.value,
                                    "protocol_type": group.protocol_type or "",
                                    "protocol": group.protocol or "",
                                    "members": len(group.members), "reason": reason})

    def _join_body(self, group: ClassicGroup, member: Member) -> dict:
        leader = member.member_id == group.leader_id
        return {"error_code": E.NONE, "generation_id": group.generation,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol,
                "leader": group.leader_id or "", "skip_assignment": False,
                "member_id": member.member_id,
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "metadata": m.metadata(group.protocol)}
                            for m in group.members.values()] if leader else []}

    def _join_event(self, group: ClassicGroup, member: Member, req: JoinRequest, kind: str) -> dict:
        return {"group": group.group_id, "generation": group.generation,
                "member": member.member_id, "group_instance_id": member.group_instance_id,
                "client_id": member.client_id, "client_host": member.client_host,
                "protocol_type": req.protocol_type, "protocols": [n for n, _ in req.protocols],
                "owned": self.owned_of(req.protocol_type, req.protocols),
                "session_timeout_ms": req.session_timeout_ms,
                "rebalance_timeout_ms": req.rebalance_timeout_ms, "kind": kind,
                "reason": req.reason or ""}


def sync_body(error: ErrorCode) -> dict:
    return {"throttle_time_ms": 0, "error_code": error, "protocol_type": None,
            "protocol_name": None, "assignment": b""}
