"""Fetch: serve whole record batches, long-polling when asked, to consumers (below the high
watermark) and to follower replicas (up to the log end, KIP-101's leader side).

The bytes go out as they lie on disk (one pread per partition; nothing is decoded). Size
limits follow KIP-74: `max_bytes` bounds the response and `partition_max_bytes` each
partition, except that the first batch of the response is always sent whole so a consumer
can make progress past a batch larger than its limits.

Incremental fetch sessions (KIP-227, broker.fetch_session): from v7 a full request (epoch
0) makes a session and the answer names it; the fetcher's next requests (epoch 1, 2, ...)
carry only the partitions added, changed or forgotten, and the answers only the partitions
with something to say. A fetch reads only the partitions of its session that may have
something to say (those named, those marked since the last fetch, those that still had
records or an error), so an idle partition costs nothing per fetch. An unknown session is
FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH, a session made with
topic ids used without them (or the reverse) FETCH_SESSION_TOPIC_ID_ERROR; none of them
touches another session. Epoch -1 (librdkafka, which does not implement KIP-227) and a
full cache fall back to full requests answered whole, session_id 0. A partition named
twice in one request is taken once, the last one named (Kafka's request map).

A fetch that has fewer than `min_bytes` waits up to `max_wait_ms` for appends; whatever
wakes it says which partitions moved, and only those are read again.

isolation_level 1 (read_committed, v4+) reads only below the partition's last stable
offset (broker/partition.py): nothing of a transaction still open, or whose marker the HW
has not passed, nor anything after its first offset. Such a fetch is answered with the
aborted transactions (producer id, first offset) that overlap the batches it returns,
from the .txnindex (Kafka's collectAbortedTransactions), so the consumer drops their
records; read_uncommitted answers null there. Every answer carries the LSO in
last_stable_offset, as Kafka's does. The LSO moves only when the HW does (a marker counts
once the HW passes it), so the notifications that wake fetches for the HW wake
read_committed ones too. Followers read up to the log end whatever their isolation level.

From v13 topics are named by id, resolved through the metadata image; an id it does not
know is UNKNOWN_TOPIC_ID. A follower names itself in `replica_id` (ReplicaState from v15,
with its broker epoch, which the leader passes on in AlterPartition: KIP-903). Its fetch
offset tells the leader its LEO (broker.replication: the HW may advance, the follower may
rejoin the ISR); it reads up to the leader's LEO and learns the HW from the answer. A
partition of a follower's session not read at a fetch was caught up at that fetch (it had
nothing to say), which the leader's ISR bookkeeping takes from the session's last use
(PartitionState.on_follower_idle_fetch) rather than from a pass over every partition. A
consumer reads below the HW only: a fetch offset between the HW and the LEO (a new leader
whose HW is still catching up) answers no records rather than OFFSET_OUT_OF_RANGE, which
would make the consumer reset its position.

With replica.selector.class set to Kafka's RackAwareReplicaSelector (KIP-392), the leader
answers a consumer whose rack_id (client.rack, v11+) names another rack than its own with
preferred_read_replica: an in-sync replica in that rack (broker.replication.selector), and
no records; the follower then serves that consumer below its own HW.

Otherwise only the partition's leader serves it: elsewhere the answer is NOT_LEADER_OR_FOLLOWER
(UNKNOWN_TOPIC_OR_PARTITION if the metadata image has no such partition), and a client's
current_leader_epoch older or newer than ours is FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH
(KIP-320). From v12 those answers carry the leader the image names (current_leader).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import trio

from broker import planted, timeouts
from broker.fetch_session import (FINAL_EPOCH, INVALID_SESSION_ID, CachedPartition,
                                  FetchSession, Key)
from broker.handlers.common import current_leader, lookup
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize_cluster, unauthorized
from broker.log.errors import LogError, OffsetOutOfRange
from broker.replication.selector import (NO_PREFERENCE, RACK_AWARE_SELECTOR, ReplicaView,
                                         preferred_read_replica)
from protocol.errors import ErrorCode
from protocol.records import iter_batch_headers

READ_COMMITTED = 1
SESSION_VERSION = 7  # session id and epoch (KIP-227)
RACK_ID_VERSION = 11  # the consumer's client.rack (KIP-392)
CURRENT_LEADER_VERSION = 12  # the tagged current_leader field
TOPIC_ID_VERSION = 13  # topics named by id
REPLICA_STATE_VERSION = 15  # replica_id moves into the tagged ReplicaState
NO_TOPIC_ID = uuid.UUID(int=0)
THROTTLE_RETRY_S = 0.005  # the least wait before a throttled read is tried again
IN_SYNC = 2**31 - 1  # no bound on an in-sync follower's reads of a throttled replica
_STALE_LEADER = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                 ErrorCode.UNKNOWN_LEADER_EPOCH)


def replica_id(ctx: RequestContext) -> int:
    """The follower sending this fetch, or -1 for a consumer."""
    body = ctx.body
    if ctx.version >= REPLICA_STATE_VERSION:
        state = body.get("replica_state")
        return state.replica_id if state is not None else -1
    return body.get("replica_id", -1)


def replica_epoch(ctx: RequestContext) -> int:
    """The follower's broker epoch (ReplicaState, v15+), -1 when not sent."""
    state = ctx.body.get("replica_state") if ctx.version >= REPLICA_STATE_VERSION else None
    return state.replica_epoch if state is not None else -1


