"""The consumer member state machine (client/consumer/membership.py): pure, fake clock.

Responses are hand-built wire bodies; assignments are real ConsumerProtocolAssignment bytes.
"""

from __future__ import annotations

import pytest

from client import errors
from client.consumer.assignors import TopicPartition as TP
from client.consumer.membership import (
    VALID_PREVIOUS_STATES, CallListener, CommitOffsets, CoordinatorUnknown, Fatal, GroupMember,
    IllegalStateTransition, MemberConfig, MemberState, SendHeartbeat, SendJoinGroup, SendLeaveGroup, SendSyncGroup, StartFetching,
    StopFetching,
)
from protocol.consumer_protocol import (
    Assignment, Subscription, decode_assignment, decode_subscription, encode_assignment,
    encode_subscription,
)
from protocol.errors import ErrorCode as E

S = MemberState


def member(assignors=("range",), topics=("t",), **kw) -> GroupMember:
    cfg = MemberConfig(group_id="g", topics=topics, assignors=assignors,
                       session_timeout_ms=10_000, heartbeat_interval_ms=3_000,
                       max_poll_interval_ms=60_000, **kw)
    return GroupMember(cfg, partition_counts=lambda topics: {"t": 4, "u": 2})


def of(out, cls):
    return [a for a in out if isinstance(a, cls)]


def listener_calls(out):
    return [(a.kind, a.partitions) for a in out if isinstance(a, CallListener)]


def join_ok(member_id="m1", generation=1, leader="m0", members=(), protocol="range", **extra):
    body = {"error_code": 0, "generation_id": generation, "protocol_type": "consumer",
            "protocol_name": protocol, "leader": leader, "skip_assignment": False,
            "member_id": member_id, "members": list(members)}
    body.update(extra)
    return body


def sync_ok(parts: dict, protocol="range"):
    return {"error_code": 0, "protocol_type": "consumer", "protocol_name": protocol,
            "assignment": encode_assignment(Assignment(parts))}


def tps(*names):
    return tuple(TP(n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1])) for n in names)


def join_stable(m: GroupMember, parts: dict, now=0, generation=1, member_id="m1",
                protocol="range"):
    """Drive a follower through join + sync; returns the actions of the whole join."""
    out = m.poll(now) if m.state == S.UNJOINED else []
    out += m.on_join_response(join_ok(member_id, generation, protocol=protocol), now)
    out += m.on_sync_response(sync_ok(parts, protocol), now)
    assert m.state == S.STABLE
    return out


# -- joining -------------------------------------------------------------------------------

def test_follower_join_member_id_required_then_sync():
    m = member(group_instance_id=None)
    out = m.poll(0)
    [join] = of(out, SendJoinGroup)
    assert m.state == S.JOINING and listener_calls(out) == []  # first join: nothing to revoke
    body = join.body
    assert body["member_id"] == "" and body["protocol_type"] == "consumer"
    assert body["group_instance_id"] is None
    assert body["rebalance_timeout_ms"] == 60_000 and body["session_timeout_ms"] == 10_000
    [proto] = body["protocols"]
    sub = decode_subscription(proto["metadata"])
    assert proto["name"] == "range"
    assert (sub.version, sub.topics, sub.owned_partitions, sub.generation_id) == (3, ["t"], {}, -1)

    out = m.on_join_response({**join_ok("", -1), "error_code": int(E.MEMBER_ID_REQUIRED),
                              "member_id": "c-1"}, 5)
    [join] = out
    assert isinstance(join, SendJoinGroup) and join.body["member_id"] == "c-1"
    assert m.state == S.JOINING

    [sync] = m.on_join_response(join_ok("c-1", 7, leader="other"), 6)
    assert isinstance(sync, SendSyncGroup) and m.state == S.SYNCING and not m.is_leader
    assert sync.body["assignments"] == [] and sync.body["generation_id"] == 7
    assert sync.body["member_id"] == "c-1" and sync.body["protocol_name"] == "range"

    out = m.on_sync_response(sync_ok({"t": [0, 2]}), 7)
    assert m.state == S.STABLE and m.generation == 7
    assert out == [CallListener("assigned", tps("t-0", "t-2")), StartFetching(tps("t-0", "t-2"))]
    assert m.assignment == tps("t-0", "t-2")


