"""The ISR job over a three-broker cluster's event logs, written by broker.events.EventLog
into one data directory per broker (plus a copy of one, as if collected twice), and
`minibroker analyze` given all of them: the merged events, the under-replicated intervals
and their recovery times, leader changes counted once per leader epoch, offline time, and
the timeline chart in report.html. Then the README's cluster walk ending with every node
stopped by SIGTERM (reported as a stopped cluster, its shutdown not counted as
under-replication), the same with the last node killed instead (all of it counted), and the
one time axis every chart of a report shares."""

from __future__ import annotations

import shutil
from html import unescape
from pathlib import Path

import pytest

from broker.events import EventLog
from spark_jobs.jobs import ms_to_text
from spark_jobs.jobs.isr import (broker_health, isr_timeline, leader_changes, partition_health,
                                 under_replicated_intervals)
from spark_jobs.report import collect, time_axis
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


# --- a cluster stopped at the end, and one whose last broker crashed ------------------------

def _registered(broker, epoch):
    return ("broker_registered", {"broker_id": broker, "broker_epoch": epoch, "rack": "r",
                                  "incarnation_id": f"i{broker}"})


def _start(broker):
    return ("broker_start", {"listener": f"127.0.0.1:{19392 + broker}", "data_dir": f"d{broker}",
                             "cluster_id": "c", "clean_shutdown": True, "version": "t"})


def _stop(uptime):
    return ("broker_stop", {"reason": "SIGTERM", "uptime_ms": uptime})


def _request(api, latency):
    return ("request", {"api": api, "api_key": 0, "api_version": 9, "client_id": "c",
                        "latency_ms": latency, "request_bytes": 1, "response_bytes": 1,
                        "error": ""})


# The README's cluster walk: three nodes, a topic of RF 3, one real under-replicated stretch
# (broker 3 lagging, 1 s to 3 s), then SIGTERM to each node in turn. Brokers 1 and 2 go by
# controlled shutdown (the controller registers each again with its epoch, moves its
# leaderships, the leaders shrink it out of their ISRs, it is fenced, it writes broker_stop);
# broker 3 is last, with nowhere to move anything, and its partition orders-1 goes offline.
STOPPED = [
    *[(0, b, _start(b)) for b in (1, 2, 3)],
    *[(100, 1, _registered(b, 10 + b)) for b in (1, 2, 3)],
    (200, 1, ("topic_create", {"topic": "orders", "topic_id": "x", "partitions": 2,
                               "replication_factor": 3, "configs": "", "auto": False})),
    (300, 1, _leader("orders", 0, -1, 1, 0)),
    (300, 1, _leader("orders", 1, -1, 2, 0)),
    (500, 2, _request("Produce", 3.0)),
    (1000, 1, _isr("orders", 0, 1, "shrink", [1, 2, 3], [1, 2])),
    (3000, 1, _isr("orders", 0, 1, "expand", [1, 2], [1, 2, 3])),
    (10000, 2, ("auth_failure", {"principal": "alice", "listener": "SASL", "peer": "h:1",
                                 "mechanism": "PLAIN", "reason": "bad password"})),
    # SIGTERM to broker 1: its controlled shutdown begins at 20 s
    (20000, 1, _registered(1, 11)),
    (20000, 1, _leader("orders", 0, 1, 2, 1)),
    (20001, 2, _isr("orders", 0, 2, "shrink", [1, 2, 3], [2, 3])),
    (20002, 2, _isr("orders", 1, 2, "shrink", [1, 2, 3], [2, 3])),
    (20050, 1, ("broker_fenced", {"broker_id": 1, "broker_epoch": 11})),
    (20100, 1, _stop(20100)),
    # broker 2, now the controller
    (24000, 2, _registered(2, 12)),
    (24000, 2, _leader("orders", 0, 2, 3, 2)),
    (24000, 2, _leader("orders", 1, 2, 3, 1)),
    (24001, 3, _isr("orders", 0, 3, "shrink", [2, 3], [3])),
    (24001, 3, _isr("orders", 1, 3, "shrink", [2, 3], [3])),
    (24050, 2, ("broker_fenced", {"broker_id": 2, "broker_epoch": 12})),
    (24100, 2, _stop(24100)),
    # broker 3, the last
    (26000, 3, _leader("orders", 1, 3, -1, 2, "offline")),
    (27000, 3, _request("Fetch", 500.0)),
    (28000, 3, _stop(28000)),
]
# the same, but broker 3 was killed (kill -9) after its last event: no broker_stop
CRASHED = STOPPED[:-1]


