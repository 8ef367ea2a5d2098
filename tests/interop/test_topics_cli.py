"""`minibroker topics` (tools/topics.py) run as a subprocess against the real broker, its
results cross-checked with confluent-kafka's AdminClient: create with configs, list (with
__consumer_offsets, as kafka-topics lists it), describe in kafka-topics' format, alter,
delete, and each Kafka error as one line and exit status 1."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.interop.conftest import REPO_ROOT, free_port
from tests.util import unique

pytestmark = pytest.mark.interop


def topics(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", "topics", *args,
                           "--bootstrap-server", bootstrap],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def ok(bootstrap: str, *args: str) -> str:
    done = topics(bootstrap, *args)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def fails(bootstrap: str, error: str, *args: str) -> str:
    done = topics(bootstrap, *args)
    assert (done.returncode, done.stdout) == (1, ""), done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        f"minibroker topics: {error}: "), done.stderr
    return done.stderr


def test_create_with_configs_is_what_a_real_client_sees(shared_broker):
    bs = shared_broker.bootstrap
    name = unique("tc-orders")
    out = ok(bs, "create", name, "--partitions", "3", "--replication-factor", "1",
             "--config", "cleanup.policy=compact", "--config", "retention.ms=60000")
    assert out == f"Created topic {name}.\n"

    admin = AdminClient({"bootstrap.servers": bs})
    metadata = admin.list_topics(timeout=10)
    assert sorted(metadata.topics[name].partitions) == [0, 1, 2]
    resource = ConfigResource("topic", name)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert {k: v.value for k, v in configs.items() if not v.is_default} == {
        "cleanup.policy": "compact", "retention.ms": "60000"}

    described = ok(bs, "describe", name).splitlines()
    head = described[0].split("\t")
    assert head[0] == f"Topic: {name}" and head[1].startswith("TopicId: ")
    assert len(head[1].removeprefix("TopicId: ")) == 22  # Kafka's base64 Uuid
    assert head[2:] == ["PartitionCount: 3", "ReplicationFactor: 1",
                        "Configs: cleanup.policy=compact,retention.ms=60000"]
    assert described[1:] == [f"\tTopic: {name}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0"
                             for p in range(3)]
    assert ok(bs, "describe", name, "--under-replicated-partitions") == ""


def test_alter_grows_and_delete_removes(shared_broker):
    bs = shared_broker.bootstrap
    name = unique("tc-grow")
    ok(bs, "create", name, "--partitions", "1")
    assert ok(bs, "alter", name, "--partitions", "4") == ""
    admin = AdminClient({"bootstrap.servers": bs})
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 4
    fails(bs, "INVALID_PARTITIONS", "alter", name, "--partitions", "2")
    assert name in ok(bs, "list").splitlines()
    assert ok(bs, "delete", name) == ""
    assert name not in ok(bs, "list").splitlines()
    assert name not in admin.list_topics(timeout=10).topics


def test_list_is_sorted_and_shows_internal_topics_like_kafka(shared_broker):
    bs = shared_broker.bootstrap
    names = [unique("tc-b"), unique("tc-a")]
    for n in names:
        ok(bs, "create", n, "--partitions", "1")
    group = unique("tc-group")
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:  # a commit makes the broker create __consumer_offsets, as Kafka's does
        consumer.commit(offsets=[TopicPartition(names[0], 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    listed = ok(bs, "list").splitlines()
    assert listed == sorted(listed) and set(names) <= set(listed)
    assert "__consumer_offsets" in listed
    assert "__consumer_offsets" not in ok(bs, "list", "--exclude-internal").splitlines()
    head = ok(bs, "describe", "__consumer_offsets").splitlines()[0]
    assert "\tPartitionCount: 50\t" in head and "cleanup.policy=compact" in head
    everything = ok(bs, "describe").splitlines()
    tops = [line.split("\t")[0].removeprefix("Topic: ") for line in everything
            if line.startswith("Topic: ")]
    assert tops == listed


def test_kafka_errors_are_one_line_and_exit_1(shared_broker):
    bs = shared_broker.bootstrap
    name = unique("tc-err")
    ok(bs, "create", name, "--partitions", "1")
    assert name in fails(bs, "TOPIC_ALREADY_EXISTS", "create", name, "--partitions", "1")
    assert ok(bs, "create", name, "--partitions", "1", "--if-not-exists") == ""
    other = unique("tc-bad")
    message = fails(bs, "INVALID_CONFIG", "create", other, "--partitions", "1",
                    "--config", "retention.ms=soon")
    assert "retention.ms" in message and "soon" in message
    fails(bs, "INVALID_CONFIG", "create", other, "--partitions", "1", "--config", "no.such=1")
    fails(bs, "INVALID_PARTITIONS", "create", other, "--partitions", "0")
    fails(bs, "INVALID_REPLICATION_FACTOR", "create", other, "--partitions", "1",
          "--replication-factor", "3")
    assert other not in ok(bs, "list").splitlines()  # none of those created it
    missing = unique("tc-never")
    fails(bs, "UNKNOWN_TOPIC_OR_PARTITION", "describe", missing)
    fails(bs, "UNKNOWN_TOPIC_OR_PARTITION", "delete", missing)
    fails(bs, "UNKNOWN_TOPIC_OR_PARTITION", "alter", missing, "--partitions", "3")
    assert ok(bs, "delete", missing, "--if-exists") == ""
    assert "internal" in fails(bs, "INVALID_REQUEST", "delete", "__consumer_offsets")


def test_bad_options_exit_2_and_an_unreachable_broker_exits_1(shared_broker):
    done = topics(shared_broker.bootstrap, "create", unique("tc-opt"), "--config", "oops")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "key=val" in done.stderr
    port = free_port()
    done = topics(f"127.0.0.1:{port}", "list")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"minibroker topics: cannot connect to 127.0.0.1:{port}: "
                           "Connection refused\n")


def test_bootstrap_server_may_come_before_the_action(shared_broker):
    """kafka-topics.sh --bootstrap-server H:P --list: the option ahead of the action."""
    name = unique("tc-first")
    done = subprocess.run([sys.executable, "-m", "tools.cli", "topics", "--bootstrap-server",
                           shared_broker.bootstrap, "create", name, "--partitions", "1"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"Created topic {name}.\n"), done.stderr
    done = subprocess.run([sys.executable, "-m", "tools.cli", "topics", "list"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--bootstrap-server" in done.stderr
