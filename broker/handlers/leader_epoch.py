"""OffsetForLeaderEpoch: where a leader epoch ends, so clients and followers can detect
divergence (KIP-101, KIP-320).

Only the partition's leader answers (broker.handlers.common.lookup: NOT_LEADER_OR_FOLLOWER
elsewhere, KIP-320 fencing of current_leader_epoch). The answer for epoch E comes from the
partition's leader-epoch cache (broker.replication.leader_epochs, Kafka's
LeaderEpochFileCache.endOffsetFor): the largest epoch <= E and the offset where it ends --
the start of the next epoch, or the log end offset for the current one. A follower
truncates to that offset; a consumer resets to it after an unclean leader election.
"""

from __future__ import annotations

from broker.handlers.common import lookup
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize_cluster, unauthorized
from protocol.errors import ErrorCode

UNDEFINED_EPOCH = UNDEFINED_OFFSET = -1


async def handle(ctx: RequestContext) -> dict:
    topics = []
    names = [t.topic for t in ctx.body.topics]
    if ctx.body.get("replica_id", -1) >= 0:  # a follower: CLUSTER_ACTION on the cluster
        denied = (frozenset() if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
                  else frozenset(names))
    else:
        denied = unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    for topic in ctx.body.topics:
        partitions = []
        for p in topic.partitions:
            out = {"error_code": ErrorCode.NONE, "partition": p.partition,
                   "leader_epoch": UNDEFINED_EPOCH, "end_offset": UNDEFINED_OFFSET}
            if topic.topic in denied:
                partition, error = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                partition, error = lookup(ctx.broker, topic.topic, p.partition,
                                          p.get("current_leader_epoch", -1))
            if partition is None or error != ErrorCode.NONE:
                out["error_code"] = error
            elif 0 <= p.leader_epoch <= partition.leader_epoch:  # a newer one is UNDEFINED
                out["leader_epoch"], out["end_offset"] = partition.epochs.end_offset_for(
                    p.leader_epoch, partition.log_end_offset)
            partitions.append(out)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
