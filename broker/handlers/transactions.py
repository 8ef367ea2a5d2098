"""The transaction APIs of the transaction coordinator: InitProducerId with a transactional
id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions;
and TxnOffsetCommit, which the group coordinator serves.

Owns: unpacking those requests, their authorization (WRITE on the TRANSACTIONAL_ID, and on
each topic added; READ on the group of AddOffsetsToTxn), the per-partition checks Kafka's
KafkaApis makes before the coordinator is asked, and the error codes each request version
knows (broker.transaction.coordinator decides everything else; broker.transaction.runtime
writes its records and waits for them to be committed).

AddPartitionsToTxn v4+ is the form brokers send: several transactions at once, and with
`verify_only` a partition leader's question of KIP-890 part 1 (is this partition in the
producer's ongoing transaction?), answered from the coordinator's state without writing.
It needs CLUSTER_ACTION on the cluster.
"""

from __future__ import annotations

from typing import Any

from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize, authorize_cluster, authorize_group
from broker.transaction.coordinator import error_for_version, verification_error_for_version
from broker.transaction.describe import describe_transaction, list_transactions
from protocol import messages as m
from protocol.errors import ErrorCode

E = ErrorCode
# how long the next transaction's AddPartitionsToTxn or AddOffsetsToTxn waits for the
# previous one's markers before it answers CONCURRENT_TRANSACTIONS (call_when_completed): well
# within every client's request timeout
COMPLETION_WAIT_S = 5.0


def _allowed_txn(ctx: RequestContext, operation: AclOperation, transactional_id: str) -> bool:
    return authorize(ctx, operation, ResourceType.TRANSACTIONAL_ID, transactional_id)


# -- InitProducerId with a transactional id ----------------------------------------------------

async def init_producer_id(ctx: RequestContext) -> dict:
    """InitProducerId for a transactional producer (broker.handlers.producer_id hands the
    others their ids)."""
    b = ctx.body
    out: dict[str, Any] = {"throttle_time_ms": 0, "error_code": E.NONE, "producer_id": -1,
                           "producer_epoch": -1}
    if not _allowed_txn(ctx, AclOperation.WRITE, b.transactional_id):
        out["error_code"] = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return out
    runtime = ctx.broker.transactions
    if not await runtime.ensure_producer_id():
        out["error_code"] = E.COORDINATOR_NOT_AVAILABLE
        return out
    waiter = await runtime.call(runtime.coordinator.handle_init_producer_id, b.transactional_id,
                                b.transaction_timeout_ms, b.get("producer_id", -1),
                                b.get("producer_epoch", -1))
    out.update(waiter.answer(out))
    out["error_code"] = error_for_version(E(out["error_code"]), m.INIT_PRODUCER_ID, ctx.version)
    return out


# -- AddPartitionsToTxn --------------------------------------------------------------------------

async def _call_once_markers_written(runtime, transactional_id: str, operation,
                                     *args: Any) -> ErrorCode:
    """The coordinator's answer to adding to a transaction; one that finds the previous
    transaction's markers still being written is parked until they are
    (call_when_completed) and asked again then, rather than answer CONCURRENT_TRANSACTIONS:
    Kafka's transactions V1 answer EndTxn once the decision is durable, so a producer's
    next transaction always meets the markers of the last, and a client told to retry
    waits out its backoff (librdkafka made 14% of its idempotent rate on the three-node
    cluster that way)."""
    waiter = await runtime.call(operation, *args)
    if waiter.error_code() == E.CONCURRENT_TRANSACTIONS:
        waiter = await runtime.call_when_completed(
            transactional_id, COMPLETION_WAIT_S, operation, *args) or waiter
    return waiter.error_code()


def _partition_errors(ctx: RequestContext, partitions: list[tuple[str, int]]
                      ) -> dict[tuple[str, int], E]:
    """Kafka's checks before the coordinator: topics the principal may not write are
    TOPIC_AUTHORIZATION_FAILED, partitions the cluster does not have
    UNKNOWN_TOPIC_OR_PARTITION, and when any partition fails so, the others are
    OPERATION_NOT_ATTEMPTED. Empty when all may go on."""
    errors: dict[tuple[str, int], E] = {}
    cache = ctx.broker.metadata_cache
    for topic, index in partitions:
        if not authorize(ctx, AclOperation.WRITE, ResourceType.TOPIC, topic):
            errors[(topic, index)] = E.TOPIC_AUTHORIZATION_FAILED
        elif cache.image.partition(topic, index) is None:
            errors[(topic, index)] = E.UNKNOWN_TOPIC_OR_PARTITION
    if errors:
        for tp in partitions:
            errors.setdefault(tp, E.OPERATION_NOT_ATTEMPTED)
    return errors


