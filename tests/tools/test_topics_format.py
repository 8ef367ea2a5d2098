"""What `minibroker topics describe` prints, from descriptions made by hand: kafka-topics'
lines, and --under-replicated-partitions picking partitions whose ISR is short (a single
broker never has one, so only here can the filter be seen to keep something)."""

from __future__ import annotations

import uuid

import pytest

from client.admin import ConfigEntry, PartitionInfo, TopicDescription
from tools.topics import describe_lines, parse_configs, topic_id_text

TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


def entry(name: str, value: str, default: bool) -> ConfigEntry:
    return ConfigEntry(name, value, 5 if default else 1, default, False, False)


def description(*partitions: PartitionInfo) -> TopicDescription:
    return TopicDescription("orders", TOPIC_ID, False, partitions)


def test_topic_id_is_kafkas_url_safe_base64_without_padding():
    assert topic_id_text(TOPIC_ID) == "ASNFZ4mrze8BI0VniavN7w"
    assert topic_id_text(uuid.UUID(int=(1 << 128) - 1)) == "_____________________w"
    assert topic_id_text(None) is None


def test_describe_prints_the_topic_line_and_one_line_per_partition_in_order():
    configs = {"cleanup.policy": entry("cleanup.policy", "compact", False),
               "retention.ms": entry("retention.ms", "604800000", True),
               "segment.bytes": entry("segment.bytes", "1024", False)}
    lines = describe_lines(description(PartitionInfo(1, None, (2, 1), (1,)),
                                       PartitionInfo(0, 1, (1, 2), (1, 2))), configs)
    assert lines == [
        "Topic: orders\tTopicId: ASNFZ4mrze8BI0VniavN7w\tPartitionCount: 2\t"
        "ReplicationFactor: 2\tConfigs: cleanup.policy=compact,segment.bytes=1024",
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1,2",
        "\tTopic: orders\tPartition: 1\tLeader: none\tReplicas: 2,1\tIsr: 1"]


def test_no_topic_id_and_no_overrides():
    lines = describe_lines(TopicDescription("t", None, False, (PartitionInfo(0, 0, (0,), (0,)),)),
                           {"retention.ms": entry("retention.ms", "1", True)})
    assert lines[0] == "Topic: t\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: "


def test_under_replicated_keeps_only_partitions_with_a_short_isr():
    desc = description(PartitionInfo(0, 1, (1, 2), (1, 2)), PartitionInfo(1, 2, (2, 1), (2,)),
                       PartitionInfo(2, 1, (1, 2), ()))
    assert describe_lines(desc, {}, under_replicated_only=True) == [
        "\tTopic: orders\tPartition: 1\tLeader: 2\tReplicas: 2,1\tIsr: 2",
        "\tTopic: orders\tPartition: 2\tLeader: 1\tReplicas: 1,2\tIsr: "]
    healthy = description(PartitionInfo(0, 1, (1,), (1,)))
    assert describe_lines(healthy, {}, under_replicated_only=True) == []


def test_configs_are_key_equals_value():
    assert parse_configs(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    for bad in ["novalue", "=1"]:
        with pytest.raises(ValueError, match="key=val"):
            parse_configs([bad])
