"""The KIP-848 consumer-group state machine (broker/coordinator/consumer_group.py), driven
by hand and by a seeded simulation of clients that join, leave, crash and heartbeat in any
order: no partition is ever owned by two clients at once, and once heartbeats settle every
partition of a subscribed topic is owned by exactly one member."""

from __future__ import annotations

import random
from itertools import count

import pytest

from broker.coordinator.consumer_group import (
    ConsumerGroupConfig, ConsumerGroups, GroupState, HeartbeatRequest, MemberState,
)
from broker.coordinator.effects import Append, Reply
from protocol.errors import ErrorCode as E

G = "g"


def machine(**config) -> ConsumerGroups:
    ids = count(1)
    return ConsumerGroups(ConsumerGroupConfig(**config), new_member_id=lambda: f"m{next(ids)}")


def beat(cg: ConsumerGroups, member: str, epoch: int, now: int = 0, topics=None,
         **fields) -> dict:
    req = HeartbeatRequest(G, member, epoch, **fields)
    effects = cg.heartbeat("w", req, now, topics if topics is not None else {"t": 4})
    [reply] = [e for e in effects if isinstance(e, Reply)]
    return reply.body


def join(cg: ConsumerGroups, member: str, topics=None, **fields) -> dict:
    fields.setdefault("subscribed_topic_names", ["t"])
    fields.setdefault("rebalance_timeout_ms", 5000)
    return beat(cg, member, 0, topics=topics, **fields)


def owned(body: dict) -> dict:
    return {t: frozenset(ps) for t, ps in (body["assignment"] or {}).items()}


def test_the_first_member_gets_every_partition():
    cg = machine()
    body = join(cg, "a")
    assert body["error_code"] == E.NONE and body["member_epoch"] == 1
    assert owned(body) == {"t": frozenset({0, 1, 2, 3})}
    assert body["heartbeat_interval_ms"] == 5000
    assert cg.groups[G].state == GroupState.STABLE


def test_a_second_member_gets_partitions_only_after_the_first_revokes_them():
    cg = machine()
    a = owned(join(cg, "a"))
    b = join(cg, "b")
    assert b["member_epoch"] == 2 and owned(b) == {}  # its target is still a's
    assert cg.groups[G].members["b"].state == MemberState.UNRELEASED_PARTITIONS
    # a learns at its next heartbeat: it keeps two, revokes two, stays at epoch 1
    body = beat(cg, "a", 1, owned=a)
    kept = owned(body)
    assert body["member_epoch"] == 1 and len(kept["t"]) == 2
    assert cg.groups[G].members["a"].state == MemberState.UNREVOKED_PARTITIONS
    # b still waits: a has not said it let them go
    assert beat(cg, "b", 2, owned={})["assignment"] is None
    assert cg.groups[G].members["b"].assigned == {}
    # a revokes; its epoch moves on
    body = beat(cg, "a", 1, owned=kept)
    assert body["member_epoch"] == 2
    assert cg.groups[G].members["a"].state == MemberState.STABLE
    # and b now gets the two a released
    body = beat(cg, "b", 2, owned={})
    assert owned(body) == {"t": frozenset({0, 1, 2, 3}) - kept["t"]}
    assert cg.groups[G].state == GroupState.STABLE


def test_a_member_that_keeps_its_partitions_never_stops():
    cg = machine()
    a = owned(join(cg, "a", topics={"t": 2, "u": 2},
                   subscribed_topic_names=["t"]))
    join(cg, "b", topics={"t": 2, "u": 2}, subscribed_topic_names=["u"])
    # b's subscription is disjoint: a keeps everything and goes straight to the new epoch
    body = beat(cg, "a", 1, owned=a, topics={"t": 2, "u": 2})
    assert body["member_epoch"] == 2 and body["assignment"] is None
    assert cg.groups[G].members["a"].assigned == a


