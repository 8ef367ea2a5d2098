"""read_committed without a broker: client/consumer/isolation.py's filter over Fetch
responses built batch by batch (RecordBatch v2 with the transactional bit, and the
end-transaction markers a leader writes, protocol/control_records.py), and the fetcher
taking such a response into a partition's buffer and position.

The expected answers are worked out by hand from Kafka's rule (an aborted transaction's
producer is aborted from the transaction's first offset until its ABORT marker; its
transactional batches meanwhile are dropped; markers are never returned)."""

from __future__ import annotations

from construct import Container

from client.config import check_config
from client.consumer.fetcher import Fetcher, SubscriptionState
from client.consumer.isolation import READ_COMMITTED, committed_batches, isolation_level
from client.types import TopicPartition
from protocol.control_records import EndTransactionMarker, end_txn_marker_batch
from protocol.errors import ErrorCode
from protocol.records import encode_batch, row_batches

TP = TopicPartition("t", 0)
A, B = 7, 9  # producer ids


def data(pid: int, first: int, count: int = 1, transactional: bool = True) -> bytes:
    return encode_batch([(o, 1000 + o, None, f"{pid}@{o}".encode(), [])
                         for o in range(first, first + count)],
                        base_offset=first, producer_id=pid, producer_epoch=0,
                        base_sequence=first, is_transactional=transactional)


def plain(first: int, count: int = 1) -> bytes:
    """A batch of a producer without an id (not idempotent)."""
    return encode_batch([(o, 1000 + o, None, f"-@{o}".encode(), [])
                         for o in range(first, first + count)], base_offset=first)


def marker(pid: int, offset: int, commit: bool) -> bytes:
    return end_txn_marker_batch(EndTransactionMarker(commit, 3), producer_id=pid,
                                producer_epoch=0, timestamp_ms=2000, base_offset=offset)


