"""The log cleaner (cleaner.py): Kafka's compaction of cleanup.policy=compact logs.

Time is injected (``now_ms``); nothing sleeps. Crashes are simulated by making the n-th
``os.rename`` of a pass raise and then dropping the log without closing it.
"""

from __future__ import annotations

import os
import struct

import pytest

from broker.log import CorruptSegmentError, LogConfig, LogManager
from broker.log.cleaner import CleanResult, cleanable_bytes, clean
from broker.log.manager import CLEANER_OFFSET_CHECKPOINT, read_checkpoint
from protocol.records import (
    DELETE_HORIZON_MASK,
    Codec,
    Record,
    decode_batches,
    encode_batch,
    iter_batch_headers,
)

from .helpers import close_fds, open_log

HOUR = 3600 * 1000
DAY = 24 * HOUR
T0 = 1_700_000_000_000


# ---------------------------------------------------------------------- helpers

def kv_batch(pairs, ts, codec=Codec.NONE, **kw):
    """One producer batch of (key, value) records, timestamps ts, ts+1, ..."""
    return encode_batch([Record(i, ts + i, k, v, []) for i, (k, v) in enumerate(pairs)],
                        compression=codec, **kw)


def compact_config(**kw):
    kw.setdefault("segment_bytes", 600)
    kw.setdefault("segment_ms", 10**12)
    kw.setdefault("cleanup_policy", "compact")
    return LogConfig(**kw)


