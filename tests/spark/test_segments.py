"""spark_jobs.segments without Spark, on segment files our broker wrote."""

from __future__ import annotations

import shutil
import struct

import pytest

from protocol.names import parse_partition_dir
from spark_jobs.segments import (BATCH_COLUMNS, RECORD_COLUMNS, ByteRange, find_segments,
                                 iter_column_chunks, iter_rows, segment_ranges, split_segment)
from tests.spark.conftest import CODECS, LOG_APPEND_TOPIC, MULTI_PARTITIONS, MULTI_TOPIC


def whole(seg) -> ByteRange:
    return ByteRange(seg.topic, seg.partition, seg.path, 0, seg.size)


def rows_of(data_dir, topic, partition=None, level="record", split_bytes=32 << 20):
    segs = find_segments(data_dir, [topic], None if partition is None else [partition])
    return [row for r in segment_ranges(segs, split_bytes) for row in iter_rows(r, level)]


def as_produced(rows):
    return [{k: row[k] for k in ("topic", "partition", "offset", "timestamp", "key", "value",
                                 "headers")} for row in rows]


def copy_segment(seg, tmp_path):
    """A copy under a directory of the same <topic>-<partition> name, to damage."""
    d = tmp_path / f"{seg.topic}-{seg.partition}"
    d.mkdir()
    dst = d / "00000000000000000000.log"
    shutil.copyfile(seg.path, dst)
    return find_segments(dst)[0]


@pytest.mark.parametrize("name, expected", [
    ("orders-0", ("orders", 0)), ("orders-eu-12", ("orders-eu", 12)),
    ("__consumer_offsets-49", ("__consumer_offsets", 49)),
    ("events", None), ("orders-", None), ("-3", None), ("orders-x", None),
])
def test_log_dir_names(name, expected):
    assert parse_partition_dir(name) == expected


def test_find_segments_in_a_data_dir(broker_data):
    found = find_segments(broker_data.data_dir)
    pairs = {(s.topic, s.partition) for s in found}
    produced = {(m["topic"], m["partition"]) for m in broker_data.produced}
    assert produced <= pairs
    assert {t for t, _ in pairs - produced} == {"__consumer_offsets"}
    assert all("events" not in s.path.split("/")[-2] for s in found)
    # small segments rolled: several files per partition, in offset order
    multi = [s for s in found if s.topic == MULTI_TOPIC and s.partition == 0]
    assert len(multi) > 1
    assert [s.base_offset for s in multi] == sorted(s.base_offset for s in multi)


def test_find_segments_narrows_and_accepts_a_partition_dir_or_a_file(broker_data):
    one = find_segments(broker_data.data_dir, [MULTI_TOPIC], [1])
    assert {(s.topic, s.partition) for s in one} == {(MULTI_TOPIC, 1)}
    from_dir = find_segments(broker_data.data_dir / f"{MULTI_TOPIC}-1")
    assert from_dir == one
    assert find_segments(one[0].path) == [one[0]]
    with pytest.raises(FileNotFoundError):
        find_segments(broker_data.data_dir / "missing")


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_reads_back_what_was_produced(broker_data, codec):
    topic = f"codec-{codec}"
    rows = rows_of(broker_data.data_dir, topic)
    assert as_produced(rows) == broker_data.of(topic)
    assert {r["codec"] for r in rows} == {codec}
    assert all(r["crc_valid"] and r["error"] is None for r in rows)
    assert {r["timestamp_type"] for r in rows} == {"CreateTime"}
    assert all(list(r) == list(RECORD_COLUMNS) for r in rows)
    # several batches, each row placed in its batch
    assert len({r["batch_position"] for r in rows}) > 1
    assert all(r["base_offset"] <= r["offset"] <= r["last_offset"] for r in rows)


def test_log_append_time(broker_data):
    rows = rows_of(broker_data.data_dir, LOG_APPEND_TOPIC)
    assert as_produced(rows) == broker_data.of(LOG_APPEND_TOPIC)
    assert {r["timestamp_type"] for r in rows} == {"LogAppendTime"}
    assert all(r["timestamp"] == r["max_timestamp"] for r in rows)


