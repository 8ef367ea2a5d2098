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

From v12 a request may name topics by id (a name of null): a known id is answered as its
topic, an unknown one UNKNOWN_TOPIC_ID, one the principal may not describe
TOPIC_AUTHORIZATION_FAILED with its id and no name (ids are not secret, as Kafka reasons).
v10 and v11 carry the fields but Kafka refuses them there: INVALID_REQUEST for every topic
asked for. v13's top-level error code is always 0 (Kafka sets it only to send a client back
to its bootstrap servers, KIP-1102).

DescribeTopicPartitions (KIP-966) is the paginated form, as Kafka's
DescribeTopicPartitionsRequestHandler serves it: topics in name order from the cursor on, at
most response_partition_limit partitions (capped at Kafka's default
max.request.partition.size.limit, 2000) and a next_cursor where the page stopped; every topic
when the list is empty (leaving out, silently, what the principal may not describe).
Each partition carries its eligible leader replicas and last known ELR (KIP-966) as the
metadata image holds them.
"""

from __future__ import annotations

import logging

from broker.controller_channel import ControllerUnavailable
from broker.coordinator.group_runtime import OFFSETS_TOPIC
from broker.handlers.common import forward
from broker.handlers.context import RequestContext
from broker.metadata_cache import MetadataCache, is_internal
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize_cluster, enabled, unauthorized
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.names import topic_name_error
from protocol.primitives import ZERO_UUID

log = logging.getLogger("minibroker.metadata")

AUTHORIZED_OPERATIONS_OMITTED = -2**31
AUTO_CREATE_WAIT_S = 2.0  # long enough for a healthy quorum to commit, short for a client
CREATE_TOPICS_VERSION = 7  # what the broker speaks when it asks the controller itself


TOPIC_IDS_VERSION = 12  # requests may name topics by id from here (v10-11 carry the field)


def _refused(requested: list, code: ErrorCode) -> dict:
    """Kafka's MetadataRequest.getErrorResponse: every topic asked for, with `code`."""
    return {"throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": -1,
            "topics": [{**_unknown(code, "" if t.name is None else t.name),
                        "topic_id": t.get("topic_id", ZERO_UUID)} for t in requested],
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


async def handle(ctx: RequestContext) -> dict:
    broker, body, version = ctx.broker, ctx.body, ctx.version
    requested = body.topics
    names: list = []
    denied: frozenset[str] = frozenset()
    by_id: dict[str, object] = {}  # the names asked for by id, and the id each was asked by
    if requested is None or (version == 0 and not requested):
        names = broker.metadata_cache.topic_names()
        # topics the principal may not describe are left out, silently (Kafka's filter)
        hidden = unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names,
                              log_denied=False)
        names = [n for n in names if n not in hidden]
    else:
        if version < TOPIC_IDS_VERSION and any(
                t.name is None or t.get("topic_id", ZERO_UUID) != ZERO_UUID for t in requested):
            return _refused(requested, ErrorCode.INVALID_REQUEST)
        for t in requested:
            if t.name is None:
                info = broker.metadata_cache.topic_by_id(t.topic_id)
                if info is not None:
                    by_id[info.name] = t.topic_id
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
        "topics": [_denied(name, by_id) if name in denied
                   else _topic(ctx, cache, name, allow_auto) for name in names],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        "error_code": ErrorCode.NONE,
    }


def _denied(name: str, by_id: dict) -> dict:
    """A topic the principal may not describe: its name back when asked by name, never its
    id; its id back and no name when asked by id."""
    if name in by_id:
        return {**_unknown(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None), "topic_id": by_id[name]}
    return _unknown(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name)


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
    online = cache.online_broker_ids()
    for index, p in sorted(info.partitions.items()):
        partitions.append({
            "error_code": ErrorCode.LEADER_NOT_AVAILABLE if p.leader < 0 else ErrorCode.NONE,
            "partition_index": index, "leader_id": p.leader, "leader_epoch": p.leader_epoch,
            "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
            "offline_replicas": cache.offline_replicas(p, online)})
    return {
        "error_code": ErrorCode.NONE,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": is_internal(info.name),
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


# Kafka's default max.request.partition.size.limit: the most partitions one page carries
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000


def _java_order(name: str) -> bytes:
    """Java's String.compareTo order (UTF-16 code units), which Kafka sorts and compares the
    cursor by; the same as Python's for the ASCII of valid topic names."""
    return name.encode("utf-16-be", "surrogatepass")


def _describe_refused(body, code: ErrorCode) -> dict:
    """Kafka's DescribeTopicPartitionsRequest.getErrorResponse: each topic named, with `code`."""
    return {"throttle_time_ms": 0, "next_cursor": None, "topics": [
        {**_unknown(code, t.name), "topic_id": ZERO_UUID} for t in body.topics]}


async def handle_describe_topic_partitions(ctx: RequestContext) -> dict:
    body, cache = ctx.body, ctx.broker.metadata_cache
    cursor = body.cursor
    start = _java_order(cursor.topic_name) if cursor is not None else b""
    every_topic = not body.topics
    if every_topic:
        names = [n for n in cache.topic_names() if _java_order(n) >= start]
    else:
        names = [n for n in dict.fromkeys(t.name for t in body.topics) if _java_order(n) >= start]
        if cursor is not None and cursor.topic_name not in names:
            return _describe_refused(body, ErrorCode.INVALID_REQUEST)  # the cursor's topic
    if cursor is not None and cursor.partition_index < 0:
        return _describe_refused(body, ErrorCode.INVALID_REQUEST)
    names.sort(key=_java_order)
    denied = unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, body.response_partition_limit), 1)
    topics: list[dict] = []
    next_cursor = None
    for name in (n for n in names if n not in denied):
        if remaining == 0:  # the page is full: the next one starts with this topic
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        info = cache.topic(name)
        if info is None:
            if not every_topic:
                code = (ErrorCode.INVALID_TOPIC_EXCEPTION if topic_name_error(name)
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                topics.append({**_unknown(code, name), "topic_id": ZERO_UUID,
                               "is_internal": is_internal(name)})
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        count = len(info.partitions)
        upper = min(count, first + remaining)
        partitions = [_described_partition(cache, index, info.partitions[index])
                      for index in range(first, upper) if index in info.partitions]
        topics.append({"error_code": ErrorCode.NONE, "name": name, "topic_id": info.topic_id,
                       "is_internal": is_internal(name), "partitions": partitions,
                       "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
        if upper < count:
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= len(partitions)
    if not every_topic:
        # named topics the principal may not describe, without their ids, after the page
        topics.extend({**_unknown(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name),
                       "topic_id": ZERO_UUID} for name in names if name in denied)
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


def _described_partition(cache: MetadataCache, index: int, p) -> dict:
    # no error for a partition without a leader (leader_id -1), unlike Metadata: Kafka's
    return {"error_code": ErrorCode.NONE, "partition_index": index, "leader_id": p.leader,
            "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas),
            "isr_nodes": list(p.isr), "eligible_leader_replicas": list(p.elr),
            "last_known_elr": list(p.last_known_elr),
            "offline_replicas": cache.offline_replicas(p)}
