"""Consumer groups against the real broker: librdkafka groups under every assignor, eager
and cooperative rebalances, eviction of a killed member, offsets across kill -9 of the
broker, static membership, and bad group requests over raw sockets.

A group is "stable" here when every member owns at least one partition and every partition
is owned by exactly one member, as the members' own rebalance callbacks tell it; the broker's
view (DescribeGroups, the event log) is checked against that.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest
from confluent_kafka import ConsumerGroupState, TopicPartition

from broker.events import read_events
from protocol.consumer_protocol import (
    Assignment, Subscription, decode_assignment, encode_assignment, encode_subscription,
)
from protocol.errors import ErrorCode
from protocol.messages import (
    DELETE_GROUPS, DESCRIBE_GROUPS, FIND_COORDINATOR, HEARTBEAT, JOIN_GROUP, LEAVE_GROUP,
    LIST_GROUPS, OFFSET_COMMIT, OFFSET_FETCH, SYNC_GROUP,
)
from tests.interop.group_helpers import (
    GroupMember, SubprocessMember, all_partitions, broker_assignment, describe_group,
    disjoint_cover, pump, pump_for, rebalance_served,
)
from tests.interop.raw import Raw
from tests.interop.librdkafka import create_topic, produce
from tests.util import unique

pytestmark = pytest.mark.interop

FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
SHARED_BROKER_OVERRIDES = FAST_GROUPS
CONVERGE_S = 30
PARTITIONS = 6


def _group_events(broker, group: str, *types: str) -> list[dict]:
    return [e for e in read_events(broker.data_dir)
            if e.get("group") == group and (not types or e["type"] in types)]


def _produce_values(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    produce(bootstrap, topic, [(None, v, None, p) for p, v in values])


def _close_all(members) -> None:
    for m in members:
        try:
            m.close()
        except Exception:  # keep closing the others
            pass


# -- 1. every assignor: one owner per partition, each record consumed once ---------------------

@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_three_members_own_each_partition_once_and_consume_each_record_once(
        shared_broker, strategy):
    bootstrap = shared_broker.bootstrap
    topic, group = unique(f"g1-{strategy}"), unique(f"grp-{strategy}")
    create_topic(bootstrap, topic, PARTITIONS)
    everything = all_partitions(topic, PARTITIONS)
    members = [GroupMember(bootstrap, group, [topic], f"{strategy}-c{i}",
                           **{"partition.assignment.strategy": strategy}) for i in range(3)]
    try:
        pump(members, lambda: disjoint_cover([m.owned for m in members], everything),
             CONVERGE_S, f"3 {strategy} members to own the 6 partitions once each")
        pump(members, lambda: rebalance_served(shared_broker, group, members), CONVERGE_S,
             "every member to serve the last rebalance's assign callback")
        assert [m.assignment() for m in members] == [m.owned for m in members]
        assert disjoint_cover([m.owned for m in members], everything)

        # the broker agrees: Stable, three members, the same assignment, the chosen assignor
        description = describe_group(bootstrap, group)
        assert description.state == ConsumerGroupState.STABLE
        assert description.partition_assignor == strategy
        assert broker_assignment(description) == {m.name: m.owned for m in members}

        marks = [m.mark() for m in members]
        n = 600
        _produce_values(bootstrap, topic, [(i % PARTITIONS, b"%d" % i) for i in range(n)])
        pump(members, lambda: sum(len(m.messages) for m in members) >= n, CONVERGE_S,
             f"{n} records consumed by the group")
        counts = Counter(v for m in members for v in m.values())
        assert counts == Counter(b"%d" % i for i in range(n)), "each record exactly once"
        for m in members:
            assert all((t, p) in m.owned for t, p, *_ in m.messages), \
                f"{m.name} consumed a partition it does not own"
            assert not m.errors
        # the group stayed stable while it consumed
        assert [m.events[mark:] for m, mark in zip(members, marks)] == [[], [], []]
        final_owned = {m.name: {f"{t}-{p}" for t, p in m.owned} for m in members}
    finally:
        _close_all(members)

    # the event log tells the same story
    states = _group_events(shared_broker, group, "group_state")
    transitions = [(e["old_state"], e["new_state"]) for e in states]
    for step in [("Empty", "PreparingRebalance"), ("PreparingRebalance", "CompletingRebalance"),
                 ("CompletingRebalance", "Stable")]:
        assert step in transitions, transitions
    assert all(a[1] == b[0] for a, b in zip(transitions, transitions[1:])), transitions
    stable = [e for e in states if e["new_state"] == "Stable"]
    generation = max(e["generation"] for e in stable)
    final = [e for e in stable if e["generation"] == generation][-1]
    assert (final["members"], final["protocol"], final["protocol_type"]) == (3, strategy,
                                                                             "consumer")
    assigned = [e for e in _group_events(shared_broker, group, "group_assignment")
                if e["generation"] == generation]
    by_client = {e["client_id"]: set(e["assigned"]) for e in assigned}
    assert by_client == final_owned
    assert sum(len(e["assigned"]) for e in assigned) == PARTITIONS
    assert sum(e["leader"] for e in assigned) == 1


# -- 2. eager revokes everything; cooperative only what moves ---------------------------------

@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_third_member_joins_eager_revokes_all_cooperative_only_what_moves(
        shared_broker, strategy):
    bootstrap = shared_broker.bootstrap
    topic, group = unique(f"g2-{strategy}"), unique(f"grp2-{strategy}")
    create_topic(bootstrap, topic, PARTITIONS)
    everything = all_partitions(topic, PARTITIONS)
    conf = {"partition.assignment.strategy": strategy}
    old = [GroupMember(bootstrap, group, [topic], f"old{i}", **conf) for i in range(2)]
    members = list(old)
    try:
        pump(old, lambda: disjoint_cover([m.owned for m in old], everything), CONVERGE_S,
             "2 members to share the 6 partitions")
        first = [(p, b"a%d" % p) for p in range(PARTITIONS)]
        _produce_values(bootstrap, topic, first)
        pump(old, lambda: sum(len(m.messages) for m in old) >= PARTITIONS, CONVERGE_S,
             "the first batch consumed")
        before = [set(m.owned) for m in old]
        marks = [m.mark() for m in old]

        new = GroupMember(bootstrap, group, [topic], "new", **conf)
        members.append(new)
        # records produced while the group rebalances
        _produce_values(bootstrap, topic, [(p, b"b%d" % p) for p in range(PARTITIONS)])
        pump(members, lambda: disjoint_cover([m.owned for m in members], everything),
             CONVERGE_S, "3 members to own the 6 partitions once each")
        assert new.events and new.events[0][0] == "assign"

        for m, owned, mark in zip(old, before, marks):
            since = m.events[mark:]
            assert not [e for e in since if e[0] == "lost"], since
            revoked = [parts for kind, parts in since if kind == "revoke"]
            assert revoked, f"{m.name} saw no revocation: {since}"
            if strategy == "range":
                # eager: the whole assignment goes back before the member rejoins
                assert revoked[0] == owned, since
                assert m.min_owned_since_mark == 0
            else:
                # cooperative: only the partitions that move are revoked, the rest stay
                kept = owned & m.owned
                moved = owned - m.owned
                assert kept and moved, (owned, m.owned)
                assert set().union(*revoked) == moved, since
                assert not [e for e in since if e[0] == "assign" and e[1] & kept], since
                assert m.min_owned_since_mark == len(kept)
        if strategy == "cooperative-sticky":
            # what the newcomer got is exactly what the old members gave up
            assert new.owned == set().union(*[b - m.owned for m, b in zip(old, before)])

            # kept partitions were consumed on without a break: the record produced during
            # the rebalance reached the same member, once, right after the first batch
            def kept_caught_up():
                return all((t, p, 1) in {(x[0], x[1], x[2]) for x in m.messages}
                           for m, b in zip(old, before) for t, p in b & m.owned)
            pump(members, kept_caught_up, CONVERGE_S,
                 "old members to consume the records produced during the rebalance")
            for m, owned in zip(old, before):
                for t, p in owned & m.owned:
                    offsets = [x[2] for x in m.messages if (x[0], x[1]) == (t, p)]
                    assert offsets == [0, 1], f"{m.name} {t}-{p}: {offsets}"
    finally:
        _close_all(members)


# -- 3. a member killed with SIGKILL is evicted after its session timeout ----------------------

def test_a_killed_member_is_evicted_after_its_session_timeout(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic, group = unique("g3"), unique("grp3")
    create_topic(bootstrap, topic, PARTITIONS)
    everything = all_partitions(topic, PARTITIONS)
    session_ms, heartbeat_ms = 3000, 250
    victim = SubprocessMember(bootstrap, group, [topic], "victim",
                              **{"session.timeout.ms": session_ms,
                                 "heartbeat.interval.ms": heartbeat_ms})
    survivor = GroupMember(bootstrap, group, [topic], "survivor")
    try:
        pump([survivor], lambda: disjoint_cover([survivor.owned, victim.assignment], everything),
             CONVERGE_S, "the survivor and the subprocess member to share the partitions")
        victim_id = victim.member_id
        assert victim_id
        mark = survivor.mark()
        victim.kill()
        killed_at = time.monotonic()
        pump([survivor], lambda: survivor.owned == everything, session_ms / 1000 + 15,
             "the survivor to own every partition after the victim's session timeout")
        elapsed = time.monotonic() - killed_at
        # not evicted before its session ran out (its last heartbeat was at most one
        # heartbeat interval before the kill)
        assert elapsed >= (session_ms - heartbeat_ms) / 1000 - 0.5, elapsed
        assert not [e for e in survivor.events[mark:] if e[0] == "lost"]
    finally:
        victim.close()
        survivor.close()
    leaves = _group_events(shared_broker, group, "group_leave")
    assert [e["reason"] for e in leaves if e["member"] == victim_id] == ["session timeout"]


# -- 4. committed offsets survive kill -9 of the broker ---------------------------------------

def test_committed_offsets_survive_kill_9_of_the_broker(make_broker):
    broker = make_broker(**FAST_GROUPS)
    bootstrap = broker.bootstrap
    topic, group = unique("g4"), unique("grp4")
    parts, per_partition = 3, 10
    create_topic(bootstrap, topic, parts)
    _produce_values(bootstrap, topic, [(p, b"%d-%d" % (p, i))
                                       for p in range(parts) for i in range(per_partition)])
    committed = {p: 3 + 2 * p for p in range(parts)}
    tps = [TopicPartition(topic, p) for p in range(parts)]

    first = GroupMember(bootstrap, group, [topic], "first")
    try:
        pump([first], lambda: len(first.messages) >= parts * per_partition, CONVERGE_S,
             "every record consumed once")
        first.consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()],
                              asynchronous=False)
        got = {tp.partition: tp.offset for tp in first.consumer.committed(tps, timeout=10)}
        assert got == committed
    finally:
        first.close()

    broker.restart(kill=True)

    second = GroupMember(bootstrap, group, [topic], "second")
    try:
        got = {tp.partition: tp.offset for tp in second.consumer.committed(tps, timeout=20)}
        assert got == committed, "committed offsets after kill -9"
        expected = {(p, o) for p in range(parts) for o in range(committed[p], per_partition)}
        pump([second], lambda: len(second.messages) >= len(expected), CONVERGE_S,
             "the records after the committed offsets")
        consumed = [(p, o) for _, p, o, *_ in second.messages]
        assert sorted(consumed) == sorted(expected), "resumes exactly after the commits"
        assert all(v == b"%d-%d" % (p, o) for _, p, o, v, _ in second.messages)
    finally:
        second.close()


def test_a_live_group_rides_out_kill_9_of_the_broker_without_a_rebalance(make_broker):
    """As kafkatest's OffsetValidationTest (broker failure): the group is reloaded from
    __consumer_offsets and its members keep their generation, so they neither rejoin nor
    are expired."""
    broker = make_broker(**FAST_GROUPS)
    bootstrap = broker.bootstrap
    topic, group = unique("g4b"), unique("grp4b")
    create_topic(bootstrap, topic, 4)
    everything = all_partitions(topic, 4)
    session_ms = 3000
    members = [GroupMember(bootstrap, group, [topic], f"c{i}", **{"session.timeout.ms": session_ms})
               for i in range(2)]
    try:
        pump(members, lambda: disjoint_cover([m.owned for m in members], everything),
             CONVERGE_S, "2 members to share the partitions", broker=broker, group=group)
        owned = [set(m.owned) for m in members]
        _produce_values(bootstrap, topic, [(p, b"before-%d" % p) for p in range(4)])
        pump(members, lambda: sum(len(m.messages) for m in members) >= 4, CONVERGE_S,
             "records before the kill")
        marks = [m.mark() for m in members]

        broker.restart(kill=True)
        restarted_at = time.time()
        _produce_values(bootstrap, topic, [(p, b"after-%d" % p) for p in range(4)])
        pump(members, lambda: sum(len(m.messages) for m in members) >= 8, CONVERGE_S,
             "records after the restart", broker=broker, group=group)
        # past a whole session: a member the reloaded group did not count would be expired
        pump_for(members, session_ms / 1000 + 1)
        assert [m.events[k:] for m, k in zip(members, marks)] == [[], []], "a rebalance"
        assert [m.owned for m in members] == owned
        values = sorted(v for m in members for v in m.values())
        assert values == sorted([b"before-%d" % p for p in range(4)] +
                                [b"after-%d" % p for p in range(4)]), "no record twice"
        after = [e for e in read_events(broker.data_dir)
                 if e.get("group") == group and e["ts"] >= restarted_at * 1000 - 5]
        assert not [e for e in after if e["type"] in ("group_state", "group_leave",
                                                      "group_join")], after
        description = describe_group(bootstrap, group)
        assert description.state == ConsumerGroupState.STABLE
        assert broker_assignment(description) == {m.name: m.owned for m in members}
    finally:
        _close_all(members)


# -- 5. static membership: a bounce within the session timeout is no rebalance ------------------

@pytest.mark.parametrize("bounced", ["follower", "leader"])
def test_a_static_member_restarting_within_its_session_gets_its_partitions_back(
        shared_broker, bounced):
    bootstrap = shared_broker.bootstrap
    topic, group = unique("g5"), unique(f"grp5-{bounced}")
    create_topic(bootstrap, topic, PARTITIONS)
    everything = all_partitions(topic, PARTITIONS)
    session_ms = 4000
    static = {"group.instance.id": "static-a", "session.timeout.ms": session_ms}
    members = []
    try:
        if bounced == "leader":  # the first member to join leads
            a = GroupMember(bootstrap, group, [topic], "static-a", **static)
            members.append(a)
            pump([a], lambda: a.owned == everything, CONVERGE_S, "the static member alone")
        other = GroupMember(bootstrap, group, [topic], "other")
        members.append(other)
        if bounced == "follower":
            pump([other], lambda: other.owned == everything, CONVERGE_S, "the other member alone")
            a = GroupMember(bootstrap, group, [topic], "static-a", **static)
            members.append(a)
        pump(members, lambda: disjoint_cover([a.owned, other.owned], everything), CONVERGE_S,
             "the two members to share the partitions")
        a_owned, other_owned = set(a.owned), set(other.owned)
        mark = other.mark()

        closed_at = time.time()
        a.close()  # a static member does not leave the group on close
        again = GroupMember(bootstrap, group, [topic], "static-a", **static)
        members.append(again)
        pump([again, other], lambda: again.owned, CONVERGE_S, "the restarted static member")
        assert again.owned == a_owned, "the same assignment back"
        # watch past the old instance's session timeout: no rebalance may follow
        pump_for([again, other], session_ms / 1000 + 1)
        assert other.events[mark:] == [], "the other member saw a rebalance"
        assert other.min_owned_since_mark == len(other_owned)
        assert [e[0] for e in again.events] == ["assign"]

        # both still consume their own partitions
        _produce_values(bootstrap, topic, [(p, b"after-%d" % p) for p in range(PARTITIONS)])
        pump([again, other], lambda: len(again.messages) + len(other.messages) >= PARTITIONS,
             CONVERGE_S, "records after the bounce")
        assert {(t, p) for t, p, *_ in again.messages} == a_owned
        assert {(t, p) for t, p, *_ in other.messages} == other_owned
        # the broker's side, read before anyone leaves: no state change since the bounce
        after = [e for e in _group_events(shared_broker, group) if e["ts"] >= closed_at * 1000 - 5]
    finally:
        _close_all(members)

    assert not [e for e in after if e["type"] in ("group_state", "group_leave")], after
    rejoins = [e for e in after if e["type"] == "group_join"]
    assert [(e["kind"], e["group_instance_id"]) for e in rejoins] == [("static rejoin",
                                                                       "static-a")]


# -- 7. bad input over raw sockets ------------------------------------------------------------

SUB = encode_subscription(Subscription(["raw-topic"]))


def _find_coordinator(raw: Raw, group: str) -> None:
    """What every client does first; it also creates __consumer_offsets on first need, before
    which the broker is no group's coordinator (NOT_COORDINATOR)."""
    body = raw.call(FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
    assert (body.error_code, body.node_id) == (ErrorCode.NONE, 0)


def _join(raw: Raw, group: str, member_id: str = "", *, version: int = 5,
          session_ms: int = 30000, rebalance_ms: int = 5000, protocol_type: str = "consumer",
          protocols=(("range", SUB),), instance: str | None = None):
    return raw.call(JOIN_GROUP, version, {
        "group_id": group, "session_timeout_ms": session_ms, "rebalance_timeout_ms": rebalance_ms,
        "member_id": member_id, "group_instance_id": instance, "protocol_type": protocol_type,
        "protocols": [{"name": n, "metadata": m} for n, m in protocols]})


def _sync(raw: Raw, group: str, generation: int, member_id: str, assignments: dict,
          version: int = 3):
    return raw.call(SYNC_GROUP, version, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]})