def records_of(log):
    """Every record of the log, read forward with `read` as a consumer would:
    [(offset, key, value, timestamp)]."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        last = offset
        for header, records in decode_batches(data):
            out.extend((r.offset, r.key, r.value, r.timestamp) for r in records if r.offset >= offset)
            last = header.last_offset
        offset = last + 1
    return out


def batches_of(log):
    """(header, records) of every batch, straight from the segment files."""
    out = []
    for seg in log.segments:
        data = seg.pread(0, seg.size)
        out.extend(decode_batches(data))
    return out


def expected_after_first_clean(records, active_base):
    """Kafka's result of one pass with an empty checkpoint: below the active segment, the
    latest record of each (non-null) key; the active segment as it is."""
    latest = {}
    for off, key, _v, _t in records:
        if off < active_base and key is not None:
            latest[key] = off
    return [r for r in records
            if r[0] >= active_base or (r[1] is not None and latest.get(r[1]) == r[0])]


def write_overwrites(log, rounds, keys, *, per_batch=2, ts=T0, codec=Codec.NONE):
    """``rounds`` passes over ``keys``, ``per_batch`` records per batch; value = round."""
    n = 0
    for r in range(rounds):
        pairs = [(k, b"v%d-%s" % (r, k)) for k in keys]
        for i in range(0, len(pairs), per_batch):
            log.append(kv_batch(pairs[i:i + per_batch], ts + n, codec), now_ms=ts + n)
            n += per_batch
    return n


def batches_in_range(data):
    return [h.base_offset for _, h in iter_batch_headers(data)]


def seg_files(path):
    return sorted(os.listdir(path))


KEYS = [b"key-%d" % i for i in range(6)]


# ---------------------------------------------------------------------- compaction

def test_overwritten_keys_compact_to_the_latest_value_at_the_original_offsets(tmp_path):
    log = open_log(tmp_path, compact_config(index_interval_bytes=0))
    write_overwrites(log, 20, KEYS)
    log.roll(T0 + 10_000)
    log.append(kv_batch([(KEYS[0], b"active-1"), (KEYS[0], b"active-2")], T0 + 20_000),
               now_ms=T0 + 20_000)
    before = records_of(log)
    active_base = log.active.base_offset
    assert len(log.segments) > 5
    bytes_before = sum(s.size for s in log.segments[:-1])
    result = clean(log, now_ms=T0 + 30_000, cleaner_checkpoint=0)
    after = records_of(log)
    assert after == expected_after_first_clean(before, active_base)
    # One record per key below the active segment, each the last round's value.
    below = [r for r in after if r[0] < active_base]
    assert sorted(r[1] for r in below) == sorted(KEYS)
    assert all(r[2] == b"v19-" + r[1] for r in below)
    # The active segment keeps its duplicates.
    assert [r[2] for r in after if r[0] >= active_base] == [b"active-1", b"active-2"]
    assert result.new_checkpoint == active_base
    assert result.records_removed == len(before) - len(after) == 19 * len(KEYS)
    assert result.tombstones_removed == 0
    assert result.bytes_before == bytes_before
    assert result.bytes_after == sum(s.size for s in log.segments[:-1]) < bytes_before
    assert log.log_end_offset == before[-1][0] + 1
    assert log.log_start_offset == 0 and log.segments[0].base_offset == 0
    # Appends go on at the LEO.
    assert log.append(kv_batch([(b"x", b"y")], T0 + 40_000), now_ms=T0 + 40_000).base_offset == before[-1][0] + 1


def test_second_pass_only_maps_the_new_dirty_section(tmp_path):
    log = open_log(tmp_path, compact_config())
    write_overwrites(log, 5, KEYS)
    log.roll(T0)
    first = clean(log, now_ms=T0, cleaner_checkpoint=0)
    write_overwrites(log, 3, KEYS[:2], ts=T0 + 1000)
    log.roll(T0 + 2000)
    before = records_of(log)
    second = clean(log, now_ms=T0 + 3000, cleaner_checkpoint=first.new_checkpoint)
    assert second.new_checkpoint == log.active.base_offset > first.new_checkpoint
    after = records_of(log)
    assert after == expected_after_first_clean(before, log.active.base_offset)
    assert {r[1]: r[2] for r in after} == {
        **{k: b"v4-" + k for k in KEYS}, **{k: b"v2-" + k for k in KEYS[:2]}}


def test_active_segment_is_never_touched(tmp_path):
    log = open_log(tmp_path, compact_config())
    write_overwrites(log, 10, KEYS)
    active = log.active
    active_bytes = active.pread(0, active.size)
    assert len(log.segments) > 2 and active.size > 0
    clean(log, now_ms=T0 + DAY, cleaner_checkpoint=0)
    assert log.active is active
    assert active.pread(0, active.size) == active_bytes
    with open(active.log_path, "rb") as f:
        assert f.read() == active_bytes
    # Nothing at all to clean when there is only the active segment.
    log2 = open_log(tmp_path / "one", compact_config(segment_bytes=1 << 20))
    write_overwrites(log2, 3, KEYS)
    assert clean(log2, now_ms=T0, cleaner_checkpoint=0) == CleanResult(0, 0, 0, 0, 0)


def test_reads_across_gaps_return_the_next_surviving_batch(tmp_path):
    log = open_log(tmp_path, compact_config(index_interval_bytes=0))
    write_overwrites(log, 12, KEYS, per_batch=3)
    log.roll(T0 + 5000)
    log.append(kv_batch([(b"tail", b"t")], T0 + 6000), now_ms=T0 + 6000)
    clean(log, now_ms=T0 + 7000, cleaner_checkpoint=0)
    survivors = records_of(log)
    offsets = [r[0] for r in survivors]
    for fetch in range(log.log_start_offset, log.log_end_offset):
        data = log.read(fetch, 1)  # one batch (the first always comes whole)
        first_at_or_after = next(o for o in offsets if o >= fetch)
        (header, records), = decode_batches(data)
        assert header.last_offset >= fetch
        assert first_at_or_after in [r.offset for r in records]
        # An upper bound (HW) serves a batch only once past its last offset -- which a
        # compacted batch keeps even when its last records are gone.
        assert log.read(fetch, 1 << 20, max_offset=header.last_offset + 1)[:header.size] == data
        assert batches_in_range(log.read(fetch, 1 << 20, max_offset=header.last_offset)) < [header.base_offset]
    assert log.read(log.log_end_offset, 1 << 20) == b""
    # ListOffsets by timestamp answers surviving records only.
    for target in range(T0, T0 + 6001, 7):
        found = log.offset_for_timestamp(target)
        expect = next(((o, t) for o, _k, _v, t in survivors if t >= target), None)
        assert (found.offset, found.timestamp) == expect if expect else found is None


def test_segments_are_grouped_within_segment_bytes(tmp_path):
    cfg = compact_config(segment_bytes=800)
    log = open_log(tmp_path, cfg)
    write_overwrites(log, 30, KEYS)
    log.roll(T0 + 1000)
    n_before = len(log.segments)
    before = records_of(log)
    clean(log, now_ms=T0 + 2000, cleaner_checkpoint=0)
    assert len(log.segments) < n_before
    assert all(s.size <= cfg.segment_bytes for s in log.segments)
    assert records_of(log) == expected_after_first_clean(before, log.active.base_offset)
    names = seg_files(tmp_path)
    assert not any(n.endswith((".cleaned", ".swap")) for n in names)
    assert sum(n.endswith(".log") for n in names) == len(log.segments)


def test_cleaned_log_survives_clean_and_unclean_reopen(tmp_path):
    cfg = compact_config()
    log = open_log(tmp_path, cfg)
    write_overwrites(log, 10, KEYS)
    log.roll(T0 + 1000)
    log.append(kv_batch([(KEYS[1], b"new")], T0 + 2000), now_ms=T0 + 2000)
    clean(log, now_ms=T0 + 3000, cleaner_checkpoint=0)
    after, leo = records_of(log), log.log_end_offset
    log.close()
    for clean_shutdown in (True, False):
        log = open_log(tmp_path, cfg, clean_shutdown=clean_shutdown, recovery_point=0)
        assert records_of(log) == after
        assert log.log_end_offset == leo
        log.close()


def test_null_keys_are_dropped(tmp_path):
    log = open_log(tmp_path, compact_config())
    log.append(kv_batch([(None, b"a"), (b"k", b"b"), (None, b"c")], T0), now_ms=T0)
    log.roll(T0 + 1)
    result = clean(log, now_ms=T0 + 2, cleaner_checkpoint=0)
    assert [(r[0], r[1], r[2]) for r in records_of(log)] == [(1, b"k", b"b")]
    assert result.records_removed == 2


def test_segment_left_empty_at_the_end_keeps_its_place(tmp_path):
    """The last non-active segment losing every record becomes an empty segment of its
    own base (a group must end with a segment that kept something, for the loader's swap
    rule): offsets, LEO and reopen all still work, and a later pass merges it."""
    cfg = compact_config(segment_bytes=1 << 20)
    log = open_log(tmp_path, cfg)
    log.append(kv_batch([(b"a", b"1"), (b"b", b"1")], T0), now_ms=T0)
    log.roll(T0)
    log.append(kv_batch([(b"c", b"1")], T0), now_ms=T0)
    log.roll(T0)
    log.append(kv_batch([(None, b"x"), (None, b"y")], T0), now_ms=T0)
    log.roll(T0)
    log.append(kv_batch([(b"e", b"1")], T0), now_ms=T0)
    assert [s.base_offset for s in log.segments] == [0, 2, 3, 5]
    result = clean(log, now_ms=T0, cleaner_checkpoint=0)
    assert result.records_removed == 2
    survivors = [(0, b"a"), (1, b"b"), (2, b"c"), (5, b"e")]
    assert [(r[0], r[1]) for r in records_of(log)] == survivors
    assert [(s.base_offset, s.size == 0) for s in log.segments] == [(0, False), (3, True), (5, False)]
    assert log.read(3, 1 << 20)[:8] == struct.pack(">q", 5)
    log.close()
    log = open_log(tmp_path, cfg, clean_shutdown=False, recovery_point=0)
    assert [(r[0], r[1]) for r in records_of(log)] == survivors
    assert log.log_end_offset == 6
    log.append(kv_batch([(b"f", b"1")], T0), now_ms=T0)
    log.roll(T0 + 1)
    clean(log, now_ms=T0 + 2, cleaner_checkpoint=result.new_checkpoint)
    assert [s.base_offset for s in log.segments] == [0, 7]
    assert [(r[0], r[1]) for r in records_of(log)] == survivors + [(6, b"f")]


# ---------------------------------------------------------------------- tombstones

def test_tombstones_survive_a_pass_and_go_after_delete_retention(tmp_path):
    cfg = compact_config(delete_retention_ms=DAY)
    log = open_log(tmp_path, cfg)
    log.append(kv_batch([(b"gone", b"v1"), (b"kept", b"k1")], T0), now_ms=T0)
    log.append(kv_batch([(b"gone", b"v2")], T0 + 10), now_ms=T0 + 10)
    log.append(kv_batch([(b"other", b"o"), (b"gone", None)], T0 + 20), now_ms=T0 + 20)
    log.roll(T0 + 30)
    log.append(kv_batch([(b"x", b"x")], T0 + 40), now_ms=T0 + 40)
    first_clean_at = T0 + HOUR
    r1 = clean(log, now_ms=first_clean_at, cleaner_checkpoint=0)
    assert r1.records_removed == 2 and r1.tombstones_removed == 0
    assert [(r[0], r[1], r[2]) for r in records_of(log)] == [
        (1, b"kept", b"k1"), (3, b"other", b"o"), (4, b"gone", None), (5, b"x", b"x")]
    # KIP-534: the tombstone's batch now carries the delete horizon.
    (header, records), = [(h, rs) for h, rs in batches_of(log) if any(r.value is None for r in rs)]
    assert header.attributes & DELETE_HORIZON_MASK
    assert header.base_timestamp == first_clean_at + DAY
    assert [(r.offset, r.timestamp) for r in records] == [(3, T0 + 20), (4, T0 + 21)]
    assert header.max_timestamp == T0 + 21
    # Its records' timestamps are intact for ListOffsets too.
    assert tuple(log.offset_for_timestamp(T0 + 21)) == (4, T0 + 21)
    # Still there just before the horizon (the batch is not rewritten again)...
    before_horizon = batches_of(log)
    r2 = clean(log, now_ms=first_clean_at + DAY - 1, cleaner_checkpoint=r1.new_checkpoint)
    assert r2.records_removed == 0
    assert batches_of(log) == before_horizon
    # ... and gone at it.
    r3 = clean(log, now_ms=first_clean_at + DAY, cleaner_checkpoint=r2.new_checkpoint)
    assert r3.tombstones_removed == r3.records_removed == 1
    assert [(r[0], r[1]) for r in records_of(log)] == [(1, b"kept"), (3, b"other"), (5, b"x")]
    # The batch that kept "other" keeps its horizon bit (Kafka keeps it once set).
    assert all(h.attributes & DELETE_HORIZON_MASK for h, rs in batches_of(log) if rs[0].key == b"other")


def test_tombstone_superseded_by_a_later_value_goes_at_once(tmp_path):
    log = open_log(tmp_path, compact_config())
    log.append(kv_batch([(b"k", b"1"), (b"k", None), (b"k", b"2")], T0), now_ms=T0)
    log.roll(T0 + 1)
    result = clean(log, now_ms=T0 + 2, cleaner_checkpoint=0)
    assert [(r[0], r[2]) for r in records_of(log)] == [(2, b"2")]
    assert result.records_removed == 2 and result.tombstones_removed == 1
    # The batch lost its first records: same BaseOffset and LastOffsetDelta, 1 record.
    (header, _), = batches_of(log)
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (0, 2, 1)
    assert not header.attributes & DELETE_HORIZON_MASK


# ---------------------------------------------------------------------- batches

@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.ZSTD, Codec.SNAPPY, Codec.LZ4])
def test_compressed_batches_stay_compressed_with_their_identity(tmp_path, codec):
    log = open_log(tmp_path, compact_config(segment_bytes=2000))
    originals = []
    for r in range(6):
        batch = encode_batch(
            [Record(i, T0 + r * 10 + i, KEYS[i], b"round-%d-" % r + b"x" * 50, [("h", b"1")])
             for i in range(5)],
            compression=codec, producer_id=4242, producer_epoch=3, base_sequence=r * 5)
        info = log.append(batch, leader_epoch=7, now_ms=T0 + r * 10)
        originals.append(info)
    # Rewrite some keys later so the earlier batches lose only some of their records.
    log.append(kv_batch([(KEYS[0], b"z"), (KEYS[1], b"z")], T0 + 100, codec), now_ms=T0 + 100)
    log.roll(T0 + 200)
    before = records_of(log)
    clean(log, now_ms=T0 + 300, cleaner_checkpoint=0)
    assert records_of(log) == expected_after_first_clean(before, log.active.base_offset)
    batches = batches_of(log)
    assert batches and all(h.compression == codec for h, _ in batches)
    last_producer_batch = [(h, rs) for h, rs in batches if h.producer_id == 4242]
    (header, records), = last_producer_batch
    assert header.base_offset == originals[-1].base_offset
    assert header.last_offset == originals[-1].last_offset
    assert (header.producer_epoch, header.base_sequence, header.partition_leader_epoch) == (3, 25, 7)
    assert [r.key for r in records] == KEYS[2:5]
    assert records[0].headers == [("h", b"1")]
    assert all(h.attributes & 0x7 == codec for h, _ in batches)


def test_log_append_time_batches_keep_their_timestamp(tmp_path):
    log = open_log(tmp_path, compact_config(message_timestamp_type="LogAppendTime"))
    log.append(kv_batch([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], 5), now_ms=T0)
    log.append(kv_batch([(b"b", None)], 6), now_ms=T0 + 50)
    log.roll(T0 + 100)
    clean(log, now_ms=T0 + 200, cleaner_checkpoint=0)
    (h1, r1), (h2, r2) = batches_of(log)
    assert h1.timestamp_type == h2.timestamp_type == 1
    assert (h1.max_timestamp, [(r.offset, r.timestamp) for r in r1]) == (T0, [(2, T0)])
    assert h2.attributes & DELETE_HORIZON_MASK and h2.base_timestamp == T0 + 200 + DAY
    assert (h2.max_timestamp, [(r.offset, r.timestamp) for r in r2]) == (T0 + 50, [(3, T0 + 50)])
    assert tuple(log.offset_for_timestamp(T0 + 1)) == (3, T0 + 50)


def test_consumer_offsets_like_binary_records(tmp_path):
    """What the group coordinator will write: binary keys/values (non-UTF-8 bytes),
    many commits per key, then a group's offsets deleted with tombstones."""
    def key(group, topic, partition):
        g, t = group.encode(), topic.encode()
        return struct.pack(">hh", 1, len(g)) + g + struct.pack(">h", len(t)) + t + struct.pack(">i", partition)

    def value(offset):
        return struct.pack(">hqiq", 3, offset, -1, T0) + b"\xff\x00\xfe"

    cfg = compact_config(segment_bytes=4096, delete_retention_ms=HOUR)
    log = open_log(tmp_path, cfg)
    groups = ["g-a", "g-b", "g-c"]
    committed = {}
    now = T0
    for rnd in range(40):
        for g in groups:
            batch = [(key(g, "orders", p), value(rnd * 100 + p)) for p in range(4)]
            log.append(kv_batch(batch, now), now_ms=now)
            committed.update(dict(batch))
            now += 10
    dropped = [key("g-c", "orders", p) for p in range(4)]
    log.append(kv_batch([(k, None) for k in dropped], now), now_ms=now)
    log.roll(now)

    def state():
        loaded = {}
        for _o, k, v, _t in records_of(log):  # what a coordinator load does
            if v is None:
                loaded.pop(k, None)
            else:
                loaded[k] = v
        return loaded

    expected = {k: v for k, v in committed.items() if k not in dropped}
    size_before = log.size
    clean(log, now_ms=now, cleaner_checkpoint=0)
    assert state() == expected
    assert len(records_of(log)) == len(committed)  # one per key; tombstones for g-c
    assert log.size < size_before / 10
    clean(log, now_ms=now + HOUR, cleaner_checkpoint=log.active.base_offset)
    assert state() == expected
    assert len(records_of(log)) == len(expected)  # the tombstones went too
    log.close()
    log = open_log(tmp_path, cfg, clean_shutdown=False, recovery_point=0)
    assert state() == expected


