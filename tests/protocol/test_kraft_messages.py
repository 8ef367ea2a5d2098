"""The KRaft control-plane declarations (protocol.messages.quorum and .cluster) on the wire.

Every message at its lowest and highest version round-trips with every field set away from
its default; every truncation of such a frame is a DecodeError; a few frames are written
out byte by byte from Kafka's encoding rules, so the layout is checked by something other
than our own parser; hostile lengths are refused before anything is allocated for them.
"""

from __future__ import annotations

import itertools
import tracemalloc
import uuid

import pytest

from protocol import versions
from protocol.errors import DecodeError
from tests.protocol.samples import _sample
from protocol.messages import (ADD_RAFT_VOTER, APIS, CONTROLLER_APIS, DESCRIBE_CLUSTER,
                               DESCRIBE_QUORUM, ELECT_LEADERS, REMOVE_RAFT_VOTER,
                               UNREGISTER_BROKER, quorum)
from protocol.messages import cluster as cluster_messages
from protocol.schema import Message

METADATA_TOPIC = "__cluster_metadata"


# declared with the control plane and served to clients: the broker has their handlers
SERVED_CLUSTER_APIS = (ELECT_LEADERS, DESCRIBE_CLUSTER, DESCRIBE_QUORUM, UNREGISTER_BROKER,
                       ADD_RAFT_VOTER, REMOVE_RAFT_VOTER)


def _edge_cases():
    for api in [*CONTROLLER_APIS.values(), *(APIS[k] for k in SERVED_CLUSTER_APIS)]:
        for message in (api.request, api.response):
            low, high = message.versions.low, message.versions.high
            assert high is not None
            for v in sorted({low, high}):
                yield pytest.param(message, v, id=f"{message.name}-v{v}")


def test_the_registry_holds_every_control_plane_api_and_none_is_advertised():
    assert {a.name for a in CONTROLLER_APIS.values()} >= {
        "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "FetchSnapshot",
        "BrokerRegistration", "BrokerHeartbeat", "AllocateProducerIds"}
    advertised = {key for key, _low, _high in versions.advertised()}
    assert advertised and not advertised & CONTROLLER_APIS.keys()
    assert {APIS[k].name for k in SERVED_CLUSTER_APIS} == {"ElectLeaders", "DescribeCluster",
                                                          "DescribeQuorum", "UnregisterBroker",
                                                          "AddRaftVoter",
                                                          "RemoveRaftVoter"}
    assert "UpdateRaftVoter" in {a.name for a in CONTROLLER_APIS.values()}
    assert advertised >= set(SERVED_CLUSTER_APIS)
    assert not versions.is_implemented(quorum.VoteRequest.api_key or 0, 0)


@pytest.mark.parametrize("message,version", list(_edge_cases()))
def test_every_field_round_trips_at_lowest_and_highest_version(message: Message, version: int):
    value = _sample(message.fields, version, itertools.count())
    encoded = message.build(value, version)
    decoded = message.parse(encoded, version)
    assert decoded == value
    assert message.build(decoded, version) == encoded


@pytest.mark.parametrize("message,version", list(_edge_cases()))
def test_every_truncation_is_a_decode_error(message: Message, version: int):
    encoded = message.build(_sample(message.fields, version, itertools.count()), version)
    for cut in range(len(encoded)):
        with pytest.raises(DecodeError):
            message.parse(encoded[:cut], version)


def test_broker_heartbeat_request_bytes():
    body = {"broker_id": 1, "broker_epoch": 5, "current_metadata_offset": 7,
            "want_shut_down": True}
    req = cluster_messages.BrokerHeartbeatRequest
    v0 = (b"\x00\x00\x00\x01" + (5).to_bytes(8, "big") + (7).to_bytes(8, "big")
          + b"\x00\x01" + b"\x00")  # want_fence, want_shut_down, no tagged fields
    assert req.build(body, 0) == v0
    # v1 without offline dirs is the same; with them, tag 0 carries a compact uuid array
    assert req.build(body, 1) == v0
    dir_id = uuid.UUID(int=0xABC)
    v1 = req.build(dict(body, offline_log_dirs=[dir_id]), 1)
    assert v1 == v0[:-1] + b"\x01" + b"\x00" + b"\x11" + b"\x02" + dir_id.bytes
    assert req.parse(v1, 1).offline_log_dirs == [dir_id]
    assert req.parse(v0, 1).offline_log_dirs == []  # absent tag: the default


