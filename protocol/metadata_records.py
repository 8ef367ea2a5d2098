"""The KRaft metadata records of __cluster_metadata, and the frame each record value wears.

Owns: the declarations of the metadata records the controller writes (TopicRecord,
PartitionRecord, PartitionChangeRecord, RegisterBrokerRecord, UnregisterBrokerRecord,
FenceBrokerRecord, UnfenceBrokerRecord, BrokerRegistrationChangeRecord, ConfigRecord, ProducerIdsRecord,
RemoveTopicRecord, FeatureLevelRecord, NoOpRecord; for security UserScramCredentialRecord,
RemoveUserScramCredentialRecord, AccessControlEntryRecord and RemoveAccessControlEntryRecord;
for quotas ClientQuotaRecord),
their record types, and `encode_metadata_record` / `decode_metadata_record`.

A metadata record is the value of a record in a __cluster_metadata batch, framed as Kafka's
`AbstractApiMessageSerde` (via `MetadataRecordSerde`) frames an `ApiMessageAndVersion`:

    frame_version  unsigned varint, always 1 (0 was the 2.8 KRaft preview, refused by Kafka)
    type           unsigned varint, the record's apiKey in its JSON definition
    version        unsigned varint
    body           the record at that version; every metadata record is flexible

The type and version must fit an int16, and nothing may follow the body.

Not to be confused with `broker.controller.election.PartitionChangeRecord`, the pure election
code's dataclass for the same change: refer to the wire declaration here module-qualified,
as `metadata_records.PartitionChangeRecord`.
"""

from __future__ import annotations

import enum
import io
from typing import Any

from construct import ConstructError, Container

from protocol import primitives as p
from protocol.errors import DecodeError, EncodeError
from protocol.schema import F, Message

RegisterBrokerRecord = Message(
    "RegisterBrokerRecord", api_key=0, valid="0-3", flexible="0+", fields=[
        F("broker_id", "int32"),
        F("is_migrating_zk_broker", "bool", "2+", default=False),
        F("incarnation_id", "uuid"),
        F("broker_epoch", "int64"),
        F("end_points", [
            F("name", "string"),
            F("host", "string"),
            F("port", "uint16"),
            F("security_protocol", "int16"),
        ]),
        F("features", [
            F("name", "string"),
            F("min_supported_version", "int16"),
            F("max_supported_version", "int16"),
        ]),
        F("rack", "string", nullable="0+"),
        F("fenced", "bool", default=True),
        F("in_controlled_shutdown", "bool", "1+", default=False),
        F("log_dirs", "[]uuid", "3+", tag=0),
    ])

# an unregistered broker's registration goes, at the epoch it had (kafka-cluster.sh unregister)
UnregisterBrokerRecord = Message(
    "UnregisterBrokerRecord", api_key=1, valid="0", flexible="0+", fields=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64"),
    ])


TopicRecord = Message(
    "TopicRecord", api_key=2, valid="0", flexible="0+", fields=[
        F("name", "string"),
        F("topic_id", "uuid"),
    ])


PartitionRecord = Message(
    "PartitionRecord", api_key=3, valid="0-2", flexible="0+", fields=[
        F("partition_id", "int32", default=-1),
        F("topic_id", "uuid"),
        F("replicas", "[]int32"),
        F("isr", "[]int32"),
        F("removing_replicas", "[]int32"),
        F("adding_replicas", "[]int32"),
        F("leader", "int32", default=-1),
        F("leader_recovery_state", "int8", tag=0, default=0),
        F("leader_epoch", "int32", default=-1),
        F("partition_epoch", "int32", default=-1),
        F("directories", "[]uuid", "1+"),
        F("eligible_leader_replicas", "[]int32", "2+", nullable="2+", tag=1),
        F("last_known_elr", "[]int32", "2+", nullable="2+", tag=2),
    ])


ConfigRecord = Message(
    "ConfigRecord", api_key=4, valid="0", flexible="0+", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("name", "string"),
        F("value", "string", nullable="0+"),
    ])


