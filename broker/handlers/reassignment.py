"""Partition reassignment (KIP-455): AlterPartitionReassignments (45), forwarded to the
active controller (broker.controller.reassignment decides), and
ListPartitionReassignments (46), answered from this broker's metadata image, where the
controller's records put the replicas being added and removed.

Both need ALTER (alter) or DESCRIBE (list) on the cluster, as Kafka. No controller in time:
REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from broker.controller import reassignment
from broker.controller_channel import ControllerUnavailable
from broker.handlers.common import forward
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from protocol import messages as m
from protocol.errors import ErrorCode

E = ErrorCode


def _everywhere(body, code: ErrorCode, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "responses": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": code,
                 "error_message": message} for p in t.partitions]} for t in body.topics]}


async def handle_alter(ctx: RequestContext) -> dict:
    body = ctx.body
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _everywhere(body, E.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    try:
        return dict(await forward(ctx.broker, m.ALTER_PARTITION_REASSIGNMENTS, ctx.version,
                                  body))
    except ControllerUnavailable:
        return _everywhere(body, E.REQUEST_TIMED_OUT,
                           "No controller answered within the request timeout.")


async def handle_list(ctx: RequestContext) -> dict:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed.", "topics": []}
    return {"throttle_time_ms": 0, "error_code": E.NONE, "error_message": None,
            "topics": reassignment.ongoing(ctx.broker.metadata_cache.image, ctx.body.topics)}
