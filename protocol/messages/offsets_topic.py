"""The records of __consumer_offsets, in Kafka's own key and value formats (docs/PROTOCOL.md §4).

Owns: the declarations of OffsetCommitKey/Value, GroupMetadataKey/Value, the KIP-848
consumer group records (ConsumerGroup*Key/Value, record types 3-8) and the KIP-932 share
group records (ShareGroup*Key/Value, types 9-15), and the functions that
turn them into record keys and values and back. A key starts with an int16 that is really
the record type (0/1 offset commit, 2 group metadata, 3-8 a consumer group's, 9-15 a share
group's, 16 and up newer ones); a value starts with its int16 version; a null value is a tombstone.
Kafka writes OffsetCommitKey v1 / OffsetCommitValue v3 and GroupMetadataValue v3, and v0 of
every consumer group value; so do we.

`decode_key` returns None for a record type its caller does not know, and the consumer group
types are among those unless the caller asks for them (`kip848=True`, then a
`ConsumerGroupKey`), and so are the share group types unless it asks with `kip932=True`
(a `ShareGroupKey`): readers written for offsets and classic groups keep skipping them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Literal, Mapping, overload

from construct import Container

from protocol.errors import DecodeError
from protocol.schema import F, Message, Struct

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


# The KIP-848 consumer group records. A key's one valid version is its record type.

ConsumerGroupMetadataKey = Message(
    "ConsumerGroupMetadataKey", valid="3", flexible="none", fields=[
        F("group_id", "string", "3"),
    ])

ConsumerGroupMetadataValue = Message(
    "ConsumerGroupMetadataValue", valid="0", flexible="0+", fields=[
        F("epoch", "int32"),
    ])

ConsumerGroupPartitionMetadataKey = Message(
    "ConsumerGroupPartitionMetadataKey", valid="4", flexible="none", fields=[
        F("group_id", "string", "4"),
    ])

ConsumerGroupPartitionMetadataValue = Message(
    "ConsumerGroupPartitionMetadataValue", valid="0", flexible="0+", fields=[
        F("topics", [
            F("topic_id", "uuid"),
            F("topic_name", "string"),
            F("num_partitions", "int32"),
            F("partition_metadata", [  # Kafka: unused after 4.0 (racks per partition)
                F("partition", "int32"),
                F("racks", "[]string"),
            ]),
        ]),
    ])

ConsumerGroupMemberMetadataKey = Message(
    "ConsumerGroupMemberMetadataKey", valid="5", flexible="none", fields=[
        F("group_id", "string", "5"),
        F("member_id", "string", "5"),
    ])

ConsumerGroupMemberMetadataValue = Message(
    "ConsumerGroupMemberMetadataValue", valid="0", flexible="0+", fields=[
        F("instance_id", "string", nullable="0+"),
        F("rack_id", "string", nullable="0+"),
        F("client_id", "string"),
        F("client_host", "string"),
        F("subscribed_topic_names", "[]string"),
        F("subscribed_topic_regex", "string", nullable="0+"),
        F("rebalance_timeout_ms", "int32", default=-1),
        F("server_assignor", "string", nullable="0+"),
        # null for a member of the consumer protocol; a classic member's protocols otherwise
        F("classic_member_metadata", Struct([
            F("session_timeout_ms", "int32"),
            F("supported_protocols", [
                F("name", "string"),
                F("metadata", "bytes"),
            ]),
        ]), nullable="0+", tag=0),
    ])

ConsumerGroupTargetAssignmentMetadataKey = Message(
    "ConsumerGroupTargetAssignmentMetadataKey", valid="6", flexible="none", fields=[
        F("group_id", "string", "6"),
    ])

ConsumerGroupTargetAssignmentMetadataValue = Message(
    "ConsumerGroupTargetAssignmentMetadataValue", valid="0", flexible="0+", fields=[
        F("assignment_epoch", "int32"),
    ])

ConsumerGroupTargetAssignmentMemberKey = Message(
    "ConsumerGroupTargetAssignmentMemberKey", valid="7", flexible="none", fields=[
        F("group_id", "string", "7"),
        F("member_id", "string", "7"),
    ])

ConsumerGroupTargetAssignmentMemberValue = Message(
    "ConsumerGroupTargetAssignmentMemberValue", valid="0", flexible="0+", fields=[
        F("topic_partitions", [
            F("topic_id", "uuid"),
            F("partitions", "[]int32"),
        ]),
    ])

ConsumerGroupCurrentMemberAssignmentKey = Message(
    "ConsumerGroupCurrentMemberAssignmentKey", valid="8", flexible="none", fields=[
        F("group_id", "string", "8"),
        F("member_id", "string", "8"),
    ])

ConsumerGroupCurrentMemberAssignmentValue = Message(
    "ConsumerGroupCurrentMemberAssignmentValue", valid="0", flexible="0+", fields=[
        F("member_epoch", "int32"),
        F("previous_member_epoch", "int32"),
        F("state", "int8"),  # Kafka's MemberState
        F("assigned_partitions", [
            F("topic_id", "uuid"),
            F("partitions", "[]int32"),
        ]),
        F("partitions_pending_revocation", [
            F("topic_id", "uuid"),
            F("partitions", "[]int32"),
        ]),
    ])

# record type -> (key, value) declarations, each type read off its key's declaration
CONSUMER_GROUP_RECORDS: dict[int, tuple[Message, Message]] = {
    key.versions.low: (key, value) for key, value in (
        (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
        (ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue),
        (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
        (ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
        (ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
        (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
    )}

CONSUMER_GROUP_METADATA = ConsumerGroupMetadataKey.versions.low
CONSUMER_GROUP_PARTITION_METADATA = ConsumerGroupPartitionMetadataKey.versions.low
CONSUMER_GROUP_MEMBER_METADATA = ConsumerGroupMemberMetadataKey.versions.low
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = ConsumerGroupTargetAssignmentMetadataKey.versions.low
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = ConsumerGroupTargetAssignmentMemberKey.versions.low
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = ConsumerGroupCurrentMemberAssignmentKey.versions.low
CONSUMER_GROUP_VALUE_VERSION = 0

# The KIP-932 share group records (types 9-15). As for the consumer group records, a key's
# one valid version is its record type (Kafka 4.1's files call it the record's "apiKey").

def _share_key(name: str, record_type: int, member: bool = False) -> Message:
    v = str(record_type)
    fields = [F("group_id", "string", v)]
    if member:
        fields.append(F("member_id", "string", v))
    return Message(name, valid=v, flexible="none", fields=fields)


def _topic_partitions(with_name: bool = False) -> list[F]:
    return [F("topic_id", "uuid"), *([F("topic_name", "string")] if with_name else []),
            F("partitions", "[]int32")]


ShareGroupPartitionMetadataKey = _share_key("ShareGroupPartitionMetadataKey", 9)
ShareGroupPartitionMetadataValue = Message(
    "ShareGroupPartitionMetadataValue", valid="0", flexible="0+", fields=[
        F("topics", [
            F("topic_id", "uuid"),
            F("topic_name", "string"),
            F("num_partitions", "int32"),
            F("partition_metadata", [
                F("partition", "int32"),
                F("racks", "[]string"),
            ]),
        ]),
    ])

ShareGroupMemberMetadataKey = _share_key("ShareGroupMemberMetadataKey", 10, member=True)
ShareGroupMemberMetadataValue = Message(
    "ShareGroupMemberMetadataValue", valid="0", flexible="0+", fields=[
        F("rack_id", "string", nullable="0+"),
        F("client_id", "string"),
        F("client_host", "string"),
        F("subscribed_topic_names", "[]string"),
    ])

ShareGroupMetadataKey = _share_key("ShareGroupMetadataKey", 11)
ShareGroupMetadataValue = Message(
    "ShareGroupMetadataValue", valid="0", flexible="0+", fields=[
        F("epoch", "int32"),
    ])

ShareGroupTargetAssignmentMetadataKey = _share_key("ShareGroupTargetAssignmentMetadataKey", 12)
ShareGroupTargetAssignmentMetadataValue = Message(
    "ShareGroupTargetAssignmentMetadataValue", valid="0", flexible="0+", fields=[
        F("assignment_epoch", "int32"),
    ])

ShareGroupTargetAssignmentMemberKey = _share_key(
    "ShareGroupTargetAssignmentMemberKey", 13, member=True)
ShareGroupTargetAssignmentMemberValue = Message(
    "ShareGroupTargetAssignmentMemberValue", valid="0", flexible="0+", fields=[
        F("topic_partitions", _topic_partitions()),
    ])

ShareGroupCurrentMemberAssignmentKey = _share_key(
    "ShareGroupCurrentMemberAssignmentKey", 14, member=True)
ShareGroupCurrentMemberAssignmentValue = Message(
    "ShareGroupCurrentMemberAssignmentValue", valid="0", flexible="0+", fields=[
        F("member_epoch", "int32"),
        F("previous_member_epoch", "int32"),
        F("state", "int8"),  # Kafka's MemberState: a share member is always STABLE (0)
        F("assigned_partitions", _topic_partitions()),
    ])

# which topic-partitions the share coordinator holds state for (InitializeShareGroupState
# done), and which it is deleting: written by the share-partition side, not by membership
ShareGroupStatePartitionMetadataKey = _share_key("ShareGroupStatePartitionMetadataKey", 15)
ShareGroupStatePartitionMetadataValue = Message(
    "ShareGroupStatePartitionMetadataValue", valid="0", flexible="0+", fields=[
        F("initialized_topics", _topic_partitions(with_name=True)),
        F("deleting_topics", [
            F("topic_id", "uuid"),
            F("topic_name", "string"),
        ]),
    ])

SHARE_GROUP_RECORDS: dict[int, tuple[Message, Message]] = {
    key.versions.low: (key, value) for key, value in (
        (ShareGroupPartitionMetadataKey, ShareGroupPartitionMetadataValue),
        (ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue),
        (ShareGroupMetadataKey, ShareGroupMetadataValue),
        (ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue),
        (ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue),
        (ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue),
        (ShareGroupStatePartitionMetadataKey, ShareGroupStatePartitionMetadataValue),
    )}

SHARE_GROUP_PARTITION_METADATA = ShareGroupPartitionMetadataKey.versions.low  # 9
SHARE_GROUP_MEMBER_METADATA = ShareGroupMemberMetadataKey.versions.low  # 10
SHARE_GROUP_METADATA = ShareGroupMetadataKey.versions.low  # 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = ShareGroupTargetAssignmentMetadataKey.versions.low  # 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = ShareGroupTargetAssignmentMemberKey.versions.low  # 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = ShareGroupCurrentMemberAssignmentKey.versions.low  # 14
SHARE_GROUP_STATE_PARTITION_METADATA = ShareGroupStatePartitionMetadataKey.versions.low  # 15
SHARE_GROUP_VALUE_VERSION = 0

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


@dataclass(frozen=True)
class ConsumerGroupKey:
    """The key of a KIP-848 consumer group record: `type` is its record type (one of
    CONSUMER_GROUP_RECORDS), which also decides its value's layout; `member_id` is None for
    the group-wide records (types 3, 4 and 6)."""

    type: int
    group: str
    member_id: str | None = None

    @property
    def record(self) -> str:
        """Kafka's name for the record, e.g. ConsumerGroupMemberMetadata."""
        return CONSUMER_GROUP_RECORDS[self.type][0].name.removesuffix("Key")


