"""The share partitions' `share_partition_state` events, from an in-process broker on virtual
time served real ShareGroupHeartbeat, ShareFetch and ShareAcknowledge requests: one event per
share partition with each `metrics` sample (events.metrics.interval.ms) whose figures
changed since its last one, none while it is idle, with the records in flight by state and
the totals of acquisitions and redeliveries; and the archived records of a member that left
at the delivery limit.

`share_scenario` is also the spark job's end-to-end input (tests/spark/test_jobs_share_groups.py).
"""

from __future__ import annotations

from pathlib import Path

from broker.server import _metrics_events
from client.connection import BrokerConnection, background_nursery
from protocol import messages as m
from protocol.errors import ErrorCode
from tests.inproc import in_process_broker
from tests.util import wait_for

TOPIC, GROUP = "jobs", "workers"
ACCEPT, RELEASE, REJECT = 1, 2, 3
INTERVAL_MS = 1000
LOCK_MS = 15_000
OVERRIDES = {"events.metrics.interval.ms": str(INTERVAL_MS),
             "share.coordinator.state.topic.num.partitions": "1",
             "share.coordinator.state.topic.replication.factor": "1",
             "group.share.record.lock.duration.ms": str(LOCK_MS),
             "group.share.delivery.count.limit": "2"}


class Member:
    """A share consumer's requests, as librdkafka sends them (v1), on its own connection."""

    def __init__(self, conn: BrokerConnection, member_id: str, topic_id):
        self.conn, self.member_id, self.topic_id = conn, member_id, topic_id
        self.epoch = 0  # the share session's
        self.member_epoch = 0

    async def heartbeat(self, leave: bool = False) -> None:
        r = await self.conn.request(m.SHARE_GROUP_HEARTBEAT, {
            "group_id": GROUP, "member_id": self.member_id,
            "member_epoch": -1 if leave else self.member_epoch, "rack_id": None,
            "subscribed_topic_names": None if leave else [TOPIC]}, 1)
        assert r.body.error_code == ErrorCode.NONE, r.body
        self.member_epoch = r.body.member_epoch

    async def fetch(self, max_records: int = 10, acks=()) -> list[tuple[int, int, int]]:
        r = await self.conn.request(m.SHARE_FETCH, {
            "group_id": GROUP, "member_id": self.member_id,
            "share_session_epoch": self.epoch, "max_wait_ms": 0, "min_bytes": 1,
            "max_bytes": 1 << 20, "max_records": max_records, "batch_size": max_records,
            "topics": [{"topic_id": self.topic_id, "partitions": [{
                "partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
                    for f, last, t in acks]}]}],
            "forgotten_topics_data": []}, 1)
        assert r.body.error_code == ErrorCode.NONE, r.body
        self.epoch += 1
        return [(a.first_offset, a.last_offset, a.delivery_count)
                for t in r.body.responses for p in t.partitions for a in p.acquired_records]

    async def acknowledge(self, *acks: tuple[int, int, int]) -> None:
        r = await self.conn.request(m.SHARE_ACKNOWLEDGE, {
            "group_id": GROUP, "member_id": self.member_id,
            "share_session_epoch": self.epoch,
            "topics": [{"topic_id": self.topic_id, "partitions": [{
                "partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
                    for f, last, t in acks]}]}]}, 1)
        assert r.body.error_code == ErrorCode.NONE, r.body
        assert all(p.error_code == ErrorCode.NONE
                   for t in r.body.responses for p in t.partitions), r.body
        self.epoch += 1


async def _find_coordinator(conn: BrokerConnection) -> None:
    """The group's coordinator is this broker, once __consumer_offsets exists (the first
    FindCoordinator creates it)."""
    async def found() -> bool:
        r = await conn.request(m.FIND_COORDINATOR, {"key": GROUP, "key_type": 0,
                                                    "coordinator_keys": [GROUP]})
        return all(c.error_code == ErrorCode.NONE for c in r.body.coordinators)
    await wait_for(found, 10, "the group coordinator")


def _states(inproc) -> list[dict]:
    return inproc.events(type="share_partition_state")


async def next_sample(inproc) -> None:
    """Until the broker's next `metrics` event, and the share partitions' events written
    with it."""
    samples = len(inproc.events(type="metrics"))
    await wait_for(lambda: len(inproc.events(type="metrics")) > samples,
                   2 * INTERVAL_MS / 1000, "the next metrics event")