# ---------------------------------------------------------------------- crash safety

class Crash(Exception):
    pass


CRASH_KEYS = [b"crash-key-%02d" % i for i in range(14)]


def _build_crash_log(path, cfg):
    log = open_log(path, cfg)
    write_overwrites(log, 6, CRASH_KEYS, per_batch=3)
    log.append(kv_batch([(CRASH_KEYS[2], None)], T0 + 900), now_ms=T0 + 900)
    log.roll(T0 + 1000)
    log.append(kv_batch([(CRASH_KEYS[0], b"active")], T0 + 1100), now_ms=T0 + 1100)
    return log


def _check_consistent(records, before, after):
    offsets = [r[0] for r in records]
    assert offsets == sorted(set(offsets)), "offsets duplicated or out of order"
    by_offset = {r[0]: r for r in before}
    assert all(by_offset[r[0]] == r for r in records), "a record changed"
    assert {r[0] for r in after} <= set(offsets), "a latest value went missing"


def test_crash_at_every_rename_of_a_pass_recovers(tmp_path, monkeypatch):
    cfg = compact_config(segment_bytes=500, index_interval_bytes=0)
    ref = _build_crash_log(tmp_path / "ref", cfg)
    before = records_of(ref)
    renames = []
    real_rename = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: (renames.append((a, b)), real_rename(a, b)))
    clean(ref, now_ms=T0 + 2000, cleaner_checkpoint=0)
    monkeypatch.setattr(os, "rename", real_rename)
    after = records_of(ref)
    assert len(ref.segments) >= 3 and len(renames) > 10
    # Both phases of the swap happened, several segments at a time.
    assert any(b.endswith(".log.swap") for _a, b in renames)
    assert sum(b.endswith(".log.deleted") for _a, b in renames) > sum(b.endswith(".log.swap") for _a, b in renames)

    for crash_at in range(len(renames)):
        path = tmp_path / f"crash-{crash_at}"
        log = _build_crash_log(path, cfg)
        calls = 0

        def crashing_rename(a, b, crash_at=crash_at):
            nonlocal calls
            if calls == crash_at:
                raise Crash(f"killed before rename #{crash_at}: {os.path.basename(a)}")
            calls += 1
            real_rename(a, b)

        monkeypatch.setattr(os, "rename", crashing_rename)
        with pytest.raises(Crash):
            clean(log, now_ms=T0 + 2000, cleaner_checkpoint=0)
        monkeypatch.setattr(os, "rename", real_rename)
        close_fds(*log.segments)
        log = open_log(path, cfg, clean_shutdown=False, recovery_point=0)
        assert not any(n.endswith((".swap", ".cleaned")) for n in os.listdir(path)), crash_at
        recovered = records_of(log)
        _check_consistent(recovered, before, after)
        assert log.log_end_offset == ref.log_end_offset
        # The checkpoint was not written: the next pass redoes the work, to the same end.
        clean(log, now_ms=T0 + 2000, cleaner_checkpoint=0)
        assert records_of(log) == after, crash_at
        log.close()


