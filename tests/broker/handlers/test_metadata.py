"""Metadata from the committed image: brokers on the client's listener, leaders, replicas,
ISR and offline replicas; auto-creation through the controller, awaited in the image."""

from __future__ import annotations

import uuid

import trio

from broker.controller.election import NO_LEADER
from protocol import messages as m
from protocol.errors import ErrorCode as E
from protocol.metadata_records import MetadataRecordType as T
from tests.broker.handlers.fakes import CLUSTER_ID, FakeBroker, call, record, register, topic

ORDERS = uuid.UUID(int=1)
NEW = uuid.UUID(int=2)
ZERO = uuid.UUID(int=0)


def cluster() -> list:
    """Brokers 0-2 (2 fenced), orders with three partitions, RF 3 (partition 2 leaderless)."""
    return [*register(0, rack="r0"), *register(1, rack="r1"), *register(2, fenced=True),
            *topic("orders", ORDERS, [[0, 1, 2], [1, 2, 0], [2, 0, 1]],
                   leaders=[0, 1, NO_LEADER], epochs=[3, 4, 5], isr=[[0, 1], [1, 0], [0]])]


def metadata_request(*names: str, auto: bool = True) -> dict:
    return {"topics": [{"topic_id": ZERO, "name": n} for n in names],
            "allow_auto_topic_creation": auto, "include_topic_authorized_operations": False}


async def test_brokers_leaders_replicas_isr_and_offline_replicas_come_from_the_image():
    broker = FakeBroker(cluster(), controller_id=1)
    body = await call(broker, m.METADATA, 12, metadata_request("orders"))
    assert body["brokers"] == [
        {"node_id": 0, "host": "b0.test", "port": 9092, "rack": "r0"},
        {"node_id": 1, "host": "b1.test", "port": 9092, "rack": "r1"}]  # 2 is fenced
    assert (body["cluster_id"], body["controller_id"]) == (CLUSTER_ID, 1)
    [t] = body["topics"]
    assert (t["error_code"], t["name"], t["topic_id"], t["is_internal"]) == (
        E.NONE, "orders", ORDERS, False)
    assert [(p["partition_index"], p["error_code"], p["leader_id"], p["leader_epoch"],
             p["replica_nodes"], p["isr_nodes"], p["offline_replicas"])
            for p in t["partitions"]] == [
        (0, E.NONE, 0, 3, [0, 1, 2], [0, 1], [2]),
        (1, E.NONE, 1, 4, [1, 2, 0], [1, 0], [2]),
        (2, E.LEADER_NOT_AVAILABLE, NO_LEADER, 5, [2, 0, 1], [0], [2])]


async def test_every_topic_v1_null_list_and_unknown_ids():
    broker = FakeBroker(cluster())
    body = await call(broker, m.METADATA, 1, {"topics": None})
    assert [t["name"] for t in body["topics"]] == ["orders"]
    body = await call(broker, m.METADATA, 12, {"topics": [{"topic_id": NEW, "name": None}]})
    assert body["topics"][0]["error_code"] == E.UNKNOWN_TOPIC_ID
    body = await call(broker, m.METADATA, 12, {"topics": [{"topic_id": ORDERS, "name": None}]})
    assert body["topics"][0]["name"] == "orders"


async def test_an_unknown_topic_is_auto_created_through_the_controller(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(cluster(), nursery=nursery, config={"num.partitions": "2"})
        controller = broker.controller_channel
        controller.respond = lambda key, version, body: {"topics": [
            {"name": "fresh", "error_code": 0, "error_message": None}]}
        controller.commit = topic("fresh", NEW, [[1], [0]])
        body = await call(broker, m.METADATA, 12, metadata_request("fresh"))
    [(key, _version, sent)] = controller.requests
    assert key == m.CREATE_TOPICS
    assert [(t["name"], t["num_partitions"], t["replication_factor"]) for t in sent["topics"]] == [
        ("fresh", 2, 1)]
    [t] = body["topics"]
    assert (t["error_code"], t["topic_id"]) == (E.NONE, NEW)
    assert [p["leader_id"] for p in t["partitions"]] == [1, 0]


async def test_a_topic_not_visible_in_time_or_refused_is_leader_not_available(autojump_clock):
    broker = FakeBroker(cluster())
    broker.controller_channel.respond = lambda key, version, body: {"topics": [
        {"name": "fresh", "error_code": 0, "error_message": None}]}  # never committed here
    start = trio.current_time()
    body = await call(broker, m.METADATA, 12, metadata_request("fresh"))
    assert body["topics"][0]["error_code"] == E.LEADER_NOT_AVAILABLE
    assert trio.current_time() - start < 3  # a short wait, not the client's whole timeout
    broker.controller_channel.respond = None  # no controller at all
    body = await call(broker, m.METADATA, 12, metadata_request("fresh"))
    assert body["topics"][0]["error_code"] == E.LEADER_NOT_AVAILABLE


async def test_no_auto_creation_when_not_allowed_and_bad_names_are_invalid():
    broker = FakeBroker(cluster())
    body = await call(broker, m.METADATA, 12, metadata_request("fresh", "bad/name", auto=False))
    assert [t["error_code"] for t in body["topics"]] == [
        E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_TOPIC_EXCEPTION]
    broker = FakeBroker(cluster(), config={"auto.create.topics.enable": "false"})
    body = await call(broker, m.METADATA, 12, metadata_request("fresh"))
    assert body["topics"][0]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert broker.controller_channel.requests == []


async def test_consumer_offsets_is_created_by_the_coordinator_and_internal(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(cluster(), nursery=nursery,
                            config={"offsets.topic.num.partitions": "2"})
        broker.controller_channel.respond = lambda key, version, body: {"topics": [
            {"name": "__consumer_offsets", "error_code": 0, "error_message": None}]}
        broker.controller_channel.commit = topic("__consumer_offsets", NEW, [[0], [1]])
        body = await call(broker, m.METADATA, 12, metadata_request("__consumer_offsets"))
    [(_key, _version, sent)] = broker.controller_channel.requests
    [t] = sent["topics"]
    assert (t["num_partitions"], t["replication_factor"]) == (2, -1)
    assert {c["name"]: c["value"] for c in t["configs"]} == {
        "cleanup.policy": "compact", "segment.bytes": str(broker.config.offsets_topic_segment_bytes)}
    [answer] = body["topics"]
    assert (answer["error_code"], answer["is_internal"]) == (E.NONE, True)


async def test_a_fenced_broker_record_takes_it_out_of_the_list():
    broker = FakeBroker(cluster())
    broker.apply([record(T.FENCE_BROKER_RECORD, id=1, epoch=11)])
    body = await call(broker, m.METADATA, 12, metadata_request("orders"))
    assert [b["node_id"] for b in body["brokers"]] == [0]
    assert body["topics"][0]["partitions"][0]["offline_replicas"] == [1, 2]


async def test_a_controller_clients_cannot_reach_is_named_as_this_broker():
    # a controller-only node (3000) or a fenced broker (2) is not on the client listener:
    # admin requests come here instead, and are forwarded
    for controller in (3000, 2):
        broker = FakeBroker(cluster(), controller_id=controller)
        body = await call(broker, m.METADATA, 12, metadata_request())
        assert body["controller_id"] == 0
