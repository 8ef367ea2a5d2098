"""The small declaration language for Kafka messages.

Owns: `F` (a field with version ranges), `Message` (one declaration per request, response
or header, never one class per version), and the construct structure built from a
declaration for one version, built once and cached.

A declaration reads like Kafka's own JSON, in Python and snake_case:

    ProduceRequest = Message("ProduceRequest", api_key=0, valid="3-10", flexible="9+", fields=[
        F("transactional_id", "string", "3+", nullable="3+"),
        F("acks", "int16"),
        F("topic_data", [F("name", "string"), F("partition_data", [...])]),
    ])

A list as the type means an array of structs; `Struct([...])` a single nested struct (with
`nullable=`, an int8 presence marker before it); "[]int32" an array of a primitive. Parsed
messages are construct Containers (dicts with attribute access); to build one pass any
mapping, and missing fields take their defaults.

Two codecs come from each declaration, per version: the construct tree (`Message.struct`),
the reference, and the code protocol.codegen generates from the same fields, which
`parse`, `parse_stream`, `build` and `build_into` use (walking the construct tree per field
took 4.7 ms of CPU to decode a FetchRequest naming 1,000 partitions, the generated code
0.75 ms). Tests hold the two to the same bytes and the same errors.
"""

from __future__ import annotations

import io
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from construct import Construct, ConstructError, Container

from protocol import primitives as p
from protocol.codegen import Codec, compile_codec
from protocol.errors import DecodeError, EncodeError


@dataclass(frozen=True)
class Versions:
    """An inclusive version range parsed from Kafka's notation: "3+", "0-7", "5", "none"."""

    low: int
    high: int | None  # None: no upper bound

    @classmethod
    def parse(cls, text: str | None) -> "Versions":
        if text is None or text == "none":
            return cls(1, 0)  # empty
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            low, high = text.split("-")
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            return f"{self.low}+"
        if self.low > self.high:
            return "none"
        return f"{self.low}-{self.high}" if self.low != self.high else str(self.low)


@dataclass(frozen=True)
class Struct:
    """A single nested struct (not an array), e.g. FetchResponse's CurrentLeader."""

    fields: list["F"]


_SCALAR_DEFAULTS: dict[str, Any] = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0,
    "float64": 0.0, "bool": False, "string": "", "bytes": b"", "records": None,
    "uuid": p.ZERO_UUID,
}

_FIXED = {
    "int8": p.INT8, "int16": p.INT16, "int32": p.INT32, "int64": p.INT64,
    "uint16": p.UINT16, "uint32": p.UINT32, "float64": p.FLOAT64, "bool": p.BOOL,
    "uuid": p.KUuid(),
}


class F:
    """One field: name, type, the versions it exists in, and where it is nullable or tagged."""

    __slots__ = ("name", "type", "versions", "nullable", "tag", "tagged", "default")

    def __init__(self, name: str, type: str | list | Struct, versions: str = "0+", *,
                 nullable: str | None = None, tag: int | None = None,
                 tagged: str | None = None, default: Any = ...):
        self.name = name
        self.type = type
        self.versions = Versions.parse(versions)
        self.nullable = Versions.parse(nullable)
        self.tag = tag
        self.tagged = Versions.parse(tagged if tagged is not None else
                                     (versions if tag is not None else None))
        self.default = default

    def default_for(self, version: int) -> Any:
        if self.default is not ...:
            return self.default
        if isinstance(self.type, Struct):
            return None  # built as a struct of its own defaults; omitted when tagged
        if isinstance(self.type, list) or self.type.startswith("[]"):
            return None if version in self.nullable else []
        if version in self.nullable and self.type in ("string", "bytes", "records"):
            return None
        return _SCALAR_DEFAULTS[self.type]


