"""The quorum's messages on the wire: `broker.controller.raft`'s dataclasses to and from the
bodies of Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot.

Owns: `to_wire` (a request or response -> api key, version, body to encode),
`request_from_wire` / `response_from_wire` (a decoded body -> the dataclass, or
`QuorumWireError`), `error_response` (the body answering a request that could not be
taken, such as one from another cluster), `describe_quorum_response` (the DescribeQuorum
answer from a node's state), and the names of the one metadata partition.

Every message names `__cluster_metadata`-0; Fetch from v13 names it by Kafka's fixed topic
id instead (Uuid.METADATA_TOPIC_ID). A Fetch response's records are the entries as
RecordBatches (`raft_batches`). The bodies built here carry the fields of every version,
the topic's name and id, the replica id in both of its places, so a runtime may encode
them at any version the peer speaks; `VERSIONS` is what we speak ourselves.

Requests carry the sender's cluster id. A receiver refuses one naming another cluster with
INCONSISTENT_CLUSTER_ID, as KafkaRaftClient does; a request without one (null) is taken.
A response with a top-level error carries no partition to act on: `response_from_wire`
raises it, and the runtime treats the request as failed (the node retries at its deadline).
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping

from broker.controller import raft
from broker.controller.quorum_state import NO_ID
from broker.controller.raft_batches import batches_to_entries, entries_to_batches
from broker.controller.raft_log import SnapshotId
from protocol.errors import ErrorCode
from protocol.messages import BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH, FETCH_SNAPSHOT, VOTE
from protocol.primitives import ZERO_UUID

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID

# The version we send of each: v1 carries the voter ids raft.py's messages hold (KIP-853's
# directory ids and endpoints travel as zeros and empty lists); Fetch v17 is what a 3.9
# quorum speaks, topic id and ReplicaState included. Vote v2 carries KIP-996's PreVote. We
# send it to every voter without asking ApiVersions first: a quorum's voters are all
# minibroker nodes of one build (peers never negotiate versions, see broker.net.peer). Were
# a voter ever older, a pre-vote sent at v1 would lose its flag and be taken for a vote,
# so a mixed quorum would need an ApiVersions handshake first, as Kafka's NetworkChannel has.
VERSIONS: dict[int, int] = {VOTE: 2, BEGIN_QUORUM_EPOCH: 1, END_QUORUM_EPOCH: 1, FETCH: 17,
                            FETCH_SNAPSHOT: 1}

# KafkaRaftClient's MAX_FETCH_SIZE_BYTES: the leader caps its answer by its own config
FETCH_MAX_BYTES = 8 * 1024 * 1024

E = ErrorCode


class QuorumWireError(Exception):
    """A body that cannot become a quorum message: another cluster's request, a partition
    other than the metadata partition, or a response's top-level error."""

    def __init__(self, error_code: ErrorCode, message: str):
        super().__init__(f"{error_code.name}: {message}")
        self.error_code = error_code


# -- to the wire ------------------------------------------------------------------------------

def _topic(partition: dict, name_key: str = "topic_name") -> list[dict]:
    return [{name_key: METADATA_TOPIC, "partitions": [partition]}]


def _leader(leader: raft.LeaderIdAndEpoch) -> dict:
    return {"leader_id": leader.leader_id, "leader_epoch": leader.leader_epoch}


def _snapshot_id(sid: SnapshotId | None) -> dict:
    if sid is None:
        return {"end_offset": -1, "epoch": -1}
    return {"end_offset": sid.end_offset, "epoch": sid.epoch}


def _vote_request(m: raft.VoteRequest, cluster_id: str | None) -> dict:
    return {"cluster_id": cluster_id, "voter_id": m.voter_id, "topics": _topic({
        "partition_index": METADATA_PARTITION, "candidate_epoch": m.candidate_epoch,
        "candidate_id": m.candidate_id, "candidate_directory_id": ZERO_UUID,
        "voter_directory_id": ZERO_UUID, "last_offset_epoch": m.last_offset_epoch,
        "last_offset": m.last_offset, "pre_vote": m.pre_vote})}


def _vote_response(m: raft.VoteResponse) -> dict:
    return {"error_code": E.NONE, "topics": _topic({
        "partition_index": METADATA_PARTITION, "error_code": m.error_code,
        "leader_id": m.leader_id, "leader_epoch": m.leader_epoch,
        "vote_granted": m.vote_granted}), "node_endpoints": []}


def _begin_request(m: raft.BeginQuorumEpochRequest, cluster_id: str | None) -> dict:
    return {"cluster_id": cluster_id, "voter_id": m.voter_id, "topics": _topic({
        "partition_index": METADATA_PARTITION, "voter_directory_id": ZERO_UUID,
        "leader_id": m.leader_id, "leader_epoch": m.leader_epoch}), "leader_endpoints": []}