@dataclass
class _Read:
    """One partition's answer as read, and whether it still has something to say."""
    out: dict
    size: int
    error: ErrorCode
    pending: bool  # records left beyond the fetch offset, or an error
    held: bool = False  # held back by the leader's replication throttle
    throttled: int = 0  # bytes that count against it


@dataclass
class _Context:
    """The session a fetch works on: a cached one, or one made for this request only."""
    session: FetchSession
    cached: bool
    full: bool
    previous_use_ms: int = -1  # the session's last fetch before this one
    reads: dict[Key, _Read] = field(default_factory=dict)
    total: int = 0  # bytes of records in `reads`
    budget: int = 2**31 - 1  # what is left of the response's max_bytes
    answer_now: bool = False  # an error or a preferred read replica: no waiting
    # a follower's partitions it is out of the ISR of: read at each of its fetches until
    # it is back in, so that the leader sees it catch up (Kafka's maybeExpandIsr)
    rejoining: set[Key] = field(default_factory=set)
    # the leader's replication throttle (broker.replication.quota): what this answer may
    # still carry of throttled replicas out of the ISR, and those held back for now
    throttle_budget: int = 2**31 - 1
    held: set[Key] = field(default_factory=set)


def _requested(ctx: RequestContext) -> tuple[list[CachedPartition], list[Key]]:
    """The partitions the request names (the last of a partition named twice, as Kafka's
    request map keeps it) and those it forgets."""
    body, cache = ctx.body, ctx.broker.metadata_cache
    ids = ctx.version >= TOPIC_ID_VERSION
    named: dict[Key, CachedPartition] = {}
    for t in body.topics:
        if ids:
            topic_id = t.topic_id
            image = cache.topic_by_id(topic_id)
            name = image.name if image is not None else None
        else:
            name, topic_id = t.topic, NO_TOPIC_ID
        ident = topic_id if ids else name
        for p in t.partitions:
            named[(ident, p.partition)] = CachedPartition(
                name, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes,
                p.get("current_leader_epoch", -1), p.get("last_fetched_epoch", -1),
                p.get("log_start_offset", -1))
    forgotten: list[Key] = []
    for t in body.get("forgotten_topics_data") or ():
        ident = t.topic_id if ids else t.topic
        forgotten.extend((ident, index) for index in t.partitions)
    return list(named.values()), forgotten


def _error_answer(code: ErrorCode) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": []}


def _open(ctx: RequestContext, follower: int, now_ms: int) -> _Context | ErrorCode:
    """The session this request works on, or the error that answers the whole request."""
    body = ctx.body
    requested, forgotten = _requested(ctx)
    sessions = ctx.version >= SESSION_VERSION
    opened = ctx.broker.fetch_sessions.new_context(
        now_ms, session_id=body.get("session_id", 0) if sessions else INVALID_SESSION_ID,
        epoch=body.get("session_epoch", FINAL_EPOCH) if sessions else FINAL_EPOCH,
        replica_id=follower, uses_topic_ids=ctx.version >= TOPIC_ID_VERSION,
        partitions=requested, forgotten=forgotten)
    if isinstance(opened, ErrorCode):
        return opened
    return _Context(opened.session, opened.cached, opened.full, opened.previous_use_ms)