class KStruct(Construct):
    """A struct of positional fields followed, when flexible, by its tagged-field section.

    Parsing yields one flat Container holding both positional and tagged values, so callers
    never care which way a field travelled. Building fills missing fields with defaults.
    """

    def __init__(self, regular: list[tuple[str, Construct, Any]],
                 tagged: p.TaggedFields | None, defaults: dict[str, Any]):
        super().__init__()
        self.regular, self.tagged, self.defaults = regular, tagged, defaults

    def _parse(self, stream, context, path):
        obj = Container()
        for name, sub, _ in self.regular:
            obj[name] = sub._parsereport(stream, context, path)
        if self.tagged is not None:
            for name, _sub, default in self.tagged.fields.values():
                # a fresh list, so a caller appending to one message never alters the default
                obj[name] = [] if default == [] else default
            obj.update(self.tagged._parsereport(stream, context, path))
        return obj

    def _build(self, obj, stream, context, path):
        if obj is None:
            obj = {}
        elif not hasattr(obj, "get"):
            raise EncodeError(f"expected a mapping at {path}, got {type(obj).__name__}")
        for name, sub, default in self.regular:
            value = obj.get(name, default)
            sub._build(value, stream, context, f"{path} -> {name}")
        if self.tagged is not None:
            self.tagged._build(obj, stream, context, path)
        return obj


class NullableStruct(Construct):
    """A single struct where its field is nullable: an int8 -1 for null, else 1 and the
    struct. Kafka writes the same marker inside a tagged field (its tag's size counts it), and
    a null tagged struct, whose default is null, is left out (TaggedFields omits None)."""

    def __init__(self, struct: KStruct):
        super().__init__()
        self.struct = struct

    def _parse(self, stream, context, path):
        if p.INT8._parsereport(stream, context, path) < 0:
            return None
        return self.struct._parsereport(stream, context, path)

    def _build(self, obj, stream, context, path):
        if obj is None:
            stream.write(b"\xff")
            return obj
        stream.write(b"\x01")
        return self.struct._build(obj, stream, context, path)


def _field_construct(f: F, version: int, flexible: bool) -> Construct:
    nullable = version in f.nullable
    t = f.type
    if isinstance(t, list):
        return p.KArray(_struct(t, version, flexible), flexible, nullable)
    if isinstance(t, Struct):
        struct = _struct(t.fields, version, flexible)
        return NullableStruct(struct) if nullable else struct
    if t.startswith("[]"):
        inner = F(f.name, t[2:], "0+")
        return p.KArray(_field_construct(inner, version, flexible), flexible, nullable)
    if t == "string":
        return p.KString(flexible, nullable)
    if t in ("bytes", "records"):
        return p.KBytes(flexible, nullable or t == "records")
    return _FIXED[t]


def _struct(fields: list[F], version: int, flexible: bool) -> KStruct:
    regular, tagged, defaults = [], {}, {}
    for f in fields:
        if version not in f.versions:
            continue
        sub = _field_construct(f, version, flexible)
        default = f.default_for(version)
        defaults[f.name] = default
        if flexible and f.tag is not None and version in f.tagged:
            tagged[f.tag] = (f.name, sub, default)
        else:
            regular.append((f.name, sub, default))
    return KStruct(regular, p.TaggedFields(tagged) if flexible else None, defaults)