def _flatten(topics) -> list[tuple[str, int]]:
    return list(dict.fromkeys((t.name, i) for t in topics for i in t.partitions))


def _topic_results(errors: dict[tuple[str, int], E]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": index,
                                               "partition_error_code": error})
    return [{"name": t, "results_by_partition": rs} for t, rs in by_topic.items()]


async def _add_partitions(ctx: RequestContext, transactional_id: str, producer_id: int,
                          producer_epoch: int, topics, verify_only: bool,
                          version: int) -> dict[tuple[str, int], E]:
    partitions = _flatten(topics)
    errors = _partition_errors(ctx, partitions)
    if errors:
        return errors
    runtime = ctx.broker.transactions
    if verify_only:
        return dict(runtime.coordinator.verify_partitions(transactional_id, producer_id,
                                                          producer_epoch, partitions))
    error = await _call_once_markers_written(
        runtime, transactional_id, runtime.coordinator.handle_add_partitions, transactional_id,
        producer_id, producer_epoch, partitions)
    error = error_for_version(error, m.ADD_PARTITIONS_TO_TXN, version)
    return {tp: error for tp in partitions}


async def handle_add_partitions(ctx: RequestContext) -> dict:
    b = ctx.body
    if ctx.version <= 3:
        if not _allowed_txn(ctx, AclOperation.WRITE, b.v3_and_below_transactional_id):
            errors = {tp: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                      for tp in _flatten(b.v3_and_below_topics)}
        else:
            errors = await _add_partitions(
                ctx, b.v3_and_below_transactional_id, b.v3_and_below_producer_id,
                b.v3_and_below_producer_epoch, b.v3_and_below_topics, False, ctx.version)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(errors)}
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return {"throttle_time_ms": 0, "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
                "results_by_transaction": []}
    results = []
    for txn in b.transactions:
        errors = await _add_partitions(ctx, txn.transactional_id, txn.producer_id,
                                       txn.producer_epoch, txn.topics, txn.verify_only,
                                       ctx.version)
        results.append({"transactional_id": txn.transactional_id,
                        "topic_results": _topic_results(errors)})
    return {"throttle_time_ms": 0, "error_code": E.NONE, "results_by_transaction": results}


# -- AddOffsetsToTxn, EndTxn --------------------------------------------------------------------

