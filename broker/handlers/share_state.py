"""The share coordinator's inter-broker APIs: InitializeShareGroupState (83),
ReadShareGroupState (84), WriteShareGroupState (85), DeleteShareGroupState (86) and
ReadShareGroupStateSummary (87).

Owns: unpacking them into one operation per share partition on this broker's share
coordinator (broker.share_coordinator.runtime), and packing the answers back per topic.
Share-partition leaders send them (Kafka's persister); they need CLUSTER_ACTION on the
cluster, as Kafka's KafkaApis requires. Each partition is its own coordinator operation,
so one whose __share_group_state partition this broker does not lead answers
NOT_COORDINATOR without holding up the others.
"""

from __future__ import annotations

from typing import Any, Callable

from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from broker.share_coordinator.state import SharePartitionKey
from protocol.errors import ErrorCode

E = ErrorCode


async def _per_partition(ctx: RequestContext, operation: Callable[..., Any],
                         args_of: Callable[[Any], tuple],
                         shape: Callable[[dict], dict]) -> dict:
    """Run `operation` for every partition of the request, answering per topic; `args_of`
    takes a request partition to the operation's arguments after the key, `shape` the
    coordinator's answer to the response partition's fields."""
    body = ctx.body
    allowed = authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    runtime = ctx.broker.share_coordinator
    results = []
    for topic in body.topics:
        partitions = []
        for p in topic.partitions:
            if not allowed:
                answer = {"error_code": E.CLUSTER_AUTHORIZATION_FAILED}
            else:
                key = SharePartitionKey(body.group_id, topic.topic_id, p.partition)
                answer = await runtime.serve(operation(runtime), key, *args_of(p))
            out = {"partition": p.partition, "error_code": answer["error_code"],
                   "error_message": None}
            if answer["error_code"] == E.NONE:
                out.update(shape(answer))
            partitions.append(out)
        results.append({"topic_id": topic.topic_id, "partitions": partitions})
    return {"results": results}


def _nothing(answer: dict) -> dict:
    return {}


async def handle_initialize(ctx: RequestContext) -> dict:
    return await _per_partition(ctx, lambda r: r.coordinator.handle_initialize,
                                lambda p: (p.state_epoch, p.start_offset), _nothing)


async def handle_read(ctx: RequestContext) -> dict:
    def shape(answer: dict) -> dict:
        return {k: answer[k] for k in ("state_epoch", "start_offset", "state_batches")}
    response = await _per_partition(ctx, lambda r: r.coordinator.handle_read,
                                    lambda p: (p.leader_epoch,), shape)
    for topic in response["results"]:  # an error answers no state
        for p in topic["partitions"]:
            p.setdefault("state_epoch", 0)
            p.setdefault("start_offset", -1)
            p.setdefault("state_batches", [])
    return response


async def handle_write(ctx: RequestContext) -> dict:
    def args(p: Any) -> tuple:
        return (p.state_epoch, p.leader_epoch, p.start_offset,
                [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                  "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                 for b in p.state_batches])
    return await _per_partition(ctx, lambda r: r.coordinator.handle_write, args, _nothing)


async def handle_delete(ctx: RequestContext) -> dict:
    return await _per_partition(ctx, lambda r: r.coordinator.handle_delete,
                                lambda p: (), _nothing)


async def handle_read_summary(ctx: RequestContext) -> dict:
    def shape(answer: dict) -> dict:
        return {"state_epoch": answer["state_epoch"], "start_offset": answer["start_offset"]}
    response = await _per_partition(ctx, lambda r: r.coordinator.handle_read_summary,
                                    lambda p: (p.leader_epoch,), shape)
    for topic in response["results"]:
        for p in topic["partitions"]:
            p.setdefault("state_epoch", 0)
            p.setdefault("start_offset", -1)
    return response
