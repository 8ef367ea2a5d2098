"""KIP-932 share group membership (broker/coordinator/share_group.py) through the pure
GroupCoordinator: joining and leaving, epochs, the simple assignor (a partition shared by
several members), fencing on a silent session, the errors Kafka answers, the other group
APIs' view of a share group, and a load that rebuilds the group from its records' bytes."""

from __future__ import annotations

import itertools
import uuid

import pytest

from broker.coordinator.consumer_group import HeartbeatRequest
from broker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from broker.coordinator.effects import Append, Emit, Reply, ShareMemberGone
from broker.coordinator.membership import JoinRequest
from broker.coordinator.share_group import (
    ShareGroup, ShareGroupConfig, ShareGroupState, ShareHeartbeatRequest, java_string_hash,
    simple_assign,
)
from protocol.errors import ErrorCode as E
from protocol.messages import offsets_topic

G = "sg"
IDS = {name: uuid.UUID(int=i + 1) for i, name in enumerate(("t", "u", "one"))}


class Harness:
    """Plays the runtime: answers waiters, replays what is appended, keeps the records
    (as bytes, as the log would) and what else comes out."""

    def __init__(self, topics: dict[str, int] | None = None, **share):
        self.topics = dict(topics if topics is not None else {"t": 6})
        self.c = self._coordinator(**share)
        ids = itertools.count(1)
        self.c.share_groups.new_member_id = lambda: f"gen-{next(ids)}"
        self.c.finish_load(0, 0)
        self.now = 0
        self.replies: dict[object, dict] = {}
        self.records: list = []
        self.gone: list[ShareMemberGone] = []
        self.events: list[Emit] = []

    def _coordinator(self, **share) -> GroupCoordinator:
        c = GroupCoordinator(CoordinatorConfig(num_partitions=1,
                                               share_group=ShareGroupConfig(**share)))
        c.topics = lambda: dict(self.topics)
        c.topic_id = IDS.get
        c.topic_name = {v: k for k, v in IDS.items()}.get
        return c

    def apply(self, effects):
        for e in effects:
            if isinstance(e, Reply):
                self.replies[e.waiter] = e.body
            elif isinstance(e, Append):
                for r in e.records:
                    self.records.append(r)
                    self.c.replay_record(r, self.now)
            elif isinstance(e, ShareMemberGone):
                self.gone.append(e)
            else:
                self.events.append(e)

    def beat(self, member: str, epoch: int, topics: list[str] | None = None, group: str = G,
             **fields) -> dict:
        waiter = object()
        self.apply(self.c.share_group_heartbeat(
            waiter, ShareHeartbeatRequest(group, member, epoch, subscribed_topic_names=topics,
                                          **fields), self.now))
        return self.replies[waiter]

    def join(self, member: str, topics: list[str] | None = None, **fields) -> dict:
        body = self.beat(member, 0, topics or ["t"], **fields)
        assert body["error_code"] == E.NONE, body
        return body

    def advance(self, ms: int) -> None:
        self.now += ms
        self.apply(self.c.on_timers(self.now))

    def group(self) -> ShareGroup:
        group = self.c.groups[G]
        assert isinstance(group, ShareGroup)
        return group

    def reloaded(self) -> GroupCoordinator:
        """A new leader of the partition that loads this one's log."""
        c = self._coordinator()
        c.begin_load(0)
        for r in self.records:
            c.replay(r.key, r.value, self.now, loading=True)
        c.finish_load(0, self.now)
        return c


def partitions(body_or_assignment) -> set[tuple[str, int]]:
    a = body_or_assignment.get("assignment", body_or_assignment) \
        if "error_code" in body_or_assignment else body_or_assignment
    return {(t, p) for t, ps in (a or {}).items() for p in ps}


# -- the simple assignor ----------------------------------------------------------------------

def test_member_ids_hash_as_java_strings():
    """Kafka places a member with String.hashCode; known Java values."""
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2**31
    assert java_string_hash("é") == 233