def test_leftover_cleaned_files_are_deleted_and_the_old_segments_kept(tmp_path, monkeypatch):
    cfg = compact_config(segment_bytes=500)
    log = _build_crash_log(tmp_path, cfg)
    before = records_of(log)
    from broker.log.segment import LogSegment

    real = LogSegment.change_file_suffixes

    def crash_before_swap(self, old, new):
        if old == ".cleaned":
            raise Crash("killed with the cleaned segment written")
        real(self, old, new)

    monkeypatch.setattr(LogSegment, "change_file_suffixes", crash_before_swap)
    with pytest.raises(Crash):
        clean(log, now_ms=T0 + 2000, cleaner_checkpoint=0)
    monkeypatch.undo()
    assert {n.split(".", 1)[1] for n in os.listdir(tmp_path) if n.endswith(".cleaned")} == {
        "log.cleaned", "index.cleaned", "timeindex.cleaned"}
    close_fds(*log.segments)
    log = open_log(tmp_path, cfg, clean_shutdown=False, recovery_point=0)
    assert not any(n.endswith(".cleaned") for n in os.listdir(tmp_path))
    assert records_of(log) == before


def test_leftover_swap_with_the_old_segments_present_is_completed(tmp_path, monkeypatch):
    cfg = compact_config(segment_bytes=500)
    log = _build_crash_log(tmp_path, cfg)
    before = records_of(log)
    expected = expected_after_first_clean(before, log.active.base_offset)
    from broker.log.segment import LogSegment

    def crash_before_deleting(self):
        raise Crash("killed after the swap rename")

    monkeypatch.setattr(LogSegment, "rename_to_deleted", crash_before_deleting)
    with pytest.raises(Crash):
        clean(log, now_ms=T0 + 2000, cleaner_checkpoint=0)
    monkeypatch.undo()
    names = os.listdir(tmp_path)
    (swap,) = [n for n in names if n.endswith(".log.swap")]
    base = swap[:20]
    assert base + ".log" in names  # the old segment of the same base is still there
    replaced_bases = [s.base_offset for s in log.segments[:-1]]
    close_fds(*log.segments)
    log = open_log(tmp_path, cfg, clean_shutdown=False, recovery_point=0)
    assert not any(n.endswith(".swap") for n in os.listdir(tmp_path))
    recovered = records_of(log)
    _check_consistent(recovered, before, expected)
    # The first group is swapped in: within its range only the latest values remain.
    group_end = min(b for b in replaced_bases[1:] + [log.active.base_offset]
                    if b >= log.segments[1].base_offset)
    assert [r for r in recovered if r[0] < group_end] == [r for r in expected if r[0] < group_end]
    assert log.recovery_report is not None and log.recovery_report.segments_recovered >= 1


