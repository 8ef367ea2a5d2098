"""Assignors: the worked examples of Java's assignor javadocs, Java user data layouts, and
property tests.

Pure tests, no broker. The examples use the javadocs' notation ("t0p1" = topic t0,
partition 1). Where a javadoc shows one of several assignments that satisfy the rules
(sticky), the rules are asserted and its figures only where they are forced.
"""

from __future__ import annotations

import doctest
import itertools
import re
import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import client.consumer.assignors as assignors_pkg
from client.consumer.assignors import (
    BUILTIN_ASSIGNORS, Assignor, CooperativeStickyAssignor, MemberSubscription, RangeAssignor,
    RoundRobinAssignor, StickyAssignor, TopicPartition, empty_assignment, member_from_subscription,
    rebalance_protocol, resolve_assignors,
)
from client.consumer.assignors import balance, base, cooperative_sticky, range as range_mod
from client.consumer.assignors import roundrobin, sticky
from client.consumer.assignors.balance import balanced_sticky_assignment, resolve_owners
from client.consumer.assignors.cooperative_sticky import member_generation
from client.consumer.assignors.sticky import (
    UserDataError, claims_from_user_data, decode_sticky_user_data, encode_sticky_user_data,
)
from protocol.consumer_protocol import Subscription, decode_subscription, encode_subscription

EAGER_ASSIGNORS = [RangeAssignor, RoundRobinAssignor, StickyAssignor]
ALL_ASSIGNORS = EAGER_ASSIGNORS + [CooperativeStickyAssignor]


# -- helpers -------------------------------------------------------------------------------

def tps(text: str) -> set[TopicPartition]:
    """'t0p0 t1p2' (javadoc notation) -> {TopicPartition('t0', 0), TopicPartition('t1', 2)}."""
    out = set()
    for token in text.replace("、", " ").replace(",", " ").split():
        match = re.fullmatch(r"(t\d+)p(\d+)", token)
        assert match, token
        out.add(TopicPartition(match[1], int(match[2])))
    return out


def as_sets(result) -> dict[str, set[TopicPartition]]:
    return {m: set(v) for m, v in result.items()}


def member(member_id, topics, owned=(), generation=-1, user_data=None, instance=None):
    return MemberSubscription(member_id, list(topics), list(owned), generation, user_data,
                              None, instance)


def all_partitions(members, partitions_per_topic) -> set[TopicPartition]:
    """Every partition some member subscribes to and metadata knows."""
    topics = {t for m in members.values() for t in m.topics}
    return {TopicPartition(t, p) for t in topics for p in range(partitions_per_topic.get(t, 0))}


def check_valid(members, partitions_per_topic, result, complete=True):
    """The contract of every assignor (base.py docstring)."""
    assert set(result) == set(members)
    flat = [tp for v in result.values() for tp in v]
    assert len(flat) == len(set(flat)), "a partition assigned twice"
    for member_id, assigned in result.items():
        for tp in assigned:
            assert isinstance(tp, tuple) and tp.topic in members[member_id].topics, (member_id, tp)
            assert 0 <= tp.partition < partitions_per_topic[tp.topic]
    if complete:
        assert set(flat) == all_partitions(members, partitions_per_topic)


def counts(result) -> dict[str, int]:
    return {m: len(v) for m, v in result.items()}


def sum_squares(result) -> int:
    return sum(n * n for n in counts(result).values())


def locally_balanced(members, result) -> bool:
    """No partition could move to another subscriber holding two or more fewer."""
    n = counts(result)
    for owner, assigned in result.items():
        for tp in assigned:
            for other, sub in members.items():
                if tp.topic in sub.topics and n[owner] >= n[other] + 2:
                    return False
    return True


def valid_previous_owner(members, partitions_per_topic, claims) -> dict[TopicPartition, str]:
    """The owner rule, written out independently: highest generation, ties count for nobody."""
    owner = {}
    for tp in all_partitions(members, partitions_per_topic):
        bids = [(gen, m) for m, (gen, owned) in claims.items()
                if m in members and tp.topic in members[m].topics and tp in set(owned)]
        winners = [m for g, m in bids if g == max(bids)[0]]
        if len(winners) == 1:
            owner[tp] = winners[0]
    return owner


def kept(result, owner) -> int:
    return sum(1 for m, v in result.items() for tp in v if owner.get(tp) == m)


