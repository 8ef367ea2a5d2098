"""The transaction coordinator's protocol: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, markers, timeouts, expiry and the load path, on a plain clock."""

import pytest

from broker.coordinator.effects import Reply
from broker.coordinator.offsets import partition_of
from broker.transaction.coordinator import (
    TransactionConfig, TransactionCoordinator, error_for_version,
    verification_error_for_version,
)
from broker.transaction.effects import Append
from broker.transaction.records import TransactionLogValue
from broker.transaction.state import (
    IllegalTransactionTransition, TransactionResult, TransactionState,
)
from protocol.errors import ErrorCode
from tests.broker.transaction.runtime import COORDINATOR_EPOCH, Runtime

E = ErrorCode
S = TransactionState
T0, T1, OFFSETS = ("orders", 0), ("orders", 1), "__consumer_offsets"


@pytest.fixture
def rt() -> Runtime:
    return Runtime()


def begin(rt: Runtime, tid: str = "tx", timeout_ms: int = 60_000) -> tuple[int, int]:
    body = rt.init(tid, timeout_ms)
    assert body["error_code"] == E.NONE, body
    return body["producer_id"], body["producer_epoch"]


def states(rt: Runtime, tid: str = "tx") -> list:
    return [v.transaction_status if v is not None else None for t, v in rt.log if t == tid]


@pytest.mark.parametrize("commit", [True, False])
def test_a_transaction_from_init_to_its_markers(rt, commit):
    pid, epoch = begin(rt)
    assert (pid, epoch) == (1000, 0)
    rt.now = 100
    assert rt.add("tx", pid, epoch, T0) == E.NONE
    assert rt.metadata("tx").txn_start_timestamp == 100
    rt.now = 150
    assert rt.add("tx", pid, epoch, T0, T1) == E.NONE
    assert rt.add_offsets("tx", pid, epoch, "group-a") == E.NONE
    group_tp = (OFFSETS, partition_of("group-a", 50))
    assert rt.metadata("tx").topic_partitions == {T0, T1, group_tp}
    assert rt.metadata("tx").txn_start_timestamp == 100  # the first partition started it
    rt.now = 200
    assert rt.end("tx", pid, epoch, commit) == {"error_code": E.NONE, "producer_id": pid,
                                                 "producer_epoch": epoch}
    result = TransactionResult(commit)
    assert rt.metadata("tx").state == result.prepare_state
    [markers] = rt.markers
    assert (markers.producer_id, markers.producer_epoch, markers.result, markers.partitions,
            markers.coordinator_epoch) == (pid, epoch, result, frozenset({T0, T1, group_tp}),
                                           COORDINATOR_EPOCH)
    rt.now = 250
    rt.write_markers()
    md = rt.metadata("tx")
    assert (md.state, md.topic_partitions, md.producer_epoch) == (result.complete_state, set(),
                                                                  epoch)
    assert states(rt) == [S.EMPTY, S.ONGOING, S.ONGOING, S.ONGOING, result.prepare_state,
                          result.complete_state]
    # the next transaction starts from the completed one
    rt.now = 300
    assert rt.add("tx", pid, epoch, T1) == E.NONE
    assert rt.metadata("tx").topic_partitions == {T1} and rt.metadata("tx").txn_start_timestamp == 300


