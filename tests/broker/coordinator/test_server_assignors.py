"""Server-side (KIP-848) assignors: worked examples and property tests.

Pure tests, no broker. ``show`` prints an assignment as ``{'m1': 't0-0 t0-1', ...}``.
The properties are the ones broker/coordinator/assignors.py states in its docstrings:
complete and exclusive, deterministic, stable (a fixed point of its own output), plus
balance and stickiness for "uniform" and contiguous, co-partitioned ranges for "range".
"""

from __future__ import annotations

import doctest

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import broker.coordinator.assignors as assignors_mod
from broker.coordinator.assignors import (
    ASSIGNORS, DEFAULT_ASSIGNOR, MemberSpec, format_assignment as show, range_assign, uniform,
)


# -- helpers -------------------------------------------------------------------------------

def spec(member_id, topics, current=None, instance_id=None, rack=None) -> MemberSpec:
    current = {t: frozenset(ps) for t, ps in (current or {}).items()}
    return MemberSpec(member_id, frozenset(topics), current, rack, instance_id)


def group(*specs: MemberSpec) -> dict[str, MemberSpec]:
    return {s.member_id: s for s in specs}


def regroup(members, result, leave=(), join=()) -> dict[str, MemberSpec]:
    """The next round: ``current`` from ``result``, some members gone, some new."""
    out = {m: MemberSpec(m, s.subscribed_topics, result.get(m, {}), s.rack, s.instance_id)
           for m, s in members.items() if m not in leave}
    out.update({s.member_id: s for s in join})
    return out


def flat(result) -> set[tuple[str, str, int]]:
    return {(m, t, p) for m, parts in result.items() for t, ps in parts.items() for p in ps}


def counts(result) -> dict[str, int]:
    return {m: sum(len(ps) for ps in parts.values()) for m, parts in result.items()}


def moved(before, after) -> int:
    """Partitions whose owner changed, counting only partitions present in both."""
    owner_before = {(t, p): m for m, t, p in flat(before)}
    owner_after = {(t, p): m for m, t, p in flat(after)}
    return sum(1 for tp, m in owner_after.items() if tp in owner_before and owner_before[tp] != m)


def java_key(s: str) -> bytes:
    """Java's String.compareTo order (UTF-16 code units), which Kafka sorts ids by."""
    return s.encode("utf-16-be", "surrogatepass")


def usable(spec_: MemberSpec, topics) -> frozenset[str]:
    return frozenset(t for t in spec_.subscribed_topics if topics.get(t, 0) > 0)


def check_valid(members, topics, result):
    """Complete and exclusive: each subscribed partition to exactly one of its subscribers."""
    assert set(result) == set(members)
    seen: set[tuple[str, int]] = set()
    for member_id, parts in result.items():
        for topic, partitions in parts.items():
            assert isinstance(partitions, frozenset) and partitions, (member_id, topic)
            assert topic in usable(members[member_id], topics), (member_id, topic)
            for p in partitions:
                assert 0 <= p < topics[topic]
                assert (topic, p) not in seen, f"{topic}-{p} assigned twice"
                seen.add((topic, p))
    wanted = {(t, p) for s in members.values() for t in usable(s, topics) for p in range(topics[t])}
    assert seen == wanted


def deduped_claims(members, topics) -> dict[str, set[tuple[str, int]]]:
    """The usable part of each ``current``: first claimant in member id order wins."""
    taken: set[tuple[str, int]] = set()
    out: dict[str, set[tuple[str, int]]] = {}
    for m in sorted(members, key=java_key):
        subs = usable(members[m], topics)
        mine = {(t, p) for t, ps in members[m].current.items() if t in subs
                for p in ps if 0 <= p < topics[t]} - taken
        taken |= mine
        out[m] = mine
    return out


T2x3 = {"t0": 3, "t1": 3}
BOTH = ("t0", "t1")


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_names_and_default(name):
    assert ASSIGNORS == {"uniform": uniform, "range": range_assign}
    assert DEFAULT_ASSIGNOR == "uniform"
    assert ASSIGNORS[name]({}, T2x3) == {}


def test_docstring_worked_examples():
    failed, attempted = doctest.testmod(assignors_mod, optionflags=doctest.ELLIPSIS)
    assert attempted > 0 and failed == 0


