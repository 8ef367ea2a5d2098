"""Faults the confluent-kafka checks do not reach: an active controller cut off from both
followers (SIGSTOP, so their connections stay open and nothing answers), which must resign
without stopping, and come back as a follower when they resume."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.cluster import confluent
from tests.cluster.harness import FAST
from tests.util import unique

pytestmark = pytest.mark.interop

SESSION_TIMEOUT_S = FAST["broker.session.timeout.ms"] / 1000


def test_an_isolated_controller_resigns_and_keeps_running(cluster):
    leader = cluster.wait_controller()
    others = [n for n in cluster.nodes if n.node_id != leader]
    for n in others:
        os.kill(n.pid, signal.SIGSTOP)
    try:
        # the leader stops hearing Fetches: it resigns (check-quorum), and its controller's
        # sessions of the silent brokers expire, which must not make it write as a leader
        end = time.monotonic() + 2 * SESSION_TIMEOUT_S + 1
        while time.monotonic() < end:
            assert cluster.nodes[leader].running, (
                f"the isolated controller {leader} stopped:\n{cluster.nodes[leader].tail()}")
            time.sleep(0.1)
    finally:
        for n in others:
            os.kill(n.pid, signal.SIGCONT)
    cluster.wait_controller(20)
    cluster.wait_formed(20)
    topic = unique("after-isolation")
    confluent.create_topic(cluster.nodes[leader].bootstrap, topic, 3, 3)
    assert all(n.running for n in cluster.nodes)
