"""KRaft metadata snapshots across real processes: while one node is stopped, the others
write snapshots of the metadata image and delete the log behind them; the node, restarted,
finds the leader's log starting above its own end, fetches the snapshot with FetchSnapshot,
and serves the metadata it missed: topics created, a topic deleted (its stray log gone from
the node's disk), a topic's configs changed."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from harness.raw import call
from broker.controller.metadata_log import METADATA_LOG_DIR, list_snapshots
from protocol import messages as m
from tests.cluster import confluent
from tests.cluster.harness import FAST, Cluster
from tests.cluster.test_replication import wait_full_isr
from tests.util import unique

pytestmark = pytest.mark.interop

SNAPSHOT_BYTES = 2048  # a few controller operations


def snapshot_ends(cluster: Cluster, node_id: int) -> list[int]:
    directory = cluster.node(node_id).data_dir / METADATA_LOG_DIR
    return [sid.end_offset for sid, _ in list_snapshots(directory)]


def log_end_seen_by_leader(cluster: Cluster, node_id: int) -> int:
    leader = cluster.wait_controller()
    quorum = cluster.quorum(leader)
    return next(v.log_end_offset for v in quorum.current_voters if v.replica_id == node_id)


def test_a_node_back_after_the_log_was_snapshotted_away_catches_up_by_fetch_snapshot(
        make_cluster):
    cluster = make_cluster(overrides={
        **FAST, "metadata.log.max.record.bytes.between.snapshots": SNAPSHOT_BYTES})
    cluster.wait_formed()
    doomed, kept = unique("doomed"), unique("kept")
    confluent.create_topic(cluster.bootstrap, doomed, 1, 3)
    confluent.create_topic(cluster.bootstrap, kept, 1, 3)
    wait_full_isr(cluster, doomed, 1)
    wait_full_isr(cluster, kept, 1)
    down = next(n.node_id for n in cluster.nodes if n.node_id != cluster.wait_controller())
    doomed_dir = cluster.node(down).data_dir / f"{doomed}-0"
    assert doomed_dir.exists()
    assert cluster.terminate(down) == 0
    behind = cluster.wait_for(lambda: log_end_seen_by_leader(cluster, down), 15,
                              "the leader to know the stopped node's log end")
    up = [n.node_id for n in cluster.running()]

    admin = confluent.admin(cluster.running()[0].bootstrap)
    admin.delete_topics([doomed], operation_timeout=10)[doomed].result(15)
    created = [unique(f"missed{i}") for i in range(12)]
    for name in created:
        confluent.create_topic(cluster.running()[0].bootstrap, name, 2, 2)
    resource = ConfigResource("TOPIC", kept, incremental_configs=[ConfigEntry(
        "retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    # both running nodes snapshotted past what the stopped node holds, and so dropped the
    # log it would need to catch up entry by entry
    cluster.wait_for(lambda: all(max(snapshot_ends(cluster, i), default=0) > behind
                                 for i in up), 30,
                     f"the running nodes to snapshot past offset {behind}")

    cluster.restart(down, kill=False)
    cluster.wait_formed()

    def caught_up() -> bool:
        names = {t.name for t in cluster.metadata(down).topics if t.error_code == 0}
        return set(created) | {kept} <= names and doomed not in names
    cluster.wait_for(caught_up, 30, f"node {down}'s Metadata to list what it missed")
    assert "installed the leader's metadata snapshot" in cluster.node(down).log_path.read_text()
    assert max(snapshot_ends(cluster, down)) > behind  # the snapshot it fetched, on disk
    assert not doomed_dir.exists(), "the deleted topic's log stayed on the restarted node"
    for name in created:
        assert len(cluster.partitions(down, name)) == 2
    # the topic config it missed: in its own DescribeConfigs answer
    body = call(cluster.node(down).port, m.DESCRIBE_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": kept, "configuration_keys": ["retention.ms"]}],
        "include_synonyms": False})
    [result] = body.results
    assert [(c.name, c.value) for c in result.configs] == [("retention.ms", "123456")]
