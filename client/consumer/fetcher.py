"""The consumer's fetcher: positions of assigned partitions, Fetch and ListOffsets.

Owns: `ConsumerRecord` (what the consumer hands out), `NoOffsetForPartitionError`,
`SubscriptionState` (per assigned partition: position, paused flag, pending reset and the
records fetched but not yet returned) and `Fetcher` (the trio side).

    state = SubscriptionState()
    state.assign([TopicPartition("orders", 0)])
    fetcher = Fetcher(pool, cluster, config, state)
    await fetcher.reset_offsets([tp], "earliest")     # ListOffsets -> positions
    await fetcher.send_fetches(nursery, max_wait_ms=500)   # one Fetch per leader, background
    await fetcher.wait_for_fetch()                      # one of them completed
    state.drain(max_records=500)                        # {tp: [ConsumerRecord, ...]}
    await fetcher.prefetch(nursery)                     # the partitions that ran low

A partition's *position* is the offset of the next record the application will be given.
Fetched records wait in the partition's buffer; `drain` (getmany) and `next_record`
(`async for`) return them and move the position past them. A response's batches are kept
as fetched (only their headers read) and decoded one at a time as the application reaches
them: decoding is most of a consumer's CPU, and records decoded just before they are used
are still in the CPU's caches. A batch that does not decode (CorruptRecordError) is raised
from getmany when reached, and again, until the application seeks past it. Fetches run in the background, at most one per leader at a time (Java's
Fetcher: no new Fetch to a node with one pending). A partition is fetched again once it
holds fewer than max_poll_records buffered records, or fewer than half of what its last
response brought (so that, at the rate a large response is worked through, the next one
is on its way before the buffer runs out), from the end of its buffer; what is buffered
per partition stays below max_poll_records plus one and a half responses
(max_partition_fetch_bytes each). A partition's first Fetch (since assigned or sought) asks
for an eighth of max_partition_fetch_bytes, so that its first records are decoded while the
next, full one is on its way. A prefetch (sent by getmany as it returns records) asks only
for partitions the last response showed to be behind the high watermark: one that is
caught up would make the broker hold the Fetch for fetch_max_wait_ms and keep the leader's
other partitions waiting behind it.

A response is kept for a partition only if it still is what it was when the Fetch went
out: the same assignment, the same epoch (bumped by seek, reset and StopFetching, which
drop the buffer) and the same fetch position; otherwise it is discarded. Records below
the position (a fetch may return a batch that starts earlier) and control batches are
skipped; when a response holds nothing to return (only control records, say), the
position moves past the batches it did hold.

Errors per partition (data, not exceptions, docs/ARCHITECTURE.md §7): OFFSET_OUT_OF_RANGE
resets the partition by auto_offset_reset once its buffer is drained ('none':
OffsetOutOfRangeError is raised from the next getmany); NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION and the other
metadata-refreshing codes request a metadata refresh and the partition is fetched again
later. An error met by a background Fetch is kept and raised from the next getmany
(`raise_error`).

isolation_level (isolation.py): read_uncommitted (the default) returns every data record
below the high watermark. read_committed sends Fetch and ListOffsets with isolation level
1: the leader returns records below the last stable offset only, and the fetcher drops
the batches of aborted transactions (`committed_batches`, as Java's CompletedFetch);
prefetching then counts a partition as behind while it is below the last stable offset,
and a latest reset or end_offsets is the last stable offset.

Fetches to a broker go through an incremental fetch session (KIP-227,
protocol.fetch_session), as Java's consumer does: a Fetch names only the partitions whose
offset or size changed since the last one, and forgets those not fetched this time (a
full buffer, paused); the answer holds only the partitions with something to say.
FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH or a lost connection make the next
Fetch to that broker a full one, which opens a new session. Fetch v12 (topic names).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import trio

from client.cluster import Cluster
from client.connection import ConnectionPool
from client.consumer.config import ConsumerConfig
from client.consumer.isolation import READ_COMMITTED, committed_batches, isolation_level
from client.errors import (
    KafkaConnectionError, KafkaError, KafkaTimeoutError, error_class, for_code,
)
from client.types import TopicPartition
from protocol.errors import ErrorCode
from protocol.fetch_session import FetchSessionHandler
from protocol.messages import FETCH, LIST_OFFSETS
from protocol.records import BatchHeader, RecordError, decode_batch_rows, row_batches

__all__ = ["ConsumerRecord", "Fetcher", "NoOffsetForPartitionError", "NoOffsetForPartition",
           "SubscriptionState", "EARLIEST", "LATEST"]

# a partition's first Fetch (since assigned or sought) asks for this fraction of
# max_partition_fetch_bytes
FIRST_FETCH_DIVISOR = 8
EARLIEST = -2  # ListOffsets timestamps
LATEST = -1
FETCH_SESSION_VERSION = 7  # session id and epoch (KIP-227)


class ConsumerRecord(NamedTuple):
    """One consumed record (immutable). timestamp_type: 0 CreateTime, 1 LogAppendTime.

    A named tuple, as kafka-python's is: the fetcher builds one per record, and a tuple is
    built several times faster than a frozen dataclass (protocol.records.decode_batch_rows
    builds them: the field order is its row layout)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class NoOffsetForPartitionError(error_class(ErrorCode.OFFSET_OUT_OF_RANGE)):  # type: ignore[misc]
    """A partition has no position, no committed offset, and auto_offset_reset is 'none'
    (Java's NoOffsetForPartitionException). `.partitions` lists them."""

    def __init__(self, partitions: Iterable[TopicPartition]):
        self.partitions = sorted(set(partitions))
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in self.partitions)
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"no offset for partitions {names} and auto_offset_reset is 'none'")


