"""What `minibroker topics describe` prints, from descriptions made by hand: kafka-topics'
lines, and the partition reports (--under-replicated-partitions, --unavailable-partitions,
--under-min-isr-partitions, --at-min-isr-partitions) picking partitions as TopicCommand's
DescribeOptions does. A single broker never has a short ISR or a leaderless partition, so
only here can those reports be seen to keep something; tests/tools/test_topics_inproc.py
runs the command against a broker."""

from __future__ import annotations

import uuid

import pytest

from client.admin import ConfigEntry, PartitionInfo, TopicDescription
from tools.topics import Reports, describe_lines, parse_configs, topic_id_text

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


def line(p: PartitionInfo) -> str:
    leader = "none" if p.leader is None else p.leader
    return (f"\tTopic: orders\tPartition: {p.partition}\tLeader: {leader}"
            f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")


# brokers 1, 2, 3 of which 3 is not live; min.insync.replicas 2
HEALTHY = PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3))
ONE_BEHIND = PartitionInfo(1, 2, (2, 1, 3), (2, 1))    # at min ISR
ALONE = PartitionInfo(2, 1, (1, 2, 3), (1,))           # under min ISR
LEADERLESS = PartitionInfo(3, None, (3, 1, 2), (3,))   # under min ISR
DEAD_LEADER = PartitionInfo(4, 3, (3, 1, 2), (3, 1, 2))
SEVERAL = description(HEALTHY, ONE_BEHIND, ALONE, LEADERLESS, DEAD_LEADER)
MIN_ISR_2 = {"min.insync.replicas": entry("min.insync.replicas", "2", False)}
LIVE = frozenset({1, 2})


@pytest.mark.parametrize("reports, picked", [
    (Reports(under_replicated=True), [ONE_BEHIND, ALONE, LEADERLESS]),
    (Reports(unavailable=True, live_brokers=LIVE), [LEADERLESS, DEAD_LEADER]),
    (Reports(under_min_isr=True), [ALONE, LEADERLESS]),
    (Reports(at_min_isr=True), [ONE_BEHIND]),
    # several: a partition any of them picks, once, in partition order
    (Reports(at_min_isr=True, unavailable=True, live_brokers=LIVE),
     [ONE_BEHIND, LEADERLESS, DEAD_LEADER]),
], ids=["under-replicated", "unavailable", "under-min-isr", "at-min-isr", "two"])
def test_each_report_keeps_only_the_partitions_it_picks(reports, picked):
    assert describe_lines(SEVERAL, MIN_ISR_2, reports) == [line(p) for p in picked]


def test_a_report_of_a_healthy_topic_is_empty_and_never_prints_the_topic_line():
    healthy = description(PartitionInfo(0, 1, (1,), (1,)))
    assert describe_lines(healthy, {}, Reports(under_replicated=True)) == []
    assert describe_lines(healthy, {}, Reports(unavailable=True, live_brokers=frozenset({1}))) \
        == []
    # without a min.insync.replicas entry the broker default, 1, applies
    assert describe_lines(healthy, {}, Reports(at_min_isr=True)) == [
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1"]


def test_configs_are_key_equals_value():
    assert parse_configs(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    for bad in ["novalue", "=1"]:
        with pytest.raises(ValueError, match="key=val"):
            parse_configs([bad])
