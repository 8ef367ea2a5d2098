"""`minibroker configs` (tools/configs.py), the AdminClient's incremental_alter_configs
under it, and the broker's side: DescribeConfigs of a broker's dynamic configs and of
KIP-848 group configs, which the consumer group coordinator applies. The pure parts (Kafka's
--add-config syntax, the entity options, the output lines) directly; the round trips
against a broker in the test's trio run (tests/inproc.py)."""

from __future__ import annotations

import argparse
import io
import uuid

import pytest

from client.admin import AlterConfigOp, ConfigEntry, ConfigResource
from client.cluster import find_group_coordinator
from client.errors import KafkaError
from protocol.errors import ErrorCode
from protocol.messages import CONSUMER_GROUP_HEARTBEAT
from tools import configs
from tools.admin_session import ToolError, open_admin


def _args(*argv: str) -> argparse.Namespace:
    from cli.main import build_parser
    return build_parser().parse_args(["configs", "--bootstrap-server", "b:1", *argv])


def test_add_config_syntax():
    assert configs.parse_add_config("retention.ms=1000,cleanup.policy=[compact,delete]") == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete"}
    assert configs.parse_add_config(" a = 1 ,") == {"a": "1"}
    with pytest.raises(ValueError, match="not of the form k=v"):
        configs.parse_add_config("retention.ms")


def test_entity_options_in_both_spellings():
    def resolved(*argv: str):
        return configs.resolve_entity(_args(*argv))

    assert resolved("--describe", "--entity-type", "topics", "--entity-name", "o") == (
        "topic", ["o"])
    assert resolved("--describe", "--topic", "o") == ("topic", ["o"])
    assert resolved("--describe", "--entity-type", "topics") == ("topic", None)
    assert resolved("--describe", "--broker", "0") == ("broker", ["0"])
    assert resolved("--alter", "--entity-type", "brokers", "--entity-default") == (
        "broker", [""])
    assert resolved("--describe", "--broker-defaults") == ("broker", [""])
    assert resolved("--describe", "--group", "g") == ("group", ["g"])
    for bad, why in [(("--describe",), "--entity-type"),
                     (("--alter", "--entity-type", "topics"), "--alter needs --entity-name"),
                     (("--describe", "--topic", "a", "--group", "g"), "only one of"),
                     (("--describe", "--topic", "a", "--entity-type", "topics"), "either"),
                     (("--describe", "--entity-type", "brokers", "--entity-name", "x"),
                      "broker is its id"),
                     (("--describe", "--entity-type", "topics", "--entity-default"),
                      "brokers only"),
                     (("--alter", "--entity-type", "users", "--entity-name", "u",
                       "--add-config", "SCRAM-SHA-256=[password=p]"), "minibroker users"),
                     (("--describe", "--entity-type", "users", "--entity-type", "users"),
                      "given twice"),
                     (("--describe", "--entity-type", "ips", "--entity-type", "users"),
                      "cannot be combined"),
                     (("--describe", "--entity-type", "clients", "--entity-name", "a",
                       "--entity-name", "b"), "more --entity-name"),
                     (("--describe", "--entity-type", "topics", "--entity-type", "clients"),
                      "only client quotas")]:
        with pytest.raises(ValueError, match=why):
            resolved(*bad)
    # client quotas: types and names (or defaults) paired in order, a missing name: any
    assert resolved("--describe", "--entity-type", "users") == ("quota", [("user", True)])
    assert resolved("--alter", "--entity-type", "users", "--entity-name", "alice",
                    "--entity-type", "clients", "--entity-default") == (
        "quota", [("user", "alice"), ("client-id", None)])
    assert resolved("--alter", "--entity-type", "clients", "--entity-default") == (
        "quota", [("client-id", None)])
    err = io.StringIO()
    assert configs.run(_args("--describe"), io.StringIO(), err) == 2
    assert err.getvalue().startswith("minibroker configs: --entity-type")


