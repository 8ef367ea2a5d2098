"""What the transaction admin APIs read from the transaction coordinator: pure.

Owns: `describe_transaction` (DescribeTransactions, one transactional id) and
`list_transactions` (ListTransactions: the transactions of the __transaction_state
partitions this broker leads, filtered as Kafka's TransactionStateManager.listTransactionStates
filters them). The handlers check authorization; these check routing and load.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from broker.transaction.coordinator import TransactionCoordinator
from broker.transaction.state import NO_PRODUCER_EPOCH, TransactionState
from protocol.errors import ErrorCode

E = ErrorCode
STATE_NAMES = {s.value: s for s in TransactionState}


def describe_transaction(coordinator: TransactionCoordinator, transactional_id: str) -> dict:
    out = {"error_code": E.NONE, "transactional_id": transactional_id, "transaction_state": "",
           "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
           "producer_epoch": -1, "topics": []}
    error = coordinator.check(transactional_id)
    md = coordinator.transactions.get(transactional_id)
    if error == E.NONE and (md is None or md.producer_epoch == NO_PRODUCER_EPOCH):
        error = E.TRANSACTIONAL_ID_NOT_FOUND  # unknown, or a placeholder not yet written
    if error != E.NONE:
        return dict(out, error_code=error)
    assert md is not None
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(md.topic_partitions):
        by_topic.setdefault(topic, []).append(index)
    return dict(out, transaction_state=md.state.value, transaction_timeout_ms=md.txn_timeout_ms,
                transaction_start_time_ms=md.txn_start_timestamp, producer_id=md.producer_id,
                producer_epoch=md.producer_epoch,
                topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])


def list_transactions(coordinator: TransactionCoordinator, state_filters: Iterable[str],
                      producer_id_filters: Iterable[int], duration_filter_ms: int,
                      pattern: str | None, now_ms: int,
                      visible: Callable[[str], bool] = lambda _: True) -> dict:
    """ListTransactions' body: unknown state names are reported back and match nothing
    (Kafka's rule); a duration keeps transactions running at least that long; a pattern
    (v2) is a regular expression over the whole id."""
    out: dict = {"error_code": E.NONE, "unknown_state_filters": [], "transaction_states": []}
    if coordinator.loading:
        return dict(out, error_code=E.COORDINATOR_LOAD_IN_PROGRESS)
    wanted_states = set()
    for name in state_filters:
        if name in STATE_NAMES:
            wanted_states.add(STATE_NAMES[name])
        else:
            out["unknown_state_filters"].append(name)
    if out["unknown_state_filters"] and not wanted_states:
        return out  # filtered by states only unknown: nothing matches
    producer_ids = set(producer_id_filters)
    matcher = None
    if pattern:
        try:
            matcher = re.compile(pattern)
        except re.error:
            return dict(out, error_code=E.INVALID_REGULAR_EXPRESSION)
    for transactional_id in sorted(coordinator.transactions):
        md = coordinator.transactions[transactional_id]
        if md.producer_epoch == NO_PRODUCER_EPOCH or not visible(transactional_id):
            continue
        if coordinator.partition_for(transactional_id) not in coordinator.owned:
            continue
        if wanted_states and md.state not in wanted_states:
            continue
        if producer_ids and md.producer_id not in producer_ids:
            continue
        if duration_filter_ms >= 0 and (md.state != TransactionState.ONGOING
                                        or now_ms - md.txn_start_timestamp < duration_filter_ms):
            continue
        if matcher is not None and not matcher.fullmatch(transactional_id):
            continue
        out["transaction_states"].append({"transactional_id": transactional_id,
                                          "producer_id": md.producer_id,
                                          "transaction_state": md.state.value})
    return out
