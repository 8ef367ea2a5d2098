"""DescribeClientQuotas (48) and AlterClientQuotas (49), and the ClientQuotaRecord of the
metadata log, against bytes laid out by hand in the order of Kafka's definitions
(DescribeClientQuotasRequest.json, AlterClientQuotasRequest.json and their responses,
metadata/ClientQuotaRecord.json): v0 with classic strings and int32 array counts, v1
flexible; quota values are IEEE 754 doubles, big-endian."""

from __future__ import annotations

import struct

from protocol.messages.quotas import (
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record
from tests.protocol.test_share_messages import TAGS, arr, cstr


def i8(n: int) -> bytes:
    return struct.pack(">b", n)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def f64(x: float) -> bytes:
    return struct.pack(">d", x)


def s(text: str | None) -> bytes:  # a classic (nullable) string
    if text is None:
        return i16(-1)
    raw = text.encode()
    return i16(len(raw)) + raw


NULL = b"\x00"  # a null compact string or array


def test_describe_request_v0_and_v1():
    v0 = i32(2) + s("user") + i8(0) + s("alice") + s("client-id") + i8(1) + s(None) + b"\x01"
    body = DescribeClientQuotasRequest.parse(v0, 0)
    assert [(c.entity_type, c.match_type, c.match) for c in body.components] == \
        [("user", 0, "alice"), ("client-id", 1, None)]
    assert body.strict is True
    assert DescribeClientQuotasRequest.build(body, 0) == v0
    v1 = (arr(1) + cstr("user") + i8(2) + NULL + TAGS) + b"\x00" + TAGS
    body = DescribeClientQuotasRequest.parse(v1, 1)
    assert [(c.entity_type, c.match_type, c.match) for c in body.components] == \
        [("user", 2, None)]
    assert body.strict is False and DescribeClientQuotasRequest.build(body, 1) == v1


def test_describe_response_layout_v0_and_v1():
    body = {"throttle_time_ms": 7, "error_code": 0, "error_message": None, "entries": [
        {"entity": [{"entity_type": "user", "entity_name": "alice"},
                    {"entity_type": "client-id", "entity_name": None}],
         "values": [{"key": "producer_byte_rate", "value": 1024.0}]}]}
    assert DescribeClientQuotasResponse.build(body, 0) == (
        i32(7) + i16(0) + s(None)
        + i32(1) + i32(2) + s("user") + s("alice") + s("client-id") + s(None)
        + i32(1) + s("producer_byte_rate") + f64(1024.0))
    assert DescribeClientQuotasResponse.build(body, 1) == (
        i32(7) + i16(0) + NULL
        + arr(1) + arr(2) + cstr("user") + cstr("alice") + TAGS + cstr("client-id") + NULL
        + TAGS + arr(1) + cstr("producer_byte_rate") + f64(1024.0) + TAGS + TAGS + TAGS)
    refused = {"throttle_time_ms": 0, "error_code": 42, "error_message": "bad",
               "entries": None}
    assert DescribeClientQuotasResponse.build(refused, 0) == \
        i32(0) + i16(42) + s("bad") + i32(-1)


def test_alter_request_and_response_layout():
    v1 = (arr(1) + arr(1) + cstr("client-id") + cstr("c1") + TAGS
          + arr(2) + cstr("producer_byte_rate") + f64(2048.0) + b"\x00" + TAGS
          + cstr("consumer_byte_rate") + f64(0.0) + b"\x01" + TAGS + TAGS
          + b"\x01" + TAGS)
    body = AlterClientQuotasRequest.parse(v1, 1)
    (entry,) = body.entries
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("client-id", "c1")]
    assert [(o.key, o.value, o.remove) for o in entry.ops] == \
        [("producer_byte_rate", 2048.0, False), ("consumer_byte_rate", 0.0, True)]
    assert body.validate_only is True
    assert AlterClientQuotasRequest.build(body, 1) == v1
    v0 = (i32(1) + i32(1) + s("user") + s(None)
          + i32(1) + s("request_percentage") + f64(12.5) + b"\x00" + b"\x00")
    body = AlterClientQuotasRequest.parse(v0, 0)
    assert body.entries[0].entity[0].entity_name is None
    assert body.entries[0].ops[0].value == 12.5 and AlterClientQuotasRequest.build(body, 0) == v0
    response = {"throttle_time_ms": 0, "entries": [
        {"error_code": 42, "error_message": "Invalid configuration key x",
         "entity": [{"entity_type": "user", "entity_name": None}]}]}
    assert AlterClientQuotasResponse.build(response, 0) == (
        i32(0) + i32(1) + i16(42) + s("Invalid configuration key x")
        + i32(1) + s("user") + s(None))


def test_client_quota_record_bytes():
    body = {"entity": [{"entity_type": "user", "entity_name": "alice"}],
            "key": "consumer_byte_rate", "value": 4096.0, "remove": False}
    value = encode_metadata_record(T.CLIENT_QUOTA_RECORD, 0, body)
    assert value == (b"\x01" + bytes([14]) + b"\x00"
                     + arr(1) + cstr("user") + cstr("alice") + TAGS
                     + cstr("consumer_byte_rate") + f64(4096.0) + b"\x00" + TAGS)
    kind, version, decoded = decode_metadata_record(value)
    assert (kind, version, decoded.key, decoded.value) == \
        (T.CLIENT_QUOTA_RECORD, 0, "consumer_byte_rate", 4096.0)
