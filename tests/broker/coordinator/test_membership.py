"""The classic group protocol as a pure state machine: every transition ClassicGroupState names,
driven with a fake clock and no sockets."""

from __future__ import annotations

import itertools

import pytest

from broker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from broker.coordinator.group import GroupState, IllegalStateTransition, ClassicGroup
from broker.coordinator.effects import Append, Emit, Reply
from broker.coordinator.membership import GroupConfig, JoinRequest
from protocol.consumer_protocol import (
    Assignment, Subscription, decode_assignment, encode_assignment, encode_subscription,
)
from protocol.errors import ErrorCode as E

S = GroupState
GROUP = "payments"


class Harness:
    """Plays the runtime's part: answers waiters, 'appends' records by replaying them."""

    def __init__(self, initial_delay_ms: int = 0, **group):
        ids = itertools.count(1)
        config = CoordinatorConfig(num_partitions=1, group=GroupConfig(
            initial_rebalance_delay_ms=initial_delay_ms, **group))
        self.c = GroupCoordinator(config, new_member_id=lambda prefix: f"{prefix}-{next(ids)}")
        self.c.finish_load(0, 0)
        self.now = 0
        self.replies: dict[object, dict] = {}
        self.records: list = []
        self.events: list[Emit] = []

    def apply(self, effects):
        for e in effects:
            if isinstance(e, Reply):
                self.replies[e.waiter] = e.body
            elif isinstance(e, Append):
                for r in e.records:
                    self.records.append(r)
                    self.c.replay_record(r, self.now)
            else:
                self.events.append(e)

    def advance(self, ms: int):
        self.now += ms
        self.apply(self.c.on_timers(self.now))

    def join(self, member_id="", instance=None, protocols=None, session=10_000, rebalance=30_000,
             protocol_type="consumer", client="app"):
        waiter = object()
        protocols = protocols or [("range", encode_subscription(Subscription(["t"])))]
        self.apply(self.c.join(waiter, JoinRequest(GROUP, member_id, instance, session, rebalance,
                                                   protocol_type, protocols, client, "/127.0.0.1"),
                               self.now))
        return waiter

    def new_member(self, **kw) -> tuple[str, object]:
        """JoinGroup v4+: first MEMBER_ID_REQUIRED, then the join that waits."""
        first = self.join(**kw)
        assert self.replies[first]["error_code"] == E.MEMBER_ID_REQUIRED
        member_id = self.replies[first]["member_id"]
        return member_id, self.join(member_id=member_id, **kw)

    def sync(self, member_id, generation, assignments=None, instance=None):
        waiter = object()
        self.apply(self.c.sync(waiter, GROUP, generation, member_id, instance, None, None,
                               assignments or {}, self.now))
        return waiter

    def heartbeat(self, member_id, generation, instance=None) -> E:
        waiter = object()
        self.apply(self.c.heartbeat(waiter, GROUP, generation, member_id, instance, self.now))
        return self.replies[waiter]["error_code"]

    @property
    def group(self) -> ClassicGroup:
        return self.c.groups[GROUP]


def _assignment(*partitions):
    return encode_assignment(Assignment({"t": list(partitions)}))


def stable_group_of(h: Harness, n: int) -> list[str]:
    """n members through a full rebalance to Stable; returns member ids, leader first."""
    joined = [h.new_member(client=f"c{i}") for i in range(n)]
    h.advance(0)  # the (zero) initial delay passes
    bodies = [h.replies[w] for _, w in joined]
    generation = bodies[0]["generation_id"]
    leader = bodies[0]["leader"]
    ids = [m for m, _ in joined]
    followers = [m for m in ids if m != leader]
    waits = [h.sync(m, generation) for m in followers]
    h.sync(leader, generation, {m: _assignment(i) for i, m in enumerate(ids)})
    assert all(h.replies[w]["error_code"] == E.NONE for w in waits)
    assert h.group.state == S.STABLE
    return [leader, *followers]


def test_a_first_member_runs_empty_preparing_completing_stable():
    h = Harness(initial_delay_ms=3000)
    member, waiter = h.new_member()
    assert h.group.state == S.PREPARING_REBALANCE and waiter not in h.replies
    h.advance(2999)
    assert waiter not in h.replies  # group.initial.rebalance.delay.ms holds the join
    h.advance(1)
    body = h.replies[waiter]
    assert (body["error_code"], body["generation_id"], body["leader"]) == (E.NONE, 1, member)
    assert [m["member_id"] for m in body["members"]] == [member]  # the leader sees members
    assert h.group.state == S.COMPLETING_REBALANCE
    sync = h.sync(member, 1, {member: _assignment(0, 1)})
    assert decode_assignment(h.replies[sync]["assignment"]).partitions == {"t": [0, 1]}
    assert h.group.state == S.STABLE
    states = [(e.fields["old_state"], e.fields["new_state"]) for e in h.events
              if e.type == "group_state"]
    assert states == [("Empty", "PreparingRebalance"), ("PreparingRebalance", "CompletingRebalance"),
                      ("CompletingRebalance", "Stable")]
    assert len(h.records) == 1  # group metadata written when the group became Stable


