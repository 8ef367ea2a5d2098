"""The rules of one partition's replication state (broker.replication.state), one by one.

Each test drives a `PartitionState` the way broker.replication.manager does -- role
changes from the metadata, follower fetches, leader appends, ISR expiration passes and
AlterPartition answers -- and checks what the state then says: the high watermark, each
follower's progress, the ISR change it proposes, and what it keeps or drops. The rules
follow Kafka's Partition (maybeIncrementLeaderHW, updateFollowerFetchState,
maybeShrinkIsr, maybeExpandIsr) and KIP-497's maximal ISR.
"""

from __future__ import annotations

import pytest

from broker.replication.state import UNKNOWN_OFFSET, PartitionState, PendingIsrChange

LAG_MS = 10_000  # replica.lag.time.max.ms
REPLICAS = (1, 2, 3)


def leader(isr: tuple[int, ...] = REPLICAS, *, leo: int = 0, hw: int = 0, now: int = 0,
           leader_epoch: int = 5, partition_epoch: int = 7,
           replicas: tuple[int, ...] = REPLICAS, min_isr: int = 1) -> PartitionState:
    """Broker 1 leading the partition from `leader_epoch`, its log ending at `leo`."""
    state = PartitionState(node_id=1, high_watermark=hw, min_insync_replicas=min_isr)
    state.become_leader(leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                        replicas=replicas, isr=isr, log_end_offset=leo, now_ms=now)
    return state


def caught_up(state: PartitionState, leo: int, now: int = 0) -> None:
    """Every follower in the ISR fetches at the leader's log end."""
    for r in state.isr:
        if r == state.node_id:
            continue
        state.on_follower_fetch(r, leo, leo, now)


# --- the high watermark as leader ---------------------------------------------------------


def test_the_high_watermark_is_the_least_log_end_offset_over_the_isr():
    state = leader(leo=10)
    state.on_follower_fetch(2, 5, 10, 1)
    assert state.high_watermark == 0  # 3 not heard from yet
    update = state.on_follower_fetch(3, 7, 10, 1)
    assert update is not None and update.high_watermark_changed
    assert state.high_watermark == 5
    state.on_follower_fetch(2, 8, 10, 2)
    assert state.high_watermark == 7  # now 3 is the slowest
    state.on_follower_fetch(3, 10, 10, 3)
    assert state.high_watermark == 8
    state.on_follower_fetch(2, 10, 10, 4)
    assert state.high_watermark == 10  # the leader's own LEO bounds it too


def test_the_leaders_own_log_end_bounds_the_high_watermark():
    state = leader(leo=4)
    caught_up(state, 4)
    assert state.high_watermark == 4
    # followers cannot be ahead of the leader, but if a fetch says so the leader's LEO wins
    state.on_follower_fetch(2, 9, 4, 1)
    state.on_follower_fetch(3, 9, 4, 1)
    assert state.high_watermark == 4


def test_the_high_watermark_never_goes_down_while_leading():
    state = leader(leo=10)
    caught_up(state, 10)
    assert state.high_watermark == 10
    # a follower reporting less (it restarted and lost its tail) does not pull it back
    update = state.on_follower_fetch(2, 3, 10, 1)
    assert update is not None and not update.high_watermark_changed
    assert state.high_watermark == 10
    assert not state.on_leader_append(12)
    assert state.high_watermark == 10


def test_a_member_not_heard_from_holds_the_high_watermark():
    state = leader(leo=10, hw=4)
    state.on_follower_fetch(2, 10, 10, 1)
    assert state.followers[3].log_end_offset == UNKNOWN_OFFSET
    assert state.high_watermark == 4
    assert not state.on_leader_append(11)
    assert state.high_watermark == 4
    state.on_follower_fetch(3, 9, 11, 2)
    assert state.high_watermark == 9


def test_a_replica_outside_the_isr_does_not_hold_the_high_watermark():
    state = leader(isr=(1, 2), leo=10)
    state.on_follower_fetch(2, 10, 10, 1)
    assert state.high_watermark == 10  # 3 is unknown, but it is not in the ISR
    state.on_follower_fetch(3, 2, 10, 1)
    assert state.high_watermark == 10


