"""The Consumer, on trio: assign mode and group membership (subscribe).

Owns: `Consumer` (and re-exports `ConsumerRebalanceListener` from coordinator.py).

    async with Consumer("orders", bootstrap_servers="127.0.0.1:9092", group_id="billing",
                        auto_offset_reset="earliest") as consumer:   # subscribe mode
        async for record in consumer:
            ...

    async with Consumer(bootstrap_servers="127.0.0.1:9092", group_id="billing",
                        auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("orders", 0), TopicPartition("orders", 1)])
        batches = await consumer.getmany(timeout_ms=1000)   # {tp: [ConsumerRecord, ...]}
        async for record in consumer:                        # forever, one at a time
            ...
        await consumer.commit()                              # the current positions

Positions: a partition assigned without a position starts at the group's committed offset
(when group_id is set and one exists), else where auto_offset_reset says (ListOffsets
earliest / latest; 'none' raises NoOffsetForPartitionError from position() / getmany()).
`seek` sets one; `position` resolves and returns it; `getmany` and iteration advance it
past the records they return.

A subscribed topic the metadata refuses for good (TOPIC_AUTHORIZATION_FAILED,
INVALID_TOPIC_EXCEPTION) is raised from getmany, once per metadata answer, as from Java's
poll; an assigned one is refused by the OffsetFetch, ListOffsets or Fetch it needs.

Committed offsets: `commit` sends OffsetCommit as a standalone commit (generation -1, empty
member id, as Java's assign-mode consumer does) to the group's coordinator, found with
FindCoordinator; `committed` reads one back with OffsetFetch (None when nothing is
committed). Both need group_id (InvalidGroupIdError otherwise) and retry coordinator
errors, connection failures and timeouts until default_api_timeout_ms. The requests are
the ConsumerCoordinator's (coordinator.py), which the Consumer opens when it has a group_id.

Group membership: `Consumer(*topics, group_id=...)` or `subscribe(topics, listener=None)`
(group_id required: InvalidGroupIdError otherwise; mutually exclusive with assign()). A
GroupCoordinator (coordinator.py) runs the member in a background task of the Consumer's
nursery: heartbeats, rebalances and the listener run there; each getmany / iteration step
polls the member (max.poll.interval.ms; the first one joins the group). Commits made while
in a group carry the member's generation and member id. Newly assigned partitions start at
the committed offset, else auto_offset_reset. On close: auto-commit (enable_auto_commit),
revoke, LeaveGroup (dynamic members), shielded from cancellation and bounded by
close_timeout_ms (30 s), or by cancelled_close_timeout_ms (1 s) when the close comes from
a cancellation of the caller; whatever is left then is abandoned with a warning.

unsubscribe() leaves the group (see its docstring); subscribe() afterwards joins again.

subscribe(pattern=...) follows the topics whose names match (see subscribe()).

As aiokafka's and Java's: key_deserializer / value_deserializer (config) turn each record's
key / value into objects; partitions_for(topic) and topics() ask about the cluster;
beginning_offsets, end_offsets and offsets_for_times ask the leaders (positions do not
move); highwater(tp) is the last high watermark a Fetch response gave; seek_to_committed
goes back to the group's committed offsets; group_metadata() says who the member is.

Prefetching: as Java's Fetcher, a Fetch goes to each leader as soon as one of its partitions
holds fewer than max_poll_records buffered records (or fewer than half of its last
response), at most one per leader at a time, in the background: getmany returns what is
buffered while the next response is on its way (each getmany yields to trio once, before
it drains anything, so that the Fetch task runs). What is buffered per partition is
bounded by max_poll_records plus one and a half responses (max_partition_fetch_bytes). seek(), a reset and a revocation drop a partition's buffer,
and the response of a Fetch sent before is discarded for it.

isolation_level="read_committed" (KIP-98) returns only the records of committed
transactions (and those written outside transactions), and none past the last stable
offset, the first offset an open transaction may still abort: a transaction left open
holds its partition back until it ends. The filtering is client/consumer/isolation.py's;
end_offsets and a 'latest' reset then mean the last stable offset, and committed offsets
are read stable only (OffsetFetch require_stable).
"""

from __future__ import annotations

import logging
import math
import re
from contextlib import AsyncExitStack
from typing import Any, Iterable, Mapping, Sequence

import trio

