"""client.Producer against the real broker, read back with kafka-python and confluent-kafka:
every codec, keyed partitioning as Java's, acks 0/1/all, idempotence, a missing topic, and a
kill -9 restart in mid-stream."""

from __future__ import annotations


import pytest
import trio
from confluent_kafka import OFFSET_BEGINNING, Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KPTopicPartition
from kafka.partitioner.default import murmur2 as kp_murmur2

from client import AdminClient, Producer, RecordMetadata, errors
from client.partitioner import partition_for_key

from tests.interop.kafkapython import consume_all as kp_consume_all
from tests.util import unique

pytestmark = pytest.mark.interop

DEADLINE_S = 60
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


async def _create(bootstrap: str, name: str, partitions: int) -> None:
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics({name: partitions})


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [KPTopicPartition(topic, p) for p in range(partitions)]
        ends = consumer.end_offsets(tps)
        return [ends[tp] for tp in tps]
    finally:
        consumer.close()


def _ck_consume(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    consumer = CKConsumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                           "enable.auto.commit": False})
    consumer.assign([CKTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = []
    try:
        idle = 0
        while len(got) < expected and idle < 20:
            msgs = consumer.consume(num_messages=expected - len(got), timeout=0.5)
            idle = 0 if msgs else idle + 1
            for m in msgs:
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        consumer.close()
    return got


def _records(n: int) -> list[tuple[bytes, bytes, list]]:
    return [(b"key-%d" % (i % 97), b"value-%d-" % i + b"x" * (i % 50),
             [("idx", b"%d" % i), ("kind", b"keyed")]) for i in range(n)]


@pytest.mark.parametrize("codec", CODECS)
async def test_keyed_records_with_headers_read_back_by_other_clients(shared_broker, codec):
    bootstrap = shared_broker.bootstrap
    name, partitions = unique(f"prod-{codec}"), 3
    await _create(bootstrap, name, partitions)
    records = _records(1000)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=bootstrap, compression_type=codec) as producer:
            handles = [await producer.send(name, v, key=k, headers=h) for k, v, h in records]
            await producer.flush()
            metas = [await h for h in handles]
    for (key, _, _), meta in zip(records, metas):
        assert isinstance(meta, RecordMetadata) and meta.topic == name
        # kafka-python's DefaultPartitioner: (murmur2(key) & 0x7fffffff) % n
        assert meta.partition == (kp_murmur2(key) & 0x7FFFFFFF) % partitions
        assert meta.partition == partition_for_key(key, partitions)
    by_partition: dict[int, list[int]] = {}
    for meta in metas:
        by_partition.setdefault(meta.partition, []).append(meta.offset)
    for offsets in by_partition.values():  # in send order, contiguous from 0
        assert offsets == list(range(len(offsets)))

    expected = {(k, v, tuple(h)) for k, v, h in records}
    sent_at = {(m.partition, m.offset): r for m, r in zip(metas, records)}
    kp = kp_consume_all(bootstrap, name, partitions, len(records))
    assert len(kp) == len(records)
    assert {(m.key, m.value, tuple(m.headers)) for m in kp} == expected
    for m in kp:
        assert sent_at[(m.partition, m.offset)] == (m.key, m.value, list(m.headers))
    ck = _ck_consume(bootstrap, name, partitions, len(records))
    assert len(ck) == len(records)
    assert {(m.key(), m.value(), tuple(m.headers())) for m in ck} == expected
    for m in ck:
        assert sent_at[(m.partition(), m.offset())][:2] == (m.key(), m.value())


@pytest.mark.parametrize("acks", [0, 1, -1, "all"])
async def test_acks(shared_broker, acks):
    bootstrap = shared_broker.bootstrap
    name = unique("acks")
    await _create(bootstrap, name, 1)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=bootstrap, acks=acks) as producer:
            assert producer.config.enable_idempotence is (acks in (-1, "all"))
            handles = [await producer.send(name, b"v%d" % i) for i in range(200)]
            metas = [await h for h in handles]
    if acks == 0:
        assert all(m.offset == -1 for m in metas)
    else:
        assert [m.offset for m in metas] == list(range(200))
    got = kp_consume_all(bootstrap, name, 1, 200)
    assert [m.value for m in got] == [b"v%d" % i for i in range(200)]


async def test_unkeyed_records_stick_to_a_partition_per_batch(shared_broker):
    bootstrap = shared_broker.bootstrap
    name = unique("sticky")
    await _create(bootstrap, name, 4)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=bootstrap, linger_ms=1000,
                            batch_size=1000) as producer:
            handles = [await producer.send(name, b"x" * 80) for _ in range(30)]
            metas = [await h for h in handles]
    # ~9 records fill a 1000-byte batch: consecutive records share partitions in runs
    runs = 1 + sum(1 for a, b in zip(metas, metas[1:]) if a.partition != b.partition)
    assert runs <= 5
    assert len({m.partition for m in metas}) >= 2


async def test_a_loop_of_sends_yields_once_a_batch_and_can_be_cancelled(shared_broker):
    """send() does not await per record, but checkpoints whenever a batch is started:
    while the next fills, the sender sends the last one (records are acknowledged before
    the loop ends, with linger long), and a cancelled loop stops within a batch."""
    bootstrap = shared_broker.bootstrap
    name = unique("loop")
    await _create(bootstrap, name, 1)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=60_000,
                            batch_size=1000) as producer:
            first = await producer.send(name, b"x" * 80)
            handles = [first]
            while not first.done():  # ~9 records a batch: the first batch goes meanwhile
                handles.append(await producer.send(name, b"x" * 80))
            assert (await first).offset == 0
            sent = 0
            with trio.CancelScope() as scope:
                scope.cancel()
                for _ in range(1000):
                    await producer.send(name, b"x" * 80)
                    sent += 1
            assert sent < 20  # cancelled at the first batch boundary
            await producer.flush()


