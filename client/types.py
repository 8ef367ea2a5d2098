"""Small domain types shared across the client.

Owns: `Node` (a broker as cluster metadata names it), `OffsetAndTimestamp` (an answer of
Consumer.offsets_for_times) and `ConsumerGroupMetadata` (Consumer.group_metadata(), Java's
class of that name). `TopicPartition` is defined once, with
the assignors (client.consumer.assignors.base), and re-exported here so that the rest of the
client and its users import it from one place.
"""

from __future__ import annotations

from typing import NamedTuple

from client.consumer.assignors.base import TopicPartition

__all__ = ["ConsumerGroupMetadata", "Node", "OffsetAndTimestamp", "TopicPartition"]


class Node(NamedTuple):
    """A broker: node id, the address clients connect to, and its rack (None if unset)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)


class OffsetAndTimestamp(NamedTuple):
    """The first record at or after a time: its offset and its timestamp (ms)."""

    offset: int
    timestamp: int


class ConsumerGroupMetadata(NamedTuple):
    """Who a consumer is in its group, as Java's ConsumerGroupMetadata: generation_id is
    -1 and member_id "" while it is not a member (assign mode, before the first join,
    between generations)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
