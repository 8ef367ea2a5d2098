"""Produce: validate each partition's batch by its header, append it, answer with offsets.

The batch is not decoded (except for compacted topics, whose records must all have keys,
as in Kafka): the 61-byte header and the CRC-32C are checked
(protocol.records.validate_produced_batch), BaseOffset and PartitionLeaderEpoch are
rewritten in place by the log (both outside the CRC), and the bytes go to the file as they
came. acks=1 is answered once the leader's append returns; acks=0 gets no response at all.

acks=-1 (all) is answered once the high watermark covers the batch, that is once every
member of the ISR holds it, or when the request's timeout_ms runs out (REQUEST_TIMED_OUT;
the batch may still commit later, as in Kafka). With an ISR smaller than the topic's
min.insync.replicas the batch is refused before the append (NOT_ENOUGH_REPLICAS); if the
ISR shrank below it while the batch waited, the answer is NOT_ENOUGH_REPLICAS_AFTER_APPEND
(the batch is in the log and may be read, but the producer must know it is less safe than
asked). A leadership lost while waiting answers NOT_LEADER_OR_FOLLOWER.

A transactional batch (attributes bit 4) opens its producer's transaction in the partition
(broker/partition.py): its records stay above the last stable offset, unseen by
read_committed consumers, until the coordinator's marker ends it. A request carrying one
must name its transactional id and have WRITE on it, or every partition is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (Kafka's handleProduceRequest). A control batch from a
client is INVALID_RECORD: only the coordinator's WriteTxnMarkers writes markers. A batch that
would open its producer's transaction in a partition is first verified with the
transaction coordinator (KIP-890 part 1, `_verify_first_batches`): a partition the
transaction never added, or a late write from a transaction that has ended, is refused
(TRANSACTION_ABORTABLE from Produce v11, INVALID_TXN_STATE before), so it cannot leave a
hanging transaction that holds the LSO back for ever.

Only the partition's leader accepts a batch: elsewhere the answer is NOT_LEADER_OR_FOLLOWER
(UNKNOWN_TOPIC_OR_PARTITION if the metadata image has no such partition), and from v10 it
carries the leader the image names and that broker's endpoint (KIP-951), so the producer can
go there without a Metadata round trip.
"""

from __future__ import annotations

import struct
import time

import trio

from broker import timeouts
from broker.handlers.common import current_leader, lookup
from broker.handlers.context import CloseConnection, RequestContext
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize, unauthorized
from protocol import records
from protocol.batch_header import (
    ATTRIBUTES_POS, BATCH_OVERHEAD, LENGTH_POS, LOG_OVERHEAD, MAGIC, MAGIC_POS, TRANSACTIONAL_MASK,
)
from protocol.codecs import Codec
from protocol.errors import ErrorCode
from protocol.messages import PRODUCE
from broker.transaction.coordinator import verification_error_for_version
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
    awaiting: list[tuple[str, int, int, dict]] = []  # acks=all: (topic, index, end, response)
    leaders: set[int] = set()  # named in NOT_LEADER_OR_FOLLOWER answers (v10+)
    responses = []
    denied = unauthorized(ctx, AclOperation.WRITE, ResourceType.TOPIC,
                          (t.name for t in body.topic_data))
    refused_txn = _has_transactional_records(body) and (
        body.transactional_id is None
        or not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                         body.transactional_id))
    verified: dict[tuple[str, int], tuple[ErrorCode, object | None]] = {}
    if (not refused_txn and body.transactional_id is not None
            and ctx.broker.config.transaction_partition_verification_enable):
        verified = await _verify_first_batches(ctx, denied)
        now_ms = ctx.broker.now_ms()  # the coordinator may have taken a while
    for topic_data in body.topic_data:
        partition_responses = []
        for partition_data in topic_data.partition_data:
            tp = (topic_data.name, partition_data.index)
            if refused_txn:
                error, result = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
            elif topic_data.name in denied:
                error, result = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
            elif tp in verified and verified[tp][0] != ErrorCode.NONE:
                error, result = verified[tp][0], None
            else:
                error, result = _produce_partition(ctx, topic_data.name, partition_data,
                                                   now_ms, verified.get(tp, (None, None))[1])
            if error != ErrorCode.NONE:
                ctx.broker.metrics.failed_produce_requests += 1
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
            if error == ErrorCode.NONE:
                appended.append((topic_data.name, partition_data.index))
                if body.acks == -1 and result is not None:
                    awaiting.append((topic_data.name, partition_data.index,
                                     result.last_offset + 1, response))
            partition_responses.append(response)
        responses.append({"name": topic_data.name, "partition_responses": partition_responses})
    for topic, index in appended:
        ctx.broker.notify_data_arrived(topic, index)
    if body.acks == -1 and awaiting:
        waiting = time.perf_counter()
        await _wait_for_replicas(ctx, awaiting)
        ctx.waited_s += time.perf_counter() - waiting
    quotas = ctx.broker.metadata_cache.image.client_quotas
    if quotas:  # producer_byte_rate counts the whole request, as Kafka's does
        ctx.throttle_ms = ctx.broker.quotas.produce.record(
            quotas, ctx.user, ctx.client_id, ctx.request.size, ctx.broker.now_ms())
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


async def _wait_for_replicas(ctx: RequestContext,
                             awaiting: list[tuple[str, int, int, dict]]) -> None:
    await wait_for_replicas(ctx.broker, awaiting, ctx.body.timeout_ms)


