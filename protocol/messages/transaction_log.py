"""The records of __transaction_state, in Kafka's own key and value formats.

Owns: the declarations of TransactionLogKey and TransactionLogValue, `TransactionState`
(the state ids the value stores and the names DescribeTransactions and ListTransactions
answer with), and the functions that turn a transactional id's state into a record's key
and value and back.

One record per transactional id: the key is an int16 0 (the key's one version, which newer
Kafka calls the record type) and the id; the value an int16 version and the state, and a
null value (a tombstone) is an id that expired. Kafka writes value v1, flexible, once the
cluster's transaction.version is 1 or more (the default of a new Kafka 4.0 cluster), and v0
below; so the version is the caller's to choose, v1 unless it says otherwise.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any, Mapping, overload

from construct import Container

from protocol.errors import DecodeError
from protocol.schema import F, Message

TransactionLogKey = Message(
    "TransactionLogKey", valid="0", flexible="none", fields=[
        F("transactional_id", "string", "0"),
    ])

TransactionLogValue = Message(
    "TransactionLogValue", valid="0-1", flexible="1+", fields=[
        F("producer_id", "int64"),
        # the producer ids of the last committed transaction and of the one handed out
        # next (KIP-890 part 2's epoch bumps can exhaust an id mid-transaction)
        F("previous_producer_id", "int64", "1+", tag=0, default=-1),
        F("next_producer_id", "int64", "1+", tag=1, default=-1),
        F("producer_epoch", "int16"),
        F("transaction_timeout_ms", "int32"),
        F("transaction_status", "int8"),  # a TransactionState
        F("transaction_partitions", [  # null in the Empty state
            F("topic", "string"),
            F("partition_ids", "[]int32"),
        ], nullable="0+"),
        F("transaction_last_update_timestamp_ms", "int64"),
        F("transaction_start_timestamp_ms", "int64"),
        F("client_transaction_version", "int16", "1+", tag=2, default=0),
    ])

TRANSACTION_LOG_KEY_VERSION = 0
TRANSACTION_LOG_VALUE_VERSION = 1


class TransactionState(IntEnum):
    """Kafka's TransactionState: the id is what a TransactionLogValue stores, `kafka_name`
    what the admin APIs answer with."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """e.g. "PrepareCommit", as DescribeTransactions and ListTransactions spell it."""
        return "".join(word.capitalize() for word in self.name.split("_"))


_I16 = struct.Struct(">h")


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(TRANSACTION_LOG_KEY_VERSION) + TransactionLogKey.build(
        {"transactional_id": transactional_id}, TRANSACTION_LOG_KEY_VERSION)


def encode_value(value: Mapping[str, Any], version: int = TRANSACTION_LOG_VALUE_VERSION) -> bytes:
    """`value` as TransactionLogValue declares it; the tagged fields are written at v1 only,
    and only where they differ from their defaults."""
    return _I16.pack(version) + TransactionLogValue.build(value, version)


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key version we do not know (Kafka skips those
    when it loads the log)."""
    if len(data) < 2:
        raise DecodeError("__transaction_state key shorter than its version")
    (version,) = _I16.unpack_from(data)
    if version != TRANSACTION_LOG_KEY_VERSION:
        return None
    return TransactionLogKey.parse(data[2:], version).transactional_id


@overload
def decode_value(data: bytes) -> Container: ...
@overload
def decode_value(data: None) -> None: ...
@overload
def decode_value(data: bytes | None) -> Container | None: ...
def decode_value(data: bytes | None) -> Container | None:
    """The state stored for a transactional id, or None for a tombstone."""
    if data is None:
        return None
    if len(data) < 2:
        raise DecodeError("__transaction_state value shorter than its version")
    (version,) = _I16.unpack_from(data)
    if version not in TransactionLogValue.versions:
        raise DecodeError(f"TransactionLogValue version {version} is unknown")
    return TransactionLogValue.parse(data[2:], version)