def test_a_leader_alone_in_the_isr_moves_the_high_watermark_with_its_log_end():
    state = PartitionState(node_id=1)
    moved = state.become_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,),
                                log_end_offset=5, now_ms=0)
    assert moved and state.high_watermark == 5
    assert state.on_leader_append(8)
    assert state.high_watermark == 8
    # the same with other replicas assigned but out of the ISR
    state = leader(isr=(1,), leo=3)
    assert state.high_watermark == 3
    assert state.on_leader_append(4)
    assert state.high_watermark == 4


def test_the_high_watermark_stays_while_the_isr_is_below_min_insync_replicas():
    """KIP-966's strict min ISR rule (Kafka's maybeIncrementLeaderHW, KAFKA-15583): a
    replica leaving the ISR while it is below the minimum holds everything below the HW,
    so the controller may elect it."""
    state = leader(leo=10, min_isr=2)
    caught_up(state, 10)
    assert state.high_watermark == 10
    # the ISR shrinks to the leader alone: appends and fetches no longer move the HW
    assert not state.update_metadata(partition_epoch=8, replicas=REPLICAS, isr=(1,),
                                     log_end_offset=10)
    assert not state.on_leader_append(15)
    # 2 catches up: it is proposed back, but a pending expansion does not count: the
    # controller has not committed it
    update = state.on_follower_fetch(2, 15, 15, 1)
    assert update is not None and update.expand is not None
    assert state.under_min_isr() and state.high_watermark == 10
    # committed, the ISR is back at the minimum and the HW moves
    assert state.on_alter_partition_result(update.expand, error=False, leader_epoch=5,
                                           partition_epoch=9, isr=(1, 2),
                                           log_end_offset=15)
    assert state.high_watermark == 15


def test_a_new_leader_alone_below_min_insync_replicas_keeps_its_high_watermark():
    # elected from the ELR, it is the ISR alone: the HW waits for a second member
    state = PartitionState(node_id=1, high_watermark=6, min_insync_replicas=2)
    assert not state.become_leader(leader_epoch=3, partition_epoch=3, replicas=REPLICAS,
                                   isr=(1,), log_end_offset=9, now_ms=0)
    assert not state.on_leader_append(12)
    assert state.high_watermark == 6


def test_a_single_replica_moves_the_high_watermark_whatever_the_minimum():
    # min.insync.replicas is capped at the replica count: RF 1 always has its minimum
    state = leader(isr=(1,), leo=3, replicas=(1,), min_isr=2)
    assert state.high_watermark == 3
    assert state.on_leader_append(4) and state.high_watermark == 4


def test_a_lower_min_insync_replicas_lets_the_high_watermark_move():
    state = leader(isr=(1,), leo=7, min_isr=2)
    assert state.high_watermark == 0
    assert state.set_min_insync_replicas(1, 7) and state.high_watermark == 7
    assert not state.set_min_insync_replicas(3, 9)  # a higher one stops it again
    assert not state.on_leader_append(9) and state.high_watermark == 7


def test_a_new_leader_keeps_the_high_watermark_it_knew_as_follower():
    state = PartitionState(node_id=1, high_watermark=6)
    moved = state.become_leader(leader_epoch=3, partition_epoch=3, replicas=REPLICAS,
                                isr=REPLICAS, log_end_offset=9, now_ms=0)
    assert not moved and state.high_watermark == 6
    caught_up(state, 9)
    assert state.high_watermark == 9


def test_a_new_leader_never_shows_a_high_watermark_past_its_log():
    state = PartitionState(node_id=1, high_watermark=12)
    state.become_leader(leader_epoch=3, partition_epoch=3, replicas=REPLICAS, isr=REPLICAS,
                        log_end_offset=9, now_ms=0)
    assert state.high_watermark == 9


def test_a_follower_does_not_compute_a_high_watermark():
    state = PartitionState(node_id=2, high_watermark=3)
    state.become_follower(leader_id=1, leader_epoch=5, partition_epoch=7, replicas=REPLICAS,
                          isr=REPLICAS)
    assert not state.maybe_increment_high_watermark(20)
    assert not state.on_leader_append(20)
    assert state.high_watermark == 3


# --- the high watermark as follower, after truncation and at start-up ----------------------


