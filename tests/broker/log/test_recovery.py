"""Crash recovery (Kafka's LogLoader): torn tails, junk, corrupt CRCs, lost indexes,
and the clean-shutdown marker that makes all of it unnecessary."""

import json
import os
import random

import pytest

from broker.log import LogConfig, LogManager
from broker.log.manager import CLEAN_SHUTDOWN_FILE

from .helpers import batches_in, close_fds, make_batch

TOPIC = "orders-eu-west"  # dashes on purpose: the dir name is parsed at the last '-'


def write_log(data_dir, n_batches, config, records_per_batch=3, value_size=12):
    """Append batches through a LogManager; return it and each batch's bytes as stored."""
    mgr = LogManager(str(data_dir), config)
    assert mgr.open() == []
    log = mgr.get_or_create(TOPIC, 0)
    for i in range(n_batches):
        log.append(make_batch(records_per_batch, ts=1_000 + i, value_size=value_size, seed=i),
                   now_ms=1_000 + i)
    stored = []
    for seg in log.segments:
        data = seg.pread(0, seg.size)
        stored += [data[p:p + h.size] for p, h in _headers(data)]
    return mgr, stored


def _headers(data):
    from protocol.records import iter_batch_headers
    return list(iter_batch_headers(data))


def simulate_crash(mgr):
    """Drop the manager as a kill -9 would: no flush, no checkpoint, no marker. The bytes
    already written are in the page cache, so they survive, exactly as after a process
    crash. Only the file descriptors are released (to not leak them across iterations)."""
    for log in mgr.logs():
        close_fds(*log.segments)


def reopen(data_dir, config):
    mgr = LogManager(str(data_dir), config)
    reports = mgr.open()
    return mgr, reports, mgr.get(TOPIC, 0)


def read_all(log):
    return b"".join(log.read(s.base_offset, 1 << 30) if s.size else b""
                    for s in log.segments if s.base_offset >= log.log_start_offset)


def part_dir(data_dir):
    return os.path.join(str(data_dir), f"{TOPIC}-0")


CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=0)  # index every batch


def test_torn_tail_at_every_byte_of_the_last_batch(tmp_path):
    """R4: cut the active .log at every byte inside the last batch; reopen uncleanly.
    Everything before the last batch survives byte for byte; nothing partial does."""
    mgr, stored = write_log(tmp_path, 20, CONFIG, records_per_batch=5)
    log = mgr.get(TOPIC, 0)
    assert len(log.segments) > 1
    active = log.active
    last = stored[-1]
    last_base = log.log_end_offset - 5
    log_path, files = active.log_path, {}
    simulate_crash(mgr)
    for path in (log_path, log_path[:-4] + ".index", log_path[:-4] + ".timeindex"):
        files[path] = open(path, "rb").read()
    full = files[log_path]
    assert full.endswith(last)
    start = len(full) - len(last)
    for cut in range(start, len(full)):
        for path, content in files.items():   # stale indexes point at the torn batch too
            with open(path, "wb") as f:
                f.write(content[:cut] if path == log_path else content)
        mgr, reports, log = reopen(tmp_path, CONFIG)
        assert log.log_end_offset == last_base, cut
        assert [(r.topic, r.partition, r.truncated_bytes) for r in reports] == [
            (TOPIC, 0, cut - start)]
        assert batches_in(read_all(log)) == batches_in(b"".join(stored[:-1]))
        assert read_all(log) == b"".join(stored[:-1])
        assert log.append(make_batch(5, seed=99), now_ms=10**6).base_offset == last_base
        simulate_crash(mgr)


@pytest.mark.parametrize("seed", range(12))
def test_random_junk_on_log_and_index_is_cut(tmp_path, seed):
    """R1 (LogLoaderTest.testCorruptLog): 1-1024 random bytes appended to the active .log
    and .index; an unclean reopen keeps every real batch and drops the junk."""
    rng = random.Random(seed)
    mgr, stored = write_log(tmp_path, 15, CONFIG)
    log = mgr.get(TOPIC, 0)
    leo = log.log_end_offset
    log_path = log.active.log_path
    simulate_crash(mgr)
    junk_log = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 1024)))
    junk_idx = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 1024)))
    with open(log_path, "ab") as f:
        f.write(junk_log)
    with open(log_path[:-4] + ".index", "ab") as f:
        f.write(junk_idx)
    mgr, reports, log = reopen(tmp_path, CONFIG)
    assert log.log_end_offset == leo
    assert reports[0].truncated_bytes == len(junk_log)
    assert read_all(log) == b"".join(stored)
    assert len(log.active.offset_index) * 8 == os.path.getsize(log_path[:-4] + ".index")
    mgr.close()


