"""OffsetFetch for one group, in every version the client speaks: shared by the consumer's
coordinator (its own partitions' committed offsets) and the AdminClient (a group's offsets,
every partition when `topics` is None).

v0-v7 answer one group at the top level; v8+ answer a list of groups (KIP-709), and this
reads the entry of the group asked for. A partition without a committed offset answers -1,
returned here as None.
"""

from __future__ import annotations

from typing import Any

from client.connection import BrokerConnection
from client.errors import for_code
from client.types import TopicPartition
from protocol.errors import ErrorCode
from protocol.messages import OFFSET_FETCH


async def offset_fetch(conn: BrokerConnection, group_id: str,
                       topics: list[dict[str, Any]] | None, *, require_stable: bool = False
                       ) -> dict[TopicPartition, int | None]:
    """The committed offsets of `topics` ([{"name", "partition_indexes"}], or None for all,
    which needs v2+) for the group, by the coordinator `conn`. A group-level or
    partition-level error is raised as its KafkaError (GROUP_ID_NOT_FOUND included).
    `require_stable` (v7+, KIP-447; a read_committed consumer's) makes the coordinator
    answer UNSTABLE_OFFSET_COMMIT (retriable) while a transaction holds offsets of a
    partition asked for, rather than the offset committed before it."""
    version = conn.version_for(OFFSET_FETCH)
    if topics is None and version < 2:
        raise for_code(ErrorCode.UNSUPPORTED_VERSION,
                       "listing every committed offset needs OffsetFetch v2+")
    resp = await conn.request(OFFSET_FETCH, {
        "group_id": group_id, "topics": topics,
        "groups": [{"group_id": group_id, "topics": topics}],
        "require_stable": require_stable}, version)
    body = resp.body
    if version >= 8:
        g = next((g for g in body.groups if g.group_id == group_id), None)
        if g is None:
            raise for_code(ErrorCode.UNKNOWN_SERVER_ERROR,
                           f"OffsetFetch did not answer for group '{group_id}'")
        code, result_topics = ErrorCode.of(g.error_code), g.topics
    else:
        code, result_topics = ErrorCode.of(body.get("error_code", 0)), body.topics
    if code is not ErrorCode.NONE:
        raise for_code(code, f"OffsetFetch for group '{group_id}'")
    out: dict[TopicPartition, int | None] = {}
    for t in result_topics:
        for p in t.partitions:
            pcode = ErrorCode.of(p.error_code)
            if pcode is not ErrorCode.NONE:
                raise for_code(pcode, f"OffsetFetch {t.name}-{p.partition_index} "
                                      f"for group '{group_id}'")
            out[TopicPartition(t.name, p.partition_index)] = (
                p.committed_offset if p.committed_offset >= 0 else None)
    return out