def test_batch_level_matches_the_records(broker_data):
    for p in range(MULTI_PARTITIONS):
        records = rows_of(broker_data.data_dir, MULTI_TOPIC, p)
        batches = rows_of(broker_data.data_dir, MULTI_TOPIC, p, level="batch")
        assert all(list(b) == list(BATCH_COLUMNS) for b in batches)
        assert sum(b["record_count"] for b in batches) == len(records) == len(
            broker_data.of(MULTI_TOPIC, p))
        by_batch = {}
        for r in records:
            by_batch.setdefault((r["segment"], r["batch_position"]), []).append(r)
        assert len(by_batch) == len(batches)
        for b in batches:
            members = by_batch[(b["segment"], b["batch_position"])]
            assert [b["base_offset"], b["last_offset"]] == [members[0]["offset"],
                                                          members[-1]["offset"]]
            assert b["first_timestamp"] == members[0]["timestamp"]
            assert b["max_timestamp"] == max(m["timestamp"] for m in members)
            assert b["batch_size"] == members[0]["batch_size"] and b["crc_valid"]


def test_splitting_gives_the_same_rows_as_one_range(broker_data):
    seg = find_segments(broker_data.data_dir, ["codec-none"])[0]
    one = list(iter_rows(whole(seg)))
    ranges = split_segment(seg.path, 300)
    assert len(ranges) > 2
    # contiguous, covering the file, each starting on a batch
    assert ranges[0][0] == 0 and ranges[-1][1] == seg.size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert {start for start, _ in ranges} <= {r["batch_position"] for r in one}
    pieces = [row for start, end in ranges
              for row in iter_rows(ByteRange(seg.topic, seg.partition, seg.path, start, end))]
    assert pieces == one


