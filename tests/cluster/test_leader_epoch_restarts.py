"""A restarted follower keeps the leader-epoch history of what it replicated: once it leads
again, OffsetForLeaderEpoch answers every old epoch's end offset from its own cache, as the
batches' headers say (issue 28). And a topic deleted while a node was down does not come
back from that node's disk."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from harness.raw import call
from protocol import messages as m
from tests.cluster import confluent
from tests.cluster.harness import Cluster
from tests.cluster.test_replication import wait_full_isr
from tests.interop.epoch_history import check_history
from tests.util import unique

pytestmark = pytest.mark.interop


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for v in values:
        p.produce(topic, value=v.encode(), partition=0)
    assert p.flush(30) == 0


def leader_of(cluster: Cluster, topic: str) -> tuple[int, int]:
    """(leader, leader epoch) of partition 0 as the metadata of a running node says."""
    node = cluster.running()[0].node_id
    p = cluster.partitions(node, topic)[0]
    return p.leader_id, p.leader_epoch


def elect_preferred(cluster: Cluster, topic: str) -> None:
    body = call(cluster.running()[0].port, m.ELECT_LEADERS, 2, {
        "election_type": 0, "topic_partitions": [{"topic": topic, "partitions": [0]}],
        "timeout_ms": 10_000})
    [result] = body["replica_election_results"][0]["partition_result"]
    assert result["error_code"] == 0, result


def test_a_restarted_follower_answers_every_old_epoch_when_it_leads(cluster):
    topic = unique("epochs")
    confluent.create_topic(cluster.bootstrap, topic, 1, 3, config={"min.insync.replicas": "1"})
    wait_full_isr(cluster, topic, 1)
    preferred, _ = leader_of(cluster, topic)
    written = 0
    for round_ in range(3):
        leader, _ = leader_of(cluster, topic)
        produce(cluster.bootstrap, topic, [f"r{round_}-a{i}" for i in range(5)])
        # controlled shutdown moves the leadership: a new epoch, on another node
        assert cluster.terminate(leader) == 0
        cluster.wait_for(lambda old=leader: leader_of(cluster, topic)[0] not in (-1, old) or None,
                         30, "the leadership to move")
        produce(cluster.bootstrap, topic, [f"r{round_}-b{i}" for i in range(5)])
        written += 10
        cluster.restart(leader, kill=False)  # back as a follower, restarted
        wait_full_isr(cluster, topic, 1, timeout_s=60)
    if leader_of(cluster, topic)[0] != preferred:  # restarted as a follower once more
        assert cluster.terminate(preferred) == 0
        cluster.restart(preferred, kill=False)
        wait_full_isr(cluster, topic, 1, timeout_s=60)
    elect_preferred(cluster, topic)
    cluster.wait_for(lambda: leader_of(cluster, topic)[0] == preferred or None, 30,
                     "the restarted follower to lead")
    node = cluster.node(preferred)
    history = check_history(node.port, node.data_dir, topic, written)
    # the first leader's epoch, then one more for each move of the leadership
    assert len(history) == 4, history


def test_a_topic_deleted_while_a_node_was_down_stays_deleted_on_it(cluster):
    topic = unique("gone")
    confluent.create_topic(cluster.bootstrap, topic, 1, 3)
    wait_full_isr(cluster, topic, 1)
    produce(cluster.bootstrap, topic, ["old"] * 5)
    down = next(n.node_id for n in cluster.nodes
                if n.node_id != cluster.active_controller())
    assert cluster.terminate(down) == 0
    directory = cluster.node(down).data_dir / f"{topic}-0"
    assert directory.exists()
    admin = confluent.admin(cluster.running()[0].bootstrap)
    admin.delete_topics([topic], operation_timeout=10)[topic].result(15)
    cluster.wait_for(lambda: topic not in admin.list_topics(timeout=10).topics or None, 30,
                     "the deletion to be visible")
    cluster.restart(down, kill=False)
    cluster.wait_formed()
    assert not directory.exists(), "the deleted topic's log came back on the restarted node"
