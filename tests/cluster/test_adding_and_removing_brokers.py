"""Adding and removing brokers (docs/BROKER.md, "Adding and removing brokers"), on real
processes under acks=all load from confluent-kafka: a fourth node joins a running
three-node cluster with the pinned command and `process.roles=broker`; `minibroker
reassign-partitions --generate --broker-list 0,1,2,3` moves an even share of the replicas
onto it and `--execute` / `--verify` carry the move out; then a combined node is
decommissioned: everything moved away (`--generate` without it), stopped, and
`minibroker cluster unregister --id N`. Nothing acknowledged is lost, the group's committed
offsets are intact, every ISR is whole again and DescribeCluster no longer lists the node."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from harness.cluster import metadata
from harness.raw import call
from protocol.messages import DESCRIBE_CLUSTER
from tests.cluster import confluent
from tests.cluster.harness import FAST, HOST, Cluster
from tests.interop.conftest import REPO_ROOT

pytestmark = pytest.mark.interop

TOPIC, GROUP, PARTITIONS = "orders", "billing", 6
JOINED_TOPIC = "after-join"  # created once the new broker is in
OFFSETS_TOPIC = "__consumer_offsets"
SETTINGS = {**FAST, "offsets.topic.num.partitions": 3, "min.insync.replicas": 2,
            "default.replication.factor": 3}
NEW, GONE = 3, 1  # the broker that joins, the one decommissioned


class AckedLoad:
    """confluent-kafka producing to every partition with acks=all (idempotent) in a thread,
    keeping each acknowledged (partition, offset) -> value until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5})
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked[(msg.partition(), msg.offset())] = msg.value()

    def _run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            for _ in range(10):
                self.producer.produce(TOPIC, value=str(seq).encode(), partition=seq % PARTITIONS,
                                      on_delivery=self._delivered)
                seq += 1
            self.producer.poll(0.05)
        self.producer.flush(30)

    def __enter__(self) -> "AckedLoad":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(40)

    def wait_for_more(self, cluster: Cluster, count: int, message: str) -> None:
        target = len(self.acked) + count
        cluster.wait_for(lambda: len(self.acked) >= target or None, 30, message)