def sticky_members(members, claims):
    """The same group with each member's claim carried as Java sticky V1 user data."""
    def user_data(m):
        return encode_sticky_user_data(claims[m][1], claims[m][0]) if m in claims else None
    return {m: member(m, s.topics, user_data=user_data(m)) for m, s in members.items()}


# -- the worked examples of RangeAssignor's, RoundRobinAssignor's and StickyAssignor's javadoc

@pytest.mark.parametrize("size, c0, c1", [(4, "t0p0 t0p1 t1p0 t1p1", "t0p2 t0p3 t1p2 t1p3"),
                                           (3, "t0p0 t0p1 t1p0 t1p1", "t0p2 t1p2")])
def test_javadoc_range_two_consumers_two_topics(size, c0, c1):
    members = {m: member(m, ["t0", "t1"]) for m in ("c0", "c1")}
    result = RangeAssignor().assign(members, {"t0": size, "t1": size})
    assert as_sets(result) == {"c0": tps(c0), "c1": tps(c1)}


class TestJavadocRoundRobin:
    def test_identical_subscriptions(self):
        members = {m: member(m, ["t0", "t1"]) for m in ("c0", "c1")}
        result = RoundRobinAssignor().assign(members, {"t0": 3, "t1": 3})
        assert as_sets(result) == {"c0": tps("t0p0 t0p2 t1p1"), "c1": tps("t0p1 t1p0 t1p2")}

    def test_differing_subscriptions(self):
        members = {"c0": member("c0", ["t0"]), "c1": member("c1", ["t0", "t1"]),
                   "c2": member("c2", ["t0", "t1", "t2"])}
        result = RoundRobinAssignor().assign(members, {"t0": 1, "t1": 2, "t2": 3})
        assert as_sets(result) == {"c0": tps("t0p0"), "c1": tps("t1p0"),
                                   "c2": tps("t1p1 t2p0 t2p1 t2p2")}

    def test_javadoc_roundrobin_after_c0_leaves(self):
        # StickyAssignor's javadoc (example 2): roundrobin once c0 of the example above left
        members = {"c1": member("c1", ["t0", "t1"]), "c2": member("c2", ["t0", "t1", "t2"])}
        result = RoundRobinAssignor().assign(members, {"t0": 1, "t1": 2, "t2": 3})
        assert as_sets(result) == {"c1": tps("t0p0 t1p1"), "c2": tps("t1p0 t2p0 t2p1 t2p2")}


JAVADOC_TOPICS = ["t0", "t1", "t2", "t3"]
JAVADOC_SIZES = dict.fromkeys(JAVADOC_TOPICS, 2)
JAVADOC_FIRST = {"c0": tps("t0p0 t1p1 t3p0"), "c1": tps("t0p1 t2p0 t3p1"), "c2": tps("t1p0 t2p1")}