async def handle(ctx: RequestContext) -> dict:
    body, broker = ctx.body, ctx.broker
    follower = replica_id(ctx)
    now_ms = broker.now_ms()
    opened = _open(ctx, follower, now_ms)
    if isinstance(opened, ErrorCode):
        return _error_answer(opened)
    fc = opened
    session = fc.session
    allowed = follower < 0 or authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    if follower >= 0 and allowed:
        _follower_fetch(ctx, follower, fc, list(session.changed))
    keys = list(session.partitions) if fc.full else list(session.changed)
    session.changed.clear()
    fc.budget = body.get("max_bytes", 2**31 - 1)
    throttle = broker.replication_quotas.leader  # KIP-73's, for followers
    if follower >= 0 and throttle.active:
        fc.throttle_budget = throttle.burst_bytes()
    quotas = broker.metadata_cache.image.client_quotas if follower < 0 else None  # KIP-546's
    if quotas:
        window_max = broker.quotas.fetch.max_value_in_window(quotas, ctx.user, ctx.client_id)
        if window_max is not None:
            fc.budget = min(fc.budget, max(int(window_max), 1))
    _read(ctx, follower, fc, keys, allowed, arrival_ms=now_ms)
    deadline = trio.current_time() + max(body.max_wait_ms, 0) / 1000
    while fc.total < body.min_bytes and not fc.answer_now \
            and trio.current_time() < deadline:
        # a replica held back by the throttle is read again once the rate allows, rather
        # than at the follower's next fetch: the moves go on at the rate, not in bursts
        now = trio.current_time()
        retry = now + max(throttle.wait_s(now), THROTTLE_RETRY_S) if fc.held else deadline
        waiting = time.perf_counter()  # request_percentage does not count the long poll
        woken = await _wait(ctx, fc, min(deadline, retry))
        ctx.waited_s += time.perf_counter() - waiting
        if fc.held and trio.current_time() >= retry:
            woken = list(dict.fromkeys([*woken, *fc.held]))
        if woken:
            _read(ctx, follower, fc, woken, allowed)
    if quotas and _throttled(ctx, fc, quotas):
        return {"throttle_time_ms": ctx.throttle_ms, "error_code": ErrorCode.NONE,
                "session_id": session.id if fc.cached else 0, "responses": []}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "session_id": session.id if fc.cached else 0,
            "responses": _answer(ctx, fc)}


def _throttled(ctx: RequestContext, fc: _Context, quotas: Any) -> bool:
    """Record the records' bytes against consumer_byte_rate; over the quota, take them
    back and answer without them, as Kafka's getThrottledResponse does: the session reads
    the same partitions again at the next fetch, and the client asks again from the same
    offsets once its throttle time has passed."""
    fetch = ctx.broker.quotas.fetch
    ctx.throttle_ms = fetch.record(quotas, ctx.user, ctx.client_id, fc.total,
                                   ctx.broker.now_ms())
    if ctx.throttle_ms <= 0:
        return False
    fetch.unrecord(quotas, ctx.user, ctx.client_id, fc.total)
    if fc.cached:
        fc.session.changed.update(fc.reads)
    return True


async def _wait(ctx: RequestContext, fc: _Context, deadline: float) -> list[Key]:
    """Until a partition of the fetch moves or the deadline: the keys that moved."""
    session = fc.session
    if fc.cached:
        if not session.changed:
            event = trio.Event()
            session.waker = event.set
            try:
                with timeouts.move_on_at(deadline):
                    await event.wait()
            finally:
                session.waker = None
        woken = [k for k in session.changed if k in session.partitions]
        session.changed.clear()
        return woken
    by_name = {(p.topic, p.partition): key for key, p in session.partitions.items()
               if p.topic is not None}
    moved: set[tuple[str, int]] = set()
    with timeouts.move_on_at(deadline):
        moved = await ctx.broker.wait_for_data(list(by_name))
    return [by_name[tp] for tp in moved if tp in by_name]


def _follower_fetch(ctx: RequestContext, follower: int, fc: _Context, keys: list[Key]) -> None:
    """Tell each partition's leader state where the follower's log ends, for the partitions
    this fetch may read (the others of its session had nothing to say: the follower was
    caught up on them at its previous fetch). Only for a fetch at this leader's epoch and
    within its log (as Kafka checks before updateFollowerFetchState): a fetch made for an
    older epoch may come from a log this leader has since cut, and counting its offset
    would let the HW pass records the follower does not hold."""
    broker = ctx.broker
    broker_epoch = replica_epoch(ctx)
    session = fc.session
    if broker_epoch >= 0:
        session.replica_epoch = broker_epoch
    for key in (session.partitions if fc.full else keys):
        p = session.partitions.get(key)
        if p is None or p.topic is None or p.current_leader_epoch < 0:
            continue
        partition, error = lookup(broker, p.topic, p.partition, p.current_leader_epoch)
        if partition is None or error != ErrorCode.NONE \
                or p.fetch_offset > partition.log_end_offset:
            continue
        if fc.previous_use_ms >= 0 and p.read_ms < fc.previous_use_ms:
            partition.state.on_follower_idle_fetch(follower, fc.previous_use_ms,
                                                   session.replica_epoch)
        broker.replicas.on_follower_fetch(partition, follower, p.fetch_offset, broker_epoch,
                                          p.log_start_offset)
        if follower not in partition.isr:
            fc.rejoining.add(key)


