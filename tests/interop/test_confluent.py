"""librdkafka (confluent-kafka 2.x) against the real broker process: admin, produce, fetch."""

from __future__ import annotations


import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic
from kafka.partitioner.default import murmur2

from tests.interop.librdkafka import _admin, consume_all, create_topic, produce
from tests.util import unique, wait_until

pytestmark = pytest.mark.interop
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def test_metadata_and_topic_admin(shared_broker):
    admin = _admin(shared_broker.bootstrap)
    name = unique("admin")
    create_topic(shared_broker.bootstrap, name, partitions=3, **{"retention.ms": "3600000"})
    md = admin.list_topics(timeout=10)
    assert md.brokers[0].port == shared_broker.port
    assert sorted(md.topics[name].partitions) == [0, 1, 2]
    assert md.topics[name].partitions[1].leader == 0

    again = admin.create_topics([NewTopic(name, 1, 1)])[name]
    with pytest.raises(Exception) as e:
        again.result(timeout=10)
    assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    admin.create_partitions([NewPartitions(name, 5)])[name].result(timeout=10)
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 5
    with pytest.raises(Exception) as e:
        admin.create_partitions([NewPartitions(name, 2)])[name].result(timeout=10)
    assert e.value.args[0].code() == KafkaError.INVALID_PARTITIONS

    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"
    assert configs["retention.ms"].is_default is False

    admin.delete_topics([name])[name].result(timeout=10)
    wait_until(lambda: name not in admin.list_topics(timeout=10).topics, 10,
               message="deleted topic still listed")


def test_invalid_topic_names_are_refused(shared_broker):
    admin = _admin(shared_broker.bootstrap)
    for bad in ["bad topic", "a" * 250, "..", "ü"]:
        fut = admin.create_topics([NewTopic(bad, 1, 1)])[bad]
        with pytest.raises(Exception) as e:
            fut.result(timeout=10)
        assert e.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, bad


def test_keyed_records_with_headers_land_on_javas_murmur2_partition(shared_broker):
    name = unique("keyed")
    create_topic(shared_broker.bootstrap, name, partitions=6)
    keys = [f"key-{i}".encode() for i in range(60)]
    produce(shared_broker.bootstrap, name,
            [(k, b"v-" + k, [("h1", b"x"), ("h2", None)]) for k in keys],
            partitioner="murmur2_random")
    got = consume_all(shared_broker.bootstrap, name, 6, len(keys))
    for msg in got:
        assert msg.partition() == (murmur2(msg.key()) & 0x7FFFFFFF) % 6
        assert msg.value() == b"v-" + msg.key()
        assert msg.headers() == [("h1", b"x"), ("h2", None)]
    assert sorted(m.key() for m in got) == sorted(keys)


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips(shared_broker, codec):
    name = unique(f"codec-{codec}")
    create_topic(shared_broker.bootstrap, name)
    values = [f"{codec}-{i}-".encode() * 20 for i in range(500)]
    delivered = produce(shared_broker.bootstrap, name, [(None, v, None) for v in values],
                        **{"compression.type": codec})
    assert [m.offset() for m in delivered] == list(range(500))
    got = consume_all(shared_broker.bootstrap, name, 1, 500)
    assert [m.value() for m in got] == values
    assert [m.offset() for m in got] == list(range(500))


def test_offsets_for_times(shared_broker):
    name = unique("times")
    create_topic(shared_broker.bootstrap, name)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    base = 1_700_000_000_000
    for i in range(10):
        producer.produce(name, value=b"%d" % i, timestamp=base + i * 1000)
        producer.flush(10)  # one batch per record, so each has its own timestamp range
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "t"})
    try:
        def lookup(ts):
            return consumer.offsets_for_times([TopicPartition(name, 0, ts)], timeout=10)[0].offset
        assert lookup(base) == 0
        assert lookup(base + 4500) == 5
        assert lookup(base + 9000) == 9
        assert lookup(base + 99_000) == -1  # after the last record: no offset
        low, high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
        assert (low, high) == (0, 10)
    finally:
        consumer.close()


def test_idempotent_producer(shared_broker):
    name = unique("idem")
    create_topic(shared_broker.bootstrap, name, partitions=2)
    delivered = produce(shared_broker.bootstrap, name,
                        [(None, b"%d" % i, None, i % 2) for i in range(1000)],
                        **{"enable.idempotence": True, "acks": "all"})
    assert sorted(m.offset() for m in delivered if m.partition() == 0) == list(range(500))
    got = consume_all(shared_broker.bootstrap, name, 2, 1000)
    assert sorted(int(m.value()) for m in got) == list(range(1000))


def test_auto_create_on_produce(shared_broker):
    name = unique("auto")
    delivered = produce(shared_broker.bootstrap, name, [(None, b"hello", None)])
    assert delivered[0].offset() == 0
    assert consume_all(shared_broker.bootstrap, name, 1, 1)[0].value() == b"hello"
