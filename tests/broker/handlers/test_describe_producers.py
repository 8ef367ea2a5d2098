"""DescribeProducers (api 61): the producers of a partition and their open transactions, as
a transactional Producer's requests leave them on an in-process broker, and the request's
errors (an illegal, unknown or unauthorized topic, a partition with no replica here, a
follower answering from its own producer state) on the fake broker."""

from __future__ import annotations

import uuid

import trio

from broker.producer_state import ProducerStateManager
from broker.security.acls import AclOperation as Op
from client.producer.producer import Producer
from protocol.errors import ErrorCode as E
from protocol.messages import DESCRIBE_PRODUCERS
from tests.broker.handlers.fakes import FakeBroker, call, register, topic
from tests.broker.handlers.test_authorization import ALICE, call_as, cluster, grant
from tests.inproc import InProcessBroker
from tests.util import unique, wait_for

DEADLINE_S = 60


def _ask(partitions: dict[str, list[int]]) -> dict:
    return {"topics": [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]}


def _by_partition(answer: dict) -> dict[tuple[str, int], dict]:
    return {(t["name"], p["partition_index"]): p for t in answer["topics"]
            for p in t["partitions"]}


async def _describe(inproc: InProcessBroker, partitions: dict[str, list[int]]
                    ) -> dict[tuple[str, int], dict]:
    return _by_partition(await call(inproc.broker, DESCRIBE_PRODUCERS, 0, _ask(partitions)))


async def test_an_open_transaction_shows_its_start_offset_until_it_commits(
        inproc, autojump_clock):
    t, tid = unique("t"), unique("tx")
    await inproc.create_topic(t, 2)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=inproc.bootstrap) as plain:
            for i in range(3):  # offsets 0-2, from an idempotent producer
                await (await plain.send(t, b"p%d" % i, partition=0))
        (plain_id,) = inproc.broker.partition(t, 0).producers.producers
        async with Producer(bootstrap_servers=inproc.bootstrap,
                            transactional_id=tid) as producer:
            producer.begin_transaction()
            first = await (await producer.send(t, b"a", partition=0))
            await (await producer.send(t, b"b", partition=0))
            md = inproc.broker.transactions.coordinator.transactions[tid]
            pid, epoch = md.producer_id, md.producer_epoch

            described = await _describe(inproc, {t: [0, 1]})
            assert described[(t, 1)] == {"partition_index": 1, "error_code": E.NONE,
                                         "error_message": None, "active_producers": []}
            p0 = described[(t, 0)]
            assert p0["error_code"] == E.NONE
            rows = {r["producer_id"]: r for r in p0["active_producers"]}
            assert rows.keys() == {plain_id, pid}
            assert (rows[plain_id]["last_sequence"], rows[plain_id]["current_txn_start_offset"],
                    rows[plain_id]["coordinator_epoch"]) == (2, -1, -1)
            assert first.offset == 3
            mine = rows[pid]
            assert (mine["producer_epoch"], mine["last_sequence"], mine["coordinator_epoch"],
                    mine["current_txn_start_offset"]) == (epoch, 1, -1, 3)
            assert 0 < mine["last_timestamp"] <= inproc.broker.now_ms()

            await producer.commit_transaction()
            partition = inproc.broker.partition(t, 0)
            await wait_for(lambda: partition.last_stable_offset == partition.high_watermark,
                           10, "the commit marker written")
            row = next(r for r in (await _describe(inproc, {t: [0]}))[(t, 0)]
                       ["active_producers"] if r["producer_id"] == pid)
            # the marker closed the transaction and named its coordinator's epoch
            assert row["current_txn_start_offset"] == -1
            coordinator = inproc.broker.transactions.coordinator
            assert row["coordinator_epoch"] == \
                coordinator.coordinator_epochs[coordinator.partition_for(tid)]


async def test_topic_errors_and_partitions_not_here():
    broker = FakeBroker([*register(0), *register(1),
                         *topic("here", uuid.UUID(int=1), [[0], [1]])])
    # a partition of a known topic with no replica here; one the topic does not have;
    # a topic nobody made; a name Kafka would refuse
    answer = _by_partition(await call(broker, DESCRIBE_PRODUCERS, 0, _ask(
        {"here": [1, 9], "gone": [0], "bad/name": [0]})))
    assert {tp: p["error_code"] for tp, p in answer.items()} == {
        ("here", 1): E.NOT_LEADER_OR_FOLLOWER, ("here", 9): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("gone", 0): E.UNKNOWN_TOPIC_OR_PARTITION, ("bad/name", 0): E.INVALID_TOPIC_EXCEPTION}


async def test_a_follower_answers_from_its_own_producer_state():
    broker = FakeBroker([*register(0), *register(1),
                         *topic("t", uuid.UUID(int=1), [[1, 0]])])
    follower = broker.hold("t", 0)
    assert not follower.is_leader
    follower.producers = ProducerStateManager()  # type: ignore[attr-defined]
    follower.producers.update(42, 3, 0, 5, 100, 1_000, 2_000, is_transactional=True)
    answer = _by_partition(await call(broker, DESCRIBE_PRODUCERS, 0, _ask({"t": [0]})))
    assert answer[("t", 0)]["active_producers"] == [{
        "producer_id": 42, "producer_epoch": 3, "last_sequence": 4, "last_timestamp": 2_000,
        "coordinator_epoch": -1, "current_txn_start_offset": 100}]


async def test_it_needs_read_on_the_topic():
    broker = cluster(grant("orders", Op.DESCRIBE), grant("payments", Op.READ))
    broker.hold("payments", 0).producers = ProducerStateManager()  # type: ignore[attr-defined]
    broker.hold("orders", 0).producers = ProducerStateManager()  # type: ignore[attr-defined]
    answer = _by_partition(await call_as(broker, ALICE, DESCRIBE_PRODUCERS, 0,
                                         _ask({"orders": [0], "payments": [0]})))
    assert answer[("orders", 0)]["error_code"] == E.TOPIC_AUTHORIZATION_FAILED
    assert answer[("payments", 0)]["error_code"] == E.NONE