def test_epochs_are_fenced():
    cg = machine()
    a = owned(join(cg, "a"))
    assert beat(cg, "a", 5, owned=a)["error_code"] == E.FENCED_MEMBER_EPOCH
    join(cg, "b")
    beat(cg, "a", 1, owned=a)  # asked to revoke
    kept = cg.groups[G].members["a"].assigned
    beat(cg, "a", 1, owned=kept)  # now at epoch 2, previous 1
    # the answer with epoch 2 was lost: epoch 1 with owned within the assignment is fine
    assert beat(cg, "a", 1, owned=kept)["error_code"] == E.NONE
    # but not with partitions it no longer has
    assert beat(cg, "a", 1, owned=a)["error_code"] == E.FENCED_MEMBER_EPOCH
    assert beat(cg, "zz", 1)["error_code"] == E.UNKNOWN_MEMBER_ID


def test_requests_are_validated():
    cg = machine()
    assert beat(cg, "a", 0, subscribed_topic_names=["t"])["error_code"] == E.INVALID_REQUEST
    assert join(cg, "a", server_assignor="sticky")["error_code"] == E.UNSUPPORTED_ASSIGNOR
    assert join(cg, "a", subscribed_topic_names=None,
                subscribed_topic_regex="(")["error_code"] == E.INVALID_REGULAR_EXPRESSION
    assert join(cg, "a", owned={"t": frozenset({0})})["error_code"] == E.INVALID_REQUEST
    assert beat(cg, "a", -3)["error_code"] == E.INVALID_REQUEST
    assert beat(cg, "a", -2)["error_code"] == E.INVALID_REQUEST  # no instance id
    assert join(cg, "a", instance_id="")["error_code"] == E.INVALID_REQUEST


def test_leaving_hands_the_partitions_to_the_others():
    cg = machine()
    a = owned(join(cg, "a"))
    join(cg, "b")
    beat(cg, "a", 1, owned=a)
    beat(cg, "a", 1, owned=cg.groups[G].members["a"].assigned)
    beat(cg, "b", 2, owned={})
    body = beat(cg, "a", -1)
    assert body["member_epoch"] == -1 and "a" not in cg.groups[G].members
    body = beat(cg, "b", 2, owned=cg.groups[G].members["b"].assigned)
    assert body["member_epoch"] == 3 and owned(body) == {"t": frozenset(range(4))}


def test_a_silent_member_is_fenced_after_the_session_timeout():
    cg = machine(session_timeout_ms=1000)
    join(cg, "a")
    join(cg, "b")
    assert cg.timers.pop_due(999) is None
    key = cg.timers.pop_due(1000)
    effects = cg.on_timer(key, 1000)
    assert any(isinstance(e, Append) for e in effects)
    assert len(cg.groups[G].members) == 1


def test_a_member_that_does_not_revoke_in_time_is_fenced():
    cg = machine(session_timeout_ms=60_000)
    a = owned(join(cg, "a", rebalance_timeout_ms=2000))
    join(cg, "b")
    beat(cg, "a", 1, now=100, owned=a)  # revocation asked at 100
    for now in (500, 1000, 2000):
        beat(cg, "a", 1, now=now, owned=a)  # heartbeats, but never lets go
    key = cg.timers.pop_due(2100)
    assert key[0] == "revocation"
    cg.on_timer(key, 2100)
    assert "a" not in cg.groups[G].members


def test_a_static_member_comes_back_to_its_partitions_without_a_rebalance():
    cg = machine()
    a = owned(join(cg, "a", instance_id="i-1"))
    epoch = cg.groups[G].group_epoch
    assert join(cg, "a2", instance_id="i-1")["error_code"] == E.UNRELEASED_INSTANCE_ID
    assert beat(cg, "a", -2, instance_id="i-1")["member_epoch"] == -2
    body = join(cg, "a2", instance_id="i-1")
    assert body["error_code"] == E.NONE and owned(body) == a and body["member_epoch"] == 1
    assert cg.groups[G].group_epoch == epoch and "a" not in cg.groups[G].members


def test_regex_subscriptions_and_growing_topics():
    cg = machine()
    topics = {"orders": 1, "other": 1, "billing": 1, "__consumer_offsets": 50}
    body = join(cg, "a", topics=topics, subscribed_topic_names=None,
                subscribed_topic_regex="o.*")
    assert set(owned(body)) == {"orders", "other"}
    topics["orders"] = 3  # a partition count changed: a new epoch, the new partitions
    body = beat(cg, "a", 1, topics=topics, owned=owned(body))
    assert body["member_epoch"] == 2 and owned(body)["orders"] == {0, 1, 2}