def test_leader_runs_the_assignor_on_decoded_subscriptions():
    m = member(assignors=("range", "roundrobin"), topics=("t", "u"))
    [join] = m.poll(0)
    assert [p["name"] for p in join.body["protocols"]] == ["range", "roundrobin"]
    other = encode_subscription(Subscription(["t"], None, {}, -1, None))
    members = [{"member_id": "m1", "group_instance_id": None,
                "metadata": join.body["protocols"][1]["metadata"]},
               {"member_id": "m2", "group_instance_id": None, "metadata": other}]
    [sync] = m.on_join_response(join_ok("m1", 1, leader="m1", members=members,
                                        protocol="roundrobin"), 1)
    assert m.is_leader and m.protocol_name == "roundrobin"
    got = {a["member_id"]: decode_assignment(a["assignment"]).partitions
           for a in sync.body["assignments"]}
    # roundrobin over t-0..3 (both) and u-0..1 (m1 only), partition_counts t=4, u=2
    assert got == {"m1": {"t": [0, 2], "u": [0, 1]}, "m2": {"t": [1, 3]}}
    out = m.on_sync_response(sync_ok(got["m1"], "roundrobin"), 2)
    assert listener_calls(out) == [("assigned", tps("t-0", "t-2", "u-0", "u-1"))]


def test_leader_partition_counts_can_be_passed_with_the_response():
    m = member()
    [join] = m.poll(0)
    members = [{"member_id": "m1", "group_instance_id": None,
                "metadata": join.body["protocols"][0]["metadata"]}]
    [sync] = m.on_join_response(join_ok("m1", 1, leader="m1", members=members), 1,
                                partitions_per_topic={"t": 1})
    [a] = sync.body["assignments"]
    assert decode_assignment(a["assignment"]).partitions == {"t": [0]}


def test_fatal_join_errors_and_unknown_protocol():
    m = member()
    m.poll(0)
    [fatal] = m.on_join_response({**join_ok(), "error_code": int(E.INCONSISTENT_GROUP_PROTOCOL)}, 1)
    assert isinstance(fatal, Fatal) and m.state == S.FAILED
    assert isinstance(m.error, errors.InconsistentGroupProtocolError)
    assert m.poll(2) == [] and m.tick(100_000) == []

    m = member()
    m.poll(0)
    [fatal] = m.on_join_response(join_ok("m1", 1, leader="m1", protocol="sticky"), 1)
    assert isinstance(fatal, Fatal) and fatal.error.code == E.INCONSISTENT_GROUP_PROTOCOL


def test_retriable_join_error_resends_after_backoff():
    m = member(retry_backoff_ms=100)
    m.poll(0)
    out = m.on_join_response({**join_ok(), "error_code": int(E.NOT_COORDINATOR)}, 10)
    assert of(out, CoordinatorUnknown) and m.state == S.JOINING and m.next_deadline() == 110
    assert m.on_join_response(join_ok(), 20) == []  # stale answer while waiting: ignored
    assert m.tick(50) == []
    [join] = m.tick(110)
    assert isinstance(join, SendJoinGroup)


# -- eager ----------------------------------------------------------------------------------

def test_eager_revokes_everything_before_rejoining_and_assigns_all_after():
    m = member(assignors=("range",))
    join_stable(m, {"t": [0, 1]})
    assert m.rebalance_protocol == "eager"
    [hb] = m.tick(3_000)
    assert isinstance(hb, SendHeartbeat) and hb.body["generation_id"] == 1
    out = m.on_heartbeat_response({"error_code": int(E.REBALANCE_IN_PROGRESS)}, 3_001)
    assert out[:2] == [StopFetching(tps("t-0", "t-1")),
                       CallListener("revoked", tps("t-0", "t-1"))]
    [join] = out[2:]
    sub = decode_subscription(join.body["protocols"][0]["metadata"])
    assert sub.owned_partitions == {} and sub.generation_id == 1  # eager owns nothing now
    assert join.body["member_id"] == "m1" and m.assignment == ()

    m.on_join_response(join_ok("m1", 2), 3_002)
    out = m.on_sync_response(sync_ok({"t": [1, 2]}), 3_003)
    # everything assigned is reported, even t-1 that the member had before
    assert out == [CallListener("assigned", tps("t-1", "t-2")), StartFetching(tps("t-1", "t-2"))]