def _write_logs(base: Path, history) -> list[Path]:
    brokers = sorted({b for _, b, _ in history})
    clocks = {b: Clock() for b in brokers}
    logs = {b: EventLog(base / f"broker-{b}", b, clock=clocks[b]) for b in brokers}
    for at, broker, (event_type, fields) in history:
        clocks[broker].ms = T0 + at
        logs[broker].emit(event_type, **fields)
    for log in logs.values():
        log.close()
    return [base / f"broker-{b}" for b in brokers]


def _analyze(dirs: list[Path], out: Path) -> Path:
    args = ["--data-dir", *map(str, dirs), "--out", str(out)]
    for job in ("isr", "latency", "auth"):
        args += ["--job", job]
    assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def stopped_report(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("stopped")
    return _analyze(_write_logs(base / "logs", STOPPED), base / "out")


@pytest.fixture(scope="module")
def crashed_report(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("crashed")
    return _analyze(_write_logs(base / "logs", CRASHED), base / "out")


def _table(spark, out: Path, name: str) -> list:
    return spark.read.parquet(str(out / "isr" / name / "parquet")).collect()


def _health(spark, out: Path) -> dict:
    return {(r["topic"], r["partition"]): (r["under_replicated_intervals"],
                                           r["under_replicated_now"], r["under_replicated_s"],
                                           r["offline_s"], r["leader_changes"],
                                           r["last_leader"], r["last_isr"])
            for r in _table(spark, out, "partition_health")}


def test_a_cluster_stopped_cleanly_is_reported_stopped_not_under_replicated(spark,
                                                                         stopped_report):
    out = stopped_report
    stops = [(r["broker"], r["started_ts"] - T0, r["shutdown_ts"] - T0, r["stop_ts"] - T0,
              r["reason"]) for r in _table(spark, out, "broker_stops")]
    # brokers 1 and 2 began stopping at their controlled shutdown; broker 3 at its stop
    assert stops == [(1, 0, 20000, 20100, "SIGTERM"), (2, 0, 24000, 24100, "SIGTERM"),
                     (3, 0, 28000, 28000, "SIGTERM")]
    # health as the shutdown found it: the real stretch before it counts, recovered; the
    # shutdown's shrinks, leader moves and offline partition do not
    assert _health(spark, out) == {
        ("orders", 0): (1, False, 2.0, 0.0, 1, 1, [1, 2, 3]),
        ("orders", 1): (0, False, 0.0, 0.0, 1, 2, None)}
    assert [(r["partition"], r["start_ts"] - T0, r["end_ts"] - T0, r["recovered"])
            for r in _table(spark, out, "under_replicated_intervals")] == [(0, 1000, 3000, True)]
    # the shutdown's changes are kept, marked as the shutdown's
    assert [(r["partition"], r["ts"] - T0, r["new_leader"], r["stopping"], r["until_ts"] - T0)
            for r in sorted(_table(spark, out, "leader_changes"),
                            key=lambda r: (r["partition"], r["ts"]))] == [
        (0, 300, 1, False, 20000), (0, 20000, 2, True, 24000), (0, 24000, 3, True, 28000),
        (1, 300, 2, False, 20000), (1, 24000, 3, True, 26000), (1, 26000, -1, True, 28000)]
    assert [(r["partition"], r["ts"] - T0, r["stopping"])
            for r in sorted(_table(spark, out, "isr_timeline"),
                            key=lambda r: (r["partition"], r["ts"]))] == [
        (0, 1000, False), (0, 3000, False), (0, 20001, True), (0, 24001, True),
        (1, 20002, True), (1, 24001, True)]
    assert [tuple(r) for r in sorted(_table(spark, out, "broker_health"))] == [
        (1, 1, 0, 1), (2, 1, 0, 0), (3, 0, 0, 0)]
    html = unescape((out / "report.html").read_text())
    assert (f"cluster stopped at {ms_to_text(T0 + 28000)}: every broker stopped cleanly "
            f"(broker 1 at {ms_to_text(T0 + 20100)} (SIGTERM), broker 2 at "
            f"{ms_to_text(T0 + 24100)} (SIGTERM), broker 3 at {ms_to_text(T0 + 28000)} "
            f"(SIGTERM)). Replication health is as of {ms_to_text(T0 + 20000)}, when the "
            f"shutdown began (broker 1's controlled shutdown)") in html
    assert "0 still under-replicated when the cluster began stopping" in html


def test_a_crashed_broker_leaves_the_under_replication_flagged(spark, crashed_report):
    out = crashed_report
    stops = {r["broker"]: (r["stop_ts"], r["last_event_ts"] - T0)
             for r in _table(spark, out, "broker_stops")}
    assert stops == {1: (T0 + 20100, 20100), 2: (T0 + 24100, 24100), 3: (None, 27000)}
    # nothing is the shutdown's: every partition is short of replicas at the end of the log,
    # and orders-1 has had no leader since 26 s
    assert _health(spark, out) == {
        ("orders", 0): (2, True, 8.999, 0.0, 3, 3, [3]),
        ("orders", 1): (1, True, 6.998, 1.0, 3, -1, [3])}
    assert not any(r["stopping"] for r in _table(spark, out, "leader_changes"))
    html = unescape((out / "report.html").read_text())
    assert "cluster stopped" not in html
    assert (f"not stopped: broker 3's event log ends at {ms_to_text(T0 + 27000)} without "
            f"broker_stop") in html
    assert "2 still under-replicated at the end of the log" in html


def test_every_chart_shares_the_reports_time_axis(stopped_report, crashed_report):
    for out, last in ((stopped_report, 28000), (crashed_report, 27000)):
        charts = sorted(out.glob("*/*.png"))
        # the ISR job's two, latency's three, auth's one
        assert sorted(f"{p.parent.name}/{p.name}" for p in charts) == [
            "auth/auth_failures.png", "isr/isr_timeline.png", "isr/under_replicated.png",
            "latency/latency_max.png", "latency/latency_p50.png", "latency/latency_p99.png"]
        axes = {p.name: time_axis(p) for p in charts}
        # seconds since the first event of the whole report, over the same x range
        assert {a["t0_ms"] for a in axes.values()} == {T0}
        assert {tuple(a["span"]) for a in axes.values()} == {(T0, T0 + last)}
        assert len({tuple(a["xlim"]) for a in axes.values()}) == 1
        lo, hi = axes["isr_timeline.png"]["xlim"]
        assert lo <= 0 < last / 1000 <= hi < last / 1000 * 1.05
        assert (f"time axis of every chart: seconds since {ms_to_text(T0)}, the first event, "
                f"to {ms_to_text(T0 + last)}, the last") in (out / "report.html").read_text()


def test_broker_lanes_replace_the_overlapping_fencing_labels(spark, stopped_report):
    from spark_jobs.jobs.isr import _broker_lanes, broker_stops
    events = events_table(spark, sorted(str(d) for d in (stopped_report.parent / "logs")
                                        .iterdir()))
    stops = [r.asDict() for r in broker_stops(events).collect()]
    bars, points = _broker_lanes(events, T0 + 28000, stops)
    assert sorted((lane, s - T0, e - T0, kind) for lane, s, e, kind in bars) == [
        ("broker 1", 20050, 20100, "broker fenced"), ("broker 1", 20100, 28000, "broker stopped"),
        ("broker 2", 24050, 24100, "broker fenced"), ("broker 2", 24100, 28000, "broker stopped"),
        ("broker 3", 28000, 28000, "broker stopped")]
    assert sorted((lane, ms - T0, kind) for lane, ms, kind in points) == [
        ("broker 1", 20100, "broker_stop"), ("broker 2", 24100, "broker_stop"),
        ("broker 3", 28000, "broker_stop")]
