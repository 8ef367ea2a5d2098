"""The Prometheus endpoints of a three-node cluster: one active controller among them, the
partitions a killed node held counted under-replicated by their leaders (with the ISR
shrinks that made them so), and none once the node is back in every ISR."""

from __future__ import annotations

import pytest

from tests.cluster import confluent
from tests.cluster.harness import FAST, Cluster
from harness.ports import free_port
from tests.interop.test_metrics import scrape
from tests.util import unique

pytestmark = pytest.mark.interop

PARTITIONS = 3


def gauge(port: int, name: str) -> float:
    return scrape(port)[(name, ())]


def test_under_replicated_partitions_follow_a_node_out_and_back(tmp_path):
    cluster = Cluster(tmp_path, 3, FAST)
    ports = {}
    for node in cluster.nodes:  # one endpoint each: the nodes share a host
        ports[node.node_id] = free_port()
        node.overrides["metrics.port"] = str(ports[node.node_id])

    def total(name: str) -> float:
        """The sum of one metric (no labels) over the running nodes."""
        return sum(gauge(ports[n.node_id], name) for n in cluster.running())

    with cluster:
        cluster.wait_formed()
        topic = unique("metered")
        confluent.create_topic(cluster.bootstrap, topic, PARTITIONS, 3)
        under = "kafka_server_replicamanager_underreplicatedpartitions"
        cluster.wait_for(lambda: total("kafka_server_replicamanager_leadercount")
                         == PARTITIONS and total(under) == 0, 30,
                         "the topic's leaders, in full ISRs")
        assert total("kafka_controller_kafkacontroller_activecontrollercount") == 1
        for node in cluster.nodes:
            assert gauge(ports[node.node_id],
                         "kafka_server_replicamanager_partitioncount") == PARTITIONS

        cluster.kill(2)
        # every partition has a replica on node 2: each one's leader (on 0 or 1, once
        # leaderships have moved) counts it under-replicated
        cluster.wait_for(lambda: total(under) == PARTITIONS, 30,
                         "every partition under-replicated at its leader")
        assert total("kafka_server_replicamanager_isrshrinks_total") >= 1
        assert total("kafka_controller_kafkacontroller_fencedbrokercount") == 1

        cluster.restart(2)
        cluster.wait_for(lambda: total(under) == 0, 60,
                         "node 2 back in every ISR: no partition under-replicated")
        assert total("kafka_server_replicamanager_isrexpands_total") >= 1
        assert total("kafka_controller_kafkacontroller_activecontrollercount") == 1
