"""Retention (Kafka's deleteOldSegments): by time, by size, below the log start offset."""

import os

import pytest

from broker.log import LogConfig, OffsetOutOfRange

from .helpers import batches_in, make_batch, open_log

HOUR = 3600 * 1000


def build(tmp_path, config, n=12, **kw):
    """n one-record batches, batch i stamped i hours; 3 batches per segment."""
    log = open_log(tmp_path, config, **kw)
    for i in range(n):
        log.append(make_batch(1, ts=i * HOUR, seed=i), now_ms=i * HOUR)
    return log


def seg_config(**kw):
    size = len(make_batch(1))
    return LogConfig(segment_bytes=3 * size, segment_ms=10**12, **kw)


def test_retention_by_time(tmp_path):
    events = []
    log = build(tmp_path, seg_config(retention_ms=5 * HOUR, file_delete_delay_ms=1000),
                on_event=lambda kind, **f: events.append((kind, f)))
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    # Segment [0,3) has largest timestamp 2h, [3,6) 5h: at now=10h+1 only the first is
    # more than 5h old... and the second is exactly 5h+1 old too.
    now = 10 * HOUR + 1
    assert log.apply_retention(now) == [0, 3]
    assert log.log_start_offset == 6
    assert [s.base_offset for s in log.segments] == [6, 9]
    with pytest.raises(OffsetOutOfRange):
        log.read(5, 1 << 20)
    assert batches_in(log.read(6, 1 << 20))[0] == (6, 6)
    deletes = [f for k, f in events if k == "segment_delete"]
    assert [(f["base_offset"], f["reason"]) for f in deletes] == [(0, "retention_ms"), (3, "retention_ms")]
    # The files are renamed *.deleted and unlinked after file.delete.delay.ms.
    names = os.listdir(tmp_path)
    assert "00000000000000000000.log.deleted" in names
    log.apply_retention(now + 999)
    assert "00000000000000000000.log.deleted" in os.listdir(tmp_path)
    log.apply_retention(now + 1000)
    assert not any(n.endswith(".deleted") for n in os.listdir(tmp_path))


def test_retention_by_time_rolls_before_deleting_the_active_segment(tmp_path):
    log = build(tmp_path, seg_config(retention_ms=HOUR), n=5)
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert log.apply_retention(100 * HOUR) == [0, 3]
    # Everything expired: the log rolled first, so an empty active segment at the LEO remains.
    assert [(s.base_offset, s.size) for s in log.segments] == [(5, 0)]
    assert log.log_start_offset == log.log_end_offset == 5
    assert log.read(5, 100) == b""
    assert log.append(make_batch(1), now_ms=100 * HOUR).base_offset == 5
    # The lone empty active segment is never deleted.
    log2 = open_log(tmp_path / "empty", seg_config(retention_ms=HOUR))
    assert log2.apply_retention(100 * HOUR) == []


def test_retention_respects_the_high_watermark(tmp_path):
    log = build(tmp_path, seg_config(retention_ms=HOUR))
    # A segment may go only if the next one starts at or below the HW.
    assert log.apply_retention(100 * HOUR, high_watermark=5) == [0]
    assert log.apply_retention(100 * HOUR, high_watermark=6) == [3]
    assert log.log_start_offset == 6


def test_retention_by_bytes(tmp_path):
    size = len(make_batch(1))
    log = build(tmp_path, seg_config(retention_ms=-1, retention_bytes=7 * size))
    assert log.size == 12 * size
    # Kafka deletes whole oldest segments only while what remains stays >= retention.bytes:
    # 12 -> 9 batches; dropping the next 3 would leave 6 < 7, so it stays.
    assert log.apply_retention(10**15) == [0]
    assert log.size == 9 * size and log.log_start_offset == 3
    assert log.apply_retention(10**15) == []
    log = build(tmp_path / "b", seg_config(retention_ms=-1, retention_bytes=6 * size))
    assert log.apply_retention(10**15) == [0, 3]
    assert log.size == 6 * size and log.log_start_offset == 6


def test_unlimited_and_compact_only_keep_everything(tmp_path):
    log = build(tmp_path / "a", seg_config(retention_ms=-1))
    assert log.apply_retention(10**15) == []
    log = build(tmp_path / "b", seg_config(retention_ms=1, retention_bytes=1, cleanup_policy="compact"))
    assert log.apply_retention(10**15) == []


def test_delete_records_moves_log_start_then_segments_go(tmp_path):
    log = build(tmp_path, seg_config(retention_ms=-1))
    assert log.delete_records_before(7) == 7
    assert log.delete_records_before(2) == 7          # never backwards
    with pytest.raises(OffsetOutOfRange):
        log.read(6, 1 << 20)
    assert batches_in(log.read(7, 1 << 20)) == [(7, 7), (8, 8)]
    assert log.apply_retention(0) == [0, 3]           # wholly below the log start offset
    assert log.log_start_offset == 7
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(13)


def test_log_start_offset_survives_restart(tmp_path):
    from broker.log import LogManager
    mgr = LogManager(str(tmp_path), seg_config(retention_ms=-1))
    mgr.open()
    log = mgr.get_or_create("t", 0)
    for i in range(6):
        log.append(make_batch(1, seed=i), now_ms=0)
    log.delete_records_before(4)
    mgr.close()
    mgr = LogManager(str(tmp_path), seg_config(retention_ms=-1))
    mgr.open()
    assert mgr.get("t", 0).log_start_offset == 4
    with pytest.raises(OffsetOutOfRange):
        mgr.get("t", 0).read(3, 100)
    mgr.close()