def test_junk_in_an_inactive_index_with_clean_shutdown_is_rebuilt(tmp_path):
    mgr, stored = write_log(tmp_path, 15, CONFIG)
    first = mgr.get(TOPIC, 0).segments[0]
    index_path = first.offset_index.path
    mgr.close()
    original = open(index_path, "rb").read()
    with open(index_path, "ab") as f:
        f.write(b"\x07\x07\x07")
    mgr, reports, log = reopen(tmp_path, CONFIG)
    assert [(r.segments_recovered, r.truncated_bytes) for r in reports] == [(1, 0)]
    assert open(index_path, "rb").read() == original
    assert read_all(log) == b"".join(stored)
    mgr.close()


def test_corrupt_crc_in_the_middle_truncates_there_and_drops_later_segments(tmp_path):
    mgr, stored = write_log(tmp_path, 30, CONFIG)
    log = mgr.get(TOPIC, 0)
    nsegs = len(log.segments)
    victim = log.segments[1]
    victim_data = victim.pread(0, victim.size)
    positions = [p for p, _ in _headers(victim_data)]
    bad_pos, bad_header = _headers(victim_data)[2]
    victim_path = victim.log_path
    simulate_crash(mgr)   # no checkpoint written since start-up: recovery point 0
    with open(victim_path, "r+b") as f:
        f.seek(bad_pos + 70)             # a byte inside the records: covered by the CRC
        byte = f.read(1)
        f.seek(bad_pos + 70)
        f.write(bytes([byte[0] ^ 0x55]))
    mgr, reports, log = reopen(tmp_path, CONFIG)
    assert log.log_end_offset == bad_header.base_offset
    assert len(log.segments) == 2
    (report,) = reports
    assert report.truncated_bytes == len(victim_data) - bad_pos
    assert report.segments_deleted == nsegs - 2
    kept = [b for b in stored if _headers(b)[0][1].base_offset < bad_header.base_offset]
    assert read_all(log) == b"".join(kept)
    assert len(positions) > 2
    mgr.close()


def test_garbled_byte_anywhere_in_last_batch(tmp_path):
    """R4's garble half: flip each CRC-covered (or length/magic) byte of the last batch.
    BaseOffset (0-7) and PartitionLeaderEpoch (12-15) are outside the CRC by design, in
    Kafka too, so a flip there is not detectable and is not tested."""
    mgr, stored = write_log(tmp_path, 6, LogConfig(), records_per_batch=2, value_size=4)
    log = mgr.get(TOPIC, 0)
    last_base = log.log_end_offset - 2
    path = log.active.log_path
    simulate_crash(mgr)
    full = open(path, "rb").read()
    start = len(full) - len(stored[-1])
    for rel in [*range(8, 12), *range(16, len(stored[-1]))]:
        garbled = bytearray(full)
        garbled[start + rel] ^= 0xFF
        with open(path, "wb") as f:
            f.write(garbled)
        mgr, reports, log = reopen(tmp_path, LogConfig())
        assert log.log_end_offset == last_base, rel
        assert read_all(log) == b"".join(stored[:-1])
        simulate_crash(mgr)


