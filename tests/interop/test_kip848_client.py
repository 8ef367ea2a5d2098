"""Our client with `group_protocol="consumer"` (KIP-848) against one broker: two of ours
split the partitions and read every record once; ours and librdkafka's share one consumer
group; a member leaving hands over only its partitions, the other's listener sees
assignments and no revocation; commits carry the member epoch."""

from __future__ import annotations

import pytest
import trio
from confluent_kafka import Consumer as RdConsumer

from client import Consumer, ConsumerRebalanceListener
from tests.interop.librdkafka import create_topic, produce
from tests.util import unique

pytestmark = pytest.mark.interop

PARTITIONS = 6
FAST = {"group.consumer.session.timeout.ms": 6000,
        "group.consumer.heartbeat.interval.ms": 500}


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.assigned: list[set] = []
        self.revoked: list[set] = []
        self.lost: list[set] = []

    async def on_partitions_assigned(self, partitions):
        self.assigned.append({tp.partition for tp in partitions})

    async def on_partitions_revoked(self, partitions):
        self.revoked.append({tp.partition for tp in partitions})

    async def on_partitions_lost(self, partitions):
        self.lost.append({tp.partition for tp in partitions})


@pytest.fixture
def kip848_broker(make_broker):
    return make_broker(**FAST)


def _setup(broker, records: int) -> tuple[str, str]:
    topic, group = unique("ours848"), unique("ours848-group")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce(broker.bootstrap, topic, [(None, str(i).encode(), None, i % PARTITIONS)
                                      for i in range(records)])
    return topic, group


def _consumer(broker, group, **conf) -> Consumer:
    return Consumer(bootstrap_servers=broker.bootstrap, group_id=group,
                    group_protocol="consumer", auto_offset_reset="earliest",
                    enable_auto_commit=False, **conf)


async def test_two_of_ours_split_and_read_everything_once(kip848_broker):
    # the records come once the group has formed: nothing is committed, so a partition
    # that moved during the formation would be read again from the start
    topic, group = _setup(kip848_broker, 0)
    read: list[tuple[int, int]] = []
    async with _consumer(kip848_broker, group) as a, _consumer(kip848_broker, group) as b:
        a.subscribe([topic])
        b.subscribe([topic])
        with trio.fail_after(60):
            while not (len(a.assignment()) == len(b.assignment()) == 3):
                for c in (a, b):
                    batches = await c.getmany(timeout_ms=100)
                    read += [(r.partition, r.offset) for rs in batches.values() for r in rs]
        await trio.to_thread.run_sync(produce, kip848_broker.bootstrap, topic, [
            (None, str(i).encode(), None, i % PARTITIONS) for i in range(600)])
        with trio.fail_after(60):
            while len(read) < 600:
                for c in (a, b):
                    batches = await c.getmany(timeout_ms=100)
                    read += [(r.partition, r.offset) for rs in batches.values() for r in rs]
        assert len(read) == 600 and len(set(read)) == 600
        assert {tp.partition for tp in a.assignment()} | \
            {tp.partition for tp in b.assignment()} == set(range(PARTITIONS))
        meta = a.group_metadata()
        assert meta.generation_id > 0 and meta.member_id
        await a.commit()  # with its member epoch
        committed = [await a.committed(tp) for tp in a.assignment()]
        assert sum(c or 0 for c in committed) > 0


async def test_ours_and_librdkafka_in_one_consumer_group(kip848_broker):
    topic, group = _setup(kip848_broker, 60)
    rd = RdConsumer({"bootstrap.servers": kip848_broker.bootstrap, "group.id": group,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    rd.subscribe([topic])
    try:
        async with _consumer(kip848_broker, group) as ours:
            ours.subscribe([topic])
            with trio.fail_after(60):
                while True:
                    await ours.getmany(timeout_ms=50)
                    await trio.to_thread.run_sync(rd.poll, 0.05)
                    mine = {tp.partition for tp in ours.assignment()}
                    theirs = {tp.partition for tp in rd.assignment()}
                    if len(mine) == len(theirs) == 3 and mine | theirs == set(range(6)):
                        break
    finally:
        rd.close()


async def test_a_member_leaving_moves_only_its_partitions(kip848_broker):
    topic, group = _setup(kip848_broker, 60)
    recorder = Recorder()
    async with _consumer(kip848_broker, group) as stays:
        stays.subscribe([topic], listener=recorder)
        async with _consumer(kip848_broker, group) as leaves:
            leaves.subscribe([topic])
            with trio.fail_after(60):
                while not (len(stays.assignment()) == len(leaves.assignment()) == 3):
                    await stays.getmany(timeout_ms=50)
                    await leaves.getmany(timeout_ms=50)
            kept = {tp.partition for tp in stays.assignment()}
            revoked_before = len(recorder.revoked)
        # `leaves` closed: it left with epoch -1
        with trio.fail_after(15):
            while len(stays.assignment()) < PARTITIONS:
                await stays.getmany(timeout_ms=50)
        assert kept <= {tp.partition for tp in stays.assignment()}
        assert recorder.revoked[revoked_before:] == []  # nothing of its own was revoked
        assert recorder.lost == []
        assert set().union(*recorder.assigned) == set(range(PARTITIONS))


async def test_offset_requests_check_the_member_epoch(kip848_broker):
    from harness.raw import call
    from protocol import messages as m
    from protocol.errors import ErrorCode as E

    topic, group = _setup(kip848_broker, 6)
    async with _consumer(kip848_broker, group) as c:
        c.subscribe([topic])
        with trio.fail_after(30):
            while len(c.assignment()) < PARTITIONS:
                await c.getmany(timeout_ms=50)
        meta = c.group_metadata()
        port = kip848_broker.port

        def fetch(epoch: int) -> int:
            body = call(port, m.OFFSET_FETCH, 9, {"groups": [
                {"group_id": group, "member_id": meta.member_id, "member_epoch": epoch,
                 "topics": None}], "require_stable": False})
            return body.groups[0].error_code

        def commit(epoch: int) -> int:
            body = call(port, m.OFFSET_COMMIT, 9, {
                "group_id": group, "generation_id_or_member_epoch": epoch,
                "member_id": meta.member_id, "group_instance_id": None,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": 0, "committed_offset": 1,
                     "committed_metadata": None}]}]})
            return body.topics[0].partitions[0].error_code

        fetched, stale_fetch = await trio.to_thread.run_sync(
            lambda: (fetch(meta.generation_id), fetch(meta.generation_id + 5)))
        committed, stale_commit = await trio.to_thread.run_sync(
            lambda: (commit(meta.generation_id), commit(meta.generation_id - 1)))
        assert (fetched, stale_fetch) == (E.NONE, E.STALE_MEMBER_EPOCH)
        assert (committed, stale_commit) == (E.NONE, E.STALE_MEMBER_EPOCH)