def test_describe_lines_as_kafka_configs_prints_them():
    entries = {
        "retention.ms": ConfigEntry("retention.ms", "1000", 1, False, False, False,
                                    (("retention.ms", "1000", 1),
                                     ("log.retention.hours", "168", 5))),
        "segment.ms": ConfigEntry("segment.ms", "604800000", 5, True, False, False),
        "secret": ConfigEntry("secret", "x", 1, False, False, True, (("secret", None, 1),)),
    }
    assert configs.describe_lines("topic", "orders", entries) == [
        "Dynamic configs for topic orders are:",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
        "DEFAULT_CONFIG:log.retention.hours=168}",
        "  secret=null sensitive=true synonyms={DYNAMIC_TOPIC_CONFIG:secret=null}"]
    assert configs.describe_lines("topic", "orders", entries, describe_all=True)[0] == \
        "All configs for topic orders are:"
    assert len(configs.describe_lines("topic", "orders", entries, describe_all=True)) == 4
    assert configs.describe_lines("broker", "", {}) == [
        "Dynamic default configs for brokers in the cluster are:"]


async def _tool(admin, *argv: str) -> str:
    args = _args(*argv)
    args.resolved = configs.resolve_entity(args)
    out = io.StringIO()
    await (configs.alter if args.alter else configs.describe)(admin, args, out)
    return out.getvalue()


async def test_topic_and_broker_round_trips(inproc, autojump_clock):
    await inproc.create_topic("orders", 1)
    node = str(inproc.broker.node_id)
    async with open_admin(inproc.bootstrap, timeout_ms=10_000, client_id="cfg") as admin:
        assert await _tool(admin, "--describe", "--topic", "orders") == \
            "Dynamic configs for topic orders are:\n"
        assert await _tool(admin, "--alter", "--entity-type", "topics", "--entity-name",
                           "orders", "--add-config",
                           "retention.ms=1000,cleanup.policy=[compact,delete]") == \
            "Completed updating config for topic orders.\n"
        assert (await _tool(admin, "--describe", "--topic", "orders")).splitlines() == [
            "Dynamic configs for topic orders are:",
            "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
            "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
            "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms="
            "1000, DEFAULT_CONFIG:log.retention.hours=168}"]
        await _tool(admin, "--alter", "--topic", "orders", "--delete-config", "retention.ms")
        assert (await _tool(admin, "--describe", "--topic", "orders")).splitlines()[1:] == [
            "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
            "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}"]
        with pytest.raises(ToolError, match=r"Invalid config\(s\): retention.ms"):
            await _tool(admin, "--alter", "--topic", "orders", "--delete-config",
                        "retention.ms")
        with pytest.raises(KafkaError) as refused:
            await _tool(admin, "--alter", "--topic", "orders", "--add-config", "bogus=1")
        assert refused.value.code is ErrorCode.INVALID_CONFIG

        assert await _tool(admin, "--alter", "--broker", node, "--add-config",
                           "log.retention.ms=7200000") == \
            f"Completed updating config for broker {node}.\n"
        assert await _tool(admin, "--alter", "--entity-type", "brokers", "--entity-default",
                           "--add-config", "unclean.leader.election.enable=true") == \
            "Completed updating default config for brokers in the cluster.\n"
        assert (await _tool(admin, "--describe", "--entity-type", "brokers",
                            "--entity-name", node)).splitlines() == [
            f"Dynamic configs for broker {node} are:",
            "  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "log.retention.ms=7200000}"]
        assert (await _tool(admin, "--describe", "--broker-defaults")).splitlines() == [
            "Dynamic default configs for brokers in the cluster are:",
            "  unclean.leader.election.enable=true sensitive=false synonyms="
            "{DYNAMIC_DEFAULT_BROKER_CONFIG:unclean.leader.election.enable=true, "
            "DEFAULT_CONFIG:unclean.leader.election.enable=false}"]
        # the default shows under this broker's entry too, beneath nothing of its own
        every = await _tool(admin, "--describe", "--broker", node, "--all")
        assert ("  unclean.leader.election.enable=true sensitive=false synonyms="
                "{DYNAMIC_DEFAULT_BROKER_CONFIG:unclean.leader.election.enable=true, "
                "DEFAULT_CONFIG:unclean.leader.election.enable=false}") in every.splitlines()
        await _tool(admin, "--alter", "--broker", node, "--delete-config", "log.retention.ms")
        assert await _tool(admin, "--describe", "--broker", node) == \
            f"Dynamic configs for broker {node} are:\n"


