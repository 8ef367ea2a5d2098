"""protocol.otlp against MetricsData built here field by field, as opentelemetry-proto
declares it: gauges and sums of doubles and ints with their attributes, resource
attributes, unknown fields skipped, and bytes that are not a MetricsData refused."""

from __future__ import annotations

import struct

import pytest

from protocol.otlp import DataPoint, OtlpError, decode_metrics


def varint(n: int) -> bytes:
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(number: int, payload: bytes) -> bytes:  # length-delimited
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def fixed64(number: int, raw: bytes) -> bytes:
    return varint(number << 3 | 1) + raw


def key_value(key: str, text: str | None = None, number: int | None = None) -> bytes:
    value = field(1, text.encode()) if text is not None else \
        varint(3 << 3) + varint(number or 0)
    return field(1, key.encode()) + field(2, value)


def point(value: float | int, time: int = 7, **attributes: str) -> bytes:
    raw = (fixed64(4, struct.pack("<d", value)) if isinstance(value, float)
           else fixed64(6, struct.pack("<q", value)))
    attrs = b"".join(field(7, key_value(k, v)) for k, v in attributes.items())
    return attrs + fixed64(3, struct.pack("<Q", time)) + raw


def metric(name: str, kind: int, *points: bytes) -> bytes:
    data = b"".join(field(1, p) for p in points)
    if kind == 7:  # sum: aggregation_temporality and is_monotonic too
        data += varint(2 << 3) + varint(1) + varint(3 << 3) + varint(1)
    return field(1, name.encode()) + field(2, b"help") + field(kind, data)


def metrics_data(*metrics: bytes, resource: bytes = b"") -> bytes:
    scope = field(1, field(1, b"librdkafka")) + b"".join(field(2, m) for m in metrics)
    resource_metrics = field(1, resource) + field(2, scope) + field(3, b"schema-url")
    return field(1, resource_metrics)


def test_gauges_and_sums_with_attributes_and_the_resource():
    data = metrics_data(
        metric("org.apache.kafka.producer.node.request.latency.avg", 5,
               point(1.5, node_id="0"), point(2.25, node_id="1")),
        metric("org.apache.kafka.producer.connection.creation.total", 7, point(3, time=99)),
        # a histogram is skipped
        field(1, b"a.histogram") + field(9, field(1, fixed64(4, struct.pack("<Q", 5)))),
        resource=field(1, key_value("client_rack", "r1")) + field(1, key_value("n", number=4)))
    telemetry = decode_metrics(data)
    assert telemetry.resource == {"client_rack": "r1", "n": 4}
    assert telemetry.points == [
        DataPoint("org.apache.kafka.producer.node.request.latency.avg", 1.5, {"node_id": "0"}, 7),
        DataPoint("org.apache.kafka.producer.node.request.latency.avg", 2.25, {"node_id": "1"}, 7),
        DataPoint("org.apache.kafka.producer.connection.creation.total", 3.0, {}, 99),
    ]


def test_negative_ints_and_unknown_fields():
    unknown = varint(15 << 3 | 5) + b"\x01\x02\x03\x04" + varint(14 << 3) + varint(300)
    data = metrics_data(metric("m", 5, unknown + point(-2)))
    assert decode_metrics(data).points == [DataPoint("m", -2.0, {}, 7)]
    assert decode_metrics(b"").points == []


@pytest.mark.parametrize("junk", [
    b"\x0a\x05abc",           # a length past the end
    b"\x0a",                  # a key and nothing more
    b"\x0b",                  # wire type 3 (groups): not used by OTLP
    b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # a varint that never ends
    field(1, field(2, field(2, field(1, b"\xff\xfe")))),  # a metric name that is not UTF-8
])
def test_bytes_that_are_not_metrics_data_are_refused(junk):
    with pytest.raises(OtlpError):
        decode_metrics(junk)
