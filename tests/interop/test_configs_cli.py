"""`minibroker configs` (tools/configs.py) run as a subprocess against the real broker,
cross-checked with confluent-kafka's AdminClient both ways: what the tool sets, librdkafka's
DescribeConfigs reads (with its source), and what librdkafka's IncrementalAlterConfigs sets,
the tool describes; for a topic and a broker, and the cluster-wide broker default as a
broker's entry shows it (librdkafka will not name the default resource ""); a group's
configs round-trip through the tool."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, ConfigSource)

from tests.interop.librdkafka import create_topic
from tests.interop.test_console_tools import cli
from tests.util import unique

pytestmark = pytest.mark.interop


def configs(bootstrap: str, *args: str) -> str:
    done = cli("configs", "--bootstrap-server", bootstrap, *args)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def described(admin: AdminClient, kind: str, name: str) -> dict:
    resource = ConfigResource(kind, name)
    return admin.describe_configs([resource])[resource].result(timeout=10)


def test_topic_configs_both_ways_with_librdkafka(shared_broker):
    bs = shared_broker.bootstrap
    topic = unique("cfg-topic")
    create_topic(bs, topic, 1)
    assert configs(bs, "--alter", "--entity-type", "topics", "--entity-name", topic,
                   "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]") == \
        f"Completed updating config for topic {topic}.\n"
    admin = AdminClient({"bootstrap.servers": bs})
    seen = described(admin, "topic", topic)
    assert (seen["retention.ms"].value, seen["retention.ms"].source) == (
        "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert seen["cleanup.policy"].value == "compact,delete"

    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("segment.ms", "3600000",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=10)
    assert configs(bs, "--describe", "--topic", topic).splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  segment.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "segment.ms=3600000, DEFAULT_CONFIG:log.roll.hours=168}"]

    refused = cli("configs", "--bootstrap-server", bs, "--alter", "--topic", topic,
                  "--delete-config", "retention.ms")
    assert (refused.returncode, refused.stderr) == (
        1, "minibroker configs: Invalid config(s): retention.ms\n")
    bad = cli("configs", "--bootstrap-server", bs, "--alter", "--topic", topic,
              "--add-config", "retention.ms=soon")
    assert bad.returncode == 1 and bad.stderr.startswith("minibroker configs: INVALID_CONFIG")


def test_broker_and_default_configs_both_ways_with_librdkafka(shared_broker):
    bs = shared_broker.bootstrap
    node = str(shared_broker.broker_id)
    admin = AdminClient({"bootstrap.servers": bs})
    try:
        assert configs(bs, "--alter", "--broker", node, "--add-config",
                       "log.retention.ms=7200000") == \
            f"Completed updating config for broker {node}.\n"
        assert configs(bs, "--alter", "--entity-type", "brokers", "--entity-default",
                       "--add-config", "unclean.leader.election.enable=true") == \
            "Completed updating default config for brokers in the cluster.\n"
        seen = described(admin, "broker", node)
        assert (seen["log.retention.ms"].value, seen["log.retention.ms"].source) == (
            "7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        default = seen["unclean.leader.election.enable"]
        assert (default.value, default.source) == (
            "true", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

        resource = ConfigResource("broker", node, incremental_configs=[
            ConfigEntry("log.retention.bytes", "1073741824",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=10)
        assert configs(bs, "--describe", "--entity-type", "brokers", "--entity-name",
                       node).splitlines() == [
            f"Dynamic configs for broker {node} are:",
            "  log.retention.bytes=1073741824 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "log.retention.bytes=1073741824, DEFAULT_CONFIG:log.retention.bytes=-1}",
            "  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "log.retention.ms=7200000}"]
        assert configs(bs, "--describe", "--broker-defaults").splitlines() == [
            "Dynamic default configs for brokers in the cluster are:",
            "  unclean.leader.election.enable=true sensitive=false synonyms="
            "{DYNAMIC_DEFAULT_BROKER_CONFIG:unclean.leader.election.enable=true, "
            "DEFAULT_CONFIG:unclean.leader.election.enable=false}"]
    finally:  # the module's broker is shared: leave it as it was
        configs(bs, "--alter", "--broker", node, "--delete-config",
                "log.retention.ms,log.retention.bytes")
        configs(bs, "--alter", "--broker-defaults", "--delete-config",
                "unclean.leader.election.enable")
    assert configs(bs, "--describe", "--broker", node) == \
        f"Dynamic configs for broker {node} are:\n"
    assert described(admin, "broker", node)["log.retention.ms"].source != \
        ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_group_configs_round_trip(shared_broker):
    bs = shared_broker.bootstrap
    group = unique("cfg-group")
    assert configs(bs, "--alter", "--group", group, "--add-config",
                   "consumer.session.timeout.ms=50000") == \
        f"Completed updating config for group {group}.\n"
    assert configs(bs, "--describe", "--entity-type", "groups", "--entity-name",
                   group).splitlines() == [
        f"Dynamic configs for group {group} are:",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={GROUP_CONFIG:"
        "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:"
        "group.consumer.session.timeout.ms=45000}"]
    every = configs(bs, "--describe", "--group", group, "--all").splitlines()
    assert every[0] == f"All configs for group {group} are:"
    assert ("  consumer.heartbeat.interval.ms=5000 sensitive=false synonyms={DEFAULT_CONFIG:"
            "group.consumer.heartbeat.interval.ms=5000}") in every
    refused = cli("configs", "--bootstrap-server", bs, "--alter", "--group", group,
                  "--add-config", "consumer.heartbeat.interval.ms=50000")
    assert refused.returncode == 1
    assert refused.stderr.startswith("minibroker configs: INVALID_CONFIG"), refused.stderr
    assert "must be less than consumer.session.timeout.ms" in refused.stderr
