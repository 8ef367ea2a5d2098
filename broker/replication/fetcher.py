"""Followers fetching from leaders (Kafka's ReplicaFetcherManager and ReplicaFetcherThread).

Owns `ReplicaFetcherManager` and `ReplicaFetcher`. A broker runs one fetcher per source
broker and fetcher id: a partition goes to fetcher hash(topic, partition) %
num.replica.fetchers of its leader, so each leader gets that many connections from this
broker, each batching all its partitions into one Fetch request.

Each partition starts in the truncating state. The fetcher asks the leader, with
OffsetForLeaderEpoch, where this replica's latest epoch ends in the leader's log and cuts
its log there (broker.replication.truncation: KIP-101, with KIP-279's further rounds when
the leader does not know the epoch). Only then does it fetch, from its LEO. The HW alone
never decides a truncation, except for a log that has no epochs to ask about.

Fetching goes through an incremental fetch session with the leader (KIP-227,
protocol.fetch_session): the first request names every partition ready to fetch, the next
ones only those whose fetch offset or epoch changed (after an append or a truncation), were
added, or are forgotten (removed, backing off, truncating); the leader answers only the
partitions with records, a new HW or an error. So a follower of 1,000 idle partitions sends
and reads a few bytes per round, and only the partitions that moved cost work. The
fetcher keeps which partitions are truncating, out of range or backing off in sets of
their own, so a round never walks all its partitions. A session error
(FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) or a lost connection makes the
next request a full one, which opens a new session.

A fetch (Fetch v17: topics by id) names this broker and its broker epoch in ReplicaState,
waits at the leader up to replica.fetch.wait.max.ms for replica.fetch.min.bytes, and asks
for replica.fetch.max.bytes per partition. After an answer with records the follower asks
again at once, carrying its new fetch offset: that is what advances the leader's HW and
completes an acks=all produce. Each partition of the answer is handled alone:
- records are appended with the leader's offsets and epochs, and the HW taken from the
  answer (bounded by this log's end) wakes local readers when it moves;
- OFFSET_OUT_OF_RANGE below the leader's log start starts this log over there; above
  the leader's log end (a leader that had no epoch to answer with) the follower asks the
  leader's LEO with ListOffsets and truncates to it, as Kafka's fetcher does;
- NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH and UNKNOWN_LEADER_EPOCH mean the metadata
  is moving: the partition waits replica.fetch.backoff.ms (the new image re-adds it
  wherever its new leader is);
- a disk that refuses the append (KAFKA_STORAGE_ERROR) stops fetching the partition.
An unreachable leader backs the whole fetcher off the same way.

A partition this broker is not in the ISR of and whose follower replication throttle is
exceeded (broker.replication.quota, KIP-73) sits out the fetches until the rate is back
under the bound.
"""

from __future__ import annotations

import logging
import uuid
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from broker import timeouts
from broker.log.errors import KafkaStorageError
from broker.net.peer import PeerChannel, PeerUnavailable
from broker.replication.truncation import epoch_to_request, truncation_offset
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.fetch_session import FetchSessionHandler
from protocol.record_errors import RecordError
from broker import planted

if TYPE_CHECKING:
    from broker.partition import Partition

# the broker (broker.broker.Broker) is typed loosely: it imports this module
Broker = Any

log = logging.getLogger("minibroker.replication.fetcher")

FETCH_VERSION = 17  # topics by id (v13+), ReplicaState with the broker epoch (v15+)
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 7
_RETRY_LATER = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.UNKNOWN_TOPIC_ID)
# answers that only mean the session is gone: the next (full) request may go at once
_SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                   ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)


def fetcher_id(topic: str, index: int, num_fetchers: int) -> int:
    """Which of a leader's fetchers carries this partition (stable across restarts)."""
    return (zlib.crc32(topic.encode()) * 31 + index) % num_fetchers


@dataclass(slots=True)
class FetchState:
    partition: Partition
    leader_epoch: int
    truncating: bool = True
    next_epoch: int = -2  # the epoch to ask about next while truncating (-2: the latest)
    delayed_until: float = 0.0  # trio clock
    failed: bool = False
    out_of_range: bool = False  # the leader's log ends before our fetch offset


