"""Changing the controller quorum (KIP-853) on real processes: three combined nodes started
with controller.quorum.bootstrap.servers (a dynamic quorum), a fourth node started with
process.roles=controller that joins as an observer, `minibroker metadata-quorum
add-controller` making it a voter and `remove-controller` removing the active controller,
while a producer writes with acks=all; every acknowledged record is read back afterwards.
Bad requests (removing a voter that is not there, one with another directory id, adding a
voter twice) answer Kafka's error and change nothing."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.cluster import HOST, quorum
from harness.ports import free_port
from tests.cluster.harness import FAST, Cluster
from tests.interop.librdkafka import consume_all
from tests.util import unique

pytestmark = pytest.mark.interop

ZERO_DIRECTORY = "AAAAAAAAAAAAAAAAAAAAAA"  # the voters a dynamic quorum starts with


def tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True,
                          text=True, timeout=90)


def voters_of(cluster: Cluster) -> list[int] | None:
    for n in cluster.running():
        try:
            q = quorum(n.controller_port)
        except Exception:  # noqa: BLE001  that node is restarting: ask the next
            continue
        if q.error_code == 0 and q.leader_id >= 0:
            return sorted(v.replica_id for v in q.current_voters)
    return None


class Writer:
    """A producer writing one record after another with acks=all until stopped; what it
    was acknowledged is `acked`."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "linger.ms": 2, "message.timeout.ms": 60_000})
        self.topic = topic
        self.acked: list[int] = []
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        def on_delivery(err, msg):
            if err:
                self.failed.append(str(err))
            else:
                self.acked.append(int(msg.value()))
        i = 0
        while not self.stop.is_set():
            self.producer.produce(self.topic, value=str(i).encode(), on_delivery=on_delivery)
            self.producer.poll(0.01)
            i += 1
        self.producer.flush(60)

    def __enter__(self) -> "Writer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(90)


def test_a_controller_is_added_and_another_removed_under_writes(tmp_path):
    cluster = Cluster(tmp_path / "cluster", 3, FAST)
    bootstrap_servers = ",".join(f"{HOST}:{n.controller_port}" for n in cluster.nodes)
    for n in cluster.nodes:
        n.overrides["controller.quorum.bootstrap.servers"] = bootstrap_servers
    try:
        cluster.start()
        cluster.wait_formed()
        assert cluster.wait_for(lambda: voters_of(cluster), 30, "no leader") == [0, 1, 2]
        topic = unique("reconfig")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=15)

        # a controller-only node, started with the bootstrap servers: an observer
        port = free_port(HOST)
        new = cluster.add_node(3, voters="", roles="controller", port=port, controller_port=port,
                               overrides={"listeners": f"CONTROLLER://{HOST}:{port}",
                                          "controller.quorum.bootstrap.servers":
                                              bootstrap_servers})
        new.start()
        props = tmp_path / "controller.properties"
        props.write_text(f"node.id=3\nprocess.roles=controller\nlog.dirs={new.data_dir}\n"
                         f"listeners=CONTROLLER://{HOST}:{port}\n"
                         "controller.listener.names=CONTROLLER\n")
        with Writer(cluster.bootstrap, topic) as writer:
            cluster.wait_for(lambda: len(writer.acked) > 20 or None, 30, "no writes acked")
            done = tool("metadata-quorum", "--bootstrap-server", cluster.bootstrap,
                        "add-controller", "--command-config", str(props), "--timeout", "60000")
            assert done.returncode == 0, done
            assert done.stdout.startswith("Added controller 3 with directory id ")
            assert voters_of(cluster) == [0, 1, 2, 3]

            # bad requests: Kafka's codes, nothing changed
            twice = tool("metadata-quorum", "--bootstrap-server", cluster.bootstrap,
                         "add-controller", "--command-config", str(props))
            assert twice.returncode == 1 and "DUPLICATE_VOTER" in twice.stderr, twice
            for victim, directory in ((7, ZERO_DIRECTORY), (1, "AAAAAAAAAAAAAAAAAAAAAQ")):
                refused = tool("metadata-quorum", "--bootstrap-server", cluster.bootstrap,
                               "remove-controller", "--controller-id", str(victim),
                               "--controller-directory-id", directory)
                assert refused.returncode == 1 and "VOTER_NOT_FOUND" in refused.stderr, refused
            assert voters_of(cluster) == [0, 1, 2, 3]

            # the active controller removes itself: it leads until that commits, then hands
            # the quorum over and stays a broker
            leader = cluster.wait_controller()
            done = tool("metadata-quorum", "--bootstrap-server", cluster.bootstrap,
                        "remove-controller", "--controller-id", str(leader),
                        "--controller-directory-id", ZERO_DIRECTORY)
            assert done.returncode == 0, done
            remaining = sorted({0, 1, 2, 3} - {leader})
            cluster.wait_for(lambda: voters_of(cluster) == remaining or None, 30,
                             "the voters did not become " + str(remaining))
            cluster.wait_controller(30, other_than=leader)
            before = len(writer.acked)
            cluster.wait_for(lambda: len(writer.acked) > before + 20 or None, 30,
                             "no writes acked after the change")
        assert writer.failed == []
        status = tool("metadata-quorum", "--bootstrap-server", cluster.bootstrap,
                      "describe", "--status")
        assert f"CurrentVoters:          [{','.join(map(str, remaining))}]" in status.stdout
        got = consume_all(cluster.bootstrap, topic, 1, len(writer.acked), timeout_s=60)
        assert set(writer.acked) <= {int(m.value()) for m in got}
    finally:
        cluster.stop_all()
