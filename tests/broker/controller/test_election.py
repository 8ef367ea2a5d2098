"""Partition leader election as pure changes: each rule of Kafka's PartitionChangeBuilder
and ReplicationControlManager, checked on the record it returns and on the partition that
replaying the record gives."""

from __future__ import annotations

import random
import uuid

import pytest

from broker.controller.election import (
    NO_LEADER, NO_LEADER_CHANGE, LeaderRecoveryState, PartitionChangeRecord,
    PartitionRegistration, build_change, change_isr, controlled_shutdown, elect_leader,
    elect_preferred_leader, fence_broker, preferred_leader_imbalanced,
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


def test_fencing_never_shrinks_an_isr_to_empty():
    p = part([0, 1, 2], isr=[1], leader=1)
    change = fence_broker(p, TOPIC, 0, 1, active={0, 2})
    assert change.isr is None  # 1 stays: it has every committed record
    assert change.leader == NO_LEADER
    after = p.merge(change)
    assert after.isr == (1,)
    # fenced again while offline: no change
    assert fence_broker(after, TOPIC, 0, 1, active={0, 2}) is None
    # it comes back: unfencing elects it
    assert after.merge(elect_leader(after, TOPIC, 0, active={0, 1, 2})).leader == 1
    # with unclean election, fencing elects an out-of-sync replica instead
    unclean = fence_broker(p, TOPIC, 0, 1, active={0, 2}, unclean_leader_election_enable=True)
    assert (unclean.leader, unclean.isr) == (0, (0,))


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
    assert (change.leader, change.isr) == (NO_LEADER, None)


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


def test_leaders_always_come_from_the_isr_and_epochs_only_grow():
    """A random walk of fencing, unfencing, controlled shutdowns, ISR changes and
    elections over one partition: a clean leader is always an active ISR member, the ISR
    is never empty, and every change moves the partition epoch by one."""
    rng = random.Random(2024)
    p = PartitionRegistration.for_new_partition([3, 1, 4, 0], active={0, 1, 3, 4})
    active = {0, 1, 3, 4}
    changes = 0
    for _ in range(3000):
        broker = rng.choice(p.replicas)
        step = rng.randrange(5)
        if step == 0:
            active.discard(broker)
            change = fence_broker(p, TOPIC, 0, broker, active)
        elif step == 1:
            active.add(broker)
            change = elect_leader(p, TOPIC, 0, active)
        elif step == 2:
            change = controlled_shutdown(p, TOPIC, 0, broker, active - {broker})
            active.discard(broker)
        elif step == 3 and p.leader != NO_LEADER:
            isr = [r for r in p.replicas if r == p.leader or r in active and rng.random() < .6]
            change = change_isr(p, TOPIC, 0, isr, active)
        else:
            change = elect_preferred_leader(p, TOPIC, 0, active)
        if change is None:
            continue
        changes += 1
        after = p.merge(change)
        assert after.partition_epoch == p.partition_epoch + 1
        assert after.leader_epoch == p.leader_epoch + (after.leader != p.leader)
        assert after.isr
        assert set(after.isr) <= set(after.replicas)
        if after.leader != NO_LEADER:
            assert after.leader in after.isr and after.leader in active
        else:
            # offline only when no ISR member is active
            assert not set(after.isr) & active
        p = after
    assert changes > 300


def test_build_change_refuses_an_empty_isr():
    with pytest.raises(ValueError):
        build_change(part([0], [0], 0), TOPIC, 0, is_acceptable_leader=lambda r: True,
                     target_isr=[])
