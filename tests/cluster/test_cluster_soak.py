"""Longer runs of the three-node cluster, behind the `soak` marker (`make soak`): repeated
kill -9 and SIGTERM of the active controller and of brokers, with topics created between
them, checking after each round that one controller is active, every node lists all three
brokers, every partition has a leader in every node's Metadata, and no node stopped by
itself."""

from __future__ import annotations

import random

import pytest

from tests.cluster import confluent
from tests.cluster.harness import Cluster
from tests.util import unique

pytestmark = [pytest.mark.interop, pytest.mark.soak]

ROUNDS = 12


def all_led(cluster: Cluster, topics: list[str]) -> bool:
    for n in cluster.running():
        for topic in topics:
            leaders = cluster.leaders(n.node_id, topic)
            if not leaders or any(leader < 0 for leader in leaders.values()):
                return False
    return True


def test_rounds_of_kills_and_stops(make_cluster):
    cluster = make_cluster()
    rnd = random.Random(10)
    topics: list[str] = []
    for round_ in range(ROUNDS):
        controller = cluster.wait_controller(30)
        victim = controller if round_ % 2 == 0 else rnd.choice(
            [i for i in range(3) if i != controller])
        if rnd.random() < 0.5:
            cluster.kill(victim)
        else:
            assert cluster.terminate(victim) == 0, cluster.node(victim).tail()
        survivors = ",".join(n.bootstrap for n in cluster.running())
        topic = unique(f"soak-{round_}")
        confluent.create_topic(survivors, topic, 3, 2, timeout_s=30)
        topics.append(topic)
        cluster.restart(victim)
        cluster.wait_formed(30)
        cluster.wait_for(lambda: all_led(cluster, topics), 30,
                         f"every partition of {len(topics)} topics led, after round {round_}")
        for n in cluster.nodes:
            assert not n.died_unexpectedly, n.tail()