async def test_a_record_near_max_request_size_is_measured_at_its_longest(shared_broker):
    """The batch_size estimate of a record's framing is what it usually takes; against
    max_request_size a record counts at its longest, so one that could overrun the limit
    is refused at once, and one that fits is delivered."""
    from client.producer.accumulator import BATCH_OVERHEAD, RECORD_OVERHEAD_MAX
    bootstrap = shared_broker.bootstrap
    name = unique("limit")
    await _create(bootstrap, name, 1)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=bootstrap, max_request_size=1000) as producer:
            fits = 1000 - BATCH_OVERHEAD - RECORD_OVERHEAD_MAX
            assert (await producer.send_and_wait(name, b"x" * fits)).offset == 0
            handle = await producer.send(name, b"x" * (fits + 1))
            with pytest.raises(errors.KafkaError) as e:
                await handle
            assert e.value.code.name == "MESSAGE_TOO_LARGE"


async def test_idempotent_offsets_contiguous_without_duplicates(shared_broker):
    bootstrap = shared_broker.bootstrap
    name = unique("idem")
    await _create(bootstrap, name, 2)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=bootstrap, batch_size=512,
                            enable_idempotence=True) as producer:
            handles = [await producer.send(name, b"%d" % i, partition=i % 2)
                       for i in range(2000)]
            metas = [await h for h in handles]
    for p in (0, 1):
        assert [m.offset for m in metas if m.partition == p] == list(range(1000))
    got = kp_consume_all(bootstrap, name, 2, 2000)
    assert sorted(int(m.value) for m in got) == list(range(2000))
    assert len({(m.partition, m.offset) for m in got}) == 2000


async def test_missing_topic_fails_after_max_block_ms(make_broker):
    broker = make_broker(**{"auto.create.topics.enable": "false"})
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=broker.bootstrap, max_block_ms=1500,
                            request_timeout_ms=1000) as producer:
            started = trio.current_time()
            handle = await producer.send("no-such-topic", b"v")
            with pytest.raises(errors.UnknownTopicOrPartitionError, match="no-such-topic"):
                await handle
            assert trio.current_time() - started >= 1.5
            with pytest.raises(errors.KafkaError):
                await producer.send_and_wait("no-such-topic", b"w", key=b"k")


def test_unknown_config_is_a_type_error():
    with pytest.raises(TypeError, match="linger_msec"):
        Producer(bootstrap_servers="127.0.0.1:9092", linger_msec=5)
    with pytest.raises(ValueError):
        Producer(bootstrap_servers="127.0.0.1:9092", acks=1, enable_idempotence=True)


async def test_restart_mid_stream_keeps_every_acknowledged_record_once(broker):
    bootstrap = broker.bootstrap
    name = unique("restart")
    await _create(bootstrap, name, 2)
    acked: list[RecordMetadata] = []
    failed = 0
    total = 3000
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=bootstrap, batch_size=1024, linger_ms=2,
                            retry_backoff_ms=50, reconnect_backoff_ms=20) as producer:
            handles = []
            async with trio.open_nursery() as nursery:
                for i in range(total):
                    handles.append(await producer.send(name, b"%d" % i, partition=i % 2))
                    if i == total // 3:
                        await handles[-1]  # some records acknowledged before the kill
                        nursery.start_soon(trio.to_thread.run_sync,
                                           lambda: broker.restart(kill=True))
                    elif i % 100 == 99:
                        await handles[-1]  # keep sending in chunks through the restart
            for h in handles:
                try:
                    acked.append(await h)
                except errors.KafkaError:
                    failed += 1
    assert failed == 0  # the default delivery timeout outlasts a restart
    got = kp_consume_all(bootstrap, name, 2, total)
    ends = _end_offsets(bootstrap, name, 2)
    assert sum(ends) == total  # nothing beyond what we read: no duplicate anywhere
    values = [int(m.value) for m in got]
    assert len(values) == len(set(values)) == total  # each exactly once
    by_offset = {(m.partition, m.offset): int(m.value) for m in got}
    for i, meta in enumerate(acked):
        assert by_offset[(meta.partition, meta.offset)] == i
    for p in (0, 1):  # and the log is in send order
        assert [v for v in values if v % 2 == p] == sorted(v for v in values if v % 2 == p)


async def test_keys_and_values_are_bytes_like(shared_broker):
    topic = unique("bytes-like")
    await _create(shared_broker.bootstrap, topic, 1)
    with trio.fail_after(30):
        async with Producer(bootstrap_servers=shared_broker.bootstrap) as p:
            with pytest.raises(TypeError, match="value must be bytes or None, got str"):
                await p.send(topic, "text")
            with pytest.raises(TypeError, match="key must be bytes or None, got int"):
                await p.send(topic, b"v", key=7)
            handles = [await p.send(topic, bytearray(b"ba"), key=memoryview(b"mv")),
                       await p.send(topic, None, key=None, headers=[("h", bytearray(b"1"))])]
            await p.flush()
            assert [(await h).offset for h in handles] == [0, 1]
    records = kp_consume_all(shared_broker.bootstrap, topic, 1, 2)
    assert [(r.key, r.value, r.headers) for r in records] == [
        (b"mv", b"ba", []), (None, None, [("h", b"1")])]
