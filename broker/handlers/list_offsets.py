"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3, v7) and by timestamp; the
tiered-storage lookups as Kafka answers them for a topic without remote storage: earliest
local (-4, v8) is the log start offset, latest tiered (-5, v9) is -1 (nothing is tiered).
v10's timeout_ms bounds lookups in remote storage, which there is none of: unused.

v0 answers in the old layout: a list of offsets (at most max_num_offsets) instead of one;
for latest that is the high watermark followed by each segment's base offset, newest first.
The max-timestamp lookup is Kafka's pre-3.7 "shallow" answer: the last offset of the batch
with the largest MaxTimestamp, read from batch headers only.

Only the partition's leader answers (broker.handlers.common.lookup): elsewhere
NOT_LEADER_OR_FOLLOWER, and a stale or future current_leader_epoch is fenced (KIP-320).
Clients see the log as far as the high watermark: latest is the HW, and a timestamp lookup
never answers an offset at or past it. With isolation_level 1 (read_committed, v2+) they
see it as far as the last stable offset instead, as Kafka's fetchOffsetForTimestamp does:
latest is the LSO, and a lookup never answers at or past it, so a read_committed consumer
is never placed inside a transaction still open. From v5, a new leader whose HW has not yet reached
the start of its leader epoch answers OFFSET_NOT_AVAILABLE, retriable (KIP-207). A
follower (replica_id >= 0) asking for latest gets the log end offset.
"""

from __future__ import annotations

from broker.handlers.common import lookup
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize_cluster, unauthorized
from protocol.errors import ErrorCode

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
READ_COMMITTED = 1


async def handle(ctx: RequestContext) -> dict:
    topics = []
    names = [t.name for t in ctx.body.topics]
    if ctx.body.replica_id >= 0:  # a follower: CLUSTER_ACTION on the cluster
        denied = (frozenset() if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
                  else frozenset(names))
    else:
        denied = unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    for topic in ctx.body.topics:
        if topic.name in denied:
            partitions = [{"partition_index": p.partition_index,
                           "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                           "old_style_offsets": [], "timestamp": -1, "offset": -1,
                           "leader_epoch": -1} for p in topic.partitions]
        else:
            partitions = [_partition(ctx, topic.name, p) for p in topic.partitions]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


def _legacy_offsets(partition, timestamp: int, found, max_num_offsets: int) -> list[int]:
    """ListOffsets v0 (Kafka's legacyFetchOffsetsBefore): for latest, the log end offset and
    then every segment's base offset, newest first; for earliest, the log start offset."""
    if max_num_offsets <= 0:
        return []
    if timestamp == LATEST:
        bases = [max(s.base_offset, partition.log_start_offset)
                 for s in reversed(partition.log.segments)]
        if partition.log.segments and partition.log.segments[-1].size == 0:
            bases = bases[1:]  # an empty active segment starts at the log end offset itself
        return [partition.high_watermark, *bases][:max_num_offsets]
    return [found[0]] if found is not None else []


OFFSET_NOT_AVAILABLE_VERSION = 5  # KIP-207


def _partition(ctx: RequestContext, topic: str, p) -> dict:
    out = {"partition_index": p.partition_index, "error_code": ErrorCode.NONE,
           "old_style_offsets": [], "timestamp": -1, "offset": -1, "leader_epoch": -1}
    partition, error = lookup(ctx.broker, topic, p.partition_index,
                              p.get("current_leader_epoch", -1))
    if partition is None or error != ErrorCode.NONE:
        out["error_code"] = error
        return out
    ts = p.timestamp
    if ts == EARLIEST_LOCAL:
        ts = EARLIEST  # the whole log is local
    elif ts == LATEST_TIERED:
        return out  # offset -1, timestamp -1, leader epoch -1: Kafka's answer without tiering
    found: tuple[int, int] | None
    if ctx.body.replica_id >= 0 and ts == LATEST:
        # a follower whose fetch offset the leader found out of range asks where the
        # leader's log really ends (Kafka answers replicas with the LEO)
        out["offset"], out["leader_epoch"] = partition.log_end_offset, partition.leader_epoch
        return out
    if ts != EARLIEST and ctx.version >= OFFSET_NOT_AVAILABLE_VERSION \
            and partition.high_watermark < partition.state.leader_epoch_start_offset:
        # KIP-207: a new leader whose HW has not reached the start of its epoch would
        # answer an offset older than what a consumer may already have read
        out["error_code"] = ErrorCode.OFFSET_NOT_AVAILABLE
        return out
    # the last offset a consumer of this isolation level may be given (exclusive)
    fetchable = (partition.last_stable_offset
                 if ctx.body.get("isolation_level", 0) == READ_COMMITTED
                 else partition.high_watermark)
    if ts == LATEST:
        found = (fetchable, -1)
    elif ts == EARLIEST:
        found = (partition.log_start_offset, -1)
    elif ts == MAX_TIMESTAMP:
        found = partition.log.max_timestamp_offset()
    elif ts < 0:
        out["error_code"] = ErrorCode.INVALID_REQUEST
        return out
    else:
        found = partition.log.offset_for_timestamp(ts)
    if ctx.version == 0:
        out["old_style_offsets"] = _legacy_offsets(partition, ts, found,
                                                   p.get("max_num_offsets", 1))
        return out
    if found is not None and ts not in (LATEST, EARLIEST) and found[0] >= fetchable:
        found = None  # not yet committed (or stable): the consumer could not read it
    if found is not None:
        out["offset"], out["timestamp"] = found
        out["leader_epoch"] = partition.leader_epoch
    return out