async def _heartbeat_interval(admin, group: str) -> int:
    """A KIP-848 member joins `group` (ConsumerGroupHeartbeat, epoch 0) and is told its
    heartbeat interval."""
    _, conn = await find_group_coordinator(admin.pool, group)
    resp = await conn.request(CONSUMER_GROUP_HEARTBEAT, {
        "group_id": group, "member_id": uuid.uuid4().hex[:22], "member_epoch": 0,
        "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000,
        "subscribed_topic_names": ["orders"], "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": []})
    assert resp.body.error_code == 0, resp.body
    return resp.body.heartbeat_interval_ms


async def test_group_configs_are_described_altered_and_applied(inproc, autojump_clock):
    await inproc.create_topic("orders", 1)
    async with open_admin(inproc.bootstrap, timeout_ms=10_000, client_id="cfg") as admin:
        described = await admin.describe_configs([ConfigResource("group", "g")],
                                                 include_synonyms=True)
        session = described[ConfigResource("group", "g")]["consumer.session.timeout.ms"]
        assert (session.value, session.source, session.synonyms) == (
            "45000", 5, (("group.consumer.session.timeout.ms", "45000", 5),))
        assert await _heartbeat_interval(admin, "g") == 5000  # the broker's default

        assert await _tool(admin, "--alter", "--group", "g", "--add-config",
                           "consumer.heartbeat.interval.ms=3000,"
                           "consumer.session.timeout.ms=50000") == \
            "Completed updating config for group g.\n"
        assert (await _tool(admin, "--describe", "--entity-type", "groups",
                            "--entity-name", "g")).splitlines() == [
            "Dynamic configs for group g are:",
            "  consumer.heartbeat.interval.ms=3000 sensitive=false synonyms={GROUP_CONFIG:"
            "consumer.heartbeat.interval.ms=3000, DEFAULT_CONFIG:"
            "group.consumer.heartbeat.interval.ms=5000}",
            "  consumer.session.timeout.ms=50000 sensitive=false synonyms={GROUP_CONFIG:"
            "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:"
            "group.consumer.session.timeout.ms=45000}"]
        # the coordinator applies the group's own values to its members
        coordinator = inproc.broker.groups.coordinator.consumer_groups
        assert coordinator.session_timeout_ms("g") == 50000
        assert coordinator.session_timeout_ms("other") == 45000
        assert await _heartbeat_interval(admin, "g2") == 5000
        assert await _heartbeat_interval(admin, "g") == 3000

        with pytest.raises(KafkaError) as refused:  # interval not below the session timeout
            await admin.incremental_alter_configs({ConfigResource("group", "g"): [
                AlterConfigOp("consumer.heartbeat.interval.ms", "60000")]})
        assert refused.value.code is ErrorCode.INVALID_CONFIG
        with pytest.raises(KafkaError) as refused:
            await admin.incremental_alter_configs({ConfigResource("group", "g"): [
                AlterConfigOp("retention.ms", "1")]})
        assert refused.value.code is ErrorCode.INVALID_CONFIG
        await _tool(admin, "--alter", "--group", "g", "--delete-config",
                    "consumer.heartbeat.interval.ms,consumer.session.timeout.ms")
        assert await _tool(admin, "--describe", "--group", "g") == \
            "Dynamic configs for group g are:\n"
        assert coordinator.session_timeout_ms("g") == 45000


def test_quota_describe_lines_as_kafka_configs_prints_them():
    from tools.quotas import describe_line
    assert describe_line((("client-id", "c1"),), {"producer_byte_rate": 1024.0}) == \
        "Quota configs for client-id 'c1' are producer_byte_rate=1024.0"
    assert describe_line((("client-id", None), ("user", "alice")),
                         {"request_percentage": 50.0, "consumer_byte_rate": 2048.0}) == (
        "Quota configs for user-principal 'alice', the default client-id are "
        "request_percentage=50.0, consumer_byte_rate=2048.0")
