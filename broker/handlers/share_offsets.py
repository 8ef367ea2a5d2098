"""The admin APIs of share groups' offsets (KIP-932): DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92), served by the group's
coordinator.

A share group's offset on a partition is its share-partition start offset, which the share
coordinator keeps (broker.share_coordinator). The group coordinator knows which partitions
the group may have state on (its state partitions: broker.coordinator.share_group); these
handlers ask the share coordinator of each (the persister: ReadShareGroupStateSummary,
InitializeShareGroupState, DeleteShareGroupState) and record what changed.

- Describe lists the named partitions, or with topics null every state partition, each
  with its start offset and the leader epoch its state was last written at; a partition
  with no state answers start offset -1.
- Alter and Delete need an empty group (NON_EMPTY_GROUP otherwise), as Kafka: records in
  flight belong to members. Alter starts each partition's state afresh at the new start
  offset under the next state epoch, which fences whatever a share-partition leader still
  holds: its next write is refused and it loads the new state (broker.share.manager also
  checks the state epoch when a share session opens, for a leader that has nothing to
  write). Delete removes a topic's state from the share coordinator, then from the group.
- ACLs as Kafka's KafkaApis: Describe needs DESCRIBE on the group and the topics, Alter
  READ on both, Delete DELETE on the group and READ on the topics.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterable

from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_group, authorize_topic
from broker.share_coordinator.state import SharePartitionKey
from protocol.errors import ErrorCode

E = ErrorCode
NO_TOPIC_ID = uuid.UUID(int=0)
NO_OFFSET = -1


def _group_error(error: E, message: str | None = None) -> dict:
    return {"error_code": error, "error_message": message}


async def handle_describe(ctx: RequestContext) -> dict:
    return {"throttle_time_ms": 0,
            "groups": [await _describe_group(ctx, g.group_id, g.topics) for g in ctx.body.groups]}


async def _describe_group(ctx: RequestContext, group_id: str, topics: Any) -> dict:
    out: dict[str, Any] = {"group_id": group_id, "topics": [], **_group_error(E.NONE)}
    if not authorize_group(ctx, AclOperation.DESCRIBE, group_id):
        return {**out, **_group_error(E.GROUP_AUTHORIZATION_FAILED)}
    coordinator = ctx.broker.groups.coordinator
    error, message, held = coordinator.share_state_partitions(group_id)
    if error != E.NONE:
        return {**out, **_group_error(error, message)}
    wanted = ([(t.topic_name, list(t.partitions)) for t in topics] if topics is not None
              else [(name, sorted(ps)) for name, ps in sorted(held.items())])
    for name, partitions in wanted:
        topic = ctx.broker.metadata_cache.topic(name)
        if topic is None or not authorize_topic(ctx, AclOperation.DESCRIBE, name):
            error = E.UNKNOWN_TOPIC_OR_PARTITION if topic is None else E.TOPIC_AUTHORIZATION_FAILED
            out["topics"].append({"topic_name": name, "topic_id": NO_TOPIC_ID, "partitions": [
                _offset(p, NO_OFFSET, -1, error) for p in partitions]})
            continue
        rows = []
        for p in partitions:
            if p not in held.get(name, ()):
                rows.append(_offset(p, NO_OFFSET, -1, E.NONE))
                continue
            key = SharePartitionKey(group_id, topic.topic_id, p)
            summary = await ctx.broker.share_coordinator.read_summary(key, -1)
            rows.append(_offset(p, summary.get("start_offset", NO_OFFSET),
                                summary.get("leader_epoch", -1), E(summary["error_code"])))
        out["topics"].append({"topic_name": name, "topic_id": topic.topic_id,
                              "partitions": rows})
    return out


def _offset(partition: int, start_offset: int, leader_epoch: int, error: E) -> dict:
    if error != E.NONE:
        start_offset, leader_epoch = NO_OFFSET, -1
    return {"partition_index": partition, "start_offset": start_offset,
            "leader_epoch": leader_epoch, "error_code": error, "error_message": None}


async def handle_alter(ctx: RequestContext) -> dict:
    b = ctx.body
    answer: dict[str, Any] = {"throttle_time_ms": 0, **_group_error(E.NONE), "responses": []}
    refusal, _held = _empty_group(ctx, b.group_id, AclOperation.READ)
    if refusal is not None:
        return {**answer, **refusal}
    persister = ctx.broker.share_coordinator
    altered: dict[str, frozenset[int]] = {}
    for t in b.topics:
        topic = ctx.broker.metadata_cache.topic(t.topic_name)
        topic_error = _topic_error(ctx, t.topic_name, topic)
        rows = []
        for p in t.partitions:
            error = topic_error
            if topic is not None and error == E.NONE:
                if p.partition_index not in topic.partitions:
                    error = E.UNKNOWN_TOPIC_OR_PARTITION
                elif p.start_offset < 0:
                    error = E.INVALID_REQUEST
            if topic is not None and error == E.NONE:
                key = SharePartitionKey(b.group_id, topic.topic_id, p.partition_index)
                summary = await persister.read_summary(key, -1)
                error = E(summary["error_code"])
                if error == E.NONE:
                    initialized = await persister.initialize_state(
                        key, summary["state_epoch"] + 1, p.start_offset)
                    error = E(initialized["error_code"])
                if error == E.NONE:
                    ctx.broker.shares.drop(key)
                    altered[t.topic_name] = (altered.get(t.topic_name, frozenset())
                                             | {p.partition_index})
            rows.append({"partition_index": p.partition_index, "error_code": error,
                         "error_message": None})
        answer["responses"].append({
            "topic_name": t.topic_name,
            "topic_id": topic.topic_id if topic is not None else NO_TOPIC_ID,
            "partitions": rows})
    return {**answer, **_record(ctx, b.group_id, altered, [])}


async def handle_delete(ctx: RequestContext) -> dict:
    b = ctx.body
    answer: dict[str, Any] = {"throttle_time_ms": 0, **_group_error(E.NONE), "responses": []}
    refusal, held = _empty_group(ctx, b.group_id, AclOperation.DELETE)
    if refusal is not None:
        return {**answer, **refusal}
    deleted = []
    for t in b.topics:
        topic = ctx.broker.metadata_cache.topic(t.topic_name)
        error = _topic_error(ctx, t.topic_name, topic)
        if error == E.NONE:
            error = await delete_state(ctx, b.group_id, {t.topic_name: held.get(t.topic_name,
                                                                                  frozenset())})
        if error == E.NONE:
            deleted.append(t.topic_name)
        answer["responses"].append({
            "topic_name": t.topic_name,
            "topic_id": topic.topic_id if topic is not None else NO_TOPIC_ID,
            "error_code": error, "error_message": None})
    return {**answer, **_record(ctx, b.group_id, {}, deleted)}


async def delete_state(ctx: RequestContext, group_id: str,
                       partitions: dict[str, Iterable[int]]) -> E:
    """Delete a share group's state on `partitions` (topic name -> indexes) from the share
    coordinators: the first error, or NONE. Topics since deleted have nothing to delete."""
    first = E.NONE
    for name, indexes in partitions.items():
        topic = ctx.broker.metadata_cache.topic(name)
        if topic is None:
            continue
        for index in sorted(indexes):
            key = SharePartitionKey(group_id, topic.topic_id, index)
            error = E((await ctx.broker.share_coordinator.delete_state(key))["error_code"])
            if error == E.NONE:
                ctx.broker.shares.drop(key)
            elif first == E.NONE:
                first = error
    return first


def _empty_group(ctx: RequestContext, group_id: str, operation: AclOperation
                 ) -> tuple[dict | None, dict[str, frozenset[int]]]:
    """(None, the group's state partitions) for an empty share group the principal may
    `operation`; else (the group-level error, {})."""
    if not authorize_group(ctx, operation, group_id):
        return _group_error(E.GROUP_AUTHORIZATION_FAILED), {}
    error, message, held = ctx.broker.groups.coordinator.share_state_partitions(
        group_id, require_empty=True)
    return (None, held) if error == E.NONE else (_group_error(error, message), {})


def _topic_error(ctx: RequestContext, name: str, topic: Any) -> E:
    if topic is None:
        return E.UNKNOWN_TOPIC_OR_PARTITION
    if not authorize_topic(ctx, AclOperation.READ, name):
        return E.TOPIC_AUTHORIZATION_FAILED
    return E.NONE


def _record(ctx: RequestContext, group_id: str, added: dict[str, frozenset[int]],
            removed: list[str]) -> dict:
    """Write the group's changed state partitions; a failed write is the group's error
    (the share coordinator's state was changed, the group's list of it was not: retrying
    is harmless)."""
    effects = ctx.broker.groups.coordinator.share_state_partitions_changed(group_id, added,
                                                                           removed)
    error = ctx.broker.groups.apply_effects(effects) if effects else E.NONE
    return {} if error == E.NONE else _group_error(error)
