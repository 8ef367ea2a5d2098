"""The consumer-group records of __consumer_offsets, between the state machine's form
(broker.coordinator.consumer_group: topics by name) and Kafka's bytes (protocol.messages.
offsets_topic, record types 3-8: topics by id).

Owns `encode` and `decode`. Topic names and ids are mapped through functions the caller
passes (the broker's metadata image): a record written for a topic that has since been
deleted decodes without it, as Kafka's coordinator drops assignments of unknown topic ids.
ConsumerGroupPartitionMetadata (type 4, unused since Kafka 4.0) is neither written nor
needed: the subscribed topics' sizes are read from the metadata image instead.
"""

from __future__ import annotations

from typing import Any

from broker.coordinator import consumer_group as cg
from broker.coordinator.offsets import OffsetRecord
from broker.coordinator.server_assigned import IdOf, NameOf, pairs_by_id, pairs_by_name
from protocol.messages import offsets_topic as ot
from protocol.messages.offsets_topic import ConsumerGroupKey

_TYPES: dict[str, int] = {
    "GroupEpoch": ot.CONSUMER_GROUP_METADATA,
    "MemberMetadata": ot.CONSUMER_GROUP_MEMBER_METADATA,
    "TargetEpoch": ot.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    "TargetMember": ot.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    "CurrentAssignment": ot.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
}
_KINDS = {v: k for k, v in _TYPES.items()}


def encode(record: cg.Record, id_of: IdOf) -> OffsetRecord:
    if isinstance(record, cg.Tombstone):
        key = ConsumerGroupKey(_TYPES[record.kind], record.group_id, record.member_id)
        return OffsetRecord(ot.encode_consumer_group_key(key), None)
    match record:
        case cg.GroupEpoch(group_id=g, epoch=epoch):
            return OffsetRecord(ot.encode_consumer_group_metadata_key(g),
                                ot.encode_consumer_group_metadata_value(epoch))
        case cg.TargetEpoch(group_id=g, epoch=epoch):
            return OffsetRecord(ot.encode_consumer_group_target_assignment_metadata_key(g),
                                ot.encode_consumer_group_target_assignment_metadata_value(epoch))
        case cg.TargetMember(group_id=g, member_id=m, partitions=parts):
            return OffsetRecord(
                ot.encode_consumer_group_target_assignment_member_key(g, m),
                ot.encode_consumer_group_target_assignment_member_value(
                    {"topic_partitions": pairs_by_id(parts, id_of)}))
        case cg.CurrentAssignment() as r:
            return OffsetRecord(
                ot.encode_consumer_group_current_member_assignment_key(r.group_id, r.member_id),
                ot.encode_consumer_group_current_member_assignment_value({
                    "member_epoch": r.member_epoch,
                    "previous_member_epoch": r.previous_member_epoch,
                    "state": r.state,
                    "assigned_partitions": pairs_by_id(r.assigned, id_of),
                    "partitions_pending_revocation": pairs_by_id(r.pending_revocation, id_of)}))
        case cg.MemberMetadata() as m:
            return OffsetRecord(
                ot.encode_consumer_group_member_metadata_key(m.group_id, m.member_id),
                ot.encode_consumer_group_member_metadata_value({
                    "instance_id": m.instance_id, "rack_id": m.rack_id,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "server_assignor": m.server_assignor,
                    "classic_member_metadata": None}))
    raise TypeError(f"not a consumer group record: {record!r}")


def decode(key: ConsumerGroupKey, value: Any, name_of: NameOf) -> cg.Record | None:
    """The record a key and decoded value (None: a tombstone) stand for; None for a type
    the state machine keeps nothing of (partition metadata)."""
    kind = _KINDS.get(key.type)
    if kind is None:
        return None
    if value is None:
        return cg.Tombstone(kind, key.group, key.member_id)
    g, m = key.group, key.member_id or ""
    if kind == "GroupEpoch":
        return cg.GroupEpoch(g, value.epoch)
    if kind == "TargetEpoch":
        return cg.TargetEpoch(g, value.assignment_epoch)
    if kind == "TargetMember":
        return cg.TargetMember(g, m, pairs_by_name(value.topic_partitions, name_of))
    if kind == "CurrentAssignment":
        return cg.CurrentAssignment(g, m, value.member_epoch, value.previous_member_epoch,
                                    value.state, pairs_by_name(value.assigned_partitions, name_of),
                                    pairs_by_name(value.partitions_pending_revocation, name_of))
    return cg.MemberMetadata(g, m, value.instance_id, value.rack_id, value.client_id,
                             value.client_host, tuple(value.subscribed_topic_names or ()),
                             value.subscribed_topic_regex, value.server_assignor,
                             value.rebalance_timeout_ms)
