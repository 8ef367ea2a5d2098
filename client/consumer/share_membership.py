"""A share group member (KIP-932), pure: no trio, no sockets, time passed in.

Owns: `ShareGroupMember`, the member side of ShareGroupHeartbeat, which has the shape of
the consumer protocol's heartbeat (consumer_membership.py) without its reconciling: a
share member owns nothing exclusively, so an assignment is taken as it comes and nothing
is revoked or committed first.

- joining: a member id of its own (KIP-1082, ShareGroupHeartbeat v1) and epoch 0, with
  the subscribed topic names;
- heartbeats every heartbeat_interval_ms the last response gave (the broker's
  group.share.heartbeat.interval.ms), the subscription only when it changed;
- FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the assignment is gone and the member joins
  again at once with epoch 0 and the same member id;
- the coordinator gone (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, loading): the driver
  looks it up again and the heartbeat is retried after retry_backoff_ms; so is one that
  got no answer;
- leaving: epoch -1 (`leave`).

The driver (share_consumer.py) maps the assignment's topic ids to names before handing a
response in.
"""

from __future__ import annotations

import enum
from typing import Any, Iterable, Mapping

from client.consumer.consumer_membership import new_member_id
from client.errors import KafkaError, for_code
from client.types import TopicPartition
from protocol.errors import ErrorCode

E = ErrorCode
JOIN_EPOCH, LEAVE_EPOCH = 0, -1
_FENCED = {E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID}
_COORDINATOR_GONE = {E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR,
                     E.COORDINATOR_LOAD_IN_PROGRESS}

__all__ = ["HeartbeatOutcome", "ShareGroupMember", "JOIN_EPOCH", "LEAVE_EPOCH"]


class HeartbeatOutcome(enum.Enum):
    OK = "ok"
    REJOIN = "rejoin"            # fenced: the assignment is lost, joining again
    COORDINATOR = "coordinator"  # look the coordinator up again
    FATAL = "fatal"              # `member.error` says why; the member stops


class ShareGroupMember:
    def __init__(self, group_id: str, topics: Iterable[str], *, heartbeat_interval_ms: int,
                 retry_backoff_ms: int, rack_id: str | None = None,
                 member_id: str | None = None):
        self.group_id = group_id
        self.topics = tuple(sorted(set(topics)))
        self.rack_id = rack_id
        self.member_id = member_id or new_member_id()
        self.epoch = JOIN_EPOCH
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.error: KafkaError | None = None
        self.left = False
        self._interval_ms = heartbeat_interval_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._send_subscription = True
        self._next_at: int | None = 0 if self.topics else None
        self._in_flight = False

    @property
    def joined(self) -> bool:
        return self.epoch > 0

    def next_heartbeat_at(self) -> int | None:
        if self._in_flight or self.error is not None or self.left:
            return None
        return self._next_at

    def subscribe(self, topics: Iterable[str], now_ms: int) -> None:
        new = tuple(sorted(set(topics)))
        if new != self.topics:
            self.topics = new
            self._send_subscription = True
            self._next_at = now_ms  # tell the coordinator now

    def tick(self, now_ms: int) -> dict | None:
        """The ShareGroupHeartbeat body to send now, if one is due."""
        due = self.next_heartbeat_at()
        if due is None or now_ms < due:
            return None
        self._in_flight = True
        body: dict[str, Any] = {"group_id": self.group_id, "member_id": self.member_id,
                                "member_epoch": self.epoch, "rack_id": self.rack_id,
                                "subscribed_topic_names": None}
        if self.epoch == JOIN_EPOCH or self._send_subscription:
            body["subscribed_topic_names"] = list(self.topics)
            self._send_subscription = False
        return body

    def on_response(self, body: Mapping, now_ms: int) -> HeartbeatOutcome:
        """A response, its assignment (when not None) as {topic name: [partitions]}."""
        self._in_flight = False
        error = E.of(int(body["error_code"]))
        if error == E.NONE:
            if body.get("member_id"):
                self.member_id = body["member_id"]
            self.epoch = int(body["member_epoch"])
            if body.get("heartbeat_interval_ms"):
                self._interval_ms = int(body["heartbeat_interval_ms"])
            assignment = body.get("assignment")
            if assignment is not None:
                self.assignment = frozenset(TopicPartition(t, p) for t, parts in
                                            assignment.items() for p in parts)
            self._next_at = now_ms + self._interval_ms
            return HeartbeatOutcome.OK
        if error in _FENCED:
            self.assignment = frozenset()
            self.epoch = JOIN_EPOCH
            self._send_subscription = True
            self._next_at = now_ms
            return HeartbeatOutcome.REJOIN
        self._send_subscription = self._send_subscription or self.epoch == JOIN_EPOCH
        if error in _COORDINATOR_GONE:
            self._next_at = now_ms + self._retry_backoff_ms
            return HeartbeatOutcome.COORDINATOR
        self.error = for_code(error, body.get("error_message") or "ShareGroupHeartbeat")
        return HeartbeatOutcome.FATAL

    def on_failed(self, now_ms: int) -> None:
        """No answer (a lost connection, a timeout): try again after retry_backoff_ms."""
        self._in_flight = False
        self._next_at = now_ms + self._retry_backoff_ms

    def leave(self) -> dict | None:
        """The leave heartbeat (epoch -1), once, if the member is in the group."""
        was_in = self.joined and not self.left and self.error is None
        self.left = True
        self.assignment = frozenset()
        if not was_in:
            return None
        return {"group_id": self.group_id, "member_id": self.member_id,
                "member_epoch": LEAVE_EPOCH, "rack_id": self.rack_id,
                "subscribed_topic_names": None}
