"""`minibroker analyze` end to end on a real broker's data directory, and the `--at` replay
of `minibroker groups describe` compared, as text, with what the tool printed at that time."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_jobs.jobs.lag import describe_at
from spark_jobs.report import time_axis
from spark_jobs.tables import batches, events, group_metadata, offset_commits
from tests.util import wait_until
from tools.analyze import main, render_describe

GROUP = "analyzed"
TOPIC = "lagged"
PARTITIONS = 3
REPO = Path(__file__).resolve().parents[2]


def _describe(bootstrap: str) -> tuple[str, str]:
    from tools import groups
    args = argparse.Namespace(bootstrap_server=bootstrap, timeout=10_000,
                              groups_command="describe", group=GROUP, members=False,
                              state=False, offsets=False)
    out, err = io.StringIO(), io.StringIO()
    assert groups.run(args, out, err) == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def group_run(tmp_path_factory):
    """A group consumes and commits (a hot key skews one partition), `groups describe` is
    captured; then more is produced and committed so the log moves on past that moment."""
    import confluent_kafka

    from tests.interop.conftest import BrokerProcess
    from tests.interop.librdkafka import create_topic, produce

    broker = BrokerProcess(tmp_path_factory.mktemp("analyze-broker"),
                           {"group.initial.rebalance.delay.ms": 0})
    broker.start()
    try:
        create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        first = [(b"hot" if i % 3 else f"k{i}".encode(), f"v{i}".encode(), []) for i in range(30)]
        produce(broker.bootstrap, TOPIC, first)
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": GROUP, "client.id": "analyst",
            "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([TOPIC])
        seen = []

        def consumed(n, at_most=100):
            def check():
                seen.extend(m for m in consumer.consume(num_messages=at_most, timeout=0.2)
                            if m.error() is None)
                return len(seen) >= n
            return check
        wait_until(consumed(30), 30, message="the group to consume the first 30 records")
        consumer.commit(asynchronous=False)
        # the log and the group hold still while the tool looks (a heartbeat changes nothing)
        text, notice = _describe(broker.bootstrap)
        at_ms = int(time.time() * 1000)
        time.sleep(0.005)  # the replay is "as of at_ms": later writes must carry later times
        produce(broker.bootstrap, TOPIC, [(b"hot", f"late{i}".encode(), []) for i in range(12)])
        # one at a time, so the group stops exactly 7 records behind
        wait_until(consumed(35, at_most=1), 30, message="the group to consume 5 more")
        consumer.commit(asynchronous=False)
        later, _ = _describe(broker.bootstrap)
        consumer.close()
    finally:
        broker.stop()
    return {"data_dir": broker.data_dir, "at_ms": at_ms, "text": text, "notice": notice,
            "later": later}


def test_describe_at_prints_what_the_tool_printed(spark, group_run):
    d = str(group_run["data_dir"])
    described = describe_at(offset_commits(spark, d), batches(spark, d),
                            group_metadata(spark, d), events(spark, d), GROUP,
                            group_run["at_ms"])
    text, notice = render_describe(described, GROUP)
    assert "analyst" in group_run["text"] and group_run["text"] != group_run["later"]
    assert text == group_run["text"]
    assert notice == group_run["notice"]


def test_analyze_writes_tables_charts_and_report(spark, group_run, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["--data-dir", str(group_run["data_dir"]), "--out", str(out),
                 "--at", str(group_run["at_ms"])])
    err = capsys.readouterr().err
    assert code == 0, err
    for job in ("lag", "rebalances", "throughput", "latency", "isr"):
        assert f"[{job}] " in err
    assert (out / "lag" / f"describe_{GROUP}.txt").read_text() == \
        group_run["notice"] + group_run["text"]

    def table(job, name):
        assert list((out / job / name / "csv").glob("part-*.csv")), f"{job}/{name} csv"
        return spark.read.parquet(str(out / job / name / "parquet"))

    # throughput: every record produced is counted once, and the hot key's partition is hot
    shares = {r["partition"]: r for r in table("throughput", "partition_shares")
              .where(f"topic = '{TOPIC}'").collect()}
    assert sum(r["records"] for r in shares.values()) == 42
    hot = table("throughput", "hot_keys").where(f"topic = '{TOPIC}' AND rank = 1").first()
    assert (hot["key"], hot["records"]) == ("hot", 32)
    assert shares[hot["partition"]]["hot"] is True
    # lag: the group committed 35 of 42: the end-of-data Burrow view knows the lag
    now = table("lag", "burrow_group_now").where(f"group = '{GROUP}'").first()
    assert now["total_lag"] == 42 - 35 and now["status"] in ("WARN", "ERR", "OK")
    # rebalances: the group formed at least once, with the consumer's assignor
    rebalances = table("rebalances", "rebalances").where(f"group = '{GROUP}'").collect()
    assert rebalances and rebalances[0]["members_after"] == 1
    assert rebalances[0]["partitions_moved"] == PARTITIONS
    assert table("latency", "request_latency").where("api = 'Fetch'").count() >= 1
    assert table("isr", "partition_health").count() == 0

    html = (out / "report.html").read_text()
    pngs = sorted(out.glob("*/*.png"))
    assert {p.parent.name for p in pngs} >= {"lag", "rebalances", "throughput", "latency"}
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"src='{png.relative_to(out)}'" in html
    # every time-based chart counts seconds from the report's first event, over one x range:
    # the broker's events and the log's batches, from the broker's start to its stop
    axes = {f"{p.parent.name}/{p.name}": time_axis(p) for p in pngs}
    timed = {name: a for name, a in axes.items() if a is not None}
    assert set(timed) >= {"lag/lag_records.png", "lag/status_heatmap.png",
                          "rebalances/members_in_rebalance.png", "throughput/records_per_s.png",
                          "latency/latency_p99.png"}
    assert set(axes) - set(timed) == {p for p in axes if "shares_" in p or "durations" in p}
    first, last = (spark.read.json(str(group_run["data_dir"] / "events"))
                   .selectExpr("min(ts)", "max(ts)").first())
    assert {tuple(a["span"]) for a in timed.values()} == {(first, last)}
    assert {a["t0_ms"] for a in timed.values()} == {first}
    assert len({tuple(a["xlim"]) for a in timed.values()}) == 1
    assert "no replication events (single broker)" in html
    assert "burrow_group_now" in html and f"groups describe {GROUP}" in html


def test_errors_are_one_line_and_exit_2(tmp_path):
    assert main(["--data-dir", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    # no Java on PATH and no JAVA_HOME: refused before any JVM is tried
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYSPARK_GATEWAY_PORT")}
    env["PATH"] = str(Path(sys.executable).parent)
    # through the installed `minibroker analyze` entry point, as a user types it
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "analyze", "--data-dir",
                           str(tmp_path), "--out", str(tmp_path / "o")], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Java" in lines[0] and lines[0].startswith("minibroker analyze:")


def test_analyze_tables_auth_failures_per_principal_and_peer(spark, group_run, tmp_path,
                                                             capsys):
    """The `auth` job over a data directory whose event log holds auth_failure events (a
    copy of the group run's, with failures appended as a broker writes them)."""
    import json
    import shutil

    data = tmp_path / "data"
    shutil.copytree(group_run["data_dir"], data)
    log = sorted((data / "events").glob("events-*.jsonl"))[-1]
    minute = group_run["at_ms"] // 60_000 * 60_000  # the three fall in one minute's bucket
    with log.open("a") as f:
        for i, (principal, peer) in enumerate([("User:mallory", "10.1.1.1:4000"),
                                               ("User:mallory", "10.1.1.1:4001"),
                                               ("", "10.2.2.2:5000")]):
            f.write(json.dumps({"ts": minute + i, "type": "auth_failure",
                                "broker": 0, "principal": principal, "listener": "SASL_SSL",
                                "peer": peer, "mechanism": "SCRAM-SHA-512",
                                "reason": "wrong password"}) + "\n")
    out = tmp_path / "out"
    assert main(["--data-dir", str(data), "--out", str(out), "--job", "auth"]) == 0, \
        capsys.readouterr().err
    assert list((out / "auth" / "auth" / "csv").glob("part-*.csv"))
    rows = {(r["principal"], r["peer_host"]): r["failures"] for r in
            spark.read.parquet(str(out / "auth" / "auth" / "parquet")).collect()}
    assert rows == {("User:mallory", "10.1.1.1"): 2, ("(none)", "10.2.2.2"): 1}
    assert (out / "auth" / "auth_failures.png").read_bytes()[:4] == b"\x89PNG"