@pytest.mark.parametrize("leader_hw, leo, expected", [(5, 10, 5), (12, 10, 10), (0, 4, 0)])
def test_a_followers_high_watermark_is_the_leaders_bounded_by_its_own_log(leader_hw, leo,
                                                                            expected):
    state = PartitionState(node_id=2, high_watermark=0)
    state.become_follower(leader_id=1, leader_epoch=5, partition_epoch=7, replicas=REPLICAS,
                          isr=REPLICAS)
    assert state.on_follower_high_watermark(leader_hw, leo) == (expected != 0)
    assert state.high_watermark == expected
    assert not state.on_follower_high_watermark(leader_hw, leo)  # nothing new


def test_a_followers_high_watermark_follows_the_leader_down():
    # a new leader may know an older HW than the last one did; the follower shows what the
    # leader it fetches from says (Kafka's follower sets, it does not max)
    state = PartitionState(node_id=2, high_watermark=8)
    state.become_follower(leader_id=1, leader_epoch=5, partition_epoch=7, replicas=REPLICAS,
                          isr=REPLICAS)
    assert state.on_follower_high_watermark(6, 10)
    assert state.high_watermark == 6


def test_truncation_pulls_the_high_watermark_back_to_the_log_end():
    state = PartitionState(node_id=2, high_watermark=8)
    state.on_truncation(5)
    assert state.high_watermark == 5
    state.on_truncation(7)
    assert state.high_watermark == 5  # truncation never raises it


@pytest.mark.parametrize("checkpointed, leo, expected", [(5, 10, 5), (12, 10, 10),
                                                         (-1, 10, 0), (0, 0, 0)])
def test_the_checkpointed_high_watermark_is_restored_within_the_recovered_log(checkpointed,
                                                                              leo, expected):
    state = PartitionState(node_id=1)
    state.restore_high_watermark(checkpointed, leo)
    assert state.high_watermark == expected


# --- a follower's progress: the lastCaughtUpTimeMs rule -----------------------------------


def test_a_fetch_at_the_leaders_log_end_is_caught_up_now():
    state = leader(leo=10, now=0)
    state.on_follower_fetch(2, 10, 10, 500)
    progress = state.followers[2]
    assert progress.log_end_offset == 10
    assert progress.last_caught_up_ms == 500
    assert progress.last_fetch_ms == 500
    assert progress.last_fetch_leader_leo == 10


def test_a_fetch_reaching_the_log_end_of_the_previous_fetch_was_caught_up_then():
    state = leader(leo=10, now=0)
    state.on_follower_fetch(2, 4, 10, 100)  # behind: not caught up
    assert state.followers[2].last_caught_up_ms == 0
    # the leader appended meanwhile; the follower now holds what the leader had at 100
    state.on_follower_fetch(2, 10, 15, 300)
    assert state.followers[2].last_caught_up_ms == 100


def test_a_fetch_below_both_log_ends_is_not_caught_up():
    state = leader(leo=10, now=0)
    state.on_follower_fetch(2, 4, 10, 100)
    state.on_follower_fetch(2, 9, 15, 300)
    assert state.followers[2].last_caught_up_ms == 0
    assert state.followers[2].log_end_offset == 9


def test_the_first_fetch_of_a_leadership_compares_with_the_log_end_only():
    # no previous fetch in this leadership: the LEO at the previous fetch is unknown
    state = leader(isr=(1,), leo=10, now=0)
    assert state.followers[2].last_fetch_leader_leo == UNKNOWN_OFFSET
    state.on_follower_fetch(2, 3, 10, 100)
    assert state.followers[2].last_caught_up_ms == 0


def test_last_caught_up_never_goes_back():
    state = leader(leo=10, now=0)
    state.on_follower_fetch(2, 10, 10, 500)
    state.on_follower_fetch(2, 10, 10, 400)  # a fetch whose time is older (reordered)
    assert state.followers[2].last_caught_up_ms == 500


def test_a_follower_fetching_steadily_behind_steady_appends_stays_in_sync():
    """Each fetch reaches the log end of the previous one: never at the log end, never
    out of sync (the reason for the rule)."""
    state = leader(isr=(1, 2), leo=0, now=0)
    leo, now = 0, 0
    for _ in range(50):
        fetch_offset = leo
        leo += 3
        now += LAG_MS // 4
        state.on_follower_fetch(2, fetch_offset, leo, now)
        assert state.out_of_sync_replicas(leo, now, LAG_MS) == []
        assert state.maybe_shrink(leo, now, LAG_MS) is None
    assert state.followers[2].log_end_offset < leo


