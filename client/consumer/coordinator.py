"""The trio driver of the consumer's group membership (client/consumer/membership.py).

Owns: `ConsumerRebalanceListener` (the application's hooks) and `GroupCoordinator` (one
per subscribed Consumer, running in the Consumer's nursery).

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, partitions): await consumer.commit()
        async def on_partitions_assigned(self, partitions): ...

    consumer.subscribe(["orders"], listener=Listener())

How it runs. The pure `GroupMember` turns events into ordered actions; everything it asks
for is carried out by ONE background task (`run`), in order, each awaited before the next:
requests go to the group coordinator's connection and their responses are fed back as
events (whose actions run next, before the rest of the list); `CallListener` awaits the
listener; `StartFetching` / `StopFetching` adjust the Consumer's SubscriptionState;
`CommitOffsets` commits positions synchronously with the member's generation. Between
action lists the task sleeps until `member.next_deadline()` (heartbeats, session and
max.poll.interval timers, join retries) or until woken by an application event.

The application side only queues: `poll()` (called by every getmany / iteration step:
restarts max.poll.interval and joins when out of the group) and `subscribe()` hand their
actions to the background task, so a rebalance proceeds while the application is busy
elsewhere, and the listener runs in the background task (as in aiokafka), never
concurrently with another action of the member.

Partitions handed out by `StartFetching` are added to the SubscriptionState when the
'assigned' listener is called (so that it may seek them) but stay paused until
StartFetching; partitions in `StopFetching` are paused with their buffers dropped and
removed from the assignment once the 'revoked' / 'lost' listener call that follows has
returned (so it may still read and commit their positions).

Errors: a Fatal action, a non-retriable error from the request layer or a bug in this task
is kept and raised from every later getmany; an exception raised by the listener is
logged and raised from the next getmany only (the rebalance goes on, as in Java).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import TYPE_CHECKING, Any, Iterable

import trio

from client.consumer.membership import (
    CallListener, CommitOffsets, CoordinatorUnknown, Fatal, GroupMember, MemberConfig,
    MemberState, SendHeartbeat, SendJoinGroup, SendLeaveGroup, SendSyncGroup, StartFetching,
    StopFetching,
)
from client.errors import KafkaError
from client.types import TopicPartition
from protocol.consumer_protocol import decode_subscription
from protocol.messages import HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP

if TYPE_CHECKING:
    from client.consumer.consumer import Consumer

__all__ = ["ConsumerRebalanceListener", "GroupCoordinator"]

log = logging.getLogger("minibroker.client.consumer.coordinator")

LEAVE_TIMEOUT_MS = 5_000
CLOSE_TIMEOUT_S = 30.0  # Java's default close timeout


class ConsumerRebalanceListener:
    """Hooks called as Java's ConsumerCoordinator calls them (membership.py docstring):
    `partitions` is a set of TopicPartition. The defaults do nothing, except that
    `on_partitions_lost` calls `on_partitions_revoked`, as Java's default does."""

    async def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        pass

    async def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        await self.on_partitions_revoked(partitions)


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


