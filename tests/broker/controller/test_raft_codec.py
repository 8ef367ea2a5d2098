"""broker.controller.raft_codec: every quorum message through the real encoder and decoder
(protocol.connection, at the versions we speak and at the oldest the peer may), the cluster
id check, and the DescribeQuorum answer."""

from __future__ import annotations

import random

import pytest

from broker.controller import raft
from broker.controller import raft_codec as codec
from broker.controller.quorum_state import ElectionState
from broker.controller.raft_log import Entry, RaftLog, SnapshotId
from protocol.connection import ClientConnection, ServerConnection, encode_response
from protocol.errors import ErrorCode as E
from protocol.messages import ALL_APIS, BEGIN_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH, VOTE

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
LEADER = raft.LeaderIdAndEpoch(2, 7)
ENTRIES = (Entry(10, 6, b"\x01\x02ab", True), Entry(11, 7, b"\x01\x03xyz"),
           Entry(12, 7, b""))

REQUESTS = [
    raft.VoteRequest(7, 1, 6, 12, voter_id=3),
    raft.BeginQuorumEpochRequest(1, 7, voter_id=2),
    raft.EndQuorumEpochRequest(1, 7, (2, 0)),
    raft.EndQuorumEpochRequest(1, 7),
    raft.FetchRequest(3, 7, 12, 6, log_start_offset=4, max_wait_ms=500),
    raft.FetchSnapshotRequest(3, 7, SnapshotId(100, 5), position=4096, max_bytes=1 << 20),
]

RESPONSES = [
    raft.VoteResponse(E.NONE, -1, 7, True),
    raft.VoteResponse(E.FENCED_LEADER_EPOCH, 2, 8, False),
    raft.BeginQuorumEpochResponse(E.NONE, 2, 7),
    raft.EndQuorumEpochResponse(E.INVALID_REQUEST, 2, 7),
    raft.FetchResponse(E.NONE, LEADER, 12, 4, records=ENTRIES),
    raft.FetchResponse(E.NONE, LEADER, 12, 4, diverging_epoch=raft.EpochEndOffset(5, 9)),
    raft.FetchResponse(E.NONE, LEADER, 12, 100, snapshot_id=SnapshotId(100, 5)),
    raft.FetchResponse(E.NOT_LEADER_OR_FOLLOWER, raft.LeaderIdAndEpoch(-1, 8)),
    raft.FetchSnapshotResponse(E.NONE, LEADER, SnapshotId(100, 5), 10_000, 4096,
                               bytes(range(256)) * 3),
    raft.FetchSnapshotResponse(E.SNAPSHOT_NOT_FOUND, LEADER),
]


def _over_the_wire(api_key: int, version: int, body: dict):
    """Encode as a peer's client would, decode as the controller listener does, answer."""
    client = ClientConnection("node-1", apis=ALL_APIS)
    _, frame = client.send_request(api_key, version, body)
    server = ServerConnection(apis=ALL_APIS)
    server.receive_data(frame)
    request = server.next_request()
    assert (request.api_key, request.api_version) == (api_key, version)
    return request.body


def _response_over_the_wire(api_key: int, version: int, body: dict):
    client = ClientConnection("node-1", apis=ALL_APIS)
    cid, _ = client.send_request(api_key, version, {})
    client.receive_data(encode_response(api_key, version, cid, body, ALL_APIS))
    return client.next_response().body


def _versions(api_key: int, ours: int, request: bool = True) -> list[int]:
    # what we speak, and the oldest version that still carries every field raft.py has:
    # Vote and BeginQuorumEpoch requests name the voter from v1, Fetch the epochs from v12
    oldest = {FETCH: 12, **({VOTE: 1, BEGIN_QUORUM_EPOCH: 1} if request else {})}
    return sorted({ours, oldest.get(api_key, 0), *([13, 15, 16] if api_key == FETCH else [])})


@pytest.mark.parametrize("message", REQUESTS, ids=repr)
def test_every_request_round_trips(message):
    api_key, version, body = codec.to_wire(message, CLUSTER)
    assert version == codec.VERSIONS[api_key]
    for v in _versions(api_key, version):
        decoded = _over_the_wire(api_key, v, body)
        assert decoded.cluster_id == CLUSTER
        assert codec.request_from_wire(api_key, decoded, CLUSTER) == message, v