async def handle_add_offsets(ctx: RequestContext) -> dict:
    b = ctx.body
    out = {"throttle_time_ms": 0, "error_code": E.NONE}
    if not _allowed_txn(ctx, AclOperation.WRITE, b.transactional_id):
        return dict(out, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authorize_group(ctx, AclOperation.READ, b.group_id):
        return dict(out, error_code=E.GROUP_AUTHORIZATION_FAILED)
    runtime = ctx.broker.transactions
    error = await _call_once_markers_written(
        runtime, b.transactional_id, runtime.coordinator.handle_add_offsets, b.transactional_id,
        b.producer_id, b.producer_epoch, b.group_id)
    return dict(out, error_code=error_for_version(error, m.ADD_OFFSETS_TO_TXN, ctx.version))


async def handle_end_txn(ctx: RequestContext) -> dict:
    b = ctx.body
    out: dict[str, Any] = {"throttle_time_ms": 0, "error_code": E.NONE, "producer_id": -1,
                           "producer_epoch": -1}
    if not _allowed_txn(ctx, AclOperation.WRITE, b.transactional_id):
        return dict(out, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    runtime = ctx.broker.transactions
    waiter = await runtime.call(runtime.coordinator.handle_end_txn, b.transactional_id,
                                b.producer_id, b.producer_epoch, b.committed)
    out.update(waiter.answer(out))
    out["error_code"] = error_for_version(E(out["error_code"]), m.END_TXN, ctx.version)
    return out


# -- TxnOffsetCommit (on the group coordinator) --------------------------------------------------

async def handle_txn_offset_commit(ctx: RequestContext) -> dict:
    """TxnOffsetCommit, sent to the group's coordinator: the consumed offsets join the
    producer's transaction (READ on the group and the topics, WRITE on the transactional
    id), and count once its COMMIT marker reaches __consumer_offsets."""
    b = ctx.body
    wanted = [(t.name, p.partition_index) for t in b.topics for p in t.partitions]
    errors: dict[tuple[str, int], E] = {}
    if not _allowed_txn(ctx, AclOperation.WRITE, b.transactional_id):
        errors = {tp: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted}
    elif not authorize_group(ctx, AclOperation.READ, b.group_id):
        errors = {tp: E.GROUP_AUTHORIZATION_FAILED for tp in wanted}
    else:
        for t in b.topics:
            if not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, t.name):
                errors.update({(t.name, p.partition_index): E.TOPIC_AUTHORIZATION_FAILED
                               for p in t.partitions})
            elif ctx.broker.metadata_cache.topic(t.name) is None:
                errors.update({(t.name, p.partition_index): E.UNKNOWN_TOPIC_OR_PARTITION
                               for p in t.partitions})
    offsets = [(t.name, p.partition_index, p.committed_offset,
                p.get("committed_leader_epoch", -1), p.committed_metadata)
               for t in b.topics for p in t.partitions
               if (t.name, p.partition_index) not in errors]
    if offsets:
        runtime = ctx.broker.groups
        error, guard = await _verify_offsets_partition(ctx)
        if error != E.NONE:
            errors.update({(t, p): error for t, p, *_ in offsets})
        else:
            waiter = await runtime.call(
                runtime.coordinator.txn_commit, b.group_id, b.producer_id, b.producer_epoch,
                b.get("generation_id", -1), b.get("member_id", ""),
                b.get("group_instance_id"), offsets, verification=guard)
            errors.update(waiter.body if waiter.error == E.NONE else {
                (t, p): waiter.error for t, p, *_ in offsets})
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": errors[(t.name, p.partition_index)]} for p in t.partitions]}
        for t in b.topics]}


async def _verify_offsets_partition(ctx: RequestContext) -> tuple[E, object | None]:
    """KIP-890 part 1 for TxnOffsetCommit, as for Produce: when these offsets would open
    the producer's transaction in the group's __consumer_offsets partition, the
    transaction coordinator is asked first whether AddOffsetsToTxn added that partition to
    the producer's ongoing transaction, so a late or stray commit (its transaction ended,
    or the partition never added) is refused rather than left hanging there, holding the
    partition's LSO. (error, the guard the append presents)."""
    b, broker = ctx.body, ctx.broker
    if not broker.config.transaction_partition_verification_enable:
        return E.NONE, None
    tp = (broker.groups.topic, broker.groups.coordinator.partition_for(b.group_id))
    partition = broker.partition(*tp)
    if partition is None or not partition.is_leader:
        return E.NONE, None  # not coordinating the group: the coordinator answers that
    verified = await broker.transactions.verify_first_appends(
        b.transactional_id, b.producer_id, b.producer_epoch, [(tp, partition)])
    if tp not in verified:
        return E.NONE, None  # the transaction is open there already
    error, guard = verified[tp]
    return verification_error_for_version(error, m.TXN_OFFSET_COMMIT, ctx.version), guard


# -- DescribeTransactions, ListTransactions ----------------------------------------------------

async def handle_describe_transactions(ctx: RequestContext) -> dict:
    coordinator = ctx.broker.transactions.coordinator
    states = []
    for transactional_id in ctx.body.transactional_ids:
        if not _allowed_txn(ctx, AclOperation.DESCRIBE, transactional_id):
            states.append(dict(describe_transaction(coordinator, ""),
                               transactional_id=transactional_id,
                               error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        else:
            states.append(describe_transaction(coordinator, transactional_id))
    return {"throttle_time_ms": 0, "transaction_states": states}


async def handle_list_transactions(ctx: RequestContext) -> dict:
    b = ctx.body
    body = list_transactions(
        ctx.broker.transactions.coordinator, b.state_filters, b.producer_id_filters,
        b.get("duration_filter", -1), b.get("transactional_id_pattern"), ctx.broker.now_ms(),
        visible=lambda tid: authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                      tid, log_denied=False))
    return {"throttle_time_ms": 0, **body}
