"""Data requests reach a partition only through its leader: NOT_LEADER_OR_FOLLOWER for a
replica that does not lead and for a partition held elsewhere, UNKNOWN_TOPIC_OR_PARTITION
for one the image lacks, and KIP-320's leader-epoch fencing before either; a replica on an
offline log directory answers KAFKA_STORAGE_ERROR before all of them."""

from __future__ import annotations

import uuid

import pytest

from protocol import messages as m
from protocol.errors import ErrorCode as E
from tests.broker.handlers.fakes import FakeBroker, call, register, topic

ORDERS = uuid.UUID(int=1)


def broker() -> FakeBroker:
    """Broker 0 of two; orders-0 led by 0 (epoch 3), orders-1 led by 1 (epoch 4) with a
    local follower replica on 0, orders-2 only on broker 1."""
    b = FakeBroker([*register(0, rack="r0"), *register(1, rack="r1"),
                    *topic("orders", ORDERS, [[0, 1], [1, 0], [1]], epochs=[3, 4, 1])])
    b.hold("orders", 0)
    b.hold("orders", 1)
    return b


def produce(topic_name: str, index: int) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": topic_name, "partition_data": [{"index": index, "records": b"x" * 70}]}]}


@pytest.mark.parametrize("name,index,error", [
    ("orders", 1, E.NOT_LEADER_OR_FOLLOWER),  # a local follower
    ("orders", 2, E.NOT_LEADER_OR_FOLLOWER),  # held elsewhere
    ("orders", 9, E.UNKNOWN_TOPIC_OR_PARTITION),
    ("missing", 0, E.UNKNOWN_TOPIC_OR_PARTITION),
    ("bad/name", 0, E.INVALID_TOPIC_EXCEPTION),
])
async def test_produce_is_for_the_leader_only(name, index, error):
    body = await call(broker(), m.PRODUCE, 9, produce(name, index))
    assert body["responses"][0]["partition_responses"][0]["error_code"] == error


async def test_produce_v10_names_the_current_leader_and_its_endpoint():
    body = await call(broker(), m.PRODUCE, 10, produce("orders", 2))
    [answer] = body["responses"][0]["partition_responses"]
    assert answer["error_code"] == E.NOT_LEADER_OR_FOLLOWER
    assert answer["current_leader"] == {"leader_id": 1, "leader_epoch": 1}
    assert body["node_endpoints"] == [{"node_id": 1, "host": "b1.test", "port": 9092,
                                       "rack": "r1"}]


def fetch(index: int, current_leader_epoch: int = -1) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                {"topic": "orders", "partitions": [
                    {"partition": index, "current_leader_epoch": current_leader_epoch,
                     "fetch_offset": 0, "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


@pytest.mark.parametrize("index,epoch,error", [
    (0, 2, E.FENCED_LEADER_EPOCH),  # the client's leader epoch is older than ours (3)
    (0, 4, E.UNKNOWN_LEADER_EPOCH),  # newer: our metadata lags
    (1, 4, E.NOT_LEADER_OR_FOLLOWER),  # the epoch is right, but we only follow
    (1, 3, E.FENCED_LEADER_EPOCH),  # fencing is checked before leadership, as in Kafka
    (2, -1, E.NOT_LEADER_OR_FOLLOWER),
    (7, -1, E.UNKNOWN_TOPIC_OR_PARTITION),
])
async def test_fetch_checks_the_leader_epoch_then_leadership(index, epoch, error):
    body = await call(broker(), m.FETCH, 12, fetch(index, epoch))
    [answer] = body["responses"][0]["partitions"]
    assert (answer["error_code"], answer["high_watermark"], answer["records"]) == (error, -1, b"")


async def test_fetch_v12_names_the_current_leader_when_sending_the_client_elsewhere():
    body = await call(broker(), m.FETCH, 12, fetch(1))
    [answer] = body["responses"][0]["partitions"]
    assert answer["current_leader"] == {"leader_id": 1, "leader_epoch": 4}


async def test_list_offsets_and_offset_for_leader_epoch_need_the_leader():
    b = broker()
    body = await call(b, m.LIST_OFFSETS, 7, {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": "orders", "partitions": [
            {"partition_index": i, "current_leader_epoch": -1, "timestamp": -1}
            for i in (1, 2, 5)]}]})
    assert [p["error_code"] for p in body["topics"][0]["partitions"]] == [
        E.NOT_LEADER_OR_FOLLOWER, E.NOT_LEADER_OR_FOLLOWER, E.UNKNOWN_TOPIC_OR_PARTITION]
    body = await call(b, m.OFFSET_FOR_LEADER_EPOCH, 4, {
        "replica_id": -1, "topics": [{"topic": "orders", "partitions": [
            {"partition": 0, "current_leader_epoch": 9, "leader_epoch": 3},
            {"partition": 1, "current_leader_epoch": -1, "leader_epoch": 3}]}]})
    assert [p["error_code"] for p in body["topics"][0]["partitions"]] == [
        E.UNKNOWN_LEADER_EPOCH, E.NOT_LEADER_OR_FOLLOWER]


async def test_lookup_hands_out_the_partition_the_broker_leads_at_the_clients_epoch():
    from broker.handlers.common import lookup

    b = broker()
    for epoch in (-1, 3):
        partition, error = lookup(b, "orders", 0, epoch)  # type: ignore[arg-type]
        assert (partition, error) == (b.partitions[("orders", 0)], E.NONE)


async def test_every_replica_on_an_offline_log_directory_answers_storage_error():
    """As Kafka's offline partitions: led here or not, and whatever the client's epoch;
    a partition with no replica here is still someone else's."""
    b = broker()
    b.log_dirs.mark_offline(b.log_dirs.dirs[0], "EIO")
    body = await call(b, m.PRODUCE, 9, produce("orders", 0))
    assert body["responses"][0]["partition_responses"][0]["error_code"] == E.KAFKA_STORAGE_ERROR
    for index, epoch, error in [(0, -1, E.KAFKA_STORAGE_ERROR), (0, 2, E.KAFKA_STORAGE_ERROR),
                                (1, -1, E.KAFKA_STORAGE_ERROR),
                                (2, -1, E.NOT_LEADER_OR_FOLLOWER),
                                (7, -1, E.UNKNOWN_TOPIC_OR_PARTITION)]:
        body = await call(b, m.FETCH, 12, fetch(index, epoch))
        assert body["responses"][0]["partitions"][0]["error_code"] == error, index
