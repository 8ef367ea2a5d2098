"""The metrics a client pushes with PushTelemetry (KIP-714): OpenTelemetry's MetricsData,
protobuf-encoded, read here without a protobuf library.

Owns: `decode_metrics(data) -> Telemetry`, the resource attributes and every number data
point (gauge and sum: metric name, value, the point's attributes, its time) of one push;
histograms and summaries are skipped. The subset of the protobuf wire format this needs
(varints, 64- and 32-bit fields, length-delimited fields) is here too; an unknown field is
skipped by its wire type, as protobuf readers do, and bytes that are not a MetricsData
raise `OtlpError`.

Field numbers are opentelemetry-proto's metrics/v1/metrics.proto, common/v1/common.proto
and resource/v1/resource.proto.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Iterator

__all__ = ["DataPoint", "OtlpError", "Telemetry", "decode_metrics"]

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


class OtlpError(ValueError):
    """The bytes are not a protobuf MetricsData."""


@dataclass(frozen=True)
class DataPoint:
    name: str
    value: float
    attributes: dict[str, Any] = field(default_factory=dict)
    time_unix_nano: int = 0


@dataclass
class Telemetry:
    resource: dict[str, Any] = field(default_factory=dict)
    points: list[DataPoint] = field(default_factory=list)


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise OtlpError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(data: memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value): an int for varints and fixed fields (raw bits),
    a memoryview for length-delimited ones."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == VARINT:
            value, pos = _varint(data, pos)
        elif wire == FIXED64:
            if pos + 8 > len(data):
                raise OtlpError("truncated 64-bit field")
            value = int.from_bytes(data[pos:pos + 8], "little")
            pos += 8
        elif wire == FIXED32:
            if pos + 4 > len(data):
                raise OtlpError("truncated 32-bit field")
            value = int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
        elif wire == LENGTH:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise OtlpError("truncated length-delimited field")
            value = data[pos:pos + size]
            pos += size
        else:
            raise OtlpError(f"unsupported wire type {wire}")
        yield number, wire, value


def _text(value: Any) -> str:
    if not isinstance(value, memoryview):
        raise OtlpError("expected a string")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as e:
        raise OtlpError(f"a string that is not UTF-8: {e}") from None


def _double(bits: int) -> float:
    return float(struct.unpack("<d", bits.to_bytes(8, "little"))[0])


def _signed(bits: int) -> int:
    return bits - (1 << 64) if bits >= 1 << 63 else bits


def _any_value(data: memoryview) -> Any:
    for number, wire, value in _fields(data):
        if number == 1 and wire == LENGTH:
            return _text(value)
        if number == 2 and wire == VARINT:
            return bool(value)
        if number == 3 and wire == VARINT:
            return _signed(value)
        if number == 4 and wire == FIXED64:
            return _double(value)
    return None  # arrays, maps and bytes are not kept


def _key_value(data: memoryview) -> tuple[str, Any]:
    key, found = "", None
    for number, wire, value in _fields(data):
        if number == 1 and wire == LENGTH:
            key = _text(value)
        elif number == 2 and wire == LENGTH:
            found = _any_value(value)
    return key, found


def _number_point(name: str, data: memoryview) -> DataPoint | None:
    attributes: dict[str, Any] = {}
    value: float | None = None
    time = 0
    for number, wire, raw in _fields(data):
        if number == 7 and wire == LENGTH:
            k, v = _key_value(raw)
            attributes[k] = v
        elif number == 3 and wire == FIXED64:
            time = raw
        elif number == 4 and wire == FIXED64:
            value = _double(raw)
        elif number == 6 and wire == FIXED64:
            value = float(_signed(raw))
    return None if value is None else DataPoint(name, value, attributes, time)


def _metric(data: memoryview, out: list[DataPoint]) -> None:
    name = ""
    numbers: list[memoryview] = []
    for number, wire, value in _fields(data):
        if number == 1 and wire == LENGTH:
            name = _text(value)
        elif number in (5, 7) and wire == LENGTH:  # gauge, sum: data_points is field 1
            numbers += [v for n, w, v in _fields(value) if n == 1 and w == LENGTH]
    for raw in numbers:
        point = _number_point(name, raw)
        if point is not None:
            out.append(point)


def decode_metrics(data: bytes) -> Telemetry:
    """One push's MetricsData: resource attributes (of the first resource) and points."""
    telemetry = Telemetry()
    for number, wire, resource_metrics in _fields(memoryview(data)):
        if number != 1 or wire != LENGTH:
            continue
        for n, w, value in _fields(resource_metrics):
            if n == 1 and w == LENGTH:  # Resource
                for rn, rw, attribute in _fields(value):
                    if rn == 1 and rw == LENGTH:
                        k, v = _key_value(attribute)
                        telemetry.resource.setdefault(k, v)
            elif n == 2 and w == LENGTH:  # ScopeMetrics
                for sn, sw, metric in _fields(value):
                    if sn == 2 and sw == LENGTH:
                        _metric(metric, telemetry.points)
    return telemetry
