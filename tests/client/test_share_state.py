"""The share consumer's pure pieces: acquired-range filtering, acknowledgement batching, the
client's share session bookkeeping (client/consumer/share_state.py) and the share group
member's heartbeat state machine (client/consumer/share_membership.py)."""

from __future__ import annotations

import pytest

from client.consumer.share_membership import HeartbeatOutcome, ShareGroupMember
from client.consumer.share_state import (
    GAP, AcknowledgeType, ShareSessionState, acknowledgement_batches, acquired,
)
from client.types import TopicPartition
from protocol.errors import ErrorCode


def rows(*offsets: int) -> list[tuple]:
    return [("t", 0, o, 0, 0, None, str(o).encode()) for o in offsets]


def test_only_records_inside_acquired_ranges_are_kept_with_their_delivery_counts():
    kept, gaps = acquired(rows(0, 1, 2, 3, 4, 5, 6), [(5, 6, 1), (1, 2, 3)])
    assert [(r[2], count) for r, count in kept] == [(1, 3), (2, 3), (5, 1), (6, 1)]
    assert gaps == []


def test_acquired_offsets_without_a_record_are_gaps():
    # 2 is a transaction marker, 5..6 compacted away
    kept, gaps = acquired(rows(0, 1, 3, 4), [(0, 6, 2)])
    assert [r[2] for r, _ in kept] == [0, 1, 3, 4]
    assert gaps == [2, 5, 6]


def test_no_ranges_keep_nothing():
    assert acquired(rows(0, 1), []) == ([], [])


def test_acknowledgements_batch_into_runs_of_one_type():
    acks = {7: 1, 3: 1, 4: 1, 5: 2, 6: 1, 9: 3, 10: 3}
    assert acknowledgement_batches(acks) == [
        {"first_offset": 3, "last_offset": 4, "acknowledge_types": [1]},
        {"first_offset": 5, "last_offset": 5, "acknowledge_types": [2]},
        {"first_offset": 6, "last_offset": 7, "acknowledge_types": [1]},
        {"first_offset": 9, "last_offset": 10, "acknowledge_types": [3]},
    ]
    assert acknowledgement_batches({}) == []
    assert acknowledgement_batches({0: GAP, 1: AcknowledgeType.ACCEPT}) == [
        {"first_offset": 0, "last_offset": 0, "acknowledge_types": [0]},
        {"first_offset": 1, "last_offset": 1, "acknowledge_types": [1]}]


A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def test_a_session_opens_with_epoch_zero_then_names_only_changes():
    s: ShareSessionState[TopicPartition] = ShareSessionState()
    plan = s.plan([A, B])
    assert (plan.epoch, plan.named, plan.forgotten) == (0, [A, B], [])
    with pytest.raises(ValueError):
        s.plan([A], acknowledging=[A])  # an opening request may not acknowledge
    s.answered(plan)
    assert s.epoch == 1 and s.partitions == {A, B}
    # B no longer wanted, C new, A acknowledged
    plan = s.plan([A, C], acknowledging=[A])
    assert (plan.epoch, plan.named, plan.forgotten) == (1, [A, C], [B])
    s.answered(plan)
    assert s.epoch == 2 and s.partitions == {A, C}
    s.acknowledged()  # a ShareAcknowledge moves the epoch on too
    assert s.plan([A, C]).epoch == 3
    # acknowledging a partition no longer wanted names it and forgets it in one request
    plan = s.plan([A], acknowledging=[C])
    assert (plan.named, plan.forgotten) == ([C], [C])
    s.reset()
    assert (s.epoch, s.partitions) == (0, set())


def test_the_epoch_wraps_to_one():
    s: ShareSessionState[TopicPartition] = ShareSessionState(epoch=2**31 - 1, partitions={A})
    s.answered(s.plan([A]))
    assert s.epoch == 1


def member() -> ShareGroupMember:
    return ShareGroupMember("g", ["t"], heartbeat_interval_ms=5000, retry_backoff_ms=100,
                            member_id="m")


def answer(code: ErrorCode = ErrorCode.NONE, epoch: int = 1, assignment=None,
           interval: int = 2000) -> dict:
    return {"error_code": code, "member_id": "m", "member_epoch": epoch,
            "heartbeat_interval_ms": interval, "assignment": assignment}


def test_a_member_joins_with_epoch_zero_and_heartbeats_at_the_brokers_interval():
    mb = member()
    join = mb.tick(0)
    assert join == {"group_id": "g", "member_id": "m", "member_epoch": 0, "rack_id": None,
                    "subscribed_topic_names": ["t"]}
    assert mb.tick(0) is None  # one in flight
    assert mb.on_response(answer(assignment={"t": [0, 1]}), 10) is HeartbeatOutcome.OK
    assert mb.joined and mb.assignment == {A, B}
    assert mb.tick(2009) is None
    beat = mb.tick(2010)
    assert beat is not None and beat["member_epoch"] == 1
    assert beat["subscribed_topic_names"] is None  # unchanged since it was sent
    mb.on_response(answer(epoch=1), 2020)  # no assignment: unchanged
    assert mb.assignment == {A, B}
    mb.subscribe(["t", "u"], 2030)
    assert mb.tick(2030)["subscribed_topic_names"] == ["t", "u"]


def test_a_fenced_member_loses_its_assignment_and_joins_again_at_once():
    mb = member()
    mb.tick(0)
    mb.on_response(answer(epoch=4, assignment={"t": [0]}), 0)
    mb.tick(2000)
    assert mb.on_response(answer(ErrorCode.FENCED_MEMBER_EPOCH), 2001) is HeartbeatOutcome.REJOIN
    assert mb.assignment == frozenset() and not mb.joined
    again = mb.tick(2001)
    assert again["member_epoch"] == 0 and again["member_id"] == "m"
    assert again["subscribed_topic_names"] == ["t"]


def test_coordinator_errors_and_lost_requests_retry_after_the_backoff():
    mb = member()
    mb.tick(0)
    assert mb.on_response(answer(ErrorCode.NOT_COORDINATOR), 0) is HeartbeatOutcome.COORDINATOR
    assert mb.tick(99) is None and mb.tick(100) is not None
    mb.on_failed(200)
    assert mb.tick(299) is None and mb.tick(300)["member_epoch"] == 0


def test_a_fatal_error_stops_the_member_and_leave_is_sent_once_when_in_the_group():
    mb = member()
    mb.tick(0)
    assert mb.on_response(answer(ErrorCode.GROUP_AUTHORIZATION_FAILED), 0) \
        is HeartbeatOutcome.FATAL
    assert mb.error is not None and mb.tick(10_000) is None
    assert mb.leave() is None  # never joined
    joined = member()
    joined.tick(0)
    joined.on_response(answer(epoch=3, assignment={"t": [0]}), 0)
    assert joined.leave()["member_epoch"] == -1
    assert joined.leave() is None and joined.assignment == frozenset()
