"""Transactions in a partition's producer state: open, commit, abort, the last stable
offset and the high-watermark rule, driven with real batch bytes (no broker, no clock)."""

from __future__ import annotations

import random
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.producer_state import CompletedTxn, ProducerStateManager, end_txn_marker_of
from protocol.control_records import EndTransactionMarker, end_txn_marker_batch
from protocol.batch_header import (
    BATCH_OVERHEAD,
    LENGTH_POS,
    LOG_OVERHEAD,
    RECORDS_COUNT_POS,
    refresh_crc,
)
from protocol.errors import ErrorCode
from protocol.records import Record, encode_batch, parse_batch_header


class Partition:
    """A log end offset and a HW around the producer state, appending as the log would:
    check, assign offsets, update, then for a marker record the LSO and complete."""

    def __init__(self):
        self.state = ProducerStateManager()
        self.leo = 0
        self.hw = 0
        self.index: list[tuple[CompletedTxn, int]] = []  # aborted ones with their LSO
        self.seq: dict[int, int] = {}

    def produce(self, pid, epoch=0, count=1, transactional=True):
        seq = self.seq.get(pid, 0)
        batch = encode_batch([Record(self.leo + i, 0, None, b"v") for i in range(count)],
                             base_offset=self.leo, producer_id=pid, producer_epoch=epoch,
                             base_sequence=seq, is_transactional=transactional)
        header = parse_batch_header(batch)
        check = self.state.check_batch(header)
        if check.error == ErrorCode.NONE:
            self.state.append_batch(header, now_ms=0)
            self.seq[pid] = seq + count
            self.leo += count
        return check.error

    def end(self, pid, epoch=0, commit=True, coordinator_epoch=0):
        batch = end_txn_marker_batch(EndTransactionMarker(commit, coordinator_epoch),
                                     producer_id=pid, producer_epoch=epoch, timestamp_ms=0,
                                     base_offset=self.leo)
        header, marker = parse_batch_header(batch), end_txn_marker_of(batch)
        error = self.state.check_batch(header, marker).error
        if error != ErrorCode.NONE:
            return error, None
        completed = self.state.append_batch(header, now_ms=0, marker=marker)
        self.leo += 1
        if completed is not None:
            if completed.is_aborted:
                self.index.append((completed, self.state.last_stable_offset_of(completed)))
            self.state.complete_txn(completed)
        return error, completed

    def advance_hw(self, hw=None):
        self.hw = self.leo if hw is None else hw
        self.state.on_high_watermark_updated(self.hw)

    @property
    def lso(self):
        return self.state.last_stable_offset(self.hw)


def test_a_transactional_batch_opens_a_transaction_and_a_commit_ends_it():
    p = Partition()
    p.produce(1, count=3)            # offsets 0-2
    p.produce(1, count=2)            # 3-4: the same transaction
    assert p.state.producers[1].current_txn_first_offset == 0
    assert p.state.first_unstable_offset() == 0
    p.advance_hw()
    assert p.lso == 0
    error, completed = p.end(1, commit=True)  # marker at 5
    assert error == ErrorCode.NONE
    assert completed == CompletedTxn(1, 0, 5, is_aborted=False)
    assert p.state.producers[1].current_txn_first_offset is None
    assert p.index == []             # a commit is not indexed
    assert p.lso == 0                # the marker (5) is not below the HW (5) yet
    p.advance_hw()
    assert p.state.first_unstable_offset() is None and p.lso == 6


def test_an_abort_is_reported_with_the_lso_its_index_entry_records():
    p = Partition()
    p.produce(1, count=2)            # 0-1
    p.produce(2, count=2)            # 2-3, another producer's transaction
    _, completed = p.end(1, commit=False)  # marker at 4
    assert completed == CompletedTxn(1, 0, 4, is_aborted=True)
    # producer 2's transaction is still open: the LSO cannot pass its first offset
    assert p.index == [(completed, 2)]
    _, completed = p.end(2, commit=False)  # marker at 5
    assert p.index[-1] == (completed, 6)   # nothing else open: just past the marker