@dataclass(frozen=True)
class ShareGroupKey:
    """The key of a KIP-932 share group record: `type` is one of SHARE_GROUP_RECORDS;
    `member_id` is None for the group-wide records (types 9, 11, 12 and 15)."""

    type: int
    group: str
    member_id: str | None = None

    @property
    def record(self) -> str:
        """Kafka's name for the record, e.g. ShareGroupMemberMetadata."""
        return SHARE_GROUP_RECORDS[self.type][0].name.removesuffix("Key")


AnyKey = OffsetKey | GroupKey | ConsumerGroupKey | ShareGroupKey


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


def encode_consumer_group_key(key: ConsumerGroupKey) -> bytes:
    """Any consumer group record's key (with a None value, its tombstone's)."""
    message = CONSUMER_GROUP_RECORDS[key.type][0]
    body = {"group_id": key.group}
    if key.member_id is not None:
        body["member_id"] = key.member_id
    return _versioned(message, key.type, body)


def _consumer_group_value(record_type: int, value: Mapping[str, Any]) -> bytes:
    return _versioned(CONSUMER_GROUP_RECORDS[record_type][1], CONSUMER_GROUP_VALUE_VERSION, value)


def encode_consumer_group_metadata_key(group: str) -> bytes:
    return encode_consumer_group_key(ConsumerGroupKey(CONSUMER_GROUP_METADATA, group))