# -- uniform: worked examples ------------------------------------------------------------------

class TestUniformExamples:
    def first_round(self):
        members = group(*(spec(m, BOTH) for m in ("m1", "m2", "m3")))
        return members, uniform(members, T2x3)

    def test_three_members_two_topics(self):
        _, result = self.first_round()
        assert show(result) == {"m1": "t0-0 t0-1", "m2": "t0-2 t1-0", "m3": "t1-1 t1-2"}

    def test_member_joins_minimal_movement(self):
        members, first = self.first_round()
        result = uniform(regroup(members, first, join=[spec("m0", BOTH)]), T2x3)
        # 6 over 4: two members keep 2, one gives up exactly one partition to the newcomer
        assert show(result) == {"m0": "t1-2", "m1": "t0-0 t0-1", "m2": "t0-2 t1-0", "m3": "t1-1"}
        assert moved(first, result) == 1

    def test_member_leaves_others_keep_theirs(self):
        members, first = self.first_round()
        result = uniform(regroup(members, first, leave=["m2"]), T2x3)
        assert show(result) == {"m1": "t0-0 t0-1 t0-2", "m3": "t1-0 t1-1 t1-2"}
        # m1 and m3 keep all they had; only m2's partitions changed hands
        assert flat(first) - flat(result) == {("m2", "t0", 2), ("m2", "t1", 0)}

    def test_topic_grows_new_partitions_spread(self):
        members, first = self.first_round()
        result = uniform(regroup(members, first), {"t0": 6, "t1": 3})
        assert show(result) == {"m1": "t0-0 t0-1 t0-3", "m2": "t0-2 t0-4 t1-0",
                                "m3": "t0-5 t1-1 t1-2"}
        assert moved(first, result) == 0

    def test_topic_shrinks_or_goes_away(self):
        members, first = self.first_round()
        result = uniform(regroup(members, first), {"t0": 3})  # t1 deleted
        assert show(result) == {"m1": "t0-0", "m2": "t0-2", "m3": "t0-1"}
        assert moved(first, result) == 1  # m1 had t0-1 over its quota of one

    def test_extra_slots_go_to_the_biggest_holders(self):
        # 3 partitions, 2 members: one gets 2. m2 holds 2 now, so m2 keeps them both
        # (Kafka hands the extra slot out in hash map order and may move one).
        members = group(spec("m1", ["t0"], {"t0": [0]}), spec("m2", ["t0"], {"t0": [1, 2]}))
        assert show(uniform(members, {"t0": 3})) == {"m1": "t0-0", "m2": "t0-1 t0-2"}

    def test_over_quota_member_keeps_its_lowest(self):
        members = group(spec("m1", ["t0"], {"t0": [3, 1, 0, 2]}), spec("m2", ["t0"]))
        assert show(uniform(members, {"t0": 4})) == {"m1": "t0-0 t0-1", "m2": "t0-2 t0-3"}

    def test_stale_current_is_tolerated(self):
        members = group(
            # t9 is gone, t1 is no longer subscribed, t0-7 is beyond the partition count
            spec("m1", ["t0"], {"t0": [0, 7], "t1": [0], "t9": [0]}),
            # t0-0 is claimed twice: the first member id (m1) keeps it
            spec("m2", ["t0", "t1"], {"t0": [0, 1]}),
        )
        result = uniform(members, {"t0": 2, "t1": 2})
        check_valid(members, {"t0": 2, "t1": 2}, result)
        # m2 ends with t0-1 and t1 (3), so balancing hands t0-1 to m1
        assert show(result) == {"m1": "t0-0 t0-1", "m2": "t1-0 t1-1"}

    def test_empty_group_and_no_topics(self):
        assert uniform({}, T2x3) == {}
        members = group(spec("m1", BOTH), spec("m2", BOTH))
        assert uniform(members, {}) == {"m1": {}, "m2": {}}

    def test_member_without_an_existing_subscribed_topic(self):
        members = group(spec("m1", ["t0"]), spec("m2", ["missing"]), spec("m3", []))
        result = uniform(members, {"t0": 4})
        assert show(result) == {"m1": "t0-0 t0-1 t0-2 t0-3", "m2": "", "m3": ""}

    def test_missing_topic_does_not_make_a_group_heterogeneous(self):
        # Only existing topics count: both members effectively subscribe to t0 alone.
        members = group(spec("m1", ["t0", "missing"]), spec("m2", ["t0"]))
        assert counts(uniform(members, {"t0": 5})) == {"m1": 3, "m2": 2}

    def test_heterogeneous_subscriptions(self):
        members = group(spec("m1", ["t0"]), spec("m2", BOTH), spec("m3", ["t1"]))
        topics = {"t0": 4, "t1": 4}
        result = uniform(members, topics)
        # t0 then t1 (same partitions per subscriber and subscriber count: by name), each
        # partition to the least loaded subscriber
        assert show(result) == {"m1": "t0-0 t0-2", "m2": "t0-1 t0-3 t1-2",
                                "m3": "t1-0 t1-1 t1-3"}
        # m3 leaves: t1 can only go to m2, so balancing hands m2's t0 partitions to m1
        after = uniform(regroup(members, result, leave=["m3"]), topics)
        assert show(after) == {"m1": "t0-0 t0-1 t0-2 t0-3", "m2": "t1-0 t1-1 t1-2 t1-3"}
        # m3 comes back: m2 hands it t1-3 and t1-2 (4/2/2), then m1 hands t0-3 to m2,
        # the least loaded subscriber of t0, for 3/3/2: balance before stickiness
        back = uniform(regroup(members, after, join=[spec("m3", ["t1"])]), topics)
        assert show(back) == {"m1": "t0-0 t0-1 t0-2", "m2": "t0-3 t1-0 t1-1", "m3": "t1-2 t1-3"}
        assert moved(after, back) == 3

    def test_heterogeneous_keeps_current_when_balanced_enough(self):
        members = group(spec("m1", ["t0"], {"t0": [0, 1]}), spec("m2", BOTH, {"t1": [0, 1]}),
                        spec("m3", BOTH, {"t0": [2], "t1": [2]}))
        result = uniform(members, T2x3)
        assert show(result) == {"m1": "t0-0 t0-1", "m2": "t1-0 t1-1", "m3": "t0-2 t1-2"}

    def test_topic_with_most_partitions_per_subscriber_goes_first(self):
        # t1 (6 partitions, one subscriber) is dealt before t0 (2 partitions, two), so
        # m1's load is known when t0 is dealt and t0 goes to m2.
        members = group(spec("m1", BOTH), spec("m2", ["t0"]))
        result = uniform(members, {"t0": 2, "t1": 6})
        assert show(result) == {"m1": "t1-0 t1-1 t1-2 t1-3 t1-4 t1-5", "m2": "t0-0 t0-1"}

    def test_rack_and_instance_id_are_ignored(self):
        plain = group(spec("m1", BOTH), spec("m2", BOTH))
        dressed = group(spec("m1", BOTH, rack="r1", instance_id="z"),
                        spec("m2", BOTH, rack="r2", instance_id="a"))
        assert uniform(plain, T2x3) == uniform(dressed, T2x3)