def test_eager_revoked_is_called_even_when_empty_and_auto_commit_first():
    m = member(enable_auto_commit=True)
    join_stable(m, {})
    m.tick(3_000)
    out = m.on_heartbeat_response({"error_code": int(E.REBALANCE_IN_PROGRESS)}, 3_001)
    assert listener_calls(out) == [("revoked", ())] and not of(out, CommitOffsets)

    m = member(enable_auto_commit=True)
    join_stable(m, {"t": [0]})
    out = m.subscribe(["t", "u"], 10)
    assert out[:3] == [CommitOffsets(tps("t-0")), StopFetching(tps("t-0")),
                       CallListener("revoked", tps("t-0"))]
    assert decode_subscription(out[3].body["protocols"][0]["metadata"]).topics == ["t", "u"]


def test_sticky_user_data_under_eager_carries_the_previous_assignment():
    m = member(assignors=("sticky",))
    join_stable(m, {"t": [0, 3]}, generation=4, protocol="sticky")
    out = m.request_rejoin("metadata changed", 10)
    assert listener_calls(out) == [("revoked", tps("t-0", "t-3"))]
    join = of(out, SendJoinGroup)[0]
    sub = decode_subscription(join.body["protocols"][0]["metadata"])
    assert sub.owned_partitions == {} and sub.generation_id == 4
    from client.consumer.assignors.sticky import decode_sticky_user_data
    assert decode_sticky_user_data(sub.user_data) == ([TP("t", 0), TP("t", 3)], 4)


# -- cooperative ----------------------------------------------------------------------------

def test_cooperative_revokes_only_what_moved_and_rejoins_at_once():
    m = member(assignors=("cooperative-sticky",))
    assert m.rebalance_protocol == "cooperative"
    join_stable(m, {"t": [0, 1, 2]}, protocol="cooperative-sticky")
    m.tick(3_000)
    out = m.on_heartbeat_response({"error_code": int(E.REBALANCE_IN_PROGRESS)}, 3_001)
    # nothing revoked before the join; owned partitions and generation go in the subscription
    assert listener_calls(out) == [] and not of(out, StopFetching)
    [join] = out
    sub = decode_subscription(join.body["protocols"][0]["metadata"])
    assert sub.owned_partitions == {"t": [0, 1, 2]} and sub.generation_id == 1
    assert sub.user_data == (1).to_bytes(4, "big")
    assert m.assignment == tps("t-0", "t-1", "t-2")  # still consuming through the join

    m.on_join_response(join_ok("m1", 2, protocol="cooperative-sticky"), 3_002)
    out = m.on_sync_response(sync_ok({"t": [0, 1]}, "cooperative-sticky"), 3_003)
    assert out[:3] == [StopFetching(tps("t-2")), CallListener("revoked", tps("t-2")),
                       CallListener("assigned", ())]
    assert not of(out, StartFetching)  # kept partitions are never stopped nor restarted
    [follow_up] = out[3:]
    assert isinstance(follow_up, SendJoinGroup) and m.state == S.JOINING
    sub = decode_subscription(follow_up.body["protocols"][0]["metadata"])
    assert sub.owned_partitions == {"t": [0, 1]} and sub.generation_id == 2

    m.on_join_response(join_ok("m1", 3, protocol="cooperative-sticky"), 3_004)
    out = m.on_sync_response(sync_ok({"t": [0, 1, 3]}, "cooperative-sticky"), 3_005)
    assert out == [CallListener("assigned", tps("t-3")), StartFetching(tps("t-3"))]
    assert m.state == S.STABLE


def test_cooperative_without_revocation_does_not_rejoin():
    m = member(assignors=("cooperative-sticky",))
    join_stable(m, {"t": [0]}, protocol="cooperative-sticky")
    m.request_rejoin("metadata", 10)
    m.on_join_response(join_ok("m1", 2, protocol="cooperative-sticky"), 11)
    out = m.on_sync_response(sync_ok({"t": [0, 1]}, "cooperative-sticky"), 12)
    assert out == [CallListener("assigned", tps("t-1")), StartFetching(tps("t-1"))]
    assert m.state == S.STABLE


