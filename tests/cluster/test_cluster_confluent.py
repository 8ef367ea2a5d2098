"""Three combined nodes as processes (tests/cluster/harness.py, fast timeouts), checked with
confluent-kafka as the issue's outside tests check them: brokers and racks from every
bootstrap, the active controller, placement and leader spread, INVALID_REPLICATION_FACTOR,
controller failover, produce and consume on leaders of different brokers, controlled
shutdown, fencing after kill -9, a node with other voters, a duplicate node.id, kcat -L and
`minibroker topics describe`.

The fixture `cluster` is shared by the package and made whole before each test (a node a
test killed is started again), so tests that kill or stop nodes may leave them down.
Each node's own Metadata is read through the harness (a raw socket to that node) where a
test says "every broker"; confluent-kafka does the asking elsewhere.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.cluster import confluent
from tests.cluster.harness import FAST, HOST, Cluster
from tests.interop.conftest import REPO_ROOT, free_port
from tests.interop.kcat import kcat
from tests.util import unique, wait_until

pytestmark = pytest.mark.interop

SESSION_TIMEOUT_S = FAST["broker.session.timeout.ms"] / 1000


def wait_topic_everywhere(cluster: Cluster, topic: str, partitions: int,
                          timeout_s: float = 10.0) -> dict[int, object]:
    """Until every running node's Metadata has the topic with a leader for each partition;
    the partitions as node 0 (or the first running node) sees them."""
    def shown() -> dict | None:
        views = [cluster.partitions(n.node_id, topic) for n in cluster.running()]
        if all(len(v) == partitions and all(p.leader_id >= 0 for p in v.values())
               for v in views):
            return views[0]
        return None
    return cluster.wait_for(shown, timeout_s, f"every node's Metadata to show {topic} with "
                            f"{partitions} led partitions")


# -- brokers and the controller ------------------------------------------------------------

def test_every_bootstrap_lists_three_brokers_with_racks(cluster):
    expected = {n.node_id: n.bootstrap for n in cluster.nodes}
    racks = {n.node_id: n.rack for n in cluster.nodes}
    cluster_ids = set()
    for n in cluster.nodes:
        assert confluent.brokers(n.bootstrap) == expected, f"Metadata from {n.bootstrap}"
        cluster_id, controller, nodes = confluent.describe_cluster(n.bootstrap)
        assert {i: hp for i, (hp, _) in nodes.items()} == expected
        assert {i: rack for i, (_, rack) in nodes.items()} == racks
        assert controller in expected
        cluster_ids.add(cluster_id)
    assert len(cluster_ids) == 1 and None not in cluster_ids


def test_describe_cluster_names_the_active_controller(cluster):
    leader = cluster.wait_controller()
    for n in cluster.nodes:
        _, controller, _ = confluent.describe_cluster(n.bootstrap)
        assert controller == leader, f"describe_cluster() from node {n.node_id}"
        # librdkafka (2.16) builds describe_cluster() from a Metadata request, not from
        # DescribeCluster: "DescribeCluster names the active controller", checked with
        # confluent-kafka, holds only if every broker's Metadata names it too
        assert cluster.metadata(n.node_id).controller_id == leader, f"Metadata from node {n.node_id}"
        assert cluster.describe_cluster(n.node_id).controller_id == leader


# -- placement ----------------------------------------------------------------------------

def test_six_partitions_rf3_spread_leaders_and_racks(cluster):
    topic = unique("spread")
    confluent.create_topic(cluster.nodes[0].bootstrap, topic, 6, 3)
    wait_topic_everywhere(cluster, topic, 6)
    racks = {n.node_id: n.rack for n in cluster.nodes}
    for n in cluster.nodes:
        parts = confluent.partitions(n.bootstrap, topic)
        assert sorted(parts) == list(range(6))
        assert Counter(p.leader for p in parts.values()) == {0: 2, 1: 2, 2: 2}, parts
        for p in parts.values():
            assert len(set(p.replicas)) == 3
            assert len({racks[r] for r in p.replicas}) == 3  # one replica per rack
            assert p.leader == p.replicas[0]  # the preferred leader leads
            assert sorted(p.isrs) == sorted(p.replicas)


def test_replication_factor_above_the_brokers_is_refused(cluster):
    topic = unique("rf4")
    code = confluent.create_error(cluster.nodes[1].bootstrap, topic, 1, 4)
    assert code == KafkaError.INVALID_REPLICATION_FACTOR
    # asked without auto-creation (librdkafka's list_topics(topic) would create it)
    assert all(cluster.partitions(n.node_id, topic) == {} for n in cluster.nodes)


def test_produce_and_consume_on_leaders_of_different_brokers(cluster):
    topic = unique("pc")
    confluent.create_topic(cluster.nodes[2].bootstrap, topic, 3, 3)
    parts = wait_topic_everywhere(cluster, topic, 3)
    assert {p.leader_id for p in parts.values()} == {0, 1, 2}

    producer = Producer({"bootstrap.servers": cluster.nodes[0].bootstrap, "acks": 1,
                         "linger.ms": 5})
    errors = []
    for p in range(3):
        for i in range(20):
            producer.produce(topic, f"p{p}-{i}".encode(), partition=p,
                             on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(15) == 0 and errors == []

    consumer = Consumer({"bootstrap.servers": cluster.nodes[1].bootstrap,
                         "group.id": unique("g"), "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        got: dict[int, list[str]] = {0: [], 1: [], 2: []}
        deadline = time.monotonic() + 20
        while sum(map(len, got.values())) < 60 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append(msg.value().decode())
    finally:
        consumer.close()
    assert got == {p: [f"p{p}-{i}" for i in range(20)] for p in range(3)}


def test_topics_describe_prints_leader_replicas_isr(cluster):
    topic = unique("desc")
    confluent.create_topic(cluster.nodes[0].bootstrap, topic, 3, 3)
    wait_topic_everywhere(cluster, topic, 3)
    done = subprocess.run([sys.executable, "-m", "tools.cli", "topics", "describe", topic,
                           "--bootstrap-server", cluster.nodes[1].bootstrap],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "PartitionCount: 3\tReplicationFactor: 3" in lines[0]
    parts = confluent.partitions(cluster.nodes[0].bootstrap, topic)
    assert lines[1:] == [
        f"\tTopic: {topic}\tPartition: {i}\tLeader: {p.leader}"
        f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isrs))}"
        for i, p in sorted(parts.items())]


def test_kcat_lists_three_brokers(cluster):
    listing = kcat("-b", cluster.nodes[2].bootstrap, "-L", "-m", "10")
    assert " 3 brokers:" in listing, listing
    for n in cluster.nodes:
        assert f"broker {n.node_id} at {HOST}:{n.port}" in listing, listing


# -- faults -------------------------------------------------------------------------------

def test_kill_9_of_the_active_controller(cluster):
    old = cluster.wait_controller()
    cluster.kill(old)
    survivor = next(n for n in cluster.nodes if n.node_id != old)
    started = time.monotonic()
    new = cluster.wait_controller(30, other_than=old)
    assert new != old

    def described() -> bool:
        _, controller, _ = confluent.describe_cluster(survivor.bootstrap)
        return controller == new
    wait_until(described, 30 - (time.monotonic() - started),
               message=f"DescribeCluster from {survivor.bootstrap} to name controller {new}")

    topic = unique("after-failover")
    confluent.create_topic(survivor.bootstrap, topic, 2, 2,
                           timeout_s=max(1.0, 30 - (time.monotonic() - started)))
    assert time.monotonic() - started < 30
    assert len(confluent.partitions(survivor.bootstrap, topic)) == 2


def test_sigterm_moves_leaderships_off_the_broker(cluster):
    topic = unique("cs")
    confluent.create_topic(cluster.nodes[0].bootstrap, topic, 6, 3)
    wait_topic_everywhere(cluster, topic, 6)
    victim = next(i for i in range(3) if i != cluster.wait_controller())
    status = cluster.terminate(victim)
    assert status == 0, cluster.node(victim).tail()
    leaders = cluster.wait_leaders_off(topic, victim, SESSION_TIMEOUT_S + 3)
    assert victim not in leaders.values()
    cluster.wait_for(lambda: all(victim not in cluster.brokers_seen(n.node_id)
                                 for n in cluster.running()), SESSION_TIMEOUT_S + 3,
                     f"broker {victim}, stopped, to be left out of every Metadata")


def test_sigterm_of_the_active_controller(cluster):
    topic = unique("cs-ctl")
    confluent.create_topic(cluster.nodes[0].bootstrap, topic, 6, 3)
    wait_topic_everywhere(cluster, topic, 6)
    old = cluster.wait_controller()
    assert cluster.terminate(old) == 0, cluster.node(old).tail()
    cluster.wait_controller(15, other_than=old)
    cluster.wait_leaders_off(topic, old, SESSION_TIMEOUT_S + 3)


def test_kill_9_of_a_broker_fences_it_and_moves_its_leaderships(cluster):
    topic = unique("fence")
    confluent.create_topic(cluster.nodes[0].bootstrap, topic, 6, 3)
    wait_topic_everywhere(cluster, topic, 6)
    victim = next(i for i in range(3) if i != cluster.wait_controller())
    cluster.kill(victim)
    cluster.wait_leaders_off(topic, victim, SESSION_TIMEOUT_S + 5)

    def fenced() -> bool:
        return all(victim not in cluster.brokers_seen(n.node_id) for n in cluster.running())
    cluster.wait_for(fenced, 5, f"broker {victim} to be left out of Metadata (fenced)")
    for p in confluent.partitions(cluster.nodes[(victim + 1) % 3].bootstrap, topic).values():
        assert p.leader != victim and victim not in p.isrs


# -- bad starts ---------------------------------------------------------------------------

def test_a_node_with_other_voters_exits_2_naming_them(cluster):
    c0, c1, c3 = cluster.nodes[0].controller_port, cluster.nodes[1].controller_port, free_port()
    own = cluster.add_node(3, voters=f"0@{HOST}:{c0},1@{HOST}:{c1},3@{HOST}:{c3}",
                           controller_port=c3)
    own.launch()
    assert own.wait_exit(30) == 2, own.tail()
    said = [line for line in own.tail().splitlines() if line.startswith("minibroker:")]
    assert len(said) == 1, own.tail()
    assert "controller.quorum.voters" in said[0]
    assert own.voters in said[0] or cluster.voters in said[0], said[0]
    cluster.wait_formed(5)


def _rogue_watch(cluster: Cluster, rogue) -> None:
    """While the rogue runs (and for two session timeouts at most), every node lists the
    original three brokers at their own addresses, and the rogue's client listener, which a
    broker opens only once unfenced, stays closed."""
    original = {n.node_id: (HOST, n.port, n.rack) for n in cluster.nodes}

    def only_the_originals() -> bool:
        if rogue.running:
            try:
                with socket.create_connection((HOST, rogue.port), timeout=0.2):
                    return False
            except OSError:
                pass
        return all(cluster.brokers_seen(n.node_id) == original for n in cluster.nodes)

    end = time.monotonic() + 2 * SESSION_TIMEOUT_S
    while time.monotonic() < end:
        assert only_the_originals(), (
            f"only the original brokers {original} may be listed while a second node "
            f"{rogue.node_id} runs; seen {[cluster.brokers_seen(n.node_id) for n in cluster.nodes]}")
        if not rogue.running:
            break
        time.sleep(0.1)


def _still_works(cluster: Cluster) -> None:
    topic = unique("dup")
    confluent.create_topic(cluster.nodes[1].bootstrap, topic, 3, 3)
    parts = wait_topic_everywhere(cluster, topic, 3)
    assert {p.leader_id for p in parts.values()} == {0, 1, 2}


def test_a_duplicate_node_id_with_its_own_ports_is_fenced(cluster):
    """A second node 1 with the same voters but its own client and controller ports (Kafka's
    listeners form) and data directory: a new incarnation while the first one's session
    lives. It must not replace broker 1, nor be listed beside it."""
    port, controller_port = free_port(), free_port()
    rogue = cluster.add_node(1, rack="rack-rogue", port=port, controller_port=controller_port,
                             overrides={"listeners": f"PLAINTEXT://{HOST}:{port},"
                                                     f"CONTROLLER://{HOST}:{controller_port}"})
    rogue.launch()
    try:
        _rogue_watch(cluster, rogue)
    finally:
        rogue.stop(kill=True)
    _still_works(cluster)


def test_a_duplicate_node_id_on_the_same_controller_port_cannot_start(cluster):
    """The same command with node 1's id and voters but its own client port and data
    directory: node 1's controller address is taken, so it exits naming it."""
    rogue = cluster.add_node(1, rack="rack-rogue")
    rogue.launch()
    try:
        assert rogue.wait_exit(20) == 1, rogue.tail()
        assert f"{HOST}:{cluster.nodes[1].controller_port}" in rogue.tail().splitlines()[-1]
        _rogue_watch(cluster, rogue)
    finally:
        rogue.stop(kill=True)
    _still_works(cluster)