def test_one_partition_goes_to_every_one_of_four_members():
    out = simple_assign({m: frozenset({"one"}) for m in "abcd"}, {"one": 1}, {})
    assert out == {m: {"one": frozenset({0})} for m in "abcd"}


def test_six_partitions_four_members_at_once_each_has_one_and_all_are_covered():
    members = [f"member-{i}" for i in range(4)]
    out = simple_assign({m: frozenset({"t"}) for m in members}, {"t": 6}, {})
    assert all(out[m]["t"] for m in members)
    covered = [p for m in members for p in out[m]["t"]]
    assert set(covered) == set(range(6))
    # each member holds the partition its id hashes to (as Java's String.hashCode), and a
    # partition is held twice only where two ids hashed to it
    for m in members:
        assert abs(java_string_hash(m)) % 6 in out[m]["t"]
    hashed = [abs(java_string_hash(m)) % 6 for m in members]
    assert len(covered) == 6 + len(hashed) - len(set(hashed))


def test_a_member_keeps_its_current_partitions_not_placed_afresh():
    current = {"a": {"t": frozenset(range(6))}}
    out = simple_assign({"a": frozenset({"t"}), "b": frozenset({"t"})}, {"t": 6}, current)
    b_hashed = abs(java_string_hash("b")) % 6
    a_hashed = abs(java_string_hash("a")) % 6
    assert b_hashed in out["b"]["t"]
    assert out["a"]["t"] == (frozenset(range(6)) - {b_hashed}) | {a_hashed}


def test_heterogeneous_subscriptions_only_get_their_topics():
    out = simple_assign({"a": frozenset({"t"}), "b": frozenset({"u"}), "c": frozenset({"t", "u"})},
                        {"t": 3, "u": 2}, {})
    assert set(out["a"]) == {"t"} and set(out["b"]) == {"u"}
    every = {(t, p) for m in out for t, ps in out[m].items() for p in ps}
    assert every == {("t", 0), ("t", 1), ("t", 2), ("u", 0), ("u", 1)}


# -- joining, epochs, assignment ---------------------------------------------------------------

def test_a_member_joins_with_its_own_id_and_gets_every_partition():
    h = Harness()
    body = h.join("m1")
    assert body["member_id"] == "m1" and body["member_epoch"] == 1
    assert partitions(body) == {("t", p) for p in range(6)}
    assert body["heartbeat_interval_ms"] == 5000
    assert h.group().state == ShareGroupState.STABLE
    # the next heartbeat carries no assignment: nothing changed
    again = h.beat("m1", 1)
    assert again["error_code"] == E.NONE and again["assignment"] is None
    assert again["member_epoch"] == 1


def test_v0_gets_a_member_id_and_v1_must_bring_one():
    h = Harness()
    body = h.beat("", 0, ["t"], member_id_required=False)
    assert body["error_code"] == E.NONE and body["member_id"] == "gen-1"
    refused = h.beat("", 0, ["t"])
    assert refused["error_code"] == E.INVALID_REQUEST


def test_one_partition_is_shared_by_four_members():
    h = Harness({"one": 1})
    for m in "abcd":
        h.join(m, ["one"])
    for m in "abcd":  # each catches up with the latest epoch at its next heartbeat
        h.beat(m, h.group().members[m].member_epoch)
    group = h.group()
    assert group.group_epoch == 4
    for m in "abcd":
        assert group.members[m].member_epoch == 4
        assert group.members[m].assigned == {"one": frozenset({0})}
    assert group.members_of("one", 0) == ["a", "b", "c", "d"]


def test_six_partitions_four_members_joining_one_by_one():
    h = Harness({"t": 6})
    for m in ["m-a", "m-b", "m-c", "m-d"]:
        h.join(m)
    for m in ["m-a", "m-b", "m-c", "m-d"]:
        body = h.beat(m, h.group().members[m].member_epoch)
        assert body["member_epoch"] == 4
    group = h.group()
    held = [p for m in group.members.values() for p in m.assigned.get("t", ())]
    assert set(held) == set(range(6))  # every partition has a member
    assert all(m.assigned.get("t") for m in group.members.values())  # every member has one


