"""InitProducerId: producer ids and epochs for idempotent producers.

A producer id is never reused, across restarts and brokers: the active controller hands
them out (`broker.allocate_producer_id`, blocks committed to the metadata log by
AllocateProducerIds); when no controller answers, COORDINATOR_NOT_AVAILABLE, which clients
retry. A request that names its current id and epoch (v3+, KIP-360) gets the epoch bumped.
A request with a transactional id goes to the transaction coordinator
(broker.handlers.transactions).
"""

from __future__ import annotations

from broker.controller_channel import ControllerUnavailable
from broker.handlers import transactions
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_any_topic, authorize_cluster, enabled
from protocol.errors import ErrorCode

MAX_EPOCH = 32767


async def handle(ctx: RequestContext) -> dict:
    body = ctx.body
    out = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": -1,
           "producer_epoch": -1}
    if body.transactional_id is not None:
        return await transactions.init_producer_id(ctx)
    # an idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
    if enabled(ctx) and not authorize_cluster(ctx, AclOperation.IDEMPOTENT_WRITE,
                                              log_denied=False) \
            and not authorize_any_topic(ctx, AclOperation.WRITE):
        out["error_code"] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return out
    pid, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH:
        out["producer_id"], out["producer_epoch"] = pid, epoch + 1
    else:
        try:
            out["producer_id"], out["producer_epoch"] = await ctx.broker.allocate_producer_id(), 0
        except ControllerUnavailable:
            out["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
    return out
