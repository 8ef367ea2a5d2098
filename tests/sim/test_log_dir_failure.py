"""A broker's log directory fails in a three-node cluster: the leader of a partition gets
EIO on its log (the simulated disk's fault, broker.storage.SimulatedFileSystem.fail),
answers KAFKA_STORAGE_ERROR, reports the directory offline in its next heartbeat, and the
controller moves the leadership to another in-sync replica while the broker stays up and
registered.

Moved from tests/cluster (three processes and a sitecustomize that patched os calls): the
subject is the nodes' state, and the storage seam makes the failure the disk's own.
"""

from __future__ import annotations

from broker.events import read_events
from protocol.errors import ErrorCode
from protocol.messages import METADATA, PRODUCE
from protocol.records import Record, encode_batch
from sim.scenario import Scene, run_scenario

MOVE_TIMEOUT_S = 10.0  # a heartbeat (1 s in the simulation) and a metadata commit, with room


async def produce(scene: Scene, node_id: int, topic: str) -> int:
    batch = encode_batch([Record(0, 1_000, b"k", b"v" * 100, [])])
    body = await scene.call(node_id, PRODUCE, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}, version=9)
    return body.responses[0].partition_responses[0].error_code


def test_a_failed_log_directory_moves_its_leaderships_to_other_brokers():
    async def scenario(scene: Scene) -> None:
        topic = "failing-dir"
        await scene.create_topic(topic, 1)
        leader = scene.leader(topic, 0)
        assert leader is not None
        assert await produce(scene, leader, topic) == ErrorCode.NONE

        node = scene.node(leader)
        data_dir = node.config.log_dirs
        node.disk.fail("write", f"{data_dir}/{topic}-0")
        assert await produce(scene, leader, topic) == ErrorCode.KAFKA_STORAGE_ERROR
        new_leader = await scene.wait_for(
            lambda: (lead := scene.leader(topic, 0)) not in (None, leader) and lead,
            MOVE_TIMEOUT_S, f"the leadership of {topic}-0 off node {leader}")

        # the failed broker is still up and registered; it holds an offline replica now
        assert node.running and node.broker is not None
        assert node.broker.lifecycle.unfenced.is_set()
        for n in scene.world.nodes:
            body = await scene.call(n.node_id, METADATA, {"topics": [{"name": topic}]},
                                    version=9)
            assert leader in {b.node_id for b in body.brokers}
            [entry] = body.topics[0].partitions
            assert leader not in entry.isr_nodes and leader in entry.offline_replicas
        # its replica answers KAFKA_STORAGE_ERROR (clients refresh metadata on it), and the
        # new leader takes the produce
        assert await produce(scene, leader, topic) == ErrorCode.KAFKA_STORAGE_ERROR
        assert await produce(scene, new_leader, topic) == ErrorCode.NONE
        [event] = [e for e in read_events(data_dir, fs=node.disk)
                   if e["type"] == "log_dir_failure"]
        assert f"{topic}-0" in event["replicas_held"]
        assert "Input/output error" in event["reason"]

    run_scenario(3, 1, scenario)
