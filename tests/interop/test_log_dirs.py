"""DescribeLogDirs (35): kafka-python's admin describe_log_dirs and `minibroker log-dirs
describe` (kafka-log-dirs.sh's JSON) see the broker's one log directory and its replicas
with their sizes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kafka import KafkaAdminClient

from tests.interop.librdkafka import create_topic, produce
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