def test_a_fetch_records_the_broker_epoch_when_sent():
    state = leader(leo=0)
    state.on_follower_fetch(2, 0, 0, 1)
    assert state.followers[2].broker_epoch == -1
    state.on_follower_fetch(2, 0, 0, 2, broker_epoch=42)
    assert state.followers[2].broker_epoch == 42
    state.on_follower_fetch(2, 0, 0, 3)
    assert state.followers[2].broker_epoch == 42


def test_a_session_fetch_that_did_not_read_the_partition_counts_as_caught_up_then():
    """KIP-227: an idle partition is not named in a follower's incremental fetches; the
    session's last use says the follower was caught up then, so an append after a long
    quiet spell does not find the follower out of sync before its next fetch."""
    state = leader(isr=(1, 2), leo=10, now=0)
    state.on_follower_fetch(2, 10, 10, 0)  # named once, then idle for a long time
    leo, now = 13, 5 * LAG_MS  # an append, far later
    assert state.out_of_sync_replicas(leo, now, LAG_MS) == [2]  # without the session's word
    state.on_follower_idle_fetch(2, now - 100)  # its session fetched 100 ms ago
    assert state.out_of_sync_replicas(leo, now, LAG_MS) == []
    assert state.followers[2].last_caught_up_ms == now - 100
    # and the previous-fetch rule holds from there: the next fetch reaching 10 was caught
    # up at that session fetch
    state.on_follower_fetch(2, 10, leo, now + 50)
    assert state.followers[2].last_caught_up_ms == now - 100


def test_an_idle_session_fetch_gives_the_followers_current_broker_epoch():
    """A follower restarted, fetched once in its new session before it registered again
    (no broker epoch yet), then caught up on an idle partition: its session's later
    fetches carry its new broker epoch, and that is the one AlterPartition must name
    (KIP-903) to bring it back into the ISR. Found by the simulation (seed 6): with the
    epoch of the last fetch that named the partition the controller refused the expansion
    for ever, and the follower stayed out of the idle partitions' ISRs."""
    state = leader(isr=(1, 2), leo=0, now=0)
    state.on_follower_fetch(2, 0, 0, 100)  # the new session's first fetch: no epoch yet
    assert state.followers[2].broker_epoch == -1
    state.on_follower_idle_fetch(2, 500, broker_epoch=15)
    assert state.followers[2].broker_epoch == 15
    state.on_follower_idle_fetch(2, 600)  # a fetch without ReplicaState keeps it
    assert state.followers[2].broker_epoch == 15


def test_an_idle_session_fetch_never_goes_back_nor_counts_an_unknown_follower():
    state = leader(isr=(1, 2, 3), leo=10, now=0)
    state.on_follower_idle_fetch(3, 500)  # never fetched this leadership: LEO unknown
    assert state.followers[3].last_caught_up_ms == 0
    assert state.followers[3].log_end_offset == UNKNOWN_OFFSET
    state.on_follower_fetch(2, 10, 10, 700)
    state.on_follower_idle_fetch(2, 600)  # older than what the follower last said
    assert (state.followers[2].last_fetch_ms, state.followers[2].last_caught_up_ms) == (700, 700)


def test_a_fetch_from_a_broker_that_is_not_a_follower_changes_nothing():
    state = leader(leo=10)
    assert state.on_follower_fetch(9, 10, 10, 1) is None
    assert 9 not in state.followers
    assert state.on_follower_fetch(1, 10, 10, 1) is None  # the leader itself
    follower = PartitionState(node_id=2)
    follower.become_follower(leader_id=1, leader_epoch=5, partition_epoch=7,
                             replicas=REPLICAS, isr=REPLICAS)
    assert follower.on_follower_fetch(3, 10, 10, 1) is None


# --- shrinking the ISR ------------------------------------------------------------------


def test_a_member_behind_for_longer_than_the_lag_time_is_out_of_sync():
    state = leader(leo=10, now=0)
    state.on_follower_fetch(2, 10, 10, 0)
    state.on_follower_fetch(3, 10, 10, 0)
    state.on_leader_append(15)
    state.on_follower_fetch(3, 15, 15, 100)
    assert state.out_of_sync_replicas(15, LAG_MS, LAG_MS) == []  # exactly the lag: still in
    assert state.out_of_sync_replicas(15, LAG_MS + 1, LAG_MS) == [2]
    change = state.maybe_shrink(15, LAG_MS + 1, LAG_MS)
    assert change is not None
    assert change == PendingIsrChange("shrink", 5, 7, (1, 2, 3), (1, 3), change.reason)
    assert state.pending is change
    assert state.isr == (1, 2, 3)  # committed only once the controller says so