def encode_consumer_group_metadata_value(epoch: int) -> bytes:
    return _consumer_group_value(CONSUMER_GROUP_METADATA, {"epoch": epoch})


def encode_consumer_group_partition_metadata_key(group: str) -> bytes:
    return encode_consumer_group_key(ConsumerGroupKey(CONSUMER_GROUP_PARTITION_METADATA, group))


def encode_consumer_group_partition_metadata_value(value: Mapping[str, Any]) -> bytes:
    """`value` as ConsumerGroupPartitionMetadataValue declares it: topics, each with
    topic_id, topic_name, num_partitions and partition_metadata."""
    return _consumer_group_value(CONSUMER_GROUP_PARTITION_METADATA, value)


def encode_consumer_group_member_metadata_key(group: str, member_id: str) -> bytes:
    return encode_consumer_group_key(
        ConsumerGroupKey(CONSUMER_GROUP_MEMBER_METADATA, group, member_id))


def encode_consumer_group_member_metadata_value(value: Mapping[str, Any]) -> bytes:
    """`value` as ConsumerGroupMemberMetadataValue declares it (classic_member_metadata
    None, the default, for a member of the consumer protocol)."""
    return _consumer_group_value(CONSUMER_GROUP_MEMBER_METADATA, value)


def encode_consumer_group_target_assignment_metadata_key(group: str) -> bytes:
    return encode_consumer_group_key(
        ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group))


