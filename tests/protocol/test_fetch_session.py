"""The fetcher's side of KIP-227 (protocol.fetch_session): what each request carries and
how an answer, an error or a lost connection moves the session on."""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, FetchSessionHandler

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def opened(session_id: int = 77) -> FetchSessionHandler:
    h: FetchSessionHandler = FetchSessionHandler()
    h.want({A: {"offset": 0}, B: {"offset": 0}})
    plan = h.build()
    assert plan.full and plan.epoch == INITIAL_EPOCH and set(plan.partitions) == {A, B}
    assert h.handle_response(plan, ErrorCode.NONE, session_id)
    return h


def test_after_a_full_fetch_only_changes_are_sent_at_rising_epochs():
    h = opened()
    idle = h.build()
    assert (idle.session_id, idle.epoch, dict(idle.partitions), idle.forgotten) == (77, 1, {}, ())
    assert h.handle_response(idle, ErrorCode.NONE, 77)
    h.want({A: {"offset": 5}, C: {"offset": 0}})  # A moved, C added, B no longer wanted
    plan = h.build()
    assert plan.epoch == 2 and plan.partitions == {A: {"offset": 5}, C: {"offset": 0}}
    assert plan.forgotten == (B,)
    assert h.handle_response(plan, ErrorCode.NONE, 77)
    assert h.sent == {A: {"offset": 5}, C: {"offset": 0}}
    assert h.build().partitions == {} and h.epoch == 3


def test_session_not_found_opens_a_new_session_and_other_errors_replace_the_old_one():
    h = opened()
    plan = h.build()
    assert not h.handle_response(plan, ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    full = h.build()
    assert full.full and full.session_id == 0 and set(full.partitions) == {A, B}
    h = opened()
    assert not h.handle_response(h.build(), ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    full = h.build()
    # a full request naming the old session closes it at the broker and opens another
    assert full.full and full.session_id == 77 and set(full.partitions) == {A, B}


def test_a_lost_answer_makes_the_next_request_a_full_one():
    h = opened()
    h.build()
    h.handle_error()
    assert h.build().full and set(h.build().partitions) == {A, B}


def test_a_full_cache_means_full_requests_from_then_on():
    h = opened(session_id=0)
    again = h.build()
    assert again.full and again.session_id == 0 and set(again.partitions) == {A, B}


def test_changes_made_while_a_request_is_out_are_sent_with_the_next():
    h = opened()
    plan = h.build()
    h.set(A, {"offset": 9})  # records appended meanwhile
    h.remove(B)  # and a partition moved away
    assert h.handle_response(plan, ErrorCode.NONE, 77)
    nxt = h.build()
    assert nxt.partitions == {A: {"offset": 9}} and nxt.forgotten == (B,)


def test_without_sessions_every_request_is_full_at_epoch_minus_one():
    h: FetchSessionHandler = FetchSessionHandler(use_sessions=False)
    h.want({A: {"offset": 0}})
    plan = h.build()
    assert plan.full and plan.epoch == FINAL_EPOCH
    assert h.handle_response(plan, ErrorCode.NONE, 0)
    h.want({B: {"offset": 0}})
    assert set(h.build().partitions) == {B} and h.build().forgotten == ()