def test_a_member_at_the_leaders_log_end_is_never_out_of_sync():
    state = leader(isr=(1, 2), leo=10, now=0)
    state.on_follower_fetch(2, 10, 10, 0)
    # no fetch for a long time, but nothing was appended: it is not behind
    assert state.out_of_sync_replicas(10, 10 * LAG_MS, LAG_MS) == []
    assert state.maybe_shrink(10, 10 * LAG_MS, LAG_MS) is None


def test_a_stuck_member_with_an_unknown_log_end_is_dropped_after_the_lag_time():
    state = leader(leo=10, now=1_000)
    state.on_follower_fetch(2, 10, 10, 1_000)
    # 3 never fetches from this leader; it got the lag time from the election
    assert state.out_of_sync_replicas(10, 1_000 + LAG_MS, LAG_MS) == []
    assert state.out_of_sync_replicas(10, 1_001 + LAG_MS, LAG_MS) == [3]


def test_the_leader_is_never_dropped_and_the_isr_never_emptied():
    state = leader(isr=(1,), leo=10, now=0)
    assert state.out_of_sync_replicas(10, 10 * LAG_MS, LAG_MS) == []
    assert state.maybe_shrink(10, 10 * LAG_MS, LAG_MS) is None
    state = leader(leo=10, now=0)  # both followers stuck
    change = state.maybe_shrink(10, LAG_MS + 1, LAG_MS)
    assert change is not None and change.new_isr == (1,)


def test_only_isr_members_are_considered_for_shrinking():
    state = leader(isr=(1, 2), leo=10, now=0)
    state.on_follower_fetch(2, 10, 10, 0)
    state.on_follower_fetch(3, 1, 10, 0)  # far behind, but not in the ISR
    assert state.out_of_sync_replicas(10, 5 * LAG_MS, LAG_MS) == []


def test_a_follower_proposes_nothing():
    state = PartitionState(node_id=2)
    state.become_follower(leader_id=1, leader_epoch=5, partition_epoch=7, replicas=REPLICAS,
                          isr=REPLICAS)
    assert state.out_of_sync_replicas(10, 10 * LAG_MS, LAG_MS) == []
    assert state.maybe_shrink(10, 10 * LAG_MS, LAG_MS) is None


# --- expanding the ISR ------------------------------------------------------------------


def test_a_follower_reaching_the_high_watermark_is_proposed_back():
    state = leader(isr=(1, 2), leo=10, now=0)
    state.on_follower_fetch(2, 10, 10, 0)
    assert state.high_watermark == 10
    update = state.on_follower_fetch(3, 9, 10, 1)
    assert update is not None and update.expand is None  # below the HW
    update = state.on_follower_fetch(3, 10, 10, 2)
    assert update is not None and update.expand is not None
    change = update.expand
    assert change == PendingIsrChange("expand", 5, 7, (1, 2), (1, 2, 3), change.reason)
    assert state.pending is change


def test_a_follower_past_the_epoch_start_but_below_the_high_watermark_stays_out():
    state = leader(isr=(1, 2), leo=0, now=0)
    assert state.leader_epoch_start_offset == 0
    state.on_leader_append(10)
    state.on_follower_fetch(2, 10, 10, 1)
    assert state.high_watermark == 10
    update = state.on_follower_fetch(3, 5, 10, 2)
    assert update is not None and update.expand is None
    assert state.pending is None


def test_an_expansion_lists_the_isr_in_replica_order():
    state = leader(isr=(1, 3), leo=0, replicas=(3, 2, 1))
    update = state.on_follower_fetch(2, 0, 0, 1)
    assert update is not None and update.expand is not None
    assert update.expand.new_isr == (3, 2, 1)


