"""PartitionLog: offset assignment, reads of whole batches, rolling, ListOffsets, truncation."""

import pytest

from broker.log import (
    CorruptRecordError,
    InvalidRecordError,
    LogConfig,
    OffsetOutOfRange,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from protocol.records import (Record, RecordError, batch_crc_ok, decode_batch, encode_batch,
                              iter_batch_headers, refresh_crc, validate_produced_batch)

from .helpers import batches_in, header_of, log_files, make_batch, open_log


def test_offsets_assigned_sequentially_and_crc_stays_valid(tmp_path):
    log = open_log(tmp_path)
    sizes = [3, 1, 5, 2]
    results = [log.append(make_batch(n, seed=i), leader_epoch=7, now_ms=0)
               for i, n in enumerate(sizes)]
    assert results == [(0, 2, -1), (3, 3, -1), (4, 8, -1), (9, 10, -1)]
    assert log.log_end_offset == 11
    data = log.read(0, 1 << 20)
    assert batches_in(data) == [(0, 2), (3, 3), (4, 8), (9, 10)]
    for pos, h in iter_batch_headers(data):
        assert h.partition_leader_epoch == 7
        assert batch_crc_ok(data, pos, h)   # BaseOffset/epoch are outside the CRC
    _, records = decode_batch(data)
    assert [r.offset for r in records] == [0, 1, 2]


def test_read_round_trip_is_byte_identical_apart_from_offsets(tmp_path):
    log = open_log(tmp_path)
    original = bytearray(make_batch(4))
    log.append(original, now_ms=0)     # bytearray: rewritten in place
    log.append(bytes(make_batch(2)), now_ms=0)
    data = log.read(0, 1 << 20)
    assert data[:len(original)] == original
    assert header_of(data[len(original):]).base_offset == 4


def test_read_from_middle_of_batch_returns_whole_batch(tmp_path):
    log = open_log(tmp_path)
    for i in range(3):
        log.append(make_batch(5, seed=i), now_ms=0)   # offsets 0-4, 5-9, 10-14
    assert batches_in(log.read(7, 1 << 20)) == [(5, 9), (10, 14)]
    assert batches_in(log.read(14, 1 << 20)) == [(10, 14)]


def test_read_at_leo_and_out_of_range(tmp_path):
    log = open_log(tmp_path)
    assert log.read(0, 100) == b""               # empty log: 0 is the LEO
    log.append(make_batch(3), now_ms=0)
    assert log.read(3, 1 << 20) == b""
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read(4, 1 << 20)
    assert exc.value.error_code == 1
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 1 << 20)


def test_read_max_bytes_whole_batches_and_min_one_message(tmp_path):
    log = open_log(tmp_path)
    batch = make_batch(2, value_size=100)
    for i in range(4):
        log.append(make_batch(2, value_size=100, seed=i), now_ms=0)
    size = len(batch)
    assert batches_in(log.read(0, 2 * size + 10)) == [(0, 1), (2, 3)]
    assert len(log.read(0, 2 * size)) == 2 * size
    # First batch bigger than max_bytes still comes whole (minOneMessage) ...
    assert batches_in(log.read(2, 5)) == [(2, 3)]
    # ... unless the caller asks otherwise.
    assert log.read(2, 5, min_one_message=False) == b""