def offsets(found) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch returned."""
    return [(h.base_offset, h.last_offset) for _, h in found]


def test_the_worked_example_of_the_module_docstring():
    buf = (data(A, 0, 2) + marker(A, 2, commit=False) + data(A, 3, 2)
           + marker(A, 5, commit=True) + data(B, 6, transactional=False))
    found, next_offset = committed_batches(buf, 0, [(A, 0)])
    assert offsets(found) == [(3, 4), (6, 6)] and next_offset == 7
    # read_uncommitted returns the aborted records too (markers never)
    everything, _ = row_batches(buf, 0)
    assert offsets(everything) == [(0, 1), (3, 4), (6, 6)]


def test_interleaved_producers_only_the_aborted_ones_records_go():
    buf = (data(A, 0) + data(B, 1) + data(A, 2) + data(B, 3) + marker(A, 4, commit=False)
           + plain(5) + marker(B, 6, commit=True))
    found, next_offset = committed_batches(buf, 0, [(A, 0)])
    assert offsets(found) == [(1, 1), (3, 3), (5, 5)] and next_offset == 7


def test_a_producers_transactions_are_aborted_one_at_a_time():
    # A: aborted (0-1), committed (3), aborted (5); each ABORT ends one aborted transaction
    buf = (data(A, 0, 2) + marker(A, 2, commit=False) + data(A, 3) + marker(A, 4, commit=True)
           + data(A, 5) + marker(A, 6, commit=False) + data(A, 7))
    found, next_offset = committed_batches(buf, 0, [(A, 5), (A, 0)])  # in any order
    # 7 is a transaction not ended in this response and not listed: not aborted (the
    # leader lists every aborted one that overlaps the records it returns)
    assert offsets(found) == [(3, 3), (7, 7)] and next_offset == 8


def test_a_transaction_committed_before_the_aborted_one_is_returned():
    buf = data(A, 0) + marker(A, 1, commit=True) + data(A, 2) + marker(A, 3, commit=False)
    found, _ = committed_batches(buf, 0, [(A, 2)])
    assert offsets(found) == [(0, 0)]


def test_a_response_that_starts_inside_an_aborted_transaction():
    # fetched from 1: the transaction began at 0, before the response's first batch
    buf = data(A, 1) + marker(A, 2, commit=False) + data(B, 3)
    found, next_offset = committed_batches(buf, 1, [(A, 0)])
    assert offsets(found) == [(3, 3)] and next_offset == 4


def test_a_batch_that_started_before_the_fetch_offset_counts_from_it():
    buf = data(B, 0, 5) + marker(B, 5, commit=True)
    found, next_offset = committed_batches(buf, 3, None)
    assert offsets(found) == [(0, 4)] and next_offset == 6  # its records from 3 are returned
    assert committed_batches(buf, 5, None) == ([], 6)


def test_markers_and_aborted_records_alone_move_the_fetch_offset_past_them():
    buf = data(A, 10, 3) + marker(A, 13, commit=False) + marker(B, 14, commit=True)
    assert committed_batches(buf, 10, [(A, 10)]) == ([], 15)
    assert committed_batches(b"", 10, []) == ([], 10)


def test_the_isolation_levels_wire_values():
    assert isolation_level("read_uncommitted") == 0
    assert isolation_level("read_committed") == READ_COMMITTED == 1


# -- the fetcher ------------------------------------------------------------------------------

def fetcher(state: SubscriptionState, **config) -> Fetcher:
    # the response path uses only the state and the config (and the cluster on errors)
    return Fetcher(None, None, check_config("consumer", **config), state)  # type: ignore[arg-type]


def response(records: bytes, high_watermark: int, last_stable_offset: int,
             aborted: list[tuple[int, int]] | None) -> Container:
    return Container(partition_index=TP.partition, error_code=int(ErrorCode.NONE),
                     high_watermark=high_watermark, last_stable_offset=last_stable_offset,
                     aborted_transactions=None if aborted is None else [
                         Container(producer_id=p, first_offset=o) for p, o in aborted],
                     records=records)


def assigned(position: int = 0) -> SubscriptionState:
    state = SubscriptionState()
    state.assign([TP])
    state.seek(TP, position)
    return state


def sent_from(state: SubscriptionState):
    offset = state.fetchable(1)[TP]
    return {TP: (offset, *state.fetch_mark(TP))}


def test_a_read_committed_consumer_gets_committed_records_and_moves_past_the_rest():
    buf = (data(A, 0, 2) + data(B, 2, 2) + marker(A, 4, commit=False)
           + marker(B, 5, commit=True))
    state = assigned()
    fetcher(state, isolation_level="read_committed")._handle_partition(
        TP, response(buf, 6, 6, [(A, 0)]), sent_from(state))
    got = state.drain(100)[TP]
    assert [(r.offset, r.value) for r in got] == [(2, b"9@2"), (3, b"9@3")]
    assert state.drain(100) == {} and state.position(TP) == 6  # past both markers

    # the same response read_uncommitted: the aborted records too
    state = assigned()
    fetcher(state)._handle_partition(TP, response(buf, 6, 6, [(A, 0)]), sent_from(state))
    assert [r.offset for r in state.drain(100)[TP]] == [0, 1, 2, 3]


def test_a_response_of_aborted_records_only_moves_the_position():
    state = assigned(10)
    fetcher(state, isolation_level="read_committed")._handle_partition(
        TP, response(data(A, 10, 3) + marker(A, 13, commit=False), 14, 14, [(A, 10)]),
        sent_from(state))
    assert not state.has_buffered() and state.position(TP) == 14


def test_a_read_committed_prefetch_counts_a_partition_behind_only_below_the_lso():
    # an open transaction at 5: the leader returned 0-4 and says LSO 5, high watermark 9
    for level, behind in (("read_committed", False), ("read_uncommitted", True)):
        state = assigned()
        fetcher(state, isolation_level=level)._handle_partition(
            TP, response(data(B, 0, 5, transactional=False), 9, 5, []), sent_from(state))
        state.drain(100)
        assert state.position(TP) == 5
        assert (TP in state.fetchable(1, behind_only=True)) is behind, level
        assert state.state(TP).high_watermark == 9  # highwater() is the high watermark