def test_a_follower_must_also_reach_the_start_of_the_leaders_epoch():
    """KIP-101: the HW may lag behind what this leader wrote before it was elected (a new
    leader's HW catches up only as followers fetch); a follower below the epoch's start
    offset may lack records the previous leader committed."""
    state = leader(isr=(1,), leo=10, hw=4)
    assert state.leader_epoch_start_offset == 10
    assert state.high_watermark == 10  # alone in the ISR: it follows the LEO
    state2 = leader(isr=(1, 2), leo=10, hw=4)
    assert state2.high_watermark == 4  # 2's LEO unknown yet
    update = state2.on_follower_fetch(3, 6, 10, 1)
    assert update is not None and update.expand is None  # >= HW 4 but < epoch start 10
    update = state2.on_follower_fetch(3, 10, 10, 2)
    assert update is not None and update.expand is not None


def test_an_isr_member_is_not_proposed_again():
    state = leader(leo=10)
    update = state.on_follower_fetch(2, 10, 10, 1)
    assert update is not None and update.expand is None
    assert state.pending is None


# --- one change in flight ------------------------------------------------------------------


def test_no_second_change_while_one_is_in_flight():
    state = leader(isr=(1, 2), leo=10, now=0)
    shrink = state.maybe_shrink(10, LAG_MS + 1, LAG_MS)
    assert shrink is not None and shrink.new_isr == (1,)
    update = state.on_follower_fetch(3, 10, 10, LAG_MS + 2)  # would be an expansion
    assert update is not None and update.expand is None
    assert state.maybe_shrink(10, 5 * LAG_MS, LAG_MS) is None
    assert state.pending is shrink

    state = leader(isr=(1, 2), leo=10, now=0)
    state.on_follower_fetch(2, 10, 10, 0)
    update = state.on_follower_fetch(3, 10, 10, 0)
    assert update is not None and update.expand is not None
    state.on_leader_append(12)
    state.on_follower_fetch(2, 10, 12, 1)  # 2 is behind
    assert state.maybe_shrink(12, 5 * LAG_MS, LAG_MS) is None
    assert state.pending is update.expand


def test_a_pending_expansion_holds_the_high_watermark_for_the_joining_replica():
    state = leader(isr=(1, 2), leo=10, now=0)
    state.on_follower_fetch(2, 10, 10, 0)
    update = state.on_follower_fetch(3, 10, 10, 0)
    assert update is not None and update.expand is not None
    assert state.maximal_isr == (1, 2, 3)
    state.on_leader_append(20)
    state.on_follower_fetch(2, 20, 20, 1)
    assert state.high_watermark == 10  # 3 is still at 10: the controller may commit it
    state.on_follower_fetch(3, 15, 20, 2)
    assert state.high_watermark == 15


def test_a_pending_shrink_does_not_let_the_high_watermark_pass_the_leaving_replica():
    state = leader(leo=10, now=0)
    caught_up(state, 10)
    state.on_leader_append(20)
    state.on_follower_fetch(2, 20, 20, LAG_MS + 1)
    shrink = state.maybe_shrink(20, LAG_MS + 1, LAG_MS)
    assert shrink is not None and shrink.new_isr == (1, 2)
    assert state.maximal_isr == (1, 2, 3)
    assert not state.on_leader_append(21)
    assert state.high_watermark == 10  # 3 can still be elected until the shrink commits
    moved = state.on_alter_partition_result(shrink, error=False, leader_epoch=5,
                                            partition_epoch=8, isr=(1, 2), log_end_offset=21)
    assert moved and state.high_watermark == 20


# --- the controller's answers ------------------------------------------------------------


def test_a_committed_change_is_taken():
    state = leader(isr=(1, 2), leo=10)
    state.on_follower_fetch(2, 10, 10, 0)
    update = state.on_follower_fetch(3, 10, 10, 0)
    assert update is not None and update.expand is not None
    moved = state.on_alter_partition_result(update.expand, error=False, leader_epoch=5,
                                            partition_epoch=8, isr=(1, 2, 3),
                                            log_end_offset=10)
    assert not moved
    assert state.isr == (1, 2, 3) and state.partition_epoch == 8
    assert state.pending is None
    assert state.maximal_isr == (1, 2, 3)


def test_a_refused_change_is_dropped_and_may_be_proposed_again():
    state = leader(isr=(1, 2), leo=10)
    state.on_follower_fetch(2, 10, 10, 0)
    update = state.on_follower_fetch(3, 10, 10, 0)
    assert update is not None and update.expand is not None
    assert not state.on_alter_partition_result(update.expand, error=True)
    assert state.pending is None
    assert state.isr == (1, 2) and state.partition_epoch == 7
    assert state.maximal_isr == (1, 2)
    again = state.on_follower_fetch(3, 10, 10, 1)
    assert again is not None and again.expand is not None
    assert again.expand is not update.expand