def test_followers_wait_for_the_leaders_assignment_and_get_no_member_list():
    h = Harness()
    (a, wa), (b, wb) = h.new_member(client="a"), h.new_member(client="b")
    h.advance(0)
    assert h.replies[wa]["members"] and h.replies[wb]["members"] == []
    follower_sync = h.sync(b, 1)
    assert follower_sync not in h.replies  # waits for the leader
    h.sync(a, 1, {a: _assignment(0), b: _assignment(1)})
    assert decode_assignment(h.replies[follower_sync]["assignment"]).partitions == {"t": [1]}


def test_a_join_to_a_stable_group_rebalances_and_heartbeats_say_so():
    h = Harness()
    leader, follower = stable_group_of(h, 2)
    newcomer, wait = h.new_member(client="new")
    assert h.group.state == S.PREPARING_REBALANCE
    assert h.heartbeat(follower, 1) == E.REBALANCE_IN_PROGRESS  # how members learn to rejoin
    h.join(member_id=leader)
    h.join(member_id=follower)
    assert h.group.state == S.COMPLETING_REBALANCE and h.replies[wait]["generation_id"] == 2


def test_a_join_during_completing_rebalance_starts_over():
    h = Harness()
    h.new_member()
    h.advance(0)  # the join completes; the leader has not synced yet
    assert h.group.state == S.COMPLETING_REBALANCE
    h.new_member(client="late")
    assert h.group.state == S.PREPARING_REBALANCE


def test_pending_sync_is_told_to_rejoin_when_a_rebalance_starts():
    h = Harness()
    h.new_member(client="a")
    b, _ = h.new_member(client="b")
    h.advance(0)
    follower_sync = h.sync(b, 1)
    h.new_member(client="c")
    assert h.replies[follower_sync]["error_code"] == E.REBALANCE_IN_PROGRESS


def test_session_expiry_removes_the_member_and_rebalances():
    h = Harness()
    leader, follower = stable_group_of(h, 2)
    for _ in range(2):
        h.advance(4000)
        assert h.heartbeat(leader, 1) == E.NONE
    assert follower in h.group.members  # 8 s of silence: within its 10 s session
    h.advance(4000)
    # 12 s of silence: the follower is gone and the leader is told to rejoin
    assert h.heartbeat(leader, 1) == E.REBALANCE_IN_PROGRESS
    assert follower not in h.group.members
    assert h.group.state == S.PREPARING_REBALANCE
    leaves = [e.fields for e in h.events if e.type == "group_leave"]
    assert leaves[-1]["member"] == follower and leaves[-1]["reason"] == "session timeout"


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed():
    h = Harness()
    leader, follower = stable_group_of(h, 2)
    h.new_member(client="new")
    h.join(member_id=leader, rebalance=30_000)
    for _ in range(7):  # heartbeats keep the follower's session alive, but it never rejoins
        h.advance(4500)
        h.heartbeat(follower, 1)
    assert follower not in h.group.members
    assert h.group.state == S.COMPLETING_REBALANCE and h.group.generation == 2


def test_the_last_member_leaving_empties_the_group_and_writes_it_down():
    h = Harness()
    (member,) = stable_group_of(h, 1)
    waiter = object()
    h.apply(h.c.leave(waiter, GROUP, [(member, None)], h.now))
    assert h.replies[waiter]["members"][0]["error_code"] == E.NONE
    assert h.group.state == S.EMPTY and h.group.generation == 2
    assert len(h.records) == 2  # Stable, then Empty (GroupMetadata records, as Kafka writes)


