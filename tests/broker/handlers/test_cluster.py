"""DescribeCluster from the image, ElectLeaders and UnregisterBroker forwarded,
InitProducerId from the controller's producer id blocks."""

from __future__ import annotations

import uuid

import trio

from protocol import messages as m
from protocol.errors import ErrorCode as E
from protocol.metadata_records import MetadataRecordType as T
from tests.broker.handlers.fakes import CLUSTER_ID, FakeBroker, call, record, register, topic

ORDERS = uuid.UUID(int=1)


def cluster() -> list:
    return [*register(0, rack="r0"), *register(1), *register(2, fenced=True),
            *topic("orders", ORDERS, [[0, 1], [1, 0]], leaders=[1, 1], epochs=[2, 0])]


async def test_describe_cluster_names_live_brokers_on_the_client_listener():
    broker = FakeBroker(cluster(), controller_id=3000)  # a controller-only node
    body = await call(broker, m.DESCRIBE_CLUSTER, 1, {
        "include_cluster_authorized_operations": False, "endpoint_type": 1})
    assert (body["error_code"], body["cluster_id"], body["controller_id"], body["endpoint_type"]) \
        == (E.NONE, CLUSTER_ID, 0, 1)  # clients reach it through this broker
    assert body["brokers"] == [{"broker_id": 0, "host": "b0.test", "port": 9092, "rack": "r0"},
                               {"broker_id": 1, "host": "b1.test", "port": 9092, "rack": None}]
    body = await call(broker, m.DESCRIBE_CLUSTER, 1, {
        "include_cluster_authorized_operations": False, "endpoint_type": 2})
    assert (body["error_code"], body["brokers"]) == (E.UNSUPPORTED_ENDPOINT_TYPE, [])


def elect(timeout_ms: int = 30_000) -> dict:
    return {"election_type": 0, "topic_partitions": [{"topic": "orders", "partitions": [0, 1]}],
            "timeout_ms": timeout_ms}


async def test_elect_leaders_is_forwarded_and_awaited_in_the_image(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(cluster(), nursery=nursery)
        controller = broker.controller_channel
        controller.respond = lambda key, version, body: {
            "throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
                {"topic": "orders", "partition_result": [
                    {"partition_id": 0, "error_code": 0, "error_message": None},
                    {"partition_id": 1, "error_code": E.ELECTION_NOT_NEEDED,
                     "error_message": None}]}]}
        controller.commit = [record(T.PARTITION_CHANGE_RECORD, partition_id=0, topic_id=ORDERS,
                                    leader=0)]
        body = await call(broker, m.ELECT_LEADERS, 2, elect())
        assert broker.metadata_cache.leader("orders", 0) == 0  # the answer waited for it
    assert controller.requests[0][:2] == (m.ELECT_LEADERS, 2)
    assert [p["error_code"] for p in body["replica_election_results"][0]["partition_result"]] \
        == [E.NONE, E.ELECTION_NOT_NEEDED]


async def test_elect_leaders_without_a_controller_times_out():
    broker = FakeBroker(cluster())
    body = await call(broker, m.ELECT_LEADERS, 2, elect())
    assert body["error_code"] == E.REQUEST_TIMED_OUT
    assert [p["error_code"] for p in body["replica_election_results"][0]["partition_result"]] \
        == [E.REQUEST_TIMED_OUT, E.REQUEST_TIMED_OUT]
    body = await call(broker, m.ELECT_LEADERS, 0, {"topic_partitions": None, "timeout_ms": 1})
    assert body["replica_election_results"] == []


async def test_unregister_broker_is_forwarded_and_answers_the_controllers_code():
    broker = FakeBroker(cluster())
    controller = broker.controller_channel
    controller.respond = lambda key, version, body: {
        "throttle_time_ms": 0, "error_code": E.BROKER_ID_NOT_REGISTERED,
        "error_message": f"Broker ID {body.broker_id} is not registered."}
    body = await call(broker, m.UNREGISTER_BROKER, 0, {"broker_id": 7})
    assert (body["error_code"], body["error_message"]) == (
        E.BROKER_ID_NOT_REGISTERED, "Broker ID 7 is not registered.")
    assert controller.requests[0][:2] == (m.UNREGISTER_BROKER, 0)
    assert controller.requests[0][2].broker_id == 7


async def test_unregister_broker_without_a_controller_times_out():
    body = await call(FakeBroker(cluster()), m.UNREGISTER_BROKER, 0, {"broker_id": 1})
    assert body["error_code"] == E.REQUEST_TIMED_OUT


async def test_init_producer_id_asks_the_controller():
    broker = FakeBroker(cluster())
    request = {"transactional_id": None, "transaction_timeout_ms": 1000, "producer_id": -1,
               "producer_epoch": -1}
    body = await call(broker, m.INIT_PRODUCER_ID, 4, request)
    assert (body["error_code"], body["producer_id"], body["producer_epoch"]) == (E.NONE, 5000, 0)
    broker.next_producer_id = None
    body = await call(broker, m.INIT_PRODUCER_ID, 4, request)
    assert (body["error_code"], body["producer_id"]) == (E.COORDINATOR_NOT_AVAILABLE, -1)