@dataclass
class Message:
    """One declaration of a request, response, header or embedded record format."""

    name: str
    fields: list[F]
    valid: str
    flexible: str = "none"
    api_key: int | None = None
    _valid: Versions = field(init=False, repr=False)
    _flexible: Versions = field(init=False, repr=False)
    _cache: dict[int, KStruct] = field(init=False, repr=False, default_factory=dict)
    _codecs: dict[int, Codec] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self):
        self._valid = Versions.parse(self.valid)
        self._flexible = Versions.parse(self.flexible)

    @property
    def versions(self) -> Versions:
        return self._valid

    def is_flexible(self, version: int) -> bool:
        return version in self._flexible

    def struct(self, version: int) -> KStruct:
        s = self._cache.get(version)
        if s is None:
            if version not in self._valid:
                raise EncodeError(f"{self.name} has no version {version} (valid {self.valid})")
            s = self._cache[version] = _struct(self.fields, version, self.is_flexible(version))
        return s

    def codec(self, version: int) -> Codec:
        """The generated parse and build functions of `version`, compiled on first use."""
        c = self._codecs.get(version)
        if c is None:
            if version not in self._valid:
                raise EncodeError(f"{self.name} has no version {version} (valid {self.valid})")
            c = self._codecs[version] = compile_codec(self.name, self.fields, version,
                                                      self.is_flexible(version))
        return c

    def parse_stream(self, stream: io.BytesIO, version: int) -> Container:
        """Parse one struct from the stream's current position; typed errors only."""
        parse = self.codec(version).parse
        start = stream.tell()
        # an unwritten BytesIO made from bytes gives back those bytes, without a copy
        data = stream.getvalue()
        if type(data) is not bytes:
            data = bytes(data)
        try:
            obj, end = parse(data, start)
        except _DECODE_FAILURES as e:
            raise _decode_error(self.name, version, e) from None
        stream.seek(end)
        return obj

    def parse(self, data: bytes, version: int) -> Container:
        """Parse a whole body; trailing bytes are a protocol violation."""
        parse = self.codec(version).parse
        if type(data) is not bytes:
            data = bytes(data)
        try:
            obj, end = parse(data, 0)
        except _DECODE_FAILURES as e:
            raise _decode_error(self.name, version, e) from None
        if end != len(data):
            raise DecodeError(f"{self.name} v{version}: {len(data) - end} trailing bytes")
        return obj

    def build_into(self, obj: Any, version: int, stream: io.BytesIO) -> None:
        # part by part: record batches are copied once, as construct wrote them (joining
        # first copied a 50 MB fetch response twice: 68 ms against 34)
        build = self.codec(version).build
        out: list = []
        try:
            build(obj, out.append)
            stream.writelines(out)  # a bytes field given something else fails here
        except _ENCODE_FAILURES as e:
            raise EncodeError(f"{self.name} v{version}: {e}") from e

    def build(self, obj: Any, version: int) -> bytes:
        build = self.codec(version).build
        out: list = []
        try:
            build(obj, out.append)
            return b"".join(out)
        except _ENCODE_FAILURES as e:
            raise EncodeError(f"{self.name} v{version}: {e}") from e

    # The construct path: the reference the generated code is tested and measured against.

    def construct_parse(self, data: bytes, version: int) -> Container:
        stream = io.BytesIO(data)
        try:
            obj = self.struct(version)._parsereport(stream, None, self.name)
        except ConstructError as e:
            raise DecodeError(f"{self.name} v{version}: {e}") from None
        if stream.tell() != len(data):
            raise DecodeError(f"{self.name} v{version}: {len(data) - stream.tell()} trailing bytes")
        return obj

    def construct_build(self, obj: Any, version: int) -> bytes:
        stream = io.BytesIO()
        try:
            self.struct(version)._build(obj, stream, None, self.name)
        except (ConstructError, ValueError, TypeError, AttributeError, OverflowError,
                KeyError) as e:
            raise EncodeError(f"{self.name} v{version}: {e}") from e
        return stream.getvalue()

    def walk(self):
        """Yield (path, F) for every field, nested ones included: used by the spec check."""
        def rec(prefix, fields):
            for f in fields:
                yield prefix + (f.name,), f
                nested = f.type if isinstance(f.type, list) else (
                    f.type.fields if isinstance(f.type, Struct) else None)
                if nested:
                    yield from rec(prefix + (f.name,), nested)
        yield from rec((), self.fields)


# What generated code raises on bytes that do not parse: its own DecodeErrors, and what a
# buffer that ends too soon or holds bad UTF-8 or a short UUID raises
_DECODE_FAILURES = (DecodeError, struct.error, IndexError, ValueError)
_ENCODE_FAILURES = (EncodeError, struct.error, ValueError, TypeError, AttributeError,
                    OverflowError, KeyError)


def _decode_error(name: str, version: int, e: Exception) -> DecodeError:
    if isinstance(e, (struct.error, IndexError)):
        return DecodeError(f"{name} v{version}: truncated ({e})")
    if isinstance(e, UnicodeDecodeError):
        return DecodeError(f"{name} v{version}: string is not UTF-8: {e}")
    return DecodeError(f"{name} v{version}: {e}")


def new_uuid() -> uuid.UUID:
    return uuid.uuid4()