def test_read_bounded_by_max_offset(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    for i in range(10):
        log.append(make_batch(2, seed=i), now_ms=0)   # several segments
    assert len(log.segments) > 2
    for hw in range(0, 21):
        for start in range(0, 20, 2):
            if start > hw:
                continue
            got = batches_in(log.read(start, 1 << 20, max_offset=hw))
            # Only batches wholly below the HW, and something whenever one exists.
            assert all(last < hw for _, last in got)
            assert bool(got) == (start + 1 < hw), (start, hw)
            if got:
                assert got[0] == (start, start + 1)
    assert log.read(4, 1 << 20, max_offset=5) == b""


def test_produce_validation(tmp_path):
    log = open_log(tmp_path, LogConfig(max_message_bytes=500, segment_bytes=400))
    good = make_batch(2)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append(bad_crc, now_ms=0)
    with pytest.raises(CorruptRecordError):
        log.append(good[:40], now_ms=0)
    with pytest.raises(CorruptRecordError):
        log.append(good[:-1], now_ms=0)
    with pytest.raises(InvalidRecordError):
        log.append(good + good, now_ms=0)
    with pytest.raises(RecordBatchTooLargeError):
        log.append(make_batch(1, value_size=400), now_ms=0)
    with pytest.raises(RecordTooLargeError):
        log.append(make_batch(1, value_size=600), now_ms=0)
    control = encode_batch([Record(0, 0, b"\x00\x00\x00\x01", b"", [])], is_control=True)
    with pytest.raises(InvalidRecordError):
        log.append(control, now_ms=0)
    assert log.log_end_offset == 0 and log.size == 0
    assert log.append(control, now_ms=0, origin="coordinator").base_offset == 0


def _bad_batches():
    good = make_batch(2)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    lod = bytearray(good)
    lod[23:27] = (5).to_bytes(4, "big")       # LastOffsetDelta 5 for 2 records
    codec_and_count = bytearray(lod)
    codec_and_count[22] |= 5                   # codec id 5 as well
    for b in (lod, codec_and_count):
        refresh_crc(b)
    oversized_bad_crc = bytearray(make_batch(1, value_size=400))
    oversized_bad_crc[-1] ^= 0xFF
    return {
        "empty": b"", "short-header": good[:40], "truncated": good[:-1], "two": good + good,
        "bad-crc": bytes(bad_crc), "count": bytes(lod), "codec-and-count": bytes(codec_and_count),
        "over-max-message": make_batch(1, value_size=600),
        "over-segment-bad-crc": bytes(oversized_bad_crc),
        "control": encode_batch([Record(0, 0, b"\x00\x00\x00\x01", b"", [])], is_control=True),
    }


@pytest.mark.parametrize("name", list(_bad_batches()))
def test_append_and_produce_validation_refuse_alike(tmp_path, name):
    # PartitionLog.append without a caller-validated header runs the produce handler's
    # validate_produced_batch: the same bytes fail with the same error in both places.
    config = LogConfig(max_message_bytes=500, segment_bytes=400)
    log = open_log(tmp_path, config)
    buf = _bad_batches()[name]
    with pytest.raises(RecordError) as by_handler:
        validate_produced_batch(buf, config.max_message_bytes)
    with pytest.raises(RecordError) as by_log:
        log.append(buf, now_ms=0)
    assert type(by_log.value) is type(by_handler.value), name
    assert log.log_end_offset == 0 and log.size == 0


def test_log_append_time(tmp_path):
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append(make_batch(2, ts=5), now_ms=123_456)
    assert info.log_append_time == 123_456
    data = log.read(0, 1 << 20)
    h = header_of(data)
    assert h.max_timestamp == 123_456 and h.timestamp_type == 1
    assert batch_crc_ok(data, 0, h)
    _, records = decode_batch(data)
    assert [r.timestamp for r in records] == [123_456, 123_456]


def test_roll_by_size(tmp_path):
    batch = make_batch(1)
    log = open_log(tmp_path, LogConfig(segment_bytes=3 * len(batch)))
    events = []
    log._on_event = lambda kind, **f: events.append((kind, f))
    for i in range(7):
        log.append(make_batch(1, seed=i), now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert all(s.size <= 3 * len(batch) for s in log.segments)
    assert log_files(tmp_path) == ["%020d.log" % b for b in (0, 3, 6)]
    assert events == [("segment_roll", {"topic": "t", "partition": 0, "base_offset": 3}),
                      ("segment_roll", {"topic": "t", "partition": 0, "base_offset": 6})]
    assert batches_in(log.read(0, 1 << 20)) == [(0, 0), (1, 1), (2, 2)]  # one segment per read
    assert batches_in(log.read(4, 1 << 20)) == [(4, 4), (5, 5)]


def test_roll_by_time(tmp_path):
    day = 24 * 3600 * 1000
    log = open_log(tmp_path, LogConfig(segment_ms=day))
    log.append(make_batch(1, ts=1_000), now_ms=1_000)
    log.append(make_batch(1, ts=1_000 + day), now_ms=1_000 + day)          # not older yet
    assert len(log.segments) == 1
    log.append(make_batch(1, ts=1_000 + day + 1), now_ms=1_000 + day + 1)  # older: roll
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_by_time_without_timestamps_uses_injected_clock(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_ms=100))
    log.append(make_batch(1, ts=-1, ts_step=0), now_ms=5_000)
    log.append(make_batch(1, ts=-1, ts_step=0), now_ms=5_100)
    assert len(log.segments) == 1
    log.append(make_batch(1, ts=-1, ts_step=0), now_ms=5_101)
    assert len(log.segments) == 2


def test_sparse_index_lookups_across_segments(tmp_path):
    config = LogConfig(segment_bytes=24 * 1024, index_interval_bytes=512)
    log = open_log(tmp_path, config)
    expected = {}
    offset = 0
    for i in range(600):
        n = 1 + i % 4
        log.append(make_batch(n, value_size=20 + i % 50, seed=i), now_ms=0)
        expected[offset] = offset + n - 1
        offset += n
    assert len(log.segments) >= 3
    assert all(len(s.offset_index) > 5 for s in log.segments[:-1])
    starts = sorted(expected)
    for o in range(0, offset):
        base = max(b for b in starts if b <= o)
        got = batches_in(log.read(o, 1))
        assert got == [(base, expected[base])], o


def test_offset_for_timestamp_across_segments(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=1024, index_interval_bytes=100))
    # Batch i has records at ts 10_000 + 100*i + {0, 10, 20}.
    for i in range(40):
        log.append(make_batch(3, ts=10_000 + 100 * i, ts_step=10, seed=i), now_ms=0)
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(0) == (0, 10_000)
    assert log.offset_for_timestamp(10_000) == (0, 10_000)
    # Inside batch 7 (offsets 21-23): Kafka's answer is the first record >= target.
    assert log.offset_for_timestamp(10_705) == (22, 10_710)
    assert log.offset_for_timestamp(10_720) == (23, 10_720)
    assert log.offset_for_timestamp(10_721) == (24, 10_800)
    for i in range(40):
        assert log.offset_for_timestamp(10_000 + 100 * i) == (3 * i, 10_000 + 100 * i)
    assert log.offset_for_timestamp(20_000) is None
    assert log.offset_for_timestamp(-2) == (0, -1)
    assert log.offset_for_timestamp(-1) == (120, -1)
    assert log.offset_for_timestamp(-3) == log.max_timestamp_offset() == (119, 10_000 + 3900 + 20)
    # Below the log start offset nothing is answered, even if the timestamps match.
    log.delete_records_before(30)
    assert log.offset_for_timestamp(0) == (30, 11_000)
    log.apply_retention(0)
    assert log.offset_for_timestamp(0) == (30, 11_000)


