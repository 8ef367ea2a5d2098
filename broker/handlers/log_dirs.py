"""DescribeLogDirs (35): this broker's log directory and the replicas in it.

A broker has one log directory (`log.dirs` with one path; several are issue 27's JBOD, not
here yet): the answer lists it with every replica it holds (or those the request names;
topics null: all), each with its size (the bytes of its segments) and its offset lag (the
high watermark less the log end offset, 0 for a replica that is caught up, as Kafka reports
a current replica's; there are no future replicas without several directories), and, from
v4, the file system's total and usable bytes. An offline directory answers
KAFKA_STORAGE_ERROR with no topics. Needs DESCRIBE on the cluster, as Kafka: without it
v3+ answer CLUSTER_AUTHORIZATION_FAILED, older versions an empty list.
"""

from __future__ import annotations

import os
import shutil

from broker import blocking
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from protocol.errors import ErrorCode

E = ErrorCode


async def handle(ctx: RequestContext) -> dict:
    broker = ctx.broker
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
                "results": []}
    path, total, usable = await blocking.run_disk(broker.fs, _directory, broker.log_dirs.path,
                                                  broker.fs.threaded)
    result: dict = {"error_code": E.NONE, "log_dir": path, "topics": [],
                    "total_bytes": total, "usable_bytes": usable}
    if broker.log_dirs.offline:
        result["error_code"] = E.KAFKA_STORAGE_ERROR
        return {"throttle_time_ms": 0, "error_code": E.NONE, "results": [result]}
    wanted = (None if ctx.body.topics is None
              else {(t.topic, p) for t in ctx.body.topics for p in t.partitions})
    by_topic: dict[str, list[dict]] = {}
    for log in broker.logs.logs():
        tp = (log.topic, log.partition)
        if wanted is not None and tp not in wanted:
            continue
        partition = broker.partitions.get(tp)
        lag = (max(partition.high_watermark - log.log_end_offset, 0)
               if partition is not None else 0)
        by_topic.setdefault(log.topic, []).append({
            "partition_index": log.partition, "partition_size": log.size,
            "offset_lag": lag, "is_future_key": False})
    result["topics"] = [{"name": t, "partitions": sorted(ps, key=lambda p: p["partition_index"])}
                        for t, ps in sorted(by_topic.items())]
    return {"throttle_time_ms": 0, "error_code": E.NONE, "results": [result]}


def _directory(path: str, real: bool) -> tuple[str, int, int]:
    """The directory's absolute path, and its file system's total and free bytes (-1 for
    the simulation's disks, which have no size, or when the file system will not say)."""
    path = os.path.abspath(path)
    if not real:
        return path, -1, -1
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return path, -1, -1
    return path, usage.total, usage.free
