"""Kafka's primitive wire types as construct classes.

Owns: int8..int64, uint16/uint32, float64, bool, unsigned varints, (compact) (nullable)
strings and bytes, (compact) (nullable) arrays, UUIDs and the tagged-field section.

Every length or count read off the wire is checked against the bytes that remain in the
stream *before* anything is allocated or looped over, so a hostile frame cannot make us
allocate more than it sent (CVE-2022-34917 was exactly this bug in Kafka). Parse failures
raise construct errors; protocol.schema turns them into protocol.errors.DecodeError.
"""

from __future__ import annotations

import io
import uuid

from construct import (
    Construct,
    Flag,
    Float64b,
    Int8sb,
    Int16sb,
    Int16ub,
    Int32sb,
    Int32ub,
    Int64sb,
    StreamError,
    ValidationError,
)

__all__ = [
    "INT8", "INT16", "INT32", "INT64", "UINT16", "UINT32", "FLOAT64", "BOOL",
    "UVarInt", "KString", "KBytes", "KArray", "KUuid", "TaggedFields", "remaining",
    "ZERO_UUID",
]

INT8, INT16, INT32, INT64 = Int8sb, Int16sb, Int32sb, Int64sb
UINT16, UINT32, FLOAT64, BOOL = Int16ub, Int32ub, Float64b, Flag

ZERO_UUID = uuid.UUID(int=0)

_INT16 = Int16sb
_INT32 = Int32sb


def remaining(stream: io.BytesIO) -> int:
    """Bytes left in a seekable stream; the bound for every length we are asked to read."""
    here = stream.tell()
    end = stream.seek(0, io.SEEK_END)
    stream.seek(here)
    return end - here


def _read_exact(stream, n: int, path) -> bytes:
    if n > remaining(stream):
        raise StreamError(f"length {n} exceeds the {remaining(stream)} bytes left", path=path)
    return stream.read(n)


