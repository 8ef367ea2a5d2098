"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69)
— translations between the wire, where topics are ids, and the coordinator, where they are
names (broker.coordinator.consumer_group decides everything).

A heartbeat's owned partitions of a topic id the metadata image does not know are dropped
(the topic was deleted: nobody can hold it); an assignment names only topics that exist.
"""

from __future__ import annotations

from typing import Any, Mapping

from broker.coordinator.consumer_group import HeartbeatRequest
from broker.coordinator.server_assigned import heartbeat_error
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize_group, unauthorized
from protocol.errors import ErrorCode


def _names(ctx: RequestContext, items: Any) -> dict[str, frozenset[int]] | None:
    if items is None:
        return None
    out: dict[str, frozenset[int]] = {}
    for item in items:
        topic = ctx.broker.metadata_cache.topic_by_id(item.topic_id)
        if topic is not None:
            out[topic.name] = out.get(topic.name, frozenset()) | frozenset(item.partitions)
    return out


def _ids(ctx: RequestContext, assignment: Mapping[str, frozenset[int]],
         with_names: bool = False) -> list[dict]:
    out = []
    for name, partitions in sorted(assignment.items()):
        topic = ctx.broker.metadata_cache.topic(name)
        if topic is None:
            continue
        entry: dict[str, Any] = {"topic_id": topic.topic_id, "partitions": sorted(partitions)}
        if with_names:
            entry["topic_name"] = name
        out.append(entry)
    return out


def heartbeat_refusal(ctx: RequestContext) -> dict | None:
    """A heartbeat's authorization (KIP-848's, KIP-932's): READ on the group, DESCRIBE on
    each subscribed topic; the error answer when either is missing."""
    b = ctx.body
    if not authorize_group(ctx, AclOperation.READ, b.group_id):
        return heartbeat_error(ErrorCode.GROUP_AUTHORIZATION_FAILED,
                               "Group authorization failed.", b.member_id)
    denied = unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                          b.subscribed_topic_names or [])
    if denied:
        return heartbeat_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                               f"Topic authorization failed for {sorted(denied)}.",
                               b.member_id)
    return None


async def handle_heartbeat(ctx: RequestContext) -> dict:
    refusal = heartbeat_refusal(ctx)
    if refusal is not None:
        return refusal
    b = ctx.body
    request = HeartbeatRequest(
        group_id=b.group_id, member_id=b.member_id, member_epoch=b.member_epoch,
        instance_id=b.instance_id, rack_id=b.rack_id,
        rebalance_timeout_ms=b.rebalance_timeout_ms,
        subscribed_topic_names=(list(b.subscribed_topic_names)
                                if b.subscribed_topic_names is not None else None),
        subscribed_topic_regex=b.get("subscribed_topic_regex"),
        server_assignor=b.server_assignor,
        owned=_names(ctx, b.topic_partitions),
        client_id=ctx.request.header.client_id or "",
        client_host="/" + ctx.peer.rsplit(":", 1)[0])
    return await heartbeat(ctx, ctx.broker.groups.coordinator.consumer_group_heartbeat, request)


async def heartbeat(ctx: RequestContext, operation: Any, request: Any) -> dict:
    """A heartbeat of a group with server-side assignment (KIP-848's, KIP-932's) run on
    the coordinator: its answer with the assignment's topics by id, or an error answer when
    its records could not be written (the member must try again)."""
    waiter = await ctx.broker.groups.call(operation, request)
    if waiter.error != ErrorCode.NONE:
        return heartbeat_error(waiter.error, None, ctx.body.member_id)
    body = dict(waiter.body)
    if body.get("assignment") is not None:
        body["assignment"] = {"topic_partitions": _ids(ctx, body["assignment"])}
    return body


async def handle_describe(ctx: RequestContext) -> dict:
    return describe(ctx, ctx.broker.groups.coordinator.consumer_group_describe,
                    ("assignment", "target_assignment"))


def describe(ctx: RequestContext, describe_group: Any, assignment_fields: tuple[str, ...]
             ) -> dict:
    """ConsumerGroupDescribe or ShareGroupDescribe: each group the principal may describe,
    with its members' assignments' topics by id and name."""
    groups = []
    for group_id in ctx.body.group_ids:
        if not authorize_group(ctx, AclOperation.DESCRIBE, group_id):
            groups.append({"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                           "error_message": "Group authorization failed.",
                           "group_id": group_id, "group_state": "", "group_epoch": -1,
                           "assignment_epoch": -1, "assignor_name": "", "members": []})
            continue
        described = describe_group(group_id)
        for member in described["members"]:
            for field in assignment_fields:
                member[field] = {"topic_partitions": _ids(ctx, member[field], with_names=True)}
        groups.append(described)
    return {"throttle_time_ms": 0, "groups": groups}
