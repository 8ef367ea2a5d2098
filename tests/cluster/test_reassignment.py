"""Partition reassignment (KIP-455) on three nodes with kafka-python's admin client: a
partition of one replica moves to the two other brokers while a producer writes to it with
acks=all; the reassignment lists its adding and removing replicas while it runs and
nothing once done; every acknowledged record is read back from the new replicas, and the
broker it left no longer holds the replica. Bad requests answer Kafka's codes and change
nothing."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError

from tests.cluster import confluent
from tests.interop.kafkapython import consume_all
from tests.interop.librdkafka import create_topic, produce
from tests.util import unique

pytestmark = pytest.mark.interop


def test_a_partition_moves_to_other_brokers_under_writes(cluster):
    topic = unique("reassign")
    create_topic(cluster.bootstrap, topic, 1)  # one replica
    before = confluent.partitions(cluster.bootstrap, topic)[0]
    [old] = before.replicas
    target = sorted(b for b in (0, 1, 2) if b != old)
    sent = produce(cluster.bootstrap, topic, [(None, str(i).encode(), None) for i in range(50)],
                   acks="all")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    tp = KTopicPartition(topic, 0)
    try:
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
        sent += produce(cluster.bootstrap, topic,
                        [(None, str(i).encode(), None) for i in range(50, 100)], acks="all")

        def moved():
            p = confluent.partitions(cluster.bootstrap, topic)[0]
            done = sorted(p.replicas) == target and not admin.list_partition_reassignments()
            return p if done and p.leader in target else None
        after = cluster.wait_for(moved, 60, "the reassignment did not complete")
        assert sorted(after.isrs) == target
        # bad requests: refused one by one, nothing changed
        refused = admin.alter_partition_reassignments({tp: [target[0], target[0]]})
        assert refused[tp] is InvalidReplicationAssignmentError
        assert admin.alter_partition_reassignments({tp: [99]})[tp] is InvalidReplicationAssignmentError
        assert admin.alter_partition_reassignments({tp: None})[tp] is NoReassignmentInProgressError
        assert sorted(confluent.partitions(cluster.bootstrap, topic)[0].replicas) == target
    finally:
        admin.close()
    got = consume_all(cluster.bootstrap, topic, 1, len(sent))
    assert sorted(int(m.value) for m in got) == list(range(100))
    cluster.wait_for(lambda: not (cluster.node(old).data_dir / f"{topic}-0").exists() or None,
                     30, "the old replica's log was not removed")


def test_the_tool_generates_executes_verifies_and_cancels(cluster, tmp_path):
    import json
    import subprocess
    import sys
    topic = unique("reassign-tool")
    create_topic(cluster.bootstrap, topic, 2)  # one replica each

    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cli", "reassign-partitions", *args,
                               "--bootstrap-server", cluster.bootstrap],
                              capture_output=True, text=True, timeout=60)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generated = tool("--generate", "--topics-to-move-json-file", str(topics),
                     "--broker-list", "1,2")
    assert generated.returncode == 0, generated.stderr
    # one broker a rack: ignoring racks proposes the same
    assert tool("--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "1,2",
                "--disable-rack-aware").stdout == generated.stdout
    current = json.loads(generated.stdout.splitlines()[1])
    proposed = json.loads(generated.stdout.splitlines()[-1])
    before = {p["partition"]: p["replicas"] for p in current["partitions"]}
    after = {p["partition"]: p["replicas"] for p in proposed["partitions"]}
    # one replica on each of 1 and 2, and a partition already on one of them stays
    assert sorted(after.values()) == [[1], [2]]
    assert all(after[i] == r for i, r in before.items() if r[0] in (1, 2)
               and sum(q == r for q in before.values()) == 1)
    for brokers, said in (("1,7", "not running: [7]"), ("1,1", "repeats a broker")):
        refused = tool("--generate", "--topics-to-move-json-file", str(topics),
                       "--broker-list", brokers)
        assert refused.returncode == 1 and said in refused.stderr, refused
    # a two-replica topic onto one broker: its replication factor does not fit
    wide = unique("reassign-wide")
    confluent.create_topic(cluster.bootstrap, wide, 1, 2)
    topics_wide = tmp_path / "wide.json"
    topics_wide.write_text(json.dumps({"version": 1, "topics": [{"topic": wide}]}))
    refused = tool("--generate", "--topics-to-move-json-file", str(topics_wide),
                   "--broker-list", "1")
    assert refused.returncode == 1 and "more than the 1 brokers" in refused.stderr, refused
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(proposed))
    done = tool("--execute", "--reassignment-json-file", str(plan))
    assert done.returncode == 0, done.stderr
    assert f"Successfully started partition reassignment for {topic}-0" in done.stdout
    cluster.wait_for(lambda: tool("--verify", "--reassignment-json-file",
                                  str(plan)).returncode == 0 or None, 60, "not completed")
    assert {i: p.replicas for i, p in confluent.partitions(cluster.bootstrap, topic).items()} \
        == after
    cancelled = tool("--cancel", "--reassignment-json-file", str(plan))
    assert cancelled.returncode == 1 and "NoReassignmentInProgress" in cancelled.stderr, \
        cancelled.stderr
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [7]}]}))
    refused = tool("--execute", "--reassignment-json-file", str(plan))
    assert refused.returncode == 1 and "InvalidReplicaAssignment" in refused.stderr, \
        refused.stderr


def test_a_throttled_move_sets_the_throttles_and_verify_clears_them(cluster, tmp_path):
    """--execute --throttle sets KIP-73's configs as kafka-reassign-partitions does (the rate
    on the brokers of the move, the replicas read from and added on the topic); the move
    completes under it, and --verify clears them once done. confluent-kafka reads them."""
    import json
    import subprocess
    import sys
    from confluent_kafka.admin import AdminClient, ConfigResource
    topic = unique("reassign-throttled")
    create_topic(cluster.bootstrap, topic, 1)
    [old] = confluent.partitions(cluster.bootstrap, topic)[0].replicas
    new = (old + 1) % 3
    payload = b"x" * 10_000
    sent = produce(cluster.bootstrap, topic, [(None, payload, None)] * 200, acks="all")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [new]}]}))

    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cli", "reassign-partitions", *args,
                               "--reassignment-json-file", str(plan),
                               "--bootstrap-server", cluster.bootstrap],
                              capture_output=True, text=True, timeout=60)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def configs(kind, name, keys):
        [future] = admin.describe_configs([ConfigResource(kind, name)]).values()
        entries = future.result(timeout=30)
        return {k: entries[k].value for k in keys}
    throttled = ("leader.replication.throttled.replicas",
                 "follower.replication.throttled.replicas")
    rates = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
    started = tool("--execute", "--throttle", "1000000")
    assert started.returncode == 0, started.stderr
    assert "The inter-broker throttle limit was set to 1000000 B/s" in started.stdout
    assert configs("topic", topic, throttled) == {throttled[0]: f"0:{old}",
                                                  throttled[1]: f"0:{new}"}
    for broker in (old, new):
        assert configs("broker", str(broker), rates) == dict.fromkeys(rates, "1000000")
    verified = cluster.wait_for(
        lambda: (r := tool("--verify")).returncode == 0 and r or None, 90, "not completed")
    assert "Clearing broker-level throttles on brokers 0,1,2" in verified.stdout
    assert configs("topic", topic, throttled) == dict.fromkeys(throttled, None)
    assert configs("broker", str(new), rates) == dict.fromkeys(rates, "9223372036854775807")
    assert confluent.partitions(cluster.bootstrap, topic)[0].replicas == [new]
    got = consume_all(cluster.bootstrap, topic, 1, len(sent))
    assert len(got) == len(sent) and all(m.value == payload for m in got)