def test_a_torn_tail_ends_the_range_silently(broker_data, tmp_path):
    seg = copy_segment(find_segments(broker_data.data_dir, ["codec-gzip"])[0], tmp_path)
    rows = list(iter_rows(whole(seg)))
    last_position = rows[-1]["batch_position"]
    with open(seg.path, "r+b") as f:
        f.truncate(last_position + 30)  # mid-header of the last batch
    torn = find_segments(seg.path)[0]
    assert list(iter_rows(whole(torn))) == [r for r in rows if r["batch_position"] < last_position]
    with open(seg.path, "r+b") as f:
        f.truncate(last_position + rows[-1]["batch_size"] - 5)  # mid-body
    torn = find_segments(seg.path)[0]
    assert list(iter_rows(whole(torn))) == [r for r in rows if r["batch_position"] < last_position]
    assert split_segment(torn.path, 1)[-1][1] == torn.size


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_corrupt_batch_gives_one_row_and_the_rest_still_reads(broker_data, tmp_path, codec):
    seg = copy_segment(find_segments(broker_data.data_dir, [f"codec-{codec}"])[0], tmp_path)
    rows = list(iter_rows(whole(seg)))
    positions = sorted({r["batch_position"] for r in rows})
    bad = positions[1]
    with open(seg.path, "r+b") as f:
        f.seek(bad + 70)  # inside the records, covered by the CRC
        byte = f.read(1)
        f.seek(bad + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    damaged = list(iter_rows(whole(seg)))
    bad_rows = [r for r in damaged if r["batch_position"] == bad]
    assert len(bad_rows) == 1
    (row,) = bad_rows
    assert row["crc_valid"] is False and row["key"] is None and row["value"] is None
    assert row["offset"] == row["base_offset"] == next(
        r["offset"] for r in rows if r["batch_position"] == bad)
    assert [r for r in damaged if r["batch_position"] != bad] == [
        r for r in rows if r["batch_position"] != bad]
    batch_rows = list(iter_rows(whole(seg), "batch"))
    assert [b["crc_valid"] for b in batch_rows] == [p != bad for p in positions]


def test_an_unwalkable_length_gives_one_error_row_and_stops(broker_data, tmp_path):
    seg = copy_segment(find_segments(broker_data.data_dir, ["codec-none"])[0], tmp_path)
    rows = list(iter_rows(whole(seg)))
    positions = sorted({r["batch_position"] for r in rows})
    bad = positions[2]
    with open(seg.path, "r+b") as f:
        f.seek(bad + 8)
        f.write(struct.pack(">i", 7))
    damaged = list(iter_rows(whole(seg)))
    assert damaged[:-1] == [r for r in rows if r["batch_position"] < bad]
    last = damaged[-1]
    assert last["batch_position"] == bad and last["error"] and "below" in last["error"]
    assert last["crc_valid"] is False and last["batch_size"] is None


def test_a_bad_magic_with_a_sane_length_is_skipped(broker_data, tmp_path):
    seg = copy_segment(find_segments(broker_data.data_dir, ["codec-lz4"])[0], tmp_path)
    rows = list(iter_rows(whole(seg)))
    bad = sorted({r["batch_position"] for r in rows})[1]
    with open(seg.path, "r+b") as f:
        f.seek(bad + 16)
        f.write(b"\x07")
    damaged = list(iter_rows(whole(seg)))
    (row,) = [r for r in damaged if r["batch_position"] == bad]
    assert "magic" in row["error"] and row["value"] is None
    assert [r for r in damaged if r["batch_position"] != bad] == [
        r for r in rows if r["batch_position"] != bad]


def test_a_negative_last_offset_delta_is_reported_and_stepped_over(broker_data, tmp_path):
    seg = copy_segment(find_segments(broker_data.data_dir, ["codec-snappy"])[0], tmp_path)
    rows = list(iter_rows(whole(seg)))
    bad = sorted({r["batch_position"] for r in rows})[1]
    with open(seg.path, "r+b") as f:
        f.seek(bad + 23)
        f.write(struct.pack(">i", -1))
    damaged = list(iter_rows(whole(seg)))
    (row,) = [r for r in damaged if r["batch_position"] == bad]
    assert "lastOffsetDelta -1" in row["error"] and row["value"] is None
    assert [r for r in damaged if r["batch_position"] != bad] == [
        r for r in rows if r["batch_position"] != bad]


def test_a_tail_shorter_than_a_header_ends_the_range_silently(broker_data, tmp_path):
    # Like dump-log and log recovery: fewer than 61 bytes cannot hold a batch, whatever
    # their BatchLength field says.
    seg = copy_segment(find_segments(broker_data.data_dir, ["codec-none"])[0], tmp_path)
    rows = list(iter_rows(whole(seg)))
    with open(seg.path, "ab") as f:
        f.write(b"\0" * 20)
    grown = find_segments(seg.path)[0]
    assert list(iter_rows(whole(grown))) == rows
    assert list(iter_rows(whole(grown), "batch")) == list(iter_rows(whole(seg), "batch"))


def _chunk_rows(r, level, columns):
    out = []
    for chunk in iter_column_chunks(r, level, 8, columns):
        cols = chunk.columns()
        out += [dict(zip(cols, values)) for values in zip(*cols.values())]
    return out


@pytest.mark.parametrize("level, columns", [
    ("record", ("key", "error", "partition", "is_control")),
    ("record", ("headers", "offset", "segment")),
    ("batch", ("max_timestamp", "topic", "crc_valid")),
])
def test_a_subset_of_columns_gives_those_columns_of_the_same_rows(
        broker_data, tmp_path, level, columns):
    seg = copy_segment(find_segments(broker_data.data_dir, ["codec-zstd"])[0], tmp_path)
    full = list(iter_rows(whole(seg), level))
    bad = sorted({r["batch_position"] for r in full})[1]
    with open(seg.path, "r+b") as f:  # a batch that does not decode gives its one row too
        f.seek(bad + 70)
        byte = f.read(1)
        f.seek(bad + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    full = list(iter_rows(whole(seg), level))
    order = RECORD_COLUMNS if level == "record" else BATCH_COLUMNS
    kept = [n for n in order if n in columns]  # the level's order, whatever was asked
    assert _chunk_rows(whole(seg), level, columns) == [{n: r[n] for n in kept} for r in full]
    assert any(r["crc_valid"] is False for r in full)
    with pytest.raises(ValueError, match="no column"):
        _chunk_rows(whole(seg), level, ("nonsense",))


def test_aborted_txns_are_read_from_each_segments_txnindex(tmp_path):
    from protocol.aborted_txn import AbortedTxn, encode_aborted_txns
    from spark_jobs.segments import iter_aborted_txns

    first, second = AbortedTxn(7, 0, 4, 5), AbortedTxn(9, 6, 11, 12)
    partition = tmp_path / "t-0"
    partition.mkdir()
    for base in (0, 10):
        (partition / f"{base:020d}.log").write_bytes(b"")
    (partition / f"{0:020d}.txnindex").write_bytes(first.encode())
    # a torn last entry (a crash mid-append) is left out
    (partition / f"{10:020d}.txnindex").write_bytes(second.encode() + b"\0" * 5)
    # an index of a newer entry version is skipped whole: its fields may mean otherwise
    newer = tmp_path / "u-1"
    newer.mkdir()
    (newer / f"{0:020d}.log").write_bytes(b"")
    (newer / f"{0:020d}.txnindex").write_bytes(
        encode_aborted_txns([AbortedTxn(1, 0, 1, 2, version=1)]))
    got = [(r["topic"], r["partition"], r["producer_id"], r["first_offset"], r["last_offset"],
            r["last_stable_offset"]) for r in iter_aborted_txns(find_segments(tmp_path))]
    assert got == [("t", 0, 7, 0, 4, 5), ("t", 0, 9, 6, 11, 12)]
