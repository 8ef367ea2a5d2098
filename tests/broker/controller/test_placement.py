"""Replica placement as Kafka's assignReplicasToBrokers does it: worked examples with the
start index and replica shift fixed, properties over many random cluster shapes drawn from
a seeded RNG, and the error codes CreateTopics answers with."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from broker.controller.placement import (
    PlacementError, UsableBroker, assign_replicas_to_brokers, rack_alternated_broker_list,
    validate_replica_assignment,
)
from protocol.errors import ErrorCode as E


def brokers(n: int, racks: dict[int, str] | None = None, fenced: set[int] = frozenset()):
    return [UsableBroker(i, None if racks is None else racks[i], i in fenced) for i in range(n)]


def test_worked_example_two_racks_of_three():
    """The rack-aware worked example of the article this feature reproduces.

    Brokers 0, 1 and 2 are in one rack and brokers 3, 4 and 5 in another. Sorted one rack
    after the other they read 0, 3, 1, 4, 2, 5. If partition 0's first replica is placed on
    broker 4, its second replica goes to broker 2 and its third to broker 5; partition 1's
    first replica then goes to broker 2, its second to broker 5 and its third to broker 0.
    So no partition has all its replicas in one rack, and the cluster keeps serving if
    either rack fails.

    "First replica on broker 4" is start index 3 in the alternated list; the article's
    followers are the next brokers in that list, which is a replica shift of 0.
    """
    racks = {0: "rack-1", 1: "rack-1", 2: "rack-1", 3: "rack-2", 4: "rack-2", 5: "rack-2"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 4, 2, 5]
    placed = assign_replicas_to_brokers(brokers(6, racks), 2, 3, rng=random.Random(1),
                                        start_index=3, replica_shift=0)
    assert placed == [(4, 2, 5), (2, 5, 0)]
    for replicas in placed:
        assert {racks[b] for b in replicas} == {"rack-1", "rack-2"}


def test_worked_example_without_racks_five_brokers():
    """The article's starting point: 5 brokers, 5 partitions, replication factor 3. The
    picture found on the web (partition p on brokers p, p+1, p+2) is the special case of
    start index 0 and replica shift 0; Kafka draws both at random, so that broker 0 does
    not lead partition 0 of every topic."""
    placed = assign_replicas_to_brokers(brokers(5), 5, 3, rng=random.Random(1),
                                        start_index=0, replica_shift=0)
    assert placed == [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1)]


def test_the_shift_grows_after_every_round_of_brokers():
    # AdminUtils' own table: partitions 5..9 do not repeat the followers of 0..4
    placed = assign_replicas_to_brokers(brokers(5), 10, 3, rng=random.Random(1),
                                        start_index=0, replica_shift=0)
    assert placed[5:] == [(0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2)]


def test_kafka_rack_aware_example_three_racks():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    placed = assign_replicas_to_brokers(brokers(6, racks), 7, 3, rng=random.Random(1),
                                        start_index=0, replica_shift=0)
    assert placed == [(0, 3, 1), (3, 1, 5), (1, 5, 4), (5, 4, 2), (4, 2, 0), (2, 0, 3),
                      (0, 4, 2)]


def test_start_index_and_shift_come_from_the_rng():
    seen = {tuple(assign_replicas_to_brokers(brokers(5), 1, 3, rng=random.Random(seed))[0])
            for seed in range(40)}
    assert len({r[0] for r in seen}) == 5  # every broker leads partition 0 for some seed
    assert len(seen) > 5  # and the followers vary too
    again = assign_replicas_to_brokers(brokers(5), 8, 3, rng=random.Random(7))
    assert again == assign_replicas_to_brokers(brokers(5), 8, 3, rng=random.Random(7))


def test_six_partitions_rf3_on_three_brokers_give_each_two_leaders():
    for seed in range(20):
        placed = assign_replicas_to_brokers(brokers(3), 6, 3, rng=random.Random(seed))
        assert Counter(r[0] for r in placed) == {0: 2, 1: 2, 2: 2}
        assert all(sorted(r) == [0, 1, 2] for r in placed)
    racks = {0: "rack-0", 1: "rack-1", 2: "rack-2"}
    placed = assign_replicas_to_brokers(brokers(3, racks), 6, 3, rng=random.Random(3))
    assert Counter(r[0] for r in placed) == {0: 2, 1: 2, 2: 2}


def test_create_partitions_continues_the_round_robin():
    whole = assign_replicas_to_brokers(brokers(4), 8, 2, rng=random.Random(1),
                                       start_index=1, replica_shift=2)
    tail = assign_replicas_to_brokers(brokers(4), 5, 2, rng=random.Random(1),
                                      start_partition_id=3, start_index=1, replica_shift=2)
    assert tail == whole[3:]


@pytest.mark.parametrize("seed", range(6))
def test_rack_aware_properties_over_random_clusters(seed):
    rng = random.Random(seed)
    shapes = 0
    for _ in range(150):
        num_racks = rng.randint(1, 5)
        # racks of unequal sizes, and broker ids that are not 0..n-1
        ids = rng.sample(range(100), rng.randint(num_racks, 12))
        racks = {b: f"r{rng.randrange(num_racks)}" for b in ids}
        for i in range(num_racks):
            racks[ids[i]] = f"r{i}"  # every rack has at least one broker
        fenced = set(rng.sample(ids, rng.randint(0, len(ids) - 1)))
        usable = [b for b in ids if b not in fenced]
        live_racks = {racks[b] for b in usable}
        rf = rng.randint(1, len(usable))
        partitions = rng.randint(1, 40)
        placed = assign_replicas_to_brokers(
            [UsableBroker(b, racks[b], b in fenced) for b in ids], partitions, rf, rng=rng)
        shapes += 1
        assert len(placed) == partitions
        for replicas in placed:
            assert len(replicas) == rf
            assert len(set(replicas)) == rf
            assert not set(replicas) & fenced
            on_racks = Counter(racks[b] for b in replicas)
            if rf <= len(live_racks):
                assert max(on_racks.values()) == 1, (racks, fenced, replicas)
            else:
                assert set(on_racks) == live_racks
        leaders = Counter(r[0] for r in placed)
        counts = [leaders.get(b, 0) for b in usable]
        assert max(counts) - min(counts) <= 1, (racks, fenced, placed)
    assert shapes == 150


def test_rack_unaware_properties_over_random_clusters():
    rng = random.Random(11)
    for _ in range(300):
        ids = rng.sample(range(50), rng.randint(1, 10))
        fenced = set(rng.sample(ids, rng.randint(0, len(ids) - 1)))
        usable = [b for b in ids if b not in fenced]
        rf = rng.randint(1, len(usable))
        partitions = rng.randint(1, 30)
        placed = assign_replicas_to_brokers(
            [UsableBroker(b, None, b in fenced) for b in ids], partitions, rf, rng=rng)
        assert len(placed) == partitions
        for replicas in placed:
            assert len(set(replicas)) == len(replicas) == rf
            assert not set(replicas) & fenced
        leaders = Counter(r[0] for r in placed)
        counts = [leaders.get(b, 0) for b in usable]
        assert max(counts) - min(counts) <= 1


def test_racks_are_ignored_unless_every_usable_broker_has_one():
    mixed = [UsableBroker(0, "a"), UsableBroker(1, None), UsableBroker(2, "a"),
             UsableBroker(3, None)]
    placed = assign_replicas_to_brokers(mixed, 4, 2, rng=random.Random(1),
                                        start_index=0, replica_shift=0)
    assert placed == [(0, 1), (1, 2), (2, 3), (3, 0)]  # the plain id order, not alternated
    # a fenced broker's missing rack does not count
    fenced_norack = [UsableBroker(0, "a"), UsableBroker(1, "a"), UsableBroker(2, "b"),
                     UsableBroker(3, None, fenced=True)]
    placed = assign_replicas_to_brokers(fenced_norack, 3, 2, rng=random.Random(1),
                                        start_index=0, replica_shift=0)
    assert all(2 in r and len(set(r) & {0, 1}) == 1 for r in placed)


def test_fenced_brokers_are_not_chosen():
    cluster = brokers(5, fenced={1, 3})
    for seed in range(30):
        placed = assign_replicas_to_brokers(cluster, 6, 3, rng=random.Random(seed))
        assert all(sorted(r) == [0, 2, 4] for r in placed)


def test_replication_factor_above_usable_brokers():
    with pytest.raises(PlacementError) as raised:
        assign_replicas_to_brokers(brokers(3), 1, 4, rng=random.Random(1))
    assert raised.value.error_code == E.INVALID_REPLICATION_FACTOR
    # three registered brokers, but one is fenced
    with pytest.raises(PlacementError) as raised:
        assign_replicas_to_brokers(brokers(3, fenced={2}), 1, 3, rng=random.Random(1))
    assert raised.value.error_code == E.INVALID_REPLICATION_FACTOR
    assert "only 2 broker(s)" in raised.value.message
    with pytest.raises(PlacementError) as raised:
        assign_replicas_to_brokers([], 1, 1, rng=random.Random(1))
    assert raised.value.error_code == E.INVALID_REPLICATION_FACTOR


@pytest.mark.parametrize("partitions, rf, code", [
    (0, 1, E.INVALID_PARTITIONS), (-1, 1, E.INVALID_PARTITIONS),
    (1, 0, E.INVALID_REPLICATION_FACTOR), (1, -1, E.INVALID_REPLICATION_FACTOR),
])
def test_counts_must_be_positive(partitions, rf, code):
    with pytest.raises(PlacementError) as raised:
        assign_replicas_to_brokers(brokers(3), partitions, rf, rng=random.Random(1))
    assert raised.value.error_code == code


def test_a_broker_listed_twice_is_a_caller_bug():
    with pytest.raises(ValueError):
        assign_replicas_to_brokers([UsableBroker(1), UsableBroker(1)], 1, 1,
                                   rng=random.Random(1))


def test_manual_assignment_is_honoured_in_partition_order():
    assignment = [(1, [2, 0]), (0, [0, 1]), (2, [1, 2])]
    assert validate_replica_assignment(assignment, brokers(3)) == [(0, 1), (2, 0), (1, 2)]
    # a fenced replica is allowed while another replica of the partition is not fenced
    assert validate_replica_assignment([(0, [1, 0])], brokers(3, fenced={1})) == [(1, 0)]


@pytest.mark.parametrize("assignment, code, words", [
    ([(0, [0, 7])], E.INVALID_REPLICA_ASSIGNMENT, "broker 7, but no such broker"),
    ([(0, [1, 2, 1])], E.INVALID_REPLICA_ASSIGNMENT, "[1] more than once"),
    ([(0, [0, 1]), (1, [2])], E.INVALID_REPLICA_ASSIGNMENT, "not consistent"),
    ([(0, [])], E.INVALID_REPLICA_ASSIGNMENT, "empty replica list"),
    ([(0, [0]), (0, [1])], E.INVALID_REPLICA_ASSIGNMENT, "multiple manual"),
    ([(0, [0]), (2, [1])], E.INVALID_REPLICA_ASSIGNMENT, "consecutive"),
    ([(1, [0])], E.INVALID_REPLICA_ASSIGNMENT, "consecutive"),
    ([], E.INVALID_REPLICA_ASSIGNMENT, "no partition"),
    ([(0, [0, 1]), (1, [1, 2])], E.INVALID_REPLICATION_FACTOR, "fenced"),
])
def test_manual_assignment_errors(assignment, code, words):
    with pytest.raises(PlacementError) as raised:
        validate_replica_assignment(assignment, brokers(3, fenced={1, 2}) if
                                    code == E.INVALID_REPLICATION_FACTOR else brokers(3))
    assert raised.value.error_code == code
    assert words in raised.value.message


def test_manual_assignment_for_create_partitions():
    ok = validate_replica_assignment([(3, [0, 1]), (4, [1, 2])], brokers(3),
                                     start_partition_id=3, replication_factor=2)
    assert ok == [(0, 1), (1, 2)]
    with pytest.raises(PlacementError) as raised:
        validate_replica_assignment([(3, [0, 1, 2])], brokers(3), start_partition_id=3,
                                    replication_factor=2)
    assert raised.value.error_code == E.INVALID_REPLICA_ASSIGNMENT
    with pytest.raises(PlacementError) as raised:
        validate_replica_assignment([(0, [0, 1])], brokers(3), start_partition_id=3,
                                    replication_factor=2)
    assert raised.value.error_code == E.INVALID_REPLICA_ASSIGNMENT
