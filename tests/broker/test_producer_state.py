"""Idempotent-producer sequence rules, driven directly (no broker, no clock)."""

from __future__ import annotations

from broker.producer_state import ProducerStateManager, next_sequence
from protocol.errors import ErrorCode

PID = 1000


def _append(state, epoch, seq, count, offset):
    check = state.check(PID, epoch, seq, count)
    if check.error == ErrorCode.NONE and check.duplicate is None:
        state.update(PID, epoch, seq, count, offset, 0, 0)
    return check


def test_in_order_batches_are_accepted_and_retries_deduplicated():
    state = ProducerStateManager()
    assert _append(state, 0, 0, 5, 0).error == ErrorCode.NONE
    assert _append(state, 0, 5, 5, 5).error == ErrorCode.NONE
    retry = _append(state, 0, 0, 5, 99)
    assert retry.error == ErrorCode.NONE and retry.duplicate.first_offset == 0
    assert _append(state, 0, 5, 5, 99).duplicate.first_offset == 5


def test_only_the_last_five_batches_are_remembered():
    state = ProducerStateManager()
    for i in range(6):
        _append(state, 0, i, 1, i)
    assert state.check(PID, 0, 1, 1).duplicate.first_offset == 1
    assert state.check(PID, 0, 0, 1).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_gaps_old_epochs_and_new_epochs():
    state = ProducerStateManager()
    _append(state, 3, 0, 2, 0)
    assert state.check(PID, 3, 5, 1).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check(PID, 2, 2, 1).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert state.check(PID, 4, 7, 1).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check(PID, 4, 0, 1).error == ErrorCode.NONE


def test_unknown_producers_may_start_anywhere_and_sequences_wrap():
    state = ProducerStateManager()
    top = 2**31 - 1
    assert _append(state, 0, top - 1, 2, 0).error == ErrorCode.NONE  # covers top-1, top
    assert next_sequence(top) == 0
    assert _append(state, 0, 0, 1, 2).error == ErrorCode.NONE


def test_expiry_and_truncation_forget_producers():
    state = ProducerStateManager()
    state.update(PID, 0, 0, 1, 0, 0, now_ms=1_000)
    state.update(PID + 1, 0, 0, 1, 1, 0, now_ms=5_000)
    assert state.expire(now_ms=6_000, expiration_ms=2_000) == [PID]
    state.truncate_after(1)
    assert state.producers == {}
