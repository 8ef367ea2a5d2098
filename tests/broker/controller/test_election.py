"""Partition leader election as pure changes: each rule of Kafka's PartitionChangeBuilder
and ReplicationControlManager, checked on the record it returns and on the partition that
replaying the record gives."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

import pytest

from broker.controller.election import (
    NO_LEADER, NO_LEADER_CHANGE, LeaderRecoveryState, PartitionChangeRecord,
    PartitionRegistration, build_change, change_isr, clear_elr, controlled_shutdown,
    elect_leader, elect_preferred_leader, fence_broker, preferred_leader_imbalanced,
    unclean_shutdown,
)

TOPIC = uuid.UUID("6f1c3e0a-0000-4000-8000-000000000001")


def part(replicas, isr, leader, leader_epoch=5, partition_epoch=9):
    return PartitionRegistration(tuple(replicas), tuple(isr), leader, leader_epoch,
                                 partition_epoch)


def test_a_new_partition_is_led_by_its_first_active_replica():
    p = PartitionRegistration.for_new_partition([2, 0, 1], active={0, 1, 2})
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch) == \
        ((2, 0, 1), (2, 0, 1), 2, 0, 0)
    p = PartitionRegistration.for_new_partition([2, 0, 1], active={0, 1})
    assert (p.isr, p.leader) == ((0, 1), 0)
    assert p.offline_replicas({0, 1}) == (2,)
    with pytest.raises(ValueError):
        PartitionRegistration.for_new_partition([2], active={0})


def test_clean_election_takes_the_first_active_isr_member_in_replica_order():
    # the leader 1 is gone; 2 comes before 0 in the replica order
    p = part([1, 2, 0, 3], isr=[0, 1, 2], leader=NO_LEADER)
    change = elect_leader(p, TOPIC, 4, active={0, 2, 3})
    assert change == PartitionChangeRecord(topic_id=TOPIC, partition_id=4, leader=2)
    # 3 is active and first after 1, but not in the ISR
    p = part([1, 3, 0], isr=[1, 0], leader=NO_LEADER)
    assert elect_leader(p, TOPIC, 0, active={0, 3}).leader == 0


def test_an_active_isr_leader_stays():
    p = part([0, 1, 2], isr=[1, 2, 0], leader=2)
    assert elect_leader(p, TOPIC, 0, active={0, 1, 2}) is None
    assert elect_leader(p, TOPIC, 0, active={0, 1, 2},
                        unclean_leader_election_enable=True) is None


def test_no_active_isr_member_leaves_the_partition_offline_until_one_returns():
    p = part([0, 1, 2], isr=[0], leader=NO_LEADER)
    assert elect_leader(p, TOPIC, 0, active={1, 2}) is None  # unclean is off by default
    # the ISR member comes back: it is elected, one leader epoch later
    change = elect_leader(p, TOPIC, 0, active={0, 1, 2})
    assert change.leader == 0 and change.isr is None
    after = p.merge(change)
    assert (after.leader, after.isr, after.leader_epoch, after.partition_epoch) == \
        (0, (0,), 6, 10)


def test_unclean_election_takes_the_first_active_replica_and_shrinks_the_isr_to_it():
    p = part([0, 1, 2], isr=[0], leader=NO_LEADER)
    change = elect_leader(p, TOPIC, 0, active={2, 1}, unclean_leader_election_enable=True)
    assert change.leader == 1
    assert change.isr == (1,)
    assert change.leader_recovery_state == LeaderRecoveryState.RECOVERING
    after = p.merge(change)
    assert (after.leader, after.isr, after.leader_recovery_state) == \
        (1, (1,), LeaderRecoveryState.RECOVERING)
    # an ISR member, when there is one, wins over an earlier replica outside the ISR
    p = part([1, 2, 0], isr=[0, 2], leader=NO_LEADER)
    change = elect_leader(p, TOPIC, 0, active={0, 1}, unclean_leader_election_enable=True)
    assert (change.leader, change.isr, change.leader_recovery_state) == (0, None, -1)
    # no active replica at all: still offline
    assert elect_leader(part([0, 1], [0], NO_LEADER), TOPIC, 0, active={5},
                        unclean_leader_election_enable=True) is None


def test_a_leader_change_bumps_both_epochs_an_isr_change_only_the_partition_epoch():
    p = part([0, 1, 2], isr=[0, 1, 2], leader=0)
    isr_only = change_isr(p, TOPIC, 0, [0, 2], active={0, 1, 2})
    assert isr_only == PartitionChangeRecord(topic_id=TOPIC, partition_id=0, isr=(0, 2))
    assert isr_only.leader == NO_LEADER_CHANGE
    after = p.merge(isr_only)
    assert (after.leader, after.isr, after.leader_epoch, after.partition_epoch) == \
        (0, (0, 2), 5, 10)
    # the ISR grows back: partition epoch only again
    grown = after.merge(change_isr(after, TOPIC, 0, [0, 2, 1], active={0, 1, 2}))
    assert (grown.leader_epoch, grown.partition_epoch) == (5, 11)
    # the same ISR again is no change at all
    assert change_isr(grown, TOPIC, 0, [0, 2, 1], active={0, 1, 2}) is None
    # an ISR without its leader moves the leadership: both epochs move
    moved = grown.merge(change_isr(grown, TOPIC, 0, [2, 1], active={0, 1, 2}))
    assert (moved.leader, moved.leader_epoch, moved.partition_epoch) == (1, 6, 12)


def test_going_offline_is_a_leader_change_too():
    p = part([0, 1], isr=[0], leader=0)
    change = fence_broker(p, TOPIC, 0, 0, active={1})
    assert change.leader == NO_LEADER
    after = p.merge(change)
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (NO_LEADER, 6, 10)


def test_fencing_removes_the_broker_from_the_isr_and_reelects_where_it_led():
    p = part([0, 1, 2], isr=[0, 1, 2], leader=0)
    change = fence_broker(p, TOPIC, 3, 0, active={1, 2})
    assert change == PartitionChangeRecord(topic_id=TOPIC, partition_id=3, isr=(1, 2),
                                           leader=1)
    after = p.merge(change)
    assert (after.leader, after.isr, after.leader_epoch, after.partition_epoch) == \
        (1, (1, 2), 6, 10)
    # a follower is fenced: the ISR shrinks, the leader and its epoch stay
    follower = fence_broker(p, TOPIC, 3, 2, active={0, 1})
    assert (follower.leader, follower.isr) == (NO_LEADER_CHANGE, (0, 1))
    assert p.merge(follower).leader_epoch == 5
    # not a replica in the ISR, nor the leader: nothing to do
    assert fence_broker(part([0, 1, 2], [0, 1], 0), TOPIC, 3, 2, active={0, 1}) is None


def test_fencing_the_last_isr_member_empties_the_isr_into_the_elr():
    p = part([0, 1, 2], isr=[1], leader=1)
    change = fence_broker(p, TOPIC, 0, 1, active={0, 2})
    # 1 has every committed record: it leaves the ISR for the ELR, and is the last leader
    assert change == PartitionChangeRecord(topic_id=TOPIC, partition_id=0, isr=(),
                                           leader=NO_LEADER, elr=(1,), last_known_elr=(1,))
    after = p.merge(change)
    assert (after.isr, after.elr, after.last_known_elr, after.leader) == \
        ((), (1,), (1,), NO_LEADER)
    # fenced again while offline: no change
    assert fence_broker(after, TOPIC, 0, 1, active={0, 2}) is None
    # 0 and 2 are active, but in neither the ISR nor the ELR: no election
    assert elect_leader(after, TOPIC, 0, active={0, 2}) is None
    # it comes back: unfencing elects it from the ELR, and it alone is in sync
    back = after.merge(elect_leader(after, TOPIC, 0, active={0, 1, 2}))
    assert (back.leader, back.isr, back.elr, back.last_known_elr) == (1, (1,), (), ())
    assert back.leader_recovery_state == LeaderRecoveryState.RECOVERED
    # with unclean election, fencing elects an out-of-sync replica instead, and the ELR
    # is forgotten: the new leader's log is the truth from now on
    unclean = fence_broker(p, TOPIC, 0, 1, active={0, 2}, unclean_leader_election_enable=True)
    assert (unclean.leader, unclean.isr, unclean.elr) == (0, (0,), None)
    assert unclean.leader_recovery_state == LeaderRecoveryState.RECOVERING


def test_a_shrink_below_min_isr_puts_the_replicas_leaving_into_the_elr():
    p = part([0, 1, 2], isr=[0, 1, 2], leader=0)
    # at min.insync.replicas 2, a shrink to two members keeps no ELR
    two = p.merge(change_isr(p, TOPIC, 0, [0, 1], active={0, 1, 2}, min_isr=2))
    assert (two.isr, two.elr) == ((0, 1), ())
    # below it, the replica leaving holds everything below the HW: it is eligible
    change = change_isr(two, TOPIC, 0, [0], active={0, 1, 2}, min_isr=2)
    assert (change.isr, change.elr, change.last_known_elr) == ((0,), (1,), None)
    one = two.merge(change)
    assert one.elr == (1,)
    # the same shrink straight from three members makes both eligible
    assert change_isr(p, TOPIC, 0, [0], active={0, 1, 2}, min_isr=2).elr == (1, 2)
    # an expansion back to min.insync.replicas empties the ELR
    back = change_isr(one, TOPIC, 0, [0, 2], active={0, 1, 2}, min_isr=2)
    assert (back.isr, back.elr) == ((0, 2), ())
    # an expansion that stays below it keeps the ELR, less the member that rejoined
    three = part([0, 1, 2, 3], isr=[0], leader=0)
    three = replace(three, elr=(1, 2))
    assert change_isr(three, TOPIC, 0, [0, 1], active={0, 1, 2, 3}, min_isr=3).elr == (2,)


def test_with_the_isr_empty_an_active_elr_member_is_elected():
    # ISR [1] below min.insync.replicas 2, ELR [2]; the leader 1 is fenced
    p = replace(part([0, 1, 2], isr=[1], leader=1), elr=(2,))
    change = fence_broker(p, TOPIC, 0, 1, active={0, 2}, min_isr=2)
    # 2 is eligible and active: it leads, alone in the ISR; 1 joins the ELR
    assert (change.leader, change.isr, change.elr) == (2, (2,), (1,))
    assert change.leader_recovery_state == -1  # a clean election
    after = p.merge(change)
    assert (after.leader, after.isr, after.elr, after.last_known_elr) == (2, (2,), (1,), ())
    # an ISR member, when there is one, wins over an earlier ELR member
    q = replace(part([0, 1, 2], isr=[2], leader=NO_LEADER), elr=(0,))
    assert elect_leader(q, TOPIC, 0, active={0, 2}, min_isr=2).leader == 2
    # ELR members are not candidates while the ISR has a member, even a fenced one
    assert elect_leader(q, TOPIC, 0, active={0}, min_isr=2) is None


def test_an_unclean_shutdown_takes_the_broker_out_of_the_isr_and_the_elr():
    # fenced as the last ISR member: ISR [], ELR [1]
    p = replace(part([0, 1, 2], isr=[], leader=NO_LEADER), elr=(1,), last_known_elr=(1,))
    change = unclean_shutdown(p, TOPIC, 0, 1, active={0, 2}, min_isr=2)
    assert (change.isr, change.elr, change.leader, change.last_known_elr) == \
        (None, (), NO_LEADER_CHANGE, None)
    gone = p.merge(change)
    assert (gone.isr, gone.elr, gone.last_known_elr) == ((), (), (1,))
    # another ELR member, when there is one, is elected at once
    q = replace(part([0, 1, 2], isr=[], leader=NO_LEADER), elr=(1, 2), last_known_elr=(1,))
    change = unclean_shutdown(q, TOPIC, 0, 1, active={0, 2}, min_isr=2)
    assert (change.leader, change.isr, change.elr, change.last_known_elr) == (2, (2,), (), ())
    # a live leader that shut down uncleanly loses the leadership and its ISR place, and
    # is not eligible: the remaining member is what the ISR holds
    r = part([0, 1, 2], isr=[1, 2], leader=1)
    change = unclean_shutdown(r, TOPIC, 0, 1, active={0, 2}, min_isr=2)
    assert (change.leader, change.isr, change.elr) == (2, (2,), None)
    # at a shrink that stays at min.insync.replicas, there is no ELR to leave
    s = part([0, 1, 2], isr=[0, 1, 2], leader=0)
    assert unclean_shutdown(s, TOPIC, 0, 2, active={0, 1}, min_isr=2).elr is None
    # a broker in neither: nothing to do
    assert unclean_shutdown(part([0, 1, 2], [0, 1], 0), TOPIC, 0, 2, active={0, 1}) is None


def test_the_last_known_leader_is_elected_uncleanly_when_no_replica_is_eligible():
    # 1 was the last leader; it shut down uncleanly, which took it out of the ELR
    p = replace(part([0, 1, 2], isr=[], leader=NO_LEADER), last_known_elr=(1,))
    # 0 and 2 are active but were out of the ISR: the last leader is waited for
    assert elect_leader(p, TOPIC, 0, active={0, 2}) is None
    change = elect_leader(p, TOPIC, 0, active={0, 1, 2}, min_isr=2)
    assert (change.leader, change.isr, change.last_known_elr) == (1, (1,), ())
    assert change.leader_recovery_state == LeaderRecoveryState.RECOVERING
    # not while an ELR member may come back: it holds what the last leader may lack
    q = replace(p, elr=(2,))
    assert elect_leader(q, TOPIC, 0, active={0, 1}, min_isr=2) is None
    assert elect_leader(q, TOPIC, 0, active={0, 1, 2}, min_isr=2).leader == 2
    # with unclean election too, the last leader goes first
    assert elect_leader(p, TOPIC, 0, active={0, 1},
                        unclean_leader_election_enable=True).leader == 1
    # the last leader is recorded once, when the ISR first empties, and kept while the
    # partition has no leader
    led = part([0, 1, 2], isr=[1], leader=1)
    empty = led.merge(fence_broker(led, TOPIC, 0, 1, active={0, 2}, min_isr=2))
    assert empty.last_known_elr == (1,)
    assert empty.merge(unclean_shutdown(empty, TOPIC, 0, 1, active={0, 2},
                                        min_isr=2)).last_known_elr == (1,)


def test_clear_elr_forgets_the_eligible_replicas_and_the_last_leader():
    p = replace(part([0, 1, 2], isr=[], leader=NO_LEADER), elr=(1,), last_known_elr=(1,))
    change = clear_elr(p, TOPIC, 0)
    assert (change.elr, change.last_known_elr, change.isr, change.leader) == \
        ((), (), None, NO_LEADER_CHANGE)
    cleared = p.merge(change)
    assert (cleared.elr, cleared.last_known_elr) == ((), ())
    assert cleared.partition_epoch == p.partition_epoch + 1
    assert clear_elr(cleared, TOPIC, 0) is None


def test_controlled_shutdown_moves_leadership_to_another_isr_member():
    p = part([2, 0, 1], isr=[2, 1, 0], leader=2)
    change = controlled_shutdown(p, TOPIC, 0, 2, active={0, 1})
    # 0 comes before 1 in the replica order; both are in the ISR
    assert (change.leader, change.isr) == (0, (1, 0))
    # the shutting-down broker is still "active" to the caller's bookkeeping; it is
    # excluded all the same
    assert controlled_shutdown(p, TOPIC, 0, 2, active={0, 1, 2}).leader == 0
    # a follower shutting down leaves the ISR and keeps the leader
    follower = controlled_shutdown(p, TOPIC, 0, 1, active={0, 2})
    assert (follower.leader, follower.isr) == (NO_LEADER_CHANGE, (2, 0))


def test_controlled_shutdown_prefers_isr_members_over_earlier_replicas():
    p = part([2, 0, 1], isr=[2, 1], leader=2)
    assert controlled_shutdown(p, TOPIC, 0, 2, active={0, 1},
                               unclean_leader_election_enable=True).leader == 1


def test_controlled_shutdown_of_the_only_isr_member():
    p = part([2, 0], isr=[2], leader=2)
    change = controlled_shutdown(p, TOPIC, 0, 2, active={0})
    assert (change.leader, change.isr, change.elr) == (NO_LEADER, (), (2,))
    # back after a clean shutdown, it leads from the ELR
    offline = p.merge(change)
    assert elect_leader(offline, TOPIC, 0, active={0, 2}).leader == 2


def test_preferred_election_moves_leadership_back_to_the_first_replica():
    p = part([0, 1, 2], isr=[1, 2, 0], leader=1)
    assert preferred_leader_imbalanced(p, active={0, 1, 2})
    change = elect_preferred_leader(p, TOPIC, 0, active={0, 1, 2})
    assert change == PartitionChangeRecord(topic_id=TOPIC, partition_id=0, leader=0)
    after = p.merge(change)
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (0, 6, 10)
    assert not preferred_leader_imbalanced(after, active={0, 1, 2})
    assert elect_preferred_leader(after, TOPIC, 0, active={0, 1, 2}) is None


@pytest.mark.parametrize("isr, active", [([1, 2], {0, 1, 2}), ([1, 2, 0], {1, 2})])
def test_preferred_election_needs_the_preferred_replica_active_and_in_the_isr(isr, active):
    p = part([0, 1, 2], isr=isr, leader=1)
    assert not preferred_leader_imbalanced(p, active)
    assert elect_preferred_leader(p, TOPIC, 0, active) is None


def test_preferred_election_of_an_offline_partition_falls_back_to_an_isr_member():
    # Kafka's Election.PREFERRED still keeps the partition online
    p = part([0, 1, 2], isr=[2, 1], leader=NO_LEADER)
    assert elect_preferred_leader(p, TOPIC, 0, active={1, 2}).leader == 1


@pytest.mark.parametrize("min_isr", [1, 2, 3])
def test_leaders_always_hold_every_committed_record_and_epochs_only_grow(min_isr):
    """A random walk of fencing, unfencing, controlled and unclean shutdowns, ISR changes,
    appends and elections over one partition, with a model of which replicas hold every
    record below the HW (`whole`): the HW advances only while the ISR has min_isr
    members (the broker's rule), a shrink or a fence loses nothing, an unclean shutdown
    may lose the tail. A clean election always picks a whole, active replica; the ISR and
    the ELR are whole and disjoint; an unclean one (the last known leader) happens only
    when no whole replica is eligible; every change moves the partition epoch by one."""
    rng = random.Random(2024 + min_isr)
    p = PartitionRegistration.for_new_partition([3, 1, 4, 0], active={0, 1, 3, 4})
    active = {0, 1, 3, 4}
    whole = {0, 1, 3, 4}
    changes = elr_elections = 0
    for _ in range(4000):
        broker = rng.choice(p.replicas)
        # brokers come back as often as they go, so the partition is mostly online
        step = rng.choice([0, 1, 1, 1, 2, 3, 3, 4, 5, 5, 6])
        if step == 0:
            active.discard(broker)
            change = fence_broker(p, TOPIC, 0, broker, active, min_isr=min_isr)
        elif step == 1:
            active.add(broker)
            change = elect_leader(p, TOPIC, 0, active, min_isr=min_isr)
        elif step == 2:
            change = controlled_shutdown(p, TOPIC, 0, broker, active - {broker},
                                         min_isr=min_isr)
            active.discard(broker)
        elif step == 3 and p.leader != NO_LEADER:
            # an active follower fetches up to the HW; one joins the ISR only once caught
            # up; the leader stays
            if broker in active:
                whole.add(broker)
            isr = [r for r in p.replicas if r == p.leader
                   or (r in active and r in whole and rng.random() < .6)]
            change = change_isr(p, TOPIC, 0, isr, active, min_isr=min_isr)
        elif step == 4:
            # a kill -9 and a registration after it: the unsynced tail may be gone
            active.discard(broker)
            whole.discard(broker)
            change = unclean_shutdown(p, TOPIC, 0, broker, active, min_isr=min_isr)
        elif step == 5:
            # produce: the leader appends; the HW passes it only with min_isr in sync
            if p.leader != NO_LEADER and len(p.isr) >= min_isr:
                whole &= set(p.isr)
            change = None
        else:
            change = elect_preferred_leader(p, TOPIC, 0, active, min_isr=min_isr)
        if change is None:
            continue
        changes += 1
        after = p.merge(change)
        assert after.partition_epoch == p.partition_epoch + 1
        assert after.leader_epoch == p.leader_epoch + (after.leader != p.leader)
        assert set(after.isr) <= set(after.replicas) and set(after.elr) <= set(after.replicas)
        assert not set(after.isr) & set(after.elr)
        if len(after.isr) >= min_isr:
            assert after.elr == ()
        if after.leader != p.leader and after.leader != NO_LEADER:
            if after.leader_recovery_state == LeaderRecoveryState.RECOVERING and \
                    after.leader not in p.isr + p.elr:
                # the last known leader: no ISR or ELR member was left to elect
                assert after.leader == p.last_known_elr[0]
                left = set(p.isr) | set(p.elr)
                assert not left - {broker} if step in (0, 2, 4) else not left
                whole = {after.leader}  # its log is the truth from here on
            else:
                assert after.leader in whole
                elr_elections += after.leader in p.elr
        if after.leader != NO_LEADER:
            assert after.leader in after.isr and after.leader in active
        else:
            # offline only when no ISR member, nor (with the ISR empty) ELR member, is
            # active
            assert not set(after.isr) & active, after
            assert after.isr or not set(after.elr) & active, after
        assert set(after.isr) | set(after.elr) <= whole, (after, whole)
        p = after
    assert changes > 300, changes
    assert elr_elections > 0


def test_an_empty_target_isr_is_taken_with_eligible_leader_replicas():
    change = build_change(part([0], [0], 0), TOPIC, 0, is_acceptable_leader=lambda r: False,
                          target_isr=[])
    assert (change.isr, change.elr, change.leader, change.last_known_elr) == \
        ((), (0,), NO_LEADER, (0,))
