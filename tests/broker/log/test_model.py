"""Property test: any sequence of appends, truncations, retention, clean and crashed
reopens leaves the log equal to a plain list model (batches by offset, byte-identical)."""

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
