"""The __transaction_state record of one transactional id, as a plain value.

Owns: `TransactionLogValue` (the fields of Kafka's TransactionLogValue; the record's key is
the transactional id, TransactionLogKey's one field, and a tombstone is a value of None),
`value_of` (the record a transition writes), `metadata_from` (what a load rebuilds from a
record), and `encode_value` / `decode_value`, the value in Kafka's bytes
(protocol.messages.transaction_log declares the format).

Kafka's TransactionLogValue has no last producer epoch: a coordinator that loads the log
knows it as -1, so a producer retrying an InitProducerId whose answer it lost gets
PRODUCER_FENCED after a coordinator move, as in Kafka. ClientTransactionVersion (tagged, for
transactions V2) is left out: this coordinator speaks transactions V1 only.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.messages import transaction_log
from broker.transaction.state import (
    NO_PRODUCER_EPOCH, TopicPartition, TransactionMetadata, TransactionState, TxnTransitMetadata,
)


@dataclass(frozen=True)
class TransactionLogValue:
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: TransactionState
    transaction_partitions: frozenset[TopicPartition]
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int


def value_of(transit: TxnTransitMetadata) -> TransactionLogValue:
    if transit.txn_state == TransactionState.EMPTY and transit.topic_partitions:
        # Kafka writes Empty with null partitions and refuses to write it with any
        raise ValueError(f"an Empty transaction with partitions: {transit}")
    return TransactionLogValue(
        transit.producer_id, transit.previous_producer_id, transit.next_producer_id,
        transit.producer_epoch, transit.txn_timeout_ms, transit.txn_state,
        transit.topic_partitions, transit.txn_last_update_timestamp, transit.txn_start_timestamp)


def metadata_from(transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
    return TransactionMetadata(
        transactional_id, value.producer_id, value.previous_producer_id, value.next_producer_id,
        value.producer_epoch, NO_PRODUCER_EPOCH, value.transaction_timeout_ms,
        value.transaction_status,
        set() if value.transaction_status == TransactionState.EMPTY
        else set(value.transaction_partitions),
        value.transaction_start_timestamp_ms, value.transaction_last_update_timestamp_ms)


def matches(value: TransactionLogValue, transit: TxnTransitMetadata) -> bool:
    """Whether a replayed record is the one this transit wrote."""
    return value == value_of(transit)


def encode_value(value: TransactionLogValue | None) -> bytes | None:
    """The record value Kafka writes for `value` (v1, flexible); None stays a tombstone."""
    if value is None:
        return None
    partitions: dict[str, list[int]] = {}
    for topic, index in sorted(value.transaction_partitions):
        partitions.setdefault(topic, []).append(index)
    return transaction_log.encode_value({
        "producer_id": value.producer_id,
        "previous_producer_id": value.previous_producer_id,
        "next_producer_id": value.next_producer_id,
        "producer_epoch": value.producer_epoch,
        "transaction_timeout_ms": value.transaction_timeout_ms,
        "transaction_status": value.transaction_status.id,
        "transaction_partitions": (
            None if value.transaction_status == TransactionState.EMPTY
            else [{"topic": t, "partition_ids": ids} for t, ids in partitions.items()]),
        "transaction_last_update_timestamp_ms": value.transaction_last_update_timestamp_ms,
        "transaction_start_timestamp_ms": value.transaction_start_timestamp_ms,
    })


def decode_value(data: bytes | None) -> TransactionLogValue | None:
    """A record value read back (DecodeError, ValueError for one that is not Kafka's)."""
    v = transaction_log.decode_value(data)
    if v is None:
        return None
    return TransactionLogValue(
        v.producer_id, v.previous_producer_id, v.next_producer_id, v.producer_epoch,
        v.transaction_timeout_ms, TransactionState.from_id(v.transaction_status),
        frozenset((t.topic, i) for t in (v.transaction_partitions or ())
                  for i in t.partition_ids),
        v.transaction_last_update_timestamp_ms, v.transaction_start_timestamp_ms)
