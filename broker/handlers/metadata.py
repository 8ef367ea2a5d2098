"""Metadata: brokers, topics and partitions; auto-creates topics when allowed.

v0 asks for every topic with an empty list; v1+ with a null list (an empty one means none).
A topic named by a client that does not exist is created here (not on produce), as Kafka
does, when auto.create.topics.enable is on and the request allows it (v4+).
"""

from __future__ import annotations

from broker.handlers.context import RequestContext
from broker.coordinator.runtime import OFFSETS_TOPIC
from broker.log.errors import KafkaStorageError
from protocol.errors import ErrorCode
from protocol.names import topic_name_error

AUTHORIZED_OPERATIONS_OMITTED = -2**31


async def handle(ctx: RequestContext) -> dict:
    broker, body, version = ctx.broker, ctx.body, ctx.version
    requested = body.topics
    if requested is None or (version == 0 and not requested):
        names = sorted(broker.metadata.topics)
    else:
        names = []
        for t in requested:
            if t.name is None and version >= 10:
                info = broker.metadata.by_id(t.topic_id)
                names.append(info.name if info else t.topic_id)
            else:
                names.append(t.name)
    allow_auto = broker.config.auto_create_topics_enable and body.get(
        "allow_auto_topic_creation", True)
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": broker.node_id, "host": broker.advertised.host,
                     "port": broker.advertised.port, "rack": None}],
        "cluster_id": broker.metadata.cluster_id,
        "controller_id": broker.node_id,
        "topics": [_topic(ctx, name, allow_auto) for name in names],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _topic(ctx: RequestContext, name, allow_auto: bool) -> dict:
    broker = ctx.broker
    if not isinstance(name, str):  # a topic id we do not know
        return {"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": name,
                "partitions": []}
    try:
        if name == OFFSETS_TOPIC:
            broker.groups.ensure_offsets_topic()  # with its own partitions and configs, never as a plain topic
        info = broker.metadata.topics.get(name)
        if info is None:
            if topic_name_error(name):
                return {"error_code": ErrorCode.INVALID_TOPIC_EXCEPTION, "name": name,
                        "partitions": []}
            if not allow_auto:
                return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                        "partitions": []}
            info = broker.create_topic(name, broker.config.num_partitions,
                                       broker.config.default_replication_factor, auto=True)
    except KafkaStorageError:
        # auto-creation hit a full or unwritable disk: the answer Kafka gives while a topic
        # is not ready, which clients retry with their next metadata request
        return {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "name": name, "partitions": []}
    node = broker.node_id
    return {
        "error_code": ErrorCode.NONE,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.internal,
        "partitions": [
            {"error_code": ErrorCode.NONE, "partition_index": i, "leader_id": node,
             "leader_epoch": broker.partitions[(info.name, i)].leader_epoch,
             "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}
            for i in range(info.partitions)
        ],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