def test_replaying_the_records_rebuilds_the_groups():
    cg = machine()
    records = []

    def run(member, epoch, **fields):
        req = HeartbeatRequest(G, member, epoch, **fields)
        for e in cg.heartbeat("w", req, 0, {"t": 4}):
            if isinstance(e, Append):
                records.extend(e.records)
    run("a", 0, subscribed_topic_names=["t"], rebalance_timeout_ms=5000, instance_id="i")
    run("b", 0, subscribed_topic_names=["t"], rebalance_timeout_ms=5000)
    run("a", 1, owned=cg.groups[G].members["a"].assigned)
    run("a", 1, owned={"t": frozenset({0, 1})})
    run("b", 2, owned={})
    run("c", 0, subscribed_topic_names=["t"], rebalance_timeout_ms=5000)
    run("c", -1)
    loaded = ConsumerGroups()
    for r in records:
        loaded.replay(r)
    live, back = cg.groups[G], loaded.groups[G]
    assert (back.group_epoch, back.target_epoch, back.target) == \
        (live.group_epoch, live.target_epoch, live.target)
    assert back.members == live.members


# -- a seeded simulation -----------------------------------------------------------------

class Client:
    """A consumer as the protocol sees it: it applies an assignment some time after it
    arrives (revoking takes a commit and a callback), reporting what it still owns."""

    def __init__(self, member_id: str, instance_id: str | None = None) -> None:
        self.member_id, self.instance_id = member_id, instance_id
        self.epoch = 0
        self.owned: dict[str, frozenset[int]] = {}
        self.target: dict[str, frozenset[int]] = {}
        self.joined = False

    def reconcile(self) -> None:
        self.owned = dict(self.target)

    def request(self) -> HeartbeatRequest:
        if not self.joined:
            return HeartbeatRequest(G, self.member_id, 0, instance_id=self.instance_id,
                                    rebalance_timeout_ms=10_000,
                                    subscribed_topic_names=["t", "u"])
        return HeartbeatRequest(G, self.member_id, self.epoch, instance_id=self.instance_id,
                                owned=dict(self.owned))

    def answer(self, body: dict) -> None:
        if body["error_code"] in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
            self.owned, self.target = {}, {}  # abandon all, rejoin
            self.joined, self.epoch = False, 0
            return
        assert body["error_code"] == E.NONE, body
        self.joined, self.epoch = True, body["member_epoch"]
        if body["assignment"] is not None:
            self.target = {t: frozenset(ps) for t, ps in body["assignment"].items() if ps}


def _no_double_ownership(clients: list[Client], cg: ConsumerGroups) -> None:
    """Among the clients that are members: one fenced by a timeout that has not heard of
    it yet still believes it owns its partitions (a zombie, as in Kafka; its commits are
    refused by epoch), and the coordinator has rightly given them away."""
    group = cg.groups.get(G)
    members = group.members if group is not None else {}
    seen: dict[tuple[str, int], str] = {}
    for c in clients:
        if c.member_id not in members:
            continue
        m = members[c.member_id]
        for t, ps in c.owned.items():  # what it holds, the coordinator knows it holds
            held = m.assigned.get(t, frozenset()) | m.pending_revocation.get(t, frozenset())
            assert ps <= held, (c.member_id, t, sorted(ps - held))
        for t, ps in c.owned.items():
            for p in ps:
                assert (t, p) not in seen, f"{t}-{p} owned by {seen[(t, p)]} and {c.member_id}"
                seen[(t, p)] = c.member_id


