"""The share coordinator's records and requests as bytes and bodies.

Owns: turning a `ShareGroupOffset` into a __share_group_state record (key and value, by
protocol.messages.share_state) and back, and the persister's request bodies and answers
for a share-partition leader whose coordinator is another broker.
"""

from __future__ import annotations

from typing import Any

from broker.share_coordinator.state import (
    SharePartitionKey, ShareGroupOffset, StateBatch, batch_fields)
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.messages import share_state as records

Record = tuple[bytes, bytes | None]


def encode(key: SharePartitionKey, value: ShareGroupOffset | None, snapshot: bool) -> Record:
    record_type = records.SHARE_SNAPSHOT if snapshot else records.SHARE_UPDATE
    key_bytes = records.encode_key(record_type, {
        "group_id": key.group_id, "topic_id": key.topic_id, "partition": key.partition})
    if value is None:
        return key_bytes, None
    fields: dict[str, Any] = {
        "snapshot_epoch": value.snapshot_epoch, "leader_epoch": value.leader_epoch,
        "start_offset": value.start_offset,
        "state_batches": [batch_fields(b) for b in value.state_batches]}
    if snapshot:
        fields["state_epoch"] = value.state_epoch
    return key_bytes, records.encode_value(record_type, fields)


def decode(key: bytes, value: bytes | None
           ) -> tuple[SharePartitionKey, ShareGroupOffset | None, bool] | None:
    """(key, state or None for a tombstone, whether it is a snapshot); None for a record
    type this version does not know."""
    decoded = records.decode(key, value)
    if decoded is None:
        return None
    record_type, k, v = decoded
    spk = SharePartitionKey(k.group_id, k.topic_id, k.partition)
    snapshot = record_type == records.SHARE_SNAPSHOT
    if v is None:
        return spk, None, snapshot
    batches = tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                               b.delivery_count) for b in v.state_batches)
    return spk, ShareGroupOffset(v.snapshot_epoch, v.get("state_epoch", 0) if snapshot else 0,
                                 v.leader_epoch, v.start_offset, batches), snapshot


def request_fields(api_key: int, key: SharePartitionKey, *args: Any) -> dict:
    """The body of a persister request for one share partition; `args` are those the
    share coordinator's operation takes after the key."""
    partition: dict[str, Any] = {"partition": key.partition}
    if api_key == m.INITIALIZE_SHARE_GROUP_STATE:
        partition.update(state_epoch=args[0], start_offset=args[1])
    elif api_key in (m.READ_SHARE_GROUP_STATE, m.READ_SHARE_GROUP_STATE_SUMMARY):
        partition.update(leader_epoch=args[0])
    elif api_key == m.WRITE_SHARE_GROUP_STATE:
        partition.update(state_epoch=args[0], leader_epoch=args[1], start_offset=args[2],
                         state_batches=args[3])
    return {"group_id": key.group_id,
            "topics": [{"topic_id": key.topic_id, "partitions": [partition]}]}


def response_result(api_key: int, response: Any) -> dict:
    """The one partition's answer of a persister request, as the coordinator's own."""
    try:
        p = response["results"][0]["partitions"][0]
    except (IndexError, KeyError):
        return {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR}
    out: dict[str, Any] = {"error_code": ErrorCode(p["error_code"])}
    if api_key == m.READ_SHARE_GROUP_STATE:
        out.update(state_epoch=p["state_epoch"], start_offset=p["start_offset"],
                   state_batches=[dict(first_offset=b.first_offset, last_offset=b.last_offset,
                                       delivery_state=b.delivery_state,
                                       delivery_count=b.delivery_count)
                                  for b in p["state_batches"]])
    elif api_key == m.READ_SHARE_GROUP_STATE_SUMMARY:
        out.update(state_epoch=p["state_epoch"], start_offset=p["start_offset"])
    return out
