"""bench/chaos/replicas.py: replicas written by the broker's own log code (LogManager,
PartitionLog) read back from their segment files and compared offset by offset."""

from __future__ import annotations

from pathlib import Path

from bench.chaos.replicas import compare, compare_topic, find_partition_dir, read_replica
from broker.log import LogConfig, LogManager
from protocol.codecs import Codec
from protocol.records import Record, encode_batch

TOPIC = "orders"

# (leader epoch, values, codec) per batch: 9 records over several small segments
BATCHES: list[tuple[int, list[bytes], int]] = [
    (0, [b"0-0-0", b"0-0-1"], Codec.NONE),
    (0, [b"0-0-2", b"0-0-3", b"0-0-4"], Codec.GZIP),
    (1, [b"1-0-0", b"\xff\xfe"], Codec.ZSTD),
    (2, [b"0-0-5", b"1-0-1"], Codec.NONE),
]


def batch(values: list[bytes], codec: int = Codec.NONE, **kwargs) -> bytes:
    return encode_batch([Record(i, 1_000 + i, None, v, []) for i, v in enumerate(values)],
                        compression=codec, **kwargs)


def write_replica(data_dir: Path, partition: int = 0, batches=BATCHES, *,
                  marker_after: int | None = None) -> Path:
    """One replica as a broker writes it: a LogManager over `data_dir` (small segments,
    so that the log rolls), batches appended as leader with their epochs; optionally a
    transaction marker (a control batch) after batch number `marker_after`."""
    manager = LogManager(str(data_dir), LogConfig(segment_bytes=200))
    manager.open(now_ms=0)
    log = manager.get_or_create(TOPIC, partition)
    for i, (epoch, values, codec) in enumerate(batches):
        log.append(batch(values, codec), leader_epoch=epoch, now_ms=0)
        if marker_after == i:
            marker = encode_batch([Record(0, 1_000, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])],
                                  is_control=True, is_transactional=True, producer_id=7,
                                  producer_epoch=0)
            log.append(marker, leader_epoch=epoch, now_ms=0, origin="coordinator")
    manager.close()
    found = find_partition_dir(data_dir, TOPIC, partition)
    assert found is not None
    return found


def test_read_replica_reads_every_segment_in_offset_order(tmp_path):
    path = write_replica(tmp_path / "data", marker_after=1)
    assert len(list(path.glob("*.log"))) > 1  # the log rolled
    assert read_replica(path) == [
        (0, 0, "0-0-0"), (1, 0, "0-0-1"),
        (2, 0, "0-0-2"), (3, 0, "0-0-3"), (4, 0, "0-0-4"),  # gzip
        # offset 5 is the transaction marker: a control batch, skipped
        (6, 1, "1-0-0"), (7, 1, "fffe"),                     # zstd; not UTF-8: hex
        (8, 2, "0-0-5"), (9, 2, "1-0-1"),
    ]


def test_a_partial_batch_at_the_end_ends_the_replica(tmp_path):
    path = write_replica(tmp_path / "data")
    rows = read_replica(path)
    last = sorted(path.glob("*.log"))[-1]
    with open(last, "ab") as f:  # a torn write: half of one more batch
        f.write(batch([b"0-0-6", b"0-0-7"])[:40])
    assert read_replica(path) == rows


def test_a_corrupt_batch_shows_at_its_offsets(tmp_path):
    good = write_replica(tmp_path / "node-1" / "data")
    bad = write_replica(tmp_path / "node-2" / "data")
    first = sorted(bad.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF  # the last byte of the first segment's last record: CRC mismatch
    first.write_bytes(bytes(data))
    rows = read_replica(bad)
    corrupt = [r for r in rows if r[2].startswith("<corrupt")]
    assert corrupt and len(rows) == len(read_replica(good))
    problems = compare({1: read_replica(good), 2: rows})
    assert len(problems) == 1 and problems[0].startswith(
        f"nodes 1 and 2 first differ at offset {corrupt[0][0]}: ")


def test_identical_replicas_compare_clean(tmp_path):
    dirs = {n: tmp_path / f"node-{n}" / "data" for n in (1, 2, 3)}
    for n, d in dirs.items():
        write_replica(d, 0, marker_after=2)
        if n != 3:  # partition 1 has two replicas, on nodes 1 and 2
            write_replica(d, 1)
    # node directories (data one level down) and data directories themselves both work
    assert compare_topic({1: tmp_path / "node-1", 2: dirs[2], 3: dirs[3]}, TOPIC, 2) == {
        0: [], 1: []}
    result = compare_topic(dirs, TOPIC, 3)
    assert result[2] == ["no replica of orders-2 in any data directory"]


def test_a_different_value_is_reported_at_its_offset(tmp_path):
    dirs = {n: tmp_path / f"node-{n}" for n in (1, 2, 3)}
    write_replica(dirs[1])
    write_replica(dirs[2])
    changed = [BATCHES[0], (0, [b"0-0-2", b"0-0-X", b"0-0-4"], Codec.GZIP), *BATCHES[2:]]
    write_replica(dirs[3], batches=changed)
    assert compare_topic(dirs, TOPIC, 1) == {0: [
        "nodes 1 and 3 first differ at offset 3: node 1 has '0-0-3' (epoch 0), node 3 has "
        "'0-0-X' (epoch 0) (1 of offsets 0..8 differ)",
        "nodes 2 and 3 first differ at offset 3: node 2 has '0-0-3' (epoch 0), node 3 has "
        "'0-0-X' (epoch 0) (1 of offsets 0..8 differ)",
    ]}


def test_a_different_leader_epoch_is_reported(tmp_path):
    dirs = {n: tmp_path / f"node-{n}" for n in (1, 2)}
    write_replica(dirs[1])
    write_replica(dirs[2], batches=[*BATCHES[:3], (3, BATCHES[3][1], Codec.NONE)])
    assert compare_topic(dirs, TOPIC, 1) == {0: [
        "nodes 1 and 2 first differ at offset 7: node 1 has '0-0-5' (epoch 2), node 2 has "
        "'0-0-5' (epoch 3) (2 of offsets 0..8 differ)"]}


def test_different_log_end_offsets_are_reported():
    leader = [(0, 0, "a"), (1, 0, "b"), (2, 1, "c")]
    behind = leader[:2]
    diverged = [(0, 0, "a"), (1, 0, "b"), (2, 2, "d"), (3, 2, "e")]
    assert compare({1: leader, 2: leader}) == []
    assert compare({1: leader, 2: behind}) == ["log end offsets differ: node 1: 3, node 2: 2"]
    assert compare({1: leader, 2: behind, 3: diverged}) == [
        "log end offsets differ: node 1: 3, node 2: 2, node 3: 4",
        "nodes 1 and 3 first differ at offset 2: node 1 has 'c' (epoch 1), node 3 has "
        "'d' (epoch 2) (1 of offsets 0..2 differ)",
    ]
    # a hole inside one replica counts as a difference
    assert compare({1: leader, 2: [leader[0], leader[2]]}) == [
        "nodes 1 and 2 first differ at offset 1: node 1 has 'b' (epoch 0), node 2 has "
        "nothing (1 of offsets 0..2 differ)"]
    assert compare({1: [], 2: []}) == []