@pytest.mark.parametrize("seed", range(200))
def test_simulation_never_gives_a_partition_to_two_clients(seed):
    rng = random.Random(seed)
    cg = machine(session_timeout_ms=3000)
    topics = {"t": rng.randint(1, 6), "u": rng.randint(0, 4)}
    if not topics["u"]:
        del topics["u"]
    clients = [Client(f"c{i}", instance_id=f"i{i}" if rng.random() < 0.3 else None)
               for i in range(rng.randint(1, 5))]
    now = 0
    for _ in range(300):
        now += rng.randint(0, 200)
        while (key := cg.timers.pop_due(now)) is not None:
            cg.on_timer(key, now)
        c = rng.choice(clients)
        roll = rng.random()
        if roll < 0.03 and c.joined:  # leaves for good or for a while
            epoch = -2 if c.instance_id and rng.random() < 0.5 else -1
            cg.heartbeat("w", HeartbeatRequest(G, c.member_id, epoch,
                                               instance_id=c.instance_id), now, topics)
            c.owned, c.target, c.joined, c.epoch = {}, {}, False, 0
            if c.instance_id is not None:
                c.member_id += "x"  # a new incarnation of the same instance
        elif roll < 0.05:  # crashes: owns nothing; the coordinator finds out by itself
            c.owned, c.target, c.joined, c.epoch = {}, {}, False, 0
            c.member_id += "y"
        elif roll < 0.06 and "u" in topics:
            topics["u"] += 1
        else:
            if rng.random() < 0.5:
                c.reconcile()
            effects = cg.heartbeat("w", c.request(), now, topics)
            [reply] = [e for e in effects if isinstance(e, Reply)]
            if reply.body["error_code"] == E.UNRELEASED_INSTANCE_ID:
                continue
            c.answer(reply.body)
        _no_double_ownership(clients, cg)
    # settle: time passes (members that crashed or left for a while are fenced after the
    # session timeout) while every client heartbeats, until nothing changes
    for _ in range(12):
        now += 1000
        while (key := cg.timers.pop_due(now)) is not None:
            cg.on_timer(key, now)
        for c in clients:
            c.reconcile()
            effects = cg.heartbeat("w", c.request(), now, topics)
            [reply] = [e for e in effects if isinstance(e, Reply)]
            if reply.body["error_code"] != E.UNRELEASED_INSTANCE_ID:
                c.answer(reply.body)
            _no_double_ownership(clients, cg)
    live = [c for c in clients if c.joined]
    if live:
        every = {(t, p) for t, n in topics.items() for p in range(n)}
        held = {(t, p) for c in live for t, ps in c.owned.items() for p in ps}
        assert held == every, (sorted(every - held), seed)
        assert cg.groups[G].state == GroupState.STABLE


def test_a_member_waiting_for_partitions_is_asked_back_sooner():
    cg = machine(heartbeat_interval_ms=3000)
    a = owned(join(cg, "a"))
    b = join(cg, "b")  # its target is still a's: it waits
    assert b["heartbeat_interval_ms"] == 300
    body = beat(cg, "a", 1, owned=a)  # asked to revoke
    assert body["heartbeat_interval_ms"] == 300
    body = beat(cg, "a", 1, owned=cg.groups[G].members["a"].assigned)  # done: at its target
    assert body["heartbeat_interval_ms"] == 3000
    assert beat(cg, "b", 2, owned={})["heartbeat_interval_ms"] == 3000  # got them: stable


def test_a_restarted_member_takes_the_partitions_nobody_took_yet():
    """A rolling bounce: a leaves; before b and c heartbeat (they have not taken a's
    partitions), a2 joins and gets them at once, free, with nobody asked to revoke."""
    cg = machine()
    topics = {"t": 6}
    owners = {}
    for m in ("a", "b", "c"):
        join(cg, m, topics=topics)
    for _ in range(3):  # settle: everyone at the target, holding it
        for m in ("a", "b", "c"):
            member = cg.groups[G].members[m]
            body = beat(cg, m, member.member_epoch, topics=topics, owned=member.assigned)
            owners[m] = cg.groups[G].members[m].assigned
    assert cg.groups[G].state == GroupState.STABLE
    left = owners["a"]["t"]
    beat(cg, "a", -1, topics=topics)
    body = join(cg, "a2", topics=topics)
    assert owned(body) == {"t": left} and body["member_epoch"] == cg.groups[G].group_epoch
    for m in ("b", "c"):  # their next heartbeat asks nothing of them
        member = cg.groups[G].members[m]
        body = beat(cg, m, member.member_epoch, topics=topics, owned=member.assigned)
        assert cg.groups[G].members[m].assigned == owners[m]
        assert cg.groups[G].members[m].state == MemberState.STABLE
