"""Fetch: serve whole record batches, long-polling when asked, to consumers (below the high
watermark) and to follower replicas (up to the log end, KIP-101's leader side).

The bytes go out as they lie on disk (one pread per partition; nothing is decoded). Size
limits follow KIP-74: `max_bytes` bounds the response and `partition_max_bytes` each
partition, except that the first batch of the response is always sent whole so a consumer
can make progress past a batch larger than its limits.

A fetch that has fewer than `min_bytes` waits up to `max_wait_ms` for appends to any
partition, then reads again. Incremental fetch sessions (KIP-227) are not offered: we answer
session_id 0, which every client treats as "send full fetch requests".

A follower names itself in `replica_id` (ReplicaState.replica_id from v15). Its fetch offset
tells the leader its LEO (broker.replication: the HW may advance, the follower may rejoin the
ISR); it reads up to the leader's LEO and learns the HW from the answer. A consumer reads
below the HW only: a fetch offset between the HW and the LEO (a new leader whose HW is still
catching up) answers no records rather than OFFSET_OUT_OF_RANGE, which would make the
consumer reset its position.

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

import trio

from broker.handlers.common import current_leader, lookup
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize_cluster, unauthorized
from broker.log.errors import LogError, OffsetOutOfRange
from broker.replication.selector import (NO_PREFERENCE, RACK_AWARE_SELECTOR, ReplicaView,
                                         preferred_read_replica)
from protocol.errors import ErrorCode

READ_COMMITTED = 1
CURRENT_LEADER_VERSION = 12  # the tagged current_leader field
REPLICA_STATE_VERSION = 15  # replica_id moves into the tagged ReplicaState
RACK_ID_VERSION = 11  # the consumer's client.rack (KIP-392)
_STALE_LEADER = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                 ErrorCode.UNKNOWN_LEADER_EPOCH)


def replica_id(ctx: RequestContext) -> int:
    """The follower sending this fetch, or -1 for a consumer."""
    body = ctx.body
    if ctx.version >= REPLICA_STATE_VERSION:
        state = body.get("replica_state")
        return state.replica_id if state is not None else -1
    return body.get("replica_id", -1)


def _follower_fetch(ctx: RequestContext, follower: int) -> None:
    """Tell each partition's leader state where the follower's log ends, once per request:
    only for a fetch at this leader's epoch and within its log (as Kafka checks before
    updateFollowerFetchState). A fetch made for an older epoch may come from a log this
    leader has since cut, and counting its offset would let the HW pass records the
    follower does not hold."""
    state = ctx.body.get("replica_state") if ctx.version >= REPLICA_STATE_VERSION else None
    broker_epoch = state.replica_epoch if state is not None else -1
    for topic in ctx.body.topics:
        for p in topic.partitions:
            partition, error = lookup(ctx.broker, topic.topic, p.partition,
                                      p.get("current_leader_epoch", -1))
            if (partition is not None and error == ErrorCode.NONE
                    and p.get("current_leader_epoch", -1) >= 0
                    and p.fetch_offset <= partition.log_end_offset):
                ctx.broker.replicas.on_follower_fetch(partition, follower, p.fetch_offset,
                                                      broker_epoch)


async def handle(ctx: RequestContext) -> dict:
    body = ctx.body
    follower = replica_id(ctx)
    names = [t.topic for t in body.topics]
    if follower >= 0:
        # a follower needs CLUSTER_ACTION on the cluster; without it, it is told nothing
        denied = (frozenset() if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
                  else frozenset(names))
        if not denied:
            _follower_fetch(ctx, follower)
    else:
        denied = unauthorized(ctx, AclOperation.READ, ResourceType.TOPIC, names)
    deadline = trio.current_time() + max(body.max_wait_ms, 0) / 1000
    while True:
        responses, total, errors = _read(ctx, follower, denied)
        if total >= body.min_bytes or errors or trio.current_time() >= deadline:
            break
        with trio.move_on_at(deadline):
            await ctx.broker.wait_for_data(
                [(t.topic, p.partition) for t in body.topics for p in t.partitions])
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0,
            "responses": responses}


def _read(ctx: RequestContext, follower: int,
          denied: frozenset[str] = frozenset()) -> tuple[list, int, bool]:
    body, broker = ctx.body, ctx.broker
    budget = body.get("max_bytes", 2**31 - 1)
    total, errors = 0, False
    aborted: list[dict] | None = [] if body.isolation_level == READ_COMMITTED else None
    # KIP-392: a consumer speaking v11+ may read from a follower, and with the rack-aware
    # selector the leader sends one with a client.rack to a replica in its rack
    # (only with the selector on: without it no client is sent to a follower, and a client
    # whose metadata is stale should hear NOT_LEADER_OR_FOLLOWER and look again)
    rack_aware = broker.config.replica_selector_class == RACK_AWARE_SELECTOR
    consumer_may_use_follower = rack_aware and follower < 0 and ctx.version >= RACK_ID_VERSION
    rack = body.get("rack_id") if consumer_may_use_follower else None
    selector = bool(rack)
    responses = []
    for topic in body.topics:
        partitions = []
        for p in topic.partitions:
            if topic.topic in denied:
                partition, error = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                partition, error = lookup(broker, topic.topic, p.partition,
                                          p.get("current_leader_epoch", -1),
                                          allow_follower=consumer_may_use_follower)
            records = b""
            preferred = NO_PREFERENCE
            if partition is not None and error == ErrorCode.NONE and selector \
                    and partition.is_leader:
                preferred = _preferred_replica(broker, partition, rack, p.fetch_offset)
                errors |= preferred != NO_PREFERENCE  # answer at once: nothing to wait for
            if partition is not None and error == ErrorCode.NONE and preferred < 0:
                leo = partition.log_end_offset
                end = leo if follower >= 0 else min(partition.high_watermark, leo)
                limit = min(p.partition_max_bytes, budget)
                try:
                    if p.fetch_offset > leo:
                        raise OffsetOutOfRange(p.fetch_offset)
                    if p.fetch_offset < end and (limit > 0 or total == 0):
                        records = partition.log.read(p.fetch_offset, limit,
                                                     max_offset=end,
                                                     min_one_message=total == 0)
                except LogError as e:  # out of range, or a segment damaged under us
                    error = e.error_code
                except OSError as e:  # the device failed a read (EIO): Kafka's storage error
                    error = ErrorCode.KAFKA_STORAGE_ERROR
                    broker.log_dirs.storage_failed(f"{topic.topic}-{p.partition}: {e}")
            errors |= error != ErrorCode.NONE
            total += len(records)
            budget = max(budget - len(records), 0)
            out = {
                "partition_index": p.partition, "error_code": error,
                "high_watermark": partition.high_watermark if partition else -1,
                "last_stable_offset": partition.high_watermark if partition else -1,
                "log_start_offset": partition.log_start_offset if partition else -1,
                "aborted_transactions": aborted, "preferred_read_replica": preferred,
                "records": records,
            }
            if error in _STALE_LEADER and ctx.version >= CURRENT_LEADER_VERSION:
                out["current_leader"] = current_leader(broker, topic.topic, p.partition)
            partitions.append(out)
        responses.append({"topic": topic.topic, "partitions": partitions})
    return responses, total, errors


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
