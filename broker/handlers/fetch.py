"""Fetch: serve whole record batches below the high watermark, long-polling when asked.

The bytes go out as they lie on disk (one pread per partition; nothing is decoded). Size
limits follow KIP-74: `max_bytes` bounds the response and `partition_max_bytes` each
partition, except that the first batch of the response is always sent whole so a consumer
can make progress past a batch larger than its limits.

A fetch that has fewer than `min_bytes` waits up to `max_wait_ms` for appends to any
partition, then reads again. Incremental fetch sessions (KIP-227) are not offered: we answer
session_id 0, which every client treats as "send full fetch requests".

Only the partition's leader serves it: elsewhere the answer is NOT_LEADER_OR_FOLLOWER
(UNKNOWN_TOPIC_OR_PARTITION if the metadata image has no such partition), and a client's
current_leader_epoch older or newer than ours is FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH
(KIP-320). From v12 those answers carry the leader the image names (current_leader).
"""

from __future__ import annotations

import trio

from broker.handlers.common import current_leader, lookup
from broker.handlers.context import RequestContext
from broker.log.errors import LogError, OffsetOutOfRange
from protocol.errors import ErrorCode

READ_COMMITTED = 1
CURRENT_LEADER_VERSION = 12  # the tagged current_leader field
_STALE_LEADER = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                 ErrorCode.UNKNOWN_LEADER_EPOCH)


async def handle(ctx: RequestContext) -> dict:
    body = ctx.body
    deadline = trio.current_time() + max(body.max_wait_ms, 0) / 1000
    while True:
        responses, total, errors = _read(ctx)
        if total >= body.min_bytes or errors or trio.current_time() >= deadline:
            break
        with trio.move_on_at(deadline):
            await ctx.broker.wait_for_data(
                [(t.topic, p.partition) for t in body.topics for p in t.partitions])
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0,
            "responses": responses}


def _read(ctx: RequestContext) -> tuple[list, int, bool]:
    body, broker = ctx.body, ctx.broker
    budget = body.get("max_bytes", 2**31 - 1)
    total, errors = 0, False
    aborted: list[dict] | None = [] if body.isolation_level == READ_COMMITTED else None
    responses = []
    for topic in body.topics:
        partitions = []
        for p in topic.partitions:
            partition, error = lookup(broker, topic.topic, p.partition,
                                      p.get("current_leader_epoch", -1))
            records = b""
            if partition is not None and error == ErrorCode.NONE:
                hw = partition.high_watermark
                limit = min(p.partition_max_bytes, budget)
                try:
                    if p.fetch_offset > hw:
                        raise OffsetOutOfRange(p.fetch_offset)
                    if p.fetch_offset < hw and (limit > 0 or total == 0):
                        records = partition.log.read(p.fetch_offset, limit,
                                                     max_offset=hw,
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
                "aborted_transactions": aborted, "preferred_read_replica": -1,
                "records": records,
            }
            if error in _STALE_LEADER and ctx.version >= CURRENT_LEADER_VERSION:
                out["current_leader"] = current_leader(broker, topic.topic, p.partition)
            partitions.append(out)
        responses.append({"topic": topic.topic, "partitions": partitions})
    return responses, total, errors
