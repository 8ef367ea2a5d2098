"""DescribeProducers (KIP-664): the producers a partition's replica here remembers, with the
first offset of each one's open transaction, which is how an operator finds the producer
of a hanging transaction (`minibroker transactions describe-producers`, `find-hanging`).

Owns the request's checks and its answer, as Kafka's KafkaApis.handleDescribeProducersRequest
and ReplicaManager.activeProducerState make them: per topic, an illegal name is
INVALID_TOPIC_EXCEPTION, a topic the principal may not READ is TOPIC_AUTHORIZATION_FAILED
(Kafka asks READ, not DESCRIBE: the producer ids and offsets are the topic's data), one the
image does not know UNKNOWN_TOPIC_OR_PARTITION; per partition, `common.lookup`'s errors
(NOT_LEADER_OR_FOLLOWER for a partition with no replica here, KAFKA_STORAGE_ERROR, ...).
Any replica answers, leader or follower (while some broker leads the partition), as in
Kafka: the admin client asks the leader unless told which broker to ask.

Each producer is reported from broker.producer_state: its epoch, the last sequence of its
last batch (-1 when only a marker is known), the time of its last append, the coordinator
epoch of its last marker (-1: none yet) and the first offset of its open transaction (-1:
none).
"""

from __future__ import annotations

from broker.handlers.common import lookup
from broker.handlers.context import RequestContext
from broker.producer_state import ProducerStateManager
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize
from protocol.batch_header import NO_SEQUENCE
from protocol.errors import ErrorCode
from protocol.names import topic_name_error


async def handle(ctx: RequestContext) -> dict:
    topics = []
    for t in ctx.body.topics:
        error = _topic_error(ctx, t.name)
        topics.append({"name": t.name, "partitions": [
            _partition(ctx, t.name, index) if error == ErrorCode.NONE
            else _failed(index, error) for index in t.partition_indexes]})
    return {"throttle_time_ms": 0, "topics": topics}


def _topic_error(ctx: RequestContext, topic: str) -> ErrorCode:
    if topic_name_error(topic):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, topic):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if ctx.broker.metadata_cache.topic(topic) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def _failed(index: int, error: ErrorCode) -> dict:
    return {"partition_index": index, "error_code": error, "error_message": None,
            "active_producers": []}


def _partition(ctx: RequestContext, topic: str, index: int) -> dict:
    partition, error = lookup(ctx.broker, topic, index, allow_follower=True)
    if partition is None:
        return _failed(index, error)
    return {"partition_index": index, "error_code": ErrorCode.NONE, "error_message": None,
            "active_producers": active_producers(partition.producers)}


def active_producers(producers: ProducerStateManager) -> list[dict]:
    """DescribeProducers' ProducerState of every producer the partition remembers (Kafka's
    UnifiedLog.activeProducers), by producer id."""
    out = []
    for producer_id in sorted(producers.producers):
        entry = producers.producers[producer_id]
        txn_first = entry.current_txn_first_offset
        out.append({"producer_id": producer_id, "producer_epoch": entry.epoch,
                    "last_sequence": entry.batches[-1].last_seq if entry.batches
                    else NO_SEQUENCE,
                    "last_timestamp": entry.last_update_ms,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": -1 if txn_first is None else txn_first})
    return out