# -- range: worked examples --------------------------------------------------------------------

class TestRangeExamples:
    def test_javadoc_example(self):
        members = group(spec("M0", ["T1", "T2"]), spec("M1", ["T1", "T2"]))
        assert show(range_assign(members, {"T1": 3, "T2": 3})) == {
            "M0": "T1-0 T1-1 T2-0 T2-1", "M1": "T1-2 T2-2"}

    def test_extras_pile_up_on_the_first_members(self):
        members = group(*(spec(m, BOTH) for m in ("m1", "m2", "m3")))
        result = range_assign(members, {"t0": 4, "t1": 4})
        assert show(result) == {"m1": "t0-0 t0-1 t1-0 t1-1", "m2": "t0-2 t1-2", "m3": "t0-3 t1-3"}

    def test_static_members_first_by_instance_id(self):
        members = group(spec("a", ["t0"]), spec("b", ["t0"], instance_id="i2"),
                        spec("c", ["t0"], instance_id="i1"))
        assert show(range_assign(members, {"t0": 3})) == {"a": "t0-2", "b": "t0-1", "c": "t0-0"}

    def test_heterogeneous_subscriptions(self):
        members = group(spec("m1", ["t0"]), spec("m2", BOTH), spec("m3", ["t1"]))
        result = range_assign(members, {"t0": 3, "t1": 5})
        assert show(result) == {"m1": "t0-0 t0-1", "m2": "t0-2 t1-0 t1-1 t1-2", "m3": "t1-3 t1-4"}

    def test_current_is_ignored_and_ranges_shift_when_a_member_joins(self):
        # Kafka 3.9+ recomputes ranges; a dynamic member joining in the middle of the
        # member id order shifts the ranges after it (3.7/3.8 would have kept them).
        members = group(spec("m1", ["t0"]), spec("m3", ["t0"]))
        first = range_assign(members, {"t0": 4})
        assert show(first) == {"m1": "t0-0 t0-1", "m3": "t0-2 t0-3"}
        joined = regroup(members, first, join=[spec("m2", ["t0"])])
        assert show(range_assign(joined, {"t0": 4})) == {"m1": "t0-0 t0-1", "m2": "t0-2",
                                                        "m3": "t0-3"}
        stale = group(spec("m1", ["t0"], {"t0": [3]}), spec("m3", ["t0"], {"t0": [0, 1]}))
        assert range_assign(stale, {"t0": 4}) == first

    def test_more_members_than_partitions(self):
        members = group(*(spec(m, ["t0"]) for m in ("m1", "m2", "m3")))
        assert show(range_assign(members, {"t0": 2})) == {"m1": "t0-0", "m2": "t0-1", "m3": ""}

    def test_empty_group_no_topics_missing_topic(self):
        assert range_assign({}, T2x3) == {}
        members = group(spec("m1", ["missing"]), spec("m2", []))
        assert range_assign(members, T2x3) == {"m1": {}, "m2": {}}


