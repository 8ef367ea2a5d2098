"""DescribeConfigs from the image's topic overrides; IncrementalAlterConfigs forwarded and
awaited in the image."""

from __future__ import annotations

import uuid

import trio

from protocol import messages as m
from protocol.errors import ErrorCode as E
from protocol.metadata_records import MetadataRecordType as T
from tests.broker.handlers.fakes import FakeBroker, call, record, register, topic

ORDERS = uuid.UUID(int=1)
TOPIC = 2


def cluster() -> list:
    return [*register(0), *topic("orders", ORDERS, [[0]], configs={"retention.ms": "1000"})]


def describe(name: str) -> dict:
    return {"resources": [{"resource_type": TOPIC, "resource_name": name,
                           "configuration_keys": ["retention.ms", "cleanup.policy"]}],
            "include_synonyms": False, "include_documentation": False}


async def test_describe_configs_reads_the_topic_overrides_from_the_image():
    broker = FakeBroker(cluster())
    body = await call(broker, m.DESCRIBE_CONFIGS, 4, describe("orders"))
    [result] = body["results"]
    assert {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]} == {
        "retention.ms": ("1000", 1), "cleanup.policy": ("delete", 5)}
    body = await call(broker, m.DESCRIBE_CONFIGS, 4, describe("missing"))
    assert body["results"][0]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION


def alter(ops: list[tuple[str, int, str | None]]) -> dict:
    return {"resources": [{"resource_type": TOPIC, "resource_name": "orders", "configs": [
        {"name": n, "config_operation": op, "value": v} for n, op, v in ops]}],
        "validate_only": False}


async def test_incremental_alter_configs_is_forwarded_and_awaited(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(cluster(), nursery=nursery)
        controller = broker.controller_channel
        controller.respond = lambda key, version, body: {"throttle_time_ms": 0, "responses": [
            {"error_code": 0, "error_message": None, "resource_type": TOPIC,
             "resource_name": "orders"}]}
        controller.commit = [
            record(T.CONFIG_RECORD, resource_type=TOPIC, resource_name="orders",
                   name="retention.ms", value=None),
            record(T.CONFIG_RECORD, resource_type=TOPIC, resource_name="orders",
                   name="cleanup.policy", value="compact")]
        body = await call(broker, m.INCREMENTAL_ALTER_CONFIGS, 1, alter(
            [("retention.ms", 1, None), ("cleanup.policy", 0, "compact")]))
        # answered once visible here: the next DescribeConfigs on this broker sees it
        described = await call(broker, m.DESCRIBE_CONFIGS, 4, describe("orders"))
    assert controller.requests[0][:2] == (m.INCREMENTAL_ALTER_CONFIGS, 1)
    assert body["responses"][0]["error_code"] == E.NONE
    assert {c["name"]: c["value"] for c in described["results"][0]["configs"]} == {
        "retention.ms": str(broker.config.retention_ms), "cleanup.policy": "compact"}


async def test_incremental_alter_configs_without_a_controller_times_out():
    broker = FakeBroker(cluster())
    body = await call(broker, m.INCREMENTAL_ALTER_CONFIGS, 0, alter([("retention.ms", 0, "5")]))
    assert [(r["resource_name"], r["error_code"]) for r in body["responses"]] == [
        ("orders", E.REQUEST_TIMED_OUT)]
