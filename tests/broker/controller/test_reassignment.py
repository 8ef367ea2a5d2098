"""Partition reassignment at the controller (KIP-455, broker.controller.reassignment): the
records that start a move, complete it once the new replicas are in sync (with a new
leader when the old one leaves) and cancel it, the list of moves in progress, and the bad
requests refused with nothing changed. A snapshot and a standby replaying the log agree."""

from __future__ import annotations

from construct import Container

from broker.controller import reassignment
from broker.controller.snapshot import encode_snapshot, load_snapshot
from protocol.errors import ErrorCode
from tests.broker.controller.test_quorum_controller import Cluster, alter_partition, settings


def reassign(c: Cluster, name: str, pid: int, replicas: list[int] | None) -> dict:
    body = Container(timeout_ms=1000, topics=[Container(name=name, partitions=[
        Container(partition_index=pid, replicas=replicas)])])
    response = c.apply(c.controller.alter_partition_reassignments(body, c.now))
    return response["responses"][0]["partitions"][0]


def lists(c: Cluster) -> list[dict]:
    return reassignment.ongoing(c.image, None)


def cluster() -> Cluster:
    c = Cluster(settings(auto_leader_rebalance_enable=False))
    c.start(1, 2, 3, 4)
    c.create("t", assignments=[[1, 2]])
    return c


def test_a_move_adds_the_targets_then_completes_once_they_are_in_sync():
    c = cluster()
    assert reassign(c, "t", 0, [3, 4])["error_code"] == ErrorCode.NONE
    p = c.partition("t", 0)
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((3, 4, 1, 2), (3, 4), (1, 2))
    assert (p.leader, p.isr) == (1, (1, 2))  # the old leader serves while they copy
    assert lists(c) == [{"name": "t", "partitions": [{
        "partition_index": 0, "replicas": [3, 4, 1, 2], "adding_replicas": [3, 4],
        "removing_replicas": [1, 2]}]}]
    # a move in progress survives a snapshot and a standby's replay
    assert load_snapshot(encode_snapshot(c.image))[0].partition("t", 0) == p
    assert c.standby_image().partition("t", 0) == p
    alter_partition(c, 1, "t", 0, [1, 2, 3])
    assert c.partition("t", 0).adding_replicas == (3, 4)  # 4 is not in sync yet
    answer = alter_partition(c, 1, "t", 0, [1, 2, 3, 4])
    assert answer["error_code"] == ErrorCode.NEW_LEADER_ELECTED  # 1 left: 3 leads
    p = c.partition("t", 0)
    assert (p.replicas, p.isr, p.leader, p.adding_replicas, p.removing_replicas) == \
        ((3, 4), (3, 4), 3, (), ())
    assert lists(c) == []
    assert c.standby_image().partition("t", 0) == p


def test_a_cancel_goes_back_and_a_target_within_the_replicas_is_done_at_once():
    c = cluster()
    reassign(c, "t", 0, [2, 3])
    alter_partition(c, 1, "t", 0, [1, 2, 3])  # 3 caught up, but 1 must leave: done
    assert c.partition("t", 0).replicas == (2, 3)
    reassign(c, "t", 0, [2, 4])
    assert reassign(c, "t", 0, None)["error_code"] == ErrorCode.NONE
    p = c.partition("t", 0)
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((2, 3), (), ())
    assert reassign(c, "t", 0, [3])["error_code"] == ErrorCode.NONE  # nothing to copy
    assert (c.partition("t", 0).replicas, c.partition("t", 0).leader) == ((3,), 3)


def test_bad_requests_change_nothing():
    c = cluster()
    before = c.partition("t", 0)
    for replicas, code in (([], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                           ([3, 3], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                           ([3, 99], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                           (None, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)):
        assert reassign(c, "t", 0, replicas)["error_code"] == code
    assert reassign(c, "t", 5, [1])["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert reassign(c, "nope", 0, [1])["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.partition("t", 0) == before
