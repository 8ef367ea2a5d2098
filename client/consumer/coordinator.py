"""The consumer's side of its group coordinator: lookup, committed offsets, membership.

Owns: `ConsumerCoordinator` (one per Consumer with a group_id: FindCoordinator and the
connection to the coordinator, OffsetCommit and OffsetFetch, as Java's ConsumerCoordinator
with AbstractCoordinator's lookupCoordinator / markCoordinatorUnknown),
`ConsumerRebalanceListener` (the application's hooks) and `GroupCoordinator` (the trio
driver of the pure membership state machine in client/consumer/membership.py: one per
subscription, running in the Consumer's nursery, sending its requests through the
ConsumerCoordinator).

Neither reads the Consumer: each is handed what it works on (the ConnectionPool and
Cluster, the SubscriptionState of positions, a callback for "partitions started
fetching"), so this module is understood without client/consumer/consumer.py.

ConsumerCoordinator:

    coordinator = ConsumerCoordinator(pool, cluster, config)   # config.group_id set
    await coordinator.commit_offsets({tp: 42}, identity=(-1, "", None))
    await coordinator.fetch_committed([tp])                   # {tp: 42} (None: nothing)

The coordinator is found with FindCoordinator (key type 0) on the least-loaded connection
and kept until an error says it moved (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost
connection, a timeout). Its connection is one of its own (channel "group"): the broker
answers a connection's requests in order and holds a JoinGroup until the rebalance
completes, and fetching must go on meanwhile. Commits go out one at a time, in the order
they were made (trio.Lock is fair), so that an older one never lands after a newer one.

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
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence, TypeVar

import trio

from client.cluster import Cluster, ClusterMetadata, find_group_coordinator
from client.connection import BrokerConnection, ConnectionPool
from client.consumer.config import ConsumerConfig
from client.consumer.consumer_membership import (
    ConsumerGroupMember, SendConsumerGroupHeartbeat, topic_partitions_by_id,
)
from client.consumer.fetcher import SubscriptionState
from client.consumer.membership import (
    CallListener, CommitOffsets, CoordinatorUnknown, Fatal, GroupMember, MemberConfig,
    MemberState, SendHeartbeat, SendJoinGroup, SendLeaveGroup, SendSyncGroup, StartFetching,
    StopFetching,
)
from client.errors import (
    CommitFailedError, KafkaConnectionError, KafkaError, KafkaTimeoutError, for_code,
)
from client.offset_fetch import offset_fetch
from client.retry import retry_until_deadline
from client.types import TopicPartition
from protocol.consumer_protocol import decode_subscription
from protocol.errors import ErrorCode
from protocol.messages import (
    CONSUMER_GROUP_HEARTBEAT, HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, OFFSET_COMMIT, SYNC_GROUP,
)

__all__ = ["COORDINATOR_CHANNEL", "CommitIdentity", "ConsumerCoordinator",
           "ConsumerRebalanceListener", "GroupCoordinator", "STANDALONE", "metadata_snapshot"]

T = TypeVar("T")

log = logging.getLogger("minibroker.client.consumer.coordinator")

LEAVE_TIMEOUT_MS = 5_000
COORDINATOR_CHANNEL = "group"
# an OffsetCommit with a generation answered so: the member is out of the group
_OUT_OF_GENERATION = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION})
_COORDINATOR_ERRORS = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                 ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 ErrorCode.NOT_COORDINATOR})

# (generation, member id, group instance id) an OffsetCommit carries
CommitIdentity = tuple[int, str, "str | None"]
STANDALONE: CommitIdentity = (-1, "", None)  # a commit from outside the group (assign mode)


class ConsumerCoordinator:
    """The group's coordinator for one Consumer: lookup, OffsetCommit, OffsetFetch (module
    docstring). `config.group_id` must be set."""

    def __init__(self, pool: ConnectionPool, cluster: Cluster, config: ConsumerConfig):
        if not config.group_id:
            raise ValueError("a ConsumerCoordinator needs a group_id")
        self.pool = pool
        self.cluster = cluster
        self.config = config
        self.group_id: str = config.group_id
        self.coordinator_id: int | None = None
        self._commit_lock = trio.Lock()

    # -- the coordinator ---------------------------------------------------------------

    async def connection(self) -> BrokerConnection:
        """The coordinator's connection (channel "group"): FindCoordinator first unless
        the coordinator is known."""
        if self.coordinator_id is None:
            self.coordinator_id, _ = await find_group_coordinator(self.pool, self.group_id)
        return await self.pool.get(self.coordinator_id, channel=COORDINATOR_CHANNEL)

    def mark_coordinator_unknown(self) -> None:
        """The next request looks the coordinator up again (Java markCoordinatorUnknown)."""
        self.coordinator_id = None

    # -- committed offsets -------------------------------------------------------------

    async def commit_offsets(self, offsets: Mapping[TopicPartition, int | tuple[int, str | None]],
                             identity: CommitIdentity | Callable[[], CommitIdentity] = STANDALONE,
                             *, retry: bool = True,
                             owns: Callable[[TopicPartition], bool] | None = None) -> None:
        """OffsetCommit of `offsets` (tp -> offset, or (offset, metadata)) as `identity`
        (or what the callable returns at each attempt: a member's generation may move
        while a commit waits). `retry` False makes one attempt only (a background
        auto-commit); else retriable errors are retried until default_api_timeout_ms.

        A commit retried after the member's generation moved on (a rebalance completed
        while it waited for a coordinator) would carry the new generation, which the
        coordinator accepts, for offsets consumed in the old one: for a partition another
        member now owns, that overwrites its newer commit and the group's committed offset
        goes back (found by the simulation, seed 1012 of the short sweep). So when the
        generation has changed since the commit was asked for and `owns` says a partition
        of the commit is no longer this member's, it fails with CommitFailedError, as
        Java's consumer fails a commit once the group has rebalanced; partitions still
        owned (a cooperative rebalance, a KIP-848 epoch bump) commit as before."""
        entries: dict[TopicPartition, tuple[int, str | None]] = {}
        for tp, value in offsets.items():
            offset, metadata = (value, "") if isinstance(value, int) else value
            if offset < 0:
                raise ValueError(f"commit offset must be >= 0, got {offset} for {tp}")
            entries[TopicPartition(tp[0], tp[1])] = (offset, metadata)
        if not entries:
            return
        group_id = self.group_id
        invoked_in = (identity() if callable(identity) else identity)[0]

        async def attempt() -> None:
            generation, member_id, instance_id = (
                identity() if callable(identity) else identity)
            if generation != invoked_in and owns is not None:
                lost = sorted(f"{tp.topic}-{tp.partition}" for tp in entries if not owns(tp))
                if lost:
                    raise CommitFailedError(
                        f"OffsetCommit for group '{group_id}': the group moved from "
                        f"generation {invoked_in} to {generation} while the commit "
                        f"waited, and {', '.join(lost)} may be another member's now",
                        ErrorCode.ILLEGAL_GENERATION)
            conn = await self.connection()
            topics: dict[str, list] = {}
            for tp, (offset, metadata) in entries.items():
                topics.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "committed_offset": offset,
                    "committed_leader_epoch": -1, "committed_metadata": metadata})
            resp = await conn.request(OFFSET_COMMIT, {
                "group_id": group_id, "generation_id_or_member_epoch": generation,
                "member_id": member_id, "group_instance_id": instance_id,
                "retention_time_ms": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            retriable: KafkaError | None = None
            for t in resp.body.topics:
                for p in t.partitions:
                    code = ErrorCode.of(p.error_code)
                    if code is ErrorCode.NONE:
                        continue
                    text = f"OffsetCommit {t.name}-{p.partition_index} for group '{group_id}'"
                    if generation >= 0 and code in _OUT_OF_GENERATION:
                        raise CommitFailedError(
                            f"{text}: {code.name}: this member is no longer in the group's "
                            f"generation {generation} (a rebalance went on without it)", code)
                    error = for_code(code, text)
                    if not error.retriable:
                        raise error
                    retriable = retriable or error
            if retriable is not None:
                raise retriable

        async with self._commit_lock:
            if retry:
                await self._retrying(f"OffsetCommit for group '{group_id}'", attempt)
                return
            try:
                await attempt()
            except KafkaError as e:
                if e.retriable:  # the next attempt looks for the coordinator again
                    self._on_retriable(e)
                raise

    async def fetch_committed(self, tps: Sequence[TopicPartition]
                              ) -> dict[TopicPartition, int | None]:
        """OffsetFetch: the committed offset of each of `tps` (None: nothing committed),
        retrying until default_api_timeout_ms (a read_committed consumer's asks for stable
        offsets only: UNSTABLE_OFFSET_COMMIT is retried)."""
        group_id = self.group_id
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp[0], []).append(tp[1])
        wanted = [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]
        # read_committed: not an offset an open transaction is about to replace (Java's
        # requireStable); UNSTABLE_OFFSET_COMMIT is retried until the transaction ends
        stable = self.config.isolation_level == "read_committed"

        async def attempt() -> dict[TopicPartition, int | None]:
            return await offset_fetch(await self.connection(), group_id, wanted,
                                      require_stable=stable)

        return await self._retrying(f"OffsetFetch for group '{group_id}'", attempt)

    def _on_retriable(self, e: KafkaError) -> None:
        """A retriable error: forget a coordinator that moved or cannot be reached, and
        ask for metadata when the error says the cache is stale."""
        if (e.code in _COORDINATOR_ERRORS
                or isinstance(e, (KafkaConnectionError, KafkaTimeoutError))):
            self.mark_coordinator_unknown()
        if e.refresh_metadata:
            self.cluster.request_update()

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        return await retry_until_deadline(
            what, attempt, budget_ms=self.config.default_api_timeout_ms,
            backoff_s=self.config.retry_backoff_s, on_retry=self._on_retriable)


def metadata_snapshot(metadata: ClusterMetadata, topics: Iterable[str]
                      ) -> dict[str, int | None]:
    """Java's MetadataSnapshot over `topics`: partitions per topic, 0 for a topic that
    does not exist (deleted, never created), None where the cache has no answer."""
    out: dict[str, int | None] = {}
    for topic in topics:
        exists = metadata.exists(topic)
        out[topic] = None if exists is None else (
            len(metadata.partitions_for(topic) or ()) if exists else 0)
    return out


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
    """Drives one GroupMember (module docstring). It is handed what it works on:
    `coordinator` (requests, commits), `subscriptions` (the Consumer's positions and
    buffers: the assignment it grows and shrinks), `cluster` (metadata: partition counts
    when leading) and `on_assignment_changed` (called once newly assigned partitions are
    fetchable)."""

    def __init__(self, coordinator: ConsumerCoordinator, subscriptions: SubscriptionState,
                 cluster: Cluster, topics: Iterable[str], listener: Any = None, *,
                 on_assignment_changed: Callable[[], None] = lambda: None):
        cfg = coordinator.config
        self.coordinator = coordinator
        self.config = cfg
        self.subscriptions = subscriptions
        self.cluster = cluster
        self.on_assignment_changed = on_assignment_changed
        self.listener = listener if listener is not None else ConsumerRebalanceListener()
        assert cfg.group_id is not None  # the consumer has a group before it subscribes
        member_config = MemberConfig(
            group_id=cfg.group_id, topics=tuple(topics),
            assignors=cfg.partition_assignment_strategy,
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            max_poll_interval_ms=cfg.max_poll_interval_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            group_instance_id=cfg.group_instance_id,
            client_rack=cfg.client_rack or None,
            enable_auto_commit=bool(cfg.enable_auto_commit))
        # the two protocols' members answer the same events with the same actions
        self.member: Any = (
            ConsumerGroupMember(member_config, server_assignor=cfg.group_remote_assignor)
            if cfg.group_protocol == "consumer" else GroupMember(member_config))
        self.error: BaseException | None = None  # fatal: raised from every later poll
        self._listener_error: BaseException | None = None  # raised from the next poll once
        self._queue: deque[list] = deque()
        self._wakeup = trio.Event()
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()
        self._running = False
        self._pending_start: set[TopicPartition] = set()  # assigned, not yet StartFetching
        self._identity: tuple[int, str] | None = None  # (generation, member id) for close
        # leader only: the metadata its last assignment was computed on (Java's
        # assignmentSnapshot): partitions per topic any member subscribes to, 0 for a topic
        # that did not exist
        self.assignment_snapshot: dict[str, int] = {}

    # -- what the Consumer calls ----------------------------------------------------------

    @property
    def topics(self) -> tuple[str, ...]:
        return self.member.topics

    def poll(self) -> None:
        """The application polled (getmany / iteration); raises a kept error."""
        self.raise_error()
        before = self.member.next_deadline()
        self._submit(self.member.poll(_now_ms()))
        self._wake_if_sooner(before)

    def subscribe(self, topics: Iterable[str], listener: Any = None) -> None:
        if listener is not None:
            self.listener = listener
        before = self.member.next_deadline()
        self._submit(self.member.subscribe(topics, _now_ms()))
        self._wake_if_sooner(before)

    def _wake_if_sooner(self, before: int | None) -> None:
        """An event moved the member's next deadline earlier without an action (the
        consumer protocol's member only schedules its heartbeat): the sleeping task must
        wake for it."""
        after = self.member.next_deadline()
        if after is not None and (before is None or after < before):
            self._wakeup.set()

    def check_metadata(self, metadata: ClusterMetadata) -> None:
        """Java's leader check (ConsumerCoordinator.rejoinNeededOrPending): when the
        metadata snapshot of the subscribed topics differs from the one the last assignment
        was computed on (a partition count changed, a topic was deleted or created),
        rejoin, so that the next assignment is computed on what exists. Topics the cache
        has no answer about (not asked yet) are left alone rather than read as deleted."""
        if not self.member.is_leader:
            return
        now = metadata_snapshot(metadata, self.assignment_snapshot)
        changes = []
        for topic, before in sorted(self.assignment_snapshot.items()):
            after = now[topic]
            if after is None or after == before:
                continue
            if after == 0:
                changes.append(f"topic {topic} was deleted")
            elif before == 0:
                changes.append(f"topic {topic} was created")
            else:
                changes.append(f"partition count of {topic} changed ({before} -> {after})")
        if changes:
            self.assignment_snapshot = {}
            self._submit(self.member.request_rejoin("; ".join(changes), _now_ms()))

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error
        error, self._listener_error = self._listener_error, None
        if error is not None:
            raise error

    def commit_identity(self) -> CommitIdentity:
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

    def check_can_commit(self) -> None:
        """CommitFailedError if the member is out of the generation it was assigned in
        (max_poll_interval_ms exceeded, session lost): Java's commitSync refuses then."""
        if self.member.out_of_generation:
            raise CommitFailedError(
                f"group {self.member.config.group_id}: the commit cannot be completed since "
                f"this member is no longer in the group (it exceeded max_poll_interval_ms="
                f"{self.config.max_poll_interval_ms} between polls, or its session expired) "
                f"and its partitions may be another member's; the next getmany rejoins")

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

    async def close(self, budget_s: float | None = None) -> None:
        """Stop the background task, then carry out member.close(): commit (auto-commit),
        revoke (or lose), LeaveGroup for a dynamic member, shielded from cancellation and
        bounded by `budget_s` (default close_timeout_ms); what is left at the end of the
        budget is abandoned with a warning (the broker expires the member after
        session_timeout_ms)."""
        if budget_s is None:
            budget_s = self.config.close_timeout_ms / 1000
        if self._scope is not None:
            self._scope.cancel()
        if self._running:
            with trio.CancelScope(shield=True):
                await self._stopped.wait()
        self._queue.clear()
        group_id = self.member.config.group_id
        with trio.CancelScope(shield=True):
            with trio.move_on_after(budget_s) as budget:
                self._identity = (self.member.generation, self.member.member_id)
                try:
                    await self._execute(self.member.close(_now_ms()))
                except KafkaError as e:
                    log.warning("group %s: close: %s", group_id, e)
                finally:
                    self._identity = None
            if budget.cancelled_caught:
                log.warning("group %s: close: the final commit, revocation and LeaveGroup "
                            "did not finish within %.0f ms; abandoned", group_id,
                            budget_s * 1000)

    # -- actions ---------------------------------------------------------------------------

    async def _execute(self, actions: list) -> None:
        work = deque(actions)
        while work:
            action = work.popleft()
            follow = await self._do(action)
            if follow:
                work.extendleft(reversed(follow))

    async def _do(self, action: Any) -> list:
        member = self.member
        if isinstance(action, SendJoinGroup):
            rebalance_ms = action.body["rebalance_timeout_ms"]
            resp = await self._request("join", JOIN_GROUP, action.body,
                                       rebalance_ms + self.config.request_timeout_ms)
            if resp is None:
                return member.on_request_failed("join", _now_ms())
            counts = None
            body = resp.body
            if body.error_code == 0 and body.leader == body.member_id:
                try:
                    topics, counts = await self._partition_counts(body)
                except KafkaError as e:  # no broker answered Metadata: join again later
                    if not e.retriable:
                        raise
                    log.info("group %s: leader's metadata refresh failed: %s",
                             member.config.group_id, e)
                    return member.on_request_failed("join", _now_ms())
                self.assignment_snapshot = {t: counts.get(t, 0) for t in topics}
            else:
                self.assignment_snapshot = {}
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
        if isinstance(action, SendConsumerGroupHeartbeat):
            return await self._consumer_group_heartbeat(action.body)
        if isinstance(action, SendLeaveGroup):
            await self._request("leave", LEAVE_GROUP, action.body, LEAVE_TIMEOUT_MS)
            return []
        if isinstance(action, CallListener):
            await self._call_listener(action.kind, action.partitions)
            return []
        if isinstance(action, StartFetching):
            state = self.subscriptions
            for tp in action.partitions:
                if tp in self._pending_start and state.is_assigned(tp):
                    state.resume(tp)
                self._pending_start.discard(tp)
            self.on_assignment_changed()
            return []
        if isinstance(action, StopFetching):
            state = self.subscriptions
            for tp in action.partitions:
                if state.is_assigned(tp):
                    state.stop(tp)
                self._pending_start.discard(tp)
            return []
        if isinstance(action, CommitOffsets):
            offsets = self.subscriptions.positions(action.partitions)
            try:
                await self.coordinator.commit_offsets(offsets, self.commit_identity,
                                                      owns=self.subscriptions.is_assigned)
            except KafkaError as e:  # Java logs a failed auto-commit before a rebalance
                log.warning("group %s: auto-commit before the rebalance failed: %s",
                            member.config.group_id, e)
            return []
        if isinstance(action, CoordinatorUnknown):
            log.info("group %s: coordinator unknown (%s)", member.config.group_id,
                     action.reason)
            self.coordinator.mark_coordinator_unknown()
            return []
        if isinstance(action, Fatal):
            self.error = action.error
            log.error("group %s: %s", member.config.group_id, action.error)
            return []
        raise TypeError(f"unknown membership action {action!r}")

    async def _consumer_group_heartbeat(self, body: dict) -> list:
        """One ConsumerGroupHeartbeat: topics go out by id and come back by name (a topic id
        the metadata does not know yet sends for the subscribed topics' metadata first)."""
        member = self.member
        metadata = self.cluster.metadata
        if body.get("topic_partitions") is not None:
            body = dict(body, topic_partitions=topic_partitions_by_id(
                body["topic_partitions"], metadata.topic_id))
        leaving = body["member_epoch"] < 0
        resp = await self._request("heartbeat", CONSUMER_GROUP_HEARTBEAT, body,
                                   LEAVE_TIMEOUT_MS if leaving else None)
        if leaving:
            return []
        if resp is None:
            return member.on_request_failed("heartbeat", _now_ms())
        answer = resp.body
        assignment = None
        if answer.get("assignment") is not None:
            wanted = [t.topic_id for t in answer.assignment.topic_partitions]
            if any(self.cluster.metadata.topic_name(t) is None for t in wanted):
                try:
                    await self.cluster.refresh(list(member.topics))
                except KafkaError as e:  # answered again at the next heartbeat
                    log.info("group %s: metadata for the assignment: %s",
                             member.config.group_id, e)
            assignment = {}
            for t in answer.assignment.topic_partitions:
                name = self.cluster.metadata.topic_name(t.topic_id)
                if name is not None:  # unknown still: it comes again, we do not own it
                    assignment[name] = list(t.partitions)
        return member.on_heartbeat_response({
            "error_code": answer.error_code, "error_message": answer.error_message,
            "member_id": answer.member_id, "member_epoch": answer.member_epoch,
            "heartbeat_interval_ms": answer.heartbeat_interval_ms,
            "assignment": assignment}, _now_ms())

    async def _request(self, api: str, api_key: int, body: dict,
                       timeout_ms: int | None = None) -> Any:
        """Send to the coordinator; None when no response came (the member retries)."""
        try:
            conn = await self.coordinator.connection()
            return await conn.request(api_key, body, timeout_ms=timeout_ms)
        except KafkaError as e:  # a lost connection and a timeout are retriable too
            if not e.retriable:
                raise
            log.info("group %s: %s failed: %s", self.member.config.group_id, api, e)
            self.coordinator.mark_coordinator_unknown()
        return None  # the member schedules the retry after retry_backoff_ms

    async def _partition_counts(self, body: Any) -> tuple[set[str], dict[str, int]]:
        """The leader's view: every topic any member subscribes to, and the partition
        counts of those that exist."""
        topics: set[str] = set()
        for m in body.members or []:
            topics.update(decode_subscription(m.metadata).topics)
        if not topics:
            return topics, {}
        metadata = await self.cluster.refresh(topics)
        counts = {}
        for t in topics:
            parts = metadata.partitions_for(t)
            if parts:
                counts[t] = len(parts)
        return topics, counts

    async def _call_listener(self, kind: str, partitions: tuple) -> None:
        state = self.subscriptions
        parts = set(partitions)
        if kind == "assigned":
            new = [tp for tp in partitions if not state.is_assigned(tp)]
            state.assign(list(state.assignment()) + new)
            for tp in new:
                state.pause(tp)
                self._pending_start.add(tp)
            self.cluster.add_topics({tp.topic for tp in new})
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
