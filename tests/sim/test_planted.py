"""Each planted bug (broker.planted) is caught: a checker of the simulation reports it on a
seed that passes without it. A checker that no bug ever trips proves nothing; the seeds
here are the first of `minibroker sim --seeds 1-200 --duration-s 20 --plant NAME
--stop-at-first` to catch each (docs/RELIABILITY.md has the table)."""

from __future__ import annotations

import pytest

from broker import planted
from sim.run import Options, run_seed

CAUGHT = [  # (bug, seed, a checker that must report it)
    ("hw-ignores-isr", 1, "lost"),
    ("no-truncation", 1, "replicas-diverge"),
    ("commit-before-hw", 4, "lost-commit"),
    # a stale voter elected: the follower it tells to truncate below its HW halts, and
    # the entries the others had committed are replaced (a partition-kill)
    ("vote-without-log-check", 23, "raft-committed-changed"),
    # every node's unsynced metadata lost together (a power loss of all three)
    ("metadata-fsync-skipped", 21, "raft-committed-changed"),
    # the transactional workload's copiers (--workload txn): aborted copies read as committed
    ("aborted-transactions-unreported", 1, "aborted-read"),
]


@pytest.mark.parametrize("bug,seed,checker", CAUGHT)
def test_a_planted_bug_is_caught_by_its_checker(bug, seed, checker):
    options = Options(nodes=3, duration_s=20.0,
                      copiers=2 if bug == "aborted-transactions-unreported" else 0)
    planted.plant(bug)
    try:
        with_bug = run_seed(seed, options)
    finally:
        planted.clear()
    assert checker in with_bug.violations, sorted(with_bug.violations)
    without = run_seed(seed, options)
    assert without.ok, sorted(without.violations)