def test_adding_partitions_already_in_the_transaction_writes_nothing(rt):
    pid, epoch = begin(rt)
    rt.add("tx", pid, epoch, T0)
    written = len(rt.log)
    assert rt.add("tx", pid, epoch, T0) == E.NONE and len(rt.log) == written


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction(rt):
    pid, old = begin(rt)
    rt.add("tx", pid, old, T0)
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS
    md = rt.metadata("tx")
    assert (md.state, md.producer_epoch, md.last_producer_epoch) == (S.PREPARE_ABORT, old + 1, -1)
    [markers] = rt.markers
    assert (markers.result, markers.producer_epoch, markers.partitions) == (
        TransactionResult.ABORT, old + 1, frozenset({T0}))
    # the fenced producer is refused everything
    assert rt.add("tx", pid, old, T1) == E.PRODUCER_FENCED
    assert rt.end("tx", pid, old, True)["error_code"] == E.PRODUCER_FENCED
    # the new one retries until the abort is complete
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS
    rt.write_markers()
    assert rt.metadata("tx").state == S.COMPLETE_ABORT
    body = rt.init("tx")
    assert (body["error_code"], body["producer_id"], body["producer_epoch"]) == (
        E.NONE, pid, old + 2)
    # the old producer, naming its epoch (KIP-360), is still fenced
    assert rt.init("tx", producer_id=pid, producer_epoch=old)["error_code"] == E.PRODUCER_FENCED
    assert states(rt) == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]


