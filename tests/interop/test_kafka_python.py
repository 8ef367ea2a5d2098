"""kafka-python 3.x against the real broker process: admin, every codec, offsets by time."""

from __future__ import annotations


import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import InvalidPartitionsError, TopicAlreadyExistsError
from kafka.partitioner.default import murmur2

from tests.interop.kafkapython import consume_all as kp_consume_all
from tests.util import unique

pytestmark = pytest.mark.interop
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def test_admin_round_trip(shared_broker):
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        name = unique("kp-admin")
        admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
        assert name in admin.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
        admin.create_partitions({name: NewPartitions(total_count=4)})
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({name: NewPartitions(total_count=3)})
        described = admin.describe_topics([name])
        assert len(described[0]["partitions"]) == 4
        admin.delete_topics([name])
        assert name not in admin.list_topics()
    finally:
        admin.close()


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips(shared_broker, codec):
    name = unique(f"kp-{codec}")
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, compression_type=codec,
                             linger_ms=5)
    futures = [producer.send(name, key=b"k%d" % (i % 7), value=b"value-%d" % i,
                             headers=[("i", b"%d" % i)]) for i in range(300)]
    producer.flush()
    offsets = [f.get(timeout=10).offset for f in futures]
    producer.close()
    assert offsets == list(range(300))
    got = kp_consume_all(shared_broker.bootstrap, name, 1, 300)
    assert [m.value for m in got] == [b"value-%d" % i for i in range(300)]
    assert [m.headers for m in got] == [[("i", b"%d" % i)] for i in range(300)]


def test_keyed_records_follow_murmur2(shared_broker):
    name = unique("kp-keys")
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    admin.create_topics([NewTopic(name, num_partitions=4, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
    keys = [b"user-%d" % i for i in range(40)]
    placed = {k: producer.send(name, key=k, value=k).get(timeout=10).partition for k in keys}
    producer.close()
    assert placed == {k: (murmur2(k) & 0x7FFFFFFF) % 4 for k in keys}
    got = kp_consume_all(shared_broker.bootstrap, name, 4, 40)
    assert {m.key: m.partition for m in got} == placed


def test_offsets_for_times_and_end_offsets(shared_broker):
    name = unique("kp-times")
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
    for i in range(5):
        producer.send(name, value=b"x", timestamp_ms=1_600_000_000_000 + i * 10).get(timeout=10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap)
    tp = TopicPartition(name, 0)
    try:
        found = consumer.offsets_for_times({tp: 1_600_000_000_015})[tp]
        assert (found.offset, found.timestamp) == (2, 1_600_000_000_020)
        assert consumer.beginning_offsets([tp])[tp] == 0
        assert consumer.end_offsets([tp])[tp] == 5
    finally:
        consumer.close()


def _topic_configs(admin: KafkaAdminClient, name: str) -> dict[str, str]:
    """The topic's overrides (config source DYNAMIC_TOPIC_CONFIG), as DescribeConfigs
    lists them."""
    from kafka.admin import ConfigResource, ConfigResourceType
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)],
                                       config_filter="Dynamic")
    [(_type, by_name)] = described.items()
    return {key: entry["value"] for key, entry in by_name[name].items()
            if entry.get("config_source") in (1, "DYNAMIC_TOPIC_CONFIG")}


def test_legacy_alter_configs_replaces_a_topics_overrides(shared_broker):
    """kafka-python's alter_configs and reset_configs with incremental=False send the
    legacy AlterConfigs (33), which makes a resource's dynamic configs exactly the ones
    given."""
    from kafka.admin import ConfigResource, ConfigResourceType
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        name = unique("kp-legacy-configs")
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1,
                                      topic_configs={"retention.ms": "100000",
                                                     "cleanup.policy": "compact"})])
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name,
                                            configs={"retention.ms": "200000"})],
                            incremental=False, raise_on_unknown=False)
        # kafka-python sends the other overrides along, as AlterConfigs would drop them
        expected = {"retention.ms": "200000", "cleanup.policy": "compact"}
        assert _topic_configs(admin, name) == expected
        refused = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name,
                                                      configs={"retention.ms": "soon"})],
                                      incremental=False, raise_on_unknown=False)
        assert "INVALID" in str(refused).upper(), refused
        assert _topic_configs(admin, name) == expected
        # a resource sent with no configs has none left
        admin.reset_configs([ConfigResource(ConfigResourceType.TOPIC, name)],
                            incremental=False, raise_on_unknown=False)
        assert _topic_configs(admin, name) == {}
    finally:
        admin.close()
