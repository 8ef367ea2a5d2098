"""Bad input over raw sockets: one connection closes, the broker keeps serving everyone else,
and protocol errors come back as Kafka error codes."""

from __future__ import annotations

import struct

import pytest

from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.messages import API_VERSIONS, METADATA, PRODUCE
from protocol.records import Record, encode_batch

from tests.interop.raw import create_topic, produce

pytestmark = pytest.mark.interop


def _alive(raw) -> None:
    body = raw().call(METADATA, 12, {"topics": None})
    assert body.brokers[0].node_id == 0


@pytest.mark.parametrize("payload", [
    struct.pack(">i", -1),
    struct.pack(">i", 200 * 1024 * 1024),  # above socket.request.max.bytes
    bytes.fromhex("16030100a5010000a10303"),  # a TLS ClientHello on the plaintext port
    frame(struct.pack(">hhih", 9999, 0, 1, -1)),  # unknown api key
    frame(struct.pack(">hhih", PRODUCE, 2, 1, -1)),  # Produce v2: below what we implement
    frame(struct.pack(">hhih", METADATA, 4, 1, -1) + b"\x7f\xff\xff\xff"),  # hostile count
    frame(struct.pack(">hhih", METADATA, 4, 1, -1) + b"\x00\x00\x00\x01\x00\x05ab"),  # truncated
    frame(struct.pack(">hhih", METADATA, 9, 1, -1) + b"\x00\xff\xff\xff\xff\xff\x01"),  # bad varint
])
def test_protocol_violations_close_only_that_connection(raw, payload):
    bystander = raw()
    bystander.call(API_VERSIONS, 3, {})
    victim = raw()
    victim.sock.sendall(payload)
    assert victim.closed_by_peer()
    assert bystander.call(METADATA, 1, {"topics": None}).brokers  # unaffected
    _alive(raw)


def test_api_versions_of_unknown_version_answers_35_in_v0(raw):
    r = raw()
    r.sock.sendall(frame(struct.pack(">hhih", API_VERSIONS, 99, 42, -1) + b"\x00\x00"))
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        data += r.sock.recv(65536)
    size, correlation_id, error = struct.unpack(">iih", data[:10])
    assert (correlation_id, error) == (42, ErrorCode.UNSUPPORTED_VERSION)
    (count,) = struct.unpack(">i", data[10:14])  # v0: int32 array count, no tags
    keys = [struct.unpack(">hhh", data[14 + 6 * i:20 + 6 * i]) for i in range(count)]
    assert (API_VERSIONS, 0, 4) in keys
    assert size == 4 + 2 + 4 + 6 * count


def test_crc_mismatch_is_corrupt_message_and_nothing_is_appended(raw):
    assert create_topic(raw(), "bad-crc").error_code == 0
    batch = bytearray(encode_batch([Record(0, 1000, b"k", b"v" * 50, [])]))
    batch[-1] ^= 0xFF
    assert produce(raw(), "bad-crc", bytes(batch)).error_code == ErrorCode.CORRUPT_MESSAGE
    good = produce(raw(), "bad-crc", encode_batch([Record(0, 1000, b"k", b"v", [])]))
    assert (good.error_code, good.base_offset) == (0, 0)


def test_batch_over_max_message_bytes_is_refused(raw):
    assert create_topic(raw(), "small-max", **{"max.message.bytes": "1000"}).error_code == 0
    big = encode_batch([Record(0, 1000, None, b"x" * 2000, [])])
    assert produce(raw(), "small-max", big).error_code == ErrorCode.MESSAGE_TOO_LARGE
    ok = produce(raw(), "small-max", encode_batch([Record(0, 1000, None, b"x" * 100, [])]))
    assert (ok.error_code, ok.base_offset) == (0, 0)


def test_two_batches_in_one_partition_are_invalid_record(raw):
    assert create_topic(raw(), "two-batches").error_code == 0
    one = encode_batch([Record(0, 1000, None, b"a", [])])
    assert produce(raw(), "two-batches", one + one).error_code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "ünïcode", "a/b"])
def test_invalid_topic_names(raw, name):
    assert create_topic(raw(), name).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    md = raw().call(METADATA, 12, {"topics": [{"name": name}]})
    assert md.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    batch = encode_batch([Record(0, 1000, None, b"a", [])])
    assert produce(raw(), name, batch).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_unknown_topic_config_is_invalid_config(raw):
    topic = create_topic(raw(), "bad-config", **{"no.such.config": "1"})
    assert topic.error_code == ErrorCode.INVALID_CONFIG
    assert "no.such.config" in topic.error_message


def test_invalid_required_acks(raw):
    assert create_topic(raw(), "acks").error_code == 0
    body = raw().call(PRODUCE, 9, {"acks": 2, "timeout_ms": 1000, "topic_data": [
        {"name": "acks", "partition_data": [{"index": 0, "records": encode_batch(
            [Record(0, 1, None, b"a", [])])}]}]})
    assert body.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_REQUIRED_ACKS


def test_pipelined_requests_are_answered_in_order(raw):
    r = raw()
    sent = []
    for i in range(50):
        api, version, body = ((METADATA, 12, {"topics": None}) if i % 2 else
                              (API_VERSIONS, 3, {}))
        cid, data = r.conn.send_request(api, version, body)
        sent.append(cid)
        r.sock.sendall(data)
    got = []
    while len(got) < 50:
        r.conn.receive_data(r.sock.recv(65536))
        while (resp := r.conn.next_response()) is not None:
            got.append(resp.correlation_id)
    assert got == sent
