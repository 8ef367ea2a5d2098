"""Raft requests between voters over their controller listeners.

Owns: `PeerTransport` — one PeerChannel per other voter, the wire codec around each
request, and the refusal of a quorum that was started with other voters: a request
answered INCONSISTENT_CLUSTER_ID is followed by a DescribeQuorum of that voter, whose
voters are then named beside ours in the `QuorumMismatch` raised.
"""

from __future__ import annotations

from typing import Any

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
                 opener: Opener | None = None):
        self.node_id = node_id
        self.voters = voters
        self.cluster_id = cluster_id
        self.request_timeout_s = request_timeout_s
        # `opener`: TLS and SASL login when the controller listener asks for them
        self.peers = {i: PeerChannel(host, port, nursery, apis=ALL_APIS, opener=opener,
                                     client_id=f"minibroker-raft-{node_id}")
                      for i, (host, port) in voters.items() if i != node_id}
        # Requests to the controller get their own connections: a listener answers each
        # connection's requests in order, and a heartbeat waiting for its records to commit
        # must never queue the Fetch that commits them behind itself.
        self.controller_peers = {
            i: PeerChannel(host, port, nursery, apis=ALL_APIS, opener=opener,
                           client_id=f"minibroker-broker-{node_id}")
            for i, (host, port) in voters.items() if i != node_id}

    def controller_peer(self, node_id: int) -> PeerChannel:
        return self.controller_peers[node_id]

    async def send(self, destination: int, message: Any) -> Any:
        key, version, body = raft_codec.to_wire(message, self.cluster_id)
        # a Fetch may be held by the leader up to its max wait before it is answered
        timeout = self.request_timeout_s + getattr(message, "max_wait_ms", 0) / 1000
        response = await self.peers[destination].request(key, version, body, timeout)
        try:
            return raft_codec.response_from_wire(key, response)
        except raft_codec.QuorumWireError as e:
            if e.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID:
                raise QuorumMismatch(await self._mismatch(destination)) from e
            raise

    async def describe_leader(self, voter: int) -> tuple[int, int]:
        """(leader id, epoch) as `voter` knows them (-1 leader while it knows none)."""
        body = await self._describe_quorum(voter)
        partition = body.topics[0].partitions[0]
        return partition.leader_id, partition.leader_epoch

    async def _describe_quorum(self, voter: int) -> Any:
        return await self.peers[voter].request(
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