class TestJavadocSticky:
    """3 consumers x 4 topics x 2 partitions, then c1 leaves; and differing subscriptions."""

    @pytest.mark.parametrize("assignor", [StickyAssignor, CooperativeStickyAssignor])
    def test_first_assignment_is_balanced(self, assignor):
        members = {m: member(m, JAVADOC_TOPICS) for m in ("c0", "c1", "c2")}
        result = assignor().assign(members, JAVADOC_SIZES)
        check_valid(members, JAVADOC_SIZES, result)
        assert sorted(counts(result).values()) == [2, 3, 3]  # forced: 8 over 3, within one

    @pytest.mark.parametrize("first", ["javadoc", "ours"])
    def test_c1_leaves_survivors_keep_everything(self, first):
        a = StickyAssignor()
        if first == "javadoc":
            previous = JAVADOC_FIRST
        else:
            three = {m: member(m, JAVADOC_TOPICS) for m in ("c0", "c1", "c2")}
            previous = as_sets(a.assign(three, JAVADOC_SIZES))
        survivors = {m: member(m, JAVADOC_TOPICS,
                               user_data=a.subscription_user_data(JAVADOC_TOPICS,
                                                                  sorted(previous[m]), 1))
                     for m in ("c0", "c2")}
        result = as_sets(a.assign(survivors, JAVADOC_SIZES))
        check_valid(survivors, JAVADOC_SIZES, result)
        assert counts(result) == {"c0": 4, "c2": 4}
        assert result["c0"] >= previous["c0"] and result["c2"] >= previous["c2"]
        if first == "javadoc":  # forced from the javadoc's first figure: what c0 and c2 keep
            assert result["c0"] >= tps("t0p0 t1p1 t3p0") and result["c2"] >= tps("t1p0 t2p1")

    def test_c1_leaves_under_cooperative_moves_at_once(self):
        # c1 left the group, so nobody live owns its partitions: nothing is withheld
        survivors = {m: member(m, JAVADOC_TOPICS, sorted(JAVADOC_FIRST[m]), generation=1)
                     for m in ("c0", "c2")}
        result = as_sets(CooperativeStickyAssignor().assign(survivors, JAVADOC_SIZES))
        check_valid(survivors, JAVADOC_SIZES, result)
        assert counts(result) == {"c0": 4, "c2": 4}
        assert result["c0"] >= JAVADOC_FIRST["c0"] and result["c2"] >= JAVADOC_FIRST["c2"]

    @pytest.mark.parametrize("assignor", [StickyAssignor, CooperativeStickyAssignor])
    def test_differing_subscriptions_then_c0_leaves(self, assignor):
        sizes = {"t0": 1, "t1": 2, "t2": 3}
        subs = {"c0": ["t0"], "c1": ["t0", "t1"], "c2": ["t0", "t1", "t2"]}
        a = assignor()
        members = {m: member(m, t, user_data=a.subscription_user_data(t, [], -1))
                   for m, t in subs.items()}
        first = as_sets(a.assign(members, sizes))
        assert first == {"c0": tps("t0p0"), "c1": tps("t1p0 t1p1"),
                         "c2": tps("t2p0 t2p1 t2p2")}  # forced: the only most-balanced one
        survivors = {m: member(m, subs[m], sorted(first[m]), 1,
                               a.subscription_user_data(subs[m], sorted(first[m]), 1))
                     for m in ("c1", "c2")}
        second = as_sets(a.assign(survivors, sizes))
        assert second == {"c1": tps("t1p0 t1p1 t0p0"), "c2": tps("t2p0 t2p1 t2p2")}


def test_kip429_scale_out_takes_two_rebalances_and_spares_b():
    """KIP-429: A has two partitions, B one; C joins. Only one partition moves, in two steps."""
    def group(owned, generation):
        return {m: member(m, ["t"], [TopicPartition("t", p) for p in owned.get(m, [])],
                          generation) for m in ("A", "B", "C")}

    first = CooperativeStickyAssignor().assign(group({"A": [0, 1], "B": [2]}, 1), {"t": 3})
    assert counts(first) == {"A": 1, "B": 1, "C": 0} and first["B"] == [TopicPartition("t", 2)]
    revoked = {TopicPartition("t", 0), TopicPartition("t", 1)} - set(first["A"])
    owned = {m: [tp.partition for tp in v] for m, v in first.items()}
    second = CooperativeStickyAssignor().assign(group(owned, 2), {"t": 3})
    assert as_sets(second) == {"A": set(first["A"]), "B": {TopicPartition("t", 2)}, "C": revoked}


# -- ordering, metadata edge cases ----------------------------------------------------------

class TestOrderingAndEdges:
    def test_static_members_first_by_instance_id(self):
        # Java MemberInfo: static members (instance id) before dynamic ones, by instance id
        members = {"a": member("a", ["t"], instance="z"), "b": member("b", ["t"]),
                   "c": member("c", ["t"], instance="y")}
        assert as_sets(RangeAssignor().assign(members, {"t": 5})) == {
            "c": {TopicPartition("t", 0), TopicPartition("t", 1)},
            "a": {TopicPartition("t", 2), TopicPartition("t", 3)}, "b": {TopicPartition("t", 4)}}
        assert as_sets(RoundRobinAssignor().assign(members, {"t": 4})) == {
            "c": {TopicPartition("t", 0), TopicPartition("t", 3)},
            "a": {TopicPartition("t", 1)}, "b": {TopicPartition("t", 2)}}

    def test_member_ids_sort_like_java_strings(self):
        # Python (code points): U+FF5E < U+1F600. Java (UTF-16 code units): U+1F600 is the
        # surrogate pair D83D DE00, and 0xD83D < 0xFF5E, so the emoji sorts first.
        members = {"\U0001F600": member("\U0001F600", ["t"]), "\uFF5E": member("\uFF5E", ["t"])}
        result = RangeAssignor().assign(members, {"t": 3})
        assert len(result["\U0001F600"]) == 2 and len(result["\uFF5E"]) == 1

    @pytest.mark.parametrize("assignor", ALL_ASSIGNORS)
    def test_topics_without_metadata_and_empty_subscriptions(self, assignor):
        members = {"a": member("a", ["known", "unknown"]), "b": member("b", []),
                   "c": member("c", ["unknown"])}
        result = assignor().assign(members, {"known": 2, "empty": 0})
        assert as_sets(result) == {"a": {TopicPartition("known", 0), TopicPartition("known", 1)},
                                   "b": set(), "c": set()}

    @pytest.mark.parametrize("assignor", ALL_ASSIGNORS)
    def test_no_members(self, assignor):
        assert assignor().assign({}, {"t": 3}) == {}


