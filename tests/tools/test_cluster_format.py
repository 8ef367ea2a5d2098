"""What `minibroker cluster describe` and `minibroker metadata-quorum describe` print, from
descriptions made by hand: kafka-metadata-quorum's status lines and replication table, lag
counted from the leader's log end, and a quorum member the brokers do not list shown as
fenced."""

from __future__ import annotations

from client.admin import ClusterDescription, QuorumInfo, ReplicaState
from client.types import Node
from tools.cluster import broker_rows, describe_lines, replication_rows, status_lines, table

Z = "AAAAAAAAAAAAAAAAAAAAAA"  # the zero directory id: a replica whose id is not known

QUORUM = QuorumInfo(
    leader_id=1, leader_epoch=7, high_watermark=40,
    voters=(ReplicaState(0, 40, 1_000_900, 1_000_900),
            ReplicaState(1, 42, 1_001_000, 1_001_000),
            ReplicaState(2, 30, 990_000, 985_000)),
    observers=(ReplicaState(5, 41, None, None),),
    nodes={0: ("127.0.0.1", 9093), 1: ("127.0.0.1", 9095), 2: ("127.0.0.1", 9097)})

CLUSTER = ClusterDescription("q1Sh-9_ISia_zwGINzRvyQ", 1, (
    Node(0, "127.0.0.1", 9092, "rack-0"), Node(1, "127.0.0.1", 9094, "rack-1"),
    Node(5, "10.0.0.5", 9092, None)))


def test_lag_is_counted_from_the_leaders_log_end():
    assert [QUORUM.lag(r) for r in QUORUM.voters] == [2, 0, 12]
    assert QUORUM.lag(QUORUM.observers[0]) == 1
    leaderless = QuorumInfo(None, 3, 0, QUORUM.voters, ())
    assert [leaderless.lag(r) for r in leaderless.voters] == [0, 0, 0]


def test_status_lines_are_kafka_metadata_quorums():
    assert status_lines(CLUSTER.cluster_id, QUORUM) == [
        "ClusterId:              q1Sh-9_ISia_zwGINzRvyQ",
        "LeaderId:               1",
        "LeaderEpoch:            7",
        "HighWatermark:          40",
        "MaxFollowerLag:         12",
        "MaxFollowerLagTimeMs:   16000",
        "CurrentVoters:          [0,1,2]",
        "CurrentObservers:       [5]",
    ]


def test_status_with_an_unknown_catch_up_time_and_without_a_leader():
    quorum = QuorumInfo(1, 7, 40, (ReplicaState(1, 42, None, None),
                                   ReplicaState(2, 30, None, None)), ())
    assert "MaxFollowerLagTimeMs:   -1" in status_lines("c", quorum)
    lines = status_lines(None, QuorumInfo(None, 4, 0, (ReplicaState(0, 5, None, None),), ()))
    assert lines[:2] == ["ClusterId:              -", "LeaderId:               -1"]
    assert "MaxFollowerLag:         0" in lines


def test_replication_rows_leader_first_then_followers_then_observers():
    assert replication_rows(QUORUM) == [
        ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
         "LastCaughtUpTimestamp", "Status"],
        ["1", Z, "42", "0", "1001000", "1001000", "Leader"],
        ["0", Z, "40", "2", "1000900", "1000900", "Follower"],
        ["2", Z, "30", "12", "990000", "985000", "Follower"],
        ["5", Z, "41", "1", "-1", "-1", "Observer"],
    ]


def test_table_pads_every_column_but_the_last():
    assert table([["a", "bb", "c"], ["ccc", "d", "eeee"]]) == ["a    bb  c", "ccc  d   eeee"]


def test_brokers_listed_are_unfenced_and_quorum_members_not_listed_are_fenced():
    assert broker_rows(CLUSTER, QUORUM) == [
        ["Id", "Host:Port", "Rack", "State"],
        ["0", "127.0.0.1:9092", "rack-0", "unfenced"],
        ["1", "127.0.0.1:9094", "rack-1", "unfenced, active controller"],
        ["2", "-", "-", "fenced"],
        ["5", "10.0.0.5:9092", "-", "unfenced"],
    ]


def test_describe_prints_the_cluster_brokers_and_quorum():
    lines = describe_lines(CLUSTER, QUORUM)
    assert lines[:3] == ["ClusterId:    q1Sh-9_ISia_zwGINzRvyQ", "Controller:   1",
                         "Brokers:      3 unfenced"]
    assert "  2   -               -       fenced" in lines
    assert "Quorum:" in lines
    assert "  LeaderEpoch:            7" in lines
    assert any(line.split() == ["1", Z, "42", "0", "1001000", "1001000", "Leader"]
               for line in lines)
