"""DeleteRecords (21): move partitions' log start offsets forward, at their leaders.

For each partition, as Kafka's ReplicaManager.deleteRecords: the offset asked (-1: the high
watermark) must lie in [log start offset, high watermark] of the leader, else
OFFSET_OUT_OF_RANGE; an offset below the log start changes nothing and answers the current
low watermark. The leader moves its log start offset (broker.partition), its followers take
it from their next fetch answers, and the answer waits (up to the request's timeout_ms, as
Kafka's DelayedDeleteRecords) until every in-sync replica's log start offset reached the
offset: the low watermark answered is the least of them. A wait that runs out answers
REQUEST_TIMED_OUT, the records being gone at the leader already. Segments wholly below the
log start offset are deleted by the next retention pass. The leader writes its
log-start-offset-checkpoint before answering, so what it deleted stays deleted across a
kill -9; a follower's new log start waits for the periodic checkpoint, as in Kafka.

Needs DELETE on the topic, as Kafka. The internal topics (__consumer_offsets,
__transaction_state, __share_group_state) answer INVALID_TOPIC_EXCEPTION, as Kafka refuses
them to clients: their coordinators replay them from the log start.
"""

from __future__ import annotations

import trio

from broker import blocking, timeouts
from broker.handlers.common import lookup
from broker.handlers.context import RequestContext
from broker.log.manager import LOG_START_OFFSET_CHECKPOINT
from broker.metadata_cache import is_internal
from broker.partition import Partition
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_topic
from protocol.errors import ErrorCode

E = ErrorCode
HIGH_WATERMARK = -1


async def handle(ctx: RequestContext) -> dict:
    broker = ctx.broker
    waiting: list[tuple[Partition, int, dict]] = []
    topics = []
    for t in ctx.body.topics:
        partitions = []
        for p in t.partitions:
            out = {"partition_index": p.partition_index, "low_watermark": -1,
                   "error_code": E.NONE}
            partitions.append(out)
            if not authorize_topic(ctx, AclOperation.DELETE, t.name):
                out["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
                continue
            if is_internal(t.name):
                out["error_code"] = E.INVALID_TOPIC_EXCEPTION
                continue
            partition, error = lookup(broker, t.name, p.partition_index)
            if partition is None:
                out["error_code"] = error
                continue
            offset = partition.high_watermark if p.offset == HIGH_WATERMARK else p.offset
            if offset < 0 or offset > partition.high_watermark:
                out["error_code"] = E.OFFSET_OUT_OF_RANGE
                continue
            if offset > partition.log_start_offset:
                partition.delete_records_before(offset)
                # followers' fetch sessions carry the new log start at their next fetch
                broker.notify_data_arrived(partition.topic, partition.index)
            waiting.append((partition, offset, out))
        topics.append({"name": t.name, "partitions": partitions})
    if waiting:
        await _checkpoint_log_starts(ctx)
    await _wait_for_replicas(ctx, waiting)
    return {"throttle_time_ms": 0, "topics": topics}


async def _checkpoint_log_starts(ctx: RequestContext) -> None:
    """Write the log start offsets down before answering, so that records deleted stay
    deleted across a kill -9 (the periodic checkpoint may be a minute away)."""
    broker = ctx.broker
    logs = broker.logs
    async with broker.checkpoint_lock:
        starts = {path: {LOG_START_OFFSET_CHECKPOINT: files[LOG_START_OFFSET_CHECKPOINT]}
                  for path, files in logs.checkpoints().items()}  # each log directory's
        await blocking.run_disk(broker.fs, logs.write_checkpoints, starts)


async def _wait_for_replicas(ctx: RequestContext, waiting: list[tuple[Partition, int, dict]]
                             ) -> None:
    """Answer each partition once its in-sync replicas' log starts reached the offset, or
    REQUEST_TIMED_OUT at the request's timeout; a partition that lost its leadership
    meanwhile answers NOT_LEADER_OR_FOLLOWER."""
    broker = ctx.broker
    deadline = trio.current_time() + max(ctx.body.timeout_ms, 0) / 1000
    pending = list(waiting)
    while pending:
        still = []
        for partition, offset, out in pending:
            low = partition.state.low_watermark(partition.log_start_offset)
            if not partition.is_leader:
                out["error_code"] = E.NOT_LEADER_OR_FOLLOWER
            elif low >= offset:
                out["low_watermark"] = low
            else:
                still.append((partition, offset, out))
        pending = still
        remaining = deadline - trio.current_time()
        if not pending or remaining <= 0:
            break
        with timeouts.move_on_after(remaining):
            await broker.wait_for_data([(p.topic, p.index) for p, _, _ in pending])
    for _partition, _offset, out in pending:
        out["error_code"] = E.REQUEST_TIMED_OUT