# -- user data in the Java layouts ----------------------------------------------------------

def java_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


class TestStickyUserData:
    V0_BODY = (struct.pack(">i", 2)
               + java_string("t1") + struct.pack(">i", 1) + struct.pack(">i", 2)
               + java_string("t0") + struct.pack(">i", 2) + struct.pack(">ii", 0, 1))

    def test_encode_is_java_v1(self):
        owned = [TopicPartition("t1", 2), TopicPartition("t0", 1), TopicPartition("t0", 0)]
        expected = (struct.pack(">i", 2)
                    + java_string("t0") + struct.pack(">iii", 2, 0, 1)
                    + java_string("t1") + struct.pack(">ii", 1, 2)
                    + struct.pack(">i", 7))
        assert encode_sticky_user_data(owned, 7) == expected
        assert StickyAssignor().subscription_user_data(["t0", "t1"], owned, 7) == expected

    @pytest.mark.parametrize("tail, generation", [(struct.pack(">i", 9), 9), (b"", -1)])
    def test_decode_v1_and_v0_any_topic_order(self, tail, generation):
        owned, got = decode_sticky_user_data(self.V0_BODY + tail)  # V0 has no generation
        assert set(owned) == tps("t0p0 t0p1 t1p2") and got == generation

    def test_round_trip_with_non_ascii_topic(self):
        owned = [TopicPartition("tópico", 3), TopicPartition("t", 0)]
        data = encode_sticky_user_data(owned, 4)
        assert sorted(decode_sticky_user_data(data)[0]) == sorted(owned)
        assert decode_sticky_user_data(data)[1] == 4

    def test_empty_assignment_and_first_join(self):
        assert encode_sticky_user_data([], 3) == struct.pack(">ii", 0, 3)
        assert StickyAssignor().subscription_user_data(["t"], [], -1) is None  # Java: null

    @pytest.mark.parametrize("data", [
        b"", b"\x00\x00", struct.pack(">i", -1), struct.pack(">i", 0x7FFFFFFF),
        struct.pack(">i", 1) + java_string("t") + struct.pack(">i", 1000),
        struct.pack(">i", 1) + struct.pack(">h", 50) + b"t",
        struct.pack(">i", 1) + struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">i", 0),
    ])
    def test_bad_bytes_are_rejected_and_claim_nothing(self, data):
        with pytest.raises(UserDataError):
            decode_sticky_user_data(data)
        assert claims_from_user_data(data) == (-1, [])

    def test_leader_reads_previous_assignment_through_the_wire_format(self):
        # member bytes as they travel in JoinGroup: subscription v3 carrying sticky user data
        previous = [TopicPartition("t", 1), TopicPartition("t", 2)]
        data = encode_subscription(Subscription(
            topics=["t"], user_data=StickyAssignor().subscription_user_data(["t"], previous, 3)))
        members = {"b": member_from_subscription("b", decode_subscription(data)),
                   "a": member("a", ["t"])}
        result = StickyAssignor().assign(members, {"t": 4})
        assert set(result["b"]) == set(previous) and len(result["a"]) == 2

    @pytest.mark.parametrize("gen_a, gen_b, winner", [(5, 4, "a"), (4, 5, "b")])
    def test_higher_generation_wins_a_conflict(self, gen_a, gen_b, winner):
        tp = TopicPartition("t", 0)
        members = {m: member(m, ["t"], user_data=encode_sticky_user_data([tp], g))
                   for m, g in (("a", gen_a), ("b", gen_b))}
        assert StickyAssignor().assign(members, {"t": 2})[winner] == [tp]


