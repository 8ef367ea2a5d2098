"""Client telemetry (KIP-714): GetTelemetrySubscriptions, PushTelemetry,
ListClientMetricsResources, over broker.telemetry's one subscription. A push that passes
its checks is written as a `client_metrics` event; one that does not is answered with the
error, and the client adjusts (a new subscription, a later push) as KIP-714 says. As in
Kafka, any client may ask and push, and listing the subscriptions needs DESCRIBE_CONFIGS on
the cluster."""

from __future__ import annotations

from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from broker.telemetry import SUBSCRIPTION_NAME, point_text
from protocol.errors import ErrorCode


async def handle_get_subscriptions(ctx: RequestContext) -> dict:
    return ctx.broker.telemetry.subscribe(ctx.body.client_instance_id)


async def handle_push(ctx: RequestContext) -> dict:
    broker = ctx.broker
    error, telemetry = broker.telemetry.push(ctx.body, broker.now_ms())
    if telemetry is not None:
        broker.events.emit("client_metrics",
                           client_instance_id=str(ctx.body.client_instance_id),
                           client_id=ctx.request.header.client_id or "", peer=ctx.peer,
                           terminating=bool(ctx.body.terminating),
                           points=[point_text(p) for p in telemetry.points])
    return {"throttle_time_ms": 0, "error_code": error}


async def handle_list_resources(ctx: RequestContext) -> dict:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "client_metrics_resources": []}
    names = [{"name": SUBSCRIPTION_NAME}] if ctx.broker.telemetry.enabled else []
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "client_metrics_resources": names}