def test_broker_heartbeat_response_defaults_to_fenced():
    resp = cluster_messages.BrokerHeartbeatResponse
    decoded = resp.parse(resp.build({"throttle_time_ms": 0, "error_code": 0}, 1), 1)
    assert decoded.is_fenced is True and decoded.is_caught_up is False


def test_vote_request_v0_bytes():
    body = {"cluster_id": "c", "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{
        "partition_index": 0, "candidate_epoch": 3, "candidate_id": 2,
        "last_offset_epoch": 2, "last_offset": 41}]}]}
    expected = (b"\x02c"  # compact nullable string: length + 1
                + b"\x02" + bytes([len(METADATA_TOPIC) + 1]) + METADATA_TOPIC.encode()
                + b"\x02" + (0).to_bytes(4, "big") + (3).to_bytes(4, "big")
                + (2).to_bytes(4, "big") + (2).to_bytes(4, "big") + (41).to_bytes(8, "big")
                + b"\x00"  # partition's tagged fields
                + b"\x00"  # topic's
                + b"\x00")  # the request's
    assert quorum.VoteRequest.build(body, 0) == expected
    assert quorum.VoteRequest.parse(expected, 0).topics[0].partitions[0].last_offset == 41


def test_vote_v2_adds_pre_vote_after_the_last_offset():
    # Kafka 4.0's VoteRequest v2 (KIP-996), newer than the reference copy the spec
    # cross-check reads: one bool at the end of each partition, nothing else changed
    partition = {"partition_index": 0, "candidate_epoch": 3, "candidate_id": 2,
                 "candidate_directory_id": uuid.UUID(int=5), "voter_directory_id": uuid.UUID(int=6),
                 "last_offset_epoch": 2, "last_offset": 41}
    body = {"cluster_id": "c", "voter_id": 1,
            "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}]}
    v1 = quorum.VoteRequest.build(body, 1)
    pre_vote = dict(body, topics=[{"topic_name": METADATA_TOPIC,
                                   "partitions": [dict(partition, pre_vote=True)]}])
    v2 = quorum.VoteRequest.build(pre_vote, 2)
    tail = b"\x00" + b"\x00" + b"\x00"  # the partition's, topic's and request's tagged fields
    assert v1.endswith((41).to_bytes(8, "big") + tail)
    assert v2 == v1[:-len(tail)] + b"\x01" + tail
    assert quorum.VoteRequest.parse(v2, 2).topics[0].partitions[0].pre_vote is True
    assert quorum.VoteRequest.build(body, 2) == v1[:-len(tail)] + b"\x00" + tail  # default
    assert "pre_vote" not in quorum.VoteRequest.parse(v1, 1).topics[0].partitions[0]
    assert quorum.VoteRequest.versions.high == quorum.VoteResponse.versions.high == 2
    # the answer to a pre-vote is a v1 answer: v2 only says its sender knows pre-votes
    answer = {"error_code": 0, "topics": [{"topic_name": METADATA_TOPIC, "partitions": [
        {"partition_index": 0, "error_code": 0, "leader_id": 1, "leader_epoch": 4,
         "vote_granted": False}]}]}
    assert quorum.VoteResponse.build(answer, 2) == quorum.VoteResponse.build(answer, 1)


def test_begin_quorum_epoch_v0_is_not_flexible_and_v1_is():
    body = {"cluster_id": None, "topics": [{"topic_name": "t", "partitions": [
        {"partition_index": 0, "leader_id": 1, "leader_epoch": 9}]}]}
    v0 = quorum.BeginQuorumEpochRequest.build(body, 0)
    assert v0 == (b"\xff\xff" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x01"
                  + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x09")
    v1 = quorum.BeginQuorumEpochRequest.parse(quorum.BeginQuorumEpochRequest.build(dict(
        body, voter_id=4, leader_endpoints=[{"name": "CONTROLLER", "host": "h", "port": 9093}]),
        1), 1)
    assert (v1.voter_id, v1.leader_endpoints[0].port) == (4, 9093)
    assert v1.topics[0].partitions[0].voter_directory_id == uuid.UUID(int=0)


def test_end_quorum_epoch_swaps_successors_for_candidates_in_v1():
    partition = {"partition_index": 0, "leader_id": 1, "leader_epoch": 2,
                 "preferred_successors": [2, 3]}
    v0 = quorum.EndQuorumEpochRequest.parse(quorum.EndQuorumEpochRequest.build(
        {"topics": [{"topic_name": "t", "partitions": [partition]}]}, 0), 0)
    assert v0.topics[0].partitions[0].preferred_successors == [2, 3]
    assert "preferred_candidates" not in v0.topics[0].partitions[0]
    cand = {"candidate_id": 2, "candidate_directory_id": uuid.UUID(int=7)}
    v1 = quorum.EndQuorumEpochRequest.parse(quorum.EndQuorumEpochRequest.build(
        {"topics": [{"topic_name": "t", "partitions": [
            dict(partition, preferred_candidates=[cand])]}]}, 1), 1)
    assert v1.topics[0].partitions[0].preferred_candidates == [cand]
    assert "preferred_successors" not in v1.topics[0].partitions[0]


def test_vote_response_v1_without_endpoints_is_v0_on_the_wire():
    body = {"error_code": 0, "topics": [{"topic_name": "t", "partitions": [
        {"partition_index": 0, "leader_id": 1, "leader_epoch": 4, "vote_granted": True}]}]}
    assert quorum.VoteResponse.build(body, 1) == quorum.VoteResponse.build(body, 0)
    tagged = quorum.VoteResponse.build(
        dict(body, node_endpoints=[{"node_id": 1, "host": "h", "port": 9093}]), 1)
    got = quorum.VoteResponse.parse(tagged, 1)
    assert (got.node_endpoints[0].node_id, got.node_endpoints[0].port) == (1, 9093)


def test_fetch_snapshot_carries_its_chunk_as_opaque_bytes():
    chunk = bytes(range(256)) * 4
    body = {"topics": [{"name": METADATA_TOPIC, "partitions": [{
        "index": 0, "snapshot_id": {"end_offset": 100, "epoch": 3}, "size": 5000,
        "position": 1024, "unaligned_records": chunk,
        "current_leader": {"leader_id": 2, "leader_epoch": 3}}]}]}
    got = quorum.FetchSnapshotResponse.parse(quorum.FetchSnapshotResponse.build(body, 1), 1)
    p = got.topics[0].partitions[0]
    assert p.unaligned_records == chunk and p.snapshot_id.end_offset == 100
    assert p.current_leader.leader_id == 2
    req = quorum.FetchSnapshotRequest.parse(quorum.FetchSnapshotRequest.build({}, 0), 0)
    assert (req.replica_id, req.max_bytes, req.cluster_id) == (-1, 0x7FFFFFFF, None)


def test_describe_quorum_v2_reports_directories_and_listeners():
    state = {"replica_id": 1, "replica_directory_id": uuid.UUID(int=1), "log_end_offset": 10}
    body = {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [{
        "partition_index": 0, "leader_id": 1, "leader_epoch": 2, "high_watermark": 10,
        "current_voters": [state], "observers": []}]}],
        "nodes": [{"node_id": 1, "listeners": [{"name": "CONTROLLER", "host": "h",
                                                "port": 9093}]}]}
    got = quorum.DescribeQuorumResponse.parse(quorum.DescribeQuorumResponse.build(body, 2), 2)
    voter = got.topics[0].partitions[0].current_voters[0]
    assert voter.replica_directory_id == uuid.UUID(int=1)
    assert (voter.last_fetch_timestamp, voter.last_caught_up_timestamp) == (-1, -1)
    assert got.nodes[0].listeners[0].name == "CONTROLLER"
    v0 = quorum.DescribeQuorumResponse.parse(quorum.DescribeQuorumResponse.build(body, 0), 0)
    assert "last_fetch_timestamp" not in v0.topics[0].partitions[0].current_voters[0]