# -- property tests ----------------------------------------------------------------------------
#
# One hypothesis test per assignor checks every property on each generated group: drawing
# the groups is what costs time, not assigning them.

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# member ids whose sorted order is not their insertion order, one beyond the BMP
MEMBER_IDS = ["m0", "m1", "m10", "m2", "B", "a", "zeta", "\u00e9", "\U0001f600", "\uff21"]
TOPIC_NAMES = ["t0", "t1", "t2", "t3"]
ANY_TOPIC = TOPIC_NAMES + ["gone"]  # subscribed to or claimed, but never exists


def bits(mask: int, pool: list):
    """The elements of ``pool`` whose bit is set in ``mask`` (one draw instead of many)."""
    return [x for i, x in enumerate(pool) if mask >> i & 1]


@st.composite
def groups(draw):
    """(members, topics): 0-8 members, 0-4 topics of 1-12 partitions, stale currents.

    A current may name missing or unsubscribed topics, partitions beyond the count, and
    partitions another member claims too. Instance ids are unique, as Kafka keeps them.
    Sets are drawn as bit masks: far fewer draws, which is where the time goes.
    """
    names = bits(draw(st.integers(0, 15)), TOPIC_NAMES)
    topics = {t: draw(st.integers(1, 12)) for t in names}
    member_ids = bits(draw(st.integers(0, 2 ** len(MEMBER_IDS) - 1)), MEMBER_IDS)[:8]
    # Sometimes everybody subscribes alike, to exercise the homogeneous rules too.
    same = draw(st.none() | st.integers(0, 31))
    members = {}
    for k, member_id in enumerate(member_ids):
        subscribed = draw(st.integers(0, 31)) if same is None else same
        current = {t: frozenset(bits(draw(st.integers(1, 2 ** 15 - 1)), list(range(15))))
                   for t in bits(draw(st.integers(0, 31)), ANY_TOPIC)}
        static = draw(st.booleans())
        members[member_id] = MemberSpec(
            member_id, frozenset(bits(subscribed, ANY_TOPIC)), current,
            rack="r1" if static and k % 2 else None,
            instance_id=f"i{(k * 7) % 10}" if static else None)
    return members, topics


def shuffled(members, topics, rnd):
    """The same input with every mapping built in another order."""
    ids = list(members)
    rnd.shuffle(ids)
    names = list(topics)
    rnd.shuffle(names)
    out = {}
    for m in ids:
        s = members[m]
        keys = list(s.current)
        rnd.shuffle(keys)
        out[m] = MemberSpec(m, frozenset(sorted(s.subscribed_topics, reverse=True)),
                            {k: frozenset(sorted(s.current[k], reverse=True)) for k in keys},
                            s.rack, s.instance_id)
    return out, {t: topics[t] for t in names}


