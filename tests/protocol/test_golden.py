"""Golden requests: bytes real clients sent, decoded by our parser and rebuilt by our encoder.

Each constant below is one request frame (without its 4-byte length prefix) exactly as a
client wrote it to the socket, captured with a throwaway TCP proxy between the client and a
running minibroker (`minibroker serve --listen ... -o advertised.listeners=<the proxy>`, so
every connection went through the proxy). Captured 2026-11-22 from:

- kafka-python 3.0.12: KafkaProducer(acks=1).send("golden-kp", key=b"kp-key",
  value=b"hello from kafka-python", headers=[("h", b"1")])
- confluent-kafka 2.16.1 (librdkafka 2.16.0): Producer({"acks": 1, "compression.type":
  "none"}).produce("golden-confluent", key=b"ck-key", value=b"hello from confluent",
  headers=[("h", b"1")]); and AdminClient.list_topics() for the all-topics Metadata
- aiokafka 0.14.0: AIOKafkaProducer(acks=1).send_and_wait("golden-aio", key=b"aio-key",
  value=b"hello from aiokafka", headers=[("h", b"1")])
- kcat 1.7.1 (Debian 12, librdkafka 2.0.2): `echo 'kcat-key:hello from kcat' |
  kcat -P -t golden-kcat -K : -X acks=1`

A Produce request carries the client's record batch verbatim (timestamps are the capture
time), so the batch bytes are golden too.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from protocol import records
from protocol.connection import ServerConnection, decode_request
from protocol.errors import DecodeError
from protocol.framing import frame
from protocol.headers import RequestHeader, encode_request_header
from protocol.messages import API_VERSIONS, APIS, METADATA, PRODUCE

ZERO_UUID = uuid.UUID(int=0)

# --- kafka-python 3.0.12 --------------------------------------------------------------------

# ApiVersions v4, its first request on every connection (header v2: client_id, then tags)
KAFKA_PYTHON_API_VERSIONS_V4 = bytes.fromhex(
    "001200040000000100176b61666b612d707974686f6e2d70726f64756365722d31000d6b61666b61"
    "2d707974686f6e07332e302e313200"
)
# Metadata v12 at bootstrap: an empty topic list (brokers only, no topics)
KAFKA_PYTHON_METADATA_V12_NO_TOPICS = bytes.fromhex(
    "0003000c0000000200176b61666b612d707974686f6e2d70726f64756365722d310001010000"
)
# Metadata v12 for the topic it is about to produce to (zero topic id, by name)
KAFKA_PYTHON_METADATA_V12 = bytes.fromhex(
    "0003000c0000000200176b61666b612d707974686f6e2d70726f64756365722d3100020000000000"
    "00000000000000000000000a676f6c64656e2d6b7000010000"
)
# Produce v9 (its cap), acks=1, one uncompressed record
KAFKA_PYTHON_PRODUCE_V9 = bytes.fromhex(
    "000000090000000300176b61666b612d707974686f6e2d70726f64756365722d3100000001000075"
    "30020a676f6c64656e2d6b70020000000066000000000000000000000059000000000278f7d0d800"
    "0000000000000001a2016e41ca000001a2016e41caffffffffffffffffffffffffffff000000014e"
    "0000000c6b702d6b65792e68656c6c6f2066726f6d206b61666b612d707974686f6e020268023100"
    "0000"
)

# --- confluent-kafka 2.16.1 / librdkafka 2.16.0 ---------------------------------------------

CONFLUENT_API_VERSIONS_V3 = bytes.fromhex(
    "0012000300000001000772646b61666b610017636f6e666c75656e742d6b61666b612d707974686f"
    "6e16322e31362e312d72646b61666b612d322e31362e3000"
)
CONFLUENT_METADATA_V12 = bytes.fromhex(
    "0003000c00000002000772646b61666b6100020000000000000000000000000000000011676f6c64"
    "656e2d636f6e666c75656e7400010000"
)
# Produce v10, acks=1, compression none, one record
CONFLUENT_PRODUCE_V10 = bytes.fromhex(
    "0000000a00000002000772646b61666b6100000001000075300211676f6c64656e2d636f6e666c75"
    "656e740200000000630000000000000000000000560000000002665f1dd2000000000000000001a2"
    "016e4688000001a2016e4688ffffffffffffffffffffffffffff00000001480000000c636b2d6b65"
    "792868656c6c6f2066726f6d20636f6e666c75656e740202680231000000"
)
# Metadata v12 for all topics (AdminClient.list_topics): a null topic array, and 3 bytes
# after the body -- what remains of librdkafka's 4-byte array-count placeholder
CONFLUENT_METADATA_V12_ALL_TOPICS = bytes.fromhex(
    "0003000c00000003000772646b61666b610000000000010000"
)

# --- aiokafka 0.14.0 ------------------------------------------------------------------------

AIOKAFKA_API_VERSIONS_V0 = bytes.fromhex(
    "0012000000000001001361696f6b61666b612d70726f64756365722d31"
)
AIOKAFKA_METADATA_V5 = bytes.fromhex(
    "0003000500000002001361696f6b61666b612d70726f64756365722d3100000001000a676f6c6465"
    "6e2d61696f01"
)
# Produce v7 (the highest it has), acks=1, timeout 40000; aiokafka writes
# PartitionLeaderEpoch -1 and BaseSequence 0 without a producer id
AIOKAFKA_PRODUCE_V7 = bytes.fromhex(
    "0000000700000003001361696f6b61666b612d70726f64756365722d31ffff000100009c40000000"
    "01000a676f6c64656e2d61696f000000010000000000000062000000000000000000000056ffffff"
    "ff023c43e29e000000000000000001a2016e4b6c000001a2016e4b6cffffffffffffffffffff0000"
    "000000000001480000000e61696f2d6b65792668656c6c6f2066726f6d2061696f6b61666b610202"
    "680231"
)

# --- kcat 1.7.1 / librdkafka 2.0.2, all on one connection, in this order ----------------------

KCAT_API_VERSIONS_V3 = bytes.fromhex(
    "0012000300000001000772646b61666b61000b6c696272646b61666b6106322e302e3200"
)
KCAT_METADATA_V4 = bytes.fromhex(
    "0003000400000002000772646b61666b6100000001000b676f6c64656e2d6b63617401"
)
KCAT_PRODUCE_V7 = bytes.fromhex(
    "0000000700000003000772646b61666b61ffff00010000753000000001000b676f6c64656e2d6b63"
    "617400000001000000000000005b00000000000000000000004f0000000002b53c90290000000000"
    "00000001a2016e5021000001a2016e5021ffffffffffffffffffffffffffff000000013a00000010"
    "6b6361742d6b65791e68656c6c6f2066726f6d206b63617400"
)


# --- what each frame must decode to ---------------------------------------------------------

@dataclass
class Golden:
    frame: bytes
    api_key: int
    version: int
    correlation_id: int
    client_id: str
    fields: dict[str, Any]  # expected top-level body fields (topics checked separately)
    topics: list[str] | None = None  # Metadata topic names / Produce topic, None: all topics
    trailing: bytes = b""  # bytes the client sent after the body
    record: tuple | None = None  # Produce: (key, value, headers) of its one record
    batch_fields: dict[str, int] = field(default_factory=dict)


KP_ID, RDK_ID, AIO_ID = "kafka-python-producer-1", "rdkafka", "aiokafka-producer-1"

GOLDEN = {
    "kafka-python-api-versions-v4": Golden(
        KAFKA_PYTHON_API_VERSIONS_V4, API_VERSIONS, 4, 1, KP_ID,
        {"client_software_name": "kafka-python", "client_software_version": "3.0.12"}),
    "kafka-python-metadata-v12-no-topics": Golden(
        KAFKA_PYTHON_METADATA_V12_NO_TOPICS, METADATA, 12, 2, KP_ID,
        {"allow_auto_topic_creation": True, "include_topic_authorized_operations": False},
        topics=[]),
    "kafka-python-metadata-v12": Golden(
        KAFKA_PYTHON_METADATA_V12, METADATA, 12, 2, KP_ID,
        {"allow_auto_topic_creation": True, "include_topic_authorized_operations": False},
        topics=["golden-kp"]),
    "kafka-python-produce-v9": Golden(
        KAFKA_PYTHON_PRODUCE_V9, PRODUCE, 9, 3, KP_ID,
        {"transactional_id": None, "acks": 1, "timeout_ms": 30000}, topics=["golden-kp"],
        record=(b"kp-key", b"hello from kafka-python", [("h", b"1")]),
        batch_fields={"partition_leader_epoch": 0, "producer_id": -1, "base_sequence": -1}),
    "confluent-api-versions-v3": Golden(
        CONFLUENT_API_VERSIONS_V3, API_VERSIONS, 3, 1, RDK_ID,
        {"client_software_name": "confluent-kafka-python",
         "client_software_version": "2.16.1-rdkafka-2.16.0"}),
    "confluent-metadata-v12": Golden(
        CONFLUENT_METADATA_V12, METADATA, 12, 2, RDK_ID,
        {"allow_auto_topic_creation": True, "include_topic_authorized_operations": False},
        topics=["golden-confluent"]),
    "confluent-metadata-v12-all-topics": Golden(
        CONFLUENT_METADATA_V12_ALL_TOPICS, METADATA, 12, 3, RDK_ID,
        {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
        topics=None, trailing=b"\x01\x00\x00"),
    "confluent-produce-v10": Golden(
        CONFLUENT_PRODUCE_V10, PRODUCE, 10, 2, RDK_ID,
        {"transactional_id": None, "acks": 1, "timeout_ms": 30000},
        topics=["golden-confluent"],
        record=(b"ck-key", b"hello from confluent", [("h", b"1")]),
        batch_fields={"partition_leader_epoch": 0, "producer_id": -1, "base_sequence": -1}),
    "aiokafka-api-versions-v0": Golden(AIOKAFKA_API_VERSIONS_V0, API_VERSIONS, 0, 1, AIO_ID, {}),
    "aiokafka-metadata-v5": Golden(
        AIOKAFKA_METADATA_V5, METADATA, 5, 2, AIO_ID, {"allow_auto_topic_creation": True},
        topics=["golden-aio"]),
    "aiokafka-produce-v7": Golden(
        AIOKAFKA_PRODUCE_V7, PRODUCE, 7, 3, AIO_ID,
        {"transactional_id": None, "acks": 1, "timeout_ms": 40000}, topics=["golden-aio"],
        record=(b"aio-key", b"hello from aiokafka", [("h", b"1")]),
        batch_fields={"partition_leader_epoch": -1, "producer_id": -1, "base_sequence": 0}),
    "kcat-api-versions-v3": Golden(
        KCAT_API_VERSIONS_V3, API_VERSIONS, 3, 1, RDK_ID,
        {"client_software_name": "librdkafka", "client_software_version": "2.0.2"}),
    "kcat-metadata-v4": Golden(
        KCAT_METADATA_V4, METADATA, 4, 2, RDK_ID, {"allow_auto_topic_creation": True},
        topics=["golden-kcat"]),
    "kcat-produce-v7": Golden(
        KCAT_PRODUCE_V7, PRODUCE, 7, 3, RDK_ID,
        {"transactional_id": None, "acks": 1, "timeout_ms": 30000}, topics=["golden-kcat"],
        record=(b"kcat-key", b"hello from kcat", []),
        batch_fields={"partition_leader_epoch": 0, "producer_id": -1, "base_sequence": -1}),
}
PRODUCES = [name for name, g in GOLDEN.items() if g.record is not None]


def _header_size(g: Golden) -> int:
    """Request header v1 is int16 key, int16 version, int32 correlation id, int16-length
    client id; v2 (flexible versions) adds an empty tag section of one byte."""
    flexible = APIS[g.api_key].request.is_flexible(g.version)
    return 2 + 2 + 4 + 2 + len(g.client_id.encode()) + (1 if flexible else 0)


def _produce_records(body) -> bytes:
    (topic,) = body.topic_data
    (partition,) = topic.partition_data
    assert partition.index == 0
    return partition.records


@pytest.mark.parametrize("name", GOLDEN)
def test_decode_request_parses_the_header_and_fields(name):
    g = GOLDEN[name]
    request = decode_request(g.frame)
    assert (request.api_key, request.api_version) == (g.api_key, g.version)
    assert request.header.correlation_id == g.correlation_id
    assert request.header.client_id == g.client_id
    assert request.size == len(g.frame)
    body = request.body
    for key, value in g.fields.items():
        assert body[key] == value, key
    if g.api_key == METADATA:
        if g.topics is None:
            assert body.topics is None
        else:
            assert [t.name for t in body.topics] == g.topics
            if g.version >= 10:
                assert all(t.topic_id == ZERO_UUID for t in body.topics)
    if g.api_key == PRODUCE:
        assert [t.name for t in body.topic_data] == g.topics


@pytest.mark.parametrize("name", GOLDEN)
def test_our_encoder_reproduces_the_client_bytes(name):
    g = GOLDEN[name]
    request = decode_request(g.frame)
    flexible = APIS[g.api_key].request.is_flexible(g.version)
    size = _header_size(g)
    header = RequestHeader(g.api_key, g.version, g.correlation_id, g.client_id)
    assert encode_request_header(header, flexible) == g.frame[:size]
    body = APIS[g.api_key].request.build(request.body, g.version)
    assert body + g.trailing == g.frame[size:]
    if g.trailing:
        # the bytes after the body are not part of it: a strict parse refuses them ...
        with pytest.raises(DecodeError, match="3 trailing bytes"):
            APIS[g.api_key].request.parse(g.frame[size:], g.version)
        # ... and the body without them is exactly what we build
        assert APIS[g.api_key].request.parse(body, g.version) == request.body


@pytest.mark.parametrize("name", PRODUCES)
def test_produced_batch_validates_and_decodes(name):
    g = GOLDEN[name]
    batch = _produce_records(decode_request(g.frame).body)
    header = records.validate_produced_batch(batch, 1_048_588)
    assert (header.magic, header.records_count, header.last_offset_delta) == (2, 1, 0)
    assert header.compression == records.Codec.NONE
    assert header.size == len(batch)
    for key, value in g.batch_fields.items():
        assert getattr(header, key) == value, key
    decoded_header, (record,) = records.decode_batch(batch)
    assert decoded_header == header
    assert (record.key, record.value, record.headers) == g.record
    assert record.offset == 0
    assert record.timestamp == header.base_timestamp == header.max_timestamp


@pytest.mark.parametrize("name", PRODUCES)
def test_our_batch_encoder_reproduces_the_client_batch(name):
    g = GOLDEN[name]
    batch = bytes(_produce_records(decode_request(g.frame).body))
    header, recs = records.decode_batch(batch)
    rebuilt = records.encode_batch(
        recs, partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence)
    assert rebuilt == batch


@pytest.mark.parametrize("client", ["kafka-python", "confluent", "aiokafka", "kcat"])
def test_a_clients_byte_stream_splits_into_its_requests(client):
    """The frames of one client, length-prefixed and fed a few bytes at a time, come out of
    ServerConnection as the same requests in the same order."""
    goldens = [g for name, g in GOLDEN.items() if name.startswith(client)]
    stream = b"".join(frame(g.frame) for g in goldens)
    conn = ServerConnection()
    got = []
    for i in range(0, len(stream), 7):
        conn.receive_data(stream[i:i + 7])
        while (request := conn.next_request()) is not None:
            got.append(request)
    assert [(r.api_key, r.api_version, r.header.correlation_id) for r in got] == [
        (g.api_key, g.version, g.correlation_id) for g in goldens]
    assert [r.body for r in got] == [decode_request(g.frame).body for g in goldens]
