"""Property test: any sequence of appends, truncations, retention, clean and crashed
reopens leaves the log equal to a plain list model (batches by offset, byte-identical),
and small reads from any offset (which leave each segment a hint of where the next read
starts) return the model's batches from that offset."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log import LogConfig, PartitionLog
from protocol.records import iter_batch_headers

from .helpers import close_fds, make_batch

ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 6), st.integers(0, 300)),
    st.tuples(st.just("truncate"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("delete_records"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("reopen_clean"), st.just(0), st.just(0)),
    st.tuples(st.just("crash"), st.just(0), st.just(0)),
    st.tuples(st.just("read"), st.integers(0, 40), st.integers(1, 400)),
), max_size=40)


def crash(log):
    close_fds(*log.segments)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops, segment_bytes=st.sampled_from([200, 600, 5000]),
       interval=st.sampled_from([0, 100, 4096]))
def test_log_matches_model(tmp_path_factory, ops, segment_bytes, interval):
    d = str(tmp_path_factory.mktemp("log"))
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval)
    log = PartitionLog.open(d, "t", 0, config)
    model: list[tuple[int, int, bytes]] = []   # (base, last, bytes as stored)
    now = 0
    for i, (op, a, b) in enumerate(ops):
        now += 1000
        leo = model[-1][1] + 1 if model else log.log_end_offset
        if op == "append":
            batch = bytearray(make_batch(a, ts=now, value_size=b, seed=i))
            if len(batch) > segment_bytes:
                continue
            info = log.append(batch, now_ms=now)
            assert info.base_offset == leo
            model.append((info.base_offset, info.last_offset, bytes(batch)))
        elif op == "truncate":
            fully = a < log.segments[0].base_offset and a < log.log_end_offset
            log.truncate_to(a)
            # Below the first segment Kafka truncates fully and restarts the log at `a`.
            model = [] if fully else [m for m in model if m[1] < a]
            if fully:
                assert log.log_end_offset == log.log_start_offset == a
        elif op == "delete_records":
            if a <= log.log_end_offset:
                log.delete_records_before(a)
                log.apply_retention(now)
        elif op == "read":
            if log.log_start_offset <= a < log.log_end_offset:
                data = log.read(a, b)
                got_read = [(h.base_offset, h.last_offset, data[pos:pos + h.size])
                            for pos, h in iter_batch_headers(data)]
                after = [m for m in model if m[1] >= a]
                assert got_read and got_read == after[:len(got_read)], (a, b)
                assert len(got_read) == 1 or len(data) <= b
            for segment in log.segments:  # the hint never changes an answer
                for offset in range(segment.base_offset, log.log_end_offset + 2):
                    hinted = segment.translate_offset(offset)
                    hints, segment._read_ends = segment._read_ends, {}
                    assert hinted == segment.translate_offset(offset), offset
                    segment._read_ends = hints
        elif op == "reopen_clean":
            log.close()
            log = PartitionLog.open(d, "t", 0, config, log_start_offset=log.log_start_offset)
            assert log.recovery_report is None
        else:
            start_before = log.log_start_offset
            crash(log)
            log = PartitionLog.open(d, "t", 0, config, clean_shutdown=False,
                                    recovery_point=0, log_start_offset=start_before)
            assert log.recovery_report.truncated_bytes == 0
        # Invariants after every step.
        expected_leo = model[-1][1] + 1 if model else log.log_end_offset
        assert log.log_end_offset == expected_leo
        assert log.log_start_offset <= log.log_end_offset
        visible = [m for m in model if m[1] >= log.log_start_offset]
        got = []
        off = log.log_start_offset
        while off < log.log_end_offset:
            data = log.read(off, 1 << 20)
            assert data, off
            for pos, h in iter_batch_headers(data):
                got.append((h.base_offset, h.last_offset, data[pos:pos + h.size]))
            off = got[-1][1] + 1
        assert got == visible
    log.close()


def test_a_read_hint_is_forgotten_when_the_segment_is_cut_back(tmp_path):
    """The hint says where the batch after the last read starts; after a truncation new
    batches of other sizes sit there, and a hint kept would point into one of them."""
    log = PartitionLog.open(str(tmp_path), "t", 0, LogConfig(index_interval_bytes=1 << 20))
    for i in range(5):
        log.append(bytearray(make_batch(2, ts=1000 + i, value_size=10, seed=i)), now_ms=1000)
    first = len(log.read(0, 1 << 20)) // 5
    assert len(log.read(0, first * 3)) == first * 3  # offsets 0-5; the hint: 6 at 3 batches
    segment = log.segments[-1]
    assert segment._read_ends == {10: first * 5, 6: first * 3}  # the whole read, then this
    log.truncate_to(2)
    assert segment._read_ends == {}
    for i in range(3):
        log.append(bytearray(make_batch(3, ts=2000 + i, value_size=50, seed=i)), now_ms=2000)
    # offsets 2-4, 5-7, 8-10 now: 6 is inside the second new batch
    position, header = segment.translate_offset(6)
    assert (header.base_offset, header.last_offset) == (5, 7)
    assert [h.base_offset for _, h in iter_batch_headers(log.read(6, 1 << 20))] == [5, 8]
    log.close()


def test_the_read_ends_of_several_readers_are_remembered(tmp_path):
    """Two followers and a consumer read a partition at their own offsets: each next read
    starts from where that reader's last ended, not from the index's entry."""
    log = PartitionLog.open(str(tmp_path), "t", 0, LogConfig(index_interval_bytes=1 << 20))
    for i in range(10):
        log.append(bytearray(make_batch(2, ts=1000 + i, value_size=10, seed=i)), now_ms=1000)
    size = len(log.read(0, 1 << 20)) // 10
    segment = log.segments[-1]
    segment._read_ends.clear()
    assert len(log.read(0, size * 2)) == size * 2  # a consumer: offsets 0-3
    assert len(log.read(8, size * 3)) == size * 3  # a follower: offsets 8-13
    assert segment._read_ends == {4: size * 2, 14: size * 7}
    walked = []
    walk = segment._walk
    segment._walk = lambda position, end: walked.append(position) or walk(position, end)
    position, header = segment.translate_offset(4)  # the consumer's next read
    assert (position, header.base_offset) == (size * 2, 4) and walked[0] == size * 2
    position, header = segment.translate_offset(14)  # the follower's
    assert (position, header.base_offset) == (size * 7, 14) and walked[1] == size * 7
