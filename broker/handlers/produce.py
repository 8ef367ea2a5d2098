"""Produce: validate each partition's batch by its header, append it, answer with offsets.

The batch is not decoded (except for compacted topics, whose records must all have keys,
as in Kafka): the 61-byte header and the CRC-32C are checked
(protocol.records.validate_produced_batch), BaseOffset and PartitionLeaderEpoch are
rewritten in place by the log (both outside the CRC), and the bytes go to the file as they
came. With one replica, acks=-1 and acks=1 are answered alike once the append returns;
acks=0 gets no response at all.

Only the partition's leader accepts a batch: elsewhere the answer is NOT_LEADER_OR_FOLLOWER
(UNKNOWN_TOPIC_OR_PARTITION if the metadata image has no such partition), and from v10 it
carries the leader the image names and that broker's endpoint (KIP-951), so the producer can
go there without a Metadata round trip.
"""

from __future__ import annotations

from broker.handlers.common import current_leader, lookup
from broker.handlers.context import CloseConnection, RequestContext
from protocol import records
from protocol.codecs import Codec
from protocol.errors import ErrorCode
from protocol.names import topic_name_error
from protocol.record_errors import (
    CorruptRecordError, InvalidRecordError, RecordError, RecordTooLargeError,
    UnsupportedCodecError,
)

_RECORD_ERRORS = (
    (RecordTooLargeError, ErrorCode.MESSAGE_TOO_LARGE),
    (UnsupportedCodecError, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    (InvalidRecordError, ErrorCode.INVALID_RECORD),
    (CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
)
ZSTD_MIN_PRODUCE_VERSION = 7  # KIP-110: older clients cannot have sent zstd
CURRENT_LEADER_VERSION = 10  # KIP-951: NOT_LEADER_OR_FOLLOWER names the new leader


async def handle(ctx: RequestContext) -> dict | None:
    body = ctx.body
    now_ms = ctx.broker.now_ms()
    appended: list[tuple[str, int]] = []
    leaders: set[int] = set()  # named in NOT_LEADER_OR_FOLLOWER answers (v10+)
    responses = []
    for topic_data in body.topic_data:
        partition_responses = []
        for partition_data in topic_data.partition_data:
            error, result = _produce_partition(ctx, topic_data.name, partition_data, now_ms)
            if error == ErrorCode.NONE:
                appended.append((topic_data.name, partition_data.index))
            response = {
                "index": partition_data.index, "error_code": error,
                "base_offset": result.base_offset if result else -1,
                "log_append_time_ms": result.log_append_time if result else -1,
                "log_start_offset": result.log_start_offset if result else -1,
                "record_errors": [], "error_message": None,
            }
            if (error == ErrorCode.NOT_LEADER_OR_FOLLOWER
                    and ctx.version >= CURRENT_LEADER_VERSION):
                response["current_leader"] = leader = current_leader(
                    ctx.broker, topic_data.name, partition_data.index)
                if leader["leader_id"] >= 0:
                    leaders.add(leader["leader_id"])
            partition_responses.append(response)
        responses.append({"name": topic_data.name, "partition_responses": partition_responses})
    for topic, index in appended:
        ctx.broker.notify_data_arrived(topic, index)
    if body.acks == 0:
        failed = [(r["name"], pr["index"], ErrorCode(pr["error_code"]).name)
                  for r in responses for pr in r["partition_responses"] if pr["error_code"]]
        if failed:
            raise CloseConnection(f"acks=0 produce refused: {failed}")
        return None
    out = {"responses": responses, "throttle_time_ms": 0}
    if leaders:
        out["node_endpoints"] = _node_endpoints(ctx, leaders)
    return out


def _node_endpoints(ctx: RequestContext, broker_ids: set[int]) -> list[dict]:
    """KIP-951: where the leaders named in the answer listen, on the client's listener."""
    cache, out = ctx.broker.metadata_cache, []
    for broker_id in sorted(broker_ids):
        endpoint = cache.endpoint(broker_id, ctx.broker.listener_name)
        registration = cache.broker(broker_id)
        if endpoint is not None and registration is not None:
            out.append({"node_id": broker_id, "host": endpoint.host, "port": endpoint.port,
                        "rack": registration.rack})
    return out


def _has_null_key(batch: bytes) -> bool:
    """Compacted topics need keys; like Kafka, only they pay for decoding the records."""
    try:
        _, batch_records = records.decode_batch(batch)
    except RecordError:
        return True
    return any(r.key is None for r in batch_records)


def _produce_partition(ctx: RequestContext, topic: str, data, now_ms: int):
    body, broker = ctx.body, ctx.broker
    if body.acks not in (-1, 0, 1):
        return ErrorCode.INVALID_REQUIRED_ACKS, None
    partition, error = lookup(broker, topic, data.index)
    if partition is None:  # only a legal name can have partitions: check it only here
        if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and topic_name_error(topic):
            return ErrorCode.INVALID_TOPIC_EXCEPTION, None
        return error, None
    if not data.records:
        return ErrorCode.INVALID_RECORD, None
    try:
        header = records.validate_produced_batch(data.records,
                                                 partition.log.config.max_message_bytes)
    except tuple(e for e, _ in _RECORD_ERRORS) as e:
        return next(code for cls, code in _RECORD_ERRORS if isinstance(e, cls)), None
    if header.compression > Codec.ZSTD or (header.compression == Codec.ZSTD
                                           and ctx.version < ZSTD_MIN_PRODUCE_VERSION):
        return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, None
    if header.is_transactional or body.transactional_id is not None:
        return ErrorCode.INVALID_TXN_STATE, None  # transactions are not supported
    if partition.log.config.compacts and _has_null_key(data.records):
        return ErrorCode.INVALID_RECORD, None  # compaction keeps the latest value per key
    result = partition.append_batch(bytearray(data.records), header, now_ms)
    return result.error, result if result.error == ErrorCode.NONE else None