def _read(ctx: RequestContext, follower: int, fc: _Context, keys: Any, allowed: bool,
          arrival_ms: int = -1) -> None:
    """Read these partitions of the fetch into `fc.reads` (a partition read again replaces
    its earlier read and gives its bytes back to the budget first). `arrival_ms`: the
    fetch's arrival, for a read made as it arrived."""
    broker, session = ctx.broker, fc.session
    parts = [p for key in keys if (p := session.partitions.get(key)) is not None]
    if not allowed:  # a follower without CLUSTER_ACTION is told nothing
        denied = frozenset(p.topic for p in parts if p.topic is not None)
    elif follower < 0:
        denied = unauthorized(ctx, AclOperation.READ, ResourceType.TOPIC,
                              [p.topic for p in parts if p.topic is not None])
    else:
        denied = frozenset()
    # KIP-392: a consumer speaking v11+ may read from a follower, and with the rack-aware
    # selector the leader sends one with a client.rack to a replica in its rack
    # (only with the selector on: without it no client is sent to a follower, and a client
    # whose metadata is stale should hear NOT_LEADER_OR_FOLLOWER and look again)
    rack_aware = broker.config.replica_selector_class == RACK_AWARE_SELECTOR
    consumer_may_use_follower = rack_aware and follower < 0 and ctx.version >= RACK_ID_VERSION
    rack = ctx.body.get("rack_id") if consumer_may_use_follower else None
    read_committed = follower < 0 and ctx.body.get("isolation_level", 0) == READ_COMMITTED
    for p in parts:
        key = (p.topic_id if session.uses_topic_ids else p.topic, p.partition)
        earlier = fc.reads.get(key)
        if earlier is not None:
            fc.total -= earlier.size
            fc.budget += earlier.size
        read = _read_partition(ctx, follower, p, session.uses_topic_ids, denied,
                               consumer_may_use_follower, rack, fc.budget, fc.total == 0,
                               read_committed, fc.throttle_budget)
        fc.budget = max(fc.budget - read.size, 0)
        fc.throttle_budget = max(fc.throttle_budget - read.throttled, 0)
        if read.held:
            fc.held.add(key)
        else:
            fc.held.discard(key)
        fc.total += read.size
        fc.answer_now |= (read.error != ErrorCode.NONE
                          or read.out["preferred_read_replica"] >= 0)
        fc.reads[key] = read
        if arrival_ms >= 0:
            p.read_ms = arrival_ms


def _read_partition(ctx: RequestContext, follower: int, p: CachedPartition, by_id: bool,
                    denied: frozenset[str], may_use_follower: bool, rack: str | None,
                    budget: int, first: bool, read_committed: bool,
                    throttle_budget: int) -> _Read:
    broker = ctx.broker
    partition = None
    if p.topic is None or by_id and _deleted(broker, p):
        error = ErrorCode.UNKNOWN_TOPIC_ID
    elif p.topic in denied:
        error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    else:
        partition, error = lookup(broker, p.topic, p.partition, p.current_leader_epoch,
                                  allow_follower=may_use_follower)
    records = b""
    preferred = NO_PREFERENCE
    pending = False
    aborted: list[dict] | None = [] if read_committed else None
    lso = partition.last_stable_offset if partition is not None else -1
    if partition is not None and error == ErrorCode.NONE and rack and partition.is_leader:
        preferred = _preferred_replica(broker, partition, rack, p.fetch_offset)
    allowance: int | None = None  # bytes the leader's replication throttle allows
    if partition is not None and error == ErrorCode.NONE and preferred < 0:
        leo = partition.log_end_offset
        limit = min(p.max_bytes, budget)
        if follower >= 0:
            end = leo
            allowance = _throttle_allowance(broker, partition, follower, throttle_budget)
            if allowance is not None:
                limit = min(limit, allowance)
        else:
            end = min(lso if read_committed else partition.high_watermark, leo)
        try:
            if p.fetch_offset > leo:
                raise OffsetOutOfRange(p.fetch_offset)
            if allowance != 0 and p.fetch_offset < end and (limit > 0 or first):
                records = partition.log.read(p.fetch_offset, limit, max_offset=end,
                                             min_one_message=first)
                if read_committed and records and not planted.on(
                        "aborted-transactions-unreported"):
                    aborted = _aborted_transactions(partition, p.fetch_offset, records)
            pending = p.fetch_offset < end
            if allowance is not None:
                broker.replication_quotas.leader.record(len(records), trio.current_time())
        except LogError as e:  # out of range, or a segment damaged under us
            error = e.error_code
        except OSError as e:  # the device failed a read (EIO): Kafka's storage error
            error = ErrorCode.KAFKA_STORAGE_ERROR
            broker.log_dirs.storage_failed(f"{p.topic}-{p.partition}: {e}",
                                           partition.log.directory)
    out: dict[str, Any] = {
        "partition_index": p.partition, "error_code": error,
        "high_watermark": partition.high_watermark if partition else -1,
        "last_stable_offset": lso,
        "log_start_offset": partition.log_start_offset if partition else -1,
        "aborted_transactions": aborted,
        "preferred_read_replica": preferred, "records": records,
    }
    if error in _STALE_LEADER and ctx.version >= CURRENT_LEADER_VERSION and p.topic:
        out["current_leader"] = current_leader(broker, p.topic, p.partition)
    held = allowance == 0 and pending
    return _Read(out, len(records), error, pending or error != ErrorCode.NONE, held,
                 len(records) if allowance is not None and allowance < IN_SYNC else 0)


