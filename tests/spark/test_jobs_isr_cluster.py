"""The ISR job over a three-broker cluster's event logs, written by broker.events.EventLog
into one data directory per broker (plus a copy of one, as if collected twice), and
`minibroker analyze` given all of them: the merged events, the under-replicated intervals
and their recovery times, leader changes counted once per leader epoch, offline time, and
the timeline chart in report.html."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from broker.events import EventLog
from spark_jobs.jobs.isr import (broker_health, isr_timeline, leader_changes, partition_health,
                                 under_replicated_intervals)
from spark_jobs.report import collect
from spark_jobs.tables import events as events_table
from tools.analyze import main

T0 = 1_700_000_000_000


class Clock:
    """EventLog's clock (seconds), set to whole milliseconds; the half millisecond keeps
    int(seconds * 1000) from rounding down to the one before."""

    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> float:
        return (self.ms + 0.5) / 1000


def _isr(topic, partition, leader, kind, old, new, hw=0):
    return ("isr_change", {"topic": topic, "partition": partition, "leader_id": leader,
                           "kind": kind, "old_isr": old, "new_isr": new, "high_watermark": hw,
                           "reason": "follower caught up" if kind == "expand" else "lagging"})


def _leader(topic, partition, old, new, epoch, reason="election"):
    return ("leader_change", {"topic": topic, "partition": partition, "old_leader": old,
                              "new_leader": new, "leader_epoch": epoch, "reason": reason})


# (ms after T0, broker that writes it, (type, fields)). Broker 1 is the active controller
# (topic_create, leader_change, fencing); each ISR change is written by the partition's
# leader. "legacy" has no topic_create: its replication factor is its largest ISR (2).
HISTORY = [
    (0, 1, ("broker_start", {"listener": "PLAINTEXT://:9092", "data_dir": "d1",
                             "cluster_id": "c", "clean_shutdown": True, "version": "t"})),
    (0, 1, ("topic_create", {"topic": "orders", "topic_id": "x", "partitions": 2,
                             "replication_factor": 3, "configs": "", "auto": False})),
    (0, 1, _leader("orders", 0, -1, 1, 0)),
    (0, 1, _leader("orders", 1, -1, 2, 0)),
    (1000, 1, _isr("orders", 0, 1, "shrink", [1, 2, 3], [1, 2])),
    (2000, 1, ("broker_fenced", {"broker_id": 3, "broker_epoch": 7})),
    (2500, 1, _isr("legacy", 0, 1, "shrink", [1, 2], [1])),
    (3000, 2, _isr("orders", 1, 2, "shrink", [1, 2, 3], [1, 2])),
    (3500, 1, _isr("legacy", 0, 1, "expand", [1], [1, 2])),
    (4000, 1, _isr("orders", 0, 1, "shrink", [1, 2], [1])),
    (5000, 1, ("broker_unfenced", {"broker_id": 3, "broker_epoch": 7})),
    (6000, 1, _isr("orders", 0, 1, "expand", [1], [1, 3])),       # still short of 3
    (7000, 2, _isr("orders", 1, 2, "expand", [1, 2], [1, 2, 3])),
    (9000, 1, _isr("orders", 0, 1, "expand", [1, 3], [1, 2, 3])),  # back to 3: recovered
    (10000, 1, _leader("orders", 0, 1, 2, 1, "controlled shutdown")),
    # the same leadership as written by a second controller node: counted once
    (10005, 2, _leader("orders", 0, 1, 2, 1, "controlled shutdown")),
    (11000, 2, _isr("orders", 0, 2, "shrink", [1, 2, 3], [2, 3])),  # open at the end
    (12000, 1, _leader("orders", 1, 2, -1, 1, "broker 2 fenced")),
    (14000, 1, _leader("orders", 1, -1, 3, 2, "broker 2 unfenced")),
    (15000, 3, ("broker_stop", {"reason": "signal", "uptime_ms": 15000})),
]


@pytest.fixture(scope="module")
def cluster_dirs(tmp_path_factory) -> list[Path]:
    base = tmp_path_factory.mktemp("isr-cluster")
    clocks = {b: Clock() for b in (1, 2, 3)}
    logs = {b: EventLog(base / f"broker-{b}", b, clock=clocks[b]) for b in (1, 2, 3)}
    for at, broker, (event_type, fields) in HISTORY:
        clocks[broker].ms = T0 + at
        logs[broker].emit(event_type, **fields)
    for log in logs.values():
        log.close()
    # broker 1's log collected twice: every event in it is found twice
    shutil.copytree(base / "broker-1", base / "broker-1-copy")
    return [base / "broker-1", base / "broker-2", base / "broker-3", base / "broker-1-copy"]


@pytest.fixture(scope="module")
def merged(spark, cluster_dirs):
    """The merged events, run once and held as a local relation (as the job's tables are:
    spark_jobs.report.Collected), so each test's queries start from rows in the driver."""
    return collect(events_table(spark, [str(d) for d in cluster_dirs])).frame()


