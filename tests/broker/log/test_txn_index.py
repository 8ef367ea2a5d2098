"""The aborted-transaction index: Kafka's 34-byte entries, the Fetch search, truncation,
and loading after a crash tore the last entry."""

from __future__ import annotations

import struct

import pytest

from broker.log.index import CorruptIndexError
from broker.log.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    decode_aborted_txns,
    encode_aborted_txns,
)
from broker.storage import SimulatedFileSystem

PATH = "/d/00000000000000000100.txnindex"


def _fs() -> SimulatedFileSystem:
    fs = SimulatedFileSystem()
    fs.makedirs("/d")
    return fs


def _index(fs, *txns, start=100) -> TransactionIndex:
    index = TransactionIndex(PATH, start, fs=fs)
    for txn in txns:
        index.append(txn)
    return index


A = AbortedTxn(producer_id=7, first_offset=100, last_offset=110, last_stable_offset=111)
B = AbortedTxn(producer_id=8, first_offset=105, last_offset=130, last_stable_offset=120)
C = AbortedTxn(producer_id=9, first_offset=140, last_offset=150, last_stable_offset=151)


def test_one_entry_is_kafkas_34_bytes():
    txn = AbortedTxn(producer_id=0x0102030405060708, first_offset=5, last_offset=9,
                     last_stable_offset=10)
    # version int16, producer id, first offset, last offset, LSO: int64s, big-endian
    expected = (b"\x00\x00" + bytes(range(1, 9)) + (5).to_bytes(8, "big")
                + (9).to_bytes(8, "big") + (10).to_bytes(8, "big"))
    assert ENTRY_SIZE == 34
    assert txn.encode() == expected
    assert decode_aborted_txns(expected) == [txn]


def test_appends_reach_the_file_and_a_load_reads_them_back():
    fs = _fs()
    index = _index(fs, A, B, C)
    assert fs.content(PATH) == encode_aborted_txns([A, B, C]) == index.to_bytes()
    again = TransactionIndex(PATH, 100, fs=fs)
    again.load()
    assert again.all_aborted_txns() == [A, B, C]


def test_no_file_until_the_first_entry():
    fs = _fs()
    index = _index(fs)
    index.load()
    assert len(index) == 0 and not fs.exists(PATH)
    assert index.collect_aborted(0, 10**9).aborted == []
    index.append(A)
    assert fs.exists(PATH)


def test_markers_must_come_in_order():
    index = _index(_fs(), A)
    with pytest.raises(ValueError):
        index.append(AbortedTxn(1, 100, A.last_offset, 200))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(1, 100, A.last_offset - 1, 200))
    assert index.all_aborted_txns() == [A]


@pytest.mark.parametrize("fetch, bound, found", [
    (0, 100, []),                   # the range ends before any transaction begins
    (0, 101, [A]),                  # the bound is exclusive: offset 100 is in
    (111, 140, [B]),                # A's marker is before the range; C begins at the bound
    (110, 112, [A, B]),             # A's marker is the range's first offset
    (131, 141, [C]),                # B ended before the range
    (151, 10**6, []),               # every marker is before the range
])
def test_collect_aborted_returns_the_transactions_overlapping_the_range(fetch, bound, found):
    assert _index(_fs(), A, B, C).collect_aborted(fetch, bound).aborted == found


def test_the_search_is_complete_once_an_lso_reaches_the_bound():
    index = _index(_fs(), A, B, C)
    # A's LSO (111) reaches the bound 111: no later marker can end a transaction begun
    # before 111 whose data the range holds, so B is not even looked at
    result = index.collect_aborted(100, 111)
    assert result.aborted == [A] and result.is_complete
    # no LSO reaches 10**6: the next segment's index must be searched too
    result = index.collect_aborted(100, 10**6)
    assert result.aborted == [A, B, C] and not result.is_complete


def test_truncate_drops_the_markers_at_and_past_the_offset():
    fs = _fs()
    index = _index(fs, A, B, C)
    index.truncate_to(131)
    assert index.all_aborted_txns() == [A, B]
    index.truncate_to(130)  # B's marker is at 130: it goes
    assert index.all_aborted_txns() == [A]
    assert fs.content(PATH) == A.encode()
    index.append(C)  # appends continue after the cut
    assert fs.content(PATH) == A.encode() + C.encode()
    index.truncate_to(0)
    assert fs.content(PATH) == b"" and len(index) == 0


def test_a_torn_last_entry_is_dropped_on_load_and_overwritten():
    fs = _fs()
    _index(fs, A, B).close()
    handle = fs.open(PATH)
    handle.pwrite(C.encode()[:20], 2 * ENTRY_SIZE)  # a crash in the middle of C's write
    handle.close()
    index = TransactionIndex(PATH, 100, fs=fs)
    index.load()
    assert index.all_aborted_txns() == [A, B]
    index.append(C)
    assert fs.content(PATH) == encode_aborted_txns([A, B, C])


def test_load_refuses_entries_outside_the_segment_or_out_of_order_or_too_new():
    fs = _fs()
    _index(fs, A, B).close()
    with pytest.raises(CorruptIndexError):
        TransactionIndex(PATH, 111, fs=fs).load()  # A's marker (110) precedes the segment
    fs.open(PATH).pwrite(B.encode() + A.encode(), 0)
    with pytest.raises(CorruptIndexError):
        TransactionIndex(PATH, 100, fs=fs).load()
    fs.open(PATH).pwrite(A.encode() + struct.pack(">h", 1) + B.encode()[2:], 0)
    with pytest.raises(CorruptIndexError):
        TransactionIndex(PATH, 100, fs=fs).load()


def test_an_append_not_yet_fsynced_is_lost_in_a_crash_and_a_flushed_one_is_kept():
    fs = _fs()
    index = _index(fs, A)
    index.flush()
    fs.fsync_dir("/d")
    index.append(B)
    fs.crash()
    again = TransactionIndex(PATH, 100, fs=fs)
    again.load()
    assert again.all_aborted_txns() == [A]
