"""The KRaft quorum's own RPCs (KIP-595, KIP-630, KIP-836, KIP-853): Vote (52),
BeginQuorumEpoch (53), EndQuorumEpoch (54), DescribeQuorum (55), FetchSnapshot (59), and
KIP-853's changes of the voter set, AddRaftVoter (80), RemoveRaftVoter (81) and
UpdateRaftVoter (82); with the two control records that carry the voter set in the
metadata log, VotersRecord and KRaftVersionRecord (Kafka's data messages of the same names).

Owns their declarations only. Voters send them to each other on the controller listener
(the metadata log itself is replicated with Fetch, api key 1); DescribeQuorum is also what
kafka-metadata-quorum.sh asks any node. Every version Kafka defines is declared: v0 is what
a 3.7 quorum speaks, v1 (v2 for DescribeQuorum) adds KIP-853's directory ids and endpoints.
Vote v2 (Kafka 4.0, KIP-996) adds PreVote; it is newer than the reference copy of Kafka's
JSON the cross-check reads, so tests/protocol/test_kraft_messages.py checks it by hand.
Each partition entry names the one metadata partition, `__cluster_metadata`-0.
"""

from protocol.schema import F, Message, Struct

# Leader endpoints travel in responses keyed by node id, and in requests keyed by listener
# name: the same host/port pair under two keys, as in Kafka's JSON.
_NODE_ENDPOINTS = [
    F("node_id", "int32", "1+"),
    F("host", "string", "1+"),
    F("port", "uint16", "1+"),
]

_LEADER_ENDPOINTS = [
    F("name", "string", "1+"),
    F("host", "string", "1+"),
    F("port", "uint16", "1+"),
]

# BeginQuorumEpoch and EndQuorumEpoch answer alike: per partition, the error and the leader
# the receiver knows
_EPOCH_RESPONSE_FIELDS = [
    F("error_code", "int16"),
    F("topics", [
        F("topic_name", "string"),
        F("partitions", [
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("leader_id", "int32"),
            F("leader_epoch", "int32"),
        ]),
    ]),
    F("node_endpoints", _NODE_ENDPOINTS, "1+", tag=0),
]

# v2 renamed the candidate_* fields replica_* (a pre-vote's sender is no candidate yet); the
# wire layout is the same, so the names stay those of v0-1, which the cross-check compares.
VoteRequest = Message(
    "VoteRequest", api_key=52, valid="0-2", flexible="0+", fields=[
        F("cluster_id", "string", nullable="0+"),
        F("voter_id", "int32", "1+", default=-1),
        F("topics", [
            F("topic_name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("candidate_epoch", "int32"),
                F("candidate_id", "int32"),
                F("candidate_directory_id", "uuid", "1+"),
                F("voter_directory_id", "uuid", "1+"),
                F("last_offset_epoch", "int32"),
                F("last_offset", "int64"),
                F("pre_vote", "bool", "2+"),
            ]),
        ]),
    ])

# v2 is v1: it only says the sender understands pre-votes
VoteResponse = Message(
    "VoteResponse", api_key=52, valid="0-2", flexible="0+", fields=[
        F("error_code", "int16"),
        F("topics", [
            F("topic_name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
                F("vote_granted", "bool"),
            ]),
        ]),
        F("node_endpoints", _NODE_ENDPOINTS, "1+", tag=0),
    ])

BeginQuorumEpochRequest = Message(
    "BeginQuorumEpochRequest", api_key=53, valid="0-1", flexible="1+", fields=[
        F("cluster_id", "string", nullable="0+"),
        F("voter_id", "int32", "1+", default=-1),
        F("topics", [
            F("topic_name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("voter_directory_id", "uuid", "1+"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
            ]),
        ]),
        F("leader_endpoints", _LEADER_ENDPOINTS, "1+"),
    ])

BeginQuorumEpochResponse = Message(
    "BeginQuorumEpochResponse", api_key=53, valid="0-1", flexible="1+",
    fields=_EPOCH_RESPONSE_FIELDS)

EndQuorumEpochRequest = Message(
    "EndQuorumEpochRequest", api_key=54, valid="0-1", flexible="1+", fields=[
        F("cluster_id", "string", nullable="0+"),
        F("topics", [
            F("topic_name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
                # v1 replaced the bare ids with (id, directory id) pairs (KIP-853)
                F("preferred_successors", "[]int32", "0"),
                F("preferred_candidates", [
                    F("candidate_id", "int32", "1+"),
                    F("candidate_directory_id", "uuid", "1+"),
                ], "1+"),
            ]),
        ]),
        F("leader_endpoints", _LEADER_ENDPOINTS, "1+"),
    ])

EndQuorumEpochResponse = Message(
    "EndQuorumEpochResponse", api_key=54, valid="0-1", flexible="1+",
    fields=_EPOCH_RESPONSE_FIELDS)

DescribeQuorumRequest = Message(
    "DescribeQuorumRequest", api_key=55, valid="0-2", flexible="0+", fields=[
        F("topics", [
            F("topic_name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
            ]),
        ]),
    ])