class TestCooperativeUserData:
    @pytest.mark.parametrize("generation", [-1, 0, 5, 2**31 - 1])
    def test_user_data_is_the_int32_generation(self, generation):
        data = CooperativeStickyAssignor().subscription_user_data(["t"], [], generation)
        assert data == struct.pack(">i", generation)

    def test_generation_field_first_then_user_data(self):
        assert member_generation(member("m", ["t"], generation=3,
                                        user_data=struct.pack(">i", 9))) == 3
        assert member_generation(member("m", ["t"], user_data=struct.pack(">i", 9))) == 9
        librdkafka_style = encode_sticky_user_data([TopicPartition("t", 0)], 6)
        assert member_generation(member("m", ["t"], user_data=librdkafka_style)) == 6
        assert member_generation(member("m", ["t"], user_data=b"\x01\x02")) == -1
        assert member_generation(member("m", ["t"], user_data=b"")) == -1

    def test_owned_partitions_come_from_the_subscription_fields(self):
        data = encode_subscription(Subscription(
            topics=["t"], owned_partitions={"t": [0, 1, 2]}, generation_id=4,
            user_data=struct.pack(">i", 4)))
        members = {"old": member_from_subscription("old", decode_subscription(data)),
                   "new": member("new", ["t"])}
        result = CooperativeStickyAssignor().assign(members, {"t": 4})
        # "old" keeps two (the target is 2/2), the third is withheld, t-3 goes to "new"
        assert len(result["old"]) == 2
        assert set(result["old"]) < {TopicPartition("t", p) for p in (0, 1, 2)}
        assert result["new"] == [TopicPartition("t", 3)]

    def test_higher_generation_wins_and_the_loser_does_not_get_it(self):
        tp = TopicPartition("t", 0)
        members = {"a": member("a", ["t"], [tp], 5), "b": member("b", ["t"], [tp], 4)}
        result = CooperativeStickyAssignor().assign(members, {"t": 2})
        assert result["a"] == [tp] and result["b"] == [TopicPartition("t", 1)]


def test_resolve_owners_rules():
    t0, t1, t2, u0 = (TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2),
                      TopicPartition("u", 0))
    owners = resolve_owners({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 2, "u": 1}, {
        "a": (3, [t0, t1, t2, u0]),   # t2 no longer exists, a does not subscribe to u
        "b": (3, [t1]),               # same generation as a on t1: nobody owns t1
        "c": (2, [t0]),               # older than a on t0
        "gone": (9, [t0]),            # not in the group
    })
    assert owners == {t0: "a"}


# -- registry, protocols, custom assignors, docstring examples ------------------------------

class TestRegistry:
    def test_names_and_the_protocol_they_allow(self):
        assert set(BUILTIN_ASSIGNORS) == {"range", "roundrobin", "sticky", "cooperative-sticky"}
        assert [a.name for a in resolve_assignors(["roundrobin", "range"])] == ["roundrobin",
                                                                                "range"]
        assert rebalance_protocol(resolve_assignors(["cooperative-sticky"])) == "cooperative"
        assert rebalance_protocol(resolve_assignors(["cooperative-sticky", "range"])) == "eager"
        assert rebalance_protocol(resolve_assignors(["sticky"])) == "eager"

    def test_custom_assignor_plugs_in(self):
        class Everything(Assignor):
            name = "everything-to-first"
            supported_protocols = ("eager", "cooperative")

            def assign(self, members, partitions_per_topic):
                result = empty_assignment(members)
                for first in sorted(members)[:1]:
                    result[first] = sorted(all_partitions(members, partitions_per_topic))
                return result

        chosen = resolve_assignors([Everything, "range"])
        assert chosen[0].name == "everything-to-first" and rebalance_protocol(chosen) == "eager"
        assert rebalance_protocol(resolve_assignors(Everything())) == "cooperative"
        members = {m: member(m, ["t"]) for m in ("x", "y")}
        check_valid(members, {"t": 2}, chosen[0].assign(members, {"t": 2}))

    @pytest.mark.parametrize("bad, error", [(["nope"], ValueError), ([], ValueError),
                                            (["range", "range"], ValueError), ([42], TypeError)])
    def test_bad_strategies(self, bad, error):
        with pytest.raises(error):
            resolve_assignors(bad)


@pytest.mark.parametrize("module", [assignors_pkg, base, range_mod, roundrobin, balance, sticky,
                                    cooperative_sticky], ids=lambda m: m.__name__)
