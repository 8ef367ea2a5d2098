"""The consumer's group member for the KIP-848 consumer protocol (`group_protocol=
"consumer"`), pure: no trio, no sockets. The counterpart of client/consumer/membership.py's
classic GroupMember, with the same interface to the trio driver (client/consumer/
coordinator.py): events in, ordered actions out (`CallListener`, `StartFetching`,
`StopFetching`, `CommitOffsets`, `CoordinatorUnknown`, `Fatal`, and
`SendConsumerGroupHeartbeat`).

There is no JoinGroup, SyncGroup or client-side assignor: the member heartbeats with its
subscription and the partitions it owns, and the coordinator answers with its epoch and,
when it changed, its assignment (Java's ConsumerMembershipManager):

- joining: a member id of its own (KIP-1082) and epoch 0, the subscription, the rebalance
  timeout (max_poll_interval_ms) and the server assignor (`group_remote_assignor`, None
  for the broker's default);
- reconciling an assignment, in order: revoked partitions (owned, no longer assigned) stop
  fetching, are committed (auto-commit) and handed to `on_partitions_revoked`; then the new
  ones go to `on_partitions_assigned` and start fetching; then a heartbeat goes at once, so
  the coordinator learns that the revoked partitions are free (it gives them to their new
  owners only then). Only the changes are revoked or assigned: partitions kept are never
  interrupted;
- FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the partitions are lost (`on_partitions_lost`)
  and the member rejoins with epoch 0 and the same member id;
- max_poll_interval_ms without a poll: the member leaves (epoch -1), its partitions lost,
  and rejoins at the next poll;
- close: revocation of everything owned, then a leave heartbeat (epoch -1, or -2 for a
  static member, which keeps its place for the session timeout).

The broker decides heartbeat_interval_ms and the session timeout; the member heartbeats at
the interval the last response gave.
"""

from __future__ import annotations

import base64
import enum
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from client.consumer.membership import (
    CallListener, CommitOffsets, CoordinatorUnknown, Fatal, MemberConfig, StartFetching,
    StopFetching, _as_dict, _from_dict, _sorted,
)
from client.errors import for_code
from client.types import TopicPartition
from protocol.errors import ErrorCode

E = ErrorCode
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

_COORDINATOR_GONE = {E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR,
                     E.COORDINATOR_LOAD_IN_PROGRESS}
_FENCED = {E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID}


class MemberState(enum.Enum):
    UNJOINED = "unjoined"  # not in the group: the next poll joins
    JOINING = "joining"    # epoch 0 heartbeats until the first answer
    STABLE = "stable"      # in the group; reconciling is done between two heartbeats
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(frozen=True)
class SendConsumerGroupHeartbeat:
    body: dict  # ConsumerGroupHeartbeatRequest fields, topics by name (the driver maps ids)


