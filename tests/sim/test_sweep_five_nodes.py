"""The five-node half of the short-seed sweep (tests/sim/test_sweep_three_nodes.py)."""

from __future__ import annotations

import pytest

from tests.sim.test_sweep_three_nodes import SWEEP_SEEDS, sweep


@pytest.mark.parametrize("seed", SWEEP_SEEDS)
def test_five_nodes_short_seed(seed):
    sweep(seed, 5)
