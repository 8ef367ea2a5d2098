"""Producer-state snapshots: Kafka's ProducerSnapshot v1 bytes, packed here by hand with
struct and crc32c (not with the code under test), the round trip of open transactions and
retry state through them, their files, and bytes that are no snapshot."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from broker.log.producer_snapshots import (
    delete_snapshots, list_snapshots, read_snapshot, remove_unfinished, snapshot_path,
    write_snapshot,
)
from broker.producer_state import CorruptSnapshotError, ProducerStateManager
from protocol.errors import ErrorCode


def kafka_snapshot(entries: list[tuple]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(
        struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", 1, crc32c(body)) + body


def test_the_bytes_are_kafkas_producer_snapshot_v1():
    state = ProducerStateManager()
    state.update(7, 2, 10, 5, 100, 1_500, now_ms=2_000, is_transactional=True)  # seq 10-14
    state.update(7, 2, 15, 1, 105, 1_600, now_ms=2_100, is_transactional=True)  # seq 15
    state.update(8, 0, 0, 3, 106, 1_700, now_ms=2_200)
    assert state.snapshot_bytes() == kafka_snapshot([
        # id, epoch, last seq, last offset, offset delta, timestamp, coordinator epoch,
        # first offset of the ongoing transaction
        (7, 2, 15, 105, 0, 2_100, -1, 100),
        (8, 0, 2, 108, 2, 2_200, -1, -1)])


def test_a_loaded_snapshot_knows_open_transactions_and_the_last_batch():
    state = ProducerStateManager()
    state.load_snapshot(kafka_snapshot([(7, 2, 14, 104, 4, 2_000, 3, 100),
                                        (8, 0, -1, -1, 0, 2_200, 5, -1)]))
    assert state.first_unstable_offset() == 100
    assert state.last_stable_offset(high_watermark=500) == 100
    retry = state.check(7, 2, 10, 5, is_transactional=True)
    assert retry.duplicate is not None and (retry.duplicate.first_offset,
                                            retry.duplicate.last_offset) == (100, 104)
    assert state.check(7, 2, 15, 1, is_transactional=True).error == ErrorCode.NONE
    assert state.check(7, 2, 16, 1, is_transactional=True).error == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check_marker(8, 0, 4) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    # and it writes back the same bytes (producer 8 only ever wrote a marker)
    assert state.snapshot_bytes() == kafka_snapshot([(7, 2, 14, 104, 4, 2_000, 3, 100),
                                                     (8, 0, -1, -1, 0, 2_200, 5, -1)])


def test_sequences_that_wrap_come_back_whole():
    state = ProducerStateManager()
    top = 2**31 - 1
    state.update(7, 0, top - 1, 4, 50, 0, now_ms=0)  # top-1, top, 0, 1
    again = ProducerStateManager()
    again.load_snapshot(state.snapshot_bytes())
    assert again.check(7, 0, top - 1, 4).duplicate is not None
    assert again.check(7, 0, 2, 1).error == ErrorCode.NONE


@pytest.mark.parametrize("data", [
    b"",
    b"\x00\x01",
    kafka_snapshot([(7, 0, 0, 0, 0, 0, 0, -1)])[:-3],                       # torn
    b"\x00\x02" + kafka_snapshot([])[2:],                                   # a newer version
    kafka_snapshot([(7, 0, 0, 0, 0, 0, 0, -1)]).replace(b"\x00\x07", b"\x00\x08", 1),  # CRC
    kafka_snapshot([(7, 0, 0, 0, 0, 0, 0, 9), (8, 0, 0, 1, 0, 0, 0, 9)]),  # one start, twice
    struct.pack(">hI", 1, crc32c(struct.pack(">i", -1))) + struct.pack(">i", -1),
])
def test_bytes_that_are_no_snapshot_are_refused_and_change_nothing(data):
    state = ProducerStateManager()
    state.update(1, 0, 0, 1, 0, 0, now_ms=0, is_transactional=True)
    before = state.snapshot_bytes()
    with pytest.raises(CorruptSnapshotError):
        state.load_snapshot(data)
    assert state.snapshot_bytes() == before and state.first_unstable_offset() == 0


def test_snapshot_files(tmp_path):
    directory = str(tmp_path)
    for offset in (40, 7, 300):
        write_snapshot(directory, offset, b"snap%d" % offset)
    (tmp_path / f"{5:020d}.snapshot.tmp").write_bytes(b"half")
    (tmp_path / f"{5:020d}.log").write_bytes(b"")
    assert list_snapshots(directory) == [7, 40, 300]
    assert snapshot_path(directory, 7).endswith("00000000000000000007.snapshot")
    assert read_snapshot(directory, 40) == b"snap40"
    assert delete_snapshots(directory, lambda o: o > 39, sync=True) == [40, 300]
    remove_unfinished(directory)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000005.log", "00000000000000000007.snapshot"]
