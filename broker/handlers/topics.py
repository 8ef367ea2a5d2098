"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions.

Each topic in a request succeeds or fails on its own, with Kafka's error codes; one the
file system refuses (full disk, unwritable data dir) gets KAFKA_STORAGE_ERROR. Work is
synchronous, so timeout_ms never expires. Partition counts are capped at MAX_PARTITIONS per
request because every partition is a directory of files created at once: an unbounded
count would let one request fill the disk.
"""

from __future__ import annotations

from broker.config import ConfigError, validate_topic_configs
from broker.coordinator.runtime import OFFSETS_TOPIC
from broker.handlers.configs import topic_config_entries
from broker.handlers.context import RequestContext
from broker.log.errors import KafkaStorageError
from protocol.errors import ErrorCode
from protocol.names import topic_name_error

MAX_PARTITIONS = 10_000


def _error(code: ErrorCode, message: str | None = None) -> dict:
    return {"error_code": code, "error_message": message}


def _check_new_topic(ctx: RequestContext, t) -> tuple[dict | None, int, int, dict]:
    broker = ctx.broker
    if reason := topic_name_error(t.name):
        return _error(ErrorCode.INVALID_TOPIC_EXCEPTION, reason), 0, 0, {}
    if t.name in broker.metadata.topics:
        return _error(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists."), 0, 0, {}
    partitions, rf = t.num_partitions, t.replication_factor
    if t.assignments:
        if partitions != -1 or rf != -1:
            return _error(ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor "
                          "and replicasAssignments were set."), 0, 0, {}
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            return _error(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          "Partitions must be numbered from 0 consecutively."), 0, 0, {}
        sizes = {len(a.broker_ids) for a in t.assignments}
        if len(sizes) != 1 or any(b != broker.node_id for a in t.assignments
                                  for b in a.broker_ids):
            return _error(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          f"Replicas must all be on live broker {broker.node_id}."), 0, 0, {}
        partitions, rf = len(indexes), sizes.pop()
    if partitions == -1:
        partitions = broker.config.num_partitions
    if rf == -1:
        rf = broker.config.default_replication_factor
    if not 0 < partitions <= MAX_PARTITIONS:
        return _error(ErrorCode.INVALID_PARTITIONS,
                      f"Number of partitions must be in 1..{MAX_PARTITIONS}."), 0, 0, {}
    if rf <= 0:
        return _error(ErrorCode.INVALID_REPLICATION_FACTOR,
                      "Replication factor must be larger than 0."), 0, 0, {}
    if rf > 1:
        return _error(ErrorCode.INVALID_REPLICATION_FACTOR,
                      f"Replication factor: {rf} larger than available brokers: 1."), 0, 0, {}
    try:
        configs = validate_topic_configs({c.name: c.value for c in t.configs})
    except ConfigError as e:
        return _error(ErrorCode.INVALID_CONFIG, str(e)), 0, 0, {}
    return None, partitions, rf, configs


async def handle_create_topics(ctx: RequestContext) -> dict:
    broker, body = ctx.broker, ctx.body
    results = []
    for t in body.topics:
        error, partitions, rf, configs = _check_new_topic(ctx, t)
        out = {"name": t.name, "num_partitions": -1, "replication_factor": -1, "configs": None}
        if error:
            out.update(error)
        else:
            out.update(_error(ErrorCode.NONE))
            if not body.validate_only:
                try:
                    info = broker.create_topic(t.name, partitions, rf, configs)
                except KafkaStorageError as e:
                    out.update(_error(e.error_code, str(e)))
                    results.append(out)
                    continue
                out["topic_id"] = info.topic_id
            out.update(num_partitions=partitions, replication_factor=rf,
                       configs=[{"name": e["name"], "value": e["value"], "read_only": False,
                                 "config_source": e["config_source"], "is_sensitive": False}
                                for e in topic_config_entries(broker, configs)])
        results.append(out)
    return {"throttle_time_ms": 0, "topics": results}


async def handle_delete_topics(ctx: RequestContext) -> dict:
    broker, body = ctx.broker, ctx.body
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    results = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None:
            info = broker.metadata.by_id(topic_id)
            name = info.name if info else None
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            info = broker.metadata.topics.get(name)
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        out = {"name": name, "topic_id": info.topic_id if info else topic_id}
        if not broker.config.delete_topic_enable:
            out.update(_error(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled."))
        elif name == OFFSETS_TOPIC:
            # the group coordinator's own log: deleting it would lose every group's offsets
            # and leave the coordinator without partitions to serve. Kafka's TopicCommand
            # refuses internal topics; the broker refuses too, so no client can do it.
            out.update(_error(ErrorCode.INVALID_REQUEST,
                              f"Topic {name} is an internal topic and cannot be deleted."))
        elif info is None:
            out.update(_error(missing, "This server does not host this topic."))
        else:
            try:
                broker.delete_topic(name)
                out.update(_error(ErrorCode.NONE))
            except KafkaStorageError as e:
                out.update(_error(e.error_code, str(e)))
        results.append(out)
    return {"throttle_time_ms": 0, "responses": results}


async def handle_create_partitions(ctx: RequestContext) -> dict:
    broker, body = ctx.broker, ctx.body
    results = []
    for t in body.topics:
        info = broker.metadata.topics.get(t.name)
        if info is None:
            error = _error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           "This server does not host this topic.")
        elif t.count < info.partitions:
            error = _error(ErrorCode.INVALID_PARTITIONS,
                           f"Topic currently has {info.partitions} partitions, which is higher "
                           f"than the requested {t.count}.")
        elif t.count == info.partitions:
            error = _error(ErrorCode.INVALID_PARTITIONS,
                           f"Topic already has {info.partitions} partitions.")
        elif t.count > MAX_PARTITIONS:
            error = _error(ErrorCode.INVALID_PARTITIONS,
                           f"Number of partitions must be at most {MAX_PARTITIONS}.")
        elif t.assignments is not None and (
                len(t.assignments) != t.count - info.partitions
                or any(b != broker.node_id for a in t.assignments for b in a.broker_ids)):
            error = _error(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Assignments must name only live broker {broker.node_id}.")
        else:
            error = _error(ErrorCode.NONE)
            if not body.validate_only:
                try:
                    broker.create_partitions(t.name, t.count)
                except KafkaStorageError as e:
                    error = _error(e.error_code, str(e))
        results.append({"name": t.name, **error})
    return {"throttle_time_ms": 0, "results": results}
