"""client.consumer.Consumer (assign mode) against the real broker, with records produced
by confluent-kafka (librdkafka) and committed offsets cross-checked with its consumer."""

from __future__ import annotations

import pytest
import trio
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition

from client import errors
from client.consumer.consumer import Consumer
from client.consumer.fetcher import ConsumerRecord, NoOffsetForPartitionError
from client.types import TopicPartition
from tests.interop.librdkafka import create_topic, produce

SHARED_BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
DEADLINE_S = 30
PARTITIONS = 3
COUNT = 1000


def _messages(n: int, tag: str = "") -> list[tuple]:
    return [(f"key-{tag}{i}".encode(), f"value-{tag}{i}".encode() * (1 + i % 5),
             [("i", str(i).encode()), ("tag", tag.encode() or None)], i % PARTITIONS)
            for i in range(n)]


def _expected(sent: list[tuple], delivered) -> dict[TopicPartition, list[tuple]]:
    """By partition, (offset, key, value, headers) in offset order; the headers come from
    what was sent (delivery reports do not carry them)."""
    headers_by_key = {m[0]: m[2] for m in sent}
    out: dict[TopicPartition, list[tuple]] = {}
    for m in delivered:
        headers = headers_by_key[m.key()]
        out.setdefault(TopicPartition(m.topic(), m.partition()), []).append(
            (m.offset(), m.key(), m.value(), headers))
    for v in out.values():
        v.sort()
    return out


def _as_tuples(records: list[ConsumerRecord]) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.headers) for r in records]


@pytest.fixture(scope="module")
def loaded_topic(shared_broker):
    """1,000 keyed records with headers over 3 partitions, lz4-compressed by librdkafka."""
    topic = "consumer-loaded"
    create_topic(shared_broker.bootstrap, topic, PARTITIONS)
    sent = _messages(COUNT)
    delivered = produce(shared_broker.bootstrap, topic, sent,
                        **{"compression.type": "lz4", "batch.num.messages": 100})
    assert len(delivered) == COUNT
    return topic, _expected(sent, delivered)


def _all(topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(PARTITIONS)]


def test_subscribing_needs_a_group_and_config_names_are_checked():
    with pytest.raises(errors.InvalidGroupIdError):
        Consumer("orders", bootstrap_servers="127.0.0.1:9092")  # Java's rule
    c = Consumer(bootstrap_servers="127.0.0.1:9092")
    with pytest.raises(errors.InvalidGroupIdError):
        c.subscribe(["orders"])
    with pytest.raises(TypeError, match="fetch_max_wait"):
        Consumer(bootstrap_servers="127.0.0.1:9092", fetch_max_wait=5)


async def test_getmany_reads_exactly_what_was_produced(shared_broker, loaded_topic):
    topic, expected = loaded_topic
    got: dict[TopicPartition, list[ConsumerRecord]] = {}
    with trio.fail_after(DEADLINE_S):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            auto_offset_reset="earliest", max_poll_records=137) as c:
            c.assign(_all(topic))
            assert c.assignment() == set(_all(topic))
            while sum(map(len, got.values())) < COUNT:
                batch = await c.getmany(timeout_ms=2000)
                assert sum(map(len, batch.values())) <= 137
                for tp, records in batch.items():
                    assert all(r.topic == tp.topic and r.partition == tp.partition
                               for r in records)
                    got.setdefault(tp, []).extend(records)
            assert await c.getmany(timeout_ms=200) == {}
            for tp in _all(topic):
                assert await c.position(tp) == expected[tp][-1][0] + 1
    assert {tp: _as_tuples(rs) for tp, rs in got.items()} == expected
    r = got[TopicPartition(topic, 0)][0]
    assert r.timestamp > 0 and r.timestamp_type == 0


