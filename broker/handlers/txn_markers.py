"""WriteTxnMarkers: the transaction coordinator's request that ends a transaction in the
partitions it wrote to, one COMMIT or ABORT marker in each (Kafka's
KafkaApis.handleWriteTxnMarkersRequest).

An inter-broker API, served where Kafka serves it, on the brokers' listeners (the
coordinator's marker sender reaches each partition's leader there), and guarded as Kafka
guards it: the principal needs ALTER on the cluster or, failing that, CLUSTER_ACTION (the
first is asked without logging a denial); without either every partition is answered
CLUSTER_AUTHORIZATION_FAILED.

Each marker's partitions are appended on their leader (Partition.append_control_batch)
with acks=all's rules, as Kafka appends them with requiredAcks -1: refused before the
append with NOT_ENOUGH_REPLICAS while the ISR is below min.insync.replicas, else answered
once the HW covers the marker, or NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER,
or REQUEST_TIMED_OUT after request.timeout.ms (produce.wait_for_replicas). The producer
state refuses a marker with INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED. A
partition with no replica here is UNKNOWN_TOPIC_OR_PARTITION (Kafka looks for the local log
first), one led elsewhere NOT_LEADER_OR_FOLLOWER, one on an offline log directory
KAFKA_STORAGE_ERROR: the errors the coordinator's TransactionMarkerRequestCompletionHandler
retries, or, for the two epoch errors, gives up on.

A marker acknowledged in a `__consumer_offsets` partition is handed to the group
coordinator (`complete_transaction`), which applies or drops the transaction's offset
commits, as Kafka's group coordinator does in onTransactionCompleted; if that fails, those
partitions answer UNKNOWN_SERVER_ERROR, as in Kafka. The answer has one entry per producer
id (the partitions of two markers of one producer merged), as Kafka's map makes it.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.handlers.common import lookup
from broker.handlers.context import RequestContext
from broker.handlers.produce import wait_for_replicas
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from protocol.errors import ErrorCode

log = logging.getLogger("minibroker.txn_markers")

OFFSETS_TOPIC = "__consumer_offsets"


async def handle(ctx: RequestContext) -> dict:
    allowed = (authorize_cluster(ctx, AclOperation.ALTER, log_denied=False)
               or authorize_cluster(ctx, AclOperation.CLUSTER_ACTION))
    return await write_markers(ctx.broker, ctx.body.markers, allowed)


async def write_markers(broker, markers, allowed: bool = True) -> dict:
    """Append and replicate the markers of a WriteTxnMarkers request body's `markers`;
    the response body. Also called directly by this broker's own transaction coordinator
    for the partitions it leads (broker.transaction.markers)."""
    now_ms = broker.now_ms()
    # producer id -> topic -> partition -> its answer (error_code set as it is known)
    answers: dict[int, dict[str, dict[int, dict]]] = {}
    awaiting: list[tuple[str, int, int, dict]] = []
    offsets: list[tuple[int, Any, dict]] = []  # __consumer_offsets markers appended
    for marker in markers:
        topics = answers.setdefault(marker.producer_id, {})
        for t in marker.topics:
            partitions = topics.setdefault(t.name, {})
            for index in t.partition_indexes:
                answer = partitions[index] = {"partition_index": index,
                                              "error_code": ErrorCode.NONE}
                if not allowed:
                    answer["error_code"] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    continue
                error, end = _append(broker, t.name, index, marker, now_ms)
                answer["error_code"] = error
                if error == ErrorCode.NONE:
                    awaiting.append((t.name, index, end, answer))
                    if t.name == OFFSETS_TOPIC:
                        offsets.append((index, marker, answer))
    for topic, index, _end, _answer in awaiting:
        broker.notify_data_arrived(topic, index)
    if awaiting:
        await wait_for_replicas(broker, awaiting, broker.config.request_timeout_ms)
    for index, marker, answer in offsets:
        if answer["error_code"] == ErrorCode.NONE:
            answer["error_code"] = _complete_offsets(broker, index, marker)
    return {"throttle_time_ms": 0, "markers": [
        {"producer_id": producer_id, "topics": [
            {"name": name, "partitions": list(partitions.values())}
            for name, partitions in topics.items()]}
        for producer_id, topics in answers.items()]}


def _append(broker, topic: str, index: int, marker: Any,
            now_ms: int) -> tuple[ErrorCode, int]:
    """Append one marker as leader: its error, and the offset after it (to wait for)."""
    partition, error = lookup(broker, topic, index)
    if error == ErrorCode.NOT_LEADER_OR_FOLLOWER and broker.partition(topic, index) is None:
        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # no replica here at all
    if partition is None or error != ErrorCode.NONE:
        return error, -1
    if partition.under_min_isr():
        return ErrorCode.NOT_ENOUGH_REPLICAS, -1
    result = partition.append_control_batch(marker.producer_id, marker.producer_epoch,
                                            marker.coordinator_epoch,
                                            marker.transaction_result, now_ms)
    return result.error, result.last_offset + 1


def _complete_offsets(broker, index: int, marker: Any) -> ErrorCode:
    """Hand a marker acknowledged in __consumer_offsets to the group coordinator."""
    try:
        broker.groups.complete_transaction(index, marker.producer_id, marker.producer_epoch,
                                               marker.transaction_result)
    except Exception:  # noqa: BLE001  one partition's failure, as Kafka answers it
        log.exception("the group coordinator could not complete producer %d's transaction "
                      "in %s-%d", marker.producer_id, OFFSETS_TOPIC, index)
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.NONE