class UVarInt(Construct):
    """Unsigned LEB128 varint (no zigzag), at most 5 bytes: lengths, counts, tags."""

    def _parse(self, stream, context, path):
        result = 0
        for shift in range(0, 35, 7):
            byte = stream.read(1)
            if not byte:
                raise StreamError("truncated unsigned varint", path=path)
            b = byte[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                if result > 0xFFFFFFFF:
                    raise ValidationError("unsigned varint exceeds 32 bits", path=path)
                return result
        raise ValidationError("unsigned varint longer than 5 bytes", path=path)

    def _build(self, obj, stream, context, path):
        stream.write(encode_uvarint(obj))
        return obj


_ONE_BYTE = [bytes((i,)) for i in range(128)]


def uvarint_bytes(z: int) -> bytes:
    """Unsigned LEB128 of any non-negative int; records use it for zigzag varlongs too."""
    if z < 0x80:
        return _ONE_BYTE[z]
    if z < 0x4000:
        return bytes(((z & 0x7F) | 0x80, z >> 7))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def encode_uvarint(value: int) -> bytes:
    """The wire protocol's unsigned varint: 32 bits at most."""
    if value < 0 or value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    return uvarint_bytes(value)


_UVARINT = UVarInt()


def _read_length(stream, context, path, compact: bool) -> int:
    """Return the length, or -1 for null, in either encoding."""
    if compact:
        return _UVARINT._parse(stream, context, path) - 1
    return _INT16._parse(stream, context, path)


class KString(Construct):
    """STRING / NULLABLE_STRING / COMPACT_STRING / COMPACT_NULLABLE_STRING, as str or None."""

    def __init__(self, compact: bool, nullable: bool):
        super().__init__()
        self.compact, self.nullable = compact, nullable

    def _parse(self, stream, context, path):
        n = _read_length(stream, context, path, self.compact)
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise ValidationError(f"invalid string length {n}", path=path)
        data = _read_exact(stream, n, path)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValidationError(f"string is not UTF-8: {e}", path=path) from None

    def _build(self, obj, stream, context, path):
        if obj is None:
            if not self.nullable:
                raise ValidationError("null given for a non-nullable string", path=path)
            stream.write(b"\x00" if self.compact else b"\xff\xff")
            return obj
        data = obj.encode("utf-8")
        if self.compact:
            stream.write(encode_uvarint(len(data) + 1))
        else:
            if len(data) > 0x7FFF:
                raise ValidationError("string longer than 32767 bytes", path=path)
            stream.write(len(data).to_bytes(2, "big"))
        stream.write(data)
        return obj


class KBytes(Construct):
    """BYTES / NULLABLE_BYTES / RECORDS and their compact forms, as bytes or None.

    Record batches travel through here untouched: the broker never decodes them on the
    produce or fetch path.
    """

    def __init__(self, compact: bool, nullable: bool):
        super().__init__()
        self.compact, self.nullable = compact, nullable

    def _parse(self, stream, context, path):
        if self.compact:
            n = _UVARINT._parse(stream, context, path) - 1
        else:
            n = _INT32._parse(stream, context, path)
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise ValidationError(f"invalid bytes length {n}", path=path)
        return _read_exact(stream, n, path)

    def _build(self, obj, stream, context, path):
        if obj is None:
            if not self.nullable:
                raise ValidationError("null given for non-nullable bytes", path=path)
            stream.write(b"\x00" if self.compact else b"\xff\xff\xff\xff")
            return obj
        n = len(obj)
        stream.write(encode_uvarint(n + 1) if self.compact else n.to_bytes(4, "big", signed=True))
        stream.write(obj)
        return obj


class KArray(Construct):
    """ARRAY / COMPACT_ARRAY (nullable or not) of one element construct, as list or None.

    Every element takes at least one byte on the wire (the smallest Kafka type), so a count
    above the bytes left is rejected before the loop starts.
    """

    def __init__(self, element: Construct, compact: bool, nullable: bool):
        super().__init__()
        self.element, self.compact, self.nullable = element, compact, nullable

    def _parse(self, stream, context, path):
        if self.compact:
            n = _UVARINT._parse(stream, context, path) - 1
        else:
            n = _INT32._parse(stream, context, path)
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise ValidationError(f"invalid array length {n}", path=path)
        if n > remaining(stream):
            raise StreamError(f"array of {n} cannot fit in {remaining(stream)} bytes", path=path)
        parse = self.element._parsereport
        return [parse(stream, context, path) for _ in range(n)]

    def _build(self, obj, stream, context, path):
        if obj is None:
            if not self.nullable:
                raise ValidationError("null given for a non-nullable array", path=path)
            stream.write(b"\x00" if self.compact else b"\xff\xff\xff\xff")
            return obj
        n = len(obj)
        stream.write(encode_uvarint(n + 1) if self.compact else n.to_bytes(4, "big", signed=True))
        build = self.element._build
        for item in obj:
            build(item, stream, context, path)
        return obj


class KUuid(Construct):
    """UUID: 16 raw bytes, as uuid.UUID (Kafka's topic ids)."""

    def _parse(self, stream, context, path):
        return uuid.UUID(bytes=_read_exact(stream, 16, path))

    def _build(self, obj, stream, context, path):
        stream.write((obj or ZERO_UUID).bytes)
        return obj


class TaggedFields(Construct):
    """The tagged-field section that ends every flexible struct.

    `fields` maps tag -> (name, construct, default). Known tags are parsed from exactly the
    bytes their size prefix gives; unknown tags are skipped, as Kafka does, so newer peers can
    add fields. On build only values that differ from their default are written, in
    ascending tag order (the spec requires that order).
    """

    def __init__(self, fields: dict[int, tuple[str, Construct, object]]):
        super().__init__()
        self.fields = dict(sorted(fields.items()))

    def _parse(self, stream, context, path):
        count = _UVARINT._parse(stream, context, path)
        if count > remaining(stream):
            raise StreamError("tagged field count exceeds the bytes left", path=path)
        values = {}
        last = -1
        for _ in range(count):
            tag = _UVARINT._parse(stream, context, path)
            size = _UVARINT._parse(stream, context, path)
            if tag <= last:
                raise ValidationError("tagged fields out of order", path=path)
            last = tag
            raw = _read_exact(stream, size, path)
            known = self.fields.get(tag)
            if known is None:
                continue
            name, sub, _default = known
            sub_stream = io.BytesIO(raw)
            values[name] = sub._parsereport(sub_stream, context, path)
            if sub_stream.tell() != size:
                raise ValidationError(f"tagged field {name} has trailing bytes", path=path)
        return values

    def _build(self, obj, stream, context, path):
        present = []
        for tag, (name, sub, default) in self.fields.items():
            value = obj.get(name, default)
            if value is None or value == default:
                continue
            buf = io.BytesIO()
            sub._build(value, buf, context, path)
            present.append((tag, buf.getvalue()))
        stream.write(encode_uvarint(len(present)))
        for tag, raw in present:
            stream.write(encode_uvarint(tag))
            stream.write(encode_uvarint(len(raw)))
            stream.write(raw)
        return obj