def _epoch_response(m: raft.BeginQuorumEpochResponse | raft.EndQuorumEpochResponse) -> dict:
    return {"error_code": E.NONE, "topics": _topic({
        "partition_index": METADATA_PARTITION, "error_code": m.error_code,
        "leader_id": m.leader_id, "leader_epoch": m.leader_epoch}), "node_endpoints": []}


def _end_request(m: raft.EndQuorumEpochRequest, cluster_id: str | None) -> dict:
    return {"cluster_id": cluster_id, "topics": _topic({
        "partition_index": METADATA_PARTITION, "leader_id": m.leader_id,
        "leader_epoch": m.leader_epoch,
        "preferred_successors": list(m.preferred_successors),  # v0
        "preferred_candidates": [{"candidate_id": s, "candidate_directory_id": ZERO_UUID}
                                 for s in m.preferred_successors]}),  # v1
        "leader_endpoints": []}


def _fetch_request(m: raft.FetchRequest, cluster_id: str | None) -> dict:
    return {
        "cluster_id": cluster_id,
        "replica_id": m.replica_id,  # to v14
        "replica_state": {"replica_id": m.replica_id, "replica_epoch": -1},  # from v15
        "max_wait_ms": m.max_wait_ms, "min_bytes": 0, "max_bytes": FETCH_MAX_BYTES,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [{
            "partition": METADATA_PARTITION, "current_leader_epoch": m.current_leader_epoch,
            "fetch_offset": m.fetch_offset, "last_fetched_epoch": m.last_fetched_epoch,
            "log_start_offset": m.log_start_offset, "partition_max_bytes": FETCH_MAX_BYTES}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }


def _fetch_response(m: raft.FetchResponse) -> dict:
    partition: dict[str, Any] = {
        "partition_index": METADATA_PARTITION, "error_code": m.error_code,
        "high_watermark": m.high_watermark, "last_stable_offset": -1,
        "log_start_offset": m.log_start_offset, "current_leader": _leader(m.current_leader),
        "aborted_transactions": None, "preferred_read_replica": -1,
        "records": entries_to_batches(m.records),
    }
    # both travel as tagged fields, absent unless set
    if m.diverging_epoch is not None:
        partition["diverging_epoch"] = {"epoch": m.diverging_epoch.epoch,
                                        "end_offset": m.diverging_epoch.end_offset}
    if m.snapshot_id is not None:
        partition["snapshot_id"] = _snapshot_id(m.snapshot_id)
    return {"throttle_time_ms": 0, "error_code": E.NONE, "session_id": 0,
            "responses": [{"topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID,
                           "partitions": [partition]}], "node_endpoints": []}


def _fetch_snapshot_request(m: raft.FetchSnapshotRequest, cluster_id: str | None) -> dict:
    return {"cluster_id": cluster_id, "replica_id": m.replica_id, "max_bytes": m.max_bytes,
            "topics": _topic({
                "partition": METADATA_PARTITION, "current_leader_epoch": m.current_leader_epoch,
                "snapshot_id": _snapshot_id(m.snapshot_id), "position": m.position,
                "replica_directory_id": ZERO_UUID}, "name")}


def _fetch_snapshot_response(m: raft.FetchSnapshotResponse) -> dict:
    return {"throttle_time_ms": 0, "error_code": E.NONE, "topics": _topic({
        "index": METADATA_PARTITION, "error_code": m.error_code,
        "snapshot_id": _snapshot_id(m.snapshot_id), "current_leader": _leader(m.current_leader),
        "size": m.size, "position": m.position, "unaligned_records": m.unaligned_records},
        "name"), "node_endpoints": []}


_REQUESTS: dict[type, tuple[int, Any]] = {
    raft.VoteRequest: (VOTE, _vote_request),
    raft.BeginQuorumEpochRequest: (BEGIN_QUORUM_EPOCH, _begin_request),
    raft.EndQuorumEpochRequest: (END_QUORUM_EPOCH, _end_request),
    raft.FetchRequest: (FETCH, _fetch_request),
    raft.FetchSnapshotRequest: (FETCH_SNAPSHOT, _fetch_snapshot_request),
}

_RESPONSES: dict[type, tuple[int, Any]] = {
    raft.VoteResponse: (VOTE, _vote_response),
    raft.BeginQuorumEpochResponse: (BEGIN_QUORUM_EPOCH, _epoch_response),
    raft.EndQuorumEpochResponse: (END_QUORUM_EPOCH, _epoch_response),
    raft.FetchResponse: (FETCH, _fetch_response),
    raft.FetchSnapshotResponse: (FETCH_SNAPSHOT, _fetch_snapshot_response),
}


def to_wire(message: Any, cluster_id: str | None = None) -> tuple[int, int, dict]:
    """(api key, the version we speak, body) of a raft request or response; `cluster_id`
    fills a request's cluster id (responses carry none)."""
    kind = type(message)
    if kind in _REQUESTS:
        api_key, build = _REQUESTS[kind]
        return api_key, VERSIONS[api_key], build(message, cluster_id)
    if kind in _RESPONSES:
        api_key, build = _RESPONSES[kind]
        return api_key, VERSIONS[api_key], build(message)
    raise TypeError(f"not a quorum message: {kind.__name__}")


def error_response(api_key: int, error_code: ErrorCode) -> dict:
    """The body answering a request refused as a whole (QuorumWireError): a top-level error
    and no partitions."""
    if api_key == FETCH:
        return {"throttle_time_ms": 0, "error_code": error_code, "session_id": 0,
                "responses": []}
    if api_key == FETCH_SNAPSHOT:
        return {"throttle_time_ms": 0, "error_code": error_code, "topics": []}
    if api_key in (VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH):
        return {"error_code": error_code, "topics": []}
    raise ValueError(f"api key {api_key} is not a quorum message")


# -- from the wire ----------------------------------------------------------------------------

def _check_cluster(body: Mapping, cluster_id: str | None) -> None:
    theirs = body.get("cluster_id")
    if cluster_id is not None and theirs is not None and theirs != cluster_id:
        raise QuorumWireError(E.INCONSISTENT_CLUSTER_ID,
                              f"request for cluster {theirs!r}, this is {cluster_id!r}")


def _only_partition(topics: Any, name_key: str, index_key: str, *, by_id: bool = False) -> Any:
    """The one metadata partition of a request or response; QuorumWireError otherwise."""
    if not topics or len(topics) != 1 or len(topics[0].partitions) != 1:
        raise QuorumWireError(E.INVALID_REQUEST, "expected exactly the metadata partition")
    topic = topics[0]
    named = (topic.get("topic_id") == METADATA_TOPIC_ID if by_id and "topic_id" in topic
             else topic.get(name_key) == METADATA_TOPIC)
    partition = topic.partitions[0]
    if not named or partition[index_key] != METADATA_PARTITION:
        raise QuorumWireError(E.UNKNOWN_TOPIC_OR_PARTITION,
                              f"not {METADATA_TOPIC}-{METADATA_PARTITION}")
    return partition


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return E.UNKNOWN_SERVER_ERROR  # a code newer than ours: an error all the same


def _sid(value: Any) -> SnapshotId | None:
    if value is None or value.end_offset < 0 or value.epoch < 0:
        return None
    return SnapshotId(value.end_offset, value.epoch)


def request_from_wire(api_key: int, body: Mapping, cluster_id: str | None = None) -> Any:
    """The raft request a decoded request body holds. Raises QuorumWireError (answer it
    with `error_response(api_key, e.error_code)`) for another cluster's request or one not
    about the metadata partition."""
    _check_cluster(body, cluster_id)
    if api_key == VOTE:
        p = _only_partition(body["topics"], "topic_name", "partition_index")
        return raft.VoteRequest(p.candidate_epoch, p.candidate_id, p.last_offset_epoch,
                                p.last_offset, body.get("voter_id", NO_ID),
                                bool(p.get("pre_vote", False)))  # v0-1: always a vote
    if api_key == BEGIN_QUORUM_EPOCH:
        p = _only_partition(body["topics"], "topic_name", "partition_index")
        return raft.BeginQuorumEpochRequest(p.leader_id, p.leader_epoch,
                                            body.get("voter_id", NO_ID))
    if api_key == END_QUORUM_EPOCH:
        p = _only_partition(body["topics"], "topic_name", "partition_index")
        if "preferred_candidates" in p:
            successors = tuple(c.candidate_id for c in p.preferred_candidates)
        else:
            successors = tuple(p.preferred_successors)
        return raft.EndQuorumEpochRequest(p.leader_id, p.leader_epoch, successors)
    if api_key == FETCH:
        p = _only_partition(body["topics"], "topic", "partition", by_id=True)
        state = body.get("replica_state")
        replica_id = (state.replica_id if state is not None
                      else body.get("replica_id", NO_ID))
        return raft.FetchRequest(replica_id, p.current_leader_epoch, p.fetch_offset,
                                 p.last_fetched_epoch, p.log_start_offset, body["max_wait_ms"])
    if api_key == FETCH_SNAPSHOT:
        p = _only_partition(body["topics"], "name", "partition")
        sid = _sid(p.snapshot_id)
        if sid is None:
            raise QuorumWireError(E.INVALID_REQUEST, "FetchSnapshot without a snapshot id")
        return raft.FetchSnapshotRequest(body["replica_id"], p.current_leader_epoch, sid,
                                         p.position, body["max_bytes"])
    raise ValueError(f"api key {api_key} is not a quorum message")


def _top_level(api_key: int, body: Mapping) -> None:
    error = _code(body.get("error_code", 0))
    if error != E.NONE:
        raise QuorumWireError(error, f"the peer refused the request (api key {api_key})")


def response_from_wire(api_key: int, body: Mapping) -> Any:
    """The raft response a decoded response body holds. Raises QuorumWireError for a
    top-level error (e.g. INCONSISTENT_CLUSTER_ID) or a body not about the metadata
    partition: the runtime counts the request as failed."""
    _top_level(api_key, body)
    if api_key == VOTE:
        p = _only_partition(body["topics"], "topic_name", "partition_index")
        return raft.VoteResponse(_code(p.error_code), p.leader_id, p.leader_epoch,
                                 p.vote_granted)
    if api_key in (BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH):
        p = _only_partition(body["topics"], "topic_name", "partition_index")
        kind = (raft.BeginQuorumEpochResponse if api_key == BEGIN_QUORUM_EPOCH
                else raft.EndQuorumEpochResponse)
        return kind(_code(p.error_code), p.leader_id, p.leader_epoch)
    if api_key == FETCH:
        p = _only_partition(body["responses"], "topic", "partition_index", by_id=True)
        diverging = p.get("diverging_epoch")
        current = p.get("current_leader")
        leader = (raft.LeaderIdAndEpoch(current.leader_id, current.leader_epoch)
                  if current is not None else raft.LeaderIdAndEpoch(NO_ID, -1))
        return raft.FetchResponse(
            _code(p.error_code), leader, p.high_watermark, p.log_start_offset,
            None if diverging is None or (diverging.epoch < 0 and diverging.end_offset < 0)
            else raft.EpochEndOffset(diverging.epoch, diverging.end_offset),
            _sid(p.get("snapshot_id")),
            tuple(batches_to_entries(bytes(p.records or b""))))
    if api_key == FETCH_SNAPSHOT:
        p = _only_partition(body["topics"], "name", "index")
        current = p.get("current_leader")
        leader = (raft.LeaderIdAndEpoch(current.leader_id, current.leader_epoch)
                  if current is not None else raft.LeaderIdAndEpoch(NO_ID, -1))
        return raft.FetchSnapshotResponse(_code(p.error_code), leader, _sid(p.snapshot_id),
                                          p.size, p.position, bytes(p.unaligned_records or b""))
    raise ValueError(f"api key {api_key} is not a quorum message")


# -- DescribeQuorum ---------------------------------------------------------------------------

def describe_quorum_response(node: raft.RaftNode, *, now_ms: int | None = None,
                             last_fetch_ms: Mapping[int, int] | None = None,
                             last_caught_up_ms: Mapping[int, int] | None = None) -> dict:
    """The DescribeQuorum answer of `node` (any version's fields). Only the leader knows
    the voters' progress, and the observers' (the brokers that fetched from it while it
    led); any other node answers NOT_LEADER_OR_FOLLOWER with the leader it
    knows, as Kafka does. Timestamps are the runtime's to track (the node keeps none): it
    passes the last fetch and last caught-up times it saw per voter, and `now_ms` stands
    for the leader's own (-1 where unknown)."""
    partition: dict[str, Any] = {
        "partition_index": METADATA_PARTITION, "error_code": E.NONE, "error_message": None,
        "leader_id": node.leader_id, "leader_epoch": node.epoch,
        "high_watermark": node.high_watermark, "current_voters": [], "observers": []}
    st = node.state
    if not isinstance(st, raft.LeaderState):
        partition["error_code"] = E.NOT_LEADER_OR_FOLLOWER
    else:
        fetched, caught_up = last_fetch_ms or {}, last_caught_up_ms or {}
        voter_set = node.voter_set
        # the voters in force (KIP-853: the latest VotersRecord), then every other replica
        # that fetched: the observers (brokers, controllers not yet added, ones removed)
        replicas = [(v, "current_voters") for v in node.voters] + [
            (r, "observers") for r in sorted(st.end_offsets) if r not in node.voters]
        if not node.is_voter:
            replicas.append((node.node_id, "observers"))  # a leader removing itself
        for replica, kind in replicas:
            if replica == node.node_id:
                end, seen, up = node.log.end_offset, now_ms, now_ms
            else:
                end = st.end_offsets.get(replica, -1)
                seen, up = fetched.get(replica), caught_up.get(replica)
            voter = voter_set.get(replica)
            partition[kind].append({
                "replica_id": replica,
                "replica_directory_id": voter.directory_id if voter else ZERO_UUID,
                "log_end_offset": end,
                "last_fetch_timestamp": -1 if seen is None else seen,
                "last_caught_up_timestamp": -1 if up is None else up})
        partition["high_watermark"] = (st.high_watermark if st.high_watermark is not None
                                       else -1)
    return {"error_code": E.NONE, "error_message": None,
            "topics": _topic(partition), "nodes": []}