def test_a_member_gets_its_new_target_at_once_without_revocation():
    h = Harness({"t": 6})
    a = h.join("a")
    assert len(partitions(a)) == 6
    h.join("b")
    body = h.beat("a", 1)
    # its epoch moves straight to the group's: no partition is held back for a revocation
    assert body["member_epoch"] == 2
    assert partitions(body) == {("t", p) for p in h.group().target["a"]["t"]}
    assert h.group().members["a"].previous_member_epoch == 1


def test_the_previous_epoch_is_accepted_anything_else_fenced():
    h = Harness()
    h.join("a")
    h.join("b")
    h.beat("a", 1)  # a is now at 2, previous 1
    assert h.beat("a", 1)["error_code"] == E.NONE  # its answer was lost: fine
    assert h.beat("a", 3)["error_code"] == E.FENCED_MEMBER_EPOCH
    h.join("c")
    h.beat("a", 2)  # a is now at 3, previous 2
    assert h.beat("a", 1)["error_code"] == E.FENCED_MEMBER_EPOCH


def test_a_subscription_change_bumps_the_epoch_and_reassigns():
    h = Harness({"t": 2, "u": 3})
    h.join("a", ["t"])
    body = h.beat("a", 1, ["t", "u"])
    assert body["member_epoch"] == 2
    assert partitions(body) == {("t", 0), ("t", 1), ("u", 0), ("u", 1), ("u", 2)}
    # the same subscription again is no change
    assert h.beat("a", 2, ["u", "t"])["member_epoch"] == 2


def test_a_topic_created_later_or_grown_bumps_the_epoch():
    h = Harness({})
    body = h.join("a", ["t"])
    assert body["member_epoch"] == 1 and partitions(body) == set()
    h.topics["t"] = 2
    body = h.beat("a", 1)
    assert body["member_epoch"] == 2 and partitions(body) == {("t", 0), ("t", 1)}
    h.topics["t"] = 3
    assert partitions(h.beat("a", 2)) == {("t", 0), ("t", 1), ("t", 2)}


# -- leaving and fencing ----------------------------------------------------------------------

def test_leaving_removes_the_member_and_tells_the_share_partitions():
    h = Harness()
    h.join("a")
    h.join("b")
    body = h.beat("a", -1)
    assert body["error_code"] == E.NONE and body["member_epoch"] == -1
    assert list(h.group().members) == ["b"] and h.group().group_epoch == 3
    assert h.gone == [ShareMemberGone(G, "a", "left")]
    assert h.c.share_group_member_epoch(G, "a") is None
    assert h.c.share_group_member_epoch(G, "b") == 2
    # b takes every partition at its next heartbeat
    assert partitions(h.beat("b", 2)) == {("t", p) for p in range(6)}


def test_a_silent_member_is_fenced_after_its_session():
    h = Harness(session_timeout_ms=45_000)
    h.join("a")
    h.join("b")
    for _ in range(5):
        h.advance(20_000)
        assert h.beat("b", h.group().members["b"].member_epoch)["error_code"] == E.NONE
    assert "a" not in h.group().members
    assert h.gone == [ShareMemberGone(G, "a", "session timeout")]
    assert [e.type for e in h.events].count("share_group_fenced") == 1
    assert h.beat("a", 1)["error_code"] == E.UNKNOWN_MEMBER_ID


def test_the_last_member_leaving_leaves_the_group_empty():
    h = Harness()
    h.join("a")
    h.beat("a", -1)
    assert h.group().state == ShareGroupState.EMPTY
    assert h.c.list_groups() == [{"group_id": G, "protocol_type": "share",
                                  "group_state": "Empty", "group_type": "share"}]