def test_a_pre_vote_travels_as_vote_v2():
    message = raft.VoteRequest(7, 1, 6, 12, voter_id=3, pre_vote=True)
    api_key, version, body = codec.to_wire(message, CLUSTER)
    assert (api_key, version) == (VOTE, 2)
    assert codec.request_from_wire(VOTE, _over_the_wire(VOTE, 2, body), CLUSTER) == message
    # before v2 there is no PreVote field: whatever arrives at v0 or v1 is a vote
    old = codec.request_from_wire(VOTE, _over_the_wire(VOTE, 1, body), CLUSTER)
    assert old == raft.VoteRequest(7, 1, 6, 12, voter_id=3, pre_vote=False)


@pytest.mark.parametrize("message", RESPONSES, ids=repr)
def test_every_response_round_trips(message):
    api_key, version, body = codec.to_wire(message)
    for v in _versions(api_key, version, request=False):
        decoded = _response_over_the_wire(api_key, v, body)
        assert codec.response_from_wire(api_key, decoded) == message, v


def test_fetch_names_the_metadata_topic_by_id_from_v13_and_by_name_before():
    _, _, body = codec.to_wire(REQUESTS[4], CLUSTER)
    v17 = _over_the_wire(FETCH, 17, body)
    assert v17.topics[0].topic_id == codec.METADATA_TOPIC_ID and "topic" not in v17.topics[0]
    assert v17.replica_state.replica_id == 3 and "replica_id" not in v17
    v12 = _over_the_wire(FETCH, 12, body)
    assert v12.topics[0].topic == "__cluster_metadata" and v12.replica_id == 3
    # a Fetch of another topic id is not a quorum fetch
    other = dict(body, topics=[dict(body["topics"][0], topic_id=codec.ZERO_UUID)])
    with pytest.raises(codec.QuorumWireError) as e:
        codec.request_from_wire(FETCH, _over_the_wire(FETCH, 17, other), CLUSTER)
    assert e.value.error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_records_travel_as_record_batches():
    _, version, body = codec.to_wire(RESPONSES[4])
    raw = _response_over_the_wire(FETCH, version, body).responses[0].partitions[0].records
    assert raw[:8] == (10).to_bytes(8, "big")  # the first batch's base offset is entry 10's
    # diverging epoch and snapshot id are absent tagged fields unless set
    decoded = _response_over_the_wire(FETCH, version, body).responses[0].partitions[0]
    assert decoded.diverging_epoch is None and decoded.snapshot_id is None


@pytest.mark.parametrize("message", REQUESTS, ids=repr)
def test_a_request_from_another_cluster_is_refused(message):
    api_key, version, body = codec.to_wire(message, "another-cluster")
    decoded = _over_the_wire(api_key, version, body)
    with pytest.raises(codec.QuorumWireError) as e:
        codec.request_from_wire(api_key, decoded, CLUSTER)
    assert e.value.error_code == E.INCONSISTENT_CLUSTER_ID
    # the answer carries the error at the top level, and the sender sees it as such
    answer = _response_over_the_wire(api_key, version,
                                     codec.error_response(api_key, e.value.error_code))
    with pytest.raises(codec.QuorumWireError) as back:
        codec.response_from_wire(api_key, answer)
    assert back.value.error_code == E.INCONSISTENT_CLUSTER_ID
    # a request without a cluster id is taken, as Kafka takes it
    api_key, version, body = codec.to_wire(message, None)
    assert codec.request_from_wire(api_key, _over_the_wire(api_key, version, body),
                                   CLUSTER) == message


def test_not_a_quorum_message():
    with pytest.raises(TypeError):
        codec.to_wire(object())
    with pytest.raises(ValueError):
        codec.request_from_wire(DESCRIBE_QUORUM, {"topics": []})


