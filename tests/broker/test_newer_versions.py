"""The API versions Kafka 4 clients prefer, spoken to an in-process broker (real server,
log and coordinator, virtual time): ListOffsets v8-v10, Produce v11-v12, FindCoordinator
v5-v6, Metadata v12-v13 by topic id, and DescribeTopicPartitions v0.

Each request goes through our client connection at an explicit version, so the test pins
the version rather than whatever both sides would pick.
"""

from __future__ import annotations

import uuid

import trio

from client.connection import BrokerConnection, background_nursery
from protocol import versions
from protocol.errors import ErrorCode as E
from protocol.messages import (
    DESCRIBE_TOPIC_PARTITIONS, FIND_COORDINATOR, LIST_OFFSETS, METADATA, PRODUCE,
)
from protocol.records import Record, encode_batch
from tests.inproc import InProcessBroker

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
ZERO = uuid.UUID(int=0)
TS = 1_700_000_000_000


# Produce v12's transactional batch comes from a producer no coordinator knows: its
# partition is not verified with one first (KIP-890), the partition side alone is shown
INPROC_OVERRIDES = {"transaction.partition.verification.enable": "false"}

async def _connect(nursery: trio.Nursery, inproc: InProcessBroker) -> BrokerConnection:
    conn = BrokerConnection(inproc.broker.advertised.host, inproc.broker.advertised.port)
    await conn.open(nursery)
    return conn


READ_COMMITTED = 1


def _batch(n: int, first_ts: int = TS, **kw) -> bytes:
    return encode_batch([Record(i, first_ts + 10 * i, None, b"v%d" % i, []) for i in range(n)],
                        **kw)


async def _produce(conn: BrokerConnection, version: int, topic: str, data: bytes,
                   transactional_id: str | None = None):
    resp = await conn.request(PRODUCE, {
        "transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": data}]}]},
        version)
    [t] = resp.body.responses
    [p] = t.partition_responses
    return p


async def _list_offsets(conn: BrokerConnection, version: int, topic: str, timestamp: int,
                        isolation_level: int = 0):
    resp = await conn.request(LIST_OFFSETS, {
        "replica_id": -1, "isolation_level": isolation_level, "timeout_ms": 30_000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                            "timestamp": timestamp}]}]}, version)
    [t] = resp.body.topics
    [p] = t.partitions
    return p.error_code, p.offset, p.timestamp, p.leader_epoch


def test_the_newer_versions_are_what_the_broker_advertises_and_our_client_speaks():
    ranges = {key: (low, high) for key, low, high in versions.advertised()}
    assert ranges[PRODUCE] == (0, 12)
    assert ranges[LIST_OFFSETS] == (0, 10)
    assert ranges[METADATA] == (0, 13)
    assert ranges[FIND_COORDINATOR] == (0, 6)
    assert ranges[DESCRIBE_TOPIC_PARTITIONS] == (0, 0)
    assert versions.pick_version(PRODUCE, 0, 13) == 12  # Kafka 4.1's topic-id Produce is not
    assert versions.pick_version(LIST_OFFSETS, 0, 11) == 10


async def test_produce_v11_and_v12_append_as_v10_does_and_a_transactional_batch_waits(
        inproc, autojump_clock):
    await inproc.create_topic("p12", 1)
    async with background_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        answers = [await _produce(conn, v, "p12", _batch(2)) for v in (10, 11, 12)]
        assert [(p.error_code, p.base_offset, p.log_start_offset) for p in answers] == [
            (E.NONE, 0, 0), (E.NONE, 2, 0), (E.NONE, 4, 0)]
        # a transactional batch is appended and opens its transaction: read_committed
        # consumers are told the log ends before it until a marker ends it
        appended = await _produce(conn, 12, "p12", _batch(1, producer_id=7, producer_epoch=0,
                                                          base_sequence=0, is_transactional=True),
                                  transactional_id="tx")
        assert (appended.error_code, appended.base_offset) == (E.NONE, 6)
        assert await _list_offsets(conn, 10, "p12", LATEST) == (E.NONE, 7, -1, 0)
        assert await _list_offsets(conn, 10, "p12", LATEST, READ_COMMITTED) == (E.NONE, 6, -1, 0)


async def test_list_offsets_v8_to_v10_answer_the_tiered_lookups_as_kafka_without_tiering(
        inproc, autojump_clock):
    await inproc.create_topic("lo", 1)
    async with background_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        await _produce(conn, 12, "lo", _batch(3))
        for version in (8, 9, 10):
            # the whole log is local: earliest local is the log start offset, as earliest
            assert await _list_offsets(conn, version, "lo", EARLIEST_LOCAL) == \
                await _list_offsets(conn, version, "lo", EARLIEST) == (E.NONE, 0, -1, 0)
            assert await _list_offsets(conn, version, "lo", LATEST) == (E.NONE, 3, -1, 0)
            assert await _list_offsets(conn, version, "lo", TS + 15) == (E.NONE, 2, TS + 20, 0)
            assert await _list_offsets(conn, version, "lo", MAX_TIMESTAMP) == (
                E.NONE, 2, TS + 20, 0)
        # nothing is tiered: Kafka answers -1 for offset, timestamp and epoch, no error
        for version in (9, 10):
            assert await _list_offsets(conn, version, "lo", LATEST_TIERED) == (E.NONE, -1, -1, -1)
        # a timestamp no version defines is still refused
        assert (await _list_offsets(conn, 10, "lo", -7))[0] == E.INVALID_REQUEST


