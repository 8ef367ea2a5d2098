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
revoke, LeaveGroup (dynamic members), bounded by 30 s.

unsubscribe() leaves the group (see its docstring); subscribe() afterwards joins again.

subscribe(pattern=...) follows the topics whose names match (see subscribe()).

Prefetching: as Java's Fetcher, a Fetch goes to each leader as soon as one of its partitions
holds fewer than max_poll_records buffered records (or fewer than half of its last
response), at most one per leader at a time, in the background: getmany returns what is
buffered while the next response is on its way (each getmany yields to trio once, before
it drains anything, so that the Fetch task runs). What is buffered per partition is
bounded by max_poll_records plus one and a half responses (max_partition_fetch_bytes). seek(), a reset and a revocation drop a partition's buffer,
and the response of a Fetch sent before is discarded for it.

Not yet: read_committed.
"""

from __future__ import annotations

import logging
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
    ConsumerRecord, Fetcher, NoOffsetForPartitionError, SubscriptionState,
)
from client.errors import KafkaError, KafkaTimeoutError, for_code
from client.types import TopicPartition
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
        self._exit_stack: AsyncExitStack | None = None  # what __aenter__ opened
        self._nursery: trio.Nursery | None = None
        self._assigned_event = trio.Event()
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

    async def _close_membership(self) -> None:
        group, self._group = self._group, None
        if self._leaving is not None:
            with trio.CancelScope(shield=True):
                await self._leaving.wait()
        if group is not None:
            # member.close(): auto-commit, revoke, LeaveGroup; commit() still works here
            self._closing_group = group
            try:
                await group.close()
            finally:
                self._closing_group = None
        elif self._auto_commits():
            # Java's close() commits the positions of what was consumed, when
            # auto-committing
            with trio.move_on_after(self.config.default_api_timeout_ms / 1000):
                try:
                    await self.commit()
                except KafkaError as e:
                    log.warning("auto-commit on close failed: %s", e)

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
            drained = self._state.drain(limit)
            if drained:
                # prefetch: the partitions that ran low are fetched while the application
                # works on these (Java's Fetcher.sendFetches at the end of poll)
                if any(self._state.runs_low(tp, fetcher.low_water) for tp in drained):
                    await fetcher.prefetch(nursery)
                return drained
            left_ms = int((deadline - trio.current_time()) * 1000)
            if left_ms <= 0 and not first:
                return {}
            first = False
            with trio.move_on_at(deadline if left_ms > 0 else trio.current_time() + 1):
                await self._ensure_positions()
            if self._state.has_buffered():
                continue
            wait_ms = max(0, min(self.config.fetch_max_wait_ms, left_ms))
            sent = await fetcher.send_fetches(nursery, wait_ms)
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
                await self.commit()
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
                return taken[0]
            batch = await self.getmany(timeout_ms=self.config.fetch_max_wait_ms,
                                       max_records=1)
            for records in batch.values():
                return records[0]

    # -- committed offsets -------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int | tuple[int, str | None]]
                     | None = None) -> None:
        """Commit `offsets` (tp -> offset, or (offset, metadata)) for group_id; by default
        the current position of every assigned partition that has one."""
        await self._commit(offsets, retry=True)

    async def _commit(self, offsets: Mapping | None, retry: bool) -> None:
        """commit(); `retry` False makes one attempt only (a background auto-commit)."""
        self._group_id()
        if offsets is None:
            offsets = self._state.positions()
        if not offsets:
            return
        await self._offsets().commit_offsets(offsets, self._commit_identity, retry=retry)

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