def tool(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    if ok:
        assert done.returncode == 0, done
    return done


THROTTLE = 5_000_000  # bytes/s: the join's move under KIP-73's throttles, as an operator's


def reassign(cluster: Cluster, bootstrap: str, files: Path, topics: list[str],
             brokers: list[int], throttle: int | None = None) -> tuple[dict, dict]:
    """--generate, then --execute the proposal (under a replication throttle of `throttle`
    bytes/s if given), then --verify until done, which then clears the throttle: (current,
    proposed) as {(topic, partition): replicas}; the files are written under `files`."""
    files.mkdir()
    topics_file = files / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": t} for t in topics]}))
    out = tool("reassign-partitions", "--bootstrap-server", bootstrap, "--generate",
               "--topics-to-move-json-file", str(topics_file),
               "--broker-list", ",".join(map(str, brokers))).stdout.splitlines()
    assert out[0] == "Current partition replica assignment"
    assert out[3] == "Proposed partition reassignment configuration"
    current, proposed = (
        {(p["topic"], p["partition"]): p["replicas"] for p in json.loads(line)["partitions"]}
        for line in (out[1], out[4]))
    plan = files / "plan.json"
    plan.write_text(out[4])
    limit = [] if throttle is None else ["--throttle", str(throttle)]
    started = tool("reassign-partitions", "--bootstrap-server", bootstrap, "--execute",
                   "--reassignment-json-file", str(plan), *limit)
    if throttle is not None:
        assert f"throttle limit was set to {throttle} B/s" in started.stdout
    verified = cluster.wait_for(lambda: (r := tool(
        "reassign-partitions", "--bootstrap-server", bootstrap, "--verify",
        "--reassignment-json-file", str(plan), ok=False)).returncode == 0 and r or None,
        60, f"the reassignment onto {brokers} to complete")
    assert "Clearing broker-level throttles" in verified.stdout
    return current, proposed


def described(port: int) -> set[int]:
    """The brokers one node's DescribeCluster lists."""
    return {b.broker_id for b in call(port, DESCRIBE_CLUSTER, 1, {
        "include_cluster_authorized_operations": False, "endpoint_type": 1}).brokers}


def under_replicated(port: int) -> list:
    """(topic, partition) whose ISR is not all of its replicas, in one node's Metadata."""
    md = metadata(port, [TOPIC, OFFSETS_TOPIC, JOINED_TOPIC])
    return [(t.name, p.partition_index) for t in md.topics for p in t.partitions
            if sorted(p.isr_nodes) != sorted(p.replica_nodes)] + \
        [(t.name, -1) for t in md.topics if t.error_code != 0]


def committed(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed(
            [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)}
    finally:
        consumer.close()


def commit_some(bootstrap: str) -> dict[int, int]:
    """The group reads part of the topic and commits synchronously; what it committed."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])
        seen: set[int] = set()
        deadline = time.monotonic() + 30
        while len(seen) < PARTITIONS and time.monotonic() < deadline:
            msgs = consumer.consume(num_messages=100, timeout=1)
            assert all(m.error() is None for m in msgs), [m.error() for m in msgs]
            seen |= {m.partition() for m in msgs}
        assert len(seen) == PARTITIONS, f"read from partitions {seen} only"
        return {tp.partition: tp.offset for tp in consumer.commit(asynchronous=False)}
    finally:
        consumer.close()


def read_everything(bootstrap: str, ends: dict[int, int]) -> dict[tuple[int, int], bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "enable.auto.commit": False})
    got: dict[tuple[int, int], bytes] = {}
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while any(got_to(got, p) < end for p, end in ends.items()) and \
                time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                got[(m.partition(), m.offset())] = m.value()
    finally:
        consumer.close()
    return got


def got_to(got: dict, partition: int) -> int:
    return max((o + 1 for p, o in got if p == partition), default=0)


def test_a_broker_joins_takes_its_share_and_another_is_decommissioned(make_cluster, tmp_path):
    cluster = make_cluster(overrides=SETTINGS)
    cluster.wait_formed()
    confluent.create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3)
    with AckedLoad(cluster.bootstrap) as load:
        load.wait_for_more(cluster, 200, "the first acknowledgements")
        group_offsets = commit_some(cluster.bootstrap)
        assert sorted(group_offsets) == list(range(PARTITIONS))
        assert all(offset > 0 for offset in group_offsets.values())

        # a broker-only node joins with the pinned command: registered, unfenced, listed
        node = cluster.add_node(NEW, roles="broker", rack=f"rack-{NEW}")
        node.start()
        everyone = {n.node_id: (HOST, n.port, n.rack) for n in cluster.all_nodes()}
        cluster.wait_for(lambda: all(
            {b.node_id: (b.host, b.port, b.rack) for b in metadata(n.port).brokers}
            == everyone for n in cluster.all_nodes()) or None, 20,
            "every node's Metadata to list the new broker")
        assert NEW in confluent.describe_cluster(node.bootstrap)[2]
        with pytest.raises(OSError):  # a broker only: no controller listener
            socket.create_connection((HOST, node.controller_port), timeout=2).close()
        cluster.wait_for(lambda: NEW in [o.replica_id for o in cluster.quorum(
            cluster.wait_controller()).observers] or None, 20,
            "the active controller's DescribeQuorum to list the new broker as an observer")
        # a new topic's placement uses it
        confluent.create_topic(cluster.bootstrap, JOINED_TOPIC, 4, 3)
        assert any(NEW in p.replicas for p in
                   confluent.partitions(node.bootstrap, JOINED_TOPIC).values())

        # --generate spreads the replicas evenly onto it, moving only its share
        current, proposed = reassign(cluster, cluster.bootstrap, tmp_path / "join", [TOPIC],
                                     [0, 1, 2, NEW], throttle=THROTTLE)
        load.wait_for_more(cluster, 100, "acknowledgements after the move")
        moved = [(tp, set(proposed[tp]) - set(current[tp])) for tp in current]
        assert all(added <= {NEW} for _, added in moved)
        onto_new = [tp for tp, added in moved if added]
        counts = Counter(b for r in proposed.values() for b in r)
        # 18 replicas on 4 brokers: 5, 5, 4 and the new one's 4, each of them one move
        assert sorted(counts.values()) == [4, 4, 5, 5] and len(onto_new) == counts[NEW] == 4
        leaders = Counter(r[0] for r in proposed.values())
        assert max(leaders.values()) <= 2 and leaders[NEW] >= 1
        cluster.wait_for(lambda: {i: p.replicas for i, p in confluent.partitions(
            cluster.bootstrap, TOPIC).items()} == {p: proposed[(TOPIC, p)]
                                                    for p in range(PARTITIONS)} or None, 20,
            "Metadata to show the proposed replicas")
        assert (node.data_dir / f"{TOPIC}-{onto_new[0][1]}").is_dir()

        # decommission a node that is not the active controller: everything moves away
        gone = GONE if GONE != cluster.wait_controller() else 2
        rest = [b for b in (0, 1, 2, NEW) if b != gone]
        _, away = reassign(cluster, node.bootstrap, tmp_path / "leave",
                           [TOPIC, OFFSETS_TOPIC, JOINED_TOPIC], rest)
        assert all(gone not in r for r in away.values())
        load.wait_for_more(cluster, 100, "acknowledgements after the move away")
        # stopped, then unregistered: DescribeCluster lists it no more
        bootstrap = ",".join((node if b == NEW else cluster.node(b)).bootstrap for b in rest)
        assert cluster.terminate(gone) == 0
        done = tool("cluster", "unregister", "--bootstrap-server", bootstrap, "--id", str(gone))
        assert done.stdout == f"Broker {gone} is no longer registered.\n"
        live = [n for n in cluster.all_nodes() if n.running]
        cluster.wait_for(lambda: all(gone not in described(n.port) for n in live) or None, 20,
                         "DescribeCluster to stop listing the unregistered node")
        load.wait_for_more(cluster, 100, "acknowledgements after the unregistration")

    assert load.errors == []  # the load stopped and flushed: every acknowledgement is in
    again = tool("cluster", "unregister", "--bootstrap-server", bootstrap, "--id", str(gone),
                 ok=False)
    assert again.returncode == 1 and "BROKER_ID_NOT_REGISTERED" in again.stderr, again
    # bad input: a move onto the unregistered broker is refused and changes nothing
    before = confluent.partitions(bootstrap, TOPIC)[0].replicas
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [gone, NEW]}]}))
    refused = tool("reassign-partitions", "--bootstrap-server", bootstrap, "--execute",
                   "--reassignment-json-file", str(bad), ok=False)
    assert refused.returncode == 1 and "InvalidReplicaAssignment" in refused.stderr, refused
    assert confluent.partitions(bootstrap, TOPIC)[0].replicas == before

    # nothing acknowledged is lost, the group's offsets stand, every ISR is whole
    cluster.wait_for(lambda: all(not under_replicated(n.port) for n in live) or None, 30,
                     "every partition's ISR to hold all its replicas")
    ends = {p: got_to(load.acked, p) for p in range(PARTITIONS)}
    got = read_everything(bootstrap, ends)
    lost = {k: v for k, v in load.acked.items() if got.get(k) != v}
    assert not lost, f"{len(lost)} of {len(load.acked)} acknowledged records lost"
    assert committed(bootstrap) == group_offsets
