"""A broker's data directory fails in a three-node cluster: the leader of a partition gets
EIO on its log (fault_injection/sitecustomize.py, loaded into every node, arms itself on
the directory a trigger file names), answers KAFKA_STORAGE_ERROR, reports the directory
offline in its next heartbeat, and the controller moves the leadership to another
in-sync replica while the broker stays up and registered. Leadership is asserted, not
data: replicating partition data to followers is not part of this branch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.raw import call
from broker.events import read_events
from protocol.errors import ErrorCode
from protocol.messages import CREATE_TOPICS, PRODUCE
from protocol.records import Record, encode_batch
from tests.interop.conftest import REPO_ROOT
from tests.util import unique

pytestmark = pytest.mark.interop

FAULT_INJECTION = Path(__file__).resolve().parent / "fault_injection"
MOVE_TIMEOUT_S = 10.0  # a heartbeat (300 ms in FAST) and a metadata commit, with room


@pytest.fixture
def trigger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The nodes started from here load the fault injection; write a directory into the
    returned path (atomically) to fail it."""
    path = tmp_path / "fail-this-directory"
    paths = [str(FAULT_INJECTION), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.setenv("MINIBROKER_TEST_FAULT_TRIGGER", str(path))
    return path


def _produce(port: int, topic: str, acks: int = 1) -> int:
    batch = encode_batch([Record(0, 1_000, b"k", b"v" * 100, [])])
    body = call(port, PRODUCE, 9, {"acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return body.responses[0].partition_responses[0].error_code


def test_a_failed_log_directory_moves_its_leaderships_to_other_brokers(make_cluster, trigger):
    cluster = make_cluster()
    cluster.wait_formed()
    topic = unique("failing-dir")
    created = call(cluster.nodes[0].port, CREATE_TOPICS, 5, {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 3, "assignments": [],
        "configs": []}], "timeout_ms": 10000})
    assert created.topics[0].error_code == ErrorCode.NONE
    def agreed() -> tuple[int] | None:  # a tuple: node 0 may lead
        views = {cluster.leaders(n.node_id, topic).get(0, -1) for n in cluster.nodes}
        return (views.pop(),) if len(views) == 1 and -1 not in views else None

    [leader] = cluster.wait_for(agreed, 10, f"every node to name one leader of {topic}-0")
    node = cluster.nodes[leader]
    assert _produce(node.port, topic) == ErrorCode.NONE

    partition_dir = node.data_dir / f"{topic}-0"
    assert partition_dir.is_dir()
    pending = trigger.with_suffix(".tmp")
    pending.write_text(str(partition_dir))
    os.replace(pending, trigger)

    assert _produce(node.port, topic) == ErrorCode.KAFKA_STORAGE_ERROR
    moved = cluster.wait_leaders_off(topic, leader, MOVE_TIMEOUT_S)
    new_leader = moved[0]
    assert new_leader != leader

    # the failed broker is still up and registered; it holds an offline replica now
    assert node.running
    for n in cluster.nodes:
        assert leader in cluster.brokers_seen(n.node_id)
        entry = cluster.partitions(n.node_id, topic)[0]
        assert leader not in entry.isr_nodes and leader in entry.offline_replicas
    # its replica answers KAFKA_STORAGE_ERROR (clients refresh metadata on it), and the
    # new leader takes the produce
    assert _produce(node.port, topic) == ErrorCode.KAFKA_STORAGE_ERROR
    assert _produce(cluster.nodes[new_leader].port, topic) == ErrorCode.NONE
    [event] = [e for e in read_events(node.data_dir) if e["type"] == "log_dir_failure"]
    assert f"{topic}-0" in event["replicas_held"] and "Input/output error" in event["reason"]
