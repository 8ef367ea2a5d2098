"""The broker's middle layer (server, handlers, coordinator runtime) on virtual time.

Each test runs a `Broker` and its server in the test's own trio run on an autojump MockClock
(tests/inproc.py) and speaks raw requests through our client's BrokerConnection, so it can
hold a member still, or stop its heartbeats, at an exact virtual instant. Session and
rebalance timeouts of tens of seconds pass in milliseconds of real time.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from client.connection import BrokerConnection, background_nursery
from protocol.errors import ErrorCode
from protocol.messages import FETCH, FIND_COORDINATOR, HEARTBEAT, JOIN_GROUP, PRODUCE, SYNC_GROUP
from protocol.records import Record, encode_batch
from tests.inproc import InProcessBroker

GROUP = "g"
SESSION_MS = 10_000
REBALANCE_MS = 20_000
# the whole system is idle between requests, so virtual time is exact: this is only the
# distance from a deadline at which a test looks on either side of it
MARGIN_S = 0.01


class RawMember:
    """One group member driven request by request, on a connection of its own (the broker
    answers a connection's requests in order, and a JoinGroup waits for the rebalance)."""

    def __init__(self, conn: BrokerConnection):
        self.conn = conn
        self.member_id = ""
        self.generation = -1
        self.leader = ""

    async def join(self) -> Any:
        """JoinGroup until admitted (v4+ first answers MEMBER_ID_REQUIRED with an id)."""
        while True:
            resp = await self.conn.request(JOIN_GROUP, {
                "group_id": GROUP, "session_timeout_ms": SESSION_MS,
                "rebalance_timeout_ms": REBALANCE_MS, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}], "reason": None},
                timeout_ms=10 * REBALANCE_MS)
            body = resp.body
            self.member_id = body.member_id
            if body.error_code != ErrorCode.MEMBER_ID_REQUIRED:
                assert body.error_code == ErrorCode.NONE
                self.generation, self.leader = body.generation_id, body.leader
                return body

    async def sync(self, assignments: dict[str, bytes] | None = None) -> None:
        resp = await self.conn.request(SYNC_GROUP, {
            "group_id": GROUP, "generation_id": self.generation, "member_id": self.member_id,
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": m, "assignment": a}
                            for m, a in (assignments or {}).items()]})
        assert resp.body.error_code == ErrorCode.NONE

    async def heartbeat(self) -> ErrorCode:
        resp = await self.conn.request(HEARTBEAT, {
            "group_id": GROUP, "generation_id": self.generation, "member_id": self.member_id,
            "group_instance_id": None})
        return ErrorCode(resp.body.error_code)


async def _connect(nursery: trio.Nursery, inproc: InProcessBroker) -> BrokerConnection:
    conn = BrokerConnection(inproc.broker.advertised.host, inproc.broker.advertised.port)
    await conn.open(nursery)
    return conn


async def _find_coordinator(conn: BrokerConnection) -> None:
    """Also creates __consumer_offsets, which JoinGroup needs."""
    resp = await conn.request(FIND_COORDINATOR, {"key": GROUP, "key_type": 0,
                                                 "coordinator_keys": [GROUP]})
    assert [c.error_code for c in resp.body.coordinators] == [ErrorCode.NONE]  # v4+: batched