def new_member_id() -> str:
    """As Java's Uuid.randomUuid().toString(): 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass
class ConsumerGroupMember:
    config: MemberConfig
    server_assignor: str | None = None
    member_id: str = field(default_factory=new_member_id)
    epoch: int = JOIN_EPOCH
    owned: frozenset = frozenset()
    topics: tuple[str, ...] = field(init=False)
    _state: MemberState = field(default=MemberState.UNJOINED, init=False)
    _interval_ms: int = field(init=False)
    _next_heartbeat_at: int | None = None
    _in_flight: bool = False
    _poll_deadline: int | None = None
    _last_assignment_epoch: int = -1  # the epoch of the last assignment received
    _send_subscription: bool = True

    def __post_init__(self) -> None:
        self.topics = tuple(sorted(set(self.config.topics)))
        self._interval_ms = self.config.heartbeat_interval_ms

    # -- what the driver reads (as of GroupMember) ------------------------------------

    @property
    def state(self) -> MemberState:
        return self._state

    @property
    def generation(self) -> int:
        """The member epoch: what OffsetCommit v9 carries as generation_id_or_member_epoch."""
        return self.epoch if self._state == MemberState.STABLE else -1

    @property
    def assignment(self) -> tuple:
        return _sorted(self.owned)

    @property
    def is_leader(self) -> bool:
        return False  # no client-side assignment in this protocol

    @property
    def out_of_generation(self) -> bool:
        return self._state == MemberState.UNJOINED and self._last_assignment_epoch >= 0

    @property
    def is_static(self) -> bool:
        return self.config.group_instance_id is not None

    def next_deadline(self) -> int | None:
        times = [t for t in (self._poll_deadline,
                             None if self._in_flight else self._next_heartbeat_at)
                 if t is not None]
        if self._state not in (MemberState.JOINING, MemberState.STABLE):
            return None
        return min(times) if times else None

    # -- application events -------------------------------------------------------------

    def poll(self, now_ms: int) -> list:
        if self._state in (MemberState.FAILED, MemberState.CLOSED):
            return []
        self._poll_deadline = now_ms + self.config.max_poll_interval_ms
        if self._state == MemberState.UNJOINED and self.topics:
            self._state = MemberState.JOINING
            self.epoch = JOIN_EPOCH
            self._send_subscription = True
            self._next_heartbeat_at = now_ms
        return []

    def subscribe(self, topics: Iterable[str], now_ms: int) -> list:
        new = tuple(sorted(set(topics)))
        if new != self.topics:
            self.topics = new
            self._send_subscription = True
            if self._state in (MemberState.JOINING, MemberState.STABLE):
                self._next_heartbeat_at = now_ms  # tell the coordinator now
        return []

    def request_rejoin(self, reason: str, now_ms: int) -> list:
        return []  # the coordinator watches the topics' metadata itself

    def close(self, now_ms: int) -> list:
        if self._state in (MemberState.FAILED, MemberState.CLOSED):
            self._state = MemberState.CLOSED
            return []
        out: list = []
        if self.owned:
            if self.config.enable_auto_commit and self._state == MemberState.STABLE:
                out.append(CommitOffsets(self.assignment))
            out += self._give_up("revoked" if self._state == MemberState.STABLE else "lost")
        if self._state in (MemberState.JOINING, MemberState.STABLE):
            out.append(self._heartbeat(STATIC_LEAVE_EPOCH if self.is_static else LEAVE_EPOCH,
                                       leaving=True))
        self._state = MemberState.CLOSED
        return out

    # -- the heartbeat ------------------------------------------------------------------

    def tick(self, now_ms: int) -> list:
        if self._state not in (MemberState.JOINING, MemberState.STABLE):
            return []
        if self._poll_deadline is not None and now_ms >= self._poll_deadline:
            return self._poll_timeout_expired(now_ms)
        if not self._in_flight and self._next_heartbeat_at is not None \
                and now_ms >= self._next_heartbeat_at:
            self._in_flight = True
            self._next_heartbeat_at = None
            return [self._heartbeat(self.epoch)]
        return []

    def _heartbeat(self, epoch: int, leaving: bool = False) -> SendConsumerGroupHeartbeat:
        joining = epoch == JOIN_EPOCH
        body: dict[str, Any] = {
            "group_id": self.config.group_id, "member_id": self.member_id,
            "member_epoch": epoch, "instance_id": self.config.group_instance_id,
            "rack_id": self.config.client_rack, "rebalance_timeout_ms": -1,
            "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None}
        if not leaving:
            if joining:
                body["rebalance_timeout_ms"] = self.config.max_poll_interval_ms
                body["server_assignor"] = self.server_assignor
            if joining or self._send_subscription:
                body["subscribed_topic_names"] = list(self.topics)
                self._send_subscription = False
            # what it owns, every time: the coordinator learns of a revocation from it
            body["topic_partitions"] = {} if joining else _as_dict(self.owned)
        return SendConsumerGroupHeartbeat(body)

    def on_heartbeat_response(self, body: Mapping, now_ms: int) -> list:
        self._in_flight = False
        if self._state not in (MemberState.JOINING, MemberState.STABLE):
            return []
        error = E.of(int(body["error_code"]))
        if error == E.NONE:
            if body.get("heartbeat_interval_ms"):
                self._interval_ms = int(body["heartbeat_interval_ms"])
            self.epoch = int(body["member_epoch"])
            if body.get("member_id"):
                self.member_id = body["member_id"]  # v0 brokers choose it
            self._state = MemberState.STABLE
            self._next_heartbeat_at = now_ms + self._interval_ms
            assignment = body.get("assignment")
            if assignment is None:
                return []
            self._last_assignment_epoch = self.epoch
            return self._reconcile(_from_dict(assignment), now_ms)
        if error in _FENCED:
            out = self._give_up("lost") if self.owned else []
            self.epoch = JOIN_EPOCH
            self._state = MemberState.JOINING
            self._send_subscription = True
            self._next_heartbeat_at = now_ms
            return out
        if error in _COORDINATOR_GONE:
            self._next_heartbeat_at = now_ms + self.config.retry_backoff_ms
            return [CoordinatorUnknown(f"ConsumerGroupHeartbeat: {error.name}")]
        self._state = MemberState.FAILED
        message = body.get("error_message") or "ConsumerGroupHeartbeat failed"
        return [Fatal(for_code(error, message))]

    def on_request_failed(self, api: str, now_ms: int) -> list:
        self._in_flight = False
        if self._state in (MemberState.JOINING, MemberState.STABLE):
            self._next_heartbeat_at = now_ms + self.config.retry_backoff_ms
        return []

    # -- reconciling ---------------------------------------------------------------------

    def _reconcile(self, target: set[TopicPartition], now_ms: int) -> list:
        out: list = []
        revoked = self.owned - target
        added = target - self.owned
        if revoked:
            if self.config.enable_auto_commit:
                out.append(CommitOffsets(_sorted(revoked)))
            out.append(StopFetching(_sorted(revoked)))
            out.append(CallListener("revoked", _sorted(revoked)))
            self.owned = self.owned - revoked
        if added or not self.owned:
            out.append(CallListener("assigned", _sorted(added)))
            out.append(StartFetching(_sorted(added)))
            self.owned = self.owned | added
        # acknowledge at once: the coordinator hands revoked partitions on only then
        self._next_heartbeat_at = now_ms
        return out

    def _give_up(self, kind: str) -> list:
        gone = _sorted(self.owned)
        self.owned = frozenset()
        return [StopFetching(gone), CallListener(kind, gone)]

    def _poll_timeout_expired(self, now_ms: int) -> list:
        out = self._give_up("lost") if self.owned else []
        out.append(self._heartbeat(LEAVE_EPOCH, leaving=True))
        self._state = MemberState.UNJOINED
        self.epoch = JOIN_EPOCH
        self._poll_deadline = None
        return out


def topic_partitions_by_id(partitions: Mapping[str, list[int]],
                           topic_id: Callable[[str], uuid.UUID | None]) -> list[dict]:
    """The wire's form of owned partitions (topics by id; a topic with no id known is
    left out: the coordinator then takes it as not owned)."""
    out = []
    for topic, parts in sorted(partitions.items()):
        tid = topic_id(topic)
        if tid is not None:
            out.append({"topic_id": tid, "partitions": parts})
    return out