def test_interleaved_transactions_and_the_lso_after_each_step():
    p = Partition()
    steps = [
        (lambda: p.produce(1), 0),                         # 0: pid 1 opens at 0
        (lambda: p.produce(2), 0),                         # 1: pid 2 opens at 1
        (lambda: p.produce(3, transactional=False), 0),    # 2: idempotent only
        (lambda: p.produce(1), 0),                         # 3
        (lambda: p.end(1, commit=True), 1),                # 4: pid 1 done; 2 is open at 1
        (lambda: p.produce(3, transactional=False), 1),    # 5
        (lambda: p.produce(1), 1),                         # 6: pid 1 opens again at 6
        (lambda: p.end(2, commit=False), 6),               # 7: pid 2 done; 1 open at 6
        (lambda: p.end(1, commit=False), 9),               # 8: all done, HW 9
        (lambda: p.produce(2), 9),                         # 9: pid 2 opens at 9
    ]
    for step, lso in steps:
        step()
        p.advance_hw()
        assert p.lso == lso, (p.leo, p.state.ongoing_txns)
    assert p.state.first_undecided_offset() == 9


def test_the_hw_holds_back_a_completed_transaction_until_it_passes_the_marker():
    p = Partition()
    p.produce(1, count=2)            # 0-1
    p.advance_hw(1)
    p.end(1, commit=True)            # marker at 2, while the HW is 1
    assert p.state.first_undecided_offset() is None   # decided...
    assert p.state.first_unstable_offset() == 0        # ...but not yet replicated
    p.advance_hw(2)                  # the HW reaches the marker, not past it
    assert p.lso == 0
    p.advance_hw(3)
    assert p.state.first_unstable_offset() is None and p.lso == 3


def test_the_lso_is_never_past_the_hw():
    p = Partition()
    p.produce(1, transactional=False, count=4)
    p.advance_hw(2)
    assert p.lso == 2
    p.produce(2)                     # opens at 4, above the HW
    assert p.lso == 2


def test_a_marker_with_an_older_epoch_is_refused_and_a_newer_one_bumps_the_epoch():
    p = Partition()
    p.produce(1, epoch=3)
    error, completed = p.end(1, epoch=2, commit=True)
    assert error == ErrorCode.INVALID_PRODUCER_EPOCH and completed is None
    assert p.state.producers[1].current_txn_first_offset == 0  # still open
    assert p.leo == 1
    # the coordinator aborts with a bumped epoch (InitProducerId fencing the old producer)
    error, completed = p.end(1, epoch=4, commit=False, coordinator_epoch=7)
    assert error == ErrorCode.NONE and completed == CompletedTxn(1, 0, 1, is_aborted=True)
    entry = p.state.producers[1]
    assert entry.epoch == 4 and entry.coordinator_epoch == 7 and not entry.batches
    p.seq[1] = 0
    assert p.produce(1, epoch=3) == ErrorCode.INVALID_PRODUCER_EPOCH  # the zombie is fenced


def test_a_marker_from_an_older_coordinator_epoch_is_fenced():
    p = Partition()
    p.produce(1, epoch=1)
    assert p.end(1, epoch=1, commit=True, coordinator_epoch=5)[0] == ErrorCode.NONE
    p.produce(1, epoch=1)                                    # offset 2
    # a zombie coordinator (epoch 4) tries to end the next transaction: refused, not written
    error, completed = p.end(1, epoch=1, commit=False, coordinator_epoch=4)
    assert error == ErrorCode.TRANSACTION_COORDINATOR_FENCED and completed is None
    assert p.leo == 3 and p.state.producers[1].current_txn_first_offset == 2
    assert p.state.producers[1].coordinator_epoch == 5
    # an older producer epoch is reported first, as Kafka checks it first
    assert p.end(1, epoch=0, coordinator_epoch=4)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    # the same coordinator epoch ends it; a newer one is then recorded
    error, completed = p.end(1, epoch=1, commit=True, coordinator_epoch=5)
    assert error == ErrorCode.NONE and completed == CompletedTxn(1, 2, 3, is_aborted=False)
    assert p.end(1, epoch=1, commit=False, coordinator_epoch=6)[0] == ErrorCode.NONE
    assert p.state.producers[1].coordinator_epoch == 6
    assert p.end(1, epoch=1, coordinator_epoch=5)[0] == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_a_marker_with_no_open_transaction_is_written_and_completes_nothing():
    p = Partition()
    error, completed = p.end(5, epoch=2, commit=False)      # a producer never seen
    assert error == ErrorCode.NONE and completed is None and p.leo == 1
    assert p.state.producers[5].epoch == 2                   # Kafka records its epoch
    p.produce(1, transactional=False)
    error, completed = p.end(1, commit=True)                 # idempotent, no transaction
    assert error == ErrorCode.NONE and completed is None
    assert p.state.first_unstable_offset() is None and p.index == []


