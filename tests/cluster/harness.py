"""The cluster tests' harness: harness.cluster's N combined nodes (the issue's pinned
command, each node's own view, waiting with a deadline), and `FAST`, the settings the fast
cluster fixture (conftest.py) runs them with.
"""

from __future__ import annotations

from harness.cluster import FORM_TIMEOUT_S, HOST, START_TIMEOUT_S, Cluster, ClusterNode
from harness.ports import free_port

__all__ = ["FAST", "FORM_TIMEOUT_S", "HOST", "START_TIMEOUT_S", "Cluster", "ClusterNode",
           "free_port"]

# Settings that make faults show in a test's time rather than Kafka's defaults' (a fenced
# broker after 9 s): what the fast cluster fixture runs with.
FAST = {
    "broker.heartbeat.interval.ms": 300,
    "broker.session.timeout.ms": 2000,
    "controller.quorum.election.timeout.ms": 500,
    "controller.quorum.fetch.timeout.ms": 1000,
    "replica.lag.time.max.ms": 5000,  # as the outside tests run
    # followers serve consumers (KIP-392), so a test can read a follower's own copy
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
}
