"""FindCoordinator names the leader of the group's __consumer_offsets partition; the
coordinator runtime follows this broker's leadership of those partitions: loading what
it comes to lead, unloading what it stops leading."""

from __future__ import annotations

import uuid

import trio
import trio.testing

from broker.config import topic_log_config
from broker.coordinator.group_runtime import OFFSETS_TOPIC
from broker.log.log import PartitionLog
from broker.partition import Partition
from protocol import messages as m
from protocol.errors import ErrorCode as E
from tests.broker.handlers.fakes import FakeBroker, call, register, topic

OFFSETS_ID = uuid.UUID(int=50)
CONFIG = {"offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "0"}


def offsets_topic(leaders: list[int]) -> list:
    return topic(OFFSETS_TOPIC, OFFSETS_ID, [[0, 1], [1, 0]], leaders=leaders)


def find(*keys: str) -> dict:
    return {"key_type": 0, "coordinator_keys": list(keys)}


async def test_find_coordinator_creates_the_offsets_topic_and_names_the_leader(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker([*register(0), *register(1)], nursery=nursery, config=CONFIG)
        controller = broker.controller_channel
        controller.respond = lambda key, version, body: {"topics": [
            {"name": OFFSETS_TOPIC, "error_code": 0, "error_message": None}]}
        controller.commit = offsets_topic([0, 1])
        keys = ["a", "b", "c", "d"]
        body = await call(broker, m.FIND_COORDINATOR, 4, find(*keys))
    assert len(controller.requests) == 1
    partition_for = broker.groups.coordinator.partition_for
    assert {partition_for(k) for k in keys} == {0, 1}  # both partitions, both brokers named
    assert [(c["key"], c["error_code"], c["node_id"], c["host"], c["port"])
            for c in body["coordinators"]] == [
        (k, E.NONE, partition_for(k), f"b{partition_for(k)}.test", 9092) for k in keys]


async def test_no_coordinator_without_the_topic_or_a_leader(autojump_clock):
    broker = FakeBroker([*register(0), *register(1)], config=CONFIG)  # no controller answers
    body = await call(broker, m.FIND_COORDINATOR, 4, find("a"))
    assert body["coordinators"][0]["error_code"] == E.COORDINATOR_NOT_AVAILABLE
    broker = FakeBroker([*register(0), *register(1), *offsets_topic([-1, -1])], config=CONFIG)
    body = await call(broker, m.FIND_COORDINATOR, 2, {"key": "a", "key_type": 0})
    assert (body["error_code"], body["node_id"]) == (E.COORDINATOR_NOT_AVAILABLE, -1)
    assert broker.controller_channel.requests == []  # the topic exists: nothing to create


async def test_share_and_unknown_keys_are_refused_at_once_with_a_reason(autojump_clock):
    # no coordinator for them: the answer must not be one a client retries until its
    # timeout (COORDINATOR_NOT_AVAILABLE), and nothing is created for it
    broker = FakeBroker([*register(0), *register(1), *offsets_topic([0, 1])], config=CONFIG)
    for key_type, reason in ((2, "a share coordinator key is groupId:topicId:partition"),
                             (7, "key type 7 is not supported by this broker")):
        body = await call(broker, m.FIND_COORDINATOR, 3, {"key": "s", "key_type": key_type})
        assert (body["error_code"], body["error_message"]) == (E.INVALID_REQUEST, reason)
    assert broker.controller_channel.requests == []


def leading(topic: str, index: int, log, leader_epoch: int = 0) -> Partition:
    """A partition this broker (0) leads alone, so its HW is its LEO."""
    partition = Partition(topic, index, log, node_id=0)
    partition.make_leader(leader_epoch=leader_epoch, partition_epoch=0, replicas=(0,),
                          isr=(0,), now_ms=0)
    return partition


def join(group: str, member_id: str = "") -> dict:
    return {"group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}], "reason": None}


def commit(group: str, offset: int) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                              "committed_leader_epoch": -1,
                                              "committed_metadata": ""}]}]}


def fetch_offsets(group: str) -> dict:
    return {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}],
            "require_stable": False}


