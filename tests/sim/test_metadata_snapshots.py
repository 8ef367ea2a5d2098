"""KRaft metadata snapshots across the cluster: while one node is stopped, the others write
snapshots of the metadata image and delete the log behind them; the node, restarted, finds
the leader's log starting above its own end, fetches the snapshot with FetchSnapshot, and
serves the metadata it missed: topics created, a topic deleted (its stray log gone from the
node's disk), a topic's configs changed.

Moved from tests/cluster (three processes, about 17 s): the subject is the metadata log
and the snapshots on each node's disk, run here on the simulated cluster.
"""

from __future__ import annotations

import logging
from pathlib import Path

from broker.controller.metadata_log import METADATA_LOG_DIR, list_snapshots
from client import AdminClient
from client.admin import AlterConfigOp, ConfigResource
from protocol import messages as m
from sim.scenario import Scene, run_scenario

SNAPSHOT_BYTES = 2048  # a few controller operations


def snapshot_ends(scene: Scene, node_id: int) -> list[int]:
    node = scene.node(node_id)
    directory = Path(node.config.log_dirs) / METADATA_LOG_DIR
    return [sid.end_offset for sid, _ in list_snapshots(directory, node.disk)]


def test_a_node_back_after_the_log_was_snapshotted_away_catches_up_by_fetch_snapshot(caplog):
    caplog.set_level(logging.INFO, logger="minibroker")

    async def scenario(scene: Scene) -> None:
        doomed, kept = "doomed", "kept"
        await scene.create_topic(doomed, 1)
        await scene.create_topic(kept, 1)
        controller = scene.active_controller()
        down = next(n.node_id for n in scene.world.nodes if n.node_id != controller)
        node = scene.node(down)
        doomed_dir = f"{node.config.log_dirs}/{doomed}-0"
        assert node.disk.isdir(doomed_dir)
        assert node.broker is not None and node.broker.runtime is not None
        await node.stop()  # as SIGTERM
        behind = node.broker.runtime.node.log.end_offset
        up = [n.node_id for n in scene.world.running()]

        created = [f"missed{i}" for i in range(12)]

        async def change() -> None:
            async with AdminClient(bootstrap_servers=scene.bootstrap) as admin:
                await admin.delete_topics([doomed])
                for name in created:
                    await scene.create_topic(name, 2, replication_factor=2)
                await admin.incremental_alter_configs({ConfigResource("topic", kept): [
                    AlterConfigOp("retention.ms", "123456")]})
        await scene.client(change, name="admin")
        # both running nodes snapshotted past what the stopped node holds, and so dropped
        # the log it would need to catch up entry by entry
        await scene.wait_for(lambda: all(max(snapshot_ends(scene, i), default=0) > behind
                                         for i in up), 30,
                             f"the running nodes to snapshot past offset {behind}")

        await scene.restart(down)

        async def caught_up() -> bool:
            body = await scene.call(down, m.METADATA, {"topics": None}, version=9)
            names = {t.name: len(t.partitions) for t in body.topics if t.error_code == 0}
            return (all(names.get(n) == 2 for n in created) and kept in names
                    and doomed not in names)
        await scene.wait_for(caught_up, 30, f"node {down}'s Metadata to list what it missed")
        assert max(snapshot_ends(scene, down)) > behind  # the snapshot it fetched, on disk
        assert not node.disk.exists(doomed_dir), "the deleted topic's log stayed on the node"
        # the topic config it missed: in its own DescribeConfigs answer
        body = await scene.call(down, m.DESCRIBE_CONFIGS, {"resources": [{
            "resource_type": 2, "resource_name": kept,
            "configuration_keys": ["retention.ms"]}], "include_synonyms": False}, version=1)
        [result] = body.results
        assert [(c.name, c.value) for c in result.configs] == [("retention.ms", "123456")]

    run_scenario(3, 1, scenario, overrides={
        "metadata.log.max.record.bytes.between.snapshots": str(SNAPSHOT_BYTES)})
    assert "installed the leader's metadata snapshot" in caplog.text
