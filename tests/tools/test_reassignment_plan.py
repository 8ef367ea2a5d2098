"""The assignment `minibroker reassign-partitions --generate` proposes
(tools/reassignment_plan.py): replicas and preferred leaders spread evenly over the brokers
of the list, distinct racks where there are racks, and no more replicas moved than an even
spread needs."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.reassignment_plan import PlanError, propose


def moved(current: dict, proposed: dict) -> int:
    """Replicas that change broker (a reordering moves none)."""
    return sum(len(set(proposed[k]) - set(current[k])) for k in current)


def spread(assignment: dict, brokers) -> tuple[int, int]:
    counts = Counter(b for r in assignment.values() for b in r)
    values = [counts[b] for b in brokers]
    return min(values), max(values)


def leader_spread(assignment: dict, brokers) -> tuple[int, int]:
    counts = Counter(r[0] for r in assignment.values())
    values = [counts[b] for b in brokers]
    return min(values), max(values)


def three_brokers(partitions: int, rf: int) -> dict:
    """Round-robin over 0, 1, 2, as the controller places a new topic."""
    return {("t", p): [(p + i) % 3 for i in range(rf)] for p in range(partitions)}


def test_a_new_broker_takes_an_even_share_and_nothing_else_moves():
    current = three_brokers(12, 3)  # 36 replicas, 12 a broker
    proposed = propose(current, [0, 1, 2, 3])
    assert spread(proposed, [0, 1, 2, 3]) == (9, 9)
    assert moved(current, proposed) == 9  # exactly the new broker's share
    assert leader_spread(proposed, [0, 1, 2, 3]) == (3, 3)
    assert all(len(set(r)) == 3 for r in proposed.values())


def test_removing_a_broker_moves_its_replicas_and_only_them():
    current = {("t", p): r for p, r in enumerate(
        [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [1, 3], [2, 0], [3, 1]])}
    proposed = propose(current, [0, 2, 3])
    assert all(1 not in r for r in proposed.values())
    assert moved(current, proposed) == sum(1 in r for r in current.values()) == 4
    low, high = spread(proposed, [0, 2, 3])
    assert high - low <= 1
    low, high = leader_spread(proposed, [0, 2, 3])
    assert high - low <= 1


def test_a_balanced_assignment_is_proposed_unchanged():
    current = three_brokers(6, 2)
    assert propose(current, [0, 1, 2]) == current


def test_replicas_go_to_racks_the_partition_lacks():
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    current = {("t", p): [0, 1] for p in range(4)}  # every partition on rack a twice
    proposed = propose(current, [0, 1, 2, 3], racks)
    assert all({racks[b] for b in r} == {"a", "b"} for r in proposed.values())
    assert spread(proposed, [0, 1, 2, 3]) == (2, 2)


def test_a_replication_factor_above_the_broker_count_is_refused():
    with pytest.raises(PlanError, match="more than the 2 brokers"):
        propose(three_brokers(2, 3), [0, 1])
    with pytest.raises(PlanError, match="no broker"):
        propose(three_brokers(2, 1), [])


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_any_assignment_becomes_even_with_distinct_replicas(data):
    old = data.draw(st.integers(1, 5), label="brokers now")
    brokers = sorted(data.draw(st.sets(st.integers(0, 6), min_size=1, max_size=6),
                               label="broker list"))
    rf = data.draw(st.integers(1, min(old, len(brokers))), label="rf")
    partitions = data.draw(st.integers(1, 12), label="partitions")
    current = {("t", p): data.draw(st.permutations(range(old)), label=f"p{p}")[:rf]
               for p in range(partitions)}
    proposed = propose(current, brokers)
    assert proposed.keys() == current.keys()
    assert all(len(r) == rf and len(set(r)) == rf and set(r) <= set(brokers)
               for r in proposed.values())
    low, high = spread(proposed, brokers)
    assert high - low <= 1
    low, high = leader_spread(proposed, brokers)
    assert high <= -(-partitions // len(brokers))
    # at least the replicas off the list plus each broker's excess over its share must
    # move; the matching moves exactly that many whenever every freed place can go to a
    # broker with room that its partition lacks, and a place that cannot costs at most one
    # more move (p0, p1 on 0,1,2 and p2 on 0,3,4 with list 0-3: 4's place can only go to a
    # full broker, which then hands a replica to 3)
    counts = Counter(b for r in current.values() for b in r if b in brokers)
    base, extra = divmod(partitions * rf, len(brokers))
    busiest = sorted(brokers, key=lambda b: (-counts[b], b))
    share = {b: base + (i < extra) for i, b in enumerate(busiest)}
    least = (sum(b not in brokers for r in current.values() for b in r)
             + sum(max(0, counts[b] - share[b]) for b in brokers))
    assert least <= moved(current, proposed) <= 2 * least


def test_a_place_taken_early_is_moved_aside_for_one_that_needs_its_broker():
    """Broker 3 leaves: its four places go to 2 (one: 2 is under its share) and 4 (three).
    Filled in partition order without looking ahead, p0 took 4 and p3, whose only broker
    with room is 4 then, went to full 0, which cost a fifth move."""
    current = {("t", 0): [0, 1, 3], ("t", 1): [0, 1, 3], ("t", 2): [0, 2, 3],
               ("t", 3): [1, 2, 3]}
    proposed = propose(current, [0, 1, 2, 4])
    assert moved(current, proposed) == 4
    assert spread(proposed, [0, 1, 2, 4]) == (3, 3)


def test_a_new_broker_leads_even_when_no_one_is_over_the_cap():
    """Six partitions on 0-2 lead two each, the cap for four brokers (ceil(6/4) = 2): the
    new broker is still handed a leadership, as one leading two more than another would."""
    current = three_brokers(6, 3)
    proposed = propose(current, [0, 1, 2, 3])
    low, high = leader_spread(proposed, [0, 1, 2, 3])
    assert (low, high) == (1, 2)