async def test_the_runtime_loads_what_it_leads_and_unloads_what_it_stops_leading(
        tmp_path, autojump_clock):
    broker = FakeBroker([*register(0), *register(1), *offsets_topic([0, 1])], config=CONFIG)
    group = next(g for g in (f"g{i}" for i in range(100))
                 if broker.groups.coordinator.partition_for(g) == 0)
    log = PartitionLog.open(str(tmp_path), OFFSETS_TOPIC, 0, topic_log_config(broker.config, {}))
    broker.partitions[(OFFSETS_TOPIC, 0)] = leading(OFFSETS_TOPIC, 0, log)
    # the metadata makes this broker the leader, the coordinator has not begun to load it
    assert (await call(broker, m.JOIN_GROUP, 9, join(group)))["error_code"] \
        == E.COORDINATOR_LOAD_IN_PROGRESS

    broker.groups.on_partition_leadership(0, True)  # before run(): loaded once it runs
    assert (await call(broker, m.JOIN_GROUP, 9, join(group)))["error_code"] \
        == E.COORDINATOR_LOAD_IN_PROGRESS
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.groups.run)
        await trio.testing.wait_all_tasks_blocked()
        body = await call(broker, m.OFFSET_COMMIT, 9, commit(group, 42))
        assert body["topics"][0]["partitions"][0]["error_code"] == E.NONE
        assert log.log_end_offset == 1  # the commit is in the log

        # the metadata moves the leadership away, as a broker learns of it
        broker.groups.coordinator.leads_in_metadata = lambda partition: False
        broker.groups.on_partition_leadership(0, False)
        body = await call(broker, m.OFFSET_FETCH, 7, fetch_offsets(group))
        assert body["error_code"] == E.NOT_COORDINATOR

        broker.groups.coordinator.leads_in_metadata = lambda partition: partition == 0
        broker.groups.on_partition_leadership(0, True)  # leading again: replayed from the log
        await trio.testing.wait_all_tasks_blocked()
        body = await call(broker, m.OFFSET_FETCH, 7, fetch_offsets(group))
        assert body["error_code"] == E.NONE
        assert body["topics"][0]["partitions"][0]["committed_offset"] == 42
        nursery.cancel_scope.cancel()
    log.close()


async def test_a_member_waiting_in_a_rebalance_learns_of_the_move_at_once(autojump_clock):
    broker = FakeBroker([*register(0), *register(1), *offsets_topic([0, 1])],
                        config={**CONFIG, "group.initial.rebalance.delay.ms": "3000"})
    group = next(g for g in (f"g{i}" for i in range(100))
                 if broker.groups.coordinator.partition_for(g) == 1)
    broker.groups.coordinator.finish_load(1, broker.now)  # an empty partition, led here
    first = await call(broker, m.JOIN_GROUP, 9, join(group))
    assert first["error_code"] == E.MEMBER_ID_REQUIRED
    async with trio.open_nursery() as nursery:
        answers: list = []

        async def waiting_join():
            answers.append(await call(broker, m.JOIN_GROUP, 9, join(group, first["member_id"])))

        nursery.start_soon(waiting_join)
        await trio.testing.wait_all_tasks_blocked()
        assert answers == []  # held by the initial rebalance delay
        broker.groups.on_partition_leadership(1, False)
        await trio.testing.wait_all_tasks_blocked()
    assert answers[0]["error_code"] == E.NOT_COORDINATOR


async def test_a_refused_offsets_topic_is_not_waited_for(autojump_clock):
    broker = FakeBroker([*register(0)], config=CONFIG)
    broker.controller_channel.respond = lambda key, version, body: {"topics": [
        {"name": OFFSETS_TOPIC, "error_code": E.INVALID_REPLICATION_FACTOR,
         "error_message": "no live brokers"}]}
    start = trio.current_time()
    body = await call(broker, m.FIND_COORDINATOR, 4, find("a"))
    assert body["coordinators"][0]["error_code"] == E.COORDINATOR_NOT_AVAILABLE
    assert trio.current_time() == start
