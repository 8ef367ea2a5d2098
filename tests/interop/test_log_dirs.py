"""DescribeLogDirs (35) and AlterReplicaLogDirs (34): kafka-python's admin
describe_log_dirs and `minibroker log-dirs describe` (kafka-log-dirs.sh's JSON) see the
broker's log directories and their replicas with their sizes; on a broker with two
directories kafka-python's alter_replica_log_dirs moves a replica while librdkafka
produces to it, and nothing acknowledged is lost."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import confluent_kafka
import pytest
from kafka import KafkaAdminClient

from harness.broker import BrokerProcess
from harness.wait import wait_until
from tests.interop.librdkafka import consume_all, create_topic, produce
from tests.util import unique

pytestmark = pytest.mark.interop


def test_kafka_python_and_the_tool_describe_the_log_directory(shared_broker):
    topic = unique("log-dirs")
    create_topic(shared_broker.bootstrap, topic, 2)
    produce(shared_broker.bootstrap, topic, [(None, b"x" * 100, None, 0) for _ in range(10)])
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        [broker] = admin.describe_log_dirs(topic_partitions=[topic])
    finally:
        admin.close()
    text = json.dumps(broker, default=str)
    assert topic in text, text

    done = subprocess.run([sys.executable, "-m", "cli", "log-dirs", "describe",
                           "--bootstrap-server", shared_broker.bootstrap,
                           "--topic-list", topic], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    doc = json.loads(lines[2])
    [b] = doc["brokers"]
    [d] = b["logDirs"]
    assert d["error"] is None and d["logDir"].startswith("/")
    sizes = {p["partition"]: p["size"] for p in d["partitions"]}
    assert set(sizes) == {f"{topic}-0", f"{topic}-1"}
    assert sizes[f"{topic}-0"] > 1000 and sizes[f"{topic}-1"] == 0
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in d["partitions"])


@pytest.fixture
def two_dir_broker(tmp_path):
    """A broker on two log directories (--data-dir takes log.dirs' comma-separated list)."""
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    b = BrokerProcess(tmp_path, data_dir=d0, args=["--data-dir", f"{d0},{d1}"])
    try:
        yield b.start(), str(d0), str(d1)
    finally:
        b.stop()


def _where(admin: KafkaAdminClient, topic: str) -> dict[str, list[tuple[int, bool]]]:
    [broker] = admin.describe_log_dirs(topic_partitions=[topic])
    return {d["log_dir"]: sorted((p["partition_index"], p["is_future_key"])
                                 for t in d["topics"] for p in t["partitions"]
                                 if t["name"] == topic)
            for d in broker["log_dirs"]}


def test_kafka_python_moves_a_replica_while_librdkafka_produces(two_dir_broker):
    """alter_replica_log_dirs moves the replica while a producer keeps writing; afterwards
    describe_log_dirs (and the tool) shows it in its new directory and a consumer reads
    every acknowledged record, in order."""
    broker, d0, d1 = two_dir_broker
    topic = unique("jbod")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [(None, b"a%05d" % i, None, 0) for i in range(2000)])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        placed = _where(admin, topic)
        source = next(d for d, ps in placed.items() if ps)
        target = d1 if source == d0 else d0
        stop = threading.Event()
        acked: dict[int, bytes] = {}  # offset -> value of each record acknowledged

        def keep_producing() -> None:
            p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
            i = 0
            while not stop.is_set():
                p.produce(topic, b"b%05d" % i, partition=0, on_delivery=lambda err, msg: (
                    acked.__setitem__(msg.offset(), msg.value()) if err is None else None))
                p.poll(0)
                i += 1
                if i % 50 == 0:
                    p.flush(10)
            p.flush(10)

        worker = threading.Thread(target=keep_producing)
        worker.start()
        try:
            wait_until(lambda: len(acked) > 100, 30, message="the producer's first acks")
            result = admin.alter_replica_log_dirs({(topic, 0, 0): target})
            assert [e.__name__ for e in result.values()] == ["NoError"]
            wait_until(lambda: _where(admin, topic).get(target) == [(0, False)], 30,
                       message="the replica in its new directory")
            mark = len(acked)
            wait_until(lambda: len(acked) > mark + 100, 30, message="acks after the move")
        finally:
            stop.set()
            worker.join(30)
        assert _where(admin, topic)[source] == []
        # a move to a directory the broker does not have: LOG_DIR_NOT_FOUND, nothing moves
        result = admin.alter_replica_log_dirs({(topic, 0, 0): "/not/a/log/dir"})
        assert [e.__name__ for e in result.values()] == ["LogDirNotFoundError"]
        assert _where(admin, topic)[target] == [(0, False)]
    finally:
        admin.close()
    total = max(acked) + 1  # offsets are dense: everything below the last ack is there
    consumed = {m.offset(): m.value() for m in consume_all(broker.bootstrap, topic, 1, total)}
    assert [consumed[i] for i in range(2000)] == [b"a%05d" % i for i in range(2000)]
    assert all(consumed[o] == v for o, v in acked.items())

    done = subprocess.run([sys.executable, "-m", "cli", "log-dirs", "describe",
                           "--bootstrap-server", broker.bootstrap, "--topic-list", topic],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [b] = json.loads(done.stdout.splitlines()[2])["brokers"]
    assert {d["logDir"]: [p["partition"] for p in d["partitions"]] for d in b["logDirs"]} == {
        source: [], target: [f"{topic}-0"]}


def test_reassign_partitions_moves_replicas_by_their_log_dirs(two_dir_broker, tmp_path):
    """kafka-reassign-partitions.sh's file with "log_dirs": --execute starts the moves
    (AlterReplicaLogDirs), --verify says when each replica is in its directory; a path the
    broker does not have fails with one line and moves nothing."""
    broker, d0, d1 = two_dir_broker
    topic = unique("reassign-dirs")
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, [(None, b"v" * 50, None, p) for p in (0, 1) * 100])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        before = _where(admin, topic)
        # each partition to the directory it is not in
        targets = {p: (d1 if (p, False) in before[d0] else d0) for p in (0, 1)}
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": p, "replicas": [0], "log_dirs": [targets[p]]}
            for p in (0, 1)]}))

        def tool(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "cli", "reassign-partitions",
                                   "--bootstrap-server", broker.bootstrap, *args],
                                  capture_output=True, text=True, timeout=60)

        done = tool("--execute", "--reassignment-json-file", str(plan))
        assert done.returncode == 0, done.stderr
        assert "Successfully started log directory move for: " in done.stdout
        assert f"{topic}-0-0" in done.stdout and f"{topic}-1-0" in done.stdout

        def verified() -> bool:
            return tool("--verify", "--reassignment-json-file", str(plan)).returncode == 0
        wait_until(verified, 30, interval_s=0.5, message="--verify to report the moves done")
        out = tool("--verify", "--reassignment-json-file", str(plan)).stdout
        assert f"Reassignment of replica {topic}-0-0 is completed." in out
        after = _where(admin, topic)
        assert all((p, False) in after[targets[p]] for p in (0, 1))

        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [0], "log_dirs": ["/not/ours"]}]}))
        done = tool("--execute", "--reassignment-json-file", str(plan))
        assert done.returncode == 1 and "LogDirNotFound" in done.stderr, done.stderr
        assert _where(admin, topic) == after
    finally:
        admin.close()