NoOffsetForPartition = NoOffsetForPartitionError


# -- per-partition state ------------------------------------------------------------------

class _PartitionState:
    __slots__ = ("position", "paused", "reset", "buffer", "batches", "batched",
                 "after_buffer", "epoch", "high_watermark", "last_stable_offset", "refill")

    def __init__(self) -> None:
        self.position: int | None = None
        self.paused = False
        self.reset: str | None = None  # a pending reset strategy (skips committed offsets)
        self.buffer: deque[ConsumerRecord] = deque()  # decoded, next to be returned
        # fetched batches not decoded yet, after the buffer: (data, position in it,
        # header, fetch offset, records expected); decoded one at a time as the
        # application reaches them, so that what is decoded is used while still in the
        # CPU's caches, and a response's records are not all alive at once
        self.batches: deque[tuple[Any, int, BatchHeader, int, int]] = deque()
        self.batched = 0  # the records expected in `batches`
        self.after_buffer: int | None = None  # the position once the buffer is drained
        # bumped whenever the buffer is dropped (seek, reset, stop): a fetch sent before
        # carries an older epoch and its response is discarded
        self.epoch = 0
        self.high_watermark: int | None = None  # as the last Fetch response said
        # read_committed only: where what may be read ends, as the last response said
        self.last_stable_offset: int | None = None
        # fetch again below this many buffered records: half of what the last response
        # brought, so that the next one is on its way while the rest is worked on
        self.refill = 0

    def set_position(self, offset: int) -> None:
        self.position = offset
        self.reset = None
        self.drop_buffer()

    def drop_buffer(self) -> None:
        self.buffer.clear()
        self.batches.clear()
        self.batched = 0
        self.after_buffer = None
        self.refill = 0
        self.epoch += 1

    def fetch_position(self) -> int | None:
        """Where the next fetch starts: after what is buffered, else the position."""
        if (self.buffer or self.batches) and self.after_buffer is not None:
            return self.after_buffer
        return self.position

    def buffered(self) -> int:
        """Records fetched and not returned yet (those of undecoded batches as their
        headers count them)."""
        return len(self.buffer) + self.batched

    def decode_for(self, tp: TopicPartition, wanted: int) -> None:
        """Decode fetched batches into the buffer until it holds `wanted` records or none
        is left. A batch that fails to decode (CorruptRecordError) is raised once the
        records before it are returned, and stays first in line, so that the error is
        raised again rather than its records skipped."""
        buffer, batches = self.buffer, self.batches
        while len(buffer) < wanted and batches:
            data, pos, header, fetch_offset, expected = batches[0]
            try:
                rows = decode_batch_rows(data, pos, header, ConsumerRecord, tp.topic,
                                         tp.partition, fetch_offset)
            except RecordError:
                if buffer:
                    return  # these first; the error when the application reaches it
                raise
            batches.popleft()
            self.batched -= expected
            buffer.extend(rows)

    def drained(self) -> None:
        """The buffer ran out: once no batch is left either, the position moves past
        what the last response held (control batches, records compacted away)."""
        if not self.batches and self.after_buffer is not None:
            if self.position is None or self.after_buffer > self.position:
                self.position = self.after_buffer
            self.after_buffer = None