def test_orphan_index_swap_files_are_removed(tmp_path):
    cfg = compact_config()
    log = open_log(tmp_path, cfg)
    write_overwrites(log, 3, KEYS)
    before = records_of(log)
    log.close()
    for name in ("00000000000000000000.index.swap", "00000000000000000000.timeindex.swap",
                 "00000000000000000000.log.cleaned"):
        (tmp_path / name).write_bytes(b"\x00" * 24)
    log = open_log(tmp_path, cfg)
    assert not any(n.endswith((".swap", ".cleaned")) for n in os.listdir(tmp_path))
    assert records_of(log) == before


# ---------------------------------------------------------------------- manager, config

def test_manager_respects_the_dirty_ratio_and_persists_the_checkpoint(tmp_path):
    cfg = compact_config(segment_bytes=400, min_cleanable_dirty_ratio=0.5)
    mgr = LogManager(str(tmp_path), cfg)
    mgr.open(T0)
    log = mgr.get_or_create("__consumer_offsets", 7)
    plain = mgr.get_or_create("plain", 0, LogConfig(segment_bytes=400))
    write_overwrites(log, 8, KEYS)
    write_overwrites(plain, 8, KEYS)
    log.roll(T0 + 100)
    plain.roll(T0 + 100)
    assert cleanable_bytes(log, 0)[0] == cleanable_bytes(log, 0)[1] > 0  # all dirty
    results = mgr.clean_compacted(T0 + 200)
    assert [(t, p) for t, p, _ in results] == [("__consumer_offsets", 7)]  # never "plain"
    checkpoint = results[0][2].new_checkpoint
    assert checkpoint == log.active.base_offset
    assert read_checkpoint(str(tmp_path / CLEANER_OFFSET_CHECKPOINT)) == {("__consumer_offsets", 7): checkpoint}
    with open(tmp_path / CLEANER_OFFSET_CHECKPOINT) as f:
        assert f.read() == f"0\n1\n__consumer_offsets 7 {checkpoint}\n"
    # Nothing dirty now: nothing to do.
    assert mgr.clean_compacted(T0 + 300) == []
    # Add dirty segments one at a time: cleaned exactly when dirty/total >= 0.5.
    seen_below = seen_above = False
    for step in range(12):
        log.append(kv_batch([(KEYS[step % 6], b"s%d" % step)] * 1, T0 + 400 + step), now_ms=T0 + 400 + step)
        log.roll(T0 + 400 + step)
        dirty, total = cleanable_bytes(log, mgr.cleaner_checkpoint("__consumer_offsets", 7))
        results = mgr.clean_compacted(T0 + 500 + step)
        if dirty / total >= 0.5:
            seen_above = True
            assert len(results) == 1
            assert mgr.cleaner_checkpoint("__consumer_offsets", 7) == log.active.base_offset
        else:
            seen_below = True
            assert results == []
    assert seen_below and seen_above
    checkpoint = mgr.cleaner_checkpoint("__consumer_offsets", 7)
    mgr.close()
    mgr = LogManager(str(tmp_path), cfg,
                     config_for=lambda topic: cfg if topic != "plain" else LogConfig(segment_bytes=400))
    mgr.open(T0 + 1000)
    assert mgr.cleaner_checkpoint("__consumer_offsets", 7) == checkpoint
    # Deleting the partition forgets its checkpoint.
    mgr.clean_compacted(T0 + 1000)
    mgr.delete_partition("__consumer_offsets", 7)
    assert mgr.cleaner_checkpoint("__consumer_offsets", 7) == 0
    assert read_checkpoint(str(tmp_path / CLEANER_OFFSET_CHECKPOINT)) == {}
    mgr.close()


