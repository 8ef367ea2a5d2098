"""The KIP-848 member (client/consumer/consumer_membership.py), pure: what it sends and
which listener calls it asks for, in order, for each heartbeat answer."""

from __future__ import annotations

from client.consumer.consumer_membership import (
    ConsumerGroupMember, MemberState, SendConsumerGroupHeartbeat,
)
from client.consumer.membership import (
    CallListener, CommitOffsets, CoordinatorUnknown, Fatal, MemberConfig, StartFetching,
    StopFetching,
)
from client.types import TopicPartition
from protocol.errors import ErrorCode as E


def member(**config) -> ConsumerGroupMember:
    config.setdefault("topics", ["t"])
    return ConsumerGroupMember(MemberConfig(group_id="g", **config), member_id="m1")


def answer(epoch: int, assignment=None, error=E.NONE, interval=1000) -> dict:
    return {"error_code": error, "error_message": None, "member_id": "m1",
            "member_epoch": epoch, "heartbeat_interval_ms": interval,
            "assignment": assignment}


def sent(actions) -> dict:
    [send] = [a for a in actions if isinstance(a, SendConsumerGroupHeartbeat)]
    return send.body


def tps(*ps) -> tuple:
    return tuple(TopicPartition("t", p) for p in ps)


def test_it_joins_at_the_first_poll_with_its_subscription():
    m = member(max_poll_interval_ms=60_000)
    assert m.tick(0) == [] and m.next_deadline() is None  # not before a poll
    m.poll(0)
    body = sent(m.tick(0))
    assert body["member_epoch"] == 0 and body["member_id"] == "m1"
    assert body["subscribed_topic_names"] == ["t"] and body["rebalance_timeout_ms"] == 60_000
    assert body["topic_partitions"] == {}
    assert m.tick(0) == []  # one heartbeat in flight at a time


def test_an_assignment_revokes_what_moved_before_assigning_what_is_new():
    m = member(enable_auto_commit=True)
    m.poll(0)
    m.tick(0)
    actions = m.on_heartbeat_response(answer(1, {"t": [0, 1]}), 10)
    assert actions == [CallListener("assigned", tps(0, 1)), StartFetching(tps(0, 1))]
    assert m.state == MemberState.STABLE and m.generation == 1
    body = sent(m.tick(10))  # acknowledged at once, with what it owns
    assert body["member_epoch"] == 1 and body["topic_partitions"] == {"t": [0, 1]}
    assert body["subscribed_topic_names"] is None  # unchanged
    actions = m.on_heartbeat_response(answer(2, {"t": [1, 2]}), 20)
    assert actions == [CommitOffsets(tps(0)), StopFetching(tps(0)),
                       CallListener("revoked", tps(0)), CallListener("assigned", tps(2)),
                       StartFetching(tps(2))]
    assert sent(m.tick(20))["topic_partitions"] == {"t": [1, 2]}


def test_no_assignment_in_the_answer_changes_nothing_and_heartbeats_at_the_interval():
    m = member()
    m.poll(0)
    m.tick(0)
    m.on_heartbeat_response(answer(1, {"t": [0]}), 0)
    m.tick(0)
    assert m.on_heartbeat_response(answer(1, None, interval=700), 5) == []
    assert m.next_deadline() == 705 and m.tick(704) == []
    assert sent(m.tick(705))["member_epoch"] == 1


def test_fenced_it_loses_its_partitions_and_rejoins_with_epoch_zero():
    m = member()
    m.poll(0)
    m.tick(0)
    m.on_heartbeat_response(answer(3, {"t": [0, 1]}), 0)
    m.tick(0)
    actions = m.on_heartbeat_response(answer(-1, error=E.FENCED_MEMBER_EPOCH), 10)
    assert actions == [StopFetching(tps(0, 1)), CallListener("lost", tps(0, 1))]
    body = sent(m.tick(10))
    assert body["member_epoch"] == 0 and body["member_id"] == "m1"
    assert body["subscribed_topic_names"] == ["t"]


def test_coordinator_errors_are_retried_and_others_are_fatal():
    m = member(retry_backoff_ms=100)
    m.poll(0)
    m.tick(0)
    assert m.on_heartbeat_response(answer(-1, error=E.NOT_COORDINATOR), 0) == [
        CoordinatorUnknown("ConsumerGroupHeartbeat: NOT_COORDINATOR")]
    assert m.tick(99) == [] and sent(m.tick(100))["member_epoch"] == 0
    [fatal] = m.on_heartbeat_response(answer(-1, error=E.UNSUPPORTED_ASSIGNOR), 100)
    assert isinstance(fatal, Fatal) and m.state == MemberState.FAILED


def test_a_poll_timeout_leaves_and_the_next_poll_rejoins():
    m = member(max_poll_interval_ms=1000)
    m.poll(0)
    m.tick(0)
    m.on_heartbeat_response(answer(1, {"t": [0]}), 0)
    actions = m.tick(1000)
    assert actions[:2] == [StopFetching(tps(0)), CallListener("lost", tps(0))]
    assert sent(actions)["member_epoch"] == -1 and m.state == MemberState.UNJOINED
    assert m.out_of_generation
    m.poll(2000)
    assert sent(m.tick(2000))["member_epoch"] == 0


def test_close_revokes_and_leaves_a_static_member_with_minus_two():
    m = member()
    m.poll(0)
    m.tick(0)
    m.on_heartbeat_response(answer(1, {"t": [0]}), 0)
    actions = m.close(5)
    assert actions[:2] == [StopFetching(tps(0)), CallListener("revoked", tps(0))]
    assert sent(actions)["member_epoch"] == -1 and m.state == MemberState.CLOSED
    s = member(group_instance_id="i-1")
    s.poll(0)
    s.tick(0)
    s.on_heartbeat_response(answer(1, {"t": [0]}), 0)
    assert sent(s.close(5))["member_epoch"] == -2


def test_a_new_subscription_is_sent_at_once():
    m = member()
    m.poll(0)
    m.tick(0)
    m.on_heartbeat_response(answer(1, {"t": [0]}), 0)
    m.subscribe(["t", "u"], 50)
    assert m.next_deadline() == 50
    assert sent(m.tick(50))["subscribed_topic_names"] == ["t", "u"]
