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
    topic, group = _setup(kip848_broker, 600)
    read: list[tuple[int, int]] = []
    async with _consumer(kip848_broker, group) as a, _consumer(kip848_broker, group) as b:
        a.subscribe([topic])
        b.subscribe([topic])
        with trio.fail_after(60):
            while len(read) < 600 or not (len(a.assignment()) == len(b.assignment()) == 3):
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