def check_common(assign, members, topics, result, rnd):
    """Complete and exclusive, deterministic whatever the order, stable."""
    check_valid(members, topics, result)
    assert assign(*shuffled(members, topics, rnd)) == result
    assert assign(regroup(members, result), topics) == result


def check_uniform_balance(members, topics, result):
    load = counts(result)
    subs = {m: usable(s, topics) for m, s in members.items()}
    # The fixed point of the balancing pass: whoever holds a partition of a topic has at
    # most one more than any other subscriber of that topic ...
    for x, parts in result.items():
        for y in members:
            if any(t in subs[y] for t in parts):
                assert load[x] - load[y] <= 1, (x, y, show(result))
    # ... so members with identical subscriptions differ by at most one.
    for x in members:
        for y in members:
            if subs[x] == subs[y] and subs[x]:
                assert abs(load[x] - load[y]) <= 1


def check_uniform_homogeneous_sticky(members, topics, result):
    """Everybody keeps up to the minimum quota; the number kept is the best possible."""
    subs = {usable(s, topics) for s in members.values()}
    if len(subs) != 1 or not next(iter(subs)):
        return
    total = sum(topics[t] for t in next(iter(subs)))
    min_quota, extra = divmod(total, len(members))
    claims = deduped_claims(members, topics)
    kept = {m: {(t, p) for mm, t, p in flat(result) if mm == m} & claims[m] for m in members}
    for m in members:
        assert len(kept[m]) >= min(len(claims[m]), min_quota)
    # the best: the P % N extra slots go to the biggest holders
    biggest = sorted((len(c) for c in claims.values()), reverse=True)
    best = sum(min(n, min_quota + (1 if i < extra else 0)) for i, n in enumerate(biggest))
    assert sum(len(k) for k in kept.values()) == best


def check_range_ranges(members, topics, result):
    """Per topic, contiguous ranges over its subscribers, static ones first, extras first."""
    order = sorted(members, key=lambda m: (members[m].instance_id is None,
                                           java_key(members[m].instance_id or ""), java_key(m)))
    for topic, count in topics.items():
        subscribers = [m for m in order if topic in usable(members[m], topics)]
        if not subscribers:
            continue
        per_member, extra = divmod(count, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            size = per_member + (1 if i < extra else 0)
            assert result[m].get(topic, frozenset()) == frozenset(range(start, start + size))
            start += size


def check_range_co_partitions(members, topics):
    """Same subscriptions and same sizes: the same partition numbers of every topic."""
    if len({s.subscribed_topics for s in members.values()}) != 1 or not topics:
        return
    equal = dict.fromkeys(topics, max(topics.values()))
    for parts in range_assign(members, equal).values():
        assert len(set(parts.values())) <= 1, parts


def check_range_static_members(members, topics, result):
    """Static members' ranges follow their instance ids, not their member ids."""
    renamed = {}
    for m, s in members.items():
        new_id = f"new-{m}" if s.instance_id is not None else m
        renamed[new_id] = MemberSpec(new_id, s.subscribed_topics, {}, s.rack, s.instance_id)
    after = range_assign(renamed, topics)
    for m, s in members.items():
        if s.instance_id is not None:
            assert after[f"new-{m}"] == result[m]


@PROPS
@given(groups(), st.randoms(use_true_random=False))
def test_uniform_properties(sample, rnd):
    members, topics = sample
    result = uniform(members, topics)
    check_common(uniform, members, topics, result, rnd)
    check_uniform_balance(members, topics, result)
    check_uniform_homogeneous_sticky(members, topics, result)
    bare = {m: MemberSpec(m, s.subscribed_topics, s.current) for m, s in members.items()}
    assert uniform(bare, topics) == result  # rack and instance id play no part


@PROPS
@given(groups(), st.randoms(use_true_random=False))
def test_range_properties(sample, rnd):
    members, topics = sample
    result = range_assign(members, topics)
    check_common(range_assign, members, topics, result, rnd)
    check_range_ranges(members, topics, result)
    check_range_co_partitions(members, topics)
    check_range_static_members(members, topics, result)
    bare = {m: MemberSpec(m, s.subscribed_topics, {}, None, s.instance_id)
            for m, s in members.items()}
    assert range_assign(bare, topics) == result  # current and rack play no part
