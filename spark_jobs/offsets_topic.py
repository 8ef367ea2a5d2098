"""__consumer_offsets records as typed rows for the analysis, without Spark.

Owns the mapping from one __consumer_offsets record (key bytes, value bytes or None) to a
row of the `offset_commits` or `group_metadata` table (spark_jobs.tables declares their
schemas). The formats themselves are protocol/messages/offsets_topic.py's and
protocol/consumer_protocol.py's; this module only picks fields and names them as the tables
do. Kafka's "unset" values (-1 leader epoch, expire or state timestamp) become None.
"""

from __future__ import annotations

from typing import Any

from protocol.consumer_protocol import decode_assignment, decode_subscription, partition_names
from protocol.messages import offsets_topic

__all__ = ["OFFSET_COMMITS", "GROUP_METADATA", "decode_record", "partition_names"]

OFFSET_COMMITS = "offset_commits"
GROUP_METADATA = "group_metadata"


def _unset(value: int | None) -> int | None:
    return None if value is None or value < 0 else value


def _member(protocol_type: str | None, m) -> dict[str, Any]:
    topics: list[str] = []
    owned: list[str] = []
    assigned: list[str] = []
    if protocol_type == "consumer":
        # A member's bytes that do not decode leave its lists empty rather than losing the
        # whole group record: the rest of the record is still good.
        try:
            s = decode_subscription(m.subscription)
            topics, owned = list(s.topics), partition_names(s.owned_partitions)
        except Exception:  # noqa: BLE001
            pass
        try:
            assigned = partition_names(decode_assignment(m.assignment).partitions)
        except Exception:  # noqa: BLE001
            pass
    return {
        "member_id": m.member_id,
        "group_instance_id": m.get("group_instance_id"),
        "client_id": m.client_id,
        "client_host": m.client_host,
        "rebalance_timeout": m.get("rebalance_timeout", -1),
        "session_timeout": m.session_timeout,
        "subscription_topics": topics,
        "owned_partitions": owned,
        "assignment": assigned,
    }


def decode_record(key: bytes | None, value: bytes | None, *, record_timestamp: int | None = None,
                  log_offset: int | None = None, offsets_partition: int | None = None
                  ) -> tuple[str, dict[str, Any]] | None:
    """(table name, row) for one __consumer_offsets record; None for record types this
    reader does not know (KIP-848's, which Kafka's own decoder skips too).

    The keyword arguments are where the record sits (its batch timestamp, its offset and
    the __consumer_offsets partition) and go into the row as the tables' last columns.
    Raises protocol.errors.DecodeError (or ValueError) for bytes that do not decode.
    """
    if key is None:
        raise ValueError("a __consumer_offsets record without a key")
    k = offsets_topic.decode_key(key)
    if k is None:
        return None
    v = offsets_topic.decode_value(k, value)
    where = {"record_timestamp": record_timestamp, "log_offset": log_offset,
             "offsets_partition": offsets_partition}
    if isinstance(k, offsets_topic.OffsetKey):
        row = {"group": k.group, "topic": k.topic, "partition": k.partition,
               "committed_offset": None, "leader_epoch": None, "metadata": None,
               "commit_timestamp": None, "expire_timestamp": None,
               "is_tombstone": v is None}
        if v is not None:
            row.update(committed_offset=v.offset, leader_epoch=_unset(v.get("leader_epoch")),
                       metadata=v.metadata, commit_timestamp=v.commit_timestamp,
                       expire_timestamp=_unset(v.get("expire_timestamp")))
        row.update(where)
        return OFFSET_COMMITS, row
    row = {"group": k.group, "is_tombstone": v is None, "protocol_type": None,
           "generation": None, "protocol": None, "leader": None,
           "current_state_timestamp": None, "members": []}
    if v is not None:
        row.update(protocol_type=v.protocol_type, generation=v.generation, protocol=v.protocol,
                   leader=v.leader,
                   current_state_timestamp=_unset(v.get("current_state_timestamp")),
                   members=[_member(v.protocol_type, m) for m in v.members])
    row.update(where)
    return GROUP_METADATA, row