def test_an_answer_to_a_superseded_change_is_ignored():
    state = leader(isr=(1, 2), leo=10)
    state.on_follower_fetch(2, 10, 10, 0)
    update = state.on_follower_fetch(3, 10, 10, 0)
    assert update is not None and update.expand is not None
    # the metadata committed something newer before the answer came
    state.update_metadata(partition_epoch=9, replicas=REPLICAS, isr=(1,), log_end_offset=10)
    assert state.pending is None
    assert not state.on_alter_partition_result(update.expand, error=False, leader_epoch=5,
                                               partition_epoch=8, isr=(1, 2, 3),
                                               log_end_offset=10)
    assert state.isr == (1,) and state.partition_epoch == 9
    # a new leadership supersedes it too
    state = leader(isr=(1, 2), leo=10)
    shrink = state.maybe_shrink(10, LAG_MS + 1, LAG_MS)
    assert shrink is not None
    state.become_leader(leader_epoch=6, partition_epoch=8, replicas=REPLICAS, isr=(1, 2),
                        log_end_offset=10, now_ms=LAG_MS + 2)
    assert not state.on_alter_partition_result(shrink, error=False, leader_epoch=5,
                                               partition_epoch=8, isr=(1,), log_end_offset=10)
    assert state.isr == (1, 2)


def test_a_late_answer_to_a_dropped_change_does_not_settle_the_next_one():
    state = leader(isr=(1, 2), leo=10)
    shrink = state.maybe_shrink(10, LAG_MS + 1, LAG_MS)
    assert shrink is not None
    state.on_alter_partition_result(shrink, error=True)  # e.g. no answer in time
    update = state.on_follower_fetch(2, 10, 10, LAG_MS + 2)
    assert update is not None and update.expand is None  # 2 is in the ISR
    update = state.on_follower_fetch(3, 10, 10, LAG_MS + 2)
    assert update is not None and update.expand is not None
    # the shrink's answer turns up after all
    assert not state.on_alter_partition_result(shrink, error=False, leader_epoch=5,
                                               partition_epoch=8, isr=(1,),
                                               log_end_offset=10)
    assert state.pending is update.expand
    assert state.isr == (1, 2) and state.partition_epoch == 7


def test_a_success_for_another_leader_epoch_is_not_taken():
    state = leader(isr=(1, 2), leo=10)
    shrink = state.maybe_shrink(10, LAG_MS + 1, LAG_MS)
    assert shrink is not None
    assert not state.on_alter_partition_result(shrink, error=False, leader_epoch=6,
                                               partition_epoch=8, isr=(1,), log_end_offset=10)
    assert state.isr == (1, 2) and state.partition_epoch == 7
    assert state.pending is None


def test_a_success_older_than_the_metadata_does_not_roll_the_isr_back():
    state = leader(isr=(1, 2), leo=10)
    shrink = state.maybe_shrink(10, LAG_MS + 1, LAG_MS)
    assert shrink is not None
    state.partition_epoch = 9  # e.g. taken from a newer answer meanwhile
    state.on_alter_partition_result(shrink, error=False, leader_epoch=5, partition_epoch=8,
                                    isr=(1,), log_end_offset=10)
    assert state.isr == (1, 2) and state.partition_epoch == 9


# --- the metadata ---------------------------------------------------------------------------


def test_a_newer_partition_epoch_from_the_metadata_clears_the_pending_change():
    state = leader(isr=(1, 2), leo=10)
    shrink = state.maybe_shrink(10, LAG_MS + 1, LAG_MS)
    assert shrink is not None
    state.update_metadata(partition_epoch=7, replicas=REPLICAS, isr=(1, 2), log_end_offset=10)
    assert state.pending is shrink  # the same epoch: still waiting for the answer
    state.update_metadata(partition_epoch=8, replicas=REPLICAS, isr=(1,), log_end_offset=10)
    assert state.pending is None
    assert state.isr == (1,) and state.partition_epoch == 8