from client.cluster import Cluster
from client.config import check_config
from client.connection import ConnectionPool, background_nursery
from client.consumer.config import ConsumerConfig
from client.consumer.coordinator import (
    STANDALONE, ConsumerCoordinator, ConsumerRebalanceListener, GroupCoordinator,
)
from client.consumer.fetcher import (
    EARLIEST, LATEST, ConsumerRecord, Fetcher, NoOffsetForPartitionError, SubscriptionState,
)
from client.errors import KafkaError, KafkaTimeoutError, for_code
from client.ratelimit import RateLimitedWarning
from client.types import ConsumerGroupMetadata, OffsetAndTimestamp, TopicPartition
from protocol.errors import ErrorCode

__all__ = ["Consumer", "ConsumerRebalanceListener", "ConsumerRecord", "Unsubscribed",
           "NoOffsetForPartitionError"]

log = logging.getLogger("minibroker.client.consumer")

# `async for` yields to trio once per this many records taken from the buffers (a
# checkpoint per record cost more than the rest of the step)
ITERATION_CHECKPOINT = 64

_MUTUALLY_EXCLUSIVE = ("subscribe() and assign() are mutually exclusive: a Consumer either "
                       "subscribes to topics in a group or is assigned partitions")


class Unsubscribed:
    """What unsubscribe() returns: awaiting it waits until the member has left the group
    (listener called, LeaveGroup sent); ignoring it is fine."""

    def __init__(self, left: trio.Event | None):
        self._left = left

    def done(self) -> bool:
        return self._left is None or self._left.is_set()

    def __await__(self):
        return self._wait().__await__()

    async def _wait(self) -> None:
        if self._left is not None:
            await self._left.wait()


