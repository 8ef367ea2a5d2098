"""The log cleaner and transactions (Kafka's Cleaner with CleanedTransactionMetadata): an
aborted transaction's records go and never hide a committed value, a marker stays while
its transaction has batches and goes delete.retention.ms after it has none, kept ABORT
markers keep their .txnindex entries, and nothing at or past the LSO is cleaned."""

from __future__ import annotations

from broker.log import LogConfig, PartitionLog
from broker.log.cleaner import clean
from broker.log.txn_index import AbortedTxn
from broker.partition import Partition
from protocol.control_records import ControlRecordType, decode_control_type
from protocol.records import (
    DELETE_HORIZON_MASK, Record, decode_batches, encode_batch, parse_batch_header,
)

T0 = 1_700_000_000_000
RETENTION = 1_000


def compacted(path) -> Partition:
    plog = PartitionLog.open(str(path), "t", 0, LogConfig(
        segment_bytes=500, segment_ms=10**12, cleanup_policy="compact",
        delete_retention_ms=RETENTION))
    p = Partition("t", 0, plog, node_id=0)
    p.make_leader(leader_epoch=0, partition_epoch=0, replicas=(0,), isr=(0,), now_ms=0)
    return p


class Writer:
    def __init__(self, p: Partition):
        self.p, self.seq = p, {}

    def put(self, pid: int, *pairs: tuple[bytes, bytes], transactional: bool = True) -> None:
        seq = self.seq.get(pid, 0)
        self.seq[pid] = seq + len(pairs)
        batch = bytearray(encode_batch(
            [Record(i, T0, k, v) for i, (k, v) in enumerate(pairs)], producer_id=pid,
            producer_epoch=0, base_sequence=seq, is_transactional=transactional))
        assert self.p.append_batch(batch, parse_batch_header(batch), T0).error == 0

    def end(self, pid: int, commit: bool) -> None:
        assert self.p.append_control_batch(pid, 0, 0, commit, T0).error == 0

    def filler(self, n: int) -> None:
        """Plain records of their own keys, enough to roll segments."""
        for i in range(n):
            self.put(99, (b"f%d" % i, b"x" * 40), transactional=False)


def contents(p: Partition) -> list[tuple]:
    """(offset, key, value) of data records, ('marker', type, horizon?) of control ones."""
    out: list[tuple] = []
    for header, records in decode_batches(p.log.read(p.log_start_offset, 1 << 24)):
        if header.is_control:
            out.append(("marker", header.base_offset, decode_control_type(records[0].key),
                        bool(header.attributes & DELETE_HORIZON_MASK)))
        else:
            out.extend((r.offset, r.key, r.value) for r in records)
    return out


def markers(p: Partition) -> list[tuple]:
    return [(c[1], c[2], c[3]) for c in contents(p) if c[0] == "marker"]


def test_aborted_records_go_and_never_hide_a_committed_value(tmp_path):
    p = compacted(tmp_path)
    w = Writer(p)
    w.put(7, (b"a", b"committed"))                                  # 0
    w.end(7, commit=True)                                           # 1
    w.put(8, (b"a", b"aborted"), (b"b", b"aborted"))                # 2-3
    w.end(8, commit=False)                                          # 4
    w.filler(12)
    assert len(p.log.segments) > 2
    clean(p.log, now_ms=T0, cleaner_checkpoint=0)
    data = [c for c in contents(p) if c[0] != "marker" and not c[1].startswith(b"f")]
    assert data == [(0, b"a", b"committed")]
    # the ABORT marker stays while the pass saw its transaction's batches, indexed still
    assert markers(p) == [(1, ControlRecordType.COMMIT, False),
                          (4, ControlRecordType.ABORT, False)]
    assert p.log.collect_aborted_txns(0, p.log_end_offset) == [AbortedTxn(8, 2, 4, 5)]


def test_markers_outlive_their_transaction_by_delete_retention(tmp_path):
    p = compacted(tmp_path)
    w = Writer(p)
    w.put(8, (b"a", b"aborted"))                                    # 0
    w.end(8, commit=False)                                          # 1
    w.put(7, (b"c", b"old"))                                        # 2
    w.end(7, commit=True)                                           # 3
    w.put(9, (b"c", b"new"), transactional=False)                   # 4: supersedes 2
    w.filler(12)
    clean(p.log, now_ms=T0, cleaner_checkpoint=0)   # data of 8 and 7 goes; markers stay
    assert markers(p) == [(1, ControlRecordType.ABORT, False),
                          (3, ControlRecordType.COMMIT, False)]
    clean(p.log, now_ms=T0, cleaner_checkpoint=0)   # no batch left: the horizon is set
    assert markers(p) == [(1, ControlRecordType.ABORT, True),
                          (3, ControlRecordType.COMMIT, True)]
    assert p.log.collect_aborted_txns(0, p.log_end_offset) == []  # nothing left to skip
    clean(p.log, now_ms=T0 + RETENTION - 1, cleaner_checkpoint=0)
    assert len(markers(p)) == 2
    clean(p.log, now_ms=T0 + RETENTION, cleaner_checkpoint=0)
    assert markers(p) == []
    assert (4, b"c", b"new") in contents(p)


def test_nothing_past_the_last_stable_offset_is_cleaned(tmp_path):
    p = compacted(tmp_path)
    w = Writer(p)
    w.put(9, (b"k", b"one"), transactional=False)                   # 0
    w.filler(6)
    open_at = p.log_end_offset
    w.put(8, (b"k", b"open"))                                       # still open
    w.filler(12)
    w.put(9, (b"k", b"two"), transactional=False)
    assert p.last_stable_offset == open_at
    before = contents(p)
    result = clean(p.log, now_ms=T0, cleaner_checkpoint=0)
    after = contents(p)
    # below the LSO "one" is kept (the newer "two" lies past it, unseen by this pass);
    # the open transaction and everything after it is untouched
    assert [c for c in after if c[0] >= open_at] == [c for c in before if c[0] >= open_at]
    assert (0, b"k", b"one") in after
    assert result.new_checkpoint <= open_at
    w.end(8, commit=False)
    clean(p.log, now_ms=T0, cleaner_checkpoint=result.new_checkpoint)
    assert not any(c[1:] == (b"k", b"open") for c in contents(p))