def test_deleted_indexes_are_rebuilt_identically(tmp_path):
    """R2 (testCorruptIndexRebuild): .index and .timeindex gone -> rebuilt from the .log."""
    config = LogConfig(segment_bytes=1500, index_interval_bytes=150)
    mgr, stored = write_log(tmp_path, 30, config)
    paths = [p for seg in mgr.get(TOPIC, 0).segments for p in seg.paths()[1:]]
    mgr.close()
    originals = {p: open(p, "rb").read() for p in paths}
    assert any(originals.values())
    for p in paths:
        os.unlink(p)
    mgr, reports, log = reopen(tmp_path, config)
    assert reports[0].segments_recovered == len(log.segments)
    assert reports[0].truncated_bytes == 0
    assert {p: open(p, "rb").read() for p in paths} == originals
    assert read_all(log) == b"".join(stored)
    # Batch i holds offsets 3i..3i+2 with timestamps 1000+i .. 1002+i.
    records = [(3 * i + j, 1_000 + i + j) for i in range(30) for j in range(3)]
    for target in range(990, 1_035):
        expected = next(((off, ts) for off, ts in records if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    mgr.close()


def test_clean_marker_skips_recovery(tmp_path):
    mgr, stored = write_log(tmp_path, 10, CONFIG)
    mgr.close()
    assert os.path.exists(os.path.join(tmp_path, CLEAN_SHUTDOWN_FILE))
    mgr, reports, log = reopen(tmp_path, CONFIG)
    assert reports == [] and mgr.had_clean_shutdown is True
    # The marker is gone while running: a crash from now on is unclean.
    assert not os.path.exists(os.path.join(tmp_path, CLEAN_SHUTDOWN_FILE))
    assert read_all(log) == b"".join(stored)
    simulate_crash(mgr)
    mgr, reports, log = reopen(tmp_path, CONFIG)
    assert mgr.had_clean_shutdown is False
    # Start-up checkpointed recovery points at the LEO, so only the active segment
    # (which holds offsets >= the recovery point) is re-scanned.
    assert [(r.segments_recovered, r.truncated_bytes) for r in reports] == [(1, 0)]
    mgr.close()


def test_the_clean_marker_names_the_broker_epoch_of_the_shutdown(tmp_path):
    """KIP-966: the next registration's previous_broker_epoch, as Kafka's
    CleanShutdownFileHandler writes it; -1 after a crash, or for an older empty marker."""
    mgr, _ = write_log(tmp_path, 2, CONFIG)
    assert mgr.clean_shutdown_broker_epoch == -1  # a new directory
    mgr.close(broker_epoch=42)
    with open(os.path.join(tmp_path, CLEAN_SHUTDOWN_FILE)) as f:
        assert json.load(f) == {"version": 0, "brokerEpoch": 42}
    mgr, _, _ = reopen(tmp_path, CONFIG)
    assert mgr.clean_shutdown_broker_epoch == 42
    simulate_crash(mgr)
    mgr, _, _ = reopen(tmp_path, CONFIG)
    assert mgr.clean_shutdown_broker_epoch == -1 and mgr.had_clean_shutdown is False
    mgr.close()  # never registered
    mgr, _, _ = reopen(tmp_path, CONFIG)
    assert mgr.clean_shutdown_broker_epoch == -1 and mgr.had_clean_shutdown is True
    mgr.close()
    for content in (b"", b"{", b'{"version":0}', b'{"brokerEpoch":"7"}', b"[1]"):
        with open(os.path.join(tmp_path, CLEAN_SHUTDOWN_FILE), "wb") as f:
            f.write(content)
        mgr, reports, _ = reopen(tmp_path, CONFIG)
        # still a clean shutdown for the logs: only the epoch is unknown
        assert (mgr.clean_shutdown_broker_epoch, mgr.had_clean_shutdown, reports) == \
            (-1, True, []), content
        mgr.close()


def test_unclean_without_checkpoint_recovers_every_segment(tmp_path):
    mgr, stored = write_log(tmp_path, 30, CONFIG)
    nsegs = len(mgr.get(TOPIC, 0).segments)
    simulate_crash(mgr)
    os.unlink(os.path.join(tmp_path, "recovery-point-offset-checkpoint"))
    mgr, reports, log = reopen(tmp_path, CONFIG)
    assert reports[0].segments_recovered == nsegs
    assert read_all(log) == b"".join(stored)
    mgr.close()


def test_leftover_deleted_files_and_orphan_indexes_are_removed(tmp_path):
    mgr, stored = write_log(tmp_path, 5, CONFIG)
    mgr.close()
    d = part_dir(tmp_path)
    for name in ("00000000000000000099.log.deleted", "00000000000000000042.index",
                 "00000000000000000042.timeindex"):
        open(os.path.join(d, name), "wb").write(b"x" * 10)
    os.mkdir(os.path.join(tmp_path, f"{TOPIC}-1.abc{'-delete'}"))
    mgr, reports, log = reopen(tmp_path, CONFIG)
    assert sorted(os.listdir(d)) == ["00000000000000000000.index", "00000000000000000000.log",
                                     "00000000000000000000.timeindex"]
    assert mgr.partitions() == [(TOPIC, 0)]
    assert not any(n.endswith("-delete") for n in os.listdir(tmp_path))
    mgr.close()


# --- parallel recovery (num.recovery.threads.per.data.dir) -------------------------------

PARTITIONS = 4


def _record_durability(monkeypatch):
    """What start-up makes durable, in order: ("fsync", path) for every fsync of a file or
    directory, ("checkpoint", name) for every checkpoint file written."""
    import broker.log.loader as loader
    import broker.log.manager as manager
    events = []
    real_fsync, real_checkpoint = loader.fsync_dir, manager.write_checkpoint

    def fsync(path, *fs):
        events.append(("fsync", os.fspath(path)))
        real_fsync(path, *fs)

    def checkpoint(path, offsets, **fs):
        events.append(("checkpoint", os.path.basename(path)))
        real_checkpoint(path, offsets, **fs)
    monkeypatch.setattr(loader, "fsync_dir", fsync)
    monkeypatch.setattr(manager, "write_checkpoint", checkpoint)
    return events


def test_parallel_recovery_cuts_torn_tails_past_the_recovery_point(tmp_path, monkeypatch):
    """Several partitions, each flushed (recovery point checkpointed) half way and then
    appended to; a kill -9 tears each one's last batch. Loaded on several threads, every
    log keeps the batches before its torn one, byte for byte, and nothing of that one; what
    recovery read is fsynced before the recovery points say it is durable."""
    mgr = LogManager(str(tmp_path), CONFIG)
    mgr.open()
    stored: dict[int, list[bytes]] = {}
    for p in range(PARTITIONS):
        log = mgr.get_or_create(TOPIC, p)
        for i in range(8):
            log.append(make_batch(3, ts=1_000 + i, seed=p * 100 + i), now_ms=1_000 + i)
        log.flush()
    mgr.checkpoint()  # recovery points at offset 24: those batches are trusted
    for p in range(PARTITIONS):
        log = mgr.get(TOPIC, p)
        for i in range(8, 8 + 3 + p):
            log.append(make_batch(3, ts=1_000 + i, seed=p * 100 + i), now_ms=1_000 + i)
        stored[p] = []
        for seg in log.segments:
            data = seg.pread(0, seg.size)
            stored[p] += [data[q:q + h.size] for q, h in _headers(data)]
    active = {p: mgr.get(TOPIC, p).active.log_path for p in range(PARTITIONS)}
    simulate_crash(mgr)
    for p, path in active.items():
        with open(path, "r+b") as f:  # tear the last batch: p + 1 bytes of it are missing
            f.truncate(os.path.getsize(path) - (p + 1))
    events = _record_durability(monkeypatch)
    mgr = LogManager(str(tmp_path), CONFIG, recovery_threads=3)
    reports = mgr.open()
    assert sorted((r.partition, r.truncated_bytes) for r in reports) == [
        (p, len(stored[p][-1]) - (p + 1)) for p in range(PARTITIONS)]
    for p in range(PARTITIONS):
        log = mgr.get(TOPIC, p)
        assert log.log_end_offset == 3 * (len(stored[p]) - 1)
        got = b"".join(log.read(s.base_offset, 1 << 30) for s in log.segments if s.size)
        assert got == b"".join(stored[p][:-1])
        assert log.recovery_point == log.log_end_offset
    first_checkpoint = events.index(("checkpoint", "recovery-point-offset-checkpoint"))
    fsynced = {path for kind, path in events[:first_checkpoint] if kind == "fsync"}
    assert set(active.values()) <= fsynced
    assert {part_dir(tmp_path)[:-1] + str(p) for p in range(PARTITIONS)} <= fsynced
    mgr.close()
    # and the cut is what the next (clean) start finds
    mgr, reports, _ = reopen(tmp_path, CONFIG)
    assert reports == []
    assert [mgr.get(TOPIC, p).log_end_offset for p in range(PARTITIONS)] == [
        3 * (len(stored[p]) - 1) for p in range(PARTITIONS)]
    mgr.close()


def test_unclean_start_fsyncs_nothing_of_partitions_that_never_had_a_batch(tmp_path,
                                                                           monkeypatch):
    """Idle partitions after a kill -9: their empty active segments are recovered (they
    hold the recovery point) but have nothing to make durable, so start-up costs no fsync
    per partition; a partition with data still has its segment fsynced."""
    mgr = LogManager(str(tmp_path), CONFIG)
    mgr.open()
    for p in range(PARTITIONS):
        mgr.get_or_create(TOPIC, p)
    mgr.get(TOPIC, 0).append(make_batch(3), now_ms=1_000)
    busy = mgr.get(TOPIC, 0).active.log_path
    simulate_crash(mgr)
    events = _record_durability(monkeypatch)
    mgr = LogManager(str(tmp_path), CONFIG, recovery_threads=2)
    reports = mgr.open()
    assert sorted((r.partition, r.segments_recovered) for r in reports) == [
        (p, 1) for p in range(PARTITIONS)]
    fsynced = [path for kind, path in events if kind == "fsync"]
    idle_dirs = [part_dir(tmp_path)[:-1] + str(p) for p in range(1, PARTITIONS)]
    assert not [path for path in fsynced if any(path.startswith(d) for d in idle_dirs)]
    assert busy in fsynced
    assert mgr.get(TOPIC, 0).log_end_offset == 3
    mgr.close()
