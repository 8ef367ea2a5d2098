"""Offset APIs: OffsetCommit, OffsetFetch, OffsetDelete.

A commit is answered only after its records are in the group's __consumer_offsets
partition (broker.coordinator.runtime orders the append before the reply). OffsetFetch v8
batches several groups; older versions carry one group, and before v2 a group-level error
can only travel in every partition's error code.
"""

from __future__ import annotations

from broker.coordinator.offsets import INVALID_OFFSET
from broker.handlers.context import RequestContext
from protocol.errors import ErrorCode

GROUP_ERROR_IN_BODY = 2  # OffsetFetch v2+ has a top-level error code


async def handle_offset_commit(ctx: RequestContext) -> dict:
    b = ctx.body
    offsets = [(t.name, p.partition_index, p.committed_offset,
                p.get("committed_leader_epoch", -1), p.committed_metadata)
               for t in b.topics for p in t.partitions]
    coordinator = ctx.broker.groups.coordinator
    waiter = await ctx.broker.groups.call(
        coordinator.commit, b.group_id, b.get("generation_id_or_member_epoch", -1),
        b.get("member_id", ""), b.get("group_instance_id"), offsets)
    errors = waiter.body if waiter.error == ErrorCode.NONE else {
        (t, p): waiter.error for t, p, *_ in offsets}
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": errors[(t.name, p.partition_index)]}
            for p in t.partitions]}
        for t in b.topics]}


def _fetch_group(ctx: RequestContext, group_id: str, topics, member_id: str | None = None,
                 member_epoch: int = -1) -> tuple[ErrorCode, list]:
    """The group's error and its topics; the error is repeated in every partition only
    where the version has no group-level error code to carry it (before v2). v9 names a
    consumer group's member and epoch, which must be current."""
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    error, committed = ctx.broker.groups.coordinator.fetch_offsets(group_id, wanted, member_id,
                                                                   member_epoch)
    if error != ErrorCode.NONE and wanted is None:
        return error, []
    partition_error = error if ctx.version < GROUP_ERROR_IN_BODY else ErrorCode.NONE
    by_topic: dict[str, list] = {}
    for topic, partition in (wanted if wanted is not None else sorted(committed)):
        offset = committed.get((topic, partition))
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": offset.offset if offset else INVALID_OFFSET,
            "committed_leader_epoch": offset.leader_epoch if offset else -1,
            "metadata": offset.metadata if offset else "",
            "error_code": partition_error})
    return error, [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


async def handle_offset_fetch(ctx: RequestContext) -> dict:
    body = ctx.body
    if ctx.version >= 8:
        groups = []
        for g in body.groups:
            error, topics = _fetch_group(ctx, g.group_id, g.topics, g.get("member_id"),
                                         g.get("member_epoch", -1))
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return {"throttle_time_ms": 0, "groups": groups}
    error, topics = _fetch_group(ctx, body.group_id, body.topics)
    return {"throttle_time_ms": 0, "topics": topics, "error_code": error}


async def handle_offset_delete(ctx: RequestContext) -> dict:
    b = ctx.body
    partitions = [(t.name, p.partition_index) for t in b.topics for p in t.partitions]
    runtime = ctx.broker.groups
    error, errors, effects = runtime.coordinator.delete_offsets(b.group_id, partitions)
    if effects:
        error = runtime.apply_effects(effects) or error
    return {"error_code": error, "throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": errors.get((t.name, p.partition_index), ErrorCode.NONE)}
            for p in t.partitions]}
        for t in b.topics] if error == ErrorCode.NONE else []}