async def test_a_member_without_heartbeats_is_removed_after_the_session_timeout(
        inproc, autojump_clock):
    async with background_nursery() as nursery:
        member = RawMember(await _connect(nursery, inproc))
        await _find_coordinator(member.conn)
        await member.join()
        await member.sync({member.member_id: b""})
        assert inproc.describe_group(GROUP)["group_state"] == "Stable"

        # heartbeats every 3 s keep it in the group over six session timeouts
        started = trio.current_time()
        while trio.current_time() < started + 6 * SESSION_MS / 1000:
            await trio.sleep(3)
            assert await member.heartbeat() == ErrorCode.NONE
        last_heartbeat = trio.current_time()

        await trio.sleep_until(last_heartbeat + SESSION_MS / 1000 - MARGIN_S)
        assert inproc.member_ids(GROUP) == {member.member_id}
        await trio.sleep_until(last_heartbeat + SESSION_MS / 1000 + MARGIN_S)
        assert inproc.member_ids(GROUP) == set()
        assert inproc.describe_group(GROUP)["group_state"] == "Empty"
        assert await member.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout(
        inproc, autojump_clock):
    async with background_nursery() as nursery:
        a = RawMember(await _connect(nursery, inproc))
        b = RawMember(await _connect(nursery, inproc))
        await _find_coordinator(a.conn)
        async with trio.open_nursery() as joining:  # both in the first rebalance
            joining.start_soon(a.join)
            joining.start_soon(b.join)
        assert a.generation == b.generation and a.leader == b.leader
        # the leader's rejoin starts a rebalance (a follower's, in a stable group with the
        # same metadata, would only get the current generation back)
        leader, follower = (a, b) if a.leader == a.member_id else (b, a)
        async with trio.open_nursery() as syncing:
            syncing.start_soon(follower.sync)
            syncing.start_soon(leader.sync, {a.member_id: b"", b.member_id: b""})
        assert inproc.describe_group(GROUP)["group_state"] == "Stable"

        # the follower keeps heartbeating but never rejoins: its session holds, the
        # rebalance does not
        heartbeats: list[ErrorCode] = []

        async def keep_heartbeating() -> None:
            while True:
                await trio.sleep(3)
                heartbeats.append(await follower.heartbeat())
        nursery.start_soon(keep_heartbeating)

        rebalance_started = trio.current_time()
        body = await leader.join()
        waited = trio.current_time() - rebalance_started
        assert waited == pytest.approx(REBALANCE_MS / 1000, abs=MARGIN_S)
        assert [m.member_id for m in body.members] == [leader.member_id]
        assert inproc.member_ids(GROUP) == {leader.member_id}
        assert ErrorCode.REBALANCE_IN_PROGRESS in heartbeats
        assert await follower.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID


def _fetch_body(topic: str, max_wait_ms: int) -> dict:
    return {"cluster_id": None, "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _records(resp) -> bytes:
    return resp.body.responses[0].partitions[0].records or b""


async def test_long_poll_fetch_answers_at_its_deadline_when_nothing_arrives(
        inproc, autojump_clock):
    await inproc.create_topic("quiet", 1)
    async with background_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        sent = trio.current_time()
        resp = await conn.request(FETCH, _fetch_body("quiet", 5_000), timeout_ms=60_000)
        assert trio.current_time() - sent == pytest.approx(5.0, abs=MARGIN_S)
        assert _records(resp) == b""
        assert resp.body.responses[0].partitions[0].error_code == ErrorCode.NONE


async def test_long_poll_fetch_answers_as_soon_as_data_arrives(inproc, autojump_clock):
    await inproc.create_topic("busy", 1)
    batch = encode_batch([Record(0, 0, b"k", b"hello", [])])
    async with background_nursery() as nursery:
        fetcher, producer = await _connect(nursery, inproc), await _connect(nursery, inproc)
        sent = trio.current_time()
        produced_at: list[float] = []

        async def produce_later() -> None:
            await trio.sleep(1.5)
            resp = await producer.request(PRODUCE, {
                "transactional_id": None, "acks": -1, "timeout_ms": 30_000,
                "topic_data": [{"name": "busy", "partition_data": [
                    {"index": 0, "records": batch}]}]})
            assert resp.body.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            produced_at.append(trio.current_time())

        async with trio.open_nursery() as both:
            both.start_soon(produce_later)
            resp = await fetcher.request(FETCH, _fetch_body("busy", 30_000), timeout_ms=60_000)
            answered = trio.current_time() - sent
        assert answered == pytest.approx(1.5, abs=MARGIN_S)  # not the 30 s deadline
        assert b"hello" in _records(resp)
        # the append woke the fetch: both answers left at the same virtual instant
        assert produced_at[0] - sent == pytest.approx(answered, abs=MARGIN_S)


async def test_the_runtime_refuses_an_effect_it_does_not_know(inproc, autojump_clock):
    with pytest.raises(TypeError, match="cannot carry out"):
        inproc.broker.groups.apply_effects([("an effect", "from a newer coordinator")])