async def wait_for_replicas(broker, awaiting: list[tuple[str, int, int, dict]],
                            timeout_ms: int) -> None:
    """Hold the answer until the HW covers every append (Kafka's DelayedProduce): each of
    `awaiting` is (topic, partition, the offset after the append, its answer), whose
    error_code is set for a partition that cannot wait any longer: leadership lost
    (NOT_LEADER_OR_FOLLOWER), committed with the ISR below min.insync.replicas
    (NOT_ENOUGH_REPLICAS_AFTER_APPEND), or `timeout_ms` spent (REQUEST_TIMED_OUT)."""
    deadline = trio.current_time() + max(timeout_ms, 0) / 1000
    pending = list(awaiting)
    while pending:
        still = []
        for topic, index, end, response in pending:
            partition = broker.partition(topic, index)
            if partition is None or not partition.is_leader:
                response["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif partition.high_watermark >= end:
                if partition.under_min_isr():
                    response["error_code"] = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            else:
                still.append((topic, index, end, response))
        pending = still
        if not pending:
            return
        if trio.current_time() >= deadline:
            break
        with timeouts.move_on_at(deadline):
            await broker.wait_for_data([(t, i) for t, i, _, _ in pending])
    for _topic, _index, _end, response in pending:
        response["error_code"] = ErrorCode.REQUEST_TIMED_OUT


def _node_endpoints(ctx: RequestContext, broker_ids: set[int]) -> list[dict]:
    """KIP-951: where the leaders named in the answer listen, on the client's listener."""
    cache, out = ctx.broker.metadata_cache, []
    for broker_id in sorted(broker_ids):
        endpoint = cache.endpoint(broker_id, ctx.listener_name)
        registration = cache.broker(broker_id)
        if endpoint is not None and registration is not None:
            out.append({"node_id": broker_id, "host": endpoint.host, "port": endpoint.port,
                        "rack": registration.rack})
    return out


def _has_transactional_records(body) -> bool:
    """Whether any partition's first batch says it is transactional (Kafka's
    RequestUtils.hasTransactionalRecords). Bytes that hold no whole v2 batch header say
    nothing: the partition's own validation refuses them."""
    for topic_data in body.topic_data:
        for data in topic_data.partition_data:
            raw = data.records or b""
            if len(raw) < BATCH_OVERHEAD or raw[MAGIC_POS] != MAGIC:
                continue
            length = struct.unpack_from(">i", raw, LENGTH_POS)[0]
            if (LOG_OVERHEAD + length <= len(raw)
                    and struct.unpack_from(">h", raw, ATTRIBUTES_POS)[0] & TRANSACTIONAL_MASK):
                return True
    return False


def _has_null_key(batch: bytes) -> bool:
    """Compacted topics need keys; like Kafka, only they pay for decoding the records."""
    try:
        _, batch_records = records.decode_batch(batch)
    except RecordError:
        return True
    return any(r.key is None for r in batch_records)


async def _verify_first_batches(ctx: RequestContext, denied: frozenset[str]
                                ) -> dict[tuple[str, int], tuple[ErrorCode, object | None]]:
    """KIP-890 part 1: the partitions whose batch would open its producer's transaction
    here are verified with the transaction coordinator before anything is appended, so a
    late or stray transactional write (its transaction already ended, or never added this
    partition) is refused rather than left open for ever, holding the LSO. Each gets the
    coordinator's answer, mapped for the request's version, and, when it may go on, the
    guard its append presents."""
    body, broker = ctx.body, ctx.broker
    candidates: list[tuple[tuple[str, int], object]] = []
    producer: tuple[int, int] | None = None
    for topic_data in body.topic_data:
        if topic_data.name in denied:
            continue
        for data in topic_data.partition_data:
            header = _transactional_header(data.records)
            partition = broker.partition(topic_data.name, data.index)
            if header is None or partition is None or not partition.is_leader:
                continue  # the partition's own checks answer it
            producer = (header.producer_id, header.producer_epoch)
            candidates.append(((topic_data.name, data.index), partition))
    if producer is None:
        return {}
    verified = await broker.transactions.verify_first_appends(
        body.transactional_id, producer[0], producer[1], candidates)
    return {tp: (verification_error_for_version(error, PRODUCE, ctx.version), guard)
            for tp, (error, guard) in verified.items()}


def _transactional_header(raw: bytes | None):
    """The header of a partition's first batch when it is a transactional data batch."""
    try:
        header = records.parse_batch_header(raw or b"")
    except RecordError:
        return None
    return header if header.is_transactional and not header.is_control else None


def _produce_partition(ctx: RequestContext, topic: str, data, now_ms: int,
                       verification: object | None = None):
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
    if partition.log.config.compacts and _has_null_key(data.records):
        return ErrorCode.INVALID_RECORD, None  # compaction keeps the latest value per key
    if body.acks == -1 and partition.under_min_isr():
        return ErrorCode.NOT_ENOUGH_REPLICAS, None
    # the caller wakes this partition's waiters (fetches, acks=all) after the whole request
    result = partition.append_batch(bytearray(data.records), header, now_ms,
                                    verification=verification)
    if result.error != ErrorCode.NONE:
        return result.error, None
    broker.metrics.produced(topic, header.records_count, len(data.records))
    return result.error, result
