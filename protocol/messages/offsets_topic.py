"""The records of __consumer_offsets, in Kafka's own key and value formats (docs/PROTOCOL.md §4).

Owns: the declarations of OffsetCommitKey/Value and GroupMetadataKey/Value, and the
functions that turn them into record keys and values and back. A key starts with an int16
that is really the record type (0/1 offset commit, 2 group metadata, 3+ the KIP-848 records,
which readers skip); a value starts with its int16 version; a null value is a tombstone.
Kafka writes OffsetCommitKey v1 / OffsetCommitValue v3 and GroupMetadataValue v3; so do we.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, overload

from construct import Container

from protocol.errors import DecodeError
from protocol.schema import F, Message

OffsetCommitKey = Message(
    "OffsetCommitKey", valid="0-1", flexible="none", fields=[
        F("group", "string", "0-1"),
        F("topic", "string", "0-1"),
        F("partition", "int32", "0-1"),
    ])


OffsetCommitValue = Message(
    "OffsetCommitValue", valid="0-4", flexible="4+", fields=[
        F("offset", "int64"),
        F("leader_epoch", "int32", "3+", default=-1),
        F("metadata", "string"),
        F("commit_timestamp", "int64"),
        F("expire_timestamp", "int64", "1", default=-1),
    ])


GroupMetadataKey = Message(
    "GroupMetadataKey", valid="2-2", flexible="none", fields=[
        F("group", "string", "2"),
    ])


GroupMetadataValue = Message(
    "GroupMetadataValue", valid="0-4", flexible="4+", fields=[
        F("protocol_type", "string"),
        F("generation", "int32"),
        F("protocol", "string", nullable="0+"),
        F("leader", "string", nullable="0+"),
        F("current_state_timestamp", "int64", "2+", default=-1),
        F("members", [
            F("member_id", "string"),
            F("group_instance_id", "string", "3+", nullable="3+"),
            F("client_id", "string"),
            F("client_host", "string"),
            F("rebalance_timeout", "int32", "1+", default=-1),
            F("session_timeout", "int32"),
            F("subscription", "bytes"),
            F("assignment", "bytes"),
        ]),
    ])


OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


def _versioned(message: Message, version: int, body: Any) -> bytes:
    return _I16.pack(version) + message.build(body, version)


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return _versioned(OffsetCommitKey, OFFSET_COMMIT_KEY_VERSION,
                      {"group": group, "topic": topic, "partition": partition})


def encode_offset_value(offset: int, leader_epoch: int, metadata: str | None,
                        commit_timestamp: int) -> bytes:
    return _versioned(OffsetCommitValue, OFFSET_COMMIT_VALUE_VERSION, {
        "offset": offset, "leader_epoch": leader_epoch, "metadata": metadata or "",
        "commit_timestamp": commit_timestamp})


def encode_group_key(group: str) -> bytes:
    return _versioned(GroupMetadataKey, GROUP_METADATA_KEY_VERSION, {"group": group})


def encode_group_value(value: dict) -> bytes:
    return _versioned(GroupMetadataValue, GROUP_METADATA_VALUE_VERSION, value)


def _parse(message: Message, data: bytes, version: int) -> Container:
    """The body after the int16 version; trailing bytes are refused (Message.parse)."""
    return message.parse(data[2:], version)


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key's record type decides its layout; None for types we do not know (KIP-848)."""
    if len(data) < 2:
        raise DecodeError("__consumer_offsets key shorter than its version")
    (version,) = _I16.unpack_from(data)
    if version in (0, 1):
        k = _parse(OffsetCommitKey, data, version)
        return OffsetKey(k.group, k.topic, k.partition)
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupKey(_parse(GroupMetadataKey, data, version).group)
    return None


@overload
def decode_value(key: OffsetKey | GroupKey, data: bytes) -> Container: ...
@overload
def decode_value(key: OffsetKey | GroupKey, data: None) -> None: ...
@overload
def decode_value(key: OffsetKey | GroupKey, data: bytes | None) -> Container | None: ...
def decode_value(key: OffsetKey | GroupKey, data: bytes | None) -> Container | None:
    """The value for a decoded key, or None for a tombstone."""
    if data is None:
        return None
    if len(data) < 2:
        raise DecodeError("__consumer_offsets value shorter than its version")
    (version,) = _I16.unpack_from(data)
    message = OffsetCommitValue if isinstance(key, OffsetKey) else GroupMetadataValue
    if not 0 <= version <= message.versions.high:
        raise DecodeError(f"{message.name} version {version} is unknown")
    return _parse(message, data, version)