def _throttle_allowance(broker, partition, follower: int, budget: int) -> int | None:
    """What a follower's read of this partition may take under the leader's replication
    throttle (broker.replication.quota): None when the partition is not throttled (its
    bytes do not count); IN_SYNC for a follower in the ISR (counted, never held back, as
    in Kafka); otherwise what is left of this answer's share, 0 while over the rate."""
    quota = broker.replication_quotas.leader
    if not quota.active or not quota.is_throttled(partition.topic, partition.index):
        return None
    if follower in partition.isr:
        return IN_SYNC
    return 0 if quota.is_exceeded(trio.current_time()) else budget


def _aborted_transactions(partition, fetch_offset: int, records: bytes) -> list[dict]:
    """The aborted transactions overlapping the batches read (from the fetch offset to the
    offset after the last one): walked by their headers only, and only in a partition
    that has any aborted transaction at all."""
    plog = partition.log
    if not plog.has_aborted_txns_from(fetch_offset):
        return []
    end = fetch_offset
    for _pos, header in iter_batch_headers(records):
        end = header.last_offset + 1
    return [{"producer_id": t.producer_id, "first_offset": t.first_offset}
            for t in plog.collect_aborted_txns(fetch_offset, end)]


def _deleted(broker, p: CachedPartition) -> bool:
    """A session's topic id no longer in the image (the name may since be another topic's:
    its partitions must not be served as the old topic's)."""
    image = broker.metadata_cache.topic_by_id(p.topic_id)
    return image is None or image.name != p.topic


def _answer(ctx: RequestContext, fc: _Context) -> list[dict]:
    """The response's topics: every partition of a full fetch; of an incremental one,
    those with records, an error, a preferred replica, or a HW or log start offset other
    than the last sent (Kafka's CachedPartition.maybeUpdateResponseData). What is sent is
    remembered, and a partition with more to say is read again at the next fetch."""
    session = fc.session
    topics: dict[Any, list[dict]] = {}
    ids = session.uses_topic_ids
    for key, read in fc.reads.items():
        p = session.partitions.get(key)
        if p is None:
            continue
        if (read.pending or key in fc.rejoining) and fc.cached:
            session.changed.add(key)
        out = read.out
        say = (fc.full or read.size > 0 or read.error != ErrorCode.NONE
               or out["preferred_read_replica"] >= 0
               or out["high_watermark"] != p.high_watermark
               or out["log_start_offset"] != p.leader_log_start_offset)
        if not say:
            continue
        # an error clears what was sent, so the partition is sent again once it recovers
        p.high_watermark = out["high_watermark"] if read.error == ErrorCode.NONE else -1
        p.leader_log_start_offset = out["log_start_offset"]
        topics.setdefault(key[0], []).append(out)
    if ids:
        return [{"topic_id": t, "partitions": ps} for t, ps in topics.items()]
    return [{"topic": t, "partitions": ps} for t, ps in topics.items()]


def _preferred_replica(broker, partition, rack: str | None, fetch_offset: int) -> int:
    cache = broker.metadata_cache

    def rack_of(broker_id: int) -> str | None:
        registration = cache.broker(broker_id)
        return registration.rack if registration is not None else None

    state = partition.state
    leader = ReplicaView(broker.node_id, rack_of(broker.node_id), partition.log_end_offset, True)
    followers = [ReplicaView(r, rack_of(r), progress.log_end_offset,
                             r in state.isr and cache.is_alive(r))
                 for r, progress in state.followers.items()]
    return preferred_read_replica(rack, leader, followers, fetch_offset)
