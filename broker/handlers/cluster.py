"""Cluster APIs on the client listener: DescribeCluster, ElectLeaders and UnregisterBroker.

DescribeCluster (KIP-700) names the live brokers with their endpoint on the client's
listener and rack, the cluster id and the active controller (as Metadata names it: this
broker when the controller is not a listed broker), all from the metadata image;
only broker endpoints (endpoint_type 1) are served here, as on a Kafka broker, so a request
for controllers (2, KIP-919) gets UNSUPPORTED_ENDPOINT_TYPE. ElectLeaders (KIP-460) is
forwarded to the active controller; a successful election is awaited in this broker's image
(within the request's timeout, capped) so that the client's next Metadata sees the new
leaders. UnregisterBroker (kafka-cluster.sh unregister, `minibroker cluster unregister`)
needs ALTER on the cluster and is forwarded to the active controller, which answers
BROKER_ID_NOT_REGISTERED for an id it does not know. No controller in time:
REQUEST_TIMED_OUT. AddRaftVoter and
RemoveRaftVoter (KIP-853) are forwarded to the quorum's leader the same way.
"""

from __future__ import annotations

from typing import Any

from broker.controller import raft_codec, voter_api
from broker.controller_channel import ControllerUnavailable
from broker.handlers.common import forward
from broker.handlers.context import RequestContext
from broker.handlers.metadata import brokers, controller_id
from broker.metadata_cache import MetadataCache
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from protocol import messages as m
from protocol.errors import ErrorCode

BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2
PREFERRED, UNCLEAN = 0, 1
VISIBILITY_WAIT_S = 5.0
AUTHORIZED_OPERATIONS_OMITTED = -2**31


async def handle_describe_cluster(ctx: RequestContext) -> dict:
    cache = ctx.broker.metadata_cache
    listed = brokers(ctx, cache)
    out: dict[str, Any] = {
           "throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
           "endpoint_type": BROKER_ENDPOINTS, "cluster_id": cache.cluster_id,
           "controller_id": controller_id(ctx, cache, listed), "brokers": [],
           "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
    endpoint_type = ctx.body.get("endpoint_type", BROKER_ENDPOINTS)
    if endpoint_type != BROKER_ENDPOINTS:
        out.update(error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, endpoint_type=endpoint_type,
                   error_message="This broker describes broker endpoints only.")
        return out
    out["brokers"] = [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"],
                       "rack": b["rack"]} for b in listed]
    return out


async def handle_elect_leaders(ctx: RequestContext) -> dict:
    body = ctx.body
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _every_partition(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                "Cluster authorization failed.")
    try:
        response = await forward(ctx.broker, m.ELECT_LEADERS, ctx.version, body)
    except ControllerUnavailable:
        return _timed_out(body)
    elected = [(r["topic"], p["partition_id"]) for r in response["replica_election_results"]
               for p in r["partition_result"] if p["error_code"] == ErrorCode.NONE]
    timeout_s = min(max(body.timeout_ms, 0) / 1000, VISIBILITY_WAIT_S)
    if elected and timeout_s > 0:
        election_type = body.get("election_type", PREFERRED)

        def done(cache: MetadataCache) -> bool:
            return all(_elected(cache, t, i, election_type) for t, i in elected)

        if not done(ctx.broker.metadata_cache):
            await ctx.broker.wait_for_metadata(done, timeout_s)
    return {"throttle_time_ms": 0, **dict(response)}


async def handle_unregister_broker(ctx: RequestContext) -> dict:
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed."}
    try:
        response = await forward(ctx.broker, m.UNREGISTER_BROKER, ctx.version, ctx.body)
    except ControllerUnavailable:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.REQUEST_TIMED_OUT,
                "error_message": "No controller answered within the request timeout."}
    return {"throttle_time_ms": 0, **dict(response)}


def _elected(cache: MetadataCache, topic: str, index: int, election_type: int) -> bool:
    p = cache.partition(topic, index)
    if p is None:
        return True  # deleted meanwhile: nothing to wait for
    if election_type == PREFERRED:
        return p.leader == p.preferred_leader
    return p.leader >= 0


def _timed_out(body) -> dict:
    return _every_partition(body, ErrorCode.REQUEST_TIMED_OUT,
                            "No controller answered within the request timeout.")


def _every_partition(body, code: ErrorCode, message: str) -> dict:
    results = [{"topic": t.topic, "partition_result": [
        {"partition_id": i, "error_code": code, "error_message": message}
        for i in t.partitions]} for t in body.topic_partitions or []]
    # v1+ carry the whole request's error at the top (the only place when every partition
    # was asked for with a null list); v0 only per partition
    return {"throttle_time_ms": 0, "error_code": code, "replica_election_results": results}


async def handle_describe_quorum(ctx: RequestContext) -> dict:
    """DescribeQuorum on the client listener, as Kafka's brokers answer it for
    kafka-metadata-quorum --bootstrap-server: by the quorum's leader, this node if it leads,
    else the leader over its controller listener. It needs DESCRIBE on the cluster."""
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed.", "topics": [], "nodes": []}
    runtime = ctx.broker.runtime
    if runtime is not None and runtime.node.is_leader:
        return describe_quorum(ctx.broker)
    try:
        return await ctx.broker.controller_channel.forward(m.DESCRIBE_QUORUM, ctx.version,
                                                           ctx.body)
    except ControllerUnavailable:
        return {"error_code": ErrorCode.REQUEST_TIMED_OUT, "error_message": None,
                "topics": [], "nodes": []}


def describe_quorum(broker) -> dict:
    """The leader's DescribeQuorum answer, with every voter's controller address."""
    runtime = broker.runtime
    # DescribeQuorum's timestamps are wall-clock milliseconds (the runtime's clock is trio's)
    out = raft_codec.describe_quorum_response(runtime.node, now_ms=broker.now_ms())
    if runtime.node.config.bootstrap_voters is not None:
        # a dynamic quorum: the endpoints the voter set holds (KIP-853)
        out["nodes"] = [{"node_id": v.voter_id, "listeners": [
            {"name": e.name, "host": e.host, "port": e.port} for e in v.endpoints]}
            for v in runtime.node.voter_set.voters]
        return out
    out["nodes"] = [{"node_id": node_id, "listeners": [
        {"name": "CONTROLLER", "host": host, "port": port}]}
        for node_id, (host, port) in sorted(broker.addresses.voters.items())]
    return out


async def handle_raft_voter_change(ctx: RequestContext) -> dict:
    """AddRaftVoter and RemoveRaftVoter (KIP-853) on the client listener: forwarded to the
    quorum's leader, as Kafka's brokers forward them to the active controller. They need
    ALTER on the cluster."""
    key = ctx.request.api_key
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return voter_api.error_body(key, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                    "Cluster authorization failed.")
    try:
        return await forward(ctx.broker, key, ctx.version, ctx.body)
    except ControllerUnavailable:
        return voter_api.error_body(key, ErrorCode.REQUEST_TIMED_OUT,
                                    "No controller answered within the request timeout.")
