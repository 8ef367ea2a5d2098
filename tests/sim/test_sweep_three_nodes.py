"""A sweep of many short seeds, three nodes (tests/sim/test_sweep_five_nodes.py has the
five-node half: a module each, so that pytest-xdist's two workers share the sweep).

Each seed: the cluster forms, the workload starts, and one fault of the seed's drawing
(any kind, on any node) starts within SWEEP_DURATION_S of the topic's creation, over the
nodes' startup, the group's first rebalance and the first sends; then healing and every
checker, as `minibroker sim`. Short runs meet fewer faults each than
tests/sim/test_seeds.py's, and many more of the moments right after startup. The 300 seeds
run in `make test`: about half a second each on this machine (docs/RELIABILITY.md)."""

from __future__ import annotations

import pytest

from sim.run import Options, run_seed
from tests.sim.test_seeds import explain

SWEEP_DURATION_S = 3.0
SWEEP_QUIET_S = 0.0  # the first fault within 0-3 s of the topic's creation
SWEEP_SEEDS = range(1001, 1151)


def sweep(seed: int, nodes: int) -> None:
    o = run_seed(seed, Options(nodes=nodes, duration_s=SWEEP_DURATION_S,
                               quiet_s=SWEEP_QUIET_S))
    assert o.ok, explain(o)
    assert o.acked > 0 and o.polled > 0, "the workload did nothing"


@pytest.mark.parametrize("seed", SWEEP_SEEDS)
def test_three_nodes_short_seed(seed):
    sweep(seed, 3)
