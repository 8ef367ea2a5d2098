"""KIP-853's AddRaftVoter (80), RemoveRaftVoter (81) and UpdateRaftVoter (82) on a node's
quorum: request bodies to the Raft node's messages and its answers back to bodies.

Owns: `VOTER_APIS`, `voter_request` (a decoded body -> `raft.AddRaftVoterRequest` etc.),
`voter_response_body` and `handle_voter_change`, which hands the request to the Raft node
(the leader appends the new VotersRecord and answers once it commits) through the runtime.
A node that does not lead answers NOT_CONTROLLER, so that a broker forwarding the request
(as Kafka's brokers forward AddRaftVoter and RemoveRaftVoter to the active controller)
looks for the leader and sends it again.
"""

from __future__ import annotations

import uuid
from typing import Any

from broker.controller import raft
from broker.controller.voter_set import Endpoint, Voter
from protocol.errors import ErrorCode

ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, UPDATE_RAFT_VOTER = 80, 81, 82
VOTER_APIS = frozenset({ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, UPDATE_RAFT_VOTER})
ADMIN_SOURCE = -2  # the "sender" of a voter change handed to the Raft node: no replica
DEFAULT_TIMEOUT_MS = 30_000


def _endpoints(listeners: Any) -> tuple[Endpoint, ...]:
    return tuple(Endpoint(e.name, e.host, e.port) for e in listeners or [])


def voter_request(api_key: int, body: Any) -> Any:
    directory = body.voter_directory_id or uuid.UUID(int=0)
    if api_key == ADD_RAFT_VOTER:
        timeout = body.timeout_ms if body.timeout_ms > 0 else DEFAULT_TIMEOUT_MS
        return raft.AddRaftVoterRequest(
            Voter(body.voter_id, directory, _endpoints(body.listeners)), timeout)
    if api_key == REMOVE_RAFT_VOTER:
        return raft.RemoveRaftVoterRequest(body.voter_id, directory)
    if api_key == UPDATE_RAFT_VOTER:
        feature = body.k_raft_version_feature
        return raft.UpdateRaftVoterRequest(
            body.current_leader_epoch,
            Voter(body.voter_id, directory, _endpoints(body.listeners),
                  feature.min_supported_version, feature.max_supported_version))
    raise ValueError(f"api {api_key} is not a voter change")


def voter_response_body(api_key: int, response: Any) -> dict:
    if api_key == UPDATE_RAFT_VOTER:
        leader = response.current_leader
        return {"throttle_time_ms": 0, "error_code": response.error_code,
                "current_leader": {"leader_id": leader.leader_id,
                                   "leader_epoch": leader.leader_epoch,
                                   "host": "", "port": -1}}
    return {"throttle_time_ms": 0, "error_code": response.error_code,
            "error_message": response.error_message}


def error_body(api_key: int, code: ErrorCode, message: str | None = None) -> dict:
    if api_key == UPDATE_RAFT_VOTER:
        return {"throttle_time_ms": 0, "error_code": code}
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message}


async def handle_voter_change(runtime: Any, api_key: int, body: Any) -> dict:
    """The Raft leader's answer to a voter change (a QuorumRuntime's node)."""
    if not runtime.node.is_leader:
        return error_body(api_key, ErrorCode.NOT_CONTROLLER,
                          f"node {runtime.node.node_id} is not the quorum's leader")
    message = voter_request(api_key, body)
    timeout_s = getattr(message, "timeout_ms", runtime.node.config.request_timeout_ms) / 1000
    response = await runtime.handle_raft_request(ADMIN_SOURCE, message, timeout_s + 1)
    if response is None:
        return error_body(api_key, ErrorCode.REQUEST_TIMED_OUT, "no answer from the quorum")
    if response.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return error_body(api_key, ErrorCode.NOT_CONTROLLER, response.error_message
                          if hasattr(response, "error_message") else None)
    return voter_response_body(api_key, response)