def test_protocol_is_chosen_by_vote_and_a_disjoint_member_is_refused():
    h = Harness()
    sub = encode_subscription(Subscription(["t"]))
    h.new_member(protocols=[("roundrobin", sub), ("range", sub)], client="a")
    h.new_member(protocols=[("range", sub), ("roundrobin", sub)], client="b")
    h.new_member(protocols=[("range", sub)], client="c")
    h.advance(0)
    assert h.group.protocol == "range"
    refused = h.join(protocols=[("sticky", sub)])
    assert h.replies[refused]["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    other_type = h.join(protocol_type="connect")
    assert h.replies[other_type]["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize("kw,error", [
    ({"session": 5999}, E.INVALID_SESSION_TIMEOUT),
    ({"session": 1_800_001}, E.INVALID_SESSION_TIMEOUT),
    ({"member_id": "nobody-1"}, E.UNKNOWN_MEMBER_ID),
])
def test_join_refusals(kw, error):
    h = Harness(min_session_timeout_ms=6000)
    waiter = h.join(**kw)
    assert h.replies[waiter]["error_code"] == error
    assert GROUP not in h.c.groups or h.group.is_empty


def test_invalid_group_ids():
    h = Harness()
    for bad in ["", "x" * 32768]:
        waiter = object()
        h.apply(h.c.join(waiter, JoinRequest(bad, "", None, 10_000, 10_000, "consumer", [("r", b"")]), 0))
        assert h.replies[waiter]["error_code"] == E.INVALID_GROUP_ID


def test_group_max_size():
    h = Harness(max_size=2)
    h.new_member(client="a")
    h.new_member(client="b")
    third = h.join(client="c")
    assert h.replies[third]["error_code"] == E.GROUP_MAX_SIZE_REACHED


def test_heartbeat_errors():
    h = Harness()
    leader, = stable_group_of(h, 1)
    assert h.heartbeat(leader, 0) == E.ILLEGAL_GENERATION
    assert h.heartbeat("ghost", 1) == E.UNKNOWN_MEMBER_ID


def test_a_static_member_restarting_in_time_keeps_its_place_without_a_rebalance():
    h = Harness()
    h.join(instance="pod-0")  # static members skip MEMBER_ID_REQUIRED
    h.advance(0)
    (member,) = h.group.members
    h.sync(member, 1, {member: _assignment(0, 1, 2)})
    assert h.group.state == S.STABLE
    restarted = h.join(instance="pod-0")  # a new process: no member id, same instance id
    body = h.replies[restarted]
    assert body["error_code"] == E.NONE and body["generation_id"] == 1
    assert h.group.state == S.STABLE and h.group.generation == 1  # no rebalance
    sync = h.sync(body["member_id"], 1)
    assert decode_assignment(h.replies[sync]["assignment"]).partitions == {"t": [0, 1, 2]}
    assert h.heartbeat(member, 1, instance="pod-0") == E.FENCED_INSTANCE_ID  # the old one


def test_a_static_restart_with_new_subscription_bytes_keeps_its_place_unless_the_protocol_changes():
    h = Harness()
    h.join(instance="pod-0")
    h.advance(0)
    (member,) = h.group.members
    h.sync(member, 1, {member: _assignment(0, 1, 2)})
    # a restarted client encodes what it owned and its generation: other bytes, same protocol
    owned = Subscription(["t"], owned_partitions={"t": [0, 1, 2]}, generation_id=1)
    restarted = h.join(instance="pod-0", protocols=[("range", encode_subscription(owned))])
    assert h.replies[restarted]["generation_id"] == 1
    assert h.group.state == S.STABLE and h.group.generation == 1
    # preferring a protocol the group has not chosen is a change: now it rebalances
    sub = encode_subscription(Subscription(["t"]))
    h.join(instance="pod-0", protocols=[("roundrobin", sub), ("range", sub)])
    assert h.group.generation == 2 and h.group.protocol == "roundrobin"


def test_a_static_member_is_expired_by_its_session_timeout_like_any_other():
    h = Harness()
    h.join(instance="pod-0")
    h.advance(0)
    (member,) = h.group.members
    h.sync(member, 1, {member: _assignment(0)})
    h.advance(10_001)
    assert h.group.members == {} and h.group.state == S.EMPTY


def test_the_initial_delay_is_extended_while_members_arrive():
    h = Harness(initial_delay_ms=3000)
    _, first = h.new_member(client="a", rebalance=10_000)
    h.advance(2000)
    _, second = h.new_member(client="b", rebalance=10_000)
    h.advance(1000)  # the first delay ends, but a member arrived: wait one more delay
    assert first not in h.replies
    h.advance(3000)
    assert h.replies[first]["error_code"] == h.replies[second]["error_code"] == E.NONE


