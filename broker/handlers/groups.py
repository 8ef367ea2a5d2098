"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups,
ListGroups, DeleteGroups — thin translations between wire bodies and the coordinator.

The coordinator (broker.coordinator) decides; these handlers only unpack requests, wait for
the coordinator's answer when the protocol says to wait (JoinGroup until the rebalance
completes, SyncGroup until the leader's assignment arrives), and shape the response for the
request's version.

A group's coordinator is the leader of its __consumer_offsets partition, as the metadata
image names it: FindCoordinator answers with that broker's endpoint on the client's listener,
creating __consumer_offsets first if need be, and COORDINATOR_NOT_AVAILABLE while the topic
is not there yet or the partition has no leader. A group request reaching a broker that does
not lead the group's partition gets NOT_COORDINATOR from the coordinator's routing check.
A transaction key (type 1) is found the same way on __transaction_state (DESCRIBE on the
TRANSACTIONAL_ID when ACLs are on).

A share-group key (2, KIP-932) or any other type is INVALID_REQUEST, as Kafka answers a
share key below v6 and, at v6, on a broker without a share coordinator. From v4 every key
of the batch is answered on its own, with the request's one key type.
"""

from __future__ import annotations

from broker.coordinator.membership import JoinRequest, group_id_error, join_error, sync_body
from broker.handlers import share_offsets
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import (
    authorize, authorize_cluster, authorize_group, enabled, unauthorized,
)
from broker.share_coordinator.state import valid_coordinator_key
from protocol.errors import ErrorCode

GROUP_KEY, TRANSACTION_KEY, SHARE_KEY = 0, 1, 2
JOIN_REQUIRES_KNOWN_MEMBER_ID = 4  # KIP-394: JoinGroup v4+ gets MEMBER_ID_REQUIRED first
NULLABLE_PROTOCOL_NAME = 7


async def _coordinator_entry(ctx: RequestContext, key: str, key_type: int) -> dict:
    broker = ctx.broker
    out = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.NONE,
           "error_message": None}
    if key_type == TRANSACTION_KEY:
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            out.update(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                       error_message="Transactional Id authorization failed.")
            return out
        if not key:
            out.update(error_code=ErrorCode.INVALID_REQUEST,
                       error_message="a transactional id must not be empty")
            return out
        return await _located(ctx, broker.transactions, key, out)
    if key_type == SHARE_KEY:
        # a share-partition leader looking for its share coordinator (KIP-932); brokers
        # only, as Kafka requires CLUSTER_ACTION for it
        if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
            out.update(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                       error_message="Cluster authorization failed.")
            return out
        if not valid_coordinator_key(key):
            out.update(error_code=ErrorCode.INVALID_REQUEST,
                       error_message="a share coordinator key is groupId:topicId:partition")
            return out
        return await _located(ctx, broker.share_coordinator, key, out)
    if key_type != GROUP_KEY:
        out.update(error_code=ErrorCode.INVALID_REQUEST,
                   error_message=f"key type {key_type} is not supported by this broker")
        return out
    if not authorize_group(ctx, AclOperation.DESCRIBE, key):
        out.update(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                   error_message="Group authorization failed.")
        return out
    error = group_id_error(key)
    if error != ErrorCode.NONE:
        out.update(error_code=error, error_message="invalid group id")
        return out
    return await _located(ctx, broker.groups, key, out)


async def _located(ctx: RequestContext, runtime, key: str, out: dict) -> dict:
    """`out` with the coordinator of `key` on `runtime`'s internal topic (made first if
    need be), or why there is none yet."""
    if not await runtime.ensure_topic():
        out.update(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                   error_message=f"{runtime.topic} is being created")
        return out
    error, leader, message = runtime.coordinator_node(key)
    endpoint = (ctx.broker.metadata_cache.endpoint(leader, ctx.listener_name)
                if error == ErrorCode.NONE else None)
    if endpoint is None:
        out.update(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                   error_message=message or f"node {leader} has no {ctx.listener_name}")
        return out
    out.update(node_id=leader, host=endpoint.host, port=endpoint.port)
    return out


async def handle_find_coordinator(ctx: RequestContext) -> dict:
    body = ctx.body
    key_type = body.get("key_type", GROUP_KEY)
    if ctx.version >= 4:
        return {"throttle_time_ms": 0, "coordinators": [
            await _coordinator_entry(ctx, key, key_type) for key in body.coordinator_keys]}
    entry = await _coordinator_entry(ctx, body.key, key_type)
    entry.pop("key")
    return {"throttle_time_ms": 0, **entry}


_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED


async def handle_join_group(ctx: RequestContext) -> dict:
    b = ctx.body
    if not authorize_group(ctx, AclOperation.READ, b.group_id):
        body = {"throttle_time_ms": 0, **join_error(_DENIED, b.member_id)}
        if ctx.version < NULLABLE_PROTOCOL_NAME:
            body["protocol_name"] = ""
        return body
    request = JoinRequest(
        group_id=b.group_id, member_id=b.member_id,
        group_instance_id=b.get("group_instance_id"),
        session_timeout_ms=b.session_timeout_ms,
        # v0 had no rebalance timeout: the session timeout served as both (Kafka does this)
        rebalance_timeout_ms=b.rebalance_timeout_ms if ctx.version >= 1 else b.session_timeout_ms,
        protocol_type=b.protocol_type, protocols=[(p.name, p.metadata) for p in b.protocols],
        client_id=ctx.request.header.client_id or "", client_host="/" + ctx.peer.rsplit(":", 1)[0],
        require_known_member_id=ctx.version >= JOIN_REQUIRES_KNOWN_MEMBER_ID,
        reason=b.get("reason"))
    coordinator = ctx.broker.groups.coordinator
    waiter = await ctx.broker.groups.call(coordinator.join, request)
    body = {"throttle_time_ms": 0, **waiter.answer(join_error(ErrorCode.NONE, b.member_id))}
    if ctx.version < NULLABLE_PROTOCOL_NAME and body["protocol_name"] is None:
        body["protocol_name"] = ""  # before v7 an error reply carries an empty name, not null
    return body


async def handle_sync_group(ctx: RequestContext) -> dict:
    b = ctx.body
    if not authorize_group(ctx, AclOperation.READ, b.group_id):
        return sync_body(_DENIED)
    coordinator = ctx.broker.groups.coordinator
    assignments = {a.member_id: a.assignment for a in b.assignments}
    waiter = await ctx.broker.groups.call(
        coordinator.sync, b.group_id, b.generation_id, b.member_id, b.get("group_instance_id"),
        b.get("protocol_type"), b.get("protocol_name"), assignments)
    return waiter.answer(sync_body(ErrorCode.NONE))


async def handle_heartbeat(ctx: RequestContext) -> dict:
    b = ctx.body
    if not authorize_group(ctx, AclOperation.READ, b.group_id):
        return {"throttle_time_ms": 0, "error_code": _DENIED}
    coordinator = ctx.broker.groups.coordinator
    waiter = await ctx.broker.groups.call(coordinator.heartbeat, b.group_id, b.generation_id,
                                          b.member_id, b.get("group_instance_id"))
    return waiter.answer({"throttle_time_ms": 0})


async def handle_leave_group(ctx: RequestContext) -> dict:
    b = ctx.body
    if not authorize_group(ctx, AclOperation.READ, b.group_id):
        return {"throttle_time_ms": 0, "error_code": _DENIED, "members": []}
    if ctx.version >= 3:
        identities = [(m.member_id, m.group_instance_id) for m in b.members]
    else:
        identities = [(b.member_id, None)]
    coordinator = ctx.broker.groups.coordinator
    waiter = await ctx.broker.groups.call(coordinator.leave, b.group_id, identities)
    body = waiter.answer({"throttle_time_ms": 0, "members": []})
    if ctx.version < 3 and body.get("members"):
        # v0-2 name one member, and its error is the response's error
        body["error_code"] = body["error_code"] or body["members"][0]["error_code"]
    return body


async def handle_describe_groups(ctx: RequestContext) -> dict:
    coordinator = ctx.broker.groups.coordinator
    return {"throttle_time_ms": 0, "groups": [
        coordinator.describe(group_id)
        if authorize_group(ctx, AclOperation.DESCRIBE, group_id) else
        {"error_code": _DENIED, "group_id": group_id, "group_state": "",
         "protocol_type": "", "protocol_data": "", "members": []}
        for group_id in ctx.body.groups]}


async def handle_list_groups(ctx: RequestContext) -> dict:
    body = ctx.body
    states = set(body.get("states_filter") or []) or None
    types = {t.lower() for t in body.get("types_filter") or []}
    groups = ctx.broker.groups.coordinator.list_groups(states)
    if types:
        groups = [g for g in groups if g["group_type"] in types]
    if enabled(ctx) and not authorize_cluster(ctx, AclOperation.DESCRIBE, log_denied=False):
        # without DESCRIBE on the cluster, only the groups the principal may describe
        hidden = unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP,
                              [g["group_id"] for g in groups], log_denied=False)
        groups = [g for g in groups if g["group_id"] not in hidden]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": groups}


async def handle_delete_groups(ctx: RequestContext) -> dict:
    runtime = ctx.broker.groups
    results = []
    for group_id in ctx.body.groups_names:
        if not authorize_group(ctx, AclOperation.DELETE, group_id):
            results.append({"group_id": group_id, "error_code": _DENIED})
            continue
        # a share group's state goes first (its share coordinators'), then the group, so
        # a failure leaves the group there to delete again, as Kafka orders it
        error, _message, state = runtime.coordinator.share_state_partitions(
            group_id, require_empty=True)
        if error == ErrorCode.NONE and state:
            error = await share_offsets.delete_state(ctx, group_id, state)
            if error != ErrorCode.NONE:
                results.append({"group_id": group_id, "error_code": error})
                continue
        error, effects = runtime.coordinator.delete_group(group_id, ctx.broker.now_ms())
        if effects:
            error = runtime.apply_effects(effects) or error
        results.append({"group_id": group_id, "error_code": error})
    return {"throttle_time_ms": 0, "results": results}