# Kafka's commonStruct ReplicaState, shared by the voters' and the observers' lists.
_REPLICA_STATE = [
    F("replica_id", "int32"),
    F("replica_directory_id", "uuid", "2+"),
    F("log_end_offset", "int64"),
    F("last_fetch_timestamp", "int64", "1+", default=-1),
    F("last_caught_up_timestamp", "int64", "1+", default=-1),
]

DescribeQuorumResponse = Message(
    "DescribeQuorumResponse", api_key=55, valid="0-2", flexible="0+", fields=[
        F("error_code", "int16"),
        F("error_message", "string", "2+", nullable="2+"),
        F("topics", [
            F("topic_name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", "2+", nullable="2+"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
                F("high_watermark", "int64"),
                F("current_voters", _REPLICA_STATE),
                F("observers", _REPLICA_STATE),
            ]),
        ]),
        F("nodes", [
            F("node_id", "int32", "2+"),
            F("listeners", [
                F("name", "string", "2+"),
                F("host", "string", "2+"),
                F("port", "uint16", "2+"),
            ], "2+"),
        ], "2+"),
    ])

FetchSnapshotRequest = Message(
    "FetchSnapshotRequest", api_key=59, valid="0-1", flexible="0+", fields=[
        F("cluster_id", "string", nullable="0+", tag=0),
        F("replica_id", "int32", default=-1),
        F("max_bytes", "int32", default=0x7FFFFFFF),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition", "int32"),
                F("current_leader_epoch", "int32"),
                F("snapshot_id", Struct([
                    F("end_offset", "int64"),
                    F("epoch", "int32"),
                ])),
                F("position", "int64"),
                F("replica_directory_id", "uuid", "1+", tag=0),
            ]),
        ]),
    ])

FetchSnapshotResponse = Message(
    "FetchSnapshotResponse", api_key=59, valid="0-1", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("index", "int32"),
                F("error_code", "int16"),
                F("snapshot_id", Struct([
                    F("end_offset", "int64"),
                    F("epoch", "int32"),
                ])),
                F("current_leader", Struct([
                    F("leader_id", "int32"),
                    F("leader_epoch", "int32"),
                ]), tag=0),
                F("size", "int64"),
                F("position", "int64"),
                # a slice of the snapshot file, not cut on batch boundaries: opaque bytes
                F("unaligned_records", "records"),
            ]),
        ]),
        F("node_endpoints", _NODE_ENDPOINTS, "1+", tag=0),
    ])


# -- KIP-853: changing the voter set ----------------------------------------------------------

_VOTER_LISTENERS = [
    F("name", "string"),
    F("host", "string"),
    F("port", "uint16"),
]

AddRaftVoterRequest = Message(
    "AddRaftVoterRequest", api_key=80, valid="0", flexible="0+", fields=[
        F("cluster_id", "string", nullable="0+"),
        F("timeout_ms", "int32"),
        F("voter_id", "int32"),
        F("voter_directory_id", "uuid"),
        F("listeners", _VOTER_LISTENERS),
    ])

AddRaftVoterResponse = Message(
    "AddRaftVoterResponse", api_key=80, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
    ])

RemoveRaftVoterRequest = Message(
    "RemoveRaftVoterRequest", api_key=81, valid="0", flexible="0+", fields=[
        F("cluster_id", "string", nullable="0+"),
        F("voter_id", "int32"),
        F("voter_directory_id", "uuid"),
    ])

RemoveRaftVoterResponse = Message(
    "RemoveRaftVoterResponse", api_key=81, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
    ])

_KRAFT_VERSION_FEATURE = [
    F("min_supported_version", "int16"),
    F("max_supported_version", "int16"),
]

UpdateRaftVoterRequest = Message(
    "UpdateRaftVoterRequest", api_key=82, valid="0", flexible="0+", fields=[
        F("cluster_id", "string", nullable="0+"),
        F("current_leader_epoch", "int32"),
        F("voter_id", "int32"),
        F("voter_directory_id", "uuid"),
        F("listeners", _VOTER_LISTENERS),
        F("k_raft_version_feature", Struct(_KRAFT_VERSION_FEATURE)),
    ])

UpdateRaftVoterResponse = Message(
    "UpdateRaftVoterResponse", api_key=82, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("current_leader", Struct([
            F("leader_id", "int32", default=-1),
            F("leader_epoch", "int32", default=-1),
            F("host", "string"),
            F("port", "int32"),
        ]), tag=0),
    ])

# The control records of `__cluster_metadata` that hold the voter set (KIP-853): the
# kraft.version in force, and the whole voter set, each voter's id, directory id, endpoints
# and the kraft.version range it supports.
KRaftVersionRecord = Message(
    "KRaftVersionRecord", valid="0", flexible="0+", fields=[
        F("version", "int16"),
        F("k_raft_version", "int16"),
    ])

VotersRecord = Message(
    "VotersRecord", valid="0", flexible="0+", fields=[
        F("version", "int16"),
        F("voters", [
            F("voter_id", "int32"),
            F("voter_directory_id", "uuid"),
            F("endpoints", _VOTER_LISTENERS),
            F("k_raft_version_feature", Struct(_KRAFT_VERSION_FEATURE)),
        ]),
    ])
