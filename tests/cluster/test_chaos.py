"""`minibroker chaos` in CI: one seeded 30 s schedule against three local processes
(kill -9, SIGSTOP past the session timeouts, rolling restart), every check over its
history, and the replicas compared after healing.

The long runs (20 seeds, and the Docker cluster with network partitions) are `make
chaos`; docs/RELIABILITY.md records them.
"""

from __future__ import annotations

import json

import pytest

from harness.chaos import checker
from bench.chaos.cli import main as chaos_main
from harness.chaos.history import read_history
from harness.chaos.txn_checker import TXN_FAILURES
from bench.chaos.nemesis import schedule

pytestmark = pytest.mark.interop

SEED = 45  # a kill, a pause and a rolling restart within DURATION_S (asserted below)
DURATION_S = 30.0


def _summary_or_fail(capsys, run_dir) -> str:
    """The run's printed table; a run that raised before writing its summary fails the test
    with what it printed (its traceback goes to stderr) and its own log."""
    captured = capsys.readouterr()
    if not (run_dir / "summary.json").exists():
        log = run_dir / "run.log"
        pytest.fail("the chaos run wrote no summary:\n" + captured.out[-3000:]
                    + captured.err[-5000:]
                    + (log.read_text()[-3000:] if log.exists() else ""))
    return captured.out


def test_the_ci_seed_schedules_every_process_fault():
    kinds = {f.kind for f in schedule(SEED, DURATION_S, ("kill", "pause", "restart"), 6.0)}
    assert kinds == {"kill", "pause", "restart"}


def test_one_seeded_run_loses_duplicates_and_reorders_nothing(tmp_path, capsys):
    status = chaos_main(["--seed", str(SEED), "--duration-s", f"{DURATION_S:g}",
                         "--out", str(tmp_path)])
    out = _summary_or_fail(capsys, tmp_path / f"seed-{SEED}")
    summary = json.loads((tmp_path / f"seed-{SEED}" / "summary.json").read_text())
    failures = {name: r for name, r in summary["results"].items()
                if name in checker.FAILURES + TXN_FAILURES + ("replica-divergence",)
                and r["count"]}
    assert status == 0 and not failures and not summary["stalled"], (
        f"{failures}\n{summary['stalled']}\n{out}")
    # the run did what it says: faults, writes through them, reads and commits
    assert summary["faults"] >= 3 and summary["acked"] > 5000 and summary["polled"] > 5000
    ops = read_history(tmp_path / f"seed-{SEED}" / "history.jsonl")
    faults = [o["value"]["fault"] for o in ops if o["f"] == "fault"
              and o["value"]["phase"] == "start"]
    assert set(faults) == {"kill", "pause", "restart"}, faults
    assert any(o["f"] == "commit" and o["type"] == "ok" for o in ops)
    assert {o["process"] for o in ops if o["f"] == "poll"} == {"c-ours", "c-rdkafka"}
    # the transactional copier committed through the faults, and its checkers ran
    assert set(TXN_FAILURES) <= summary["results"].keys()
    assert any(o["f"] == "txn" and o["type"] == "ok" for o in ops)
    assert any(o["f"] == "txn-read" for o in ops)
    assert f"{SEED}" in out and "1/1 ok" in out


REASSIGN_SEED = 3
REASSIGN_DURATION_S = 25.0


def test_a_reassignment_under_faults_completes_and_loses_nothing(tmp_path, capsys):
    """`--faults reassign`: a partition moved off a node and back under a low throttle, a
    node killed -9 while the replica catches up; the move completes, and the checkers and
    the replica comparison find nothing."""
    assert [f.kind for f in schedule(REASSIGN_SEED, REASSIGN_DURATION_S, ("reassign",),
                                     6.0)] == ["reassign"]
    status = chaos_main(["--seed", str(REASSIGN_SEED), "--duration-s",
                         f"{REASSIGN_DURATION_S:g}", "--faults", "reassign",
                         "--out", str(tmp_path)])
    out = _summary_or_fail(capsys, tmp_path / f"seed-{REASSIGN_SEED}")
    summary = json.loads((tmp_path / f"seed-{REASSIGN_SEED}" / "summary.json").read_text())
    failures = {name: r for name, r in summary["results"].items()
                if name in checker.FAILURES + TXN_FAILURES + ("replica-divergence",)
                and r["count"]}
    assert status == 0 and not failures and not summary["stalled"], (
        f"{failures}\n{summary['stalled']}\n{out}")
    ops = read_history(tmp_path / f"seed-{REASSIGN_SEED}" / "history.jsonl")
    phases = {o["value"]["phase"]: o["value"] for o in ops if o["f"] == "fault"}
    assert phases["moving"]["shrunk"] is True and phases["moving"]["killed"] in (0, 1, 2)
    assert phases["end"]["done"] is True
    assert summary["acked"] > 3000
