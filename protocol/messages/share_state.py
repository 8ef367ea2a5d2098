"""The share coordinator's APIs and records (KIP-932).

Owns the declarations of the inter-broker share-state APIs a share-partition leader sends
its share coordinator: InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86) and ReadShareGroupStateSummary (87),
v0 as Kafka's October 2024 definitions have them (broker.handlers.share_state serves
them); and the records of __share_group_state, ShareSnapshot and ShareUpdate, with the
functions that make a record's key and value and read them back.

A record's key is an int16 record type (0 ShareSnapshot, 1 ShareUpdate: in Kafka's
definitions the key's one version is the type) and the key struct; its value an int16
version (0) and the value struct; a null value is a share partition's tombstone.
"""

from __future__ import annotations

import struct
from typing import Any, Mapping

from construct import Container

from protocol.errors import DecodeError
from protocol.schema import F, Message


def _state_batches(versions: str = "0+") -> F:
    return F("state_batches", [
        F("first_offset", "int64", versions),
        F("last_offset", "int64", versions),
        F("delivery_state", "int8", versions),
        F("delivery_count", "int16", versions),
    ], versions)


def _request(name: str, api_key: int, partition_fields: list[F]) -> Message:
    return Message(name, api_key=api_key, valid="0", flexible="0+", fields=[
        F("group_id", "string"),
        F("topics", [
            F("topic_id", "uuid"),
            F("partitions", [F("partition", "int32"), *partition_fields]),
        ]),
    ])


def _response(name: str, api_key: int, partition_fields: list[F]) -> Message:
    return Message(name, api_key=api_key, valid="0", flexible="0+", fields=[
        F("results", [
            F("topic_id", "uuid"),
            F("partitions", [
                F("partition", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                *partition_fields,
            ]),
        ]),
    ])


InitializeShareGroupStateRequest = _request("InitializeShareGroupStateRequest", 83, [
    F("state_epoch", "int32"), F("start_offset", "int64")])
InitializeShareGroupStateResponse = _response("InitializeShareGroupStateResponse", 83, [])

ReadShareGroupStateRequest = _request("ReadShareGroupStateRequest", 84, [
    F("leader_epoch", "int32")])
ReadShareGroupStateResponse = _response("ReadShareGroupStateResponse", 84, [
    F("state_epoch", "int32"), F("start_offset", "int64"), _state_batches()])

WriteShareGroupStateRequest = _request("WriteShareGroupStateRequest", 85, [
    F("state_epoch", "int32"), F("leader_epoch", "int32"), F("start_offset", "int64"),
    _state_batches()])
WriteShareGroupStateResponse = _response("WriteShareGroupStateResponse", 85, [])

DeleteShareGroupStateRequest = _request("DeleteShareGroupStateRequest", 86, [])
DeleteShareGroupStateResponse = _response("DeleteShareGroupStateResponse", 86, [])

ReadShareGroupStateSummaryRequest = _request("ReadShareGroupStateSummaryRequest", 87, [
    F("leader_epoch", "int32")])
ReadShareGroupStateSummaryResponse = _response("ReadShareGroupStateSummaryResponse", 87, [
    F("state_epoch", "int32"), F("start_offset", "int64")])


# -- the records of __share_group_state --------------------------------------------------------

ShareSnapshotKey = Message("ShareSnapshotKey", valid="0", flexible="none", fields=[
    F("group_id", "string", "0"),
    F("topic_id", "uuid", "0"),
    F("partition", "int32", "0"),
])

ShareSnapshotValue = Message("ShareSnapshotValue", valid="0", flexible="0+", fields=[
    F("snapshot_epoch", "uint16", "0"),
    F("state_epoch", "int32"),
    F("leader_epoch", "int32"),
    F("start_offset", "int64", "0"),
    _state_batches("0"),
])

ShareUpdateKey = Message("ShareUpdateKey", valid="1", flexible="none", fields=[
    F("group_id", "string", "1"),
    F("topic_id", "uuid", "1"),
    F("partition", "int32", "1"),
])

ShareUpdateValue = Message("ShareUpdateValue", valid="0", flexible="0+", fields=[
    F("snapshot_epoch", "uint16", "0"),
    F("leader_epoch", "int32"),
    F("start_offset", "int64", "0"),
    _state_batches("0"),
])

SHARE_SNAPSHOT, SHARE_UPDATE = 0, 1  # the key's record type
_KEYS = {SHARE_SNAPSHOT: ShareSnapshotKey, SHARE_UPDATE: ShareUpdateKey}
_VALUES = {SHARE_SNAPSHOT: ShareSnapshotValue, SHARE_UPDATE: ShareUpdateValue}
VALUE_VERSION = 0
_I16 = struct.Struct(">h")


def encode_key(record_type: int, key: Mapping[str, Any]) -> bytes:
    return _I16.pack(record_type) + _KEYS[record_type].build(key, record_type)


def encode_value(record_type: int, value: Mapping[str, Any] | None) -> bytes | None:
    if value is None:
        return None
    return _I16.pack(VALUE_VERSION) + _VALUES[record_type].build(value, VALUE_VERSION)


def decode(key: bytes, value: bytes | None) -> tuple[int, Container, Container | None] | None:
    """(record type, key, value or None for a tombstone), or None for a record type this
    version does not know (skipped on load, as Kafka skips unknown types)."""
    if len(key) < 2:
        raise DecodeError("__share_group_state key shorter than its type")
    (record_type,) = _I16.unpack_from(key)
    if record_type not in _KEYS:
        return None
    parsed_key = _KEYS[record_type].parse(key[2:], record_type)
    if value is None:
        return record_type, parsed_key, None
    if len(value) < 2:
        raise DecodeError("__share_group_state value shorter than its version")
    (version,) = _I16.unpack_from(value)
    if version != VALUE_VERSION:
        raise DecodeError(f"share coordinator value version {version} is unknown")
    return record_type, parsed_key, _VALUES[record_type].parse(value[2:], version)