async def share_scenario(data_dir: Path, check=None) -> None:
    """Two members of share group GROUP read TOPIC-0 (10 records): m1 accepts 0-3,
    releases 4-5, rejects 6 and falls silent on 7-9, whose locks expire; m2 gets 4-5 and
    7-9 again (their second delivery, the limit), accepts 7-9 and leaves holding 4-5, which
    are archived. After each step the broker samples (its next `metrics` event), then
    `check(inproc, step)` is called, if given."""
    async with in_process_broker(data_dir, **OVERRIDES) as inproc, \
            background_nursery() as nursery:
        # the broker's periodic `metrics` events, as broker.server runs them
        inproc.nursery.start_soon(_metrics_events, inproc.broker)
        await inproc.create_topic(TOPIC, 1)
        topic_id = inproc.broker.metadata_cache.topic(TOPIC).topic_id
        members = []
        for name in ("m1", "m2"):
            conn = BrokerConnection(inproc.broker.advertised.host,
                                    inproc.broker.advertised.port)
            await conn.open(nursery)
            members.append(Member(conn, name, topic_id))
        m1, m2 = members
        await _find_coordinator(m1.conn)
        await m1.heartbeat()
        # the first fetches load the share partition at the (empty) log's end, once the
        # share coordinator's __share_group_state exists

        async def loaded() -> bool:
            assert await m1.fetch() == []
            return bool(inproc.broker.shares.holders)
        await wait_for(loaded, 10, "the share partition to load")
        await inproc.produce(TOPIC, [(0, b"r%d" % i) for i in range(10)])

        async def step(name: str) -> None:
            await next_sample(inproc)
            if check is not None:
                await check(inproc, name)
        await step("loaded")

        assert await m1.fetch() == [(0, 9, 1)]
        await step("acquired")
        await m1.acknowledge((0, 3, ACCEPT), (4, 5, RELEASE), (6, 6, REJECT))
        await step("acknowledged")

        await m2.heartbeat()
        await wait_for(lambda: inproc.events(type="share_lock_expired"), 2 * LOCK_MS / 1000,
                       "m1's locks to expire")  # m1 silent on 7-9
        assert await m2.fetch() == [(4, 5, 2), (7, 9, 2)]
        await m2.acknowledge((7, 9, ACCEPT))
        await step("redelivered")

        m2.epoch = -1
        await m2.fetch(max_records=0)  # ends its session: 4-5 go back, at the limit
        await m2.heartbeat(leave=True)
        await m1.heartbeat(leave=True)
        await step("left")
        for conn in (m1.conn, m2.conn):
            await conn.close()


async def test_the_state_is_sampled_with_the_metrics_and_only_when_it_changed(
        tmp_path, autojump_clock):
    seen: dict[str, dict] = {}

    async def check(inproc, step):
        states = _states(inproc)
        seen[step] = states[-1]
        # the next sample writes none: nothing changed
        await next_sample(inproc)
        assert len(_states(inproc)) == len(states), step

    await share_scenario(tmp_path / "broker", check)
    figures = {step: (e["start_offset"], e["end_offset"], e["in_flight"],
                      e["available_records"], e["acquired_records"],
                      e["acknowledged_records"], e["archived_records"], e["acquisitions"],
                      e["redeliveries"]) for step, e in seen.items()}
    assert figures == {
        "loaded": (0, 0, 0, 0, 0, 0, 0, 0, 0),
        "acquired": (0, 10, 10, 0, 10, 0, 0, 10, 0),
        # 0-3 accepted: SPSO past them; 4-5 released, 6 rejected, 7-9 held
        "acknowledged": (4, 10, 6, 2, 3, 0, 1, 10, 0),
        # 4-5 held by m2 (second delivery), 6 archived, 7-9 accepted
        "redelivered": (4, 10, 6, 0, 2, 3, 1, 15, 5),
        # m2 left holding 4-5 at the delivery limit: archived, SPSO at the end
        "left": (10, 10, 0, 0, 0, 0, 0, 15, 5),
    }
    e = seen["left"]
    assert (e["group_id"], e["topic"], e["partition"]) == (GROUP, TOPIC, 0)


async def test_a_member_leaving_at_the_delivery_limit_archives_its_records(
        tmp_path, autojump_clock):
    async def check(inproc, step):
        if step != "left":
            return
        archived = [(e["member_id"], e["first_offset"], e["last_offset"], e["reason"])
                    for e in inproc.events(type="share_records_archived")]
        assert archived == [("m1", 6, 6, "rejected"), ("m2", 4, 5, "delivery count limit")]
        expired = [(e["member_id"], e["first_offset"], e["last_offset"], e["archived"])
                   for e in inproc.events(type="share_lock_expired")]
        assert expired == [("m1", 7, 9, False)]

    await share_scenario(tmp_path / "broker", check)