# -- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("request_fields,message", [
    (dict(group_id="", member_id="m", member_epoch=0, subscribed_topic_names=["t"]),
     "GroupId can't be empty."),
    (dict(group_id=G, member_id="m", member_epoch=0, subscribed_topic_names=None),
     "SubscribedTopicNames must be set in first request."),
    (dict(group_id=G, member_id="m", member_epoch=0, subscribed_topic_names=[]),
     "SubscribedTopicNames must be set in first request."),
    (dict(group_id=G, member_id="", member_epoch=3), "MemberId can't be empty."),
    (dict(group_id=G, member_id="m", member_epoch=-2), "MemberEpoch is invalid."),
    (dict(group_id=G, member_id="m", member_epoch=0, subscribed_topic_names=["t"],
          rack_id=""), "RackId can't be empty."),
])
def test_invalid_requests(request_fields, message):
    h = Harness()
    waiter = object()
    effects = h.c.share_groups.heartbeat(waiter, ShareHeartbeatRequest(**request_fields), 0,
                                         {"t": 1})
    [reply] = effects
    assert reply.body["error_code"] == E.INVALID_REQUEST
    assert reply.body["error_message"] == message


def test_unknown_member_and_unknown_group():
    h = Harness()
    h.join("a")
    assert h.beat("nobody", 1)["error_code"] == E.UNKNOWN_MEMBER_ID
    assert h.beat("nobody", -1)["error_code"] == E.UNKNOWN_MEMBER_ID
    assert h.beat("a", 1, group="other")["error_code"] == E.GROUP_ID_NOT_FOUND


def test_a_full_group_refuses_a_new_member_but_not_its_own():
    h = Harness(max_size=2)
    h.join("a")
    h.join("b")
    body = h.beat("c", 0, ["t"])
    assert body["error_code"] == E.GROUP_MAX_SIZE_REACHED
    assert h.beat("a", 1)["error_code"] == E.NONE


