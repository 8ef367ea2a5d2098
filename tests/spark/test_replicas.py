"""Several brokers' data directories read as one cluster: each partition's log comes from one
replica, the one whose log reaches furthest, so no record is counted once per replica. The
replicas are copies of conftest's real data directory, one of them cut back as a lagging
follower's would be."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from spark_jobs import tables
from spark_jobs.segments import find_segments, log_end_offset
from tests.spark.conftest import MULTI_PARTITIONS, MULTI_TOPIC


def _cut_to_first_batch(partition_dir: Path) -> None:
    """A follower far behind its leader: its log holds only the first batch."""
    first, *later = find_segments(partition_dir)
    for s in later:
        os.unlink(s.path)
    # the first batch's length: its 8-byte offset, then the 4-byte BatchLength
    with open(first.path, "rb") as f:
        head = f.read(12)
    os.truncate(first.path, 12 + int.from_bytes(head[8:12], "big"))


@pytest.fixture(scope="module")
def replicas(broker_data, tmp_path_factory) -> dict[str, Path]:
    """b1 holds every partition in full; b2 holds partition 0 behind and the others in full;
    b3 holds only partition 0, in full."""
    base = tmp_path_factory.mktemp("replicas")
    source = broker_data.data_dir
    layout = {"b1": range(MULTI_PARTITIONS), "b2": range(MULTI_PARTITIONS), "b3": [0]}
    dirs = {}
    for name, partitions in layout.items():
        dirs[name] = base / name
        for p in partitions:
            shutil.copytree(source / f"{MULTI_TOPIC}-{p}", dirs[name] / f"{MULTI_TOPIC}-{p}")
    _cut_to_first_batch(dirs["b2"] / f"{MULTI_TOPIC}-0")
    return dirs


def test_each_partition_is_read_from_the_replica_that_reaches_furthest(broker_data,
                                                                        replicas):
    full = find_segments(broker_data.data_dir / f"{MULTI_TOPIC}-0")
    behind = find_segments(replicas["b2"] / f"{MULTI_TOPIC}-0")
    assert log_end_offset(full) == len(broker_data.of(MULTI_TOPIC, 0))
    assert 0 < log_end_offset(behind) < log_end_offset(full)

    def owners(dirs):
        return {(s.topic, s.partition): Path(s.path).parent.parent.name
                for s in find_segments([str(d) for d in dirs], [MULTI_TOPIC])}
    b1, b2, b3 = replicas["b1"], replicas["b2"], replicas["b3"]
    # partition 0: b2's copy is behind whatever the order; on a tie the first named wins
    assert owners([b2, b3, b1]) == {(MULTI_TOPIC, 0): "b3", (MULTI_TOPIC, 1): "b2",
                                    (MULTI_TOPIC, 2): "b2"}
    assert owners([b2, b1]) == {(MULTI_TOPIC, p): "b1" if p == 0 else "b2"
                                for p in range(MULTI_PARTITIONS)}
    # one partition's segments are one replica's, in offset order
    picked = find_segments([b2, b1], [MULTI_TOPIC], [0])
    assert [s.base_offset for s in picked] == [s.base_offset for s in full]


@pytest.mark.parametrize("driver", [True, False], ids=["in the driver", "data source"])
def test_the_cluster_counts_each_record_once(spark, broker_data, replicas, monkeypatch,
                                             driver):
    if not driver:
        monkeypatch.setattr(tables, "LOCAL_READ_BYTES", {"batch": 0, "record": 0})
    dirs = [str(replicas[n]) for n in ("b2", "b3", "b1")]
    counts: dict[int, int] = {}
    # summed here: a shuffle would cost this tiny test seconds
    for r in tables.batches(spark, dirs).select("partition", "record_count").collect():
        counts[r["partition"]] = counts.get(r["partition"], 0) + r["record_count"]
    assert counts == {p: len(broker_data.of(MULTI_TOPIC, p)) for p in range(MULTI_PARTITIONS)}


def test_the_data_source_refuses_a_data_dirs_option_that_is_no_list(spark):
    with pytest.raises(Exception, match="JSON list of paths"):
        spark.read.format(tables.DATA_SOURCE).option("data_dirs", '"one"').load().count()