# Every change field is tagged and defaults to "unchanged": null lists, leader -2 and
# recovery state -1, so a record carries only what changed.
PartitionChangeRecord = Message(
    "PartitionChangeRecord", api_key=5, valid="0-2", flexible="0+", fields=[
        F("partition_id", "int32", default=-1),
        F("topic_id", "uuid"),
        F("isr", "[]int32", nullable="0+", tag=0),
        F("leader", "int32", tag=1, default=-2),
        F("replicas", "[]int32", nullable="0+", tag=2),
        F("removing_replicas", "[]int32", nullable="0+", tag=3),
        F("adding_replicas", "[]int32", nullable="0+", tag=4),
        F("leader_recovery_state", "int8", tag=5, default=-1),
        F("directories", "[]uuid", "1+", nullable="1+", tag=8),
        F("eligible_leader_replicas", "[]int32", "2+", nullable="2+", tag=6),
        F("last_known_elr", "[]int32", "2+", nullable="2+", tag=7),
    ])


FenceBrokerRecord = Message(
    "FenceBrokerRecord", api_key=7, valid="0", flexible="0+", fields=[
        F("id", "int32"),
        F("epoch", "int64"),
    ])


UnfenceBrokerRecord = Message(
    "UnfenceBrokerRecord", api_key=8, valid="0", flexible="0+", fields=[
        F("id", "int32"),
        F("epoch", "int64"),
    ])


# A change to a registration in place (KIP-858 uses it for log directories); each field
# defaults to "no change": fenced -1 unfences and 1 fences, in_controlled_shutdown 1 enters
# it, and a non-empty log_dirs replaces the broker's online directories.
BrokerRegistrationChangeRecord = Message(
    "BrokerRegistrationChangeRecord", api_key=17, valid="0-2", flexible="0+", fields=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64"),
        F("fenced", "int8", tag=0),
        F("in_controlled_shutdown", "int8", "1+", tag=1),
        F("log_dirs", "[]uuid", "2+", tag=2),
    ])


RemoveTopicRecord = Message(
    "RemoveTopicRecord", api_key=9, valid="0", flexible="0+", fields=[
        F("topic_id", "uuid"),
    ])


FeatureLevelRecord = Message(
    "FeatureLevelRecord", api_key=12, valid="0", flexible="0+", fields=[
        F("name", "string"),
        F("feature_level", "int16"),
    ])


ProducerIdsRecord = Message(
    "ProducerIdsRecord", api_key=15, valid="0", flexible="0+", fields=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
        F("next_producer_id", "int64"),
    ])


UserScramCredentialRecord = Message(
    "UserScramCredentialRecord", api_key=11, valid="0", flexible="0+", fields=[
        F("name", "string"),
        F("mechanism", "int8"),  # 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 (Kafka's ScramMechanism)
        F("salt", "bytes"),
        F("stored_key", "bytes"),
        F("server_key", "bytes"),
        F("iterations", "int32"),
    ])

RemoveUserScramCredentialRecord = Message(
    "RemoveUserScramCredentialRecord", api_key=22, valid="0", flexible="0+", fields=[
        F("name", "string"),
        F("mechanism", "int8"),
    ])

# a delegation token (KIP-48) as the controller issued it; the HMAC is not kept, since every
# node computes it again from the token id and delegation.token.secret.key
DelegationTokenRecord = Message(
    "DelegationTokenRecord", api_key=10, valid="0", flexible="0+", fields=[
        F("owner", "string"),
        F("requester", "string"),
        F("renewers", "[]string"),
        F("issue_timestamp", "int64"),
        F("max_timestamp", "int64"),
        F("expiration_timestamp", "int64"),
        F("token_id", "string"),
    ])

RemoveDelegationTokenRecord = Message(
    "RemoveDelegationTokenRecord", api_key=26, valid="0", flexible="0+", fields=[
        F("token_id", "string"),
    ])

AccessControlEntryRecord = Message(
    "AccessControlEntryRecord", api_key=18, valid="0", flexible="0+", fields=[
        F("id", "uuid"),
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("pattern_type", "int8"),
        F("principal", "string"),
        F("host", "string"),
        F("operation", "int8"),
        F("permission_type", "int8"),
    ])

RemoveAccessControlEntryRecord = Message(
    "RemoveAccessControlEntryRecord", api_key=19, valid="0", flexible="0+", fields=[
        F("id", "uuid"),
    ])

# One quota key of one entity set (remove false) or removed (remove true), KIP-546.
ClientQuotaRecord = Message(
    "ClientQuotaRecord", api_key=14, valid="0", flexible="0+", fields=[
        F("entity", [
            F("entity_type", "string"),
            F("entity_name", "string", nullable="0+"),  # null: the default entity
        ]),
        F("key", "string"),
        F("value", "float64"),
        F("remove", "bool"),
    ])

NoOpRecord = Message("NoOpRecord", api_key=20, valid="0", flexible="0+", fields=[])