def _commit(raw: Raw, group: str, generation: int, member_id: str, topic: str, offset: int):
    body = raw.call(OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}]})
    return body.topics[0].partitions[0].error_code


def _fetch(raw: Raw, group: str, topic: str) -> tuple[int, int]:
    body = raw.call(OFFSET_FETCH, 6, {"group_id": group,
                                      "topics": [{"name": topic, "partition_indexes": [0]}]})
    return body.error_code, body.topics[0].partitions[0].committed_offset


def _describe(raw: Raw, group: str):
    return raw.call(DESCRIBE_GROUPS, 5, {"groups": [group]}).groups[0]


def _listed(raw: Raw, states: list[str]) -> dict[str, str]:
    body = raw.call(LIST_GROUPS, 4, {"states_filter": states})
    assert body.error_code == ErrorCode.NONE
    return {g.group_id: g.group_state for g in body.groups}


def _stable_member(raw: Raw, group: str, assignment: bytes = b"") -> tuple[str, int]:
    """Join (v5: MEMBER_ID_REQUIRED, then again with the id) and sync as the only member."""
    _find_coordinator(raw, group)
    first = _join(raw, group)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = _join(raw, group, first.member_id)
    assert joined.error_code == ErrorCode.NONE
    assert joined.leader == joined.member_id == first.member_id
    synced = _sync(raw, group, joined.generation_id, joined.member_id,
                   {joined.member_id: assignment})
    assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, assignment)
    return joined.member_id, joined.generation_id