def test_classic_and_consumer_group_ids_are_not_share_groups_and_back():
    h = Harness()
    # a consumer group of that id
    waiter = object()
    h.apply(h.c.consumer_group_heartbeat(waiter, HeartbeatRequest(
        "cg", "", 0, subscribed_topic_names=["t"], rebalance_timeout_ms=5000), h.now))
    assert h.replies[waiter]["error_code"] == E.NONE
    body = h.beat("m", 0, ["t"], group="cg")
    assert (body["error_code"], body["error_message"]) == (
        E.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
    # a share group's id to the other protocols
    h.join("a")
    waiter = object()
    h.apply(h.c.consumer_group_heartbeat(waiter, HeartbeatRequest(
        G, "", 0, subscribed_topic_names=["t"], rebalance_timeout_ms=5000), h.now))
    assert h.replies[waiter]["error_code"] == E.GROUP_ID_NOT_FOUND
    waiter = object()
    h.apply(h.c.join(waiter, JoinRequest(G, "", None, 10_000, 30_000, "consumer",
                                         [("range", b"")]), h.now))
    assert h.replies[waiter]["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    assert isinstance(h.c.groups[G], ShareGroup)


def test_disabled_share_groups_answer_unsupported_version():
    h = Harness(enabled=False)
    assert h.beat("a", 0, ["t"])["error_code"] == E.UNSUPPORTED_VERSION
    assert G not in h.c.groups


# -- the other group APIs ---------------------------------------------------------------------

def test_describe_list_and_delete():
    h = Harness({"t": 2})
    h.join("a", client_id="app", client_host="/10.0.0.1")
    described = h.c.share_group_describe(G)
    assert described["error_code"] == E.NONE and described["group_state"] == "Stable"
    assert (described["group_epoch"], described["assignment_epoch"]) == (1, 1)
    assert described["assignor_name"] == "simple"
    [member] = described["members"]
    assert (member["member_id"], member["client_id"], member["client_host"]) == \
        ("a", "app", "/10.0.0.1")
    assert member["assignment"] == {"t": frozenset({0, 1})}
    assert h.c.share_group_describe("nope")["error_code"] == E.GROUP_ID_NOT_FOUND
    # DescribeGroups is for classic groups only (KIP-1043)
    assert h.c.describe(G)["error_code"] == E.GROUP_ID_NOT_FOUND
    assert h.c.list_groups({"Stable"})[0]["group_type"] == "share"
    assert h.c.delete_group(G, h.now)[0] == E.NON_EMPTY_GROUP
    h.beat("a", -1)
    error, effects = h.c.delete_group(G, h.now)
    assert error == E.NONE
    h.apply(effects)
    assert G not in h.c.groups
    assert h.reloaded().groups == {}  # its tombstones hold after a load too


# -- records and replay -----------------------------------------------------------------------

def test_records_are_kafkas_share_group_types():
    h = Harness()
    h.join("a")
    types = [offsets_topic.decode_key(r.key, kip932=True).type for r in h.records]
    # member metadata, group epoch, target member, target epoch, the partitions the group
    # may have share state on (first assigned now), current assignment
    assert types == [10, 11, 13, 12, 15, 14]
    # readers that know no share groups skip them
    assert all(offsets_topic.decode_key(r.key, kip848=True) is None for r in h.records)


def test_a_load_rebuilds_the_group_its_epochs_and_assignments():
    h = Harness({"t": 6})
    for m in "abc":
        h.join(m, client_id=f"client-{m}")
    h.beat("a", 1)
    h.beat("b", -1)
    c = h.reloaded()
    back, live = c.groups[G], h.group()
    assert isinstance(back, ShareGroup)
    assert (back.group_epoch, back.target_epoch, back.target) == \
        (live.group_epoch, live.target_epoch, live.target)
    assert back.members == live.members
    # a loaded member heartbeats on: the load itself bumps no epoch, and it catches up with
    # the group epoch b's leaving made; a silent one is fenced after a full session
    assert (live.members["a"].member_epoch, live.group_epoch) == (3, 4)
    waiter = object()
    effects = c.share_group_heartbeat(waiter, ShareHeartbeatRequest(G, "a", 3), h.now + 10_000)
    [reply] = [e for e in effects if isinstance(e, Reply)]
    assert (reply.body["error_code"], reply.body["member_epoch"]) == (E.NONE, 4)
    assert c.groups[G].group_epoch == 4
    assert c.on_timers(h.now + 44_999) == []
    fenced = [e for e in c.on_timers(h.now + 45_000) if isinstance(e, ShareMemberGone)]
    assert [e.member_id for e in fenced] == ["c"]


# -- the state partitions (the offsets admin APIs') -------------------------------------------

def test_the_partitions_a_group_may_have_state_on_outlive_its_members_and_a_load():
    h = Harness({"t": 2, "u": 1})
    h.join("a", ["t"])
    assert h.c.share_state_partitions(G) == (E.NONE, None, {"t": frozenset({0, 1})})
    records = len(h.records)
    h.join("b", ["t"])  # the same partitions again: nothing more written
    assert not [r for r in h.records[records:]
                if offsets_topic.decode_key(r.key, kip932=True).type == 15]
    assert h.c.share_state_partitions(G, require_empty=True)[0] == E.NON_EMPTY_GROUP
    h.beat("a", -1)
    h.beat("b", -1)
    # the group is empty: its state is still there, for the admin to see and reset
    assert h.c.share_state_partitions(G, require_empty=True)[2] == {"t": frozenset({0, 1})}
    h.apply(h.c.share_state_partitions_changed(G, {"u": frozenset({0})}, []))
    h.apply(h.c.share_state_partitions_changed(G, {}, ["t"]))
    expected = (E.NONE, None, {"u": frozenset({0})})
    assert h.c.share_state_partitions(G) == expected
    assert h.reloaded().share_state_partitions(G) == expected


def test_state_partitions_of_no_share_group_are_refused_and_deleted_with_the_group():
    h = Harness()
    assert h.c.share_state_partitions("nope")[0] == E.GROUP_ID_NOT_FOUND
    h.join("a")
    h.beat("a", -1)
    error, effects = h.c.delete_group(G, h.now)
    assert error == E.NONE
    h.apply(effects)
    assert h.c.share_state_partitions(G)[0] == E.GROUP_ID_NOT_FOUND
    assert h.reloaded().share_state_partitions(G)[0] == E.GROUP_ID_NOT_FOUND
    assert h.c.share_state_partitions_changed(G, {"t": frozenset({0})}, []) == []
