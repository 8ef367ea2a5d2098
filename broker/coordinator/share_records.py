"""The share-group records of __consumer_offsets, between the state machine's form
(broker.coordinator.share_group: topics by name) and Kafka's bytes (protocol.messages.
offsets_topic, record types 9-15: topics by id).

Owns `encode` and `decode`. Topic names and ids are mapped through functions the caller
passes (the broker's metadata image); a record naming a topic since deleted decodes without
it. ShareGroupPartitionMetadata (type 9) is neither written nor needed, as in Kafka 4.1 (the
subscribed topics' sizes come from the metadata image): it decodes to None here.
ShareGroupStatePartitionMetadata (type 15) is `ShareStatePartitions`: its InitializedTopics
(no topic is ever in DeletingTopics: state is deleted before the record drops a topic).
"""

from __future__ import annotations

from typing import Any

from broker.coordinator import share_group as sg
from broker.coordinator.offsets import OffsetRecord
from broker.coordinator.server_assigned import IdOf, NameOf, pairs_by_id, pairs_by_name
from protocol.messages import offsets_topic as ot
from protocol.messages.offsets_topic import ShareGroupKey

_TYPES: dict[str, int] = {
    "ShareGroupEpoch": ot.SHARE_GROUP_METADATA,
    "ShareMemberMetadata": ot.SHARE_GROUP_MEMBER_METADATA,
    "ShareTargetEpoch": ot.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    "ShareTargetMember": ot.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    "ShareCurrentAssignment": ot.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    "ShareStatePartitions": ot.SHARE_GROUP_STATE_PARTITION_METADATA,
}
_KINDS = {v: k for k, v in _TYPES.items()}


def encode(record: sg.ShareRecord, id_of: IdOf) -> OffsetRecord:
    if isinstance(record, sg.ShareTombstone):
        key = ShareGroupKey(_TYPES[record.kind], record.group_id, record.member_id)
        return OffsetRecord(ot.encode_share_group_key(key), None)
    record_type = _TYPES[type(record).__name__]
    member_id = getattr(record, "member_id", None)
    key_bytes = ot.encode_share_group_key(ShareGroupKey(record_type, record.group_id, member_id))
    value: dict[str, Any]
    match record:
        case sg.ShareGroupEpoch(epoch=epoch):
            value = {"epoch": epoch}
        case sg.ShareTargetEpoch(epoch=epoch):
            value = {"assignment_epoch": epoch}
        case sg.ShareTargetMember(partitions=parts):
            value = {"topic_partitions": pairs_by_id(parts, id_of)}
        case sg.ShareCurrentAssignment() as r:
            value = {"member_epoch": r.member_epoch,
                     "previous_member_epoch": r.previous_member_epoch,
                     "state": sg.STABLE_MEMBER_STATE,
                     "assigned_partitions": pairs_by_id(r.assigned, id_of)}
        case sg.ShareStatePartitions(partitions=parts):
            value = {"initialized_topics": pairs_by_id(parts, id_of, with_names=True), "deleting_topics": []}
        case sg.ShareMemberMetadata() as m:
            value = {"rack_id": m.rack_id, "client_id": m.client_id,
                     "client_host": m.client_host,
                     "subscribed_topic_names": list(m.subscribed_topic_names)}
        case _:
            raise TypeError(f"not a share group record: {record!r}")
    return OffsetRecord(key_bytes, ot.encode_share_group_value(record_type, value))


def decode(key: ShareGroupKey, value: Any, name_of: NameOf) -> sg.ShareRecord | None:
    """The record a key and decoded value (None: a tombstone) stand for; None for a type
    membership keeps nothing of (type 9)."""
    kind = _KINDS.get(key.type)
    if kind is None:
        return None
    if value is None:
        return sg.ShareTombstone(kind, key.group, key.member_id)
    g, m = key.group, key.member_id or ""
    if kind == "ShareGroupEpoch":
        return sg.ShareGroupEpoch(g, value.epoch)
    if kind == "ShareTargetEpoch":
        return sg.ShareTargetEpoch(g, value.assignment_epoch)
    if kind == "ShareTargetMember":
        return sg.ShareTargetMember(g, m, pairs_by_name(value.topic_partitions, name_of))
    if kind == "ShareStatePartitions":
        return sg.ShareStatePartitions(g, pairs_by_name(value.initialized_topics, name_of))
    if kind == "ShareCurrentAssignment":
        return sg.ShareCurrentAssignment(g, m, value.member_epoch, value.previous_member_epoch,
                                         pairs_by_name(value.assigned_partitions, name_of))
    return sg.ShareMemberMetadata(g, m, value.rack_id, value.client_id, value.client_host,
                                  tuple(value.subscribed_topic_names or ()))