def test_a_request_for_another_partition_is_refused():
    _, version, body = codec.to_wire(REQUESTS[0], CLUSTER)
    body["topics"][0]["partitions"][0]["partition_index"] = 1
    with pytest.raises(codec.QuorumWireError) as e:
        codec.request_from_wire(VOTE, _over_the_wire(VOTE, version, body), CLUSTER)
    assert e.value.error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    body["topics"] = []
    with pytest.raises(codec.QuorumWireError) as e:
        codec.request_from_wire(VOTE, _over_the_wire(VOTE, version, body), CLUSTER)
    assert e.value.error_code == E.INVALID_REQUEST


def _leader_of_three() -> raft.RaftNode:
    log = RaftLog([Entry(i, 1, b"r") for i in range(5)])
    node = raft.RaftNode(0, raft.QuorumConfig((0, 1, 2)), random.Random(0),
                         ElectionState(1, voters=(0, 1, 2)), log)
    node.start(0)
    effects = node.tick(node.next_deadline())
    for _ in ("pre-vote", "vote"):
        vote = next(e for e in effects if isinstance(e, raft.Send)
                    and isinstance(e.message, raft.VoteRequest))
        effects = node.receive(vote.destination, vote.correlation_id,
                               raft.VoteResponse(E.NONE, -1, node.epoch, True), 0)
    assert node.is_leader
    # voter 1 fetches up to the leader's end: the entry of the new epoch commits
    node.receive(1, 99, raft.FetchRequest(1, node.epoch, node.log.end_offset, node.epoch,
                                          max_wait_ms=0), 10)
    return node


def test_describe_quorum_on_the_leader_reports_voters_and_high_watermark():
    node = _leader_of_three()
    body = codec.describe_quorum_response(node, now_ms=50, last_fetch_ms={1: 10})
    for version in (0, 1, 2):
        got = _response_over_the_wire(DESCRIBE_QUORUM, version, body)
        assert got.error_code == 0
        p = got.topics[0].partitions[0]
        assert got.topics[0].topic_name == "__cluster_metadata" and p.partition_index == 0
        assert (p.error_code, p.leader_id, p.leader_epoch) == (0, 0, node.epoch)
        assert p.high_watermark == node.high_watermark == node.log.end_offset == 6
        voters = {v.replica_id: v for v in p.current_voters}
        assert {k: v.log_end_offset for k, v in voters.items()} == {0: 6, 1: 6, 2: -1}
        assert p.observers == []
        if version >= 1:
            assert voters[1].last_fetch_timestamp == 10 and voters[0].last_fetch_timestamp == 50
            assert voters[2].last_fetch_timestamp == -1


def test_describe_quorum_lists_the_observers_that_fetch_until_they_fall_silent():
    node = _leader_of_three()
    end = node.log.end_offset
    node.receive(7, 100, raft.FetchRequest(7, node.epoch, end - 2, node.epoch,
                                           max_wait_ms=0), 20)
    got = _response_over_the_wire(DESCRIBE_QUORUM, 2, codec.describe_quorum_response(node))
    p = got.topics[0].partitions[0]
    assert [(o.replica_id, o.log_end_offset) for o in p.observers] == [(7, end - 2)]
    assert 7 not in {v.replica_id for v in p.current_voters}
    # another observer fetching long after the first fell silent: the first is forgotten
    later = 20 + raft.OBSERVER_SESSION_TIMEOUT_MS + 1
    node.receive(8, 101, raft.FetchRequest(8, node.epoch, end, node.epoch, max_wait_ms=0),
                 later)
    p = codec.describe_quorum_response(node)["topics"][0]["partitions"][0]
    assert [o["replica_id"] for o in p["observers"]] == [8]


def test_describe_quorum_elsewhere_names_the_leader_with_an_error():
    node = raft.RaftNode(1, raft.QuorumConfig((0, 1, 2)), random.Random(0),
                         ElectionState(3, leader_id=0, voters=(0, 1, 2)))
    node.start(0)
    p = codec.describe_quorum_response(node)["topics"][0]["partitions"][0]
    assert (p["error_code"], p["leader_id"], p["leader_epoch"]) == (
        E.NOT_LEADER_OR_FOLLOWER, 0, 3)
    assert p["current_voters"] == []
