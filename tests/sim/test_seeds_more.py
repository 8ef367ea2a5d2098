"""The whole-cluster simulation over more seeds (tests/sim/test_seeds.py has the three-node
classic runs): three nodes with the consumers in a KIP-848 group, and five nodes. A module
of its own so that the suite's two workers run both halves at once."""

from __future__ import annotations

import pytest

from sim.run import Options, run_seed
from tests.sim.test_seeds import DURATION_S, explain

KIP848_SEEDS = range(13, 16)  # three nodes, the consumers in a KIP-848 group
FIVE_NODE_SEEDS = range(1, 3)


@pytest.mark.parametrize("seed", KIP848_SEEDS)
def test_kip848_consumers_keep_every_promise_under_the_seeds_faults(seed):
    o = run_seed(seed, Options(nodes=3, duration_s=DURATION_S, group_protocol="consumer"))
    assert o.ok, explain(o)
    assert o.acked > 0 and o.polled > 0, "the workload did nothing"


@pytest.mark.parametrize("seed", FIVE_NODE_SEEDS)
def test_five_nodes_keep_every_promise_under_the_seeds_faults(seed):
    o = run_seed(seed, Options(nodes=5, duration_s=DURATION_S))
    assert o.ok, explain(o)
    assert o.acked > 0 and o.polled > 0, "the workload did nothing"


def test_a_commit_retried_across_a_rebalance_does_not_overwrite_the_new_owner():
    """Seed 1012 of the short sweep: the group's coordinator is killed while a member's
    commit of partition 1 waits; the group rebalances on the new coordinator, partition 1
    goes to the other member, which commits 88; the waiting commit, retried, carried the new
    generation and was accepted, and the group's committed offset of partition 1 went back
    to 4 (`group-behind`). The client now fails such a commit with CommitFailedError
    (client.consumer.coordinator.commit_offsets)."""
    o = run_seed(1012, Options(nodes=3, duration_s=3.0, quiet_s=0.0))
    assert o.ok, explain(o)
    assert o.acked > 0 and o.polled > 0, "the workload did nothing"


def test_a_client_started_while_no_node_answers_starts_again():
    """Seed 2453 of `make sim` (10,000 short seeds): a power loss of two nodes as the
    consumer starts, and the third node's connections reset: no bootstrap server answers,
    our Consumer fails fast at start (as aiokafka's start()), and the run ended with the
    client's error instead of a verdict. The workload's clients now start again, as an
    application's supervisor would (harness.chaos.workload.started)."""
    o = run_seed(2453, Options(nodes=3, duration_s=3.0, quiet_s=0.0))
    assert o.ok, explain(o)
    assert o.faults == {"power-loss": 1}
    assert o.acked > 0 and o.polled > 0, "the workload did nothing"


def test_a_restarted_coordinator_writes_nothing_before_it_has_registered_again():
    """Seed 189 of `minibroker sim --seeds 101-200`: node 1, leader of __consumer_offsets-1
    at epoch 0, is killed and loses its unsynced tail (its log ends at 59, the others' past
    it), and restarts within its broker session. It took its old leadership from its own
    metadata log before registering again, and its group coordinator appended offset 59 at
    epoch 0: a different record at an offset and epoch the others already held, which no
    truncation by leader epoch could find, so the replicas diverged below the high
    watermark (`replicas-diverge`). The replicas now take the first metadata image only
    once the broker has registered and applied past its registration (broker.lifecycle's
    initial catch-up), by which time its old leaderships have moved."""
    o = run_seed(189, Options(nodes=3, duration_s=30.0))
    assert o.ok, explain(o)
    assert o.acked > 0 and o.polled > 0, "the workload did nothing"


def test_the_last_isr_member_re_elected_after_losing_its_tail_loses_nothing():
    """Seed 601 of the long seeds, finding 7 (docs/RELIABILITY.md): sim-2's ISR came down
    to its leader, node 1, which was killed and came back without its unsynced tail;
    fenced as the last ISR member it kept its place, registered again and was re-elected,
    and the other replicas truncated to it: acknowledged sends and commits were lost.
    KIP-966's eligible leader replicas fixed it: the HW stops below min.insync.replicas,
    the replica that leaves the ISR then stays eligible, and a registration after an
    unclean shutdown takes the broker out of the ISR and the ELR."""
    o = run_seed(601, Options(nodes=3, duration_s=30.0))
    assert o.ok, explain(o)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_transactional_copiers_are_exactly_once_under_faults(seed):
    """--workload txn: two copiers, consume-transform-produce in transactions (a fifth of
    them aborted on purpose), under the seed's faults; Jepsen's transactional checkers
    (harness.chaos.txn_checker) find nothing, and transactions did commit."""
    from harness.chaos.txn_checker import summary

    o = run_seed(seed, Options(nodes=3, duration_s=15.0, copiers=2))
    assert o.ok, explain(o)
    outcomes = summary(o.history)
    assert outcomes["committed"] > 10 and outcomes["aborted"] > 0, outcomes
