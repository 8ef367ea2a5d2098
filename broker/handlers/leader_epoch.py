"""OffsetForLeaderEpoch: where a leader epoch ends, so clients and followers can detect
divergence (KIP-101, KIP-320).

Only the partition's leader answers (broker.handlers.common.lookup: NOT_LEADER_OR_FOLLOWER
elsewhere, KIP-320 fencing of current_leader_epoch). The answer for epoch E is Kafka's
LeaderEpochFileCache.endOffsetFor: the largest epoch <= E the log holds and the offset
where it ends -- the base offset of the first batch of a later epoch, or the log end offset
when no later batch exists or E is the current epoch. An epoch newer than ours, or older
than the log's first batch, is UNDEFINED (-1, -1).

The log keeps no leader-epoch checkpoint file; the epochs are read from the batch headers
(every batch carries its PartitionLeaderEpoch). Epochs never decrease along a log, so one
header per segment finds the segment where E ends and only that segment is walked.
"""

from __future__ import annotations

from broker.handlers.common import lookup
from broker.handlers.context import RequestContext
from broker.log.log import PartitionLog
from protocol.errors import ErrorCode

UNDEFINED_EPOCH = UNDEFINED_OFFSET = -1


def end_offset_for_epoch(log: PartitionLog, requested: int) -> tuple[int, int]:
    """(the largest epoch <= `requested` in `log`, the offset where it ends), or UNDEFINED
    when the log holds no batch of such an epoch."""
    firsts = []  # (segment, its first batch's base offset and epoch), non-empty segments
    for segment in log.segments:
        first = next(iter(segment.headers()), None)
        if first is not None:
            firsts.append((segment, first[1].base_offset, first[1].partition_leader_epoch))
    within = [i for i, (_, _, epoch) in enumerate(firsts) if epoch <= requested]
    if not within:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    last = within[-1]  # the segment in which `requested` (or the last epoch before it) ends
    segment, _, found = firsts[last]
    for _pos, header in segment.headers():
        if header.partition_leader_epoch > requested:
            return found, header.base_offset
        found = header.partition_leader_epoch
    if last + 1 < len(firsts):
        return found, firsts[last + 1][1]
    return found, log.log_end_offset


async def handle(ctx: RequestContext) -> dict:
    topics = []
    for topic in ctx.body.topics:
        partitions = []
        for p in topic.partitions:
            out = {"error_code": ErrorCode.NONE, "partition": p.partition,
                   "leader_epoch": UNDEFINED_EPOCH, "end_offset": UNDEFINED_OFFSET}
            partition, error = lookup(ctx.broker, topic.topic, p.partition,
                                      p.get("current_leader_epoch", -1))
            if partition is None or error != ErrorCode.NONE:
                out["error_code"] = error
            elif p.leader_epoch == partition.leader_epoch:
                # the current epoch ends where the log does, whether or not it wrote yet
                out["leader_epoch"] = p.leader_epoch
                out["end_offset"] = partition.log_end_offset
            elif 0 <= p.leader_epoch < partition.leader_epoch:
                out["leader_epoch"], out["end_offset"] = end_offset_for_epoch(
                    partition.log, p.leader_epoch)
            partitions.append(out)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
