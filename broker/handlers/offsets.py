"""Offset APIs: OffsetCommit, OffsetFetch, OffsetDelete.

A commit is answered only after its records are in the group's __consumer_offsets
partition (broker.coordinator.runtime orders the append before the reply). OffsetFetch v8
batches several groups; older versions carry one group, and before v2 a group-level error
can only travel in every partition's error code.
"""

from __future__ import annotations

from broker.coordinator.offsets import INVALID_OFFSET
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize_group, unauthorized
from protocol.errors import ErrorCode

GROUP_ERROR_IN_BODY = 2  # OffsetFetch v2+ has a top-level error code


async def handle_offset_commit(ctx: RequestContext) -> dict:
    b = ctx.body
    errors: dict[tuple[str, int], ErrorCode] = {}
    if not authorize_group(ctx, AclOperation.READ, b.group_id):
        errors = {(t.name, p.partition_index): ErrorCode.GROUP_AUTHORIZATION_FAILED
                  for t in b.topics for p in t.partitions}
    denied = unauthorized(ctx, AclOperation.READ, ResourceType.TOPIC,
                          (t.name for t in b.topics)) if not errors else frozenset()
    errors.update({(t.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                   for t in b.topics if t.name in denied for p in t.partitions})
    offsets = [(t.name, p.partition_index, p.committed_offset,
                p.get("committed_leader_epoch", -1), p.committed_metadata)
               for t in b.topics for p in t.partitions
               if (t.name, p.partition_index) not in errors]
    if offsets:
        coordinator = ctx.broker.groups.coordinator
        waiter = await ctx.broker.groups.call(
            coordinator.commit, b.group_id, b.get("generation_id_or_member_epoch", -1),
            b.get("member_id", ""), b.get("group_instance_id"), offsets)
        errors.update(waiter.body if waiter.error == ErrorCode.NONE else {
            (t, p): waiter.error for t, p, *_ in offsets})
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": errors[(t.name, p.partition_index)]}
            for p in t.partitions]}
        for t in b.topics]}


def _fetch_group(ctx: RequestContext, group_id: str, topics, member_id: str | None = None,
                 member_epoch: int = -1, require_stable: bool = False) -> tuple[ErrorCode, list]:
    """The group's error and its topics; the error is repeated in every partition only
    where the version has no group-level error code to carry it (before v2). v9 names a
    consumer group's member and epoch, which must be current."""
    if not authorize_group(ctx, AclOperation.DESCRIBE, group_id):
        if ctx.version < GROUP_ERROR_IN_BODY and topics is not None:
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, [
                {"name": t.name, "partitions": [
                    {"partition_index": p, "committed_offset": INVALID_OFFSET,
                     "committed_leader_epoch": -1, "metadata": "",
                     "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
                    for p in t.partition_indexes]} for t in topics]
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    # named topics the principal may not describe are answered TOPIC_AUTHORIZATION_FAILED,
    # and left out of an all-topics answer
    denied = unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                          (t.name for t in topics or []))
    error, committed = ctx.broker.groups.coordinator.fetch_offsets(
        group_id, None if wanted is None else [w for w in wanted if w[0] not in denied],
        member_id, member_epoch)
    if error != ErrorCode.NONE and (wanted is None or ctx.version >= GROUP_ERROR_IN_BODY):
        # as Kafka answers a group that errs (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR,
        # ...): the error alone, no partitions. Partitions with offset -1 beside it read as
        # "nothing committed" to librdkafka, which then waited for its retry for good
        # (seen under load in tests/interop/test_metrics.py)
        return error, []
    if wanted is None and ctx.broker.authorizer is not None:
        hidden = unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                              (t for t, _ in committed), log_denied=False)
        committed = {k: v for k, v in committed.items() if k[0] not in hidden}
    partition_error = error if ctx.version < GROUP_ERROR_IN_BODY else ErrorCode.NONE
    offsets = ctx.broker.groups.coordinator.offsets
    by_topic: dict[str, list] = {}
    for topic, partition in (wanted if wanted is not None else sorted(committed)):
        offset = committed.get((topic, partition))
        if require_stable and offsets.has_pending_txn(group_id, [(topic, partition)]):
            # KIP-447: a transaction that will move this offset has not ended yet
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": INVALID_OFFSET,
                "committed_leader_epoch": -1, "metadata": "",
                "error_code": ErrorCode.UNSTABLE_OFFSET_COMMIT})
            continue
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": offset.offset if offset else INVALID_OFFSET,
            "committed_leader_epoch": offset.leader_epoch if offset else -1,
            "metadata": offset.metadata if offset else "",
            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED if topic in denied
            else partition_error})
    return error, [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


async def handle_offset_fetch(ctx: RequestContext) -> dict:
    body = ctx.body
    if ctx.version >= 8:
        groups = []
        for g in body.groups:
            error, topics = _fetch_group(ctx, g.group_id, g.topics, g.get("member_id"),
                                         g.get("member_epoch", -1),
                                         body.get("require_stable", False))
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return {"throttle_time_ms": 0, "groups": groups}
    error, topics = _fetch_group(ctx, body.group_id, body.topics,
                                 require_stable=body.get("require_stable", False))
    return {"throttle_time_ms": 0, "topics": topics, "error_code": error}


async def handle_offset_delete(ctx: RequestContext) -> dict:
    b = ctx.body
    if not authorize_group(ctx, AclOperation.DELETE, b.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0,
                "topics": []}
    denied = unauthorized(ctx, AclOperation.READ, ResourceType.TOPIC,
                          (t.name for t in b.topics))
    partitions = [(t.name, p.partition_index) for t in b.topics if t.name not in denied
                  for p in t.partitions]
    runtime = ctx.broker.groups
    error, errors, effects = runtime.coordinator.delete_offsets(b.group_id, partitions)
    if effects:
        error = runtime.apply_effects(effects) or error
    errors = {**errors, **{(t.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                           for t in b.topics if t.name in denied for p in t.partitions}}
    return {"error_code": error, "throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": errors.get((t.name, p.partition_index), ErrorCode.NONE)}
            for p in t.partitions]}
        for t in b.topics] if error == ErrorCode.NONE else []}
