"""A partition log's .txnindex files: an entry goes to the segment holding its marker, in
Kafka's 34-byte layout (packed here with struct), and the files follow their segments
through reopening, truncation, retention and the loader's clean-up of leftovers."""

from __future__ import annotations

import os
import struct

from broker.log import LogConfig
from broker.log.txn_index import AbortedTxn
from tests.broker.log.helpers import make_batch, open_log

SMALL = LogConfig(segment_bytes=300, retention_bytes=-1)


def txnindex(path, base: int) -> str:
    return os.path.join(str(path), f"{base:020d}.txnindex")


def fill(log, batches: int) -> None:
    for i in range(batches):
        log.append(make_batch(2, seed=i), now_ms=0)


def test_entries_go_to_the_segment_of_their_marker_in_kafkas_layout(tmp_path):
    log = open_log(tmp_path, SMALL)
    fill(log, 6)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    first, second = AbortedTxn(7, 0, bases[1] + 1, 3), AbortedTxn(8, 2, bases[2], bases[2] + 1)
    log.append_aborted_txn(first)
    log.append_aborted_txn(second)
    assert not os.path.exists(txnindex(tmp_path, bases[0]))  # created with its first entry
    with open(txnindex(tmp_path, bases[1]), "rb") as f:
        assert f.read() == struct.pack(">hqqqq", 0, 7, 0, bases[1] + 1, 3)
    # a replay over an entry kept does not write it twice
    log.append_aborted_txn(first, unless_present=True)
    assert os.path.getsize(txnindex(tmp_path, bases[1])) == 34
    assert log.collect_aborted_txns(0, log.log_end_offset) == [first, second]
    assert log.collect_aborted_txns(bases[2], log.log_end_offset) == [second]
    assert log.has_aborted_txns_from(bases[2]) and log.has_aborted_txns_from(0)
    log.close()
    again = open_log(tmp_path, SMALL)
    assert again.collect_aborted_txns(0, again.log_end_offset) == [first, second]
    assert again.txn_index_stale_from() is None


def test_truncation_and_retention_take_their_entries_along(tmp_path):
    log = open_log(tmp_path, SMALL)
    fill(log, 6)
    bases = [s.base_offset for s in log.segments]
    log.append_aborted_txn(AbortedTxn(7, 0, bases[0] + 1, 2))
    log.append_aborted_txn(AbortedTxn(8, 0, log.log_end_offset - 1, log.log_end_offset))
    log.truncate_to(log.log_end_offset - 1)
    assert [t.producer_id for t in log.collect_aborted_txns(0, 100)] == [7]
    log.delete_records_before(bases[1])
    log.apply_retention(now_ms=0)
    log.apply_retention(now_ms=10**9)  # past file.delete.delay.ms
    assert not os.path.exists(txnindex(tmp_path, bases[0]))
    assert not any(n.startswith(f"{bases[0]:020d}") for n in os.listdir(tmp_path))
    assert log.collect_aborted_txns(bases[1], 100) == []


def test_the_loader_drops_an_orphan_and_marks_what_recovery_reread(tmp_path):
    log = open_log(tmp_path, SMALL)
    fill(log, 6)
    log.append_aborted_txn(AbortedTxn(7, 0, log.log_end_offset - 1, log.log_end_offset))
    active = log.active.base_offset
    log.close()
    with open(txnindex(tmp_path, 99_999), "wb") as f:
        f.write(b"\x00" * 34)
    clean = open_log(tmp_path, SMALL)
    assert not os.path.exists(txnindex(tmp_path, 99_999))
    assert clean.txn_index_stale_from() is None
    clean.close()
    recovered = open_log(tmp_path, SMALL, clean_shutdown=False, recovery_point=active)
    # recovery re-read the active segment: its entry is kept (its marker survived) but the
    # index is no longer vouched for
    assert recovered.txn_index_stale_from() == active
    assert len(recovered.collect_aborted_txns(0, 100)) == 1