def test_docstring_worked_examples(module):
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert attempted > 0 and failed == 0


# -- property tests -------------------------------------------------------------------------

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


@st.composite
def groups(draw, identical=False, max_members=8, max_topics=5, max_partitions=8, owned=True):
    """(members, partitions_per_topic, claims): claims are member -> (generation, owned)."""
    n_topics = draw(st.integers(1, max_topics))
    topics = [f"t{i}" for i in range(n_topics)]
    sizes = {t: draw(st.integers(1, max_partitions)) for t in topics}
    ids = draw(st.lists(st.text("abcxyz", min_size=1, max_size=3), min_size=1,
                        max_size=max_members, unique=True))
    topic_sets = st.lists(st.sampled_from(topics), min_size=1, unique=True)
    subs = (dict.fromkeys(ids, draw(topic_sets)) if identical
            else {m: draw(topic_sets) for m in ids})
    claims = {m: (-1, []) for m in ids}
    if owned:
        generations = {m: draw(st.integers(-1, 4)) for m in ids}
        owned_by = {m: [] for m in ids}
        universe = [TopicPartition(t, p) for t in topics for p in range(sizes[t] + 1)]
        for tp in universe:  # includes one partition past the end of each topic
            holder = draw(st.sampled_from(ids + [None, None]))
            if holder is not None:
                owned_by[holder].append(tp)
            if draw(st.integers(0, 9)) == 0:  # now and then a second, conflicting claim
                owned_by[draw(st.sampled_from(ids))].append(tp)
        claims = {m: (generations[m], sorted(set(owned_by[m]))) for m in ids}
    members = {m: member(m, subs[m]) for m in ids}
    return members, sizes, claims


def cooperative_members(members, claims):
    return {m: member(m, s.topics, claims[m][1], claims[m][0],
                      struct.pack(">i", claims[m][0])) for m, s in members.items()}


def run(assignor, members, sizes, claims):
    """Previous assignments as each assignor reads them: sticky user data or subscription."""
    if assignor is StickyAssignor:
        members = sticky_members(members, claims)
    elif assignor is CooperativeStickyAssignor:
        members = cooperative_members(members, claims)
    return assignor().assign(members, sizes)


@PROPERTY_SETTINGS
@given(groups(), st.sampled_from(EAGER_ASSIGNORS))
def test_eager_assignors_assign_every_partition_once(group, assignor):
    members, sizes, claims = group
    check_valid(members, sizes, run(assignor, members, sizes, claims))


@PROPERTY_SETTINGS
@given(groups(identical=True), st.sampled_from([RoundRobinAssignor, StickyAssignor]))
def test_identical_subscriptions_balanced_within_one(group, assignor):
    n = counts(run(assignor, *group)).values()
    assert max(n) - min(n) <= 1


@PROPERTY_SETTINGS
@given(groups(owned=False))
def test_range_gives_each_topic_in_contiguous_ranges(group):
    members, sizes, _ = group
    result = RangeAssignor().assign(members, sizes)
    check_valid(members, sizes, result)
    for topic, size in sizes.items():
        consumers = sorted(m for m, s in members.items() if topic in s.topics)  # no instance ids
        if not consumers:
            continue
        ranges = [[tp.partition for tp in result[m] if tp.topic == topic] for m in consumers]
        assert [p for r in ranges for p in r] == list(range(size))  # in order, contiguous
        lengths = [len(r) for r in ranges]
        assert lengths == sorted(lengths, reverse=True) and lengths[0] - lengths[-1] <= 1


@PROPERTY_SETTINGS
@given(groups(identical=True, owned=False))
def test_roundrobin_identical_subscriptions_deal_in_turn(group):
    members, sizes, _ = group
    result = RoundRobinAssignor().assign(members, sizes)
    order = sorted(members)
    topics = sorted(next(iter(members.values())).topics)
    dealt = [TopicPartition(t, p) for t in topics for p in range(sizes[t])]
    for i, m in enumerate(order):
        assert result[m] == dealt[i::len(order)]


@PROPERTY_SETTINGS
@given(groups())
def test_sticky_result_is_locally_balanced_and_a_fixed_point(group):
    """No single move would even out counts; fed back as the previous assignment, nothing moves."""
    members, sizes, claims = group
    result = run(StickyAssignor, members, sizes, claims)
    check_valid(members, sizes, result)
    assert locally_balanced(members, result)
    again = run(StickyAssignor, members, sizes, {m: (7, result[m]) for m in members})
    assert as_sets(again) == as_sets(result)


