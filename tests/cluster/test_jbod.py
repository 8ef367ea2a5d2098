"""A failed log directory on one node of three (JBOD, issue 27): node 0's second log
directory is a small tmpfs that fills up under a producer; that directory goes offline
alone. Its replicas' leaderships move and node 0 leaves their ISRs (the controller knows
which replicas were there from AssignReplicasToDirs), while node 0 keeps serving the
partitions of its other directory; DescribeLogDirs names the failed one with
KAFKA_STORAGE_ERROR; and a history check finds every acknowledged record.

The tmpfs is mounted by the test (root may mount on these machines; if mount fails the
test fails saying so, it is never skipped).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from tests.cluster import confluent
from tests.cluster.harness import FAST, Cluster
from tests.cluster.test_replication import (
    History, check_history, producer, read_all, wait_full_isr,
)
from tests.util import mounted_tmpfs, unique

pytestmark = pytest.mark.interop

PARTITIONS = 6
VALUE_PAD = "x" * 8000  # big records: the 3 MiB tmpfs fills within a few hundred


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    with mounted_tmpfs(tmp_path, "3m") as mountpoint:
        yield mountpoint


def _described(bootstrap: str, broker_id: int) -> dict[str, tuple[int, set[int]]]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        [b] = admin.describe_log_dirs(brokers=[broker_id])
    finally:
        admin.close()
    return {d["log_dir"]: (d["error_code"], {p["partition_index"] for t in d["topics"]
                                             for p in t["partitions"]})
            for d in b["log_dirs"]}


def test_a_full_directory_goes_offline_alone_and_nothing_acknowledged_is_lost(
        tmp_path, small_tmpfs):
    cluster = Cluster(tmp_path / "cluster", 3, FAST)
    for node in cluster.nodes:
        second = small_tmpfs if node.node_id == 0 else node.base_dir / "data-b"
        node.args = ["--data-dir", f"{node.data_dir},{second}"]
    cluster.start()
    try:
        topic = unique("jbod")
        confluent.create_topic(cluster.bootstrap, topic, PARTITIONS, 3,
                               config={"min.insync.replicas": "2"})
        wait_full_isr(cluster, topic, PARTITIONS)
        node0 = cluster.node(0)
        on_tmpfs = cluster.wait_for(
            lambda: _described(node0.bootstrap, 0).get(str(small_tmpfs), (0, set()))[1] or None,
            30, "node 0 placing some partitions on its second directory")
        assert 0 < len(on_tmpfs) < PARTITIONS  # fewest partitions first: both directories

        history = History()
        p = producer(cluster.bootstrap)
        seq = 0

        def send(count: int) -> None:
            nonlocal seq
            for _ in range(count):
                key = f"k{seq % PARTITIONS}"  # one key a partition: its order is the log's
                while True:
                    try:
                        p.produce(topic, key=key, value=f"{key}-{seq}-{VALUE_PAD}",
                                  partition=seq % PARTITIONS,
                                  on_delivery=history.on_delivery)
                        break
                    except BufferError:
                        p.poll(0.05)
                p.poll(0)
                seq += 1

        def failed() -> bool:
            error, _ = _described(node0.bootstrap, 0)[str(small_tmpfs)]
            return error == 56  # KAFKA_STORAGE_ERROR

        while not failed():
            send(100)
            p.flush(60)
            assert seq < 5000, "the 3 MiB directory never filled up"
        send(600)  # and writes go on, to every partition
        assert p.flush(90) == 0

        # node 0 is up; it left the failed directory's partitions, not the others
        def moved() -> bool:
            view = cluster.partitions(1, topic)
            return all((0 not in v.isr_nodes and v.leader_id != 0) == (i in on_tmpfs)
                       for i, v in view.items())
        cluster.wait_for(moved, 30, "the failed directory's leaderships and ISR places moved")
        assert node0.running
        described = _described(node0.bootstrap, 0)
        assert described[str(small_tmpfs)] == (56, set())
        [(error, held)] = [v for d, v in described.items() if d != str(small_tmpfs)]
        assert error == 0 and held == set(range(PARTITIONS)) - on_tmpfs

        assert history.count >= 600
        check_history(history, read_all(cluster.bootstrap, topic, history.count, timeout_s=90))
    finally:
        cluster.stop_all()