def test_the_event_logs_are_merged_once_each_in_time_order(spark, merged, cluster_dirs):
    rows = merged.select("ts", "broker", "type").collect()
    assert [(r["ts"] - T0, r["broker"], r["type"]) for r in rows] == sorted(
        (at, broker, event[0]) for at, broker, event in HISTORY)
    # one directory is read as before: its own events, in file order, nothing dropped
    one = events_table(spark, str(cluster_dirs[0])).select("ts").collect()
    assert [r["ts"] - T0 for r in one] == [at for at, broker, _ in HISTORY if broker == 1]


def test_under_replicated_intervals_and_time_to_recover(merged):
    end = T0 + 15000
    timeline = isr_timeline(merged, end)
    got = [(r["topic"], r["partition"], r["start_ts"] - T0,
            None if r["end_ts"] is None else r["end_ts"] - T0, r["duration_ms"],
            r["recovered"], r["replication_factor"], r["min_isr_size"], r["isr_shrinks"],
            r["left_isr"])
           for r in under_replicated_intervals(timeline).collect()]
    assert got == [
        ("legacy", 0, 2500, 3500, 1000, True, 2, 1, 1, [2]),
        ("orders", 0, 1000, 9000, 8000, True, 3, 1, 2, [2, 3]),
        ("orders", 0, 11000, None, 4000, False, 3, 2, 1, [1]),
        ("orders", 1, 3000, 7000, 4000, True, 3, 2, 1, [3]),
    ]


def test_partition_health_counts_and_recovery(merged):
    end = T0 + 15000
    cols = ("replication_factor", "isr_shrinks", "isr_expands", "leader_changes",
            "under_replicated_intervals", "recoveries", "max_recovery_ms",
            "total_recovery_ms", "under_replicated_s", "under_replicated_now", "offline_s",
            "last_leader", "last_isr")
    rows = {(r["topic"], r["partition"]): tuple(r[c] for c in cols)
            for r in partition_health(merged, end).collect()}
    assert rows == {
        ("legacy", 0): (2, 1, 1, 0, 1, 1, 1000, 1000, 1.0, False, 0.0, None, [1, 2]),
        # leaderships: -1 -> 1 (epoch 0), 1 -> 2 (epoch 1, written twice, counted once)
        ("orders", 0): (3, 3, 2, 2, 2, 1, 8000, 8000, 12.0, True, 0.0, 2, [2, 3]),
        # -1 -> 2, 2 -> -1 (offline 12 s to 14 s), -1 -> 3
        ("orders", 1): (3, 1, 1, 3, 1, 1, 4000, 4000, 4.0, False, 2.0, 3, [1, 2, 3]),
    }
    epochs = [(r["partition"], r["leader_epoch"], r["ts"] - T0)
              for r in leader_changes(merged, end).where("topic = 'orders'").collect()]
    assert epochs == [(0, 0, 0), (0, 1, 10000), (1, 0, 0), (1, 1, 12000), (1, 2, 14000)]
    # broker 1 leads nothing at the end and is out of orders-0's ISR; it led three shrinks
    assert [tuple(r) for r in broker_health(merged).collect()] == [
        (1, 0, 1, 3), (2, 1, 0, 2), (3, 1, 0, 0)]


def test_analyze_merges_the_brokers_data_directories(spark, cluster_dirs, tmp_path, capsys):
    out = tmp_path / "out"
    first, *rest = (str(d) for d in cluster_dirs)
    # --data-dir repeated and several after one: both name more directories
    code = main(["--data-dir", first, "--data-dir", *rest, "--out", str(out), "--job", "isr"])
    assert code == 0, capsys.readouterr().err
    health = {(r["topic"], r["partition"]): r for r in
              spark.read.parquet(str(out / "isr" / "partition_health" / "parquet")).collect()}
    assert {tp: (r["under_replicated_intervals"], r["max_recovery_ms"],
                 r["total_recovery_ms"], r["leader_changes"]) for tp, r in health.items()} == {
        ("legacy", 0): (1, 1000, 1000, 0), ("orders", 0): (2, 8000, 8000, 2),
        ("orders", 1): (1, 4000, 4000, 3)}
    intervals = spark.read.parquet(str(out / "isr" / "under_replicated_intervals" / "parquet"))
    assert intervals.count() == 4
    html = (out / "report.html").read_text()
    assert "data directories: " + ", ".join(str(d.resolve()) for d in cluster_dirs) in html
    assert "4 under-replicated intervals over 3 partitions; 1 still under-replicated" in html
    assert "longest recovery 8,000 ms (orders-0" in html
    for chart in ("under_replicated.png", "isr_timeline.png"):
        png = out / "isr" / chart
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"src='isr/{chart}'" in html
    assert "no replication events" not in html


def test_a_missing_directory_among_several_is_refused(cluster_dirs, tmp_path, capsys):
    code = main(["--data-dir", str(cluster_dirs[0]), str(tmp_path / "nope"),
                 "--out", str(tmp_path / "o")])
    assert code == 2
    assert capsys.readouterr().err == \
        f"minibroker analyze: data directory {tmp_path / 'nope'} does not exist\n"
