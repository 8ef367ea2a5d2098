"""Raft requests between voters over their controller listeners.

Owns: `PeerTransport` — one PeerChannel per other voter, the wire codec around each
request, and the refusal of a quorum that was started with other voters: a request
answered INCONSISTENT_CLUSTER_ID is followed by a DescribeQuorum of that voter, whose
voters are then named beside ours in the `QuorumMismatch` raised.

In a dynamic quorum (KIP-853) the voters change: a voter's address is looked up when a
request goes to it, first in the voter set the log holds (`resolve`), then among the
addresses DescribeQuorum answers named, then controller.quorum.voters; a channel is opened
anew when the address it was opened for changed. An observer finds the leader by asking the
bootstrap servers (`discovery_targets`).
"""

from __future__ import annotations

from typing import Any, Callable

import trio

from broker.controller import raft_codec
from broker.controller.runtime import QuorumMismatch
from broker.listeners import format_voters
from broker.net.peer import Opener, PeerChannel
from protocol.errors import ErrorCode
from protocol.messages import ALL_APIS, DESCRIBE_QUORUM

DESCRIBE_QUORUM_VERSION = 2


class PeerTransport:
    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], cluster_id: str,
                 nursery: trio.Nursery, request_timeout_s: float,
                 opener: Opener | None = None, *,
                 bootstrap: tuple[tuple[str, int], ...] = (),
                 resolve: Callable[[int], tuple[str, int] | None] | None = None):
        self.node_id = node_id
        self.voters = voters
        self.cluster_id = cluster_id
        self.request_timeout_s = request_timeout_s
        self.bootstrap = bootstrap
        self._resolve = resolve
        self._nursery = nursery
        self._opener = opener  # TLS and SASL login when the controller listener asks for them
        self.learned: dict[int, tuple[str, int]] = {}  # from DescribeQuorum answers
        self.peers: dict[int, PeerChannel] = {}
        # Requests to the controller get their own connections: a listener answers each
        # connection's requests in order, and a heartbeat waiting for its records to commit
        # must never queue the Fetch that commits them behind itself.
        self.controller_peers: dict[int, PeerChannel] = {}
        self._bootstrap_peers: dict[tuple[str, int], PeerChannel] = {}
        for i in voters:
            if i != node_id:
                self.peer(i)
                self.controller_peer(i)

    def address(self, node_id: int) -> tuple[str, int] | None:
        found = self._resolve(node_id) if self._resolve is not None else None
        return found or self.learned.get(node_id) or self.voters.get(node_id)

    def _channel(self, table: dict[int, PeerChannel], node_id: int, kind: str) -> PeerChannel:
        address = self.address(node_id)
        channel = table.get(node_id)
        if address is None:
            if channel is not None:
                return channel
            raise KeyError(f"no address known for node {node_id}")
        if channel is None or (channel.host, channel.port) != address:
            channel = table[node_id] = self._open(address, kind)
        return channel

    def _open(self, address: tuple[str, int], kind: str) -> PeerChannel:
        return PeerChannel(address[0], address[1], self._nursery, apis=ALL_APIS,
                           opener=self._opener, client_id=f"minibroker-{kind}-{self.node_id}")

    def peer(self, node_id: int) -> PeerChannel:
        return self._channel(self.peers, node_id, "raft")

    def controller_peer(self, node_id: int) -> PeerChannel:
        return self._channel(self.controller_peers, node_id, "broker")

    def discovery_targets(self, voters: tuple[int, ...]) -> list[Any]:
        """Whom an observer asks who leads: the voters it knows, then the bootstrap servers."""
        return [v for v in voters if v != self.node_id] + list(self.bootstrap)

    async def send(self, destination: int, message: Any) -> Any:
        key, version, body = raft_codec.to_wire(message, self.cluster_id)
        # a Fetch may be held by the leader up to its max wait before it is answered
        timeout = self.request_timeout_s + getattr(message, "max_wait_ms", 0) / 1000
        response = await self.peer(destination).request(key, version, body, timeout)
        try:
            return raft_codec.response_from_wire(key, response)
        except raft_codec.QuorumWireError as e:
            if e.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID:
                raise QuorumMismatch(await self._mismatch(destination)) from e
            raise

    async def describe_leader(self, voter: Any) -> tuple[int, int]:
        """(leader id, epoch) as `voter` (a node id, or a bootstrap server's (host, port))
        knows them (-1 leader while it knows none); the voters' addresses it names are kept."""
        body = await self._describe_quorum(voter)
        for n in body.get("nodes") or []:
            if n.listeners and n.node_id != self.node_id:
                self.learned[n.node_id] = (n.listeners[0].host, n.listeners[0].port)
        partition = body.topics[0].partitions[0]
        return partition.leader_id, partition.leader_epoch

    async def _describe_quorum(self, voter: Any) -> Any:
        if isinstance(voter, tuple):
            channel = self._bootstrap_peers.get(voter)
            if channel is None:
                channel = self._bootstrap_peers[voter] = self._open(voter, "observer")
        else:
            channel = self.peer(voter)
        return await channel.request(
            DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION,
            {"topics": [{"topic_name": raft_codec.METADATA_TOPIC,
                         "partitions": [{"partition_index": 0}]}]},
            self.request_timeout_s)

    async def _mismatch(self, destination: int) -> str:
        host, port = self.voters[destination]
        ours = format_voters(self.voters)
        try:
            body = await self._describe_quorum(destination)
            theirs = format_voters({n.node_id: (n.listeners[0].host, n.listeners[0].port)
                                    for n in body.get("nodes") or [] if n.listeners})
        except Exception:  # noqa: BLE001  it refused us already; say what we know
            theirs = "(unknown: it did not answer DescribeQuorum)"
        return (f"voter {destination} at {host}:{port} was started with "
                f"controller.quorum.voters={theirs}, this node with {ours}")
