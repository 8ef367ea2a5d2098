"""The whole-cluster simulation over a fixed set of seeds: three and five real nodes on
simulated network and disks, our producers and group consumers, seeded faults (kills with
disk crashes, clean restarts, partitions one and both ways, isolation, pauses, resets, a
partition healing as another node is killed, power losses of several nodes at once),
and every checker (sim.run): nothing acknowledged lost, no duplicate, order kept, committed
offsets never going back, replicas and metadata logs agreeing, one leader per epoch, the
cluster whole again after healing. `make sim` runs thousands of seeds; these run in
`make test`."""

from __future__ import annotations

import pytest

from sim.faults import KINDS, schedule
from sim.run import Options, Outcome, fault_rng, run_seed

THREE_NODE_SEEDS = [*range(1, 13), 23]  # 23: a power loss (at 15 s; 1-12 have none)

DURATION_S = 15.0


def explain(o: Outcome) -> str:
    lines = [f"seed {o.seed} ({o.options.nodes} nodes): replay with "
             f"`minibroker sim --seeds {o.seed} --nodes {o.options.nodes} "
             f"--duration-s {o.options.duration_s:g}"
             + (f" --quiet-s {o.options.quiet_s:g}" if o.options.quiet_s != 5.0 else "")
             + (" --workload kip848" if o.options.group_protocol == "consumer" else "")
             + (" --workload share" if o.options.share_members else "") + "`"]
    lines += [f"  {name}: {found[:3]}" for name, found in sorted(o.violations.items())]
    return "\n".join(lines)


@pytest.mark.parametrize("seed", THREE_NODE_SEEDS)
def test_three_nodes_keep_every_promise_under_the_seeds_faults(seed):
    o = run_seed(seed, Options(nodes=3, duration_s=DURATION_S))
    assert o.ok, explain(o)
    assert o.acked > 0 and o.polled > 0, "the workload did nothing"


def test_the_seeds_schedules_reach_every_kind_of_fault():
    """What the seeds above meet, from their schedules alone (drawn before any run)."""
    met = {f.kind for seed in THREE_NODE_SEEDS
           for f in schedule(fault_rng(seed), 3, KINDS, 5.0, 5.0 + DURATION_S)}
    assert met == set(KINDS)
