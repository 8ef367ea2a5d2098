"""DescribeLogDirs (35) and AlterReplicaLogDirs (34): this broker's log directories, the
replicas in them, and moving a replica from one to another (KIP-113).

DescribeLogDirs lists every directory of log.dirs, in order, with every replica it holds
(or those the request names; topics null: all), each with its size (the bytes of its
segments) and its offset lag: for a current replica the high watermark less its log end
offset (0 once caught up, as Kafka reports), for a future replica (is_future_key: the copy
a move is making in its target directory) the current replica's log end offset less the
copy's, which falls to 0 as the move completes. From v4 each directory's file system
total and usable bytes. An offline directory answers KAFKA_STORAGE_ERROR with no topics.
Needs DESCRIBE on the cluster, as Kafka: without it v3+ answer
CLUSTER_AUTHORIZATION_FAILED, older versions an empty list.

AlterReplicaLogDirs names, per target path, the partitions to move there. Per partition,
as Kafka's ReplicaManager.alterReplicaLogDirs: CLUSTER_AUTHORIZATION_FAILED without ALTER
on the cluster; LOG_DIR_NOT_FOUND for a path that is none of this broker's directories
(absolute path compared after normalising); KAFKA_STORAGE_ERROR when the target or the
replica's own directory is offline; REPLICA_NOT_AVAILABLE for a partition this broker holds
no replica of (UNKNOWN_TOPIC_OR_PARTITION when the cluster has no such partition at all);
else NONE and the move runs in the background (broker/replication/alter_log_dirs.py). A
request that names a partition under two paths answers both and moves it to the last.
"""

from __future__ import annotations

import os

from broker import blocking
from broker.handlers.context import RequestContext
from broker.log.dirs import disk_usage
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from protocol.errors import ErrorCode

E = ErrorCode


async def handle(ctx: RequestContext) -> dict:
    broker = ctx.broker
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
                "results": []}
    wanted = (None if ctx.body.topics is None
              else {(t.topic, p) for t in ctx.body.topics for p in t.partitions})
    results = []
    for directory in broker.log_dirs.dirs:
        path, total, usable = await blocking.run_disk(broker.fs, _describe_dir,
                                                      directory.path, broker.fs.threaded)
        result: dict = {"error_code": E.NONE, "log_dir": path,
                        "topics": [], "total_bytes": total, "usable_bytes": usable}
        results.append(result)
        if directory.offline:
            result["error_code"] = E.KAFKA_STORAGE_ERROR
            continue
        by_topic: dict[str, list[dict]] = {}
        m = broker.logs.manager(directory.path)
        for log in (m.logs() if m is not None else ()):
            tp = (log.topic, log.partition)
            if wanted is not None and tp not in wanted:
                continue
            partition = broker.partitions.get(tp)
            lag = (max(partition.high_watermark - log.log_end_offset, 0)
                   if partition is not None else 0)
            by_topic.setdefault(log.topic, []).append({
                "partition_index": log.partition, "partition_size": log.size,
                "offset_lag": lag, "is_future_key": False})
        for tp, future in broker.logs.futures.items():
            future_dir = broker.logs.future_dir(*tp)
            if future_dir is None or not directory.holds(future_dir):
                continue
            if wanted is not None and tp not in wanted:
                continue
            current = broker.logs.get(*tp)
            lag = (max(current.log_end_offset - future.log_end_offset, 0)
                   if current is not None else 0)
            by_topic.setdefault(tp[0], []).append({
                "partition_index": tp[1], "partition_size": future.size,
                "offset_lag": lag, "is_future_key": True})
        result["topics"] = [
            {"name": t, "partitions": sorted(ps, key=lambda p: (p["partition_index"],
                                                                 p["is_future_key"]))}
            for t, ps in sorted(by_topic.items())]
    return {"throttle_time_ms": 0, "error_code": E.NONE, "results": results}


async def handle_alter(ctx: RequestContext) -> dict:
    broker = ctx.broker
    allowed = authorize_cluster(ctx, AclOperation.ALTER)
    answers: dict[str, dict[int, int]] = {}
    for d in ctx.body.dirs:
        target = next((x for x in broker.log_dirs.dirs
                       if _same(x.path, d.path)), None)
        for t in d.topics:
            for index in t.partitions:
                answers.setdefault(t.name, {})[index] = _alter_one(
                    broker, allowed, target.path if target is not None else None,
                    t.name, index)
    return {"throttle_time_ms": 0, "results": [
        {"topic_name": name, "partitions": [
            {"partition_index": i, "error_code": code} for i, code in sorted(parts.items())]}
        for name, parts in answers.items()]}


def _alter_one(broker, allowed: bool, target: str | None, topic: str, index: int) -> int:
    if not allowed:
        return E.CLUSTER_AUTHORIZATION_FAILED
    if target is None:
        return E.LOG_DIR_NOT_FOUND
    if broker.metadata_cache.partition(topic, index) is None and \
            (topic, index) not in broker.partitions:
        return E.UNKNOWN_TOPIC_OR_PARTITION
    return broker.log_dir_moves.start_move(topic, index, target)


def _describe_dir(path: str, real: bool) -> tuple[str, int, int]:
    """The directory's absolute path and its file system's total and free bytes."""
    return (os.path.abspath(path), *disk_usage(path, real))


def _same(a: str, b: str) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))
