"""Every codec round-trips across clients: what one client produces, every other client reads.

For each codec and each producer (confluent-kafka, kafka-python, aiokafka, kcat) we write 50
keyed records with headers (one null key, one null value) to a fresh topic, in more than
one batch, then read the topic back from the beginning with every consumer
(confluent-kafka, kafka-python, aiokafka, kcat) and require the same offsets, keys, values
and headers from each -- and the same timestamp for a record whichever client reads it.
The broker stores batches as the producer compressed them, so this checks that each
client's compressed batches are served intact to each other client's decoder.

Consumers use assign() and explicit offsets only: nothing here subscribes or commits
offsets (groups are tested in test_groups*.py).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import aiokafka
import kafka
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from protocol.codecs import Codec
from protocol.messages import FETCH
from protocol.records import iter_batch_headers
from tests.interop.kcat import kcat
from tests.interop.raw import Raw
from tests.interop.raw import create_topic as raw_create_topic

pytestmark = pytest.mark.interop

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4,
             "zstd": Codec.ZSTD}
PRODUCERS = ["confluent", "kafka-python", "aiokafka", "kcat"]
N = 50
NULL_KEY_AT, NULL_VALUE_AT = 10, 20
DEADLINE_S = 20.0

# (offset, key, value, headers); headers are [(str, bytes | None)] in wire order.
Expected = list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]


# --- what each producer sends ------------------------------------------------------------

def _key(i: int) -> bytes | None:
    return None if i == NULL_KEY_AT else b"key-%02d" % i


def _value(producer: str, codec: str, i: int) -> bytes | None:
    # repetitive, so every codec really compresses; no ':' or newline (kcat's delimiters)
    return None if i == NULL_VALUE_AT else (f"{producer}-{codec}-value-{i:02d}-" * 4).encode()


def _headers(producer: str, codec: str, i: int) -> list[tuple[str, bytes | None]]:
    if producer == "kcat":  # kcat -H sets the same headers on every message
        return [("producer", b"kcat"), ("codec", codec.encode()), ("empty", b"")]
    headers = [("i", b"%d" % i), ("producer", producer.encode()), ("empty", b""),
               ("i", b"again")]  # a repeated key: order and duplicates must survive
    if producer != "kafka-python":  # kafka-python refuses None header values
        headers.append(("null", None))
    return headers


def expected_records(producer: str, codec: str) -> Expected:
    return [(i, _key(i), _value(producer, codec, i), _headers(producer, codec, i))
            for i in range(N)]


def produce_confluent(bootstrap: str, topic: str, codec: str, records: Expected) -> list[int]:
    delivered, errors = [], []

    def on_delivery(err, msg):
        (errors if err else delivered).append(err or msg.offset())

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    for n, (_, key, value, headers) in enumerate(records):
        p.produce(topic, key=key, value=value, headers=headers, partition=0,
                  on_delivery=on_delivery)
        if n == N // 2:
            assert p.flush(15) == 0  # a second batch for the rest
    assert p.flush(15) == 0
    assert errors == []
    return delivered


def produce_kafka_python(bootstrap: str, topic: str, codec: str, records: Expected) -> list[int]:
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                            compression_type=None if codec == "none" else codec)
    try:
        futures = []
        for n, (_, key, value, headers) in enumerate(records):
            futures.append(p.send(topic, key=key, value=value, headers=headers, partition=0))
            if n == N // 2:
                p.flush(15)
        p.flush(15)
        return [f.get(timeout=15).offset for f in futures]
    finally:
        p.close(timeout=10)


def produce_aiokafka(bootstrap: str, topic: str, codec: str, records: Expected) -> list[int]:
    async def run():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                                      compression_type=None if codec == "none" else codec)
        await p.start()
        try:
            futures = []
            for n, (_, key, value, headers) in enumerate(records):
                futures.append(await p.send(topic, key=key, value=value, headers=headers,
                                            partition=0))
                if n == N // 2:
                    await p.flush()
            return [(await asyncio.wait_for(f, DEADLINE_S)).offset for f in futures]
        finally:
            await p.stop()

    return asyncio.run(run())


def produce_kcat(bootstrap: str, topic: str, codec: str, records: Expected) -> list[int]:
    lines = []
    for _, key, value, _headers in records:
        # no delimiter: null key; an empty value with -Z: null value
        lines.append(value if key is None else key + b":" + (value or b""))
    header_args = []
    for name, value in records[0][3]:
        header_args += ["-H", f"{name}={value.decode()}"]
    kcat("-b", bootstrap, "-P", "-t", topic, "-p", "0", "-z", codec, "-K", ":", "-Z",
         "-X", "batch.num.messages=10", *header_args, stdin=b"\n".join(lines) + b"\n")
    return []  # kcat does not report offsets


PRODUCE = {"confluent": produce_confluent, "kafka-python": produce_kafka_python,
           "aiokafka": produce_aiokafka, "kcat": produce_kcat}


# --- what each consumer reads: [(offset, key, value, headers, timestamp)] ----------------

def consume_confluent(bootstrap: str, topic: str) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"never-joined-{topic}",
                  "enable.auto.commit": False, "enable.auto.offset.store": False,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    got, at_eof = [], False
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + DEADLINE_S
        while not at_eof and time.monotonic() < deadline:
            for msg in c.consume(num_messages=1000, timeout=0.2):
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    at_eof = True
                    continue
                got.append((msg.offset(), msg.key(), msg.value(), msg.headers() or [],
                            msg.timestamp()[1]))
    finally:
        c.close()
    assert at_eof, f"confluent-kafka: no end of partition within {DEADLINE_S}s, read {len(got)}"
    return got


def consume_kafka_python(bootstrap: str, topic: str) -> list[tuple]:
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                            enable_auto_commit=False, auto_offset_reset="earliest")
    tp = kafka.TopicPartition(topic, 0)
    got = []
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        deadline = time.monotonic() + DEADLINE_S
        while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
            for m in c.poll(timeout_ms=200).get(tp, []):
                got.append((m.offset, m.key, m.value, list(m.headers), m.timestamp))
    finally:
        c.close()
    assert end == N, f"kafka-python: end offset {end}"
    return got


def consume_aiokafka(bootstrap: str, topic: str) -> list[tuple]:
    async def run():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                      enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        tp = aiokafka.TopicPartition(topic, 0)
        got = []
        try:
            c.assign([tp])
            await c.seek_to_beginning(tp)
            end = (await c.end_offsets([tp]))[tp]
            deadline = time.monotonic() + DEADLINE_S
            while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
                batch = await c.getmany(tp, timeout_ms=200)
                got += [(m.offset, m.key, m.value, list(m.headers), m.timestamp)
                        for m in batch.get(tp, [])]
        finally:
            await c.stop()
        assert end == N, f"aiokafka: end offset {end}"
        return got

    return asyncio.run(run())


def consume_kcat(bootstrap: str, topic: str) -> list[tuple]:
    out = kcat("-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J",
               "-q", "-X", "fetch.wait.max.ms=50")
    got = []
    for line in out.splitlines():
        m = json.loads(line)
        flat = m.get("headers", [])
        headers = [(flat[j], None if flat[j + 1] is None else flat[j + 1].encode())
                   for j in range(0, len(flat), 2)]
        got.append((m["offset"], _utf8(m["key"]), _utf8(m["payload"]), headers, m["ts"]))
    return got


def _utf8(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


CONSUME = {"confluent": consume_confluent, "kafka-python": consume_kafka_python,
           "aiokafka": consume_aiokafka, "kcat": consume_kcat}


def create_topic(broker, name: str) -> None:
    with Raw(broker) as raw:
        topic = raw_create_topic(raw, name)
    assert topic.error_code == 0, topic


def stored_batches(broker, topic: str) -> list:
    """Headers of the batches the broker holds for partition 0, read with a raw Fetch."""
    with Raw(broker) as raw:
        body = raw.call(FETCH, 12, {
            "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 10 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 10 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
    partition = body.responses[0].partitions[0]
    assert partition.error_code == 0
    return [header for _, header in iter_batch_headers(partition.records or b"")]


# --- the test ----------------------------------------------------------------------------

@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("codec", CODECS)
def test_codec_round_trips_across_clients(shared_broker, codec, producer):
    topic = f"x-{producer}-{codec}-{uuid.uuid4().hex[:8]}"
    create_topic(shared_broker, topic)
    expected = expected_records(producer, codec)

    offsets = PRODUCE[producer](shared_broker.bootstrap, topic, codec, expected)
    if producer != "kcat":
        assert offsets == list(range(N)), f"{producer} was told offsets {offsets}"

    # the producer really used the codec, in more than one batch, as stored by the broker
    batches = stored_batches(shared_broker, topic)
    assert len(batches) > 1, f"{producer} wrote {len(batches)} batch(es)"
    # librdkafka (kcat, confluent-kafka) sends a batch that compression would not shrink
    # uncompressed (rdkafka_msgset_writer.c), as a batch of a record or two can be when
    # the machine is loaded: every batch is the codec's or none, and most are the codec's
    codecs = [b.compression for b in batches]
    assert set(codecs) <= {CODEC_IDS[codec], Codec.NONE}, codecs
    assert codecs.count(CODEC_IDS[codec]) > len(codecs) // 2, codecs
    assert sum(b.records_count for b in batches) == N

    timestamps = {}
    for consumer, consume in CONSUME.items():
        got = consume(shared_broker.bootstrap, topic)
        assert [r[:4] for r in got] == expected, f"{producer} -> {consumer} ({codec})"
        timestamps[consumer] = [r[4] for r in got]
    assert all(ts > 0 for ts in timestamps["confluent"])
    for consumer, seen in timestamps.items():
        assert seen == timestamps["confluent"], f"{consumer} reads other timestamps"
