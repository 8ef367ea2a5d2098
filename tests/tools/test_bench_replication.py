"""`minibroker bench replication`: its options, its table, and one small run on a real
three-node cluster whose printed table has every row (the figures themselves are not
judged: they belong to docs/BENCHMARKS.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.replication import Table, build_parser
from cli.main import main as cli

ROOT = Path(__file__).resolve().parents[2]


def test_help_names_every_option(capsys):
    with pytest.raises(SystemExit) as done:
        cli(["bench", "replication", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for option in ("--records", "--runs", "--latency-rate", "--latency-seconds",
                   "--idle-partitions", "--no-peer", "--out", "--json"):
        assert option in out


def test_defaults_are_the_issues():
    args = build_parser().parse_args([])
    assert (args.records, args.runs, args.latency_rate, args.latency_seconds) == (
        1_000_000, 3, 10_000, 10.0)


def test_a_run_count_of_zero_is_refused(capsys):
    with pytest.raises(SystemExit) as done:
        cli(["bench", "replication", "--runs", "0"])
    assert done.value.code == 2
    assert "--runs" in capsys.readouterr().err


def test_the_table_groups_rows_by_measurement_and_judges_the_median():
    table = Table()
    table.add("(2) latency p99", "ms", 30.0, target="< 20 ms", meets=lambda v: v < 20)
    table.add("(1) throughput", "rec/s", 500_000.0, target=">= 421k rec/s",
              meets=lambda v: v >= 421_000)
    table.add("    of which: part", "rec/s", 1.0)
    for value in (10.0, 12.0):
        table.add("(2) latency p99", "ms", value)
    lines = table.lines()
    assert [line.split()[0] for line in lines[2:]] == ["(1)", "of", "(2)"]
    assert lines[2].endswith(">= 421k rec/s: met")
    # the median of 30, 10 and 12 is 12: met, with the min and max beside it
    assert lines[4].endswith("< 20 ms: met") and "10.0 - 30.0" in lines[4]


@pytest.mark.interop
def test_a_small_run_prints_every_row(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tools.cli", "bench", "replication", "--records", "2000",
         "--runs", "1", "--latency-seconds", "1", "--no-peer", "--out", str(tmp_path)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("  ")[0] for line in done.stdout.splitlines()]
    for row in ("(1) RF 3 acks=all, 1 partition: 3 brokers",
                "(1) RF 3 acks=all, 6 partitions: 3 brokers",
                "(1) acks=1, 1 partition: single broker (ours)",
                "(1) acks=1, 6 partitions: single broker (ours)",
                "(2) latency at 10,000 rec/s, acks=all, RF 3: p50",
                "(2) latency at 10,000 rec/s, acks=all, RF 3: p99",
                "(2) latency at 10,000 rec/s, acks=all, RF 3: max",
                "(3) catch-up: the restarted follower's rate",
                "(3) catch-up: restart -> back in the ISR",
                "(4) RF 3 acks=all, 1p: the leader",
                "(4) RF 3 acks=all, 1p: each follower",
                "(4) RF 3 acks=all, 6p: broker 0",
                "(4) RF 3 acks=all, 6p: all three brokers",
                "(4) acks=1, 1p: single broker (ours)"):
        assert row in rows, done.stdout
    assert "peer skipped: --no-peer" in done.stdout
    assert "other processes on this machine used" in done.stdout  # how quiet the run was