def test_a_leader_that_never_syncs_is_removed_after_the_rebalance_timeout():
    h = Harness()
    (a, _), (b, _) = h.new_member(client="a", rebalance=8000), h.new_member(client="b",
                                                                           rebalance=8000)
    h.advance(0)
    h.sync(b, 1)  # only the follower syncs
    h.heartbeat(a, 1)
    h.advance(8000)
    assert a not in h.group.members and h.group.state != S.COMPLETING_REBALANCE


@pytest.mark.parametrize("start,target", [
    (S.EMPTY, S.STABLE), (S.EMPTY, S.COMPLETING_REBALANCE), (S.STABLE, S.COMPLETING_REBALANCE),
    (S.STABLE, S.EMPTY), (S.COMPLETING_REBALANCE, S.EMPTY), (S.DEAD, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.STABLE),
])
def test_illegal_transitions_raise(start, target):
    group = ClassicGroup("g", state=start)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(target, 0)


@pytest.mark.parametrize("start", list(S))
def test_every_state_may_die(start):
    group = ClassicGroup("g", state=start)
    group.transition_to(S.DEAD, 0)
    assert group.state == S.DEAD


def test_commit_validation_follows_kafka():
    h = Harness()
    leader, follower = stable_group_of(h, 2)

    def commit(member, generation, offset=5):
        waiter = object()
        h.apply(h.c.commit(waiter, GROUP, generation, member, None, [("t", 0, offset, -1, "")],
                           h.now))
        return h.replies[waiter][("t", 0)]

    assert commit(leader, 1) == E.NONE
    assert commit(leader, 0, offset=99) == E.ILLEGAL_GENERATION
    assert commit("ghost", 1) == E.UNKNOWN_MEMBER_ID
    assert h.c.fetch_offsets(GROUP, [("t", 0)])[1][("t", 0)].offset == 5  # nothing stored
    h.new_member(client="new")  # PreparingRebalance: eager members commit before rejoining
    assert commit(follower, 1, offset=6) == E.NONE
    assert commit("", -1) == E.UNKNOWN_MEMBER_ID  # standalone commits only for Empty groups


def test_standalone_commits_create_an_empty_group():
    h = Harness()
    waiter = object()
    h.apply(h.c.commit(waiter, "simple", -1, "", None, [("t", 3, 42, -1, "meta")], h.now))
    assert h.replies[waiter][("t", 3)] == E.NONE
    assert h.c.groups["simple"].state == S.EMPTY
    offset = h.c.fetch_offsets("simple", None)[1][("t", 3)]
    assert (offset.offset, offset.metadata) == (42, "meta")


def test_replaying_the_records_rebuilds_groups_and_offsets():
    h = Harness()
    leader, follower = stable_group_of(h, 2)
    waiter = object()
    h.apply(h.c.commit(waiter, GROUP, 1, leader, None, [("t", 0, 17, 3, "x")], h.now))
    fresh = GroupCoordinator(CoordinatorConfig(num_partitions=1))
    fresh.begin_load(0)
    assert fresh.check(GROUP) == E.COORDINATOR_LOAD_IN_PROGRESS
    for r in h.records:
        fresh.replay(r.key, r.value, 1000, loading=True)
    fresh.finish_load(0, 1000)
    group = fresh.groups[GROUP]
    assert group.state == S.STABLE and group.generation == 1
    assert set(group.members) == {leader, follower} and group.leader_id == leader
    assert decode_assignment(group.members[follower].assignment).partitions == {"t": [1]}
    got = fresh.fetch_offsets(GROUP, [("t", 0)])[1][("t", 0)]
    assert (got.offset, got.leader_epoch, got.metadata) == (17, 3, "x")


def test_deleting_groups():
    h = Harness()
    stable_group_of(h, 1)
    error, _ = h.c.delete_group(GROUP, h.now)
    assert error == E.NON_EMPTY_GROUP
    assert h.c.delete_group("unknown", h.now)[0] == E.GROUP_ID_NOT_FOUND


def test_events_name_owned_and_assigned_partitions():
    h = Harness()
    owned = encode_subscription(Subscription(["t"], owned_partitions={"t": [2, 0]}, generation_id=4))
    member, _ = h.new_member(protocols=[("cooperative-sticky", owned)])
    h.advance(0)
    h.sync(member, 1, {member: _assignment(0, 2)})
    joins = [e.fields for e in h.events if e.type == "group_join"]
    assigned = [e.fields for e in h.events if e.type == "group_assignment"]
    assert joins[-1]["owned"] == ["t-0", "t-2"]
    assert assigned == [{"group": GROUP, "generation": 1, "protocol": "cooperative-sticky",
                         "member": member, "client_id": "app", "leader": True,
                         "assigned": ["t-0", "t-2"]}]


