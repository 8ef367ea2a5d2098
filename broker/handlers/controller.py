"""The controller listener: what a voter answers to the other nodes.

Owns: `CONTROLLER_HANDLERS` and `CONTROLLER_LISTENER_APIS`, the handler table and the API
registry of the second listener a voter opens (its controller.quorum.voters entry or its
CONTROLLER listener):

- the quorum's own messages (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch of
  `__cluster_metadata`, FetchSnapshot), handed to the Raft node; a request from another
  cluster (INCONSISTENT_CLUSTER_ID) or not about the metadata partition is refused whole;
- DescribeQuorum, answered from the Raft node's state, with every voter's address so a
  node started with other voters can say exactly what differs;
- the broker life-cycle APIs and the admin APIs brokers forward, run on the active
  controller (NOT_CONTROLLER from any other node, so the sender looks again);
- ApiVersions (this listener's registry) and DescribeCluster, for tools that talk to
  controllers directly, as kafka-metadata-quorum's --bootstrap-controller does;
- SaslHandshake and SaslAuthenticate, for a SASL_PLAINTEXT or SASL_SSL controller listener
  (the server's SaslGate answers them while a connection logs in).
"""

from __future__ import annotations

import logging

from broker.controller import api as controller_api
from broker.controller import raft_codec
from broker.handlers.cluster import describe_quorum, handle_describe_cluster
from broker.handlers.context import Handler, RequestContext
from broker.handlers.sasl import handle_authenticate, handle_handshake
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.messages import ALL_APIS
from protocol.versions import accepts

log = logging.getLogger("minibroker.controller_listener")

_RAFT_APIS = (m.VOTE, m.BEGIN_QUORUM_EPOCH, m.END_QUORUM_EPOCH, m.FETCH, m.FETCH_SNAPSHOT)
_RUNTIME_APIS = tuple(sorted(controller_api.ADMIN_APIS | controller_api.BROKER_APIS))


def _runtime(ctx: RequestContext):
    runtime = ctx.broker.runtime
    assert runtime is not None, "the controller listener opens after the quorum is built"
    return runtime


def _raft_source(message) -> int:
    for field in ("candidate_id", "replica_id", "leader_id"):
        if hasattr(message, field):
            return getattr(message, field)
    return -1


async def handle_raft(ctx: RequestContext) -> dict:
    runtime = _runtime(ctx)
    key = ctx.request.api_key
    try:
        message = raft_codec.request_from_wire(key, ctx.body, ctx.broker.cluster_id)
    except raft_codec.QuorumWireError as e:
        if e.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID:
            log.warning("refused a quorum request from %s: %s (is it started with other "
                        "controller.quorum.voters?)", ctx.peer, e)
        return raft_codec.error_response(key, e.error_code)
    wait_s = runtime.node.config.request_timeout_ms / 1000 + (
        message.max_wait_ms / 1000 if key == m.FETCH else 0)
    response = await runtime.handle_raft_request(_raft_source(message), message, wait_s)
    if response is None:
        return raft_codec.error_response(key, ErrorCode.REQUEST_TIMED_OUT)
    _key, _version, body = raft_codec.to_wire(response)
    return body


async def handle_describe_quorum(ctx: RequestContext) -> dict:
    _runtime(ctx)
    return describe_quorum(ctx.broker)


async def handle_controller_api(ctx: RequestContext) -> dict:
    return await controller_api.handle(_runtime(ctx), ctx.request.api_key, ctx.body)


async def handle_api_versions(ctx: RequestContext) -> dict:
    keys = []
    for key in sorted(CONTROLLER_LISTENER_APIS):
        versions = [v for v in range(0, 64) if accepts(CONTROLLER_LISTENER_APIS, key, v)]
        if versions:
            keys.append({"api_key": key, "min_version": versions[0],
                         "max_version": versions[-1]})
    code = ErrorCode.UNSUPPORTED_VERSION if ctx.body is None else ErrorCode.NONE
    return {"error_code": code, "api_keys": keys, "throttle_time_ms": 0}


def _requires(operation: AclOperation, handler: Handler) -> Handler:
    """The handler, behind a check of `operation` on the cluster for the connection's
    principal: the nodes' own requests need CLUSTER_ACTION (Kafka's controller APIs). A
    refused request gets the API's own error shape with CLUSTER_AUTHORIZATION_FAILED."""
    async def checked(ctx: RequestContext) -> dict:
        if authorize_cluster(ctx, operation):
            return await handler(ctx)
        key = ctx.request.api_key
        if key in _RAFT_APIS:
            return raft_codec.error_response(key, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if key == m.DESCRIBE_QUORUM:
            return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": None, "topics": [], "nodes": []}
        out = controller_api.not_controller(key, ctx.body)
        return _recode(out, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return checked


def _recode(value, code: ErrorCode):
    """An answer with every NOT_CONTROLLER turned into `code`."""
    if isinstance(value, dict):
        return {k: (code if k == "error_code" and v == ErrorCode.NOT_CONTROLLER
                    else _recode(v, code)) for k, v in value.items()}
    if isinstance(value, list):
        return [_recode(v, code) for v in value]
    return value


_CLUSTER_ACTION = AclOperation.CLUSTER_ACTION
CONTROLLER_HANDLERS = {
    **{key: _requires(_CLUSTER_ACTION, handle_raft) for key in _RAFT_APIS},
    m.DESCRIBE_QUORUM: _requires(AclOperation.DESCRIBE, handle_describe_quorum),
    **{key: _requires(_CLUSTER_ACTION, handle_controller_api) for key in _RUNTIME_APIS},
    m.API_VERSIONS: handle_api_versions,
    m.DESCRIBE_CLUSTER: handle_describe_cluster,
    # a SASL controller listener authenticates its connections before they reach here
    m.SASL_HANDSHAKE: handle_handshake,
    m.SASL_AUTHENTICATE: handle_authenticate,
}
CONTROLLER_LISTENER_APIS = {key: ALL_APIS[key] for key in CONTROLLER_HANDLERS}