class MetadataRecordType(enum.IntEnum):
    """Kafka's `MetadataRecordType` numbers for the records we declare."""

    REGISTER_BROKER_RECORD = 0
    UNREGISTER_BROKER_RECORD = 1
    TOPIC_RECORD = 2
    PARTITION_RECORD = 3
    CONFIG_RECORD = 4
    PARTITION_CHANGE_RECORD = 5
    FENCE_BROKER_RECORD = 7
    UNFENCE_BROKER_RECORD = 8
    REMOVE_TOPIC_RECORD = 9
    DELEGATION_TOKEN_RECORD = 10
    USER_SCRAM_CREDENTIAL_RECORD = 11
    FEATURE_LEVEL_RECORD = 12
    CLIENT_QUOTA_RECORD = 14
    PRODUCER_IDS_RECORD = 15
    BROKER_REGISTRATION_CHANGE_RECORD = 17
    ACCESS_CONTROL_ENTRY_RECORD = 18
    REMOVE_ACCESS_CONTROL_ENTRY_RECORD = 19
    NO_OP_RECORD = 20
    REMOVE_USER_SCRAM_CREDENTIAL_RECORD = 22
    REMOVE_DELEGATION_TOKEN_RECORD = 26


METADATA_RECORDS: dict[MetadataRecordType, Message] = {
    MetadataRecordType(m.api_key): m for m in (
        RegisterBrokerRecord, UnregisterBrokerRecord, TopicRecord, PartitionRecord, ConfigRecord, PartitionChangeRecord,
        FenceBrokerRecord, UnfenceBrokerRecord, RemoveTopicRecord, FeatureLevelRecord,
        ProducerIdsRecord, BrokerRegistrationChangeRecord, NoOpRecord,
        UserScramCredentialRecord, RemoveUserScramCredentialRecord, AccessControlEntryRecord,
        RemoveAccessControlEntryRecord, ClientQuotaRecord, DelegationTokenRecord,
        RemoveDelegationTokenRecord)
    if m.api_key is not None
}

FRAME_VERSION = 1
_INT16_MAX = 0x7FFF
_UVARINT = p.UVarInt()


def _message_for(record_type: int, version: int, error: type[Exception]) -> Message:
    try:
        message = METADATA_RECORDS[MetadataRecordType(record_type)]
    except ValueError:
        raise error(f"unknown metadata record type {record_type}") from None
    if version not in message.versions:
        raise error(f"{message.name} has no version {version} (valid {message.valid})")
    return message


def encode_metadata_record(record_type: int, version: int, body: Any) -> bytes:
    """The record value for `body` (a mapping; missing fields take their defaults)."""
    message = _message_for(record_type, version, EncodeError)
    return (p.encode_uvarint(FRAME_VERSION) + p.encode_uvarint(record_type)
            + p.encode_uvarint(version) + message.build(body, version))


def _read_header_varint(stream: io.BytesIO, what: str) -> int:
    try:
        value = _UVARINT._parsereport(stream, None, what)
    except ConstructError as e:
        raise DecodeError(f"metadata record {what}: {e}") from None
    if value > _INT16_MAX:
        raise DecodeError(f"metadata record {what} {value} does not fit an int16")
    return value


# type number -> (type, declaration), for the one-byte headers every record we write has
_BY_NUMBER = {int(t): (t, m) for t, m in METADATA_RECORDS.items()}


def decode_metadata_record(data: bytes) -> tuple[MetadataRecordType, int, Container]:
    """(type, version, body) of one record value; DecodeError for anything malformed."""
    # Frame version, type and version are varints, each one byte below 128: read those
    # directly (a restart decodes every record of the log; the general varint path was
    # half of each small record's decoding).
    if (len(data) >= 3 and data[0] == FRAME_VERSION and data[2] < 0x80
            and (known := _BY_NUMBER.get(data[1])) is not None
            and data[2] in known[1].versions):
        return known[0], data[2], known[1].parse(data[3:], data[2])
    stream = io.BytesIO(data)
    frame_version = _read_header_varint(stream, "frame version")
    if frame_version != FRAME_VERSION:
        raise DecodeError(f"metadata record frame version {frame_version} is unknown "
                          f"(only {FRAME_VERSION} is)")
    record_type = _read_header_varint(stream, "type")
    version = _read_header_varint(stream, "version")
    message = _message_for(record_type, version, DecodeError)
    body = message.parse(data[stream.tell():], version)
    return MetadataRecordType(record_type), version, body