async def test_async_iteration_and_seek_to_the_middle(shared_broker, loaded_topic):
    topic, expected = loaded_topic
    with trio.fail_after(DEADLINE_S):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            auto_offset_reset="earliest") as c:
            c.assign(_all(topic))
            got: dict[TopicPartition, list[ConsumerRecord]] = {}
            n = 0
            async for record in c:
                got.setdefault(record.topic_partition, []).append(record)
                n += 1
                if n == COUNT:
                    break
            assert {tp: _as_tuples(rs) for tp, rs in got.items()} == expected

            tp1 = TopicPartition(topic, 1)
            middle = expected[tp1][len(expected[tp1]) // 2][0]
            c.assign([tp1])
            c.seek(tp1, middle)
            assert await c.position(tp1) == middle
            seen = []
            async for record in c:
                seen.append(record)
                if record.offset == expected[tp1][-1][0]:
                    break
            assert _as_tuples(seen) == [e for e in expected[tp1] if e[0] >= middle]


async def test_async_iteration_can_be_cancelled_while_records_are_buffered(
        shared_broker, loaded_topic):
    """`async for` takes buffered records without awaiting the broker, but still yields to
    trio every ITERATION_CHECKPOINT records: a loop body that never awaits is cancelled
    within that many records, and the position is the next record not returned."""
    from client.consumer.consumer import ITERATION_CHECKPOINT
    topic, expected = loaded_topic
    tp0 = TopicPartition(topic, 0)
    with trio.fail_after(DEADLINE_S):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            auto_offset_reset="earliest") as c:
            c.assign([tp0])
            seen = []
            with trio.CancelScope() as scope:
                async for record in c:
                    seen.append(record.offset)
                    if len(seen) == 1:
                        scope.cancel()
            assert 1 <= len(seen) <= ITERATION_CHECKPOINT
            assert seen == [e[0] for e in expected[tp0][:len(seen)]]
            assert await c.position(tp0) == seen[-1] + 1


async def test_getmany_yields_before_it_drains(shared_broker, loaded_topic):
    """getmany is a checkpoint even with records buffered (so a prefetch task runs, and a
    cancelled caller stops), and a cancelled call returns no record and moves nothing."""
    topic, expected = loaded_topic
    tp0 = TopicPartition(topic, 0)
    with trio.fail_after(DEADLINE_S):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            auto_offset_reset="earliest", max_poll_records=10) as c:
            c.assign([tp0])
            first = (await c.getmany(timeout_ms=5000))[tp0]
            assert c._state.buffered(tp0) > 0
            with trio.CancelScope() as scope:
                scope.cancel()
                await c.getmany(timeout_ms=5000)
                raise AssertionError("getmany did not yield")
            assert await c.position(tp0) == first[-1].offset + 1
            following = (await c.getmany(timeout_ms=5000))[tp0]
            assert following[0].offset == first[-1].offset + 1


async def test_pause_and_resume(shared_broker, loaded_topic):
    topic, expected = loaded_topic
    tp0, tp1, tp2 = _all(topic)
    with trio.fail_after(DEADLINE_S):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            auto_offset_reset="earliest") as c:
            c.assign([tp0, tp1, tp2])
            c.pause(tp0, tp2)
            assert c.paused() == {tp0, tp2}
            got: list[ConsumerRecord] = []
            while len(got) < len(expected[tp1]):
                batch = await c.getmany(timeout_ms=2000)
                assert set(batch) <= {tp1}
                got.extend(batch.get(tp1, []))
            assert await c.getmany(timeout_ms=300) == {}  # tp0 and tp2 still paused
            assert await c.position(tp0) == 0
            c.resume(tp0)
            rest: list[ConsumerRecord] = []
            while len(rest) < len(expected[tp0]):
                batch = await c.getmany(timeout_ms=2000)
                assert set(batch) <= {tp0}
                rest.extend(batch.get(tp0, []))
            assert _as_tuples(rest) == expected[tp0]


async def test_position_earliest_latest_and_none(shared_broker, loaded_topic):
    topic, expected = loaded_topic
    tp = TopicPartition(topic, 2)
    end = expected[tp][-1][0] + 1
    with trio.fail_after(DEADLINE_S):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            auto_offset_reset="earliest") as c:
            c.assign([tp])
            assert await c.position(tp) == 0
        async with Consumer(bootstrap_servers=shared_broker.bootstrap) as c:  # latest
            c.assign([tp])
            assert await c.position(tp) == end
            assert await c.getmany(timeout_ms=200) == {}
            await c.seek_to_beginning(tp)
            assert await c.position(tp) == 0
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            auto_offset_reset="none") as c:
            c.assign([tp])
            with pytest.raises(NoOffsetForPartitionError) as info:
                await c.position(tp)
            assert info.value.partitions == [tp]
            with pytest.raises(NoOffsetForPartitionError):
                await c.getmany(timeout_ms=100)
            c.seek(tp, 5)  # an explicit position needs no reset
            batch = await c.getmany(timeout_ms=2000, max_records=3)
            assert [r.offset for r in batch[tp]] == [5, 6, 7]
        with pytest.raises(ValueError, match="not assigned"):
            await c.position(TopicPartition(topic, 0))


