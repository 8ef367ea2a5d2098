"""A seed decides everything: two runs of one seed produce the same history and the same
node events, hashed (sim.run's trace hash), and another seed another trace."""

from __future__ import annotations

from sim.run import Options, run_seed

OPTIONS = Options(nodes=3, duration_s=10.0)


def test_one_seed_twice_gives_the_same_trace_and_another_seed_another():
    first, again, other = (run_seed(seed, OPTIONS) for seed in (5, 5, 6))
    assert first.history and first.events
    assert first.trace_hash == again.trace_hash
    assert first.history == again.history
    assert first.trace_hash != other.trace_hash
