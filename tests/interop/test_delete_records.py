"""DeleteRecords (21) with real clients: kafka-python's and confluent-kafka's admin
delete_records, and `minibroker delete-records` (kafka-delete-records.sh's JSON file), on
one broker; what they delete stays deleted across a restart, and bad offsets and internal
topics answer Kafka's codes. The three-node case (followers take the leader's log start
offset) is tests/cluster/test_delete_records.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import OffsetOutOfRangeError

from tests.interop.librdkafka import create_topic, produce
from tests.interop.kafkapython import consume_all
from tests.util import unique

pytestmark = pytest.mark.interop


def earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe")})
    try:
        low, _high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return low
    finally:
        c.close()


@pytest.mark.parametrize("kill", [False, True])
def test_kafka_python_deletes_records_and_the_restart_keeps_them_deleted(make_broker, kill):
    broker = make_broker()
    topic = unique("delete-records")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [(None, str(i).encode(), None) for i in range(10)])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        tp = KafkaTopicPartition(topic, 0)
        result = admin.delete_records({tp: 4})
        assert result[tp]["low_watermark"] == 4, result
        assert earliest(broker.bootstrap, topic) == 4
        # behind the log start: nothing changes, the low watermark is answered
        assert admin.delete_records({tp: 2})[tp]["low_watermark"] == 4
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({tp: 11})  # past the high watermark
    finally:
        admin.close()
    got = consume_all(broker.bootstrap, topic, 1, 6)
    assert [m.offset for m in got] == list(range(4, 10))
    broker.restart(kill=kill)
    assert earliest(broker.bootstrap, topic) == 4


def test_confluent_kafka_and_the_tool(shared_broker, tmp_path):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    topic = unique("delete-records")
    create_topic(shared_broker.bootstrap, topic, 2)
    produce(shared_broker.bootstrap, topic,
            [(None, b"x", None, p) for p in (0, 1) for _ in range(5)])
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    [(tp, future)] = admin.delete_records([TopicPartition(topic, 0, 3)]).items()
    assert future.result(timeout=10).low_watermark == 3
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 1, "offset": -1}]}))

    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cli", "delete-records", *args,
                               "--bootstrap-server", shared_broker.bootstrap],
                              capture_output=True, text=True, timeout=60)
    done = tool("--offset-json-file", str(offsets))
    assert done.returncode == 0, done.stderr
    assert f"partition: {topic}-1\tlow_watermark: 5" in done.stdout.splitlines()
    assert earliest(shared_broker.bootstrap, topic, 1) == 5
    offsets.write_text(json.dumps({"partitions": [
        {"topic": "__consumer_offsets", "partition": 0, "offset": 0}]}))
    internal = tool("--offset-json-file", str(offsets))
    assert internal.returncode == 1 and "INVALID_TOPIC" in internal.stderr.upper(), \
        internal.stderr
    offsets.write_text('{"partitions": [{"topic": "t"}]}')
    bad = tool("--offset-json-file", str(offsets))
    assert bad.returncode == 1 and '"offset"' in bad.stderr, bad.stderr