def test_cooperative_subscription_change_revokes_dropped_topics_before_join():
    m = member(assignors=("cooperative-sticky",), topics=("t", "u"))
    join_stable(m, {"t": [0], "u": [1]}, protocol="cooperative-sticky")
    out = m.subscribe(["t"], 10)
    assert out[:2] == [StopFetching(tps("u-1")), CallListener("revoked", tps("u-1"))]
    sub = decode_subscription(out[2].body["protocols"][0]["metadata"])
    assert sub.topics == ["t"] and sub.owned_partitions == {"t": [0]}


def test_subscription_change_during_a_join_waits_for_it():
    m = member(assignors=("cooperative-sticky",))
    m.poll(0)
    assert m.subscribe(["t", "u"], 1) == []  # one JoinGroup in flight at a time
    m.on_join_response(join_ok("m1", 1, protocol="cooperative-sticky"), 2)
    out = m.on_sync_response(sync_ok({"t": [0]}, "cooperative-sticky"), 3)
    join = of(out, SendJoinGroup)[0]
    assert decode_subscription(join.body["protocols"][0]["metadata"]).topics == ["t", "u"]


# -- falling out of the group ---------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["range", "cooperative-sticky"])
def test_illegal_generation_loses_partitions_and_rejoins_with_reset_generation(protocol):
    m = member(assignors=(protocol,))
    join_stable(m, {"t": [0, 1]}, generation=5, protocol=protocol)
    m.tick(3_000)
    out = m.on_heartbeat_response({"error_code": int(E.ILLEGAL_GENERATION)}, 3_001)
    assert out[:2] == [StopFetching(tps("t-0", "t-1")), CallListener("lost", tps("t-0", "t-1"))]
    assert "revoked" not in [k for k, _ in listener_calls(out)]
    [join] = out[2:]
    sub = decode_subscription(join.body["protocols"][0]["metadata"])
    assert sub.generation_id == -1 and sub.owned_partitions == {}
    assert join.body["member_id"] == "m1"  # ILLEGAL_GENERATION keeps the member id (Java 3.x)
    assert m.generation == -1 and m.assignment == ()


def test_unknown_member_id_resets_the_member_id_too():
    m = member()
    join_stable(m, {"t": [0]})
    m.tick(3_000)
    out = m.on_heartbeat_response({"error_code": int(E.UNKNOWN_MEMBER_ID)}, 3_001)
    assert listener_calls(out) == [("lost", tps("t-0"))]
    assert of(out, SendJoinGroup)[0].body["member_id"] == ""


def test_sync_errors():
    m = member(assignors=("cooperative-sticky",))
    join_stable(m, {"t": [0]}, protocol="cooperative-sticky")
    m.request_rejoin("x", 10)
    m.on_join_response(join_ok("m1", 2, protocol="cooperative-sticky"), 11)
    out = m.on_sync_response({"error_code": int(E.REBALANCE_IN_PROGRESS), "assignment": b""}, 12)
    assert listener_calls(out) == [] and isinstance(out[0], SendJoinGroup)  # keeps t-0
    m.on_join_response(join_ok("m1", 3, protocol="cooperative-sticky"), 13)
    out = m.on_sync_response({"error_code": int(E.UNKNOWN_MEMBER_ID), "assignment": b""}, 14)
    assert listener_calls(out) == [("lost", tps("t-0"))]
    assert of(out, SendJoinGroup)[0].body["member_id"] == ""


def test_session_timeout_without_heartbeat_answers_loses_partitions():
    m = member()
    join_stable(m, {"t": [0, 1]})
    [hb] = m.tick(3_000)
    assert m.tick(6_000) == []  # one heartbeat in flight at a time
    assert m.next_deadline() == 10_000
    out = m.tick(10_000)
    assert listener_calls(out) == [("lost", tps("t-0", "t-1"))]
    [join] = of(out, SendJoinGroup)
    assert join.body["member_id"] == "" and m.state == S.JOINING


def test_successful_heartbeats_keep_the_session_alive():
    m = member()
    join_stable(m, {"t": [0]})
    now = 0
    for _ in range(10):
        now += 3_000
        [hb] = m.tick(now)
        assert isinstance(hb, SendHeartbeat)
        assert m.on_heartbeat_response({"error_code": 0}, now + 5) == []
        m.poll(now)
    assert m.state == S.STABLE and m.assignment == tps("t-0")