def test_elect_leaders_null_means_every_partition():
    req = cluster_messages.ElectLeadersRequest
    for v in (0, 2):
        assert req.parse(req.build({"topic_partitions": None}, v), v).topic_partitions is None
    assert req.build({"topic_partitions": None}, 0) == b"\xff\xff\xff\xff" + (60000).to_bytes(
        4, "big")


@pytest.mark.parametrize("message,version,raw", [
    # BeginQuorumEpoch v0: null cluster id, then a topic count of 2^31-1 in six bytes
    (quorum.BeginQuorumEpochRequest, 0, b"\xff\xff\x7f\xff\xff\xff"),
    # BrokerHeartbeat v1: a tagged field claiming 2^28 bytes
    (cluster_messages.BrokerHeartbeatRequest, 1,
     bytes(22) + b"\x01\x00\xff\xff\xff\x7f"),
    # FetchSnapshot response: one partition whose records claim 2^32-2 bytes (the snapshot
    # id struct ends in its own empty tagged-field section)
    (quorum.FetchSnapshotResponse, 0,
     bytes(6) + b"\x02\x02t\x02" + bytes(6) + bytes(12) + b"\x00" + bytes(16)
     + b"\xff\xff\xff\xff\x0f"),
    # DescribeCluster v1: a broker count of 2^32 as a compact array
    (cluster_messages.DescribeClusterResponse, 1,
     bytes(6) + b"\x00" + b"\x01" + b"\x01" + bytes(4) + b"\xff\xff\xff\xff\x0f"),
])
def test_hostile_lengths_are_refused_without_allocating(message, version, raw):
    tracemalloc.start()
    try:
        # refused by the length check itself, not by some later, incidental failure
        with pytest.raises(DecodeError, match="exceeds the 0 bytes left|cannot fit in 0 bytes"):
            message.parse(raw, version)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