async def test_find_coordinator_v5_and_v6_answer_each_key_of_a_batch(inproc, autojump_clock):
    async with background_nursery() as nursery:
        conn = await _connect(nursery, inproc)

        async def find(version: int, key_type: int, keys: list[str]):
            resp = await conn.request(FIND_COORDINATOR, {
                "key_type": key_type, "coordinator_keys": keys}, version)
            return [(c.key, c.error_code, c.node_id, c.error_message)
                    for c in resp.body.coordinators]

        node = inproc.broker.node_id
        for version in (5, 6):
            # the first lookup creates __consumer_offsets and waits for it
            assert await find(version, 0, ["g1", "g2"]) == [
                ("g1", E.NONE, node, None), ("g2", E.NONE, node, None)]
            # and a transactional id's, __transaction_state
            assert await find(version, 1, ["t1", "t2"]) == [
                ("t1", E.NONE, node, None), ("t2", E.NONE, node, None)]
        # v6 is the version that may name a share partition (key type 2): its share
        # coordinator, on __share_group_state
        assert await find(6, 2, ["s1:AAAAAAAAAAAAAAAAAAAAAA:0"]) == [
            ("s1:AAAAAAAAAAAAAAAAAAAAAA:0", E.NONE, node, None)]


async def test_metadata_v13_names_topics_by_id_and_v11_may_not(inproc, autojump_clock):
    await inproc.create_topic("byid", 2)
    topic_id = inproc.broker.metadata_cache.topic("byid").topic_id
    unknown = uuid.UUID(int=99)
    async with background_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        for version in (12, 13):
            body = (await conn.request(METADATA, {
                "topics": [{"topic_id": topic_id, "name": None},
                           {"topic_id": unknown, "name": None}],
                "allow_auto_topic_creation": False}, version)).body
            assert [(t.error_code, t.name, t.topic_id, len(t.partitions)) for t in body.topics] == [
                (E.NONE, "byid", topic_id, 2), (E.UNKNOWN_TOPIC_ID, None, unknown, 0)]
            if version == 13:
                assert body.error_code == E.NONE
        # v10 and v11 carry the fields, but Kafka refuses ids (and null names) there
        body = (await conn.request(METADATA, {
            "topics": [{"topic_id": topic_id, "name": None}, {"topic_id": ZERO, "name": "byid"}],
            "allow_auto_topic_creation": False}, 11)).body
        assert [(t.error_code, t.name, t.topic_id, list(t.partitions)) for t in body.topics] == [
            (E.INVALID_REQUEST, "", topic_id, []), (E.INVALID_REQUEST, "byid", ZERO, [])]
        assert list(body.brokers) == []


async def test_describe_topic_partitions_pages_through_every_topic(inproc, autojump_clock):
    await inproc.create_topic("dtp-a", 3)
    await inproc.create_topic("dtp-b", 2)
    cache = inproc.broker.metadata_cache
    node = inproc.broker.node_id
    async with background_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        pages = []
        cursor = None
        with trio.fail_after(30):
            while True:
                body = (await conn.request(DESCRIBE_TOPIC_PARTITIONS, {
                    "topics": [{"name": "dtp-b"}, {"name": "dtp-a"}, {"name": "dtp-none"}],
                    "response_partition_limit": 2, "cursor": cursor}, 0)).body
                pages.append([(t.name, t.error_code, [p.partition_index for p in t.partitions])
                              for t in body.topics])
                if body.next_cursor is None:
                    break
                cursor = {"topic_name": body.next_cursor.topic_name,
                          "partition_index": body.next_cursor.partition_index}
        assert pages == [
            [("dtp-a", E.NONE, [0, 1])],
            [("dtp-a", E.NONE, [2]), ("dtp-b", E.NONE, [0])],
            [("dtp-b", E.NONE, [1]), ("dtp-none", E.UNKNOWN_TOPIC_OR_PARTITION, [])]]
        body = (await conn.request(DESCRIBE_TOPIC_PARTITIONS, {
            "topics": [{"name": "dtp-a"}], "response_partition_limit": 2000}, 0)).body
        [t] = body.topics
        assert (t.topic_id, t.is_internal) == (cache.topic("dtp-a").topic_id, False)
        assert [(p.error_code, p.leader_id, p.leader_epoch, list(p.replica_nodes),
                 list(p.isr_nodes), list(p.eligible_leader_replicas), list(p.last_known_elr),
                 list(p.offline_replicas)) for p in t.partitions] == [
            (E.NONE, node, 0, [node], [node], [], [], [])] * 3