@settings(max_examples=300, deadline=None)
@given(groups(max_members=3, max_topics=3, max_partitions=3))
def test_sticky_is_optimal_against_brute_force(group):
    """Exactly: smallest sum of squares, then the most partitions kept by their valid owner."""
    members, sizes, claims = group
    universe = sorted(all_partitions(members, sizes))
    assume(len(universe) <= 8)
    owner = valid_previous_owner(members, sizes, claims)
    choices = [[m for m in members if tp.topic in members[m].topics] for tp in universe]
    best = None
    for pick in itertools.product(*choices):
        candidate = {m: [tp for tp, who in zip(universe, pick) if who == m] for m in members}
        score = (sum_squares(candidate), -kept(candidate, owner))
        best = score if best is None or score < best else best
    result = run(StickyAssignor, members, sizes, claims)
    assert (sum_squares(result), -kept(result, owner)) == best


@PROPERTY_SETTINGS
@given(groups(identical=True))
def test_sticky_identical_subscriptions_move_the_minimum(group):
    """With identical subscriptions the number kept is the known maximum for counts q / q+1."""
    members, sizes, claims = group
    owner = valid_previous_owner(members, sizes, claims)
    result = run(StickyAssignor, members, sizes, claims)
    q, r = divmod(len(all_partitions(members, sizes)), len(members))
    owned = [list(owner.values()).count(m) for m in members]
    assert kept(result, owner) == sum(min(c, q) for c in owned) + min(r, sum(c > q for c in owned))


@PROPERTY_SETTINGS
@given(groups(identical=True, owned=False), st.data())
def test_sticky_members_leaving_survivors_keep_everything(group, data):
    members, sizes, _ = group
    assume(len(members) >= 2)
    first = run(StickyAssignor, members, sizes, {})
    leaving = data.draw(st.lists(st.sampled_from(sorted(members)), min_size=1,
                                 max_size=len(members) - 1, unique=True))
    survivors = {m: s for m, s in members.items() if m not in leaving}
    result = run(StickyAssignor, survivors, sizes, {m: (1, first[m]) for m in survivors})
    check_valid(survivors, sizes, result)
    for m in survivors:
        assert set(result[m]) >= set(first[m])
    n = counts(result).values()
    assert max(n) - min(n) <= 1


@PROPERTY_SETTINGS
@given(groups())
def test_cooperative_never_hands_a_partition_between_live_members(group):
    members, sizes, claims = group
    result = run(CooperativeStickyAssignor, members, sizes, claims)
    check_valid(members, sizes, result, complete=False)
    claimed_by = {}
    for m, (_, owned) in claims.items():
        for tp in owned:
            claimed_by.setdefault(tp, set()).add(m)
    for m, assigned in result.items():
        for tp in assigned:  # added to m only if no live member still owns it
            assert m in claimed_by.get(tp, ()) or not claimed_by.get(tp), (m, tp)
    withheld = all_partitions(members, sizes) - {tp for v in result.values() for tp in v}
    for tp in withheld:  # only partitions a live member must revoke first are held back
        assert claimed_by.get(tp)
    # what was given is the sticky target minus what is withheld
    target = balanced_sticky_assignment(
        {m: s.topics for m, s in members.items()}, sizes, claims,
        base.sorted_member_ids(members))
    for m in members:
        assert set(result[m]) <= set(target[m])


@PROPERTY_SETTINGS
@given(groups())
def test_cooperative_second_rebalance_completes_and_is_balanced(group):
    members, sizes, claims = group
    first = run(CooperativeStickyAssignor, members, sizes, claims)
    generation = max(g for g, _ in claims.values()) + 1
    second = run(CooperativeStickyAssignor, members, sizes,
                 {m: (generation, first[m]) for m in members})
    check_valid(members, sizes, second)  # complete: nothing withheld any more
    for m in members:
        assert set(second[m]) >= set(first[m])  # and nobody revokes anything
    fresh = run(StickyAssignor, members, sizes, {})
    assert sum_squares(second) == sum_squares(fresh)  # as balanced as the best possible
    assert locally_balanced(members, second)
    if len({tuple(sorted(s.topics)) for s in members.values()}) == 1:
        n = counts(second).values()
        assert max(n) - min(n) <= 1
