"""Small domain types shared across the client.

Owns: `Node` (a broker as cluster metadata names it). `TopicPartition` is defined once, with
the assignors (client.consumer.assignors.base), and re-exported here so that the rest of the
client and its users import it from one place.
"""

from __future__ import annotations

from typing import NamedTuple

from client.consumer.assignors.base import TopicPartition

__all__ = ["Node", "TopicPartition"]


class Node(NamedTuple):
    """A broker: node id, the address clients connect to, and its rack (None if unset)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)
