"""KIP-392's rack-aware choice of the replica a consumer reads from."""

from __future__ import annotations

from broker.replication.selector import NO_PREFERENCE, ReplicaView, preferred_read_replica

LEADER = ReplicaView(0, "rack-a", 100, True)


def follower(broker_id: int, rack: str | None, leo: int = 100, in_sync: bool = True) -> ReplicaView:
    return ReplicaView(broker_id, rack, leo, in_sync)


def test_no_rack_or_the_leaders_rack_reads_from_the_leader():
    followers = [follower(1, "rack-b")]
    assert preferred_read_replica(None, LEADER, followers, 10) == NO_PREFERENCE
    assert preferred_read_replica("", LEADER, followers, 10) == NO_PREFERENCE
    assert preferred_read_replica("rack-a", LEADER, followers, 10) == NO_PREFERENCE


def test_an_in_sync_replica_in_the_consumers_rack_is_preferred():
    followers = [follower(1, "rack-b"), follower(2, "rack-c")]
    assert preferred_read_replica("rack-c", LEADER, followers, 10) == 2


def test_out_of_sync_or_behind_the_fetch_offset_is_never_chosen():
    assert preferred_read_replica("rack-b", LEADER, [follower(1, "rack-b", in_sync=False)],
                                  10) == NO_PREFERENCE
    assert preferred_read_replica("rack-b", LEADER, [follower(1, "rack-b", leo=5)],
                                  10) == NO_PREFERENCE


def test_the_most_caught_up_replica_of_the_rack_wins():
    followers = [follower(1, "rack-b", leo=90), follower(2, "rack-b", leo=100)]
    assert preferred_read_replica("rack-b", LEADER, followers, 50) == 2