class Consumer:
    """A Kafka consumer; an async context manager. Takes ConsumerConfig's names
    (client.consumer.config); an unknown name is a TypeError."""

    def __init__(self, *topics: str, bootstrap_servers: str | Sequence[str] = "localhost:9092",
                 group_id: str | None = None, **config: Any):
        self.config: ConsumerConfig = check_config(  # type: ignore[assignment]
            "consumer", bootstrap_servers=bootstrap_servers, group_id=group_id, **config)
        self._state = SubscriptionState()
        self._pool: ConnectionPool | None = None
        self._cluster: Cluster | None = None
        self._fetcher: Fetcher | None = None
        self._closed = False
        self._iterated = 0  # records `async for` returned, for its periodic checkpoint
        self._coordinator: ConsumerCoordinator | None = None  # with a group_id, once open
        self._next_auto_commit: float | None = None
        self._auto_commit_in_flight = False
        self._subscription: tuple[str, ...] | None = None
        self._listener: Any = None
        self._group: GroupCoordinator | None = None
        self._closing_group: GroupCoordinator | None = None
        self._leaving: trio.Event | None = None  # unsubscribe(): the old member's leave
        self._given_up: set[TopicPartition] = set()  # ... and the partitions it gives up
        self._pattern: re.Pattern | None = None  # subscribe(pattern=...)
        self._watching_metadata = False
        self._refusal_raised: int | None = None  # the metadata generation it came from
        self._exit_stack: AsyncExitStack | None = None  # what __aenter__ opened
        self._nursery: trio.Nursery | None = None
        self._assigned_event = trio.Event()
        self._deserializing = (self.config.key_deserializer is not None
                               or self.config.value_deserializer is not None)
        self._retrying = RateLimitedWarning(log, level=logging.INFO)
        if topics:
            self.subscribe(topics)

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> "Consumer":
        # Whatever was entered is exited, in reverse order, if a later step raises (a
        # nursery left open corrupts trio's nursery stack of the task that used the
        # Consumer); on success the stack is kept for __aexit__.
        async with AsyncExitStack() as stack:
            pool = await stack.enter_async_context(ConnectionPool(self.config))
            stack.callback(self._forget_pool)
            self._pool = pool
            await pool.bootstrap()  # fail fast, as aiokafka's start(), when none answers
            self._cluster = Cluster(
                pool, self.config, topics=self._state.topics(),
                allow_auto_topic_creation=self.config.allow_auto_create_topics)
            self._fetcher = Fetcher(pool, self._cluster, self.config, self._state)
            if self.config.group_id:
                self._coordinator = ConsumerCoordinator(pool, self._cluster, self.config)
            self._nursery = await stack.enter_async_context(background_nursery())
            stack.callback(self._forget_nursery)
            # the first step of closing, while the nursery and the pool still run
            stack.push_async_callback(self._close_membership)
            if self._subscription is not None:
                await self._start_group()
            self._exit_stack = stack.pop_all()
        return self

    async def _start_group(self) -> None:
        assert self._nursery is not None and self._subscription is not None
        self._cluster.add_topics(self._subscription)  # type: ignore[union-attr]
        self._group = self._new_group()
        await self._nursery.start(self._run_group, self._group)
        self._maybe_watch_metadata()

    def _new_group(self) -> GroupCoordinator:
        assert self._cluster is not None and self._subscription is not None
        return GroupCoordinator(self._offsets(), self._state, self._cluster,
                                self._subscription, self._listener,
                                on_assignment_changed=self._assignment_changed)

    async def _run_group(self, group: GroupCoordinator,
                         task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run a member once the one that unsubscribe() let go has left: one member of
        this Consumer in the group at a time."""
        if self._leaving is not None:
            await self._leaving.wait()
        await group.run(task_status=task_status)

    async def __aexit__(self, *exc_info) -> None:
        """Close: leave the group (or auto-commit outside one), stop the background tasks,
        close the connections; each step runs whatever the one before raised."""
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            await stack.aclose()

    def _close_budget_s(self) -> float:
        """How long closing may spend on the final commit and LeaveGroup: close_timeout_ms,
        or cancelled_close_timeout_ms when the close comes from a cancellation (the caller
        asked to be done now; a shielded short budget still lets the group hear of it)."""
        if trio.current_effective_deadline() == -math.inf:  # inside a cancelled scope
            return self.config.cancelled_close_timeout_ms / 1000
        return self.config.close_timeout_ms / 1000

    async def _close_membership(self) -> None:
        group, self._group = self._group, None
        budget_s = self._close_budget_s()
        if self._leaving is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(budget_s):
                await self._leaving.wait()
        if group is not None:
            # member.close(): auto-commit, revoke, LeaveGroup; commit() still works here
            self._closing_group = group
            try:
                await group.close(budget_s)
            finally:
                self._closing_group = None
        elif self._auto_commits():
            # Java's close() commits the positions of what was consumed, when
            # auto-committing
            with trio.CancelScope(shield=True), trio.move_on_after(budget_s) as scope:
                try:
                    await self.commit()
                except KafkaError as e:
                    log.warning("auto-commit on close failed: %s", e)
            if scope.cancelled_caught:
                log.warning("auto-commit on close did not finish within %.0f ms; abandoned",
                            budget_s * 1000)

    def _forget_nursery(self) -> None:
        self._nursery = None

    def _forget_pool(self) -> None:
        self._pool, self._cluster, self._fetcher = None, None, None
        self._coordinator = None
        self._closed = True

    @property
    def fetcher(self) -> Fetcher:
        if self._fetcher is None:
            raise RuntimeError("the Consumer is not open (use `async with`)")
        return self._fetcher

    # -- assignment --------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] = (), listener: Any = None, *,
                  pattern: str | re.Pattern | None = None) -> None:
        """Join group_id with these topics (replacing an earlier subscription; a rejoin
        follows at once when already in the group). `listener`: a
        ConsumerRebalanceListener (or any object with its three async methods); None keeps
        the current one (a no-op listener at first). The group is joined by the first
        getmany / iteration step after the Consumer is open.

        `pattern` instead of topics: every topic whose whole name matches (re.fullmatch,
        as Java's Pattern.matches), internal topics excluded (exclude_internal_topics).
        The Consumer then tracks every topic's metadata and matches again after each
        refresh, at least every metadata_max_age_ms: a new matching topic (or one gone)
        changes the subscription and the member rejoins, as in Java."""
        if pattern is not None:
            if isinstance(topics, str) or tuple(topics):
                raise ValueError("subscribe() takes topics or a pattern, not both")
            compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            names: tuple[str, ...] = ()
        else:
            compiled = None
            names = (topics,) if isinstance(topics, str) else tuple(topics)
            if not names:
                raise ValueError("subscribe() needs at least one topic (or a pattern)")
            for name in names:
                if not isinstance(name, str) or not name:
                    raise TypeError(f"topic names must be non-empty str, got {name!r}")
        self._group_id()
        if self._subscription is None and self._state.assignment() - self._given_up:
            raise RuntimeError(_MUTUALLY_EXCLUSIVE)
        self._pattern = compiled
        if compiled is not None:
            names = self._matching_topics() if self._cluster is not None else ()
        self._subscription = tuple(sorted(set(names)))
        if listener is not None:
            self._listener = listener
        if self._group is not None:
            self._cluster.add_topics(self._subscription)  # type: ignore[union-attr]
            self._group.subscribe(self._subscription, listener)
        elif self._nursery is not None:
            self._cluster.add_topics(self._subscription)  # type: ignore[union-attr]
            self._group = self._new_group()
            self._nursery.start_soon(self._run_group, self._group)
        self._maybe_watch_metadata()

    def _matching_topics(self) -> tuple[str, ...]:
        assert self._pattern is not None and self._cluster is not None
        return tuple(sorted(
            name for name, t in self._cluster.metadata.topics.items()
            if self._pattern.fullmatch(name)
            and not (t.is_internal and self.config.exclude_internal_topics)))

    def _maybe_watch_metadata(self) -> None:
        if self._subscription is not None and self._nursery is not None \
                and not self._watching_metadata:
            self._watching_metadata = True
            if self._pattern is not None:
                self._cluster.track_all_topics()  # type: ignore[union-attr]
            self._nursery.start_soon(self._watch_metadata)

    async def _watch_metadata(self) -> None:
        """While subscribed, look at every metadata refresh (this task asks for one at least
        every metadata_max_age_ms), as Java's poll() does: a pattern's changed match is a
        new subscription, and a leader whose assignment was computed on other partition
        metadata (a partition count changed, a topic deleted or created) rejoins, so that
        the assignment follows what exists (ConsumerCoordinator's rejoinNeededOrPending)."""
        cluster = self._cluster
        assert cluster is not None
        failures = 0
        try:
            while self._subscription is not None:
                seen = cluster.generation
                if cluster.generation == 0 or cluster.metadata.is_stale(
                        trio.current_time(), self.config.metadata_max_age_ms):
                    try:
                        await cluster.refresh()
                    except KafkaError as e:  # no broker for now: try again later
                        log.info("metadata refresh failed: %s", e)
                        await trio.sleep(self.config.retry_backoff_s(failures))
                        failures += 1
                        continue
                    failures = 0
                    seen = cluster.generation
                if self._pattern is not None and self._group is not None:
                    matched = self._matching_topics()
                    if matched != self._subscription:
                        self._subscription = matched
                        cluster.add_topics(matched)
                        self._group.subscribe(matched)
                if self._group is not None:
                    # the leader assigned every member's topics: keep their metadata fresh
                    cluster.add_topics(self._group.assignment_snapshot)
                    self._group.check_metadata(cluster.metadata)
                # another refresh (the fetcher's, the leader's) or the max age, first
                with trio.move_on_after(self.config.metadata_max_age_ms / 1000):
                    await cluster.wait_for_refresh(seen)
        finally:
            self._watching_metadata = False

    def subscription(self) -> set[str]:
        return set(self._subscription or ())

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing any earlier assignment; partitions
        kept keep their positions)."""
        if self._subscription is not None:
            raise RuntimeError(_MUTUALLY_EXCLUSIVE)
        tps = [TopicPartition(tp[0], tp[1]) for tp in partitions]
        self._state.assign(tps)
        if self._cluster is not None:
            self._cluster.add_topics({tp.topic for tp in tps})

    def assignment(self) -> set[TopicPartition]:
        return self._state.assignment()

    def unsubscribe(self) -> "Unsubscribed":
        """Assign mode: drop every assigned partition. Subscribe mode: leave the group.

        Leaving is Java's unsubscribe(): records stop being returned at once; then, in the
        background, the member commits (enable_auto_commit), calls the listener's
        on_partitions_revoked with what it owned (on_partitions_lost if it was out of the
        group or mid-rebalance) and sends LeaveGroup, unless it is a static member
        (group_instance_id), which stays in the group until its session times out, as in
        Java. The partitions leave assignment() once that listener call has returned, so it
        may still commit their positions. `await consumer.unsubscribe()` waits for all of
        that; subscribe() may be called again at once and joins once the leave is done."""
        if self._subscription is None:
            self._state.assign([])
            return Unsubscribed(None)
        self._subscription = None
        self._pattern = None
        group, self._group = self._group, None
        if group is None:  # never opened: there is no member to take out of the group
            return Unsubscribed(None)
        self._given_up |= self._state.assignment()
        for tp in self._state.assignment():  # nothing more reaches the application
            self._state.stop(tp)
        left = trio.Event()
        previous, self._leaving = self._leaving, left
        assert self._nursery is not None
        self._nursery.start_soon(self._leave_group, group, previous, left)
        return Unsubscribed(left)

    async def _leave_group(self, group: GroupCoordinator, previous: trio.Event | None,
                           left: trio.Event) -> None:
        try:
            if previous is not None:
                await previous.wait()
            self._closing_group = group
            await group.close()
        finally:
            self._closing_group = None
            if self._leaving is left:  # the last leave: nothing of an old member is left
                self._state.assign([tp for tp in self._state.assignment()
                                    if tp not in self._given_up])
                self._given_up = set()
            left.set()

    def _assignment_changed(self) -> None:
        """Partitions started fetching (the coordinator): wake a waiting getmany."""
        self._assigned_event.set()
        self._assigned_event = trio.Event()

    # -- positions ---------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch `tp` from `offset` next (records already buffered for it are dropped)."""
        self._state.seek(tp, offset)

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        await self._reset_now(tps or self.assignment(), "earliest")

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        await self._reset_now(tps or self.assignment(), "latest")

    async def _reset_now(self, tps: Iterable[TopicPartition], strategy: str) -> None:
        tps = list(tps)
        for tp in tps:
            self._state.request_reset(tp, strategy)
        await self.fetcher.reset_offsets(tps, strategy)

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record to be returned for `tp`, resolved first (committed
        offset, else auto_offset_reset) when it has none."""
        self._state.state(tp)  # ValueError if not assigned
        if self._state.position(tp) is None:
            await self._ensure_positions([tp])
        position = self._state.position(tp)
        if position is None:
            raise KafkaTimeoutError(f"no position for {tp.topic}-{tp.partition}")
        return position

    async def _ensure_positions(self, tps: Iterable[TopicPartition] | None = None) -> None:
        missing = [tp for tp in (self._state.missing_positions() if tps is None else tps)
                   if self._state.position(tp) is None]
        if not missing:
            return
        by_strategy: dict[str, list[TopicPartition]] = {}
        need_committed = [tp for tp in missing if self._state.state(tp).reset is None]
        if self.config.group_id is not None and need_committed:
            committed = await self._offsets().fetch_committed(need_committed)
            for tp in need_committed:
                offset = committed.get(tp)
                if offset is not None and self._state.position(tp) is None:
                    self._state.seek(tp, offset)
        for tp in missing:
            if self._state.is_assigned(tp) and self._state.position(tp) is None:
                strategy = self._state.state(tp).reset or self.config.auto_offset_reset
                by_strategy.setdefault(strategy, []).append(tp)
        if "none" in by_strategy:
            raise NoOffsetForPartitionError(by_strategy["none"])
        for strategy, group in by_strategy.items():
            await self.fetcher.reset_offsets(group, strategy)

    # -- pause -------------------------------------------------------------------------

    def pause(self, *tps: TopicPartition) -> None:
        """Stop returning (and fetching) records of these partitions until resumed."""
        for tp in tps:
            self._state.pause(tp)
            if self._group is not None:
                self._group.forget_pause(tp)

    def resume(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self._state.resume(tp)
            if self._group is not None:
                self._group.forget_pause(tp)

    def paused(self) -> set[TopicPartition]:
        return self._state.paused()

    # -- consuming ---------------------------------------------------------------------

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None
                      ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition, at most `max_records` (max_poll_records) in all; waits up
        to `timeout_ms` for some to arrive and returns {} if none did. Positions move past
        what is returned. `partitions`, if given, restricts which assigned partitions
        records are returned for (others stay buffered)."""
        if partitions:
            raise NotImplementedError("getmany(*partitions) is not supported yet")
        if self._group is not None:
            self._group.poll()
        await self._maybe_auto_commit()
        limit = self.config.max_poll_records if max_records is None else max_records
        if limit <= 0:
            raise ValueError(f"max_records must be > 0, got {limit}")
        deadline = trio.current_time() + max(0, timeout_ms) / 1000
        fetcher = self.fetcher
        nursery = self._nursery
        assert nursery is not None
        idle_rounds = 0
        first = True
        # Yield to trio once per call, before anything is drained (a cancellation then
        # loses no record): without it, records already buffered came back without the
        # prefetch task ever running, and the next Fetch went out only once they ran out
        await trio.lowlevel.checkpoint()
        while True:
            fetcher.raise_error()
            self._raise_refused_subscription()
            drained = self._state.drain(limit)
            if drained:
                # prefetch: the partitions that ran low are fetched while the application
                # works on these (Java's Fetcher.sendFetches at the end of poll)
                if any(self._state.runs_low(tp, fetcher.low_water) for tp in drained):
                    await fetcher.prefetch(nursery)
                if self._deserializing:
                    return self._deserialize(drained)
                return drained
            left_ms = int((deadline - trio.current_time()) * 1000)
            if left_ms <= 0 and not first:
                return {}
            first = False
            try:
                with trio.move_on_at(deadline if left_ms > 0 else trio.current_time() + 1):
                    await self._ensure_positions()
                if self._state.has_buffered():
                    continue
                wait_ms = max(0, min(self.config.fetch_max_wait_ms, left_ms))
                sent = await fetcher.send_fetches(nursery, wait_ms)
            except KafkaError as e:
                if not e.retriable:
                    raise
                # a restart, a leader or coordinator move: never the application's problem
                await self._retry_later(e, deadline, idle_rounds)
                idle_rounds += 1
                continue
            if self._state.has_buffered():
                continue  # a prefetch landed meanwhile
            if fetcher.in_flight:
                # a Fetch sent now (long-polling no longer than what is left) is waited for
                # even past the deadline, so that getmany(timeout_ms=0) still fetches once;
                # one sent earlier (a prefetch) only until the deadline
                now = trio.current_time()
                until = (max(deadline, now) + self.config.request_timeout_ms / 1000
                         if sent else deadline)
                with trio.move_on_at(until):
                    await fetcher.wait_for_fetch()
                idle_rounds = 0
                continue
            # Nothing fetchable (all paused, no leader known yet): back off, not spin.
            left = deadline - trio.current_time()
            if left <= 0:
                return {}
            with trio.move_on_after(min(left, self.config.retry_backoff_s(idle_rounds))):
                await self._assigned_event.wait()  # partitions assigned: fetch at once
            if self._group is not None:
                self._group.raise_error()
            idle_rounds += 1

    def _raise_refused_subscription(self) -> None:
        """Java's poll (Metadata.maybeThrowAnyException): subscribed topics the metadata
        refuses for good, TOPIC_AUTHORIZATION_FAILED or INVALID_TOPIC_EXCEPTION, are
        raised (the first such code, naming each topic that has it) rather than waited for
        in silence; once per metadata answer, as Java clears the error once thrown. A
        pattern only ever matches topics the metadata lists."""
        cluster = self._cluster
        if self._subscription is None or self._pattern is not None or cluster is None \
                or self._refusal_raised == cluster.generation:
            return
        errors = cluster.metadata.topic_errors
        refused = [(errors[t], t) for t in self._subscription
                   if t in errors and not errors[t].retriable]
        if refused:
            self._refusal_raised = cluster.generation
            code = refused[0][0]
            names = ", ".join(t for c, t in refused if c is code)
            raise for_code(code, f"subscribed topics: {names}")

    async def _retry_later(self, error: KafkaError, deadline: float, failures: int) -> None:
        """A retriable error inside getmany: log it (rate-limited), ask for fresh metadata
        and back off retry_backoff_ms (doubling to retry_backoff_max_ms), no later than the
        getmany deadline; reconnects wait reconnect_backoff_ms in the pool as well."""
        self._retrying.failed(type(error).__name__, f"getmany: retrying after {error}")
        if self._cluster is not None:
            self._cluster.request_update()
        pause = min(self.config.retry_backoff_s(failures),
                    max(0.0, deadline - trio.current_time()))
        await trio.sleep(pause)

    def _auto_commits(self) -> bool:
        return bool(self.config.enable_auto_commit and self.config.group_id)

    async def _maybe_auto_commit(self) -> None:
        """enable.auto.commit as Java does it: inside the poll, every auto.commit.interval.ms,
        commit the positions of what earlier polls returned."""
        if not self._auto_commits():
            return
        now = trio.current_time()
        if self._next_auto_commit is None:
            self._next_auto_commit = now + self.config.auto_commit_interval_ms / 1000
        elif now >= self._next_auto_commit:
            self._next_auto_commit = now + self.config.auto_commit_interval_ms / 1000
            if self._group is None:
                try:  # one attempt, as Java's commitAsync: the poll must not wait on it
                    await self._commit(None, retry=False)
                except KafkaError as e:  # the next interval commits newer positions
                    if not e.retriable:
                        raise
                    log.warning("auto-commit failed: %s", e)
                return
            # In a group the commit goes out in the background, as Java's commitAsync:
            # during a rebalance it can wait (behind the member's JoinGroup, or refused
            # until the group is stable) and the poll must not. One at a time: the next
            # interval commits newer positions anyway.
            if self._auto_commit_in_flight or self._nursery is None:
                return
            offsets = self._state.positions()
            if offsets:
                self._auto_commit_in_flight = True
                self._nursery.start_soon(self._auto_commit, offsets)

    async def _auto_commit(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            await self._commit(offsets, retry=False)
        except KafkaError as e:  # e.g. a rebalance under way: Java logs and goes on
            log.warning("auto-commit failed: %s", e)
        finally:
            self._auto_commit_in_flight = False

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        while True:
            if self._closed:
                raise StopAsyncIteration
            # the fast path, getmany(max_records=1)'s steps for a record already buffered,
            # without its per-call work (about 9 us a record before)
            if self._group is not None:
                self._group.poll()
            await self._maybe_auto_commit()
            fetcher = self.fetcher
            self._iterated += 1
            if not self._iterated % ITERATION_CHECKPOINT:
                # let the background tasks (fetch responses, heartbeats) run, and a
                # cancellation in, though records may all be buffered; before a record is
                # taken, so that a cancellation never loses one
                await trio.lowlevel.checkpoint()
                if self._nursery is not None:
                    await fetcher.prefetch(self._nursery)
            fetcher.raise_error()
            taken = self._state.next_record(fetcher.low_water)
            if taken is not None:
                return self._deserialize_one(taken[0]) if self._deserializing else taken[0]
            batch = await self.getmany(timeout_ms=self.config.fetch_max_wait_ms,
                                       max_records=1)
            for records in batch.values():
                return records[0]

    # -- committed offsets -------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int | tuple[int, str | None]]
                     | None = None) -> None:
        """Commit `offsets` (tp -> offset, or (offset, metadata)) for group_id; by default
        the current position of every assigned partition that has one. A group member
        that has dropped out of the group (it exceeded max_poll_interval_ms, its session
        expired) gets CommitFailedError, as in Java; its partitions are gone from
        assignment() by then and the next getmany rejoins."""
        await self._commit(offsets, retry=True)

    async def _commit(self, offsets: Mapping | None, retry: bool) -> None:
        """commit(); `retry` False makes one attempt only (a background auto-commit)."""
        self._group_id()
        if self._group is not None and self._closing_group is None:
            self._group.check_can_commit()  # CommitFailedError once out of the group
        if offsets is None:
            offsets = self._state.positions()
        if not offsets:
            return
        owns = self._state.is_assigned if self._group is not None else None
        await self._offsets().commit_offsets(offsets, self._commit_identity, retry=retry,
                                             owns=owns)

    def _commit_identity(self) -> tuple[int, str, str | None]:
        # a member on its way out (close, unsubscribe) commits as itself until it left
        group = self._closing_group or self._group
        return group.commit_identity() if group is not None else STANDALONE

    async def committed(self, tp: TopicPartition) -> int | None:
        """The offset committed for `tp` by group_id, or None if there is none."""
        self._group_id()
        committed = await self._offsets().fetch_committed([tp])
        return committed.get(TopicPartition(tp[0], tp[1]))

    def _group_id(self) -> str:
        if not self.config.group_id:
            raise for_code(ErrorCode.INVALID_GROUP_ID,
                           "committed offsets need a group_id: Consumer(..., group_id=...)")
        return self.config.group_id

    def _offsets(self) -> ConsumerCoordinator:
        if self._coordinator is None:
            raise RuntimeError("the Consumer is not open (use `async with`)")
        return self._coordinator

    # -- what an aiokafka or Java user reaches for: metadata, offsets, group identity ----

    def _deserialize(self, batches: dict[TopicPartition, list[ConsumerRecord]]
                     ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """key_deserializer / value_deserializer on each record (a None stays None)."""
        return {tp: [self._deserialize_one(r) for r in records]
                for tp, records in batches.items()}

    def _deserialize_one(self, r: ConsumerRecord) -> ConsumerRecord:
        kd, vd = self.config.key_deserializer, self.config.value_deserializer
        return r._replace(key=r.key if kd is None or r.key is None else kd(r.key),
                          value=r.value if vd is None or r.value is None else vd(r.value))

    def _open_cluster(self) -> Cluster:
        if self._cluster is None:
            raise RuntimeError("the Consumer is not open (use `async with`)")
        return self._cluster

    async def _refresh_until(self, cluster: Cluster, topics: list[str] | None,
                             done: Any) -> None:
        """Refresh `cluster` (for exactly `topics`, or what it tracks) until `done()` says
        the answer is final, retrying failures with backoff until default_api_timeout_ms
        (Java's partitionsFor / listTopics bound)."""
        budget = self.config.default_api_timeout_ms
        last: KafkaError | None = None
        with trio.move_on_after(budget / 1000):
            attempt = 0
            while True:
                try:
                    await cluster.refresh(topics)
                except KafkaError as e:
                    if not e.retriable:
                        raise
                    last = e
                else:
                    if done():
                        return
                await trio.sleep(self.config.retry_backoff_s(attempt))
                attempt += 1
        raise KafkaTimeoutError(f"no metadata within default_api_timeout_ms {budget} ms"
                                + (f"; last error: {last}" if last else "")) from last

    async def partitions_for(self, topic: str) -> set[int] | None:
        """The partition numbers of `topic`, None if it does not exist (asked of a broker
        when the Consumer's metadata does not have it yet; may auto-create the topic when
        allow_auto_create_topics and the broker allow it, as Java's partitionsFor)."""
        cluster = self._open_cluster()
        if cluster.metadata.partitions_for(topic) is None:
            await self._refresh_until(
                cluster, [topic], lambda: cluster.metadata.exists(topic) is not None)
        partitions = cluster.metadata.partitions_for(topic)
        return None if partitions is None else set(partitions)

    async def topics(self) -> set[str]:
        """The names of every topic in the cluster (one Metadata request for all topics;
        the Consumer's own metadata keeps tracking only what it consumes)."""
        lister = Cluster(self._open_cluster().pool, self.config, topics=None)
        await self._refresh_until(lister, None, lambda: True)
        return set(lister.metadata.topics)

    async def beginning_offsets(self, tps: Iterable[TopicPartition]
                                ) -> dict[TopicPartition, int]:
        """The earliest offset of each partition (assigned or not), from its leader."""
        return await self.fetcher.list_offsets(_partitions(tps), EARLIEST)

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The end of each partition as this consumer reads it: the high watermark under
        read_uncommitted, the last stable offset under read_committed."""
        return await self.fetcher.list_offsets(_partitions(tps), LATEST)

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first record whose timestamp is at or after the given
        one (ms since the epoch): OffsetAndTimestamp(offset, timestamp), or None when no
        record is that recent. Positions do not move (seek() to use the answer)."""
        query = {TopicPartition(tp[0], tp[1]): ts for tp, ts in timestamps.items()}
        for tp, ts in query.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ValueError(f"the timestamp for {tp.topic}-{tp.partition} must be an "
                                 f"int >= 0, got {ts!r}")
        found = await self.fetcher.list_offsets_for(query)
        return {tp: None if found[tp][0] < 0 else OffsetAndTimestamp(*found[tp])
                for tp in query}

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark of an assigned partition as the last Fetch response for it
        said (None before one arrived); no request is sent. As aiokafka's: lag is
        `highwater(tp) - await position(tp)`."""
        return self._state.state(TopicPartition(tp[0], tp[1])).high_watermark

    async def seek_to_committed(self, *tps: TopicPartition
                                ) -> dict[TopicPartition, int | None]:
        """Move each partition (default: every assigned one) to group_id's committed
        offset; one without a committed offset keeps its position. Returns what was
        committed (None: nothing), as aiokafka's."""
        self._group_id()
        wanted = _partitions(tps) if tps else sorted(self.assignment())
        for tp in wanted:
            self._state.state(tp)  # ValueError if not assigned
        committed = await self._offsets().fetch_committed(wanted)
        result: dict[TopicPartition, int | None] = {}
        for tp in wanted:
            offset = result[tp] = committed.get(tp)
            if offset is not None and self._state.is_assigned(tp):
                self._state.seek(tp, offset)
        return result

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Group id, generation, member id and group instance id, as Java's
        groupMetadata() (what a transactional producer sends with the offsets it
        commits). Generation -1 and member id "" outside a generation."""
        group_id = self._group_id()
        group = self._closing_group or self._group
        generation, member_id = -1, ""
        if group is not None and group.member.generation >= 0:
            generation, member_id = group.member.generation, group.member.member_id
        return ConsumerGroupMetadata(group_id, generation, member_id,
                                     self.config.group_instance_id)


def _partitions(tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    return list(dict.fromkeys(TopicPartition(tp[0], tp[1]) for tp in tps))