def test_the_empty_group_id_is_accepted_only_where_kafka_accepts_it():
    h = Harness()
    h.c.finish_load(0, 0)
    waiter = object()
    h.apply(h.c.commit(waiter, "", -1, "", None, [("t", 0, 7, -1, "")], h.now))
    assert h.replies[waiter][("t", 0)] == E.NONE
    assert h.c.fetch_offsets("", [("t", 0)])[1][("t", 0)].offset == 7
    assert h.c.describe("")["error_code"] == E.NONE
    joined = object()
    h.apply(h.c.join(joined, JoinRequest("", "", None, 10_000, 10_000, "consumer", [("r", b"")]), 0))
    assert h.replies[joined]["error_code"] == E.INVALID_GROUP_ID


def test_a_timer_due_with_the_rebalance_timeout_sees_what_the_rebalance_changed():
    # a's session deadline (10 s, pushed on while it waits in its join) and the rebalance
    # timeout (30 s) fall on the same instant: completing the join resets a's session, so
    # its old deadline must not then remove it as if it had stopped heartbeating
    h = Harness()
    a, b = stable_group_of(h, 2)
    generation = h.group.generation
    rejoin = h.join(member_id=a)
    for _ in range(6):
        h.advance(5_000)
        if rejoin not in h.replies:  # b lives on heartbeats but never rejoins
            assert h.heartbeat(b, generation) == E.REBALANCE_IN_PROGRESS
    assert h.now == 30_000 and h.replies[rejoin]["error_code"] == E.NONE
    assert list(h.group.members) == [a]
    assert h.group.state == S.COMPLETING_REBALANCE


def test_unloading_a_partition_answers_its_waiters_forgets_its_groups_and_reloads():
    h = Harness()
    leader, follower = stable_group_of(h, 2)
    committed = object()
    h.apply(h.c.commit(committed, GROUP, 1, leader, None, [("t", 0, 17, 3, "x")], h.now))
    # a rebalance in flight: the follower waits in SyncGroup of a new generation
    rejoin = [h.join(member_id=m) for m in (leader, follower)]
    h.advance(0)
    generation = h.replies[rejoin[0]]["generation_id"]
    waiting = h.sync(follower, generation)
    assert waiting not in h.replies
    h.apply(h.c.unload(0, h.now))
    assert h.replies[waiting] == {"throttle_time_ms": 0, "error_code": E.NOT_COORDINATOR,
                                  "protocol_type": None, "protocol_name": None,
                                  "assignment": b""}
    assert GROUP not in h.c.groups and h.c.check(GROUP) == E.NOT_COORDINATOR
    assert h.c.fetch_offsets(GROUP, [("t", 0)])[0] == E.NOT_COORDINATOR
    assert h.c.timers.next_deadline() is None  # nothing left to fire on a reloaded group
    # leading the partition again: its records rebuild the group and its offsets
    h.c.begin_load(0)
    for r in h.records:
        h.c.replay(r.key, r.value, h.now, loading=True)
    h.c.finish_load(0, h.now)
    assert h.c.fetch_offsets(GROUP, [("t", 0)])[1][("t", 0)].offset == 17
    assert set(h.c.groups[GROUP].members) == {leader, follower}


def test_unloading_answers_a_member_waiting_in_join_group_with_a_whole_join_body():
    h = Harness(initial_delay_ms=3000)
    member, waiter = h.new_member()
    h.apply(h.c.unload(0, h.now))
    assert h.replies[waiter]["error_code"] == E.NOT_COORDINATOR
    assert h.replies[waiter]["member_id"] == member and "protocol_name" in h.replies[waiter]
    assert h.c.timers.next_deadline() is None


def test_a_partition_the_metadata_gives_this_broker_but_not_yet_loaded_is_loading():
    """Between the metadata naming this broker leader of the group's partition (so that
    FindCoordinator names it) and the load beginning (its log still being made), the
    group is COORDINATOR_LOAD_IN_PROGRESS, as Kafka answers, not NOT_COORDINATOR: told
    NOT_COORDINATOR by the broker FindCoordinator had just named again, librdkafka never
    asked for the group's offsets again (tests/interop/test_metrics.py, under load)."""
    h = Harness()
    h.apply(h.c.unload(0, h.now))
    assert h.c.check(GROUP) == E.NOT_COORDINATOR
    h.c.leads_in_metadata = lambda partition: partition == 0
    assert h.c.check(GROUP) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.c.fetch_offsets(GROUP, [("t", 0)])[0] == E.COORDINATOR_LOAD_IN_PROGRESS