def encode_consumer_group_target_assignment_metadata_value(assignment_epoch: int) -> bytes:
    return _consumer_group_value(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                                 {"assignment_epoch": assignment_epoch})


def encode_consumer_group_target_assignment_member_key(group: str, member_id: str) -> bytes:
    return encode_consumer_group_key(
        ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group, member_id))


def encode_consumer_group_target_assignment_member_value(value: Mapping[str, Any]) -> bytes:
    """`value`: topic_partitions, each a topic_id and its partitions."""
    return _consumer_group_value(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, value)


def encode_consumer_group_current_member_assignment_key(group: str, member_id: str) -> bytes:
    return encode_consumer_group_key(
        ConsumerGroupKey(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group, member_id))


def encode_consumer_group_current_member_assignment_value(value: Mapping[str, Any]) -> bytes:
    """`value`: member_epoch, previous_member_epoch, state, assigned_partitions and
    partitions_pending_revocation (each a list of topic_id and partitions)."""
    return _consumer_group_value(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, value)


def encode_share_group_key(key: ShareGroupKey) -> bytes:
    """Any share group record's key (with a None value, its tombstone's)."""
    message = SHARE_GROUP_RECORDS[key.type][0]
    body = {"group_id": key.group}
    if key.member_id is not None:
        body["member_id"] = key.member_id
    return _versioned(message, key.type, body)


def encode_share_group_value(record_type: int, value: Mapping[str, Any]) -> bytes:
    """A share group record's value, `value` as that type's value declaration has it."""
    return _versioned(SHARE_GROUP_RECORDS[record_type][1], SHARE_GROUP_VALUE_VERSION, value)


def _parse(message: Message, data: bytes, version: int) -> Container:
    """The body after the int16 version; trailing bytes are refused (Message.parse)."""
    return message.parse(data[2:], version)


@overload
def decode_key(data: bytes, *, kip848: Literal[False] = False,
               kip932: Literal[False] = False) -> OffsetKey | GroupKey | None: ...
@overload
def decode_key(data: bytes, *, kip848: bool, kip932: bool = False) -> AnyKey | None: ...
def decode_key(data: bytes, *, kip848: bool = False, kip932: bool = False) -> AnyKey | None:
    """The key's record type decides its layout; None for types we do not know, which are
    the consumer group ones (3-8) too unless `kip848` (then a ConsumerGroupKey), and the
    share group ones (9-15) unless `kip932` (then a ShareGroupKey)."""
    if len(data) < 2:
        raise DecodeError("__consumer_offsets key shorter than its version")
    (version,) = _I16.unpack_from(data)
    if version in (0, 1):
        k = _parse(OffsetCommitKey, data, version)
        return OffsetKey(k.group, k.topic, k.partition)
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupKey(_parse(GroupMetadataKey, data, version).group)
    if kip848 and version in CONSUMER_GROUP_RECORDS:
        k = _parse(CONSUMER_GROUP_RECORDS[version][0], data, version)
        return ConsumerGroupKey(version, k.group_id, k.get("member_id"))
    if kip932 and version in SHARE_GROUP_RECORDS:
        k = _parse(SHARE_GROUP_RECORDS[version][0], data, version)
        return ShareGroupKey(version, k.group_id, k.get("member_id"))
    return None


@overload
def decode_value(key: AnyKey, data: bytes) -> Container: ...
@overload
def decode_value(key: AnyKey, data: None) -> None: ...
@overload
def decode_value(key: AnyKey, data: bytes | None) -> Container | None: ...
def decode_value(key: AnyKey, data: bytes | None) -> Container | None:
    """The value for a decoded key, or None for a tombstone."""
    if data is None:
        return None
    if len(data) < 2:
        raise DecodeError("__consumer_offsets value shorter than its version")
    (version,) = _I16.unpack_from(data)
    message: Message
    if isinstance(key, OffsetKey):
        message = OffsetCommitValue
    elif isinstance(key, GroupKey):
        message = GroupMetadataValue
    elif isinstance(key, ShareGroupKey):
        message = SHARE_GROUP_RECORDS[key.type][1]
    else:
        message = CONSUMER_GROUP_RECORDS[key.type][1]
    if not 0 <= version <= message.versions.high:
        raise DecodeError(f"{message.name} version {version} is unknown")
    return _parse(message, data, version)