def test_an_end_txn_retried_after_it_completed(rt):
    pid, epoch = begin(rt)
    rt.add("tx", pid, epoch, T0)
    assert rt.end("tx", pid, epoch, True)["error_code"] == E.NONE
    # while the markers are written: retry later
    assert rt.end("tx", pid, epoch, True)["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert rt.end("tx", pid, epoch, False)["error_code"] == E.INVALID_TXN_STATE
    rt.write_markers()
    written = len(rt.log)
    assert rt.end("tx", pid, epoch, True) == {"error_code": E.NONE, "producer_id": pid,
                                              "producer_epoch": epoch}
    assert rt.end("tx", pid, epoch, False)["error_code"] == E.INVALID_TXN_STATE
    assert len(rt.log) == written and rt.markers == []
    # a duplicate report of the markers changes nothing
    assert rt.coordinator.markers_written("tx", pid, epoch, TransactionResult.COMMIT, 0) == []


def test_errors(rt):
    assert rt.add("nobody", 1, 0, T0) == E.INVALID_PRODUCER_ID_MAPPING
    assert rt.end("nobody", 1, 0, True)["error_code"] == E.INVALID_PRODUCER_ID_MAPPING
    pid, epoch = begin(rt)
    assert rt.add("tx", pid + 1, epoch, T0) == E.INVALID_PRODUCER_ID_MAPPING
    assert rt.add("tx", pid, epoch + 1, T0) == E.PRODUCER_FENCED
    assert rt.add("", pid, epoch, T0) == E.INVALID_REQUEST
    assert rt.end("tx", pid, epoch, True)["error_code"] == E.INVALID_TXN_STATE  # Empty
    assert rt.end("tx", pid, epoch, False)["error_code"] == E.INVALID_TXN_STATE
    rt.add("tx", pid, epoch, T0)
    rt.end("tx", pid, epoch, True)
    assert rt.add("tx", pid, epoch, T1) == E.CONCURRENT_TRANSACTIONS  # PrepareCommit
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert rt.init("tx", timeout_ms=900_001)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert rt.init("tx", timeout_ms=0)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert rt.init("tx2", timeout_ms=900_000)["error_code"] == E.NONE
    assert rt.init("")["error_code"] == E.INVALID_REQUEST
    assert rt.init("tx", producer_id=pid)["error_code"] == E.INVALID_REQUEST  # no epoch
    # an idempotent producer gets an id and nothing is kept
    body = rt.init(None)
    assert body["error_code"] == E.NONE and body["producer_epoch"] == 0
    assert set(rt.coordinator.transactions) == {"tx", "tx2"}


def test_fenced_is_invalid_producer_epoch_for_older_clients():
    assert error_for_version(E.PRODUCER_FENCED, 22, 3) == E.INVALID_PRODUCER_EPOCH
    assert error_for_version(E.PRODUCER_FENCED, 22, 4) == E.PRODUCER_FENCED
    for api in (24, 25, 26):
        assert error_for_version(E.PRODUCER_FENCED, api, 1) == E.INVALID_PRODUCER_EPOCH
        assert error_for_version(E.PRODUCER_FENCED, api, 2) == E.PRODUCER_FENCED
    assert error_for_version(E.CONCURRENT_TRANSACTIONS, 26, 0) == E.CONCURRENT_TRANSACTIONS


def test_routing():
    c = TransactionCoordinator(TransactionConfig(num_partitions=5), lambda: 1)
    p = c.partition_for("tx")
    assert p == partition_of("tx", 5)
    [reply] = c.handle_init_producer_id(None, "tx", 1000, -1, -1, 0)
    assert isinstance(reply, Reply) and reply.body["error_code"] == E.NOT_COORDINATOR
    c.begin_load(p, 1)
    assert c.check("tx") == E.COORDINATOR_LOAD_IN_PROGRESS
    c.finish_load(p)
    assert c.check("tx") == E.NONE
    c.unload(p)
    assert c.check("tx") == E.NOT_COORDINATOR


def test_no_producer_id_at_hand():
    c = TransactionCoordinator(TransactionConfig(num_partitions=1), lambda: None)
    c.begin_load(0, 1)
    c.finish_load(0)
    [reply] = c.handle_init_producer_id(None, "tx", 1000, -1, -1, 0)
    assert isinstance(reply, Reply) and reply.body["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS


def test_a_failed_append_changes_nothing_and_the_retry_reuses_the_producer_id(rt):
    body = rt.init("tx", fail_appends=True)
    assert body["error_code"] == E.NOT_COORDINATOR
    assert rt.metadata("tx").pending is None and rt.metadata("tx").producer_epoch == -1
    pid, epoch = begin(rt)
    assert (pid, epoch) == (1000, 0)
    assert rt.add("tx", pid, epoch, T0, fail_appends=True) == E.NOT_COORDINATOR
    assert rt.metadata("tx").state == S.EMPTY and rt.metadata("tx").topic_partitions == set()
    assert rt.add("tx", pid, epoch, T0) == E.NONE
    assert rt.end("tx", pid, epoch, True, fail_appends=True)["error_code"] == E.NOT_COORDINATOR
    assert rt.metadata("tx").state == S.ONGOING and rt.markers == []


def test_a_transaction_past_its_timeout_is_aborted_with_an_epoch_bump(rt):
    pid, epoch = begin(rt, timeout_ms=5_000)
    rt.now = 1_000
    rt.add("tx", pid, epoch, T0)
    assert rt.coordinator.abort_timed_out(6_000) == []  # not past it yet
    rt.now = 6_001
    rt.run(rt.coordinator.abort_timed_out(rt.now))
    md = rt.metadata("tx")
    assert (md.state, md.producer_epoch) == (S.PREPARE_ABORT, epoch + 1)
    [markers] = rt.markers
    assert (markers.result, markers.producer_epoch) == (TransactionResult.ABORT, epoch + 1)
    assert rt.coordinator.abort_timed_out(100_000) == []  # being aborted already
    rt.write_markers()
    assert rt.metadata("tx").state == S.COMPLETE_ABORT
    # the producer learns it was fenced
    assert rt.add("tx", pid, epoch, T0) == E.PRODUCER_FENCED
    assert rt.end("tx", pid, epoch, True)["error_code"] == E.PRODUCER_FENCED


def test_tick_runs_the_abort_and_the_expiry_on_their_intervals():
    rt = Runtime(TransactionConfig(num_partitions=1, transactional_id_expiration_ms=50_000,
                                   remove_expired_transaction_cleanup_interval_ms=40_000))
    c = rt.coordinator
    assert c.tick(0) == [] and c.next_deadline() == 10_000
    pid, epoch = begin(rt, timeout_ms=1_000)
    rt.add("tx", pid, epoch, T0)
    assert c.tick(9_999) == []
    rt.now = 10_000
    rt.run(c.tick(rt.now))
    assert rt.metadata("tx").state == S.PREPARE_ABORT and c.next_deadline() == 20_000
    rt.write_markers()
    rt.run(c.tick(40_000))
    assert "tx" in c.transactions  # idle for 40 s only
    rt.run(c.tick(80_000))
    assert "tx" not in c.transactions


def test_an_idle_transactional_id_expires():
    rt = Runtime(TransactionConfig(num_partitions=1, transactional_id_expiration_ms=1_000))
    pid, epoch = begin(rt)  # at 0
    rt.now = 10
    busy_pid, busy_epoch = begin(rt, "busy")
    assert rt.add("busy", busy_pid, busy_epoch, T0) == E.NONE
    assert rt.coordinator.expire(999) == []
    effects = rt.coordinator.expire(100_000)
    assert effects == [Append("tx", None)]
    assert rt.metadata("tx").pending_state == S.DEAD
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS  # being removed
    rt.run(effects)
    assert "tx" not in rt.coordinator.transactions and "busy" in rt.coordinator.transactions
    # the id comes back as a new one, with a new producer id
    body = rt.init("tx")
    assert body["producer_id"] not in (pid, busy_pid) and body["producer_epoch"] == 0


def _fields(md) -> tuple:
    return (md.transactional_id, md.producer_id, md.previous_producer_id, md.next_producer_id,
            md.producer_epoch, md.txn_timeout_ms, md.state, md.topic_partitions,
            md.txn_start_timestamp, md.txn_last_update_timestamp)


def load(rt: Runtime) -> tuple[TransactionCoordinator, list]:
    """A fresh coordinator that loads every record rt wrote."""
    fresh = TransactionCoordinator(rt.config, lambda: 99_999)
    markers = []
    for p in range(rt.config.num_partitions):
        fresh.begin_load(p, COORDINATOR_EPOCH + 1)
    for tid, value in rt.log:
        fresh.replay(tid, value, loading=True)
    for p in range(rt.config.num_partitions):
        markers += fresh.finish_load(p)
    return fresh, markers


def test_loading_the_records_rebuilds_the_same_state(rt):
    a, a_epoch = begin(rt, "a")
    rt.add("a", a, a_epoch, T0)
    rt.end("a", a, a_epoch, True)
    rt.write_markers()
    b, b_epoch = begin(rt, "b")
    rt.add("b", b, b_epoch, T0, T1)
    rt.end("b", b, b_epoch, False)  # its markers not written yet
    c, c_epoch = begin(rt, "c")
    rt.add_offsets("c", c, c_epoch, "g")
    rt.init("c")  # fences c's producer: PrepareAbort under a bumped epoch
    begin(rt, "d")
    rt.now = 10**10
    rt.run(rt.coordinator.expire(rt.now))  # everyone idle goes, but b and c
    fresh, markers = load(rt)
    assert set(fresh.transactions) == set(rt.coordinator.transactions) == {"b", "c"}
    for tid, md in rt.coordinator.transactions.items():
        assert _fields(fresh.transactions[tid]) == _fields(md)
        assert fresh.transactions[tid].last_producer_epoch == -1  # not in Kafka's record
    # the decided transactions get their markers written again, with the new epoch
    assert sorted((m.transactional_id, m.result, m.producer_epoch, m.partitions,
                   m.coordinator_epoch) for m in markers) == [
        ("b", TransactionResult.ABORT, b_epoch, frozenset({T0, T1}), COORDINATOR_EPOCH + 1),
        ("c", TransactionResult.ABORT, c_epoch + 1,
         frozenset({(OFFSETS, partition_of("g", 50))}), COORDINATOR_EPOCH + 1)]
    # and the loaded coordinator carries on
    assert fresh.markers_written("b", b, b_epoch, TransactionResult.ABORT, rt.now) != []


def test_replay_refuses_a_record_it_did_not_prepare(rt):
    pid, epoch = begin(rt)
    stray = TransactionLogValue(pid, pid, -1, epoch + 5, 60_000, S.EMPTY, frozenset(), 1, -1)
    with pytest.raises(IllegalTransactionTransition):
        rt.coordinator.replay("tx", stray)


def test_verify_partitions(rt):
    pid, epoch = begin(rt)
    verify = rt.coordinator.verify_partitions
    assert verify("tx", pid, epoch, [T0]) == {T0: E.TRANSACTION_ABORTABLE}  # Empty
    rt.add("tx", pid, epoch, T0)
    assert verify("tx", pid, epoch, [T0, T1]) == {T0: E.NONE, T1: E.TRANSACTION_ABORTABLE}
    assert verify("tx", pid, epoch + 1, [T0]) == {T0: E.PRODUCER_FENCED}
    assert verify("tx", pid + 1, epoch, [T0]) == {T0: E.INVALID_PRODUCER_ID_MAPPING}
    assert verify("nobody", pid, epoch, [T0]) == {T0: E.INVALID_PRODUCER_ID_MAPPING}
    assert verify("", pid, epoch, [T0]) == {T0: E.INVALID_REQUEST}
    rt.end("tx", pid, epoch, True)
    assert verify("tx", pid, epoch, [T0]) == {T0: E.CONCURRENT_TRANSACTIONS}
    rt.write_markers()
    assert verify("tx", pid, epoch, [T0]) == {T0: E.TRANSACTION_ABORTABLE}  # no longer in one


def test_a_verification_failure_as_the_produce_or_txn_offset_commit_client_hears_it():
    PRODUCE, TXN_OFFSET_COMMIT = 0, 28
    for api, first in ((PRODUCE, 11), (TXN_OFFSET_COMMIT, 4)):
        mapped = verification_error_for_version
        assert mapped(E.TRANSACTION_ABORTABLE, api, first) == E.TRANSACTION_ABORTABLE
        assert mapped(E.TRANSACTION_ABORTABLE, api, first - 1) == E.INVALID_TXN_STATE
        # producers expect INVALID_PRODUCER_EPOCH when verification finds them fenced
        assert mapped(E.PRODUCER_FENCED, api, first) == E.INVALID_PRODUCER_EPOCH
        assert mapped(E.CONCURRENT_TRANSACTIONS, api, 0) == E.CONCURRENT_TRANSACTIONS


def test_exhausted_epochs_rotate_to_a_new_producer_id(rt):
    pid, _ = begin(rt)
    # the id as a load would find it after years of bumps
    rt.coordinator.replay("tx", TransactionLogValue(pid, -1, -1, 32765, 60_000, S.EMPTY,
                                                    frozenset(), 0, -1), loading=True)
    body = rt.init("tx", producer_id=pid, producer_epoch=32765)
    assert (body["producer_id"], body["producer_epoch"]) == (pid, 32766)
    body = rt.init("tx", producer_id=pid, producer_epoch=32766)
    new_pid = body["producer_id"]
    assert new_pid != pid and body["producer_epoch"] == 0
    md = rt.metadata("tx")
    assert (md.previous_producer_id, md.last_producer_epoch) == (pid, 32766)
    # the rotation's answer was lost: the retry names the old id and gets the same answer
    body = rt.init("tx", producer_id=pid, producer_epoch=32766)
    assert (body["error_code"], body["producer_id"], body["producer_epoch"]) == (
        E.NONE, new_pid, 0)
    # a new producer instance simply bumps the new id's epoch
    assert rt.init("tx")["producer_epoch"] == 1


def test_a_fence_at_the_last_usable_epoch_then_rotates(rt):
    pid, _ = begin(rt)
    rt.coordinator.replay("tx", TransactionLogValue(pid, -1, -1, 32766, 60_000, S.ONGOING,
                                                    frozenset({T0}), 0, 0), loading=True)
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert rt.metadata("tx").producer_epoch == 32767
    rt.write_markers()
    body = rt.init("tx")
    assert body["producer_id"] != pid and body["producer_epoch"] == 0