class SubscriptionState:
    """The assigned partitions and their positions (pure; no I/O)."""

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _PartitionState] = {}
        self._rotation = 0
        # next_record's partition and how many more records it takes from it in a row
        self._current: tuple[TopicPartition, _PartitionState] | None = None
        self._current_left = 0

    # assignment
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = list(dict.fromkeys(partitions))
        old = self._parts
        self._parts = {tp: old.get(tp) or _PartitionState() for tp in wanted}

    def assignment(self) -> set[TopicPartition]:
        return set(self._parts)

    def topics(self) -> set[str]:
        return {tp.topic for tp in self._parts}

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._parts

    def state(self, tp: TopicPartition) -> _PartitionState:
        try:
            return self._parts[tp]
        except KeyError:
            raise ValueError(f"partition {tp.topic}-{tp.partition} is not assigned to "
                             f"this consumer") from None

    # positions
    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"seek offset must be >= 0, got {offset}")
        self.state(tp).set_position(offset)

    def request_reset(self, tp: TopicPartition, strategy: str) -> None:
        s = self.state(tp)
        s.set_position(0)
        s.position = None
        s.reset = strategy

    def position(self, tp: TopicPartition) -> int | None:
        return self.state(tp).position

    def positions(self, tps: Iterable[TopicPartition] | None = None
                  ) -> dict[TopicPartition, int]:
        """The position of each of `tps` (default: every assigned partition) that is
        assigned and has one."""
        if tps is None:
            return {tp: s.position for tp, s in self._parts.items() if s.position is not None}
        return {tp: s.position for tp in tps
                if (s := self._parts.get(tp)) is not None and s.position is not None}

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, s in self._parts.items() if s.position is None]

    # pause
    def pause(self, tp: TopicPartition) -> None:
        self.state(tp).paused = True

    def resume(self, tp: TopicPartition) -> None:
        self.state(tp).paused = False

    def stop(self, tp: TopicPartition) -> None:
        """Pause `tp` and drop its buffered records (its position stays)."""
        s = self.state(tp)
        s.paused = True
        s.drop_buffer()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._parts.items() if s.paused}

    # fetching
    def fetchable(self, low_water: int = 1, exclude: Iterable[TopicPartition] = (), *,
                  behind_only: bool = False) -> dict[TopicPartition, int]:
        """Partitions to fetch now, with the offset to fetch from: unpaused, with a
        position, fewer than `low_water` records buffered (1: an empty buffer), and not in
        `exclude` (a fetch for them is in flight). `behind_only`: only those the last
        response said have records past the fetch position (below the high watermark; under
        read_committed below the last stable offset)."""
        excluded = set(exclude)
        out = {}
        for tp, s in self._parts.items():
            if s.paused or s.position is None or tp in excluded or \
                    len(s.buffer) + s.batched >= max(low_water, s.refill):
                continue
            offset = s.fetch_position()
            assert offset is not None  # the position is known, checked above
            end = s.high_watermark if s.last_stable_offset is None else s.last_stable_offset
            if behind_only and (end is None or offset >= end):
                continue
            out[tp] = offset
        return out

    def fetch_mark(self, tp: TopicPartition) -> tuple[Any, int]:
        """What a response for `tp` must still find to be kept (see Fetcher)."""
        s = self._parts[tp]
        return s, s.epoch

    def buffered(self, tp: TopicPartition) -> int:
        """How many fetched records of `tp` wait to be returned (0 if not assigned)."""
        s = self._parts.get(tp)
        return 0 if s is None else s.buffered()

    def runs_low(self, tp: TopicPartition, low_water: int) -> bool:
        """Whether `tp` holds few enough records to be fetched again (fetchable's rule:
        below low_water, or below half of what its last response brought)."""
        s = self._parts.get(tp)
        return s is not None and s.buffered() < max(low_water, s.refill)

    def has_buffered(self) -> bool:
        return any((s.buffer or s.batches) and not s.paused for s in self._parts.values())

    def next_record(self, in_a_row: int = 500) -> tuple[ConsumerRecord, int] | None:
        """One buffered record of an unpaused partition, its position moved past it, and
        how many records that partition has left buffered; None when nothing is buffered.
        Iteration's per-record step: it takes up to `in_a_row` records from one partition,
        then moves on to the next with records, in turn as drain does, so that a partition
        refilled by prefetch does not starve the others."""
        current = self._current
        if current is not None and self._current_left > 0:
            tp, s = current
            if s.paused or self._parts.get(tp) is not s:
                current = None
            elif not s.buffer:
                s.decode_for(tp, 1)
                if not s.buffer:
                    s.drained()
                    current = None
        else:
            current = None
        if current is None:
            items = list(self._parts.items())
            if not items:
                return None
            start = self._rotation % len(items)
            self._rotation += 1
            for tp, s in itertools.chain(items[start:], items[:start]):
                if s.paused:
                    continue
                if not s.buffer and s.batches:
                    s.decode_for(tp, 1)
                    if not s.buffer:
                        s.drained()
                if s.buffer:
                    self._current = (tp, s)
                    self._current_left = in_a_row
                    break
            else:
                self._current = None
                return None
        self._current_left -= 1
        buffer = s.buffer
        record = buffer.popleft()
        s.position = record.offset + 1
        if not buffer:
            s.decode_for(tp, 1)
            if not buffer:
                s.drained()
        return record, len(buffer) + s.batched

    def drain(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Buffered records of unpaused partitions, at most `max_records`, taking from the
        partitions in turn; positions move past what is returned."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        items = list(self._parts.items())
        if not items:
            return out
        start = self._rotation % len(items)
        self._rotation += 1
        left = max_records
        for tp, s in itertools.chain(items[start:], items[:start]):
            if left <= 0:
                break
            if s.paused or not (s.buffer or s.batches):
                continue
            s.decode_for(tp, left)
            buffer = s.buffer
            if not buffer:
                s.drained()
                continue
            if len(buffer) <= left:
                taken = list(buffer)
                buffer.clear()
            else:  # two copies in C rather than a popleft per record
                taken = list(itertools.islice(buffer, left))
                s.buffer = buffer = deque(itertools.islice(buffer, left, None))
            left -= len(taken)
            out[tp] = taken
            s.position = taken[-1].offset + 1
            if not buffer:
                s.drained()
        return out


# -- the trio side --------------------------------------------------------------------------

class Fetcher:
    """Sends Fetch and ListOffsets for the assigned partitions (see the module docstring)."""

    def __init__(self, pool: ConnectionPool, cluster: Cluster, config: ConsumerConfig,
                 state: SubscriptionState):
        self.pool = pool
        self.cluster = cluster
        self.config = config
        self.state = state
        # node id -> {tp: (fetch offset, partition state, epoch)} of its Fetch in flight
        self._in_flight: dict[int, dict[TopicPartition, tuple]] = {}
        self._fetch_done = trio.Event()  # set (and replaced) as each Fetch completes
        self._sessions: dict[int, FetchSessionHandler[TopicPartition]] = {}  # by node
        self.error: KafkaError | None = None  # met by a background Fetch, for getmany
        self.isolation_level = isolation_level(config.isolation_level)

    async def _leaders(self, tps: Iterable[TopicPartition]
                       ) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
        """Group partitions by leader node; also return those without a known leader."""
        self.cluster.add_topics({tp.topic for tp in tps})
        metadata = await self.cluster.maybe_refresh()
        by_node: dict[int, list[TopicPartition]] = {}
        unknown = []
        for tp in tps:
            leader = metadata.leader_for(tp.topic, tp.partition)
            if leader is None or leader not in self.pool.nodes:
                unknown.append(tp)
            else:
                by_node.setdefault(leader, []).append(tp)
        if unknown:
            self.cluster.request_update()
        return by_node, unknown

    # -- ListOffsets -------------------------------------------------------------------

    async def list_offsets(self, tps: Iterable[TopicPartition], timestamp: int,
                           timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The earliest (-2) or latest (-1) offset of each partition from its leader,
        retrying leader changes and connection failures until default_api_timeout_ms."""
        found = await self.list_offsets_for({tp: timestamp for tp in tps}, timeout_ms)
        return {tp: offset for tp, (offset, _) in found.items()}

    async def list_offsets_for(self, query: Mapping[TopicPartition, int],
                               timeout_ms: int | None = None
                               ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets with a timestamp per partition (-2 earliest, -1 latest, else the
        first record at or after that time): tp -> (offset, timestamp) as the leader
        answers (offset -1 when no record is that recent; timestamp -1 for -2 / -1).
        Retries leader changes and connection failures until default_api_timeout_ms."""
        remaining = list(query)
        found: dict[TopicPartition, tuple[int, int]] = {}
        budget = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = trio.current_time() + budget / 1000
        tries = 0
        last: KafkaError | None = None
        while remaining:
            if trio.current_time() >= deadline:
                raise KafkaTimeoutError(
                    f"ListOffsets for {len(remaining)} partitions did not complete within "
                    f"{budget} ms" + (f"; last error: {last}" if last else "")) from last
            with trio.move_on_at(deadline):
                by_node, unknown = await self._leaders(remaining)
                for node_id, node_tps in by_node.items():
                    try:
                        got, err = await self._list_offsets_on(
                            node_id, {tp: query[tp] for tp in node_tps})
                    except (KafkaConnectionError, KafkaTimeoutError) as e:
                        last = e
                        self.cluster.request_update()
                        continue
                    found.update(got)
                    last = err or last
            remaining = [tp for tp in remaining if tp not in found]
            if remaining:
                await trio.sleep(min(self.config.retry_backoff_s(tries),
                                     max(0.0, deadline - trio.current_time())))
                tries += 1
        return found

    async def _list_offsets_on(self, node_id: int, query: Mapping[TopicPartition, int]
                               ) -> tuple[dict[TopicPartition, tuple[int, int]],
                                          KafkaError | None]:
        conn = await self.pool.get(node_id)
        version = conn.version_for(LIST_OFFSETS)
        topics: dict[str, list] = {}
        for tp, timestamp in query.items():
            topics.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "timestamp": timestamp,
                 "max_num_offsets": 1})
        resp = await conn.request(LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": self.isolation_level,
            # v10: how long a broker may spend on a lookup in remote storage, as Java's
            # consumer gives it its request timeout (0 would time such lookups out at once)
            "timeout_ms": self.config.request_timeout_ms,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}, version)
        found: dict[TopicPartition, tuple[int, int]] = {}
        error: KafkaError | None = None
        for t in resp.body.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                code = ErrorCode.of(p.error_code)
                if code is not ErrorCode.NONE:
                    e = for_code(code, f"ListOffsets {t.name}-{p.partition_index}")
                    if not e.retriable:
                        raise e
                    self.cluster.note_error(code)
                    error = e
                    continue
                if version == 0:
                    offsets = p.get("old_style_offsets") or []
                    if not offsets:
                        continue
                    found[tp] = (offsets[0], -1)
                else:
                    found[tp] = (p.offset, p.timestamp)
        return found, error

    async def reset_offsets(self, tps: Iterable[TopicPartition], strategy: str) -> None:
        """Set positions by `strategy` ('earliest' / 'latest'; 'none' raises
        NoOffsetForPartitionError)."""
        tps = list(tps)
        if not tps:
            return
        if strategy == "none":
            raise NoOffsetForPartitionError(tps)
        offsets = await self.list_offsets(tps, EARLIEST if strategy == "earliest" else LATEST)
        for tp, offset in offsets.items():
            if self.state.is_assigned(tp) and self.state.position(tp) is None:
                self.state.seek(tp, offset)

    # -- Fetch -------------------------------------------------------------------------

    @property
    def low_water(self) -> int:
        """A partition is fetched again once it holds fewer buffered records than this, so
        that the next response is on its way before the application runs out."""
        return max(1, self.config.max_poll_records)

    @property
    def in_flight(self) -> bool:
        return bool(self._in_flight)

    def raise_error(self) -> None:
        """Raise (once) the error a background fetch met (OFFSET_OUT_OF_RANGE with
        auto_offset_reset 'none', an authorization error, ...)."""
        error, self.error = self.error, None
        if error is not None:
            raise error

    async def wait_for_fetch(self) -> None:
        """Return once a fetch in flight has completed (its records are buffered)."""
        await self._fetch_done.wait()

    async def send_fetches(self, nursery: trio.Nursery, max_wait_ms: int) -> bool:
        """Send a Fetch, in the background (`nursery`), to every leader of a fetchable
        partition that has none in flight; the response fills the partitions' buffers.
        Returns whether any Fetch was sent."""
        return await self._send(nursery, max_wait_ms, prefetch=False)

    async def prefetch(self, nursery: trio.Nursery) -> bool:
        """send_fetches while the application still has records to work on: only for the
        partitions that ran low and are known to have more (below the high watermark), so
        that the broker answers at once instead of holding a long poll that would keep the
        leader's other partitions waiting; and with the cached metadata, so that nothing
        is awaited before getmany returns."""
        return await self._send(nursery, self.config.fetch_max_wait_ms, prefetch=True)

    async def _send(self, nursery: trio.Nursery, max_wait_ms: int, prefetch: bool) -> bool:
        busy = [tp for sent in self._in_flight.values() for tp in sent]
        wanted = self.state.fetchable(self.low_water, busy, behind_only=prefetch)
        if not wanted:
            return False
        if prefetch:
            by_node = self._leaders_cached(wanted)
        else:
            by_node, _ = await self._leaders(list(wanted))
        sent_any = False
        for node_id, tps in by_node.items():
            if node_id in self._in_flight:
                continue
            # positions may have moved while the metadata was refreshed: read them now
            now = self.state.fetchable(self.low_water, busy, behind_only=prefetch)
            sent = {tp: (now[tp], *self.state.fetch_mark(tp)) for tp in tps if tp in now}
            if not sent:
                continue
            self._in_flight[node_id] = sent
            nursery.start_soon(self._fetch_task, node_id, sent, max_wait_ms)
            sent_any = True
        return sent_any

    def _leaders_cached(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        metadata = self.cluster.metadata
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            leader = metadata.leader_for(tp.topic, tp.partition)
            if leader is not None and leader in self.pool.nodes:
                by_node.setdefault(leader, []).append(tp)
        return by_node

    async def _fetch_task(self, node_id: int, sent: dict[TopicPartition, tuple],
                          max_wait_ms: int) -> None:
        try:
            await self._fetch_from(node_id, sent, max_wait_ms)
        except (KafkaConnectionError, KafkaTimeoutError):
            self.cluster.request_update()
            session = self._sessions.get(node_id)
            if session is not None:
                session.handle_error()  # the broker may or may not have taken it
        except KafkaError as e:
            if self.error is None:
                self.error = e
        finally:
            del self._in_flight[node_id]
            done, self._fetch_done = self._fetch_done, trio.Event()
            done.set()

    async def _fetch_from(self, node_id: int, sent: dict[TopicPartition, tuple],
                          max_wait_ms: int) -> None:
        conn = await self.pool.get(node_id)
        version = conn.version_for(FETCH)
        session = self._sessions.get(node_id)
        if session is None or session.use_sessions != (version >= FETCH_SESSION_VERSION):
            session = self._sessions[node_id] = FetchSessionHandler(
                use_sessions=version >= FETCH_SESSION_VERSION)
        full = self.config.max_partition_fetch_bytes
        session.want({tp: {
            "partition": tp.partition, "current_leader_epoch": -1,
            "fetch_offset": offset, "last_fetched_epoch": -1, "log_start_offset": -1,
            # a partition's first Fetch asks for a part only, so that its first records
            # are decoded while the next, full one is on its way (a whole first
            # response of every partition kept the application waiting for all of it)
            "partition_max_bytes": full if state.refill else
            max(1, full // FIRST_FETCH_DIVISOR)} for tp, (offset, state, _) in sent.items()})
        plan = session.build()
        topics: dict[str, list] = {}
        for tp, data in plan.partitions.items():
            topics.setdefault(tp.topic, []).append(data)
        forgotten: dict[str, list] = {}
        for tp in plan.forgotten:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        body = {
            "cluster_id": None, "replica_id": -1, "max_wait_ms": max_wait_ms,
            "min_bytes": self.config.fetch_min_bytes, "max_bytes": self.config.fetch_max_bytes,
            "isolation_level": self.isolation_level, "session_id": plan.session_id,
            "session_epoch": plan.epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps}
                                      for t, ps in forgotten.items()],
            "rack_id": self.config.client_rack}
        resp = await conn.request(FETCH, body, version,
                                  timeout_ms=self.config.request_timeout_ms + max_wait_ms)
        top = ErrorCode.of(resp.body.get("error_code", 0))
        if not session.handle_response(plan, top, resp.body.get("session_id", 0)):
            # a session error only means the next Fetch is a full one
            if top not in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                           ErrorCode.INVALID_FETCH_SESSION_EPOCH):
                self.cluster.note_error(top)
                if not top.retriable:
                    raise for_code(top, f"Fetch from node {node_id}")
            return
        for t in resp.body.responses:
            for p in t.partitions:
                self._handle_partition(TopicPartition(t.topic, p.partition_index), p, sent)

    def _handle_partition(self, tp: TopicPartition, p: Any,
                          sent: dict[TopicPartition, tuple]) -> None:
        if tp not in sent:
            return
        fetch_offset, sent_state, epoch = sent[tp]
        s = self.state._parts.get(tp)
        if s is not sent_state or s.epoch != epoch or s.fetch_position() != fetch_offset:
            return  # unassigned, sought, reset or stopped while the fetch was in flight
        code = ErrorCode.of(p.error_code)
        if code is ErrorCode.NONE:
            s.high_watermark = p.high_watermark
            if self.isolation_level == READ_COMMITTED:
                lso = p.get("last_stable_offset", -1)
                s.last_stable_offset = lso if lso >= 0 else p.high_watermark
        if code is ErrorCode.OFFSET_OUT_OF_RANGE:
            if s.buffer or s.batches:
                return  # what is buffered is still good; the error comes back after it
            strategy = self.config.auto_offset_reset
            if strategy == "none":
                raise for_code(code, f"fetch offset {fetch_offset} is out of range for "
                                     f"{tp.topic}-{tp.partition} and auto_offset_reset is "
                                     f"'none'")
            self.state.request_reset(tp, strategy)
            return
        if code is not ErrorCode.NONE:
            if self.cluster.note_error(code) or code.retriable:
                return
            raise for_code(code, f"Fetch {tp.topic}-{tp.partition}")
        data = p.records
        if not data:
            return
        # headers only: the records are decoded as the application reaches them
        if self.isolation_level == READ_COMMITTED:
            found, next_offset = committed_batches(
                data, fetch_offset, [(a.producer_id, a.first_offset)
                                     for a in p.get("aborted_transactions") or ()])
        else:
            found, next_offset = row_batches(data, fetch_offset)
        if found:
            fetched = 0
            for pos, header in found:
                expected = header.last_offset + 1 - max(header.base_offset, fetch_offset)
                s.batches.append((data, pos, header, fetch_offset, expected))
                fetched += expected
            s.batched += fetched
            s.refill = fetched // 2
            s.after_buffer = next_offset
        elif s.buffer or s.batches:
            s.after_buffer = max(fetch_offset, next_offset)
        else:
            s.position = max(fetch_offset, next_offset)