class GroupCoordinator:
    """Drives one GroupMember for `consumer` (module docstring)."""

    def __init__(self, consumer: "Consumer", topics: Iterable[str], listener: Any = None):
        cfg = consumer.config
        assert cfg.group_id is not None  # the consumer has a group before it subscribes
        self.consumer = consumer
        self.listener = listener if listener is not None else ConsumerRebalanceListener()
        self.member = GroupMember(MemberConfig(
            group_id=cfg.group_id, topics=tuple(topics),
            assignors=cfg.partition_assignment_strategy,
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            max_poll_interval_ms=cfg.max_poll_interval_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            group_instance_id=cfg.group_instance_id,
            client_rack=cfg.client_rack or None,
            enable_auto_commit=bool(cfg.enable_auto_commit)))
        self.error: BaseException | None = None  # fatal: raised from every later poll
        self._listener_error: BaseException | None = None  # raised from the next poll once
        self._queue: deque[list] = deque()
        self._wakeup = trio.Event()
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()
        self._running = False
        self._pending_start: set[TopicPartition] = set()  # assigned, not yet StartFetching
        self._identity: tuple[int, str] | None = None  # (generation, member id) for close
        # leader only: the partition counts its last assignment was computed on
        self.assigned_counts: dict[str, int] = {}

    # -- what the Consumer calls ----------------------------------------------------------

    @property
    def topics(self) -> tuple[str, ...]:
        return self.member.topics

    def poll(self) -> None:
        """The application polled (getmany / iteration); raises a kept error."""
        self.raise_error()
        self._submit(self.member.poll(_now_ms()))

    def subscribe(self, topics: Iterable[str], listener: Any = None) -> None:
        if listener is not None:
            self.listener = listener
        self._submit(self.member.subscribe(topics, _now_ms()))

    def check_partition_counts(self, metadata: Any) -> None:
        """Java's leader check (ConsumerCoordinator.rejoinNeededOrPending): when a topic's
        partition count differs from what the last assignment used, rejoin. Topics the
        metadata does not know (yet) are left alone rather than read as deleted."""
        changed = sorted(t for t, n in self.assigned_counts.items()
                         if (now := metadata.partitions_for(t)) is not None and len(now) != n)
        if changed and self.member.is_leader:
            self.assigned_counts = {}
            self._submit(self.member.request_rejoin(
                f"partition count of {', '.join(changed)} changed", _now_ms()))

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error
        error, self._listener_error = self._listener_error, None
        if error is not None:
            raise error

    def commit_identity(self) -> tuple[int, str, str | None]:
        """(generation, member id, group instance id) for OffsetCommit: the member's current
        generation, or during close the one it had before leaving; (-1, "") outside a group
        (a standalone commit)."""
        if self._identity is not None:
            generation, member_id = self._identity
        else:
            generation, member_id = self.member.generation, self.member.member_id
        if generation < 0:
            return -1, "", self.member.config.group_instance_id
        return generation, member_id, self.member.config.group_instance_id

    def forget_pause(self, tp: TopicPartition) -> None:
        """The application paused or resumed `tp` itself: StartFetching leaves it alone."""
        self._pending_start.discard(tp)

    @property
    def state(self) -> MemberState:
        return self.member.state

    def _submit(self, actions: list) -> None:
        if actions:
            self._queue.append(actions)
            self._wakeup.set()

    # -- the background task ---------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._running = True
        try:
            with trio.CancelScope() as self._scope:
                task_status.started()
                try:
                    await self._loop()
                except KafkaError as e:
                    self.error = e
                    log.error("group %s: %s", self.member.config.group_id, e)
                except Exception as e:  # a bug: keep it for the application
                    self.error = e
                    log.exception("group %s: the membership task failed",
                                  self.member.config.group_id)
        finally:
            self._running = False
            self._stopped.set()

    async def _loop(self) -> None:
        while True:
            while self._queue:
                await self._execute(self._queue.popleft())
            actions = self.member.tick(_now_ms())
            if actions:
                await self._execute(actions)
                continue
            if self._queue:
                continue
            deadline = self.member.next_deadline()
            self._wakeup = trio.Event()
            wake_at = math.inf if deadline is None else (deadline + 1) / 1000
            with trio.move_on_at(wake_at):
                await self._wakeup.wait()

    async def close(self) -> None:
        """Stop the background task, then carry out member.close(): commit (auto-commit),
        revoke (or lose), LeaveGroup for a dynamic member. Bounded by CLOSE_TIMEOUT_S."""
        if self._scope is not None:
            self._scope.cancel()
        if self._running:
            with trio.CancelScope(shield=True):
                await self._stopped.wait()
        self._queue.clear()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(CLOSE_TIMEOUT_S):
                self._identity = (self.member.generation, self.member.member_id)
                try:
                    await self._execute(self.member.close(_now_ms()))
                except KafkaError as e:
                    log.warning("group %s: close: %s", self.member.config.group_id, e)
                finally:
                    self._identity = None

    # -- actions ---------------------------------------------------------------------------

    async def _execute(self, actions: list) -> None:
        work = deque(actions)
        while work:
            action = work.popleft()
            follow = await self._do(action)
            if follow:
                work.extendleft(reversed(follow))

    async def _do(self, action: Any) -> list:
        member, consumer = self.member, self.consumer
        if isinstance(action, SendJoinGroup):
            rebalance_ms = action.body["rebalance_timeout_ms"]
            resp = await self._request("join", JOIN_GROUP, action.body,
                                       rebalance_ms + consumer.config.request_timeout_ms)
            if resp is None:
                return member.on_request_failed("join", _now_ms())
            counts = None
            body = resp.body
            if body.error_code == 0 and body.leader == body.member_id:
                counts = await self._partition_counts(body)
                self.assigned_counts = dict(counts)
            else:
                self.assigned_counts = {}
            return member.on_join_response(body, _now_ms(), counts)
        if isinstance(action, SendSyncGroup):
            resp = await self._request("sync", SYNC_GROUP, action.body)
            if resp is None:
                return member.on_request_failed("sync", _now_ms())
            return member.on_sync_response(resp.body, _now_ms())
        if isinstance(action, SendHeartbeat):
            resp = await self._request("heartbeat", HEARTBEAT, action.body)
            if resp is None:
                return member.on_request_failed("heartbeat", _now_ms())
            return member.on_heartbeat_response(resp.body, _now_ms())
        if isinstance(action, SendLeaveGroup):
            await self._request("leave", LEAVE_GROUP, action.body, LEAVE_TIMEOUT_MS)
            return []
        if isinstance(action, CallListener):
            await self._call_listener(action.kind, action.partitions)
            return []
        if isinstance(action, StartFetching):
            state = consumer._state
            for tp in action.partitions:
                if tp in self._pending_start and state.is_assigned(tp):
                    state.resume(tp)
                self._pending_start.discard(tp)
            consumer._assignment_changed()
            return []
        if isinstance(action, StopFetching):
            state = consumer._state
            for tp in action.partitions:
                if state.is_assigned(tp):
                    state.stop(tp)
                self._pending_start.discard(tp)
            return []
        if isinstance(action, CommitOffsets):
            offsets = consumer._state.positions(action.partitions)
            try:
                await consumer.commit(offsets)
            except KafkaError as e:  # Java logs a failed auto-commit before a rebalance
                log.warning("group %s: auto-commit before the rebalance failed: %s",
                            member.config.group_id, e)
            return []
        if isinstance(action, CoordinatorUnknown):
            log.info("group %s: coordinator unknown (%s)", member.config.group_id,
                     action.reason)
            consumer._coordinator_id = None
            return []
        if isinstance(action, Fatal):
            self.error = action.error
            log.error("group %s: %s", member.config.group_id, action.error)
            return []
        raise TypeError(f"unknown membership action {action!r}")

    async def _request(self, api: str, api_key: int, body: dict,
                       timeout_ms: int | None = None) -> Any:
        """Send to the coordinator; None when no response came (the member retries)."""
        try:
            conn = await self.consumer._coordinator()
            return await conn.request(api_key, body, timeout_ms=timeout_ms)
        except KafkaError as e:  # a lost connection and a timeout are retriable too
            if not e.retriable:
                raise
            log.info("group %s: %s failed: %s", self.member.config.group_id, api, e)
            self.consumer._coordinator_id = None
        return None  # the member schedules the retry after retry_backoff_ms

    async def _partition_counts(self, body: Any) -> dict[str, int]:
        """The leader's view: partition counts of every topic any member subscribes to."""
        topics: set[str] = set()
        for m in body.members or []:
            topics.update(decode_subscription(m.metadata).topics)
        cluster = self.consumer._cluster
        if not topics or cluster is None:
            return {}
        metadata = await cluster.refresh(topics)
        counts = {}
        for t in topics:
            parts = metadata.partitions_for(t)
            if parts:
                counts[t] = len(parts)
        return counts

    async def _call_listener(self, kind: str, partitions: tuple) -> None:
        state = self.consumer._state
        parts = set(partitions)
        if kind == "assigned":
            new = [tp for tp in partitions if not state.is_assigned(tp)]
            state.assign(list(state.assignment()) + new)
            for tp in new:
                state.pause(tp)
                self._pending_start.add(tp)
            if self.consumer._cluster is not None:
                self.consumer._cluster.add_topics({tp.topic for tp in new})
        hook = {"assigned": "on_partitions_assigned", "revoked": "on_partitions_revoked",
                "lost": "on_partitions_lost"}[kind]
        try:
            await getattr(self.listener, hook)(parts)
        except Exception as e:
            log.exception("group %s: %s(%s) raised", self.member.config.group_id, hook,
                          sorted(parts))
            if self._listener_error is None:
                self._listener_error = e
        finally:
            if kind in ("revoked", "lost") and parts:
                state.assign([tp for tp in state.assignment() if tp not in parts])
                for tp in parts:
                    self._pending_start.discard(tp)
