"""The cluster tests' harness: harness.cluster's N combined nodes (the issue's pinned
command, each node's own view, waiting with a deadline), and `FAST`, the settings the fast
cluster fixture (conftest.py) runs them with.
"""

from __future__ import annotations

from harness.cluster import FORM_TIMEOUT_S, HOST, START_TIMEOUT_S, Cluster, ClusterNode
from harness.ports import free_port
from harness.raw import call
from protocol import messages as m

__all__ = ["FAST", "FORM_TIMEOUT_S", "HOST", "START_TIMEOUT_S", "Cluster", "ClusterNode",
           "coordinator_of", "free_port"]

GROUP_KEY, TRANSACTION_KEY = 0, 1


def coordinator_of(cluster: Cluster, key: str, key_type: int = GROUP_KEY) -> int:
    """The node a running node names as the coordinator of a group or transactional id
    (FindCoordinator v3)."""
    body = call(cluster.running()[0].port, m.FIND_COORDINATOR, 3,
                {"key": key, "key_type": key_type})
    assert body["error_code"] == 0, body
    return body["node_id"]

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