def test_heartbeat_network_failure_retries_after_backoff():
    m = member(retry_backoff_ms=100)
    join_stable(m, {"t": [0]})
    m.tick(3_000)
    assert m.on_request_failed("heartbeat", 3_010) == []
    assert m.next_deadline() == 3_110
    assert isinstance(m.tick(3_110)[0], SendHeartbeat)


def test_max_poll_interval_expiry_leaves_and_rejoins_on_next_poll():
    m = member()
    join_stable(m, {"t": [0]})
    now = 0
    while now < 60_000:  # heartbeats answered, but the application never polls
        now = m.next_deadline()
        for action in m.tick(now):
            if isinstance(action, SendHeartbeat):
                m.on_heartbeat_response({"error_code": 0}, now)
        if m.state != S.STABLE:
            break
    assert now == 60_000 and m.state == S.UNJOINED
    # the tick at 60_000 sent the LeaveGroup
    m2 = member()
    join_stable(m2, {"t": [0]})
    m2.tick(3_000)
    m2.on_heartbeat_response({"error_code": 0}, 3_000)
    assert not m2.out_of_generation
    out = m2.tick(60_000)
    # the partitions are lost at once (assignment() shrinks now, not at the next poll)
    assert out == [StopFetching(tps("t-0")), CallListener("lost", tps("t-0")),
                   SendLeaveGroup({"group_id": "g", "member_id": "m1", "members": [
                       {"member_id": "m1", "group_instance_id": None,
                        "reason": "consumer poll timeout has expired."}]})]
    assert m2.state == S.UNJOINED and m2.next_deadline() is None
    assert m2.assignment == () and m2.out_of_generation  # a commit now: CommitFailedError
    out = m2.poll(70_000)
    assert not of(out, CallListener)  # told once
    assert of(out, SendJoinGroup)[0].body["member_id"] == ""


def test_static_member_sends_instance_id_and_never_leaves():
    m = member(group_instance_id="i-1")
    [join] = m.poll(0)
    assert join.body["group_instance_id"] == "i-1"
    [sync] = m.on_join_response(join_ok("i-1-x", 1), 1)
    assert sync.body["group_instance_id"] == "i-1"
    m.on_sync_response(sync_ok({"t": [0]}), 2)
    assert m.tick(3_000) == [] and m.next_deadline() == 3_002
    [hb] = m.tick(3_002)
    assert hb.body["group_instance_id"] == "i-1"
    m.on_heartbeat_response({"error_code": 0}, 3_002)
    out = m.close(4_000)
    assert out == [StopFetching(tps("t-0")), CallListener("revoked", tps("t-0"))]
    assert m.state == S.CLOSED
    # poll-interval expiry: no LeaveGroup either
    m = member(group_instance_id="i-1")
    join_stable(m, {"t": [0]})
    assert not of(m.tick(60_000), SendLeaveGroup) and m.state == S.UNJOINED


def test_dynamic_member_close_revokes_and_leaves():
    m = member(enable_auto_commit=True)
    join_stable(m, {"t": [0]})
    out = m.close(10)
    assert out[:3] == [CommitOffsets(tps("t-0")), StopFetching(tps("t-0")),
                       CallListener("revoked", tps("t-0"))]
    assert isinstance(out[3], SendLeaveGroup) and out[3].body["member_id"] == "m1"
    assert m.close(11) == [] and m.poll(12) == []


def test_close_mid_rebalance_reports_lost():
    m = member(assignors=("cooperative-sticky",))
    join_stable(m, {"t": [0]}, protocol="cooperative-sticky")
    m.request_rejoin("x", 10)
    out = m.close(11)
    assert listener_calls(out) == [("lost", tps("t-0"))] and of(out, SendLeaveGroup)