def test_a_non_transactional_batch_inside_a_transaction_is_refused():
    p = Partition()
    p.produce(1)
    assert p.produce(1, transactional=False) == ErrorCode.INVALID_TXN_STATE
    p.seq[1] = 0  # nor is one of a new epoch: only a marker ends the transaction
    assert p.produce(1, epoch=1, transactional=False) == ErrorCode.INVALID_TXN_STATE
    p.end(1)
    assert p.produce(1, transactional=False) == ErrorCode.NONE


def test_a_producer_with_an_open_transaction_does_not_expire():
    state = ProducerStateManager()
    state.update(1, 0, 0, 1, 0, 0, now_ms=0, is_transactional=True)
    state.update(2, 0, 0, 1, 1, 0, now_ms=0)
    assert state.expire(now_ms=10**9, expiration_ms=1) == [2]
    assert state.first_unstable_offset() == 0


def test_truncation_drops_transactions_past_the_cut_and_reopens_one_whose_marker_went():
    p = Partition()
    p.produce(1, count=2)            # 0-1
    p.end(1)                         # marker at 2, unreplicated (HW 0)
    p.produce(2)                     # 3
    p.state.truncate_after(2)        # the marker and producer 2's transaction are gone
    assert p.state.ongoing_txns.keys() == {0}
    assert p.state.producers[1].current_txn_first_offset == 0
    assert 2 not in p.state.producers
    assert p.state.first_unstable_offset() == 0


def _emptied(batch: bytes) -> bytes:
    """The control batch the cleaner leaves once its transaction's data is gone: the same
    header with no records (Kafka keeps it for its producer's epoch)."""
    out = bytearray(batch[:BATCH_OVERHEAD])
    struct.pack_into(">i", out, LENGTH_POS, BATCH_OVERHEAD - LOG_OVERHEAD)
    struct.pack_into(">i", out, RECORDS_COUNT_POS, 0)
    refresh_crc(out)
    return bytes(out)


def test_an_emptied_control_batch_changes_nothing():
    p = Partition()
    p.produce(1)
    batch = _emptied(end_txn_marker_batch(EndTransactionMarker(True, 0), producer_id=1,
                                          producer_epoch=0, timestamp_ms=0, base_offset=1))
    marker = end_txn_marker_of(batch)
    assert marker is None
    assert p.state.append_batch(parse_batch_header(batch), now_ms=0, marker=marker) is None
    assert p.state.producers[1].current_txn_first_offset == 0


# --- a seeded random walk against a model ---------------------------------------------

@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_lso_follows_a_model_of_open_and_unreplicated_transactions(seed):
    """Model: each transaction is (first offset, marker offset or None); the LSO is the HW
    or the first offset of the oldest transaction still open or whose marker is not yet
    below the HW, whichever is smaller."""
    rng = random.Random(seed)
    p = Partition()
    model: dict[int, list] = {}       # pid -> its open transaction [first, None]
    txns: list[list] = []
    for _ in range(60):
        pid = rng.randrange(4)
        action = rng.random()
        if action < 0.45:
            first = p.leo
            assert p.produce(pid, count=rng.randint(1, 3)) == ErrorCode.NONE
            if pid not in model:
                model[pid] = [first, None]
                txns.append(model[pid])
        elif action < 0.75:
            marker_offset, aborted_before = p.leo, len(p.index)
            _, completed = p.end(pid, commit=rng.random() < 0.5)
            if pid in model:
                txn = model.pop(pid)
                assert completed == CompletedTxn(pid, txn[0], marker_offset,
                                                 completed.is_aborted)
                txn[1] = marker_offset
                if completed.is_aborted:  # its index entry's LSO: the others' oldest open
                    others = [t[0] for t in model.values()]
                    assert p.index[-1] == (completed, min(others + [marker_offset + 1]))
            else:
                assert completed is None
            assert len(p.index) == aborted_before + bool(completed and completed.is_aborted)
        else:
            p.advance_hw(rng.randint(p.hw, p.leo))
        unstable = [first for first, marker in txns if marker is None or marker >= p.hw]
        assert p.lso == min(unstable + [p.hw])
