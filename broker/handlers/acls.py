"""ACL APIs: DescribeAcls, answered from this broker's metadata image, and CreateAcls and
DeleteAcls, forwarded to the active controller, which writes the ACL records (KIP-590).

Without an authorizer (authorizer.class.name empty) all three answer SECURITY_DISABLED, as
Kafka's brokers do. DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls
ALTER (CLUSTER_AUTHORIZATION_FAILED otherwise). A DescribeAcls filter with an UNKNOWN
component is INVALID_REQUEST; the bindings it matches are grouped by resource pattern.

A successful CreateAcls or DeleteAcls is held (at most VISIBILITY_WAIT_S) until this broker's
image shows its effect, so the client's next DescribeAcls here, and every request this broker
authorizes, sees it. No controller in time: REQUEST_TIMED_OUT for every creation or filter.
"""

from __future__ import annotations

from typing import Any

from broker.controller.acl_control import binding_filter
from broker.controller_channel import ControllerUnavailable
from broker.handlers.common import forward
from broker.handlers.context import RequestContext
from broker.metadata_cache import MetadataCache
from broker.security.acls import AclBindingFilter, AclOperation
from broker.security.authorize import authorize_cluster, enabled
from protocol import messages as m
from protocol.errors import ErrorCode

VISIBILITY_WAIT_S = 5.0
NO_AUTHORIZER = "No Authorizer is configured on the broker"
NO_CONTROLLER = "No controller answered within the request timeout."
DENIED = "Cluster authorization failed."


def _error(code: ErrorCode, message: str | None) -> dict:
    return {"error_code": code, "error_message": message}


async def handle_describe_acls(ctx: RequestContext) -> dict:
    out: dict[str, Any] = {"throttle_time_ms": 0, **_error(ErrorCode.NONE, None), "resources": []}
    if not enabled(ctx):
        return {**out, **_error(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)}
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {**out, **_error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, DENIED)}
    acl_filter = binding_filter(ctx.body)
    reason = acl_filter.unknown_reason()
    if reason is not None:
        return {**out, **_error(ErrorCode.INVALID_REQUEST, reason)}
    out["resources"] = describe(ctx.broker.metadata_cache, acl_filter)
    return out


def describe(cache: MetadataCache, acl_filter: AclBindingFilter) -> list[dict]:
    """The image's bindings the filter matches, grouped by resource pattern, in a stable
    order (resource type, name, pattern type; then principal, host, operation, permission)."""
    grouped: dict[tuple[int, str, int], list[dict]] = {}
    for b in sorted(cache.image.acls.values(), key=lambda b: (
            b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host,
            b.operation, b.permission_type)):
        if acl_filter.matches(b):
            grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
                {"principal": b.principal, "host": b.host, "operation": b.operation,
                 "permission_type": b.permission_type})
    return [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in grouped.items()]


async def handle_create_acls(ctx: RequestContext) -> dict:
    body = ctx.body

    def every(code: ErrorCode, message: str | None) -> dict:
        return {"throttle_time_ms": 0, "results": [_error(code, message)
                                                   for _ in body.creations]}

    if not enabled(ctx):
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, DENIED)
    if not body.creations:
        return every(ErrorCode.NONE, None)
    try:
        response = await forward(ctx.broker, m.CREATE_ACLS, ctx.version, body)
    except ControllerUnavailable:
        return every(ErrorCode.REQUEST_TIMED_OUT, NO_CONTROLLER)
    created = {(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                c.host, c.operation, c.permission_type)
               for c, r in zip(body.creations, response["results"])
               if r["error_code"] == ErrorCode.NONE}

    def visible(cache: MetadataCache) -> bool:
        present = {(b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host,
                    b.operation, b.permission_type) for b in cache.image.acls.values()}
        return created <= present

    if created and not visible(ctx.broker.metadata_cache):
        await ctx.broker.wait_for_metadata(visible, VISIBILITY_WAIT_S)
    return {"throttle_time_ms": 0, "results": [dict(r) for r in response["results"]]}


async def handle_delete_acls(ctx: RequestContext) -> dict:
    body = ctx.body

    def every(code: ErrorCode, message: str | None) -> dict:
        return {"throttle_time_ms": 0, "filter_results": [
            {**_error(code, message), "matching_acls": []} for _ in body.filters]}

    if not enabled(ctx):
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, DENIED)
    if not body.filters:
        return every(ErrorCode.NONE, None)
    try:
        response = await forward(ctx.broker, m.DELETE_ACLS, ctx.version, body)
    except ControllerUnavailable:
        return every(ErrorCode.REQUEST_TIMED_OUT, NO_CONTROLLER)
    results = [dict(r) for r in response["filter_results"]]
    deleted = {(a["resource_type"], a["resource_name"], a["pattern_type"], a["principal"],
                a["host"], a["operation"], a["permission_type"])
               for r in results for a in r["matching_acls"]}

    def visible(cache: MetadataCache) -> bool:
        return not any((b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host,
                        b.operation, b.permission_type) in deleted
                       for b in cache.image.acls.values())

    if deleted and not visible(ctx.broker.metadata_cache):
        await ctx.broker.wait_for_metadata(visible, VISIBILITY_WAIT_S)
    return {"throttle_time_ms": 0, "filter_results": results}