def test_fenced_instance_id_is_fatal():
    m = member(group_instance_id="i-1")
    join_stable(m, {"t": [0]})
    m.tick(3_000)
    [fatal] = m.on_heartbeat_response({"error_code": int(E.FENCED_INSTANCE_ID)}, 3_001)
    assert isinstance(fatal, Fatal) and isinstance(fatal.error, errors.FencedInstanceIdError)
    assert m.state == S.FAILED and m.tick(100_000) == [] and m.next_deadline() is None

    m = member(group_instance_id="i-1")
    m.poll(0)
    [fatal] = m.on_join_response({**join_ok(), "error_code": int(E.FENCED_INSTANCE_ID)}, 1)
    assert isinstance(fatal.error, errors.FencedInstanceIdError)


def test_stale_heartbeat_errors_are_ignored():
    m = member()
    join_stable(m, {"t": [0]})
    m.tick(3_000)
    m.request_rejoin("x", 3_001)  # eager: revoked + JoinGroup; the heartbeat is stale now
    assert m.on_heartbeat_response({"error_code": int(E.REBALANCE_IN_PROGRESS)}, 3_002) == []
    assert m.on_heartbeat_response({"error_code": int(E.ILLEGAL_GENERATION)}, 3_003) == []
    assert m.state == S.JOINING


# -- the transition table ------------------------------------------------------------------

def member_in(state: MemberState) -> GroupMember:
    """A member brought to `state` by events only."""
    m = member()
    if state == S.JOINING:
        m.poll(0)
    elif state == S.SYNCING:
        m.poll(0)
        m.on_join_response(join_ok(), 0)
    elif state == S.STABLE:
        join_stable(m, {"t": [0]})
    elif state == S.FAILED:
        m.poll(0)
        m.on_join_response({**join_ok(), "error_code": int(E.GROUP_AUTHORIZATION_FAILED)}, 0)
    elif state == S.CLOSED:
        m.close(0)
    assert m.state == state
    return m


def test_every_state_declares_its_previous_states():
    assert set(VALID_PREVIOUS_STATES) == set(MemberState)
    # nothing leaves FAILED or CLOSED but close()
    assert {t for t, previous in VALID_PREVIOUS_STATES.items() if S.FAILED in previous} == {
        S.CLOSED}
    assert {t for t, previous in VALID_PREVIOUS_STATES.items() if S.CLOSED in previous} == {
        S.CLOSED}


@pytest.mark.parametrize("source", list(MemberState), ids=lambda s: s.name)
@pytest.mark.parametrize("target", list(MemberState), ids=lambda s: s.name)
def test_transition_to_follows_the_table(source, target):
    m = member_in(source)
    if source in VALID_PREVIOUS_STATES[target]:
        m.transition_to(target)
        assert m.state == target
    else:
        with pytest.raises(IllegalStateTransition, match=f"{source.name} to {target.name}"):
            m.transition_to(target)
        assert m.state == source


def test_state_is_read_only():
    m = member()
    with pytest.raises(AttributeError):
        m.state = S.STABLE  # type: ignore[misc]
    assert m.state == S.UNJOINED


def test_a_full_life_passes_only_declared_transitions():
    """Join, a rebalance, a poll timeout, a rejoin, a coordinator move during sync, close:
    each step lands in the state the diagram says (transition_to raised on any other)."""
    m = member()
    seen = [m.state]
    join_stable(m, {"t": [0, 1]}, now=0)
    seen.append(m.state)
    m.tick(3_000)  # the heartbeat that gets the error must be in flight first
    m.on_heartbeat_response({"error_code": int(E.REBALANCE_IN_PROGRESS)}, 3_001)
    seen.append(m.state)
    m.on_join_response(join_ok(generation=2), 3_002)
    m.on_sync_response(sync_ok({"t": [0]}), 3_003)
    seen.append(m.state)
    m.tick(3_003 + 60_000)  # max.poll.interval expired
    seen.append(m.state)
    m.poll(70_000)
    m.on_join_response(join_ok(generation=3), 70_001)
    m.on_sync_response({"error_code": int(E.NOT_COORDINATOR)}, 70_002)
    seen.append(m.state)
    m.tick(70_002 + 100)
    m.on_join_response(join_ok(generation=4), 70_200)
    m.on_sync_response(sync_ok({"t": [1]}), 70_201)
    seen.append(m.state)
    m.close(70_300)
    seen.append(m.state)
    assert seen == [S.UNJOINED, S.STABLE, S.JOINING, S.STABLE, S.UNJOINED, S.JOINING,
                    S.STABLE, S.CLOSED]
    assert m.assignment == ()