def test_an_older_partition_epoch_from_the_metadata_is_ignored():
    state = leader(isr=(1, 2, 3), leo=10, partition_epoch=7)
    state.update_metadata(partition_epoch=6, replicas=REPLICAS, isr=(1,), log_end_offset=10)
    assert state.isr == (1, 2, 3) and state.partition_epoch == 7


def test_a_committed_shrink_in_the_metadata_lets_the_high_watermark_advance():
    state = leader(leo=10)
    state.on_follower_fetch(2, 10, 10, 0)
    assert state.high_watermark == 0  # 3 unknown
    moved = state.update_metadata(partition_epoch=8, replicas=REPLICAS, isr=(1, 2),
                                  log_end_offset=10)
    assert moved and state.high_watermark == 10


def test_a_replica_change_in_the_metadata_adds_and_removes_followers():
    state = leader(leo=10)
    state.update_metadata(partition_epoch=8, replicas=(1, 2, 4), isr=(1, 2),
                          log_end_offset=10)
    assert set(state.followers) == {2, 4}
    assert state.followers[4].log_end_offset == UNKNOWN_OFFSET


def test_a_new_leadership_resets_what_the_leader_knows_of_followers():
    state = leader(isr=(1, 2), leo=10, now=0)
    caught_up(state, 10, now=5)
    state.on_leader_append(14)
    assert state.maybe_shrink(14, LAG_MS + 100, LAG_MS) is not None
    state.become_leader(leader_epoch=6, partition_epoch=8, replicas=REPLICAS, isr=(1, 2),
                        log_end_offset=14, now_ms=777)
    assert state.pending is None
    assert state.leader_epoch == 6 and state.leader_epoch_start_offset == 14
    assert state.followers[2].log_end_offset == UNKNOWN_OFFSET
    assert state.followers[2].last_caught_up_ms == 777  # an ISR member: caught up now
    assert state.followers[3].last_caught_up_ms == 0
    assert state.followers[2].last_fetch_leader_leo == UNKNOWN_OFFSET
    # 2 gets the whole lag time to fetch from the new leader
    assert state.out_of_sync_replicas(14, 777 + LAG_MS, LAG_MS) == []
    assert state.out_of_sync_replicas(14, 778 + LAG_MS, LAG_MS) == [2]


def test_the_same_leadership_applied_again_keeps_what_the_leader_knows():
    state = leader(isr=(1, 2), leo=10, now=0)
    state.on_follower_fetch(2, 10, 10, 5)
    state.on_leader_append(14)
    state.become_leader(leader_epoch=5, partition_epoch=7, replicas=REPLICAS, isr=(1, 2),
                        log_end_offset=14, now_ms=100)
    assert state.leader_epoch_start_offset == 10
    assert state.followers[2].log_end_offset == 10
    assert state.followers[2].last_caught_up_ms == 5


def test_becoming_follower_forgets_the_leaders_view():
    state = leader(isr=(1, 2), leo=10, now=0)
    caught_up(state, 10)
    state.on_leader_append(12)
    assert state.maybe_shrink(12, LAG_MS + 1, LAG_MS) is not None
    state.become_follower(leader_id=2, leader_epoch=6, partition_epoch=8, replicas=REPLICAS,
                          isr=(1, 2))
    assert not state.is_leader and state.leader_id == 2 and state.leader_epoch == 6
    assert state.pending is None and state.followers == {}
    assert state.leader_epoch_start_offset == UNKNOWN_OFFSET
    assert state.high_watermark == 10  # kept: consumers of this follower still see it
    assert state.isr == (1, 2) and state.partition_epoch == 8


def test_an_offline_partition_has_no_leader():
    state = PartitionState(node_id=2)
    state.become_follower(leader_id=-1, leader_epoch=6, partition_epoch=8, replicas=REPLICAS,
                          isr=(1,))
    assert not state.is_leader and state.leader_id == -1


@pytest.mark.parametrize("isr, min_isr, under", [((1, 2, 3), 2, False), ((1, 2), 2, False),
                                                 ((1,), 2, True), ((1,), 1, False),
                                                 ((1, 2, 3), 4, False), ((1, 2), 4, True)])
def test_under_min_isr_compares_the_committed_isr_with_the_capped_minimum(isr, min_isr, under):
    # a minimum above the replica count counts as the replica count (Kafka's
    # effectiveMinIsr)
    state = leader(isr=isr, leo=0, min_isr=min_isr)
    assert state.under_min_isr() is under