class ReplicaFetcher:
    def __init__(self, broker: Broker, source: int, fid: int):
        self.broker = broker
        self.source = source
        self.fid = fid
        self.partitions: dict[tuple[str, int], FetchState] = {}
        # the partitions in each state that is not "fetching", so a round finds them
        # without walking every partition
        self._truncating: set[tuple[str, int]] = set()
        self._out_of_range: set[tuple[str, int]] = set()
        self._delayed: dict[tuple[str, int], FetchState] = {}
        self._paused_until = 0.0  # the whole fetcher backs off (leader unreachable)
        self.session: FetchSessionHandler[tuple[str, int]] = FetchSessionHandler()
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._names: dict[uuid.UUID, str] = {}
        self._changed = trio.Event()
        self._channel: PeerChannel | None = None
        self._address: tuple[str, int] | None = None

    def __repr__(self) -> str:
        return f"<ReplicaFetcher from broker {self.source} #{self.fid}: {len(self.partitions)}>"

    def add(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self._forget(key)
        self.partitions[key] = FetchState(partition, partition.leader_epoch)
        self._truncating.add(key)
        self._changed.set()

    def remove(self, key: tuple[str, int]) -> None:
        if self.partitions.pop(key, None) is not None:
            self._forget(key)
            self._changed.set()

    def _forget(self, key: tuple[str, int]) -> None:
        self._truncating.discard(key)
        self._out_of_range.discard(key)
        self._delayed.pop(key, None)
        self.session.remove(key)

    # -- the states ------------------------------------------------------------------------

    def _fetching(self, s: FetchState) -> bool:
        return (not s.truncating and not s.failed and not s.out_of_range
                and s.delayed_until <= trio.current_time()
                and self.partitions.get(_key(s)) is s)

    def _sync(self, s: FetchState) -> None:
        """Tell the session whether `s` is to be fetched now, and from where."""
        key = _key(s)
        if self.partitions.get(key) is not s:
            return  # replaced or removed: the newer state speaks for the key
        if s.truncating:
            self._truncating.add(key)
        else:
            self._truncating.discard(key)
        if s.out_of_range:
            self._out_of_range.add(key)
        else:
            self._out_of_range.discard(key)
        topic_id = self._topic_id(s.partition.topic)
        if not self._fetching(s) or topic_id is None:
            self.session.remove(key)
            return
        p = s.partition
        latest = p.epochs.latest_epoch
        self.session.set(key, {
            "partition": p.index, "current_leader_epoch": s.leader_epoch,
            "fetch_offset": p.log_end_offset,
            "last_fetched_epoch": latest if latest is not None else -1,
            "log_start_offset": p.log_start_offset,
            "partition_max_bytes": self.broker.config.replica_fetch_max_bytes})

    def _topic_id(self, name: str) -> uuid.UUID | None:
        image = self.broker.metadata_cache.topic(name)
        if image is None:
            return self._topic_ids.get(name)
        if self._topic_ids.get(name) != image.topic_id:
            self._topic_ids[name] = image.topic_id
            self._names[image.topic_id] = name
        return image.topic_id

    def _delay(self, s: FetchState, seconds: float) -> None:
        s.delayed_until = max(s.delayed_until, trio.current_time() + seconds)
        self._delayed[_key(s)] = s
        self._sync(s)

    def _expire_delays(self, now: float) -> None:
        for key, s in list(self._delayed.items()):
            if s.delayed_until <= now:
                del self._delayed[key]
                self._sync(s)

    # -- the loop --------------------------------------------------------------------------

    async def run(self, nursery: trio.Nursery) -> None:
        config = self.broker.config
        backoff = config.replica_fetch_backoff_ms / 1000
        try:
            while True:
                now = trio.current_time()
                self._expire_delays(now)
                truncating = self._waiting(self._truncating, now)
                beyond = self._waiting(self._out_of_range, now)
                if (now < self._paused_until
                        or not (truncating or beyond or self.session.has_work)):
                    await self._wait_for_work()
                    continue
                channel = self._connect(nursery)
                if channel is None:
                    self._paused_until = now + backoff
                    continue
                try:
                    if truncating:
                        await self._truncate(channel, truncating)
                    if beyond:
                        await self._resolve_out_of_range(channel, beyond)
                    self._hold_throttled()
                    if self.session.has_work:
                        await self._fetch(channel)
                except PeerUnavailable as e:
                    log.info("fetching from broker %d: %s", self.source, e)
                    self.session.handle_error()
                    self._paused_until = trio.current_time() + backoff
        finally:
            if self._channel is not None:
                with trio.CancelScope(shield=True):
                    await self._channel.aclose()

    def _waiting(self, keys: set[tuple[str, int]], now: float) -> list[FetchState]:
        states = (self.partitions.get(k) for k in keys)
        return [s for s in states if s is not None and not s.failed and s.delayed_until <= now]

    async def _wait_for_work(self) -> None:
        now = trio.current_time()
        deadlines = [s.delayed_until for s in self._delayed.values()]
        if self._paused_until > now:
            deadlines.append(self._paused_until)
        self._changed = trio.Event()
        with timeouts.move_on_at(min(deadlines) if deadlines else now + 3600):
            await self._changed.wait()

    def _connect(self, nursery: trio.Nursery) -> PeerChannel | None:
        endpoint = self.broker.metadata_cache.endpoint(self.source,
                                                       self.broker.addresses.inter_broker)
        if endpoint is None:
            return None
        address = (endpoint.host, endpoint.port)
        if self._channel is None or self._address != address:
            if self._channel is not None:
                nursery.start_soon(self._channel.aclose)
            self._channel = PeerChannel(endpoint.host, endpoint.port, nursery,
                                        client_id=f"replica-fetcher-{self.broker.node_id}",
                                        opener=self.broker.inter_broker_opener)
            self._address = address
            self.session.handle_error()  # a new connection: a new session
        return self._channel

    def _timeout_s(self) -> float:
        config = self.broker.config
        return (config.replica_fetch_wait_max_ms
                + config.controller_quorum_request_timeout_ms) / 1000

    # -- truncation ------------------------------------------------------------------------

    async def _truncate(self, channel: PeerChannel, states: list[FetchState]) -> None:
        ask: dict[str, list[dict]] = {}
        for s in states:
            p = s.partition
            epoch = epoch_to_request(p.epochs) if s.next_epoch == -2 else s.next_epoch
            if epoch < 0:
                # nothing to ask about: an empty log, or one written before epochs
                if p.log_end_offset > p.high_watermark:
                    p.truncate_to(p.high_watermark)
                s.truncating = False
                self._sync(s)
                continue
            ask.setdefault(p.topic, []).append({
                "partition": p.index, "current_leader_epoch": s.leader_epoch,
                "leader_epoch": epoch})
        if not ask:
            return
        body = m.request_body(m.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": self.broker.node_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in ask.items()]})
        response = await channel.request(m.OFFSET_FOR_LEADER_EPOCH,
                                         OFFSET_FOR_LEADER_EPOCH_VERSION, body,
                                         timeout_s=self._timeout_s())
        backoff = self.broker.config.replica_fetch_backoff_ms / 1000
        for t in response["topics"]:
            for answer in t["partitions"]:
                found = self.partitions.get((t["topic"], answer["partition"]))
                if found is None or not found.truncating:
                    continue
                s = found
                code = ErrorCode(answer["error_code"])
                if code != ErrorCode.NONE:
                    self._delay(s, backoff)
                    continue
                self._apply_truncation(s, answer["leader_epoch"], answer["end_offset"])

    def _apply_truncation(self, s: FetchState, leader_epoch: int, end_offset: int) -> None:
        p = s.partition
        decision = truncation_offset(p.epochs, p.log_end_offset, p.high_watermark,
                                     leader_epoch, end_offset)
        if not self._truncate_to(s, decision.offset,
                                 f"leader epoch {leader_epoch} ends at {end_offset}"):
            return
        if decision.complete:
            s.truncating = False
            s.next_epoch = -2
            self._sync(s)
        else:
            s.next_epoch = decision.next_epoch

    def _truncate_to(self, s: FetchState, offset: int, why: str) -> bool:
        """Cut the log at `offset` (the epoch cache is trimmed even if no batch goes);
        False when the disk refused, which stops fetching the partition."""
        p = s.partition
        before = p.log_end_offset
        if planted.on("no-truncation"):
            return True
        try:
            p.truncate_to(min(offset, before))
        except OSError as e:
            log.error("%s-%d: cannot truncate (%s); not fetching it", p.topic, p.index, e)
            s.failed = True
            self._sync(s)
            return False
        if p.log_end_offset < before:
            log.info("%s-%d: truncated from %d to %d (%s)", p.topic, p.index, before,
                     p.log_end_offset, why)
            self.broker.events.emit("log_truncation", topic=p.topic, partition=p.index,
                                    old_log_end_offset=before,
                                    new_log_end_offset=p.log_end_offset,
                                    leader_id=self.source, leader_epoch=s.leader_epoch)
        return True

    async def _resolve_out_of_range(self, channel: PeerChannel, states: list[FetchState]) -> None:
        """The leader's log ends before this one's although the epochs agreed (the leader
        had no epoch to answer with): ask where it ends and cut there."""
        ask: dict[str, list[dict]] = {}
        for s in states:
            ask.setdefault(s.partition.topic, []).append({
                "partition_index": s.partition.index, "current_leader_epoch": s.leader_epoch,
                "timestamp": -1})
        body = m.request_body(m.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
            "replica_id": self.broker.node_id, "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in ask.items()]})
        response = await channel.request(m.LIST_OFFSETS, LIST_OFFSETS_VERSION, body,
                                         timeout_s=self._timeout_s())
        backoff = self.broker.config.replica_fetch_backoff_ms / 1000
        for t in response["topics"]:
            for answer in t["partitions"]:
                found = self.partitions.get((t["name"], answer["partition_index"]))
                if found is None or not found.out_of_range:
                    continue
                if answer["error_code"] != ErrorCode.NONE:
                    self._delay(found, backoff)
                    continue
                found.out_of_range = False
                if self._truncate_to(found, answer["offset"],
                                     f"the leader's log ends at {answer['offset']}"):
                    self._sync(found)

    # -- fetching --------------------------------------------------------------------------

    def _hold_throttled(self) -> None:
        """Over the follower replication throttle (broker.replication.quota): leave the
        throttled partitions this broker is not in the ISR of out of the fetches until the
        rate is back under it (Kafka's shouldFollowerThrottle). The rest go on."""
        quota = self.broker.replication_quotas.follower
        if not quota.active:
            return
        now = trio.current_time()
        if not quota.is_exceeded(now):
            return
        wait = max(quota.wait_s(now), 0.01)
        me = self.broker.node_id
        for key, s in self.partitions.items():
            if quota.is_throttled(*key) and me not in s.partition.isr and self._fetching(s):
                self._delay(s, wait)

    async def _fetch(self, channel: PeerChannel) -> None:
        config = self.broker.config
        plan = self.session.build()
        topics: dict[uuid.UUID, list[dict]] = {}
        for (topic, _index), data in plan.partitions.items():
            topics.setdefault(self._topic_ids[topic], []).append(data)
        forgotten: dict[uuid.UUID, list[int]] = {}
        for topic, index in plan.forgotten:
            forgotten.setdefault(self._topic_ids[topic], []).append(index)
        body = {
            "replica_state": {"replica_id": self.broker.node_id,
                              "replica_epoch": self.broker.lifecycle.broker_epoch},
            "max_wait_ms": config.replica_fetch_wait_max_ms,
            "min_bytes": config.replica_fetch_min_bytes,
            "max_bytes": config.replica_fetch_response_max_bytes,
            "isolation_level": 0, "session_id": plan.session_id, "session_epoch": plan.epoch,
            "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [{"topic_id": t, "partitions": ps}
                                      for t, ps in forgotten.items()],
            "rack_id": config.broker_rack or ""}
        response = await channel.request(m.FETCH, FETCH_VERSION, body,
                                         timeout_s=self._timeout_s())
        backoff = config.replica_fetch_backoff_ms / 1000
        code = ErrorCode.of(response["error_code"])
        if not self.session.handle_response(plan, code, response["session_id"]):
            log.info("fetch session with broker %d: %s; starting a new one", self.source,
                     code.name)
            if code not in _SESSION_ERRORS:
                self._paused_until = trio.current_time() + backoff
            return
        sent = self.session.sent
        for t in response["responses"]:
            name = self._names.get(t["topic_id"])
            if name is None:
                continue
            for answer in t["partitions"]:
                key = (name, answer["partition_index"])
                state = self.partitions.get(key)
                asked = sent.get(key)
                # answered for what the session holds: not for a state replaced (a new
                # epoch), truncated or backing off since
                if (state is None or asked is None or not self._fetching(state)
                        or asked["fetch_offset"] != state.partition.log_end_offset
                        or asked["current_leader_epoch"] != state.leader_epoch):
                    continue
                self._handle_partition(state, answer, backoff)

    def _handle_partition(self, s: FetchState, answer: Any, backoff: float) -> None:
        p = s.partition
        code = ErrorCode(answer["error_code"])
        if code == ErrorCode.NONE:
            records = answer["records"]
            if records:
                try:
                    p.append_as_follower(records, self.broker.now_ms())
                except KafkaStorageError as e:
                    log.error("%s; not fetching %s-%d", e, p.topic, p.index)
                    s.failed = True
                    self._sync(s)
                    return
                except RecordError as e:  # damaged on the way: fetch the same offset again
                    log.warning("%s-%d: fetched batches refused (%s)", p.topic, p.index, e)
                    self._delay(s, backoff)
                    return
                self._sync(s)  # the next request carries the new fetch offset
                quota = self.broker.replication_quotas.follower
                if quota.active and quota.is_throttled(p.topic, p.index):
                    quota.record(len(records), trio.current_time())
            if p.state.on_follower_high_watermark(answer["high_watermark"], p.log_end_offset) \
                    or records:
                self.broker.notify_data_arrived(p.topic, p.index)
            if p.follow_log_start_offset(answer["log_start_offset"]):
                self._sync(s)  # the leader hears of it at the next fetch (DeleteRecords)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_start = answer["log_start_offset"]
            if 0 <= p.log_end_offset < leader_start:
                log.info("%s-%d: the leader's log starts at %d, past this log's end %d: "
                         "starting over there", p.topic, p.index, leader_start,
                         p.log_end_offset)
                p.truncate_fully_and_start_at(leader_start)
            else:
                s.out_of_range = True
            self._sync(s)
        elif code == ErrorCode.KAFKA_STORAGE_ERROR or code not in _RETRY_LATER:
            log.warning("%s-%d: fetch from broker %d answered %s", p.topic, p.index,
                        self.source, code.name)
            self._delay(s, backoff)
        else:
            self._delay(s, backoff)


def _key(s: FetchState) -> tuple[str, int]:
    return (s.partition.topic, s.partition.index)


class ReplicaFetcherManager:
    """Which fetcher replicates each partition this broker follows."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._owner: dict[tuple[str, int], tuple[int, int]] = {}
        self._nursery: trio.Nursery | None = None

    def add(self, partition: Partition, leader: int) -> None:
        key = (partition.topic, partition.index)
        self.remove(key)
        fid = fetcher_id(partition.topic, partition.index,
                         self.broker.config.num_replica_fetchers)
        fetcher = self.fetchers.get((leader, fid))
        if fetcher is None:
            fetcher = self.fetchers[(leader, fid)] = ReplicaFetcher(self.broker, leader, fid)
            if self._nursery is not None:
                self._nursery.start_soon(fetcher.run, self._nursery)
        fetcher.add(partition)
        self._owner[key] = (leader, fid)

    def remove(self, key: tuple[str, int]) -> None:
        owner = self._owner.pop(key, None)
        if owner is not None and owner in self.fetchers:
            self.fetchers[owner].remove(key)

    def fetching(self, key: tuple[str, int]) -> int | None:
        """The broker this one fetches `key` from, or None."""
        owner = self._owner.get(key)
        return owner[0] if owner is not None else None

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for fetcher in self.fetchers.values():
                nursery.start_soon(fetcher.run, nursery)
            task_status.started()
            await trio.sleep_forever()
