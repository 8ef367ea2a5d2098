"""`minibroker chaos --target docker` in CI: one seeded 60 s schedule against
docker-compose.yml's three brokers (a kill of the group's coordinator, a ring partition in
which two nodes lose each other and the third bridges them, a pause of a partition leader
past the session timeouts), every check over its history, the replicas compared after
healing. The 20-seed runs are `make chaos-docker`; docs/RELIABILITY.md records them.

Marked `docker`: it needs a Docker engine, docker-compose, nsenter and iptables, fails
rather than skips without them, and takes down a cluster a developer left running.
"""

from __future__ import annotations

import json

import pytest

from harness.chaos import checker
from bench.chaos.cli import main as chaos_main
from harness.chaos.history import read_history
from bench.chaos.nemesis import KINDS, schedule

pytestmark = pytest.mark.docker

SEED = 4
PAUSE_S = 12.0  # runner.RunConfig's pause for docker: past 9 s (brokers) and 10 s (members)


def test_the_ci_seed_schedules_a_kill_a_partition_and_a_pause():
    faults = schedule(SEED, 60.0, KINDS, PAUSE_S)
    assert [f.kind for f in faults] == ["kill", "ring", "pause"]
    assert faults[0].aim == "coordinator"


def test_one_seeded_docker_run_loses_duplicates_and_reorders_nothing(tmp_path, capsys):
    status = chaos_main(["--target", "docker", "--seed", str(SEED), "--duration-s", "60",
                         "--out", str(tmp_path)])
    out = capsys.readouterr().out
    run = tmp_path / f"seed-{SEED}"
    assert (run / "summary.json").exists(), f"the run wrote no summary (exit {status}):\n{out}"
    summary = json.loads((run / "summary.json").read_text())
    failures = {name: r for name, r in summary["results"].items()
                if name in checker.FAILURES + ("replica-divergence",) and r["count"]}
    assert status == 0 and not failures and not summary["stalled"], (
        f"{failures}\n{summary['stalled']}\n{out}")
    assert summary["faults"] == 3 and summary["acked"] > 5000 and summary["polled"] > 5000
    ops = read_history(run / "history.jsonl")
    started = [o["value"] for o in ops if o["f"] == "fault" and o["value"]["phase"] == "start"]
    assert [f["fault"] for f in started] == ["kill", "ring", "pause"]
    # the ring was laid and healed, and writes were acknowledged again once it had healed
    # (during it, a partition whose leader and follower lost each other waits for
    # replica.lag.time.max.ms, 30 s, longer than the ring: whether others were acknowledged
    # meanwhile depends on which broker leads what, so it is not asserted)
    ring = [o["time"] for o in ops if o["f"] == "fault" and o["value"]["fault"] == "ring"]
    assert len(ring) == 2
    assert any(o["time"] > ring[1] for o in ops if o["f"] == "send" and o["type"] == "ok")
    assert "1/1 ok" in out
