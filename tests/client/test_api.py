"""The API a user of aiokafka or the Java client reaches for, against a real broker:
serializers and deserializers, send(timestamp_ms=), partitions_for / topics,
beginning_offsets / end_offsets / offsets_for_times, highwater, seek_to_committed and
group_metadata."""

from __future__ import annotations

import json
import time

import pytest
import trio

from client import AdminClient, Consumer, NewTopic, Producer, TopicPartition, errors
from client.types import ConsumerGroupMetadata, OffsetAndTimestamp
from tests.interop.group_helpers import wait_for
from tests.util import unique

SHARED_BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
DEADLINE_S = 30


async def _topic(bootstrap: str, prefix: str, partitions: int = 1) -> str:
    name = unique(prefix)
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


async def _read(consumer: Consumer, count: int) -> list:
    records: list = []

    async def enough() -> bool:
        for batch in (await consumer.getmany(timeout_ms=200)).values():
            records.extend(batch)
        return len(records) >= count
    await wait_for(enough, DEADLINE_S, f"{count} records")
    return records


def test_a_serializer_must_be_callable():
    with pytest.raises(TypeError, match="value_serializer must be a callable"):
        Producer(value_serializer="json")
    with pytest.raises(TypeError, match="key_deserializer must be a callable"):
        Consumer(key_deserializer=b"utf-8")


async def test_serializers_and_deserializers_apply_per_record(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = await _topic(bootstrap, "serde")
    async with Producer(bootstrap_servers=bootstrap, key_serializer=str.encode,
                        value_serializer=lambda v: json.dumps(v).encode()) as producer:
        await producer.send_and_wait(topic, {"n": 1}, key="a")
        await producer.send_and_wait(topic, None, key="b")  # a tombstone stays one
        await producer.send_and_wait(topic, [2, 3])          # and no key stays none
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                        key_deserializer=bytes.decode, value_deserializer=json.loads) as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        records = await _read(c, 3)
        assert [(r.key, r.value) for r in records] == [("a", {"n": 1}), ("b", None),
                                                       (None, [2, 3])]
        c.seek(tp, 0)
        seen = []
        async for record in c:  # iteration deserializes too
            seen.append((record.key, record.value))
            if len(seen) == 3:
                break
        assert seen == [("a", {"n": 1}), ("b", None), (None, [2, 3])]
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as raw:
        raw.assign([tp])
        assert [(r.key, r.value) for r in await _read(raw, 3)] == [
            (b"a", b'{"n": 1}'), (b"b", None), (None, b"[2, 3]")]


async def test_timestamps_given_to_send_are_the_records_and_offsets_for_times_finds_them(
        shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = await _topic(bootstrap, "times", partitions=2)
    base = int(time.time() * 1000) - 60_000
    tp, empty = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Producer(bootstrap_servers=bootstrap) as producer:
        metas = [await producer.send_and_wait(topic, b"v%d" % i, partition=0,
                                              timestamp_ms=base + 1000 * i)
                 for i in range(4)]
        assert [m.timestamp for m in metas] == [base + 1000 * i for i in range(4)]
        with pytest.raises(ValueError, match="timestamp_ms"):
            await producer.send(topic, b"v", timestamp_ms=-5)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert [r.timestamp for r in await _read(c, 4)] == [base + 1000 * i for i in range(4)]
        found = await c.offsets_for_times({tp: base + 1500, empty: base})
        assert found == {tp: OffsetAndTimestamp(2, base + 2000), empty: None}
        assert await c.offsets_for_times({tp: base + 10_000}) == {tp: None}
        assert await c.offsets_for_times({tp: 0}) == {tp: OffsetAndTimestamp(0, base)}
        with pytest.raises(ValueError, match="must be an int >= 0"):
            await c.offsets_for_times({tp: -1})


async def test_beginning_end_offsets_and_highwater(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = await _topic(bootstrap, "ends", partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for _ in range(5):
            await producer.send(topic, b"x", partition=0)
        await producer.flush()
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        # not assigned: asked of the leaders all the same
        assert await c.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert await c.end_offsets([tp0, tp1]) == {tp0: 5, tp1: 0}
        c.assign([tp0])
        assert c.highwater(tp0) is None  # no Fetch response yet
        await _read(c, 2)
        assert c.highwater(tp0) == 5
        with pytest.raises(ValueError, match="not assigned"):
            c.highwater(tp1)


async def test_partitions_for_and_topics(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = await _topic(bootstrap, "parts", partitions=3)
    missing = unique("no-such-topic")
    async with Consumer(bootstrap_servers=bootstrap, allow_auto_create_topics=False) as c:
        assert await c.partitions_for(topic) == {0, 1, 2}
        assert await c.partitions_for(missing) is None
        names = await c.topics()
        assert topic in names and missing not in names
    async with Producer(bootstrap_servers=bootstrap) as producer:
        assert await producer.partitions_for(topic) == {0, 1, 2}


async def test_seek_to_committed(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = await _topic(bootstrap, "committed", partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    group = unique("seek-committed")
    async with Consumer(bootstrap_servers=bootstrap, group_id=group,
                        enable_auto_commit=False) as c:
        c.assign([tp0, tp1])
        await c.commit({tp0: 2})
        c.seek(tp0, 7)
        c.seek(tp1, 3)
        assert await c.seek_to_committed() == {tp0: 2, tp1: None}
        assert await c.position(tp0) == 2
        assert await c.position(tp1) == 3  # nothing committed: the position stays
        c.seek(tp0, 9)
        assert await c.seek_to_committed(tp0) == {tp0: 2}
        assert await c.position(tp0) == 2
    async with Consumer(bootstrap_servers=bootstrap) as no_group:
        no_group.assign([tp0])
        with pytest.raises(errors.InvalidGroupIdError):
            await no_group.seek_to_committed()


async def test_group_metadata(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = await _topic(bootstrap, "group-md")
    group = unique("group-md")
    async with Consumer(bootstrap_servers=bootstrap, group_id=group) as c:
        c.assign([TopicPartition(topic, 0)])
        assert c.group_metadata() == ConsumerGroupMetadata(group, -1, "", None)
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=group,
                        group_instance_id="host-1") as c:
        assert c.group_metadata() == ConsumerGroupMetadata(group, -1, "", "host-1")
        with trio.fail_after(DEADLINE_S):
            while not c.assignment():
                await c.getmany(timeout_ms=200)
        md = c.group_metadata()
        assert md.group_id == group and md.group_instance_id == "host-1"
        assert md.generation_id >= 0 and md.member_id
    async with Consumer(bootstrap_servers=bootstrap) as no_group:
        with pytest.raises(errors.InvalidGroupIdError):
            no_group.group_metadata()