def test_ratio_threshold_one_waits_for_an_all_dirty_log(tmp_path):
    cfg = compact_config(segment_bytes=400, min_cleanable_dirty_ratio=1.0)
    mgr = LogManager(str(tmp_path), cfg)
    mgr.open(T0)
    log = mgr.get_or_create("t", 0)
    write_overwrites(log, 6, KEYS)
    log.roll(T0)
    assert len(mgr.clean_compacted(T0)) == 1
    write_overwrites(log, 6, KEYS, ts=T0 + 100)
    log.roll(T0 + 200)
    assert mgr.clean_compacted(T0 + 300) == []  # some clean bytes: ratio < 1
    mgr.close()


def test_retention_with_compaction_policies(tmp_path):
    old = T0 - 30 * DAY
    for policy, deletes in (("compact", False), ("compact,delete", True)):
        cfg = compact_config(cleanup_policy=policy, retention_ms=DAY, segment_bytes=400)
        log = open_log(tmp_path / policy.replace(",", "_"), cfg)
        write_overwrites(log, 5, KEYS, ts=old)
        log.roll(old)
        write_overwrites(log, 5, [b"fresh-%d" % i for i in range(6)], ts=T0)
        clean(log, now_ms=T0, cleaner_checkpoint=0)
        n_before = len(log.segments)
        deleted = log.apply_retention(T0 + 1)
        assert bool(deleted) is deletes
        if deletes:
            assert log.log_start_offset > 0
            assert all(r[3] >= T0 for r in records_of(log))
        else:
            assert len(log.segments) == n_before and log.log_start_offset == 0
        # By size, too.
        size_cfg = compact_config(cleanup_policy=policy, retention_bytes=1, segment_bytes=400)
        log2 = open_log(tmp_path / ("size-" + policy.replace(",", "_")), size_cfg)
        write_overwrites(log2, 5, KEYS)
        log2.roll(T0)
        log2.append(kv_batch([(b"k", b"v")], T0), now_ms=T0)
        clean(log2, now_ms=T0, cleaner_checkpoint=0)
        assert bool(log2.apply_retention(T0)) is deletes


