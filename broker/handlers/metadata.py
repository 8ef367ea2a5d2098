"""Metadata: brokers, topics and partitions as the committed metadata image has them;
auto-creates topics when allowed.

Everything comes from `broker.metadata_cache`: the unfenced brokers with their endpoint on
the listener the client came through (`ctx.listener_name`) and rack, the cluster id, the
active controller (or this broker, when the controller is not a listed broker: admin
requests sent here are forwarded), and per partition the leader, leader epoch, replicas, ISR and the replicas
on brokers that are not alive (offline_replicas). A partition without a leader is answered
LEADER_NOT_AVAILABLE, which clients retry.

v0 asks for every topic with an empty list; v1+ with a null list (an empty one means none).
A topic named by a client that does not exist is created here (not on produce), as Kafka
does, when auto.create.topics.enable is on and the request allows it (v4+): CreateTopics is
forwarded to the controller and the answer waits (briefly, AUTO_CREATE_WAIT_S) until the new
topic is in this broker's image; a topic not visible by then is LEADER_NOT_AVAILABLE, so the
client asks again. __consumer_offsets is created by the group coordinator, with its own
partition count and configs, never as a plain topic.
"""

from __future__ import annotations

import logging

from broker.controller_channel import ControllerUnavailable
from broker.coordinator.runtime import OFFSETS_TOPIC
from broker.handlers.common import forward
from broker.handlers.context import RequestContext
from broker.metadata_cache import MetadataCache, is_internal
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize_cluster, enabled, unauthorized
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.names import topic_name_error

log = logging.getLogger("minibroker.metadata")

AUTHORIZED_OPERATIONS_OMITTED = -2**31
AUTO_CREATE_WAIT_S = 2.0  # long enough for a healthy quorum to commit, short for a client
CREATE_TOPICS_VERSION = 7  # what the broker speaks when it asks the controller itself


async def handle(ctx: RequestContext) -> dict:
    broker, body, version = ctx.broker, ctx.body, ctx.version
    requested = body.topics
    names: list = []
    denied: frozenset[str] = frozenset()
    if requested is None or (version == 0 and not requested):
        names = broker.metadata_cache.topic_names()
        # topics the principal may not describe are left out, silently (Kafka's filter)
        hidden = unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names,
                              log_denied=False)
        names = [n for n in names if n not in hidden]
    else:
        for t in requested:
            if t.name is None and version >= 10:
                info = broker.metadata_cache.topic_by_id(t.topic_id)
                names.append(info.name if info else t.topic_id)
            else:
                names.append(t.name)
        denied = unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                              (n for n in names if isinstance(n, str)))
    allow_auto = broker.config.auto_create_topics_enable and body.get(
        "allow_auto_topic_creation", True)
    missing = [n for n in dict.fromkeys(names) if isinstance(n, str) and n not in denied
               and broker.metadata_cache.topic(n) is None and not topic_name_error(n)]
    if missing and allow_auto and enabled(ctx) and not authorize_cluster(
            ctx, AclOperation.CREATE, log_denied=False):
        # auto-creation needs CREATE on the cluster or on the topic itself
        no_create = unauthorized(ctx, AclOperation.CREATE, ResourceType.TOPIC,
                                 [n for n in missing if n != OFFSETS_TOPIC])
        denied |= no_create
        missing = [n for n in missing if n not in no_create]
    if OFFSETS_TOPIC in missing:
        missing.remove(OFFSETS_TOPIC)
        await broker.groups.ensure_offsets_topic()
    if missing and allow_auto:
        await auto_create_topics(ctx, missing)
    cache = broker.metadata_cache  # read once more: the waits above may have moved it on
    listed = brokers(ctx, cache)
    return {
        "throttle_time_ms": 0,
        "brokers": listed,
        "cluster_id": cache.cluster_id,
        # the active controller, as librdkafka's describe_cluster() reads it from here; a
        # client whose admin request finds it gone refreshes its metadata and is forwarded
        "controller_id": controller_id(ctx, cache, listed),
        "topics": [_unknown(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name) if name in denied
                   else _topic(ctx, cache, name, allow_auto) for name in names],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def brokers(ctx: RequestContext, cache: MetadataCache) -> list[dict]:
    """The live brokers where a client on this listener reaches them (Metadata's and
    DescribeCluster's broker list, which differ in one field's name)."""
    out = []
    for b in cache.brokers():
        endpoint = cache.endpoint(b.broker_id, ctx.listener_name)
        if endpoint is not None:
            out.append({"node_id": b.broker_id, "host": endpoint.host, "port": endpoint.port,
                        "rack": b.rack})
    return out


def controller_id(ctx: RequestContext, cache: MetadataCache, listed: list[dict]) -> int:
    """The node clients send admin requests to: the active controller when it is one of
    the brokers listed, else this broker, which forwards them (as Kafka's brokers name an
    alive broker: a controller-only node is not reachable on the client listener)."""
    ids = {b["node_id"] for b in listed}
    if cache.controller_id in ids:
        return cache.controller_id
    return ctx.broker.node_id if ctx.broker.node_id in ids else -1


async def auto_create_topics(ctx: RequestContext, names: list[str]) -> None:
    """Ask the controller for `names` with the broker's defaults, then wait until they are in
    this broker's image. Failures are only logged: the topics answer LEADER_NOT_AVAILABLE
    and the client's next Metadata tries again, as with Kafka's auto-creation."""
    broker = ctx.broker
    request = {
        "topics": [{"name": name, "num_partitions": broker.config.num_partitions,
                    "replication_factor": broker.config.default_replication_factor,
                    "assignments": [], "configs": []} for name in names],
        "timeout_ms": int(AUTO_CREATE_WAIT_S * 1000), "validate_only": False,
    }
    try:
        response = await forward(broker, m.CREATE_TOPICS, CREATE_TOPICS_VERSION, request)
    except ControllerUnavailable:
        log.warning("auto-creating %s: no controller answered", names)
        return
    created = [t["name"] for t in response["topics"]
               if t["error_code"] in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)]
    for t in response["topics"]:
        if t["name"] not in created:
            log.warning("auto-creating %s: %s %s", t["name"],
                        ErrorCode(t["error_code"]).name, t.get("error_message"))
    if created:
        await broker.wait_for_metadata(
            lambda cache: all(cache.topic(name) is not None for name in created)
            and broker.serves(created), AUTO_CREATE_WAIT_S)


def _unknown(code: ErrorCode, name) -> dict:
    return {"error_code": code, "name": name, "is_internal": False, "partitions": [],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def _topic(ctx: RequestContext, cache: MetadataCache, name, allow_auto: bool) -> dict:
    if not isinstance(name, str):  # a topic id we do not know
        return {**_unknown(ErrorCode.UNKNOWN_TOPIC_ID, None), "topic_id": name}
    info = cache.topic(name)
    if info is None:
        if topic_name_error(name):
            return _unknown(ErrorCode.INVALID_TOPIC_EXCEPTION, name)
        if allow_auto or name == OFFSETS_TOPIC:
            return _unknown(ErrorCode.LEADER_NOT_AVAILABLE, name)  # being created
        return _unknown(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
    partitions = []
    for index, p in sorted(info.partitions.items()):
        partitions.append({
            "error_code": ErrorCode.LEADER_NOT_AVAILABLE if p.leader < 0 else ErrorCode.NONE,
            "partition_index": index, "leader_id": p.leader, "leader_epoch": p.leader_epoch,
            "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
            "offline_replicas": cache.offline_replicas(p)})
    return {
        "error_code": ErrorCode.NONE,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": is_internal(info.name),
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
