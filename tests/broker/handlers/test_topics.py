"""Topic administration forwarded to the controller: the answer is the controller's, held
until this broker's image shows the change; REQUEST_TIMED_OUT without a controller."""

from __future__ import annotations

import uuid

import trio

from protocol import messages as m
from protocol.errors import ErrorCode as E
from protocol.metadata_records import MetadataRecordType as T
from tests.broker.handlers.fakes import FakeBroker, call, record, register, topic

ORDERS = uuid.UUID(int=1)
FRESH = uuid.UUID(int=2)


def cluster() -> list:
    return [*register(0), *register(1), *topic("orders", ORDERS, [[0, 1], [1, 0]])]


def create(*names: str, validate_only: bool = False) -> dict:
    return {"topics": [{"name": n, "num_partitions": 2, "replication_factor": 2,
                        "assignments": [], "configs": [{"name": "retention.ms", "value": "1000"}]}
                       for n in names], "timeout_ms": 30_000, "validate_only": validate_only}


async def test_create_topics_is_forwarded_and_answered_once_visible_here(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(cluster(), nursery=nursery)
        controller = broker.controller_channel
        controller.respond = lambda key, version, body: {"throttle_time_ms": 0, "topics": [
            {"name": "fresh", "topic_id": FRESH, "error_code": 0, "error_message": None,
             "num_partitions": 2, "replication_factor": 2, "configs": None},
            {"name": "orders", "topic_id": uuid.UUID(int=0), "error_code": E.TOPIC_ALREADY_EXISTS,
             "error_message": "exists", "num_partitions": -1, "replication_factor": -1,
             "configs": None}]}
        controller.commit = [*topic("fresh", FRESH, [[0, 1], [1, 0]]),
                             record(T.CONFIG_RECORD, resource_type=2, resource_name="fresh",
                                    name="retention.ms", value="1000")]
        start = trio.current_time()
        body = await call(broker, m.CREATE_TOPICS, 7, create("fresh", "orders"))
        assert trio.current_time() - start >= 0.5  # waited for the commit to arrive
    [(key, version, sent)] = controller.requests
    assert (key, version, [t.name for t in sent.topics]) == (m.CREATE_TOPICS, 7, ["fresh", "orders"])
    fresh, orders = body["topics"]
    assert (fresh["error_code"], fresh["topic_id"]) == (E.NONE, FRESH)
    configs = {c["name"]: (c["value"], c["config_source"]) for c in fresh["configs"]}
    assert configs["retention.ms"] == ("1000", 1)  # a topic override
    assert configs["cleanup.policy"] == ("delete", 5)  # Kafka's default
    assert orders["error_code"] == E.TOPIC_ALREADY_EXISTS


async def test_create_topics_fills_what_the_controller_leaves_out_from_the_image():
    broker = FakeBroker([*cluster(), *topic("fresh", FRESH, [[0, 1], [1, 0], [0, 1]])])
    broker.controller_channel.respond = lambda key, version, body: {"topics": [
        {"name": "fresh", "error_code": 0, "error_message": None}]}
    body = await call(broker, m.CREATE_TOPICS, 7, create("fresh"))
    [t] = body["topics"]
    assert (t["topic_id"], t["num_partitions"], t["replication_factor"]) == (FRESH, 3, 2)


async def test_no_controller_is_request_timed_out_for_every_topic():
    broker = FakeBroker(cluster())
    body = await call(broker, m.CREATE_TOPICS, 7, create("a", "b"))
    assert [(t["name"], t["error_code"]) for t in body["topics"]] == [
        ("a", E.REQUEST_TIMED_OUT), ("b", E.REQUEST_TIMED_OUT)]
    body = await call(broker, m.DELETE_TOPICS, 5, {"topic_names": ["orders"], "timeout_ms": 100})
    assert body["responses"][0]["error_code"] == E.REQUEST_TIMED_OUT
    body = await call(broker, m.CREATE_PARTITIONS, 3, {"topics": [
        {"name": "orders", "count": 4, "assignments": None}], "timeout_ms": 100,
        "validate_only": False})
    assert body["results"][0]["error_code"] == E.REQUEST_TIMED_OUT


async def test_delete_topics_refuses_the_offsets_topic_here_and_forwards_the_rest(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(cluster(), nursery=nursery)
        controller = broker.controller_channel
        controller.respond = lambda key, version, body: {"responses": [
            {"name": n, "error_code": 0 if n == "orders" else E.UNKNOWN_TOPIC_OR_PARTITION,
             "error_message": None} for n in body["topic_names"]]}
        controller.commit = [record(T.REMOVE_TOPIC_RECORD, topic_id=ORDERS)]
        body = await call(broker, m.DELETE_TOPICS, 5, {
            "topic_names": ["orders", "__consumer_offsets", "missing"], "timeout_ms": 30_000})
        assert broker.metadata_cache.topic("orders") is None  # answered once gone here
    [(_key, _version, sent)] = controller.requests
    assert sent["topic_names"] == ["orders", "missing"]
    assert [(r["name"], r["error_code"]) for r in body["responses"]] == [
        ("orders", E.NONE), ("__consumer_offsets", E.INVALID_REQUEST),
        ("missing", E.UNKNOWN_TOPIC_OR_PARTITION)]


async def test_delete_topics_by_id_and_disabled_deletion():
    broker = FakeBroker(cluster())
    broker.controller_channel.respond = lambda key, version, body: {"responses": [
        {"name": "orders", "topic_id": t["topic_id"], "error_code": 0, "error_message": None}
        for t in body["topics"]]}
    broker.apply([record(T.REMOVE_TOPIC_RECORD, topic_id=ORDERS)])  # already gone here
    body = await call(broker, m.DELETE_TOPICS, 6, {
        "topics": [{"name": None, "topic_id": ORDERS}], "timeout_ms": 30_000})
    assert [(r["name"], r["topic_id"], r["error_code"]) for r in body["responses"]] == [
        ("orders", ORDERS, E.NONE)]
    broker = FakeBroker(cluster(), config={"delete.topic.enable": "false"})
    body = await call(broker, m.DELETE_TOPICS, 5, {"topic_names": ["orders"], "timeout_ms": 1})
    assert body["responses"][0]["error_code"] == E.TOPIC_DELETION_DISABLED
    assert broker.controller_channel.requests == []


async def test_create_partitions_waits_for_the_new_partitions(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(cluster(), nursery=nursery)
        controller = broker.controller_channel
        controller.respond = lambda key, version, body: {"throttle_time_ms": 0, "results": [
            {"name": "orders", "error_code": 0, "error_message": None}]}
        controller.commit = [record(T.PARTITION_RECORD, partition_id=2, topic_id=ORDERS,
                                    replicas=[0, 1], isr=[0, 1], leader=0, leader_epoch=0,
                                    partition_epoch=0)]
        body = await call(broker, m.CREATE_PARTITIONS, 3, {"topics": [
            {"name": "orders", "count": 3, "assignments": None}], "timeout_ms": 30_000,
            "validate_only": False})
        assert broker.metadata_cache.partition_count("orders") == 3
    assert body["results"][0]["error_code"] == E.NONE
