"""TransactionState's transitions against Kafka's table, and TransactionMetadata refusing
illegal transitions and completions."""

from dataclasses import replace

import pytest

from broker.transaction.state import (
    VALID_PREVIOUS_STATES, IllegalTransactionTransition, TransactionMetadata, TransactionState,
)

S = TransactionState

# Kafka's TransactionState.validPreviousStates, written out by name from TransactionMetadata
# .scala (3.9) / TransactionState.java (4.x), with the log's state ids
KAFKA = {
    "Empty": (0, {"Empty", "CompleteCommit", "CompleteAbort"}),
    "Ongoing": (1, {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"}),
    "PrepareCommit": (2, {"Ongoing"}),
    "PrepareAbort": (3, {"Ongoing", "PrepareEpochFence"}),
    "CompleteCommit": (4, {"PrepareCommit"}),
    "CompleteAbort": (5, {"PrepareAbort"}),
    "Dead": (6, {"Empty", "CompleteAbort", "CompleteCommit"}),
    "PrepareEpochFence": (7, {"Ongoing"}),
}


def test_the_transition_table_is_kafkas():
    assert {s.value for s in S} == set(KAFKA)
    for state in S:
        state_id, previous = KAFKA[state.value]
        assert state.id == state_id and S.from_id(state_id) is state
        assert {p.value for p in VALID_PREVIOUS_STATES[state]} == previous, state
    assert {s.value for s in S if s.is_expiration_allowed} == {
        "Empty", "CompleteCommit", "CompleteAbort"}


def _in(state: S, epoch: int = 3) -> TransactionMetadata:
    partitions = {("t", 0)} if state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) \
        else set()
    return TransactionMetadata("tx", 100, producer_epoch=epoch, state=state,
                               topic_partitions=partitions, txn_start_timestamp=5,
                               txn_last_update_timestamp=5)


# each prepare method and the state it leads to
PREPARES = {
    S.ONGOING: lambda md: md.prepare_add_partitions({("t", 1)}, 10),
    S.PREPARE_COMMIT: lambda md: md.prepare_abort_or_commit(S.PREPARE_COMMIT, 10),
    S.PREPARE_ABORT: lambda md: md.prepare_abort_or_commit(S.PREPARE_ABORT, 10),
    S.PREPARE_EPOCH_FENCE: lambda md: md.prepare_fence_producer_epoch(),
    S.DEAD: lambda md: md.prepare_dead(),
    S.EMPTY: lambda md: md.prepare_increment_producer_epoch(1000, None, 10),
}


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(PREPARES))
def test_prepare_is_refused_from_an_illegal_state(source, target):
    md = _in(source)
    if source in VALID_PREVIOUS_STATES[target]:
        transit = PREPARES[target](md)
        assert transit.txn_state == target and md.pending_state == target
        assert md.state == source  # nothing changes until the record is replayed
    else:
        with pytest.raises(IllegalTransactionTransition):
            PREPARES[target](md)
        assert md.pending is None


def test_complete_is_refused_outside_a_decision():
    for state in S:
        md = _in(state)
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            expected = S.COMPLETE_COMMIT if state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
            assert md.prepare_complete(10).txn_state == expected
        else:
            with pytest.raises(IllegalTransactionTransition):
                md.prepare_complete(10)


def test_a_second_prepare_while_one_is_pending_is_refused():
    md = _in(S.ONGOING)
    md.prepare_abort_or_commit(S.PREPARE_COMMIT, 10)
    with pytest.raises(IllegalTransactionTransition):
        md.prepare_abort_or_commit(S.PREPARE_ABORT, 10)


def test_completion_applies_only_the_pending_transit_and_partitions_only_grow():
    md = _in(S.ONGOING)
    transit = md.prepare_add_partitions({("t", 1)}, 10)
    md.complete_transition(transit)
    assert md.state == S.ONGOING and md.topic_partitions == {("t", 0), ("t", 1)}
    assert md.txn_start_timestamp == 5 and md.txn_last_update_timestamp == 10
    with pytest.raises(IllegalTransactionTransition):  # nothing pending
        md.complete_transition(transit)
    md.prepare_add_partitions({("t", 2)}, 11)
    assert md.pending is not None
    shrunk = replace(md.pending, topic_partitions=frozenset({("t", 2)}))
    md.pending = shrunk  # a transit that would lose partitions
    with pytest.raises(IllegalTransactionTransition):
        md.complete_transition(shrunk)


def test_the_fence_bumps_the_epoch_and_the_abort_carries_it():
    md = _in(S.ONGOING, epoch=3)
    transit = md.prepare_fenced_abort(20)
    assert (transit.txn_state, transit.producer_epoch, transit.last_producer_epoch) == (
        S.PREPARE_ABORT, 4, -1)
    md.complete_transition(transit)
    assert md.producer_epoch == 4 and md.state == S.PREPARE_ABORT
    # a commit cannot bump the epoch
    md2 = _in(S.ONGOING, epoch=3)
    commit = md2.prepare_abort_or_commit(S.PREPARE_COMMIT, 20)
    md2.pending = bumped = replace(commit, producer_epoch=4)
    with pytest.raises(IllegalTransactionTransition):
        md2.complete_transition(bumped)


def test_no_fence_at_the_last_epoch():
    with pytest.raises(IllegalTransactionTransition):
        _in(S.ONGOING, epoch=32767).prepare_fence_producer_epoch()


def test_epoch_bump_rules_of_kip_360():
    md = _in(S.EMPTY, epoch=3)
    md.last_producer_epoch = 2
    bump = md.prepare_increment_producer_epoch(1000, 3, 10)
    assert bump is not None and bump.producer_epoch == 4
    md.abort_pending()
    retry = md.prepare_increment_producer_epoch(1000, 2, 10)  # a lost answer, retried
    assert retry is not None and (retry.producer_epoch, retry.last_producer_epoch) == (3, 2)
    md.abort_pending()
    assert md.prepare_increment_producer_epoch(1000, 1, 10) is None  # fenced
    fresh = md.prepare_increment_producer_epoch(1000, None, 10)
    assert fresh is not None and (fresh.producer_epoch, fresh.last_producer_epoch) == (4, -1)