def test_config_properties():
    cfg = LogConfig.from_properties({"log.cleaner.delete.retention.ms": "1000",
                                     "log.cleaner.min.cleanable.ratio": "0.25"})
    assert (cfg.delete_retention_ms, cfg.min_cleanable_dirty_ratio) == (1000, 0.25)
    cfg = LogConfig.from_properties({"delete.retention.ms": 5, "min.cleanable.dirty.ratio": "0.9",
                                     "cleanup.policy": "compact,delete"}, base=cfg)
    assert (cfg.delete_retention_ms, cfg.min_cleanable_dirty_ratio) == (5, 0.9)
    assert cfg.compacts and cfg.deletes
    assert LogConfig().delete_retention_ms == 86_400_000
    assert LogConfig().min_cleanable_dirty_ratio == 0.5
    assert not LogConfig().compacts
    with pytest.raises(ValueError):
        LogConfig(delete_retention_ms=-1)
    with pytest.raises(ValueError):
        LogConfig(min_cleanable_dirty_ratio=1.5)


@pytest.mark.parametrize("cut", ["torn", "magic"])
def test_a_damaged_inactive_segment_fails_the_pass_and_changes_nothing(tmp_path, cut):
    log = open_log(tmp_path, compact_config())
    write_overwrites(log, 4, KEYS)
    assert len(log.segments) > 2
    victim = log.segments[1]
    with open(victim.log_path, "r+b") as f:
        if cut == "torn":
            f.truncate(victim.size - 5)
        else:
            f.seek(16)  # the first batch's magic
            f.write(b"\x07")
    before = seg_files(tmp_path)
    with pytest.raises(CorruptSegmentError, match="at 0" if cut == "magic" else "incomplete"):
        clean(log, now_ms=T0, cleaner_checkpoint=0)
    assert seg_files(tmp_path) == before  # the group being written was discarded
