"""Every replica of a topic's partitions, read from the brokers' data directories after a
chaos run, and compared offset by offset (what Kafka's ReplicaVerificationTool does over
the network, done on the files).

Owns: reading one partition directory's segments into (offset, partition leader epoch,
value) rows, and the comparison of the replicas of one partition. Segments are read with
broker/log/file_records.py (the file's size taken once, whole batches only) and records
decoded with protocol.records.decode_batch, which decompresses any codec. Control batches
(transaction markers) hold no data and are skipped; a partial batch at the end of a
segment (a torn or unfinished write) ends the replica, as log recovery would cut it off.

After healing, the replicas of a partition should hold the same records with the same
leader epochs up to the same log end offset; a replica that diverges kept or took records
the leader's log does not have (an unclean truncation, a lost fetch, a corrupt write).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from itertools import combinations
from pathlib import Path

from broker.log.file_records import Batch, SegmentPathError, read_segment, segment_files
from protocol.names import partition_dir_name
from protocol.records import RecordError, decode_batch

__all__ = ["compare", "compare_topic", "find_partition_dir", "read_replica"]

Row = tuple[int, int, str]  # (offset, partition leader epoch, value)


def _value_text(value: bytes | None) -> str:
    """A record's value as text: UTF-8 when it is, hex otherwise; a null value
    (a tombstone) as "<null>"."""
    if value is None:
        return "<null>"
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.hex()


def read_replica(partition_dir: Path) -> list[Row]:
    """(offset, partition leader epoch, value) of every data record of every segment of
    `partition_dir`, in offset order. A batch whose CRC does not match (or that does not
    decode) stands as one "<corrupt: ...>" row per offset it claims, so that the
    comparison points at it; a partial or unwalkable tail ends the read."""
    rows: list[Row] = []
    try:
        paths = segment_files(partition_dir)
    except SegmentPathError:  # a directory without segments (created, never written): empty
        return rows
    for path in paths:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            for item in read_segment(f, size):
                if not isinstance(item, Batch):
                    # a Tail: a torn write is cut off by recovery; a corrupt header cannot
                    # be walked past. Either way nothing after it is part of the log.
                    return rows
                header = item.header
                if header.is_control:
                    continue
                epoch = header.partition_leader_epoch
                try:
                    _, records = decode_batch(item.data)
                except RecordError as e:
                    bad = f"<corrupt: {e}>"
                    rows.extend((o, epoch, bad)
                                for o in range(header.base_offset, header.last_offset + 1))
                    continue
                rows.extend((r.offset, epoch, _value_text(r.value)) for r in records)
    return rows


def _show(row: Row | None) -> str:
    if row is None:
        return "nothing"
    return f"{row[2]!r} (epoch {row[1]})"


def compare(replicas: Mapping[int, list[Row]]) -> list[str]:
    """The divergences between the replicas of one partition (node id -> read_replica's
    rows): differing log end offsets, then for each pair of nodes the first offset where
    they differ (value, epoch, or a record only one of them has) within the range both
    hold, and how many offsets differ there. Empty when all agree."""
    out: list[str] = []
    by_offset: dict[int, dict[int, Row]] = {}
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    for node, rows in replicas.items():
        by_offset[node] = {row[0]: row for row in rows}
        start[node] = min(by_offset[node], default=0)
        # the log end offset: one past the last record (0 for an empty replica)
        end[node] = max(by_offset[node], default=-1) + 1
    if len(set(end.values())) > 1:
        out.append("log end offsets differ: " + ", ".join(
            f"node {node}: {end[node]}" for node in sorted(end)))
    for a, b in combinations(sorted(replicas), 2):
        # compare where both logs extend: a shorter log is reported by its end offset, a
        # later log start (retention) is not a divergence
        lo, hi = max(start[a], start[b]), min(end[a], end[b])
        rows_a, rows_b = by_offset[a], by_offset[b]
        first: int | None = None
        differing = 0
        for offset in range(lo, hi):
            ra, rb = rows_a.get(offset), rows_b.get(offset)
            if ra != rb:
                differing += 1
                if first is None:
                    first = offset
        if first is not None:
            out.append(f"nodes {a} and {b} first differ at offset {first}: node {a} has "
                       f"{_show(rows_a.get(first))}, node {b} has {_show(rows_b.get(first))}"
                       f" ({differing} of offsets {lo}..{hi - 1} differ)")
    return out


def find_partition_dir(data_dir: Path, topic: str, partition: int) -> Path | None:
    """The directory of a partition's log under a broker's data directory: right in it
    (broker/log/manager.py's layout, log.dirs itself), or one level down, for a node
    directory that holds its log.dirs in a subdirectory (bench/cluster.py's node-I/data).
    None when this node holds no replica."""
    name = partition_dir_name(topic, partition)
    direct = Path(data_dir) / name
    if direct.is_dir():
        return direct
    try:
        children = sorted(Path(data_dir).iterdir())
    except OSError:
        return None
    for child in children:
        candidate = child / name
        if child.is_dir() and candidate.is_dir():
            return candidate
    return None


def compare_topic(data_dirs: Mapping[int, Path], topic: str, partitions: int
                  ) -> dict[int, list[str]]:
    """partition -> compare() of its replicas on every node (node id -> data directory)
    that has a directory for it. A partition no node has is reported as such; a node
    without the directory is taken not to be a replica of it."""
    out: dict[int, list[str]] = {}
    for p in range(partitions):
        replicas: dict[int, list[Row]] = {}
        for node, data_dir in sorted(data_dirs.items()):
            found = find_partition_dir(data_dir, topic, p)
            if found is not None:
                replicas[node] = read_replica(found)
        if not replicas:
            out[p] = [f"no replica of {partition_dir_name(topic, p)} in any data directory"]
        else:
            out[p] = compare(replicas)
    return out