def test_add_raft_voter_request_v0_bytes():
    # Kafka's AddRaftVoterRequest v0 (KIP-853), flexible throughout: written out by hand
    directory = uuid.UUID(int=0x0102)
    body = {"cluster_id": None, "timeout_ms": 30000, "voter_id": 3,
            "voter_directory_id": directory,
            "listeners": [{"name": "CONTROLLER", "host": "h", "port": 9093}]}
    expected = (b"\x00"  # null compact string
                + (30000).to_bytes(4, "big") + (3).to_bytes(4, "big") + directory.bytes
                + b"\x02"  # one listener
                + bytes([len("CONTROLLER") + 1]) + b"CONTROLLER" + b"\x02h"
                + (9093).to_bytes(2, "big") + b"\x00"  # the listener's tagged fields
                + b"\x00")  # the request's
    assert quorum.AddRaftVoterRequest.build(body, 0) == expected
    assert quorum.AddRaftVoterRequest.parse(expected, 0).listeners[0].port == 9093


def test_remove_raft_voter_and_its_answer_bytes():
    body = {"cluster_id": "c", "voter_id": 1, "voter_directory_id": uuid.UUID(int=0)}
    assert quorum.RemoveRaftVoterRequest.build(body, 0) == (
        b"\x02c" + (1).to_bytes(4, "big") + bytes(16) + b"\x00")
    answer = {"throttle_time_ms": 0, "error_code": 127, "error_message": "no such voter"}
    assert quorum.RemoveRaftVoterResponse.build(answer, 0) == (
        bytes(4) + (127).to_bytes(2, "big") + bytes([len("no such voter") + 1])
        + b"no such voter" + b"\x00")


def test_update_raft_voter_response_carries_the_leader_as_a_tagged_field():
    plain = quorum.UpdateRaftVoterResponse.build({"throttle_time_ms": 0, "error_code": 0}, 0)
    assert plain == bytes(4) + bytes(2) + b"\x00"  # no current_leader given: no tag
    tagged = quorum.UpdateRaftVoterResponse.build({
        "throttle_time_ms": 0, "error_code": 0,
        "current_leader": {"leader_id": 2, "leader_epoch": 5, "host": "h", "port": 9093}}, 0)
    leader = (2).to_bytes(4, "big") + (5).to_bytes(4, "big") + b"\x02h" + (9093).to_bytes(4, "big") + b"\x00"
    assert tagged == bytes(6) + b"\x01" + b"\x00" + bytes([len(leader)]) + leader


def test_voters_record_and_kraft_version_record_bytes():
    from protocol.messages.quorum import KRaftVersionRecord, VotersRecord
    assert KRaftVersionRecord.build({"version": 0, "k_raft_version": 1}, 0) == (
        b"\x00\x00" + b"\x00\x01" + b"\x00")
    directory = uuid.UUID(int=9)
    body = {"version": 0, "voters": [{
        "voter_id": 3, "voter_directory_id": directory,
        "endpoints": [{"name": "C", "host": "h", "port": 1}],
        "k_raft_version_feature": {"min_supported_version": 0, "max_supported_version": 1}}]}
    assert VotersRecord.build(body, 0) == (
        b"\x00\x00" + b"\x02" + (3).to_bytes(4, "big") + directory.bytes
        + b"\x02" + b"\x02C" + b"\x02h" + (1).to_bytes(2, "big") + b"\x00"
        + b"\x00\x00" + b"\x00\x01" + b"\x00"  # the feature struct and its tagged fields
        + b"\x00"  # the voter's
        + b"\x00")  # the record's