async def test_out_of_range_fetch_resets(shared_broker, loaded_topic):
    topic, expected = loaded_topic
    tp = TopicPartition(topic, 0)
    with trio.fail_after(DEADLINE_S):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            auto_offset_reset="earliest") as c:
            c.assign([tp])
            c.seek(tp, 1_000_000)
            batch = await c.getmany(timeout_ms=5000, max_records=2)
            assert [r.offset for r in batch[tp]] == [0, 1]
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            auto_offset_reset="none") as c:
            c.assign([tp])
            c.seek(tp, 1_000_000)
            with pytest.raises(errors.OffsetOutOfRangeError):
                await c.getmany(timeout_ms=2000)


async def test_commit_committed_and_librdkafka_sees_it(shared_broker, loaded_topic):
    topic, expected = loaded_topic
    group = "consumer-commit-group"
    tp0, tp1, _ = _all(topic)
    with trio.fail_after(DEADLINE_S):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False) as c:
            c.assign([tp0, tp1])
            assert await c.committed(tp0) is None
            batch = await c.getmany(timeout_ms=2000, max_records=10)
            assert batch
            await c.commit()  # current positions
            for tp in (tp0, tp1):
                assert await c.committed(tp) == await c.position(tp)
            await c.commit({tp1: 42})
            assert await c.committed(tp1) == 42
        async with Consumer(bootstrap_servers=shared_broker.bootstrap, group_id=group,
                            auto_offset_reset="none", enable_auto_commit=False) as c:
            c.assign([tp1])  # starts at the committed offset
            assert await c.position(tp1) == 42
            batch = await c.getmany(timeout_ms=2000, max_records=1)
            assert [r.offset for r in batch[tp1]] == [42]

    def librdkafka_committed() -> list:
        ck = CKConsumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
        try:
            return ck.committed([CKTopicPartition(topic, 1)], timeout=10)
        finally:
            ck.close()

    [ck_tp] = await trio.to_thread.run_sync(librdkafka_committed)
    assert ck_tp.error is None and ck_tp.offset == 42

    async with Consumer(bootstrap_servers=shared_broker.bootstrap) as c:
        with pytest.raises(errors.InvalidGroupIdError):
            await c.commit({tp0: 1})


async def test_long_poll_returns_records_produced_while_waiting(shared_broker):
    topic = "consumer-long-poll"
    await trio.to_thread.run_sync(lambda: create_topic(shared_broker.bootstrap, topic, 1))
    tp = TopicPartition(topic, 0)
    with trio.fail_after(DEADLINE_S):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap) as c:  # latest
            c.assign([tp])
            assert await c.position(tp) == 0
            result: dict = {}
            started = trio.Event()

            async def poll() -> None:
                started.set()
                result.update(await c.getmany(timeout_ms=20000))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll)
                await started.wait()
                t0 = trio.current_time()
                await trio.to_thread.run_sync(lambda: produce(
                    shared_broker.bootstrap, topic,
                    [(b"k", b"late", [("h", b"1")], 0)]))
            assert trio.current_time() - t0 < 15
            [record] = result[tp]
            assert (record.offset, record.key, record.value, record.headers) == (
                0, b"k", b"late", [("h", b"1")])


async def test_unknown_topic_polls_empty_until_the_deadline(shared_broker):
    tp = TopicPartition("consumer-no-such-topic", 0)
    with trio.fail_after(5):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                            allow_auto_create_topics=False) as c:
            c.assign([tp])
            c.seek(tp, 0)
            t0 = trio.current_time()
            assert await c.getmany(timeout_ms=500) == {}
            assert 0.45 < trio.current_time() - t0 < 3


async def test_auto_commit_commits_positions_while_polling_and_on_close(shared_broker,
                                                                         loaded_topic):
    topic, expected = loaded_topic
    group = "consumer-auto-commit-group"
    tp = TopicPartition(topic, 0)
    with trio.fail_after(DEADLINE_S):
        async with Consumer(bootstrap_servers=shared_broker.bootstrap, group_id=group,
                            auto_offset_reset="earliest", auto_commit_interval_ms=100) as c:
            c.assign([tp])
            await c.getmany(timeout_ms=2000, max_records=5)
            # later polls commit once the interval has passed: poll until one has
            while await c.committed(tp) is None:
                await c.getmany(timeout_ms=50, max_records=5)
            assert 0 < await c.committed(tp) <= await c.position(tp)
            await c.getmany(timeout_ms=2000, max_records=7)
            position = await c.position(tp)
        async with Consumer(bootstrap_servers=shared_broker.bootstrap, group_id=group,
                            enable_auto_commit=False) as c:
            assert await c.committed(tp) == position  # committed on close
