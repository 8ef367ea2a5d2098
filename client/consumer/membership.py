"""The consumer's group member state machine (classic protocol), pure: no trio, no sockets.

Owns: `GroupMember`, the client side of JoinGroup / SyncGroup / Heartbeat / LeaveGroup, and
the rebalance listener calls, made exactly where Java's ConsumerCoordinator makes them
(docs/ARCHITECTURE.md §4-§5: time comes in as ``now_ms``, effects go out as data). The trio
driver (client/consumer/coordinator.py) sends the requests, feeds the responses back as
the wire body dicts, runs the listener, drives the fetcher, and calls ``tick(now_ms)`` at
``next_deadline()``. Every event method returns a list of actions that the driver must carry
out **in order, awaiting each** (a listener call finishes before the next request goes out).

States (``MemberState``)::

    UNJOINED --poll--> JOINING --JoinGroup ok--> SYNCING --SyncGroup ok--> STABLE
                       ^  |  MEMBER_ID_REQUIRED: resend with the given id         |
                       |  +--retriable error: resend after retry_backoff_ms       |
                       +-- REBALANCE_IN_PROGRESS (heartbeat / sync), subscription  +
                           change, cooperative follow-up after a revocation
    STABLE --max.poll.interval expired--> UNJOINED (partitions lost at once, LeaveGroup if
                                           dynamic; rejoins on poll)
    JOINING, SYNCING, STABLE --fatal error (FENCED_INSTANCE_ID, ...)--> FAILED
    any --close()--> CLOSED

``VALID_PREVIOUS_STATES`` declares these edges as data; ``transition_to`` is the only way
``state`` changes and raises IllegalStateTransition on any other.

REVOKING is not a state of its own: a revocation is a ``StopFetching`` then a
``CallListener("revoked", ...)`` action, and the driver finishes both before it sends the
JoinGroup that follows them in the same list (Java runs both inside poll()).

Listener rules (Java ConsumerCoordinator.onJoinPrepare / onJoinComplete / onLeavePrepare):

- before each (re)join, once per rebalance: if the generation or member id was reset (the
  member fell out of the group), ``lost(owned)`` when it owns anything; else EAGER:
  ``revoked(all owned)`` (even when empty, as Java does), COOPERATIVE: ``revoked`` of the
  owned partitions whose topic is no longer subscribed, only if non-empty;
- after SyncGroup: EAGER ``assigned(all assigned)``; COOPERATIVE ``revoked(owned -
  assigned)`` if non-empty, then ``assigned(assigned - owned)`` always (even when empty),
  then, if anything was revoked, an immediate rejoin (the follow-up rebalance, KIP-429);
- on close: ``revoked(owned)`` (``lost`` if out of the group or mid-rebalance) if non-empty.

Resets follow Java 3.x AbstractCoordinator: UNKNOWN_MEMBER_ID resets member id and
generation; ILLEGAL_GENERATION resets only the generation (the member id stays valid);
a session that sees no successful heartbeat for session_timeout_ms is treated as lost and
resets both (librdkafka's rule; the broker has expired the member by then).

The JoinGroup carries one protocol per configured assignor in preference order, each a
ConsumerProtocolSubscription v3 of (sorted topics, assignor user data, owned partitions,
current generation, rack) as Java's ``metadata()`` builds it: under EAGER the owned list is
empty because the member has revoked everything by then.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from client.consumer.assignors import (
    COOPERATIVE, DEFAULT_GENERATION, EAGER, Assignor, TopicPartition, member_from_subscription,
    rebalance_protocol, resolve_assignors,
)
from client.consumer.assignors.base import tp_sort_key
from client.errors import KafkaError, for_code
from protocol.consumer_protocol import (
    Assignment, Subscription, decode_assignment, decode_subscription, encode_assignment,
    encode_subscription,
)
from protocol.errors import ErrorCode

E = ErrorCode
PROTOCOL_TYPE = "consumer"
NO_MEMBER_ID = ""


class MemberState(enum.Enum):
    UNJOINED = "unjoined"  # not in a group; the next poll() (re)joins
    JOINING = "joining"    # JoinGroup in flight, or waiting retry_backoff_ms to resend it
    SYNCING = "syncing"    # SyncGroup in flight (leader with assignments, follower empty)
    STABLE = "stable"      # assignment received; heartbeating
    FAILED = "failed"      # a fatal error was reported; every later event is ignored
    CLOSED = "closed"


_IN_GROUP = frozenset({MemberState.UNJOINED, MemberState.JOINING, MemberState.SYNCING,
                       MemberState.STABLE})

# The states each state may be entered from (the diagram in the module docstring), as the
# broker's group declares its own (broker/coordinator/group.py): every change of `state`
# goes through GroupMember.transition_to, which refuses any other.
VALID_PREVIOUS_STATES: dict[MemberState, frozenset[MemberState]] = {
    # the member left on a max.poll.interval expiry
    MemberState.UNJOINED: frozenset({MemberState.STABLE}),
    # a (re)join from anywhere in the group; JOINING -> JOINING resends the JoinGroup
    MemberState.JOINING: _IN_GROUP,
    MemberState.SYNCING: frozenset({MemberState.JOINING}),
    MemberState.STABLE: frozenset({MemberState.SYNCING}),
    # a fatal error answers a request, which only a member joining or in the group sends
    MemberState.FAILED: frozenset({MemberState.JOINING, MemberState.SYNCING,
                                   MemberState.STABLE}),
    MemberState.CLOSED: frozenset(MemberState),
}


class IllegalStateTransition(RuntimeError):
    """A change of MemberState that VALID_PREVIOUS_STATES forbids: always a bug here."""


# -- actions (outputs) ---------------------------------------------------------------------

Partitions = tuple  # tuple[TopicPartition, ...], sorted as Java's TopicPartition comparator


@dataclass(frozen=True)
class SendJoinGroup:
    body: dict  # JoinGroupRequest fields


@dataclass(frozen=True)
class SendSyncGroup:
    body: dict  # SyncGroupRequest fields


@dataclass(frozen=True)
class SendHeartbeat:
    body: dict  # HeartbeatRequest fields


@dataclass(frozen=True)
class SendLeaveGroup:
    body: dict  # LeaveGroupRequest fields (v0-2 member_id and v3+ members both filled)


@dataclass(frozen=True)
class CallListener:
    kind: str  # "revoked" | "assigned" | "lost"
    partitions: Partitions


@dataclass(frozen=True)
class StartFetching:
    """Fetch these newly owned partitions (after the 'assigned' listener may have seeked)."""
    partitions: Partitions


@dataclass(frozen=True)
class StopFetching:
    """Stop fetching these and drop their buffered records. Positions stay readable until
    the listener call that follows has returned (it may commit them)."""
    partitions: Partitions


@dataclass(frozen=True)
class CommitOffsets:
    """enable_auto_commit only: commit consumed positions synchronously, before a revocation
    (Java onJoinPrepare / close)."""
    partitions: Partitions


@dataclass(frozen=True)
class CoordinatorUnknown:
    """Rediscover the coordinator (FindCoordinator); requests wait for it."""
    reason: str


@dataclass(frozen=True)
class Fatal:
    """Raise this to the application (from poll); the member is FAILED."""
    error: KafkaError


@dataclass
class MemberConfig:
    group_id: str
    topics: Iterable[str] = ()
    assignors: Iterable = ("range", "cooperative-sticky")  # Java 3.x default
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    rebalance_timeout_ms: int | None = None  # None: max_poll_interval_ms, as Java
    retry_backoff_ms: int = 100
    group_instance_id: str | None = None
    client_rack: str | None = None
    enable_auto_commit: bool = False


def _sorted(tps: Iterable[TopicPartition]) -> Partitions:
    return tuple(sorted(set(tps), key=tp_sort_key))


def _as_dict(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in _sorted(tps):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def _from_dict(parts: Mapping[str, Iterable[int]]) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t, ps in parts.items() for p in ps}


_RETRY_JOIN = {E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR}
_COORDINATOR_GONE = {E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR}


@dataclass
class GroupMember:
    """One consumer's membership. Events in, ordered actions out (module docstring).

    ``partition_counts(topics) -> {topic: partitions}`` is the driver's metadata cache, used
    only when this member leads; ``on_join_response`` also takes the counts directly.
    """

    config: MemberConfig
    partition_counts: Callable[[list[str]], Mapping[str, int]] = lambda topics: {}
    member_id: str = NO_MEMBER_ID
    generation: int = DEFAULT_GENERATION
    protocol_name: str | None = None
    leader_id: str | None = None
    owned: frozenset = frozenset()
    error: KafkaError | None = None
    assignors: list[Assignor] = field(init=False)
    rebalance_protocol: str = field(init=False)
    topics: tuple[str, ...] = field(init=False)
    _state: MemberState = field(default=MemberState.UNJOINED, init=False)
    # timers and bookkeeping
    _needs_join_prepare: bool = True
    _wait_for_poll: bool = True  # UNJOINED: the next poll() joins
    _retry_at: int | None = None  # JOINING without a request in flight: resend at
    _next_heartbeat_at: int | None = None
    _heartbeat_in_flight: tuple | None = None  # (generation, member_id) it was sent with
    _session_deadline: int | None = None
    _poll_deadline: int | None = None
    _last_received: tuple = ((), DEFAULT_GENERATION)  # for assignor user data
    _pending_rejoin: str | None = None  # a rejoin asked for while one was in flight

    def __post_init__(self) -> None:
        self.assignors = resolve_assignors(list(self.config.assignors))
        self.rebalance_protocol = rebalance_protocol(self.assignors)
        self.topics = tuple(sorted(set(self.config.topics)))

    # -- queries ----------------------------------------------------------------------------

    @property
    def state(self) -> MemberState:
        return self._state

    def transition_to(self, target: MemberState) -> None:
        """The only way `state` changes; IllegalStateTransition if the table forbids it."""
        if self._state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(
                f"group {self.config.group_id}: member cannot go from "
                f"{self._state.name} to {target.name}")
        self._state = target

    @property
    def assignment(self) -> Partitions:
        return _sorted(self.owned)

    @property
    def is_leader(self) -> bool:
        return self.leader_id is not None and self.leader_id == self.member_id

    @property
    def out_of_generation(self) -> bool:
        """The member had an assignment and has since dropped out of the group's
        generation (poll timeout, lost session, fenced): a commit now would be for
        partitions that may be someone else's (Java's CommitFailedException)."""
        return (self.generation < 0 and self._last_received[1] >= 0
                and self.state is not MemberState.CLOSED)

    @property
    def is_static(self) -> bool:
        return self.config.group_instance_id is not None

    def next_deadline(self) -> int | None:
        """When tick() has something to do; None: nothing until the next event."""
        if self.state == MemberState.JOINING:
            return self._retry_at
        if self.state != MemberState.STABLE:
            return None
        times = [self._session_deadline, self._poll_deadline]
        if self._heartbeat_in_flight is None:
            times.append(self._next_heartbeat_at)
        return min(t for t in times if t is not None)

    # -- application events -----------------------------------------------------------------

    def poll(self, now_ms: int) -> list:
        """The application polled: restarts max.poll.interval; joins when not in a group."""
        if self.state in (MemberState.FAILED, MemberState.CLOSED):
            return []
        self._poll_deadline = now_ms + self.config.max_poll_interval_ms
        if self.state == MemberState.UNJOINED and self._wait_for_poll and self.topics:
            return self._rejoin(now_ms, "joining the group")
        return []

    def subscribe(self, topics: Iterable[str], now_ms: int) -> list:
        """A new subscription: rejoins at once when in a group (cooperative first revokes
        the partitions of topics no longer subscribed)."""
        new = tuple(sorted(set(topics)))
        if new == self.topics or self.state in (MemberState.FAILED, MemberState.CLOSED):
            self.topics = new
            return []
        self.topics = new
        return self.request_rejoin("subscription changed", now_ms)

    def request_rejoin(self, reason: str, now_ms: int) -> list:
        """E.g. metadata shows a subscribed topic's partition count changed (leader).

        In STABLE the rejoin starts now; during JOINING / SYNCING it starts as soon as the
        rebalance in flight completes (one JoinGroup in flight at a time); UNJOINED waits
        for poll() anyway."""
        if self.state == MemberState.STABLE:
            return self._rejoin(now_ms, reason)
        if self.state in (MemberState.JOINING, MemberState.SYNCING):
            self._pending_rejoin = reason
        return []

    def close(self, now_ms: int) -> list:
        """Java onLeavePrepare + maybeLeaveGroup: a static member sends no LeaveGroup."""
        if self.state in (MemberState.CLOSED, MemberState.FAILED):
            self.transition_to(MemberState.CLOSED)
            return []
        out: list = []
        if self.owned:
            reset = self.generation < 0 or not self.member_id
            if reset or self.state in (MemberState.JOINING, MemberState.SYNCING):
                self._give_up(out, "lost")
            else:
                if self.config.enable_auto_commit:
                    out.append(CommitOffsets(self.assignment))
                self._give_up(out, "revoked")
        if not self.is_static and self.state != MemberState.UNJOINED and self.member_id:
            out.append(self._leave_group("the consumer is being closed"))
        self._reset(reset_member_id=True)
        self.transition_to(MemberState.CLOSED)
        return out

    # -- responses ---------------------------------------------------------------------------

    def on_join_response(self, body: Mapping, now_ms: int,
                         partitions_per_topic: Mapping[str, int] | None = None) -> list:
        if self.state != MemberState.JOINING or self._retry_at is not None:
            return []  # stale: we left, or already decided to resend
        error = E.of(int(body["error_code"]))
        if error == E.NONE:
            if body.get("protocol_type") not in (None, PROTOCOL_TYPE):
                return self._fatal(E.INCONSISTENT_GROUP_PROTOCOL,
                                   f"protocol type {body.get('protocol_type')!r}")
            self.generation = int(body["generation_id"])
            self.member_id = body["member_id"]
            self.protocol_name = body.get("protocol_name")
            self.leader_id = body.get("leader")
            self.transition_to(MemberState.SYNCING)
            assignments: list[dict] = []
            if self.is_leader and not body.get("skip_assignment"):
                try:
                    assignments = self._assign(body, partitions_per_topic)
                except KafkaError as e:
                    return self._fatal(e.code, e.message)
            return [SendSyncGroup({
                "group_id": self.config.group_id, "generation_id": self.generation,
                "member_id": self.member_id, "group_instance_id": self.config.group_instance_id,
                "protocol_type": PROTOCOL_TYPE, "protocol_name": self.protocol_name,
                "assignments": assignments})]
        if error == E.MEMBER_ID_REQUIRED:  # KIP-394: resend with the id we were given
            self.member_id = body["member_id"]
            self.generation = DEFAULT_GENERATION
            return self._send_join("need to re-join with the given member-id")
        if error in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            self._reset(reset_member_id=error == E.UNKNOWN_MEMBER_ID)
            return self._rejoin(now_ms, f"JoinGroup: {error.name}")
        if error == E.REBALANCE_IN_PROGRESS:
            return self._send_join("JoinGroup: REBALANCE_IN_PROGRESS")
        if error in _RETRY_JOIN:
            return self._retry_later(now_ms, error, "JoinGroup")
        return self._fatal(error, "JoinGroup failed")

    def on_sync_response(self, body: Mapping, now_ms: int) -> list:
        if self.state != MemberState.SYNCING:
            return []
        error = E.of(int(body["error_code"]))
        if error == E.NONE:
            if body.get("protocol_type") not in (None, PROTOCOL_TYPE) or body.get(
                    "protocol_name") not in (None, self.protocol_name):
                return self._fatal(E.INCONSISTENT_GROUP_PROTOCOL, "SyncGroup protocol differs")
            assigned = _from_dict(decode_assignment(body.get("assignment") or b"").partitions)
            return self._complete(assigned, now_ms)
        if error == E.REBALANCE_IN_PROGRESS:
            return self._rejoin(now_ms, "SyncGroup: REBALANCE_IN_PROGRESS")
        if error in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            self._reset(reset_member_id=error == E.UNKNOWN_MEMBER_ID)
            return self._rejoin(now_ms, f"SyncGroup: {error.name}")
        if error in _COORDINATOR_GONE:
            self.transition_to(MemberState.JOINING)
            return self._retry_later(now_ms, error, "SyncGroup")
        return self._fatal(error, "SyncGroup failed")

    def on_heartbeat_response(self, body: Mapping, now_ms: int) -> list:
        sent, self._heartbeat_in_flight = self._heartbeat_in_flight, None
        if sent is None or self.state in (MemberState.FAILED, MemberState.CLOSED):
            return []
        error = E.of(int(body["error_code"]))
        if error == E.NONE:
            self._session_deadline = now_ms + self.config.session_timeout_ms
            return []
        if self.state != MemberState.STABLE:
            return []  # Java: ignored outside STABLE (a rejoin is already under way)
        if error == E.REBALANCE_IN_PROGRESS:
            return self._rejoin(now_ms, "group is already rebalancing")
        if error in (E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            if sent != (self.generation, self.member_id):
                return []  # stale generation: ignore, as Java does
            if error == E.FENCED_INSTANCE_ID:
                return self._fatal(error, f"group.instance.id {self.config.group_instance_id} "
                                          f"was fenced by another instance")
            self._reset(reset_member_id=error != E.ILLEGAL_GENERATION)
            return self._rejoin(now_ms, f"Heartbeat: {error.name}")
        if error in _COORDINATOR_GONE:
            self._next_heartbeat_at = now_ms + self.config.retry_backoff_ms
            return [CoordinatorUnknown(f"Heartbeat: {error.name}")]
        return self._fatal(error, "Heartbeat failed")

    def on_request_failed(self, api: str, now_ms: int) -> list:
        """The request never got a response (connection lost, timeout): "join", "sync",
        "heartbeat" or "leave"."""
        if api == "heartbeat":
            self._heartbeat_in_flight = None
            if self.state == MemberState.STABLE:
                self._next_heartbeat_at = now_ms + self.config.retry_backoff_ms
            return []
        if (api, self.state) in (("join", MemberState.JOINING), ("sync", MemberState.SYNCING)):
            self.transition_to(MemberState.JOINING)
            return self._retry_later(now_ms, E.NETWORK_EXCEPTION, api)
        return []

    # -- timers ------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list:
        if self.state == MemberState.JOINING and self._retry_at is not None \
                and now_ms >= self._retry_at:
            self._retry_at = None
            return self._rejoin(now_ms, "retrying the join")
        if self.state != MemberState.STABLE:
            return []
        # _complete sets all three on the way to STABLE
        assert self._poll_deadline is not None and self._session_deadline is not None
        assert self._next_heartbeat_at is not None
        if now_ms >= self._poll_deadline:
            return self._poll_timeout_expired()
        if now_ms >= self._session_deadline:  # onJoinPrepare reports the partitions lost
            self._reset(reset_member_id=True)
            return self._rejoin(now_ms, "session timed out without a heartbeat response")
        if self._heartbeat_in_flight is None and now_ms >= self._next_heartbeat_at:
            self._heartbeat_in_flight = (self.generation, self.member_id)
            self._next_heartbeat_at = now_ms + self.config.heartbeat_interval_ms
            return [SendHeartbeat({
                "group_id": self.config.group_id, "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": self.config.group_instance_id})]
        return []

    # -- internals ---------------------------------------------------------------------------

    def _poll_timeout_expired(self) -> list:
        """Java handlePollTimeoutExpiry: leave (dynamic members only), reset, rejoin on the
        next poll. The partitions are given up at once (StopFetching + lost), as the KIP-848
        consumer does, so that assignment() stops listing what the group reassigns now."""
        out: list = []
        if self.owned:
            self._give_up(out, "lost")
        if not self.is_static and self.member_id:
            out.append(self._leave_group("consumer poll timeout has expired."))
        self._reset(reset_member_id=True)
        self.transition_to(MemberState.UNJOINED)
        self._wait_for_poll = True
        return out

    def _leave_group(self, reason: str) -> SendLeaveGroup:
        return SendLeaveGroup({
            "group_id": self.config.group_id, "member_id": self.member_id,
            "members": [{"member_id": self.member_id, "group_instance_id": None,
                         "reason": reason}]})

    def _reset(self, reset_member_id: bool) -> None:
        """Java resetStateAndRejoin: generation gone, onJoinPrepare runs again."""
        self.generation = DEFAULT_GENERATION
        self.protocol_name = None
        self.leader_id = None
        if reset_member_id:
            self.member_id = NO_MEMBER_ID
        self._needs_join_prepare = True
        self._heartbeat_in_flight = None

    def _give_up(self, out: list, kind: str, partitions: Iterable | None = None) -> None:
        parts = _sorted(self.owned if partitions is None else partitions)
        if parts:
            out.append(StopFetching(parts))
        out.append(CallListener(kind, parts))
        self.owned = self.owned - set(parts)

    def _join_prepare(self, out: list) -> None:
        """Java ConsumerCoordinator.onJoinPrepare."""
        if self.generation < 0 or not self.member_id:
            if self.owned:
                self._give_up(out, "lost")
            return
        if self.config.enable_auto_commit and self.owned:
            out.append(CommitOffsets(self.assignment))
        if self.rebalance_protocol == EAGER:
            self._give_up(out, "revoked")  # all of them, even none
        else:
            gone = [tp for tp in self.owned if tp.topic not in self.topics]
            if gone:
                self._give_up(out, "revoked", gone)

    def _rejoin(self, now_ms: int, reason: str) -> list:
        out: list = []
        self._retry_at = None
        self._wait_for_poll = False
        if self._needs_join_prepare:
            self._needs_join_prepare = False
            self._join_prepare(out)
        out += self._send_join(reason)
        return out

    def _send_join(self, reason: str) -> list:
        self.transition_to(MemberState.JOINING)
        self._retry_at = None
        self._heartbeat_in_flight = None
        self._pending_rejoin = None  # this JoinGroup carries the current subscription
        return [SendJoinGroup({
            "group_id": self.config.group_id,
            "session_timeout_ms": self.config.session_timeout_ms,
            "rebalance_timeout_ms": (self.config.rebalance_timeout_ms
                                     if self.config.rebalance_timeout_ms is not None
                                     else self.config.max_poll_interval_ms),
            "member_id": self.member_id,
            "group_instance_id": self.config.group_instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocols": [{"name": a.name, "metadata": self._metadata(a)}
                          for a in self.assignors],
            "reason": reason})]

    def _metadata(self, assignor: Assignor) -> bytes:
        last, last_generation = self._last_received
        owned = list(self.assignment)
        user_data = assignor.subscription_user_data(
            list(self.topics), owned if self.rebalance_protocol == COOPERATIVE else list(last),
            self.generation if self.rebalance_protocol == COOPERATIVE else last_generation)
        return encode_subscription(Subscription(
            topics=list(self.topics), user_data=user_data, owned_partitions=_as_dict(owned),
            generation_id=self.generation, rack_id=self.config.client_rack, version=3))

    def _assign(self, body: Mapping, counts: Mapping[str, int] | None) -> list[dict]:
        assignor = next((a for a in self.assignors if a.name == self.protocol_name), None)
        if assignor is None:
            raise for_code(E.INCONSISTENT_GROUP_PROTOCOL,
                           f"the group chose {self.protocol_name!r}, not configured here")
        members = {}
        for m in body.get("members") or []:
            members[m["member_id"]] = member_from_subscription(
                m["member_id"], decode_subscription(m["metadata"]), m.get("group_instance_id"))
        topics = sorted({t for m in members.values() for t in m.topics})
        if counts is None:
            counts = self.partition_counts(topics)
        result = assignor.assign(members, {t: counts[t] for t in topics if t in counts})
        return [{"member_id": member_id,
                 "assignment": encode_assignment(Assignment(_as_dict(result.get(member_id, []))))}
                for member_id in members]

    def _complete(self, assigned: set, now_ms: int) -> list:
        """Java onJoinComplete, then the heartbeat thread's resetTimeouts."""
        out: list = []
        self.transition_to(MemberState.STABLE)
        self._needs_join_prepare = True
        self._last_received = (_sorted(assigned), self.generation)
        self._session_deadline = now_ms + self.config.session_timeout_ms
        self._poll_deadline = now_ms + self.config.max_poll_interval_ms
        self._next_heartbeat_at = now_ms + self.config.heartbeat_interval_ms
        self._heartbeat_in_flight = None
        revoked = self.owned - assigned
        added = _sorted(assigned - self.owned)
        if self.rebalance_protocol == COOPERATIVE and revoked:
            self._give_up(out, "revoked", revoked)
        self.owned = frozenset(assigned)
        out.append(CallListener("assigned", added))
        if added:
            out.append(StartFetching(added))
        if self.rebalance_protocol == COOPERATIVE and revoked:
            out += self._rejoin(now_ms, "need to revoke partitions and re-join")
        elif self._pending_rejoin is not None:
            out += self._rejoin(now_ms, self._pending_rejoin)
        return out

    def _retry_later(self, now_ms: int, error: ErrorCode, api: str) -> list:
        self.transition_to(MemberState.JOINING)
        self._retry_at = now_ms + self.config.retry_backoff_ms
        if error in _COORDINATOR_GONE:
            return [CoordinatorUnknown(f"{api}: {error.name}")]
        return []

    def _fatal(self, code: ErrorCode, message: str | None) -> list:
        self.error = for_code(code, message)
        self.transition_to(MemberState.FAILED)
        self._heartbeat_in_flight = None
        return [Fatal(self.error)]


__all__ = [
    "CallListener", "CommitOffsets", "CoordinatorUnknown", "Fatal", "GroupMember",
    "IllegalStateTransition", "MemberConfig", "MemberState", "VALID_PREVIOUS_STATES", "SendHeartbeat", "SendJoinGroup", "SendLeaveGroup",
    "SendSyncGroup", "StartFetching", "StopFetching",
]