def test_offset_for_timestamp_log_append_time(tmp_path):
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"))
    for i in range(5):
        log.append(make_batch(2, ts=1, seed=i), now_ms=1_000 * i)
    assert log.offset_for_timestamp(2_500) == (6, 3_000)
    assert log.offset_for_timestamp(0) == (0, 0)


def test_active_segment_headers(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    for i in range(6):
        log.append(make_batch(2, seed=i), now_ms=0)
    got = [(h.base_offset, h.last_offset) for h in log.active_segment_headers()]
    assert got and got[-1] == (10, 11) and got[0][0] == log.active.base_offset


def test_truncate_to(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    for i in range(10):
        log.append(make_batch(2, seed=i), now_ms=0)
    first = log.read(0, 1 << 20)
    assert log.truncate_to(20) is False
    assert log.truncate_to(9) is True           # offset 9 is inside batch 8-9: it goes whole
    assert log.log_end_offset == 8
    assert log.read(8, 100) == b""
    assert all(s.base_offset <= 8 for s in log.segments)
    assert log.read(0, 1 << 20) == first[:len(log.read(0, 1 << 20))]
    info = log.append(make_batch(1), now_ms=0)
    assert info.base_offset == 8
    log.truncate_to(0)
    assert log.log_end_offset == 0 and log.size == 0
    log.close()
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    assert log.log_end_offset == 0


def test_append_as_follower_keeps_offsets(tmp_path):
    leader = open_log(tmp_path / "leader")
    for i in range(5):
        leader.append(make_batch(2, seed=i), leader_epoch=3, now_ms=0)
    data = leader.read(0, 1 << 20)
    follower = open_log(tmp_path / "follower")
    assert follower.append_as_follower(data + data[:30], now_ms=0) == (0, 9)  # partial tail ignored
    assert follower.log_end_offset == 10
    assert follower.read(0, 1 << 20) == data
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(data, now_ms=0)   # offsets below the LEO


@pytest.mark.parametrize("damage, error", [
    (lambda b: b.__setitem__(16, 7), CorruptRecordError),      # magic
    (lambda b: b.__setitem__(-1, b[-1] ^ 1), CorruptRecordError),  # CRC
])
def test_append_as_follower_refuses_a_damaged_batch_and_writes_nothing(tmp_path, damage, error):
    leader = open_log(tmp_path / "leader")
    for i in range(3):
        leader.append(make_batch(2, seed=i), now_ms=0)
    data = leader.read(0, 1 << 20)
    second = bytearray(leader.read(2, 1 << 20, max_offset=4))
    damage(second)
    follower = open_log(tmp_path / "follower")
    first_len = len(data) - 2 * len(second)
    with pytest.raises(error, match=f"at {first_len}"):
        follower.append_as_follower(data[:first_len] + bytes(second) + data[-len(second):],
                                    now_ms=0)
    assert follower.log_end_offset == 0 and follower.size == 0


def test_clean_reopen_keeps_everything(tmp_path):
    config = LogConfig(segment_bytes=2000, index_interval_bytes=100)
    log = open_log(tmp_path, config)
    for i in range(50):
        log.append(make_batch(3, ts=1000 + i, seed=i), now_ms=0)
    data = b"".join(log.read(s.base_offset, 1 << 30) for s in log.segments)
    assert len(batches_in(data)) == 50
    nsegs = len(log.segments)
    log.close()
    log = open_log(tmp_path, config)
    assert log.recovery_report is None
    assert log.log_end_offset == 150 and len(log.segments) == nsegs
    assert b"".join(log.read(s.base_offset, 1 << 30) for s in log.segments) == data
    assert log.active.max_timestamp == 1000 + 49 + 2
    assert log.append(make_batch(1), now_ms=0).base_offset == 150


def test_events_match_the_declared_event_schema(tmp_path):
    """broker/events.py is the contract with spark_jobs and refuses undeclared fields."""
    from broker.events import EVENT_TYPES
    events = []
    log = open_log(tmp_path, LogConfig(segment_bytes=300, retention_bytes=600),
                   on_event=lambda kind, **f: events.append((kind, f)))
    for i in range(12):
        log.append(make_batch(2, seed=i), now_ms=0)
    log.apply_retention(0)
    log.truncate_to(20)
    log.truncate_to(0)
    kinds = {k for k, _ in events}
    assert kinds == {"segment_roll", "segment_delete"}
    for kind, fields in events:
        assert set(fields) <= set(EVENT_TYPES[kind]), (kind, fields)


def test_append_with_a_header_the_caller_validated(tmp_path):
    from protocol.records import validate_produced_batch
    log = open_log(tmp_path, LogConfig(segment_bytes=200))
    batch = bytearray(make_batch(2))
    header = validate_produced_batch(batch, 1000)
    assert log.append(batch, now_ms=0, validated=header) == (0, 1, -1)
    big = bytearray(make_batch(1, value_size=300))
    with pytest.raises(RecordTooLargeError) as exc:   # a RecordBatchTooLargeError
        log.append(big, now_ms=0, validated=validate_produced_batch(big, 1000))
    assert exc.value.error_code == 18
    assert log.read(0, 1 << 20) == bytes(batch)


def test_recovery_point_moves_on_roll_flush_and_flush_messages(tmp_path):
    size = len(make_batch(2))
    log = open_log(tmp_path, LogConfig(segment_bytes=2 * size, flush_interval_messages=5))
    log.append(make_batch(2), now_ms=0)
    log.append(make_batch(2), now_ms=0)
    assert log.recovery_point == 0                 # 4 messages, only in the page cache
    log.append(make_batch(2), now_ms=0)            # rolls (old segment fsynced) ...
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert log.recovery_point == 6                 # ... and 6 >= 5 messages: flushed
    log.append(make_batch(1), now_ms=0)
    assert log.recovery_point == 6
    log.flush()
    assert log.recovery_point == 7 == log.log_end_offset


def test_a_flush_off_the_event_loop_moves_the_recovery_point_to_the_planned_leo(tmp_path):
    from broker.log.log import fsync_plans
    log = open_log(tmp_path)
    log.append(make_batch(5), now_ms=0)
    plan = log.flush_plan()
    assert plan.files and plan.log_end_offset == 5
    log.append(make_batch(3), now_ms=0)   # lands while the worker thread fsyncs
    for done in fsync_plans([plan]):
        log.flushed(done)
    assert log.recovery_point == 5        # not 8: the later batch was not in the fsync


def test_a_flush_that_raced_a_truncation_does_not_move_the_recovery_point(tmp_path):
    from broker.log.log import fsync_plans
    log = open_log(tmp_path)
    log.append(make_batch(5), now_ms=0)
    log.flush()
    log.append(make_batch(5), now_ms=0)
    plan = log.flush_plan()
    log.truncate_to(5)
    log.append(make_batch(4), now_ms=0)   # offsets 5..8 are new and not fsynced
    for done in fsync_plans([plan]):
        log.flushed(done)
    assert log.recovery_point == 5


def test_a_flush_plan_of_a_closed_segment_is_dropped(tmp_path):
    from broker.log.log import fsync_plans
    log = open_log(tmp_path)
    log.append(make_batch(2), now_ms=0)
    plan = log.flush_plan()
    log.close()                            # closing fsyncs and closes the descriptors
    assert fsync_plans([plan]) == []