def test_empty_group_id_is_invalid_group_id(raw):
    r = raw()
    _find_coordinator(r, "a-valid-group")
    assert _join(r, "").error_code == ErrorCode.INVALID_GROUP_ID
    assert _join(r, "", version=6).error_code == ErrorCode.INVALID_GROUP_ID
    assert r.call(FIND_COORDINATOR, 2, {"key": "", "key_type": 0}).error_code == \
        ErrorCode.INVALID_GROUP_ID
    entries = r.call(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["", "ok"]})
    assert [(c.key, c.error_code) for c in entries.coordinators] == [
        ("", ErrorCode.INVALID_GROUP_ID), ("ok", ErrorCode.NONE)]


def test_group_id_longer_than_32767_bytes_in_a_compact_string_is_invalid_group_id(raw):
    long_id = "g" * 40000
    r = raw()
    _find_coordinator(r, "a-valid-group")
    assert _join(r, long_id, version=6).error_code == ErrorCode.INVALID_GROUP_ID
    assert r.call(FIND_COORDINATOR, 3, {"key": long_id, "key_type": 0}).error_code == \
        ErrorCode.INVALID_GROUP_ID
    body = r.call(OFFSET_COMMIT, 8, {
        "group_id": long_id, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
    assert body.topics[0].partitions[0].error_code == ErrorCode.INVALID_GROUP_ID
    # exactly the limit is fine
    assert r.call(FIND_COORDINATOR, 3, {"key": "g" * 32767, "key_type": 0}).error_code == \
        ErrorCode.NONE


@pytest.mark.parametrize("group_id", ["", "g" * 40000], ids=["empty", "40000-bytes"])
def test_membership_apis_refuse_an_invalid_group_id(raw, group_id):
    """Heartbeat, SyncGroup and LeaveGroup (flexible versions) refuse what JoinGroup refuses.
    (OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups accept "" in Kafka, for old
    clients; only the over-long id is checked for those.)"""
    r = raw()
    _find_coordinator(r, "a-valid-group")
    assert r.call(HEARTBEAT, 4, {"group_id": group_id, "generation_id": 1,
                                 "member_id": "m"}).error_code == ErrorCode.INVALID_GROUP_ID
    assert r.call(SYNC_GROUP, 4, {"group_id": group_id, "generation_id": 1, "member_id": "m",
                                  "assignments": []}).error_code == ErrorCode.INVALID_GROUP_ID
    left = r.call(LEAVE_GROUP, 4, {"group_id": group_id, "members": [{"member_id": "m"}]})
    assert (left.error_code, [m.error_code for m in left.members]) == (
        ErrorCode.INVALID_GROUP_ID, [ErrorCode.INVALID_GROUP_ID])
    if group_id:
        described = r.call(DESCRIBE_GROUPS, 5, {"groups": [group_id]}).groups[0]
        assert (described.error_code, described.group_id) == (ErrorCode.INVALID_GROUP_ID,
                                                              group_id)
        assert r.call(OFFSET_FETCH, 6, {"group_id": group_id, "topics": None}).error_code == \
            ErrorCode.INVALID_GROUP_ID
        fetched = r.call(OFFSET_FETCH, 8, {"groups": [{"group_id": group_id, "topics": None}]})
        assert [g.error_code for g in fetched.groups] == [ErrorCode.INVALID_GROUP_ID]
        deleted = r.call(DELETE_GROUPS, 2, {"groups_names": [group_id]}).results
        assert [g.error_code for g in deleted] == [ErrorCode.INVALID_GROUP_ID]
    assert group_id not in _listed(r, [])


@pytest.mark.parametrize("session_ms", [999, 1_800_001])
def test_session_timeout_outside_the_broker_bounds_is_invalid(raw, session_ms):
    r, group = raw(), unique("sess")
    _find_coordinator(r, group)
    body = _join(r, group, session_ms=session_ms)
    assert body.error_code == ErrorCode.INVALID_SESSION_TIMEOUT


def test_join_v4_plus_without_member_id_requires_one(raw):
    r, group = raw(), unique("kip394")
    _find_coordinator(r, group)
    for version in (4, 5, 6, 7):
        body = _join(r, group, version=version)
        assert body.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert re.fullmatch(r"raw-test-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}",
                            body.member_id), body.member_id
        assert body.generation_id == -1
    # before v4 the member is admitted at once
    body = _join(r, unique("v3"), version=3)
    assert body.error_code == ErrorCode.NONE
    assert body.member_id.startswith("raw-test-") and body.generation_id == 1


def test_offset_commit_with_a_stale_generation_is_illegal_and_stores_nothing(raw,
                                                                           shared_broker):
    r, group, topic = raw(), unique("stale"), unique("stale-t")
    create_topic(shared_broker.bootstrap, topic, 1)
    member_id, generation = _stable_member(r, group)
    assert _commit(r, group, generation, member_id, topic, 5) == ErrorCode.NONE
    # the leader rejoins: a new generation
    rejoined = _join(r, group, member_id)
    assert (rejoined.error_code, rejoined.generation_id) == (ErrorCode.NONE, generation + 1)
    assert _sync(r, group, rejoined.generation_id, member_id, {member_id: b""}).error_code == 0
    assert _commit(r, group, generation, member_id, topic, 9) == ErrorCode.ILLEGAL_GENERATION
    assert _fetch(r, group, topic) == (ErrorCode.NONE, 5)
    assert _commit(r, group, generation + 1, "someone-else", topic, 9) == \
        ErrorCode.UNKNOWN_MEMBER_ID
    assert _fetch(r, group, topic) == (ErrorCode.NONE, 5)
    assert _commit(r, group, generation + 1, member_id, topic, 7) == ErrorCode.NONE
    assert _fetch(r, group, topic) == (ErrorCode.NONE, 7)


def test_a_second_instance_with_the_same_static_id_fences_the_first(raw):
    old, new, group = raw(), raw(), unique("fenced")
    _find_coordinator(old, group)
    first = _join(old, group, instance="inst")
    assert (first.error_code, first.generation_id) == (ErrorCode.NONE, 1)
    assert first.member_id.startswith("inst-")  # static members are named after the instance
    assert _sync(old, group, 1, first.member_id, {first.member_id: b"mine"}).error_code == 0

    second = _join(new, group, instance="inst")  # the same instance, restarted elsewhere
    assert second.error_code == ErrorCode.NONE
    assert second.member_id != first.member_id
    assert second.generation_id == 1, "a static rejoin of a stable group is no rebalance"
    synced = _sync(new, group, 1, second.member_id, {})
    assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, b"mine")

    def heartbeat(r, member_id):
        return r.call(HEARTBEAT, 3, {"group_id": group, "generation_id": 1,
                                     "member_id": member_id, "group_instance_id": "inst"})
    assert heartbeat(old, first.member_id).error_code == ErrorCode.FENCED_INSTANCE_ID
    assert heartbeat(new, second.member_id).error_code == ErrorCode.NONE
    committed = old.call(OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": 1, "member_id": first.member_id,
        "group_instance_id": "inst", "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
    assert committed.topics[0].partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    left = old.call(LEAVE_GROUP, 3, {"group_id": group, "members": [
        {"member_id": first.member_id, "group_instance_id": "inst"}]})
    assert [m.error_code for m in left.members] == [ErrorCode.FENCED_INSTANCE_ID]
    described = _describe(old, group)
    assert described.group_state == "Stable"
    assert [(m.member_id, m.group_instance_id) for m in described.members] == [
        (second.member_id, "inst")]


def test_inconsistent_protocols_are_refused(raw):
    r, group = raw(), unique("incons")
    _stable_member(r, group)
    other = raw()
    assert _join(other, group, version=3, protocol_type="connect").error_code == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert _join(other, group, version=3, protocols=(("roundrobin", SUB),)).error_code == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert _describe(r, group).group_state == "Stable"
    assert len(_describe(r, group).members) == 1


def test_describe_list_and_delete_follow_the_group_state(raw, shared_broker):
    r, group, topic = raw(), unique("admin"), unique("admin-t")
    create_topic(shared_broker.bootstrap, topic, 1)
    assignment = encode_assignment(Assignment({topic: [0]}))
    member_id, generation = _stable_member(r, group, assignment)
    assert _commit(r, group, generation, member_id, topic, 3) == ErrorCode.NONE

    described = _describe(r, group)
    assert (described.error_code, described.group_state, described.protocol_type,
            described.protocol_data) == (ErrorCode.NONE, "Stable", "consumer", "range")
    assert [(m.member_id, m.client_id) for m in described.members] == [(member_id, "raw-test")]
    assert decode_assignment(described.members[0].member_assignment).partitions == {topic: [0]}
    assert _listed(r, ["Stable"]).get(group) == "Stable"
    assert group not in _listed(r, ["Empty"])

    deleted = r.call(DELETE_GROUPS, 2, {"groups_names": [group]}).results
    assert [(g.group_id, g.error_code) for g in deleted] == [(group, ErrorCode.NON_EMPTY_GROUP)]
    assert _fetch(r, group, topic) == (ErrorCode.NONE, 3)

    left = r.call(LEAVE_GROUP, 3, {"group_id": group,
                                   "members": [{"member_id": member_id}]})
    assert left.error_code == ErrorCode.NONE
    assert [m.error_code for m in left.members] == [ErrorCode.NONE]
    described = _describe(r, group)
    assert (described.group_state, list(described.members)) == ("Empty", [])
    assert _listed(r, ["Empty"]).get(group) == "Empty"

    deleted = r.call(DELETE_GROUPS, 2, {"groups_names": [group]}).results
    assert [(g.group_id, g.error_code) for g in deleted] == [(group, ErrorCode.NONE)]
    assert _fetch(r, group, topic) == (ErrorCode.NONE, -1)
    assert group not in _listed(r, [])
    assert _describe(r, group).group_state == "Dead"
    deleted = r.call(DELETE_GROUPS, 2, {"groups_names": [group]}).results
    assert [g.error_code for g in deleted] == [ErrorCode.GROUP_ID_NOT_FOUND]
