"""The compiled wire codec: one parse and one build function per struct of a (message,
version), written as straight-line Python from the declarations and `exec`ed once.

Owns: `compile_codec`, the generator, and the few helpers its code calls (varints, the
tagged-field section). protocol.schema calls it and caches the result per version; the
declarations stay the one source, and the construct tree that protocol.schema also builds
from them is the reference this code is tested against, byte for byte
(tests/protocol/test_codegen.py).

Why generate: interpreting a construct tree costs a few Python calls per field per value,
so decoding a FetchRequest naming 1,000 partitions took 4.8 ms of CPU (0.75 ms now, the
figures in docs/BENCHMARKS.md). The generated code reads a run of fixed-width fields, and the
length after them, with one `struct.Struct.unpack_from` and checks each length once; about
half of what remains is filling the Containers themselves. Parsed structs are Containers of
a subclass with their fields as properties (`container_class`), since Container's own
attribute access costs more than the parse.

The rules are primitives.py's, restated as code: every length or count is checked against
the bytes left before anything is sliced, allocated or looped over (an array's elements take
at least one byte each); -1 is null only where the field is nullable; tagged fields are
parsed from exactly the bytes their size gives, unknown tags skipped, and come out in the
same flat Container as the positional fields (positional fields in declaration order, then
tagged ones by tag, as the construct path orders them); building writes a tagged field only
when its value is neither None nor its default. Parse errors surface as DecodeError or as
the built-in errors a short buffer raises (struct.error, IndexError, ValueError), which
protocol.schema turns into DecodeError; build errors likewise become EncodeError.

Generated parse functions take (buf: bytes, pos) and return (Container, pos); build
functions take (obj, w) and pass bytes-like parts to `w`, a list's append, so the caller
joins them once. `Codec.source` holds the text, to read when something looks wrong.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from construct import Container

from protocol.errors import DecodeError, EncodeError
from protocol.primitives import ZERO_UUID, encode_uvarint

__all__ = ["Codec", "compile_codec", "container_class"]

# struct codes and widths of the fixed-width types (big-endian on the wire)
_FIXED = {"int8": ("b", 1), "int16": ("h", 2), "int32": ("i", 4), "int64": ("q", 8),
          "uint16": ("H", 2), "uint32": ("I", 4), "float64": ("d", 8), "bool": ("?", 1)}

_EMPTY: dict[str, Any] = {}
_ONE_BYTE = [bytes((i,)) for i in range(128)]
_PACK_H = struct.Struct(">h").pack
_PACK_I = struct.Struct(">i").pack
_UNPACK_H = struct.Struct(">h").unpack_from
_UNPACK_I = struct.Struct(">i").unpack_from


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint at `pos` (the generated code inlines the one-byte case)."""
    result = 0
    for shift in range(0, 35, 7):
        if pos >= len(buf):
            raise DecodeError("truncated unsigned varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result > 0xFFFFFFFF:
                raise DecodeError("unsigned varint exceeds 32 bits")
            return result, pos
    raise DecodeError("unsigned varint longer than 5 bytes")


def _uvarint_bytes(n: int) -> bytes:
    return _ONE_BYTE[n] if 0 <= n < 0x80 else encode_uvarint(n)


def _exceeds(n: int, buf: bytes, pos: int, path: str) -> DecodeError:
    return DecodeError(f"{path}: length {n} exceeds the {len(buf) - pos} bytes left")


def _cannot_fit(n: int, buf: bytes, pos: int, path: str) -> DecodeError:
    return DecodeError(f"{path}: array of {n} cannot fit in {len(buf) - pos} bytes")


def _invalid(what: str, n: int, path: str) -> DecodeError:
    return DecodeError(f"{path}: invalid {what} length {n}")


def _tag_section(buf: bytes, pos: int, count: int, path: str) -> tuple[int, dict[int, bytes]]:
    """The `count` tagged fields at `pos`: (the position after them, {tag: its bytes})."""
    if count > len(buf) - pos:
        raise DecodeError(f"{path}: tagged field count exceeds the bytes left")
    found = {}
    last = -1
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        if tag <= last:
            raise DecodeError(f"{path}: tagged fields out of order")
        last = tag
        end = pos + size
        if end > len(buf):
            raise _exceeds(size, buf, pos, path)
        found[tag] = buf[pos:end]
        pos = end
    return pos, found


def _write_tags(tags: list[tuple[int, list]], w: Callable[[bytes], None]) -> None:
    """The tagged-field section of the tags that have a value, in ascending tag order."""
    w(_uvarint_bytes(len(tags)))
    for tag, parts in tags:
        raw = b"".join(parts)
        w(_uvarint_bytes(tag))
        w(_uvarint_bytes(len(raw)))
        w(raw)


def _field(name: str) -> property:
    def get(self: Container) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None
    return property(get)


def _reduce(self: Container) -> tuple:
    return (Container, (), None, None, iter(self.items()))


def container_class(names: list[str]) -> type:
    """A Container whose fields `names` are properties.

    Container finds a key by attribute through __getattr__, which Python calls only after
    its own lookup has failed: ~0.7 µs an access, more than parsing the field (a fetch
    handler reads five or six per partition). A property is found at once (~0.1 µs). It
    is a Container in every other way: equality, repr, items, setting an attribute sets the
    key, a missing key is an AttributeError, and a copy or a pickle is a plain Container.
    Names that are Container methods (none is, today) are left to them.
    """
    ns: dict[str, Any] = {"__slots__": (), "__reduce__": _reduce}
    for name in names:
        if not hasattr(Container, name):
            ns[name] = _field(name)
    cls = type("Container", (Container,), ns)
    # Container's own attribute methods ask `self.__slots__` which names are real slots
    # (its repr's recursion lock): let them see Container's, not the empty tuple above
    cls.__slots__ = Container.__slots__  # type: ignore[attr-defined]
    return cls


def _not_a_mapping(obj: Any, path: str) -> EncodeError:
    return EncodeError(f"expected a mapping at {path}, got {type(obj).__name__}")


# the names generated code may use besides its own functions, structs and constants
_RUNTIME = {
    "DecodeError": DecodeError, "EncodeError": EncodeError, "_UUID": uuid.UUID,
    "_ZERO_UUID": ZERO_UUID, "_EMPTY": _EMPTY, "_ONE": _ONE_BYTE, "_uvarint": _uvarint,
    "_uvb": _uvarint_bytes, "_exceeds": _exceeds, "_cannot_fit": _cannot_fit,
    "_invalid": _invalid, "_tag_section": _tag_section, "_write_tags": _write_tags,
    "_not_a_mapping": _not_a_mapping, "_pack": struct.pack, "_pack_h": _PACK_H,
    "_pack_i": _PACK_I, "_unpack_from": struct.unpack_from, "_unpack_h": _UNPACK_H,
    "_unpack_i": _UNPACK_I,
}


@dataclass(frozen=True)
class Codec:
    """The compiled functions of one (message, version): parse(buf, pos) -> (obj, pos) and
    build(obj, w) passing each bytes-like part to `w`, a list's append."""

    parse: Callable[[bytes, int], tuple[Container, int]]
    build: Callable[[Any, Callable[[Any], None]], None]
    source: str


# What a field is in one version, resolved from its declaration as protocol.schema's
# _field_construct resolves it:
#   ("fixed", code, width) | ("uuid",) | ("string", compact, nullable)
#   | ("bytes", compact, nullable) | ("array", element, compact, nullable)
#   | ("struct", fields, nullable)
Kind = tuple


def _kind(f: Any, version: int, flexible: bool) -> Kind:
    nullable = version in f.nullable
    t = f.type
    if isinstance(t, list):
        return ("array", ("struct", t, False), flexible, nullable)
    if hasattr(t, "fields"):  # protocol.schema.Struct
        return ("struct", t.fields, nullable)
    if t.startswith("[]"):
        return ("array", _scalar_kind(t[2:], flexible, False), flexible, nullable)
    return _scalar_kind(t, flexible, nullable)


def _scalar_kind(t: str, flexible: bool, nullable: bool) -> Kind:
    if t == "string":
        return ("string", flexible, nullable)
    if t in ("bytes", "records"):
        return ("bytes", flexible, nullable or t == "records")
    if t == "uuid":
        return ("uuid",)
    code, width = _FIXED[t]
    return ("fixed", code, width)


def _layout(fields: list, version: int, flexible: bool) -> tuple[list, list]:
    """(regular, tagged) of a struct in `version`: [(name, kind, default)], the tagged ones
    as [(tag, name, kind, default)] in tag order."""
    regular, tagged = [], {}
    for f in fields:
        if version not in f.versions:
            continue
        entry = (f.name, _kind(f, version, flexible), f.default_for(version))
        if flexible and f.tag is not None and version in f.tagged:
            tagged[f.tag] = entry
        else:
            regular.append(entry)
    return regular, [(tag, *tagged[tag]) for tag in sorted(tagged)]


class _Writer:
    """Accumulates the generated functions and the constants they refer to."""

    def __init__(self, version: int, flexible: bool):
        self.version, self.flexible = version, flexible
        self.chunks: list[str] = []
        self.names: dict[str, Any] = dict(_RUNTIME)
        self._consts: dict[tuple, str] = {}
        self._count = 0

    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def const(self, value: Any) -> str:
        """A Python expression for `value`: a literal where one exists, else a name bound in
        the generated code's namespace."""
        if value is None or isinstance(value, (bool, int, str, bytes)):
            return repr(value)
        if isinstance(value, float) and value == value and abs(value) != float("inf"):
            return repr(value)
        key = (type(value).__name__, repr(value))
        name = self._consts.get(key)
        if name is None:
            name = self._consts[key] = self.fresh("_c")
            self.names[name] = value
        return name

    def fixed(self, codes: str, op: str) -> str:
        """The bound pack or unpack_from of a struct.Struct for `codes`."""
        key = ("struct", op, codes)
        name = self._consts.get(key)
        if name is None:
            name = self._consts[key] = self.fresh("_s")
            self.names[name] = getattr(struct.Struct(">" + codes), op)
        return name

    def emit(self, lines: list[str]) -> None:
        self.chunks.append("\n".join(lines))

    # parsing ------------------------------------------------------------------------------

    def parser(self, fields: list, path: str) -> str:
        """Generate the parse function of a struct; returns its name.

        The Container (of a class with the struct's fields as properties: container_class)
        is made first and filled key by key, in the construct path's order
        (positional fields, then tagged ones at their defaults, overwritten when present):
        setting items is twice as fast as passing them to the constructor as keywords.
        """
        regular, tagged = _layout(fields, self.version, self.flexible)
        name = self.fresh("parse_")
        cls = self.fresh("_Container")
        self.names[cls] = container_class([f for f, _, _ in regular] + [f for _, f, _, _ in tagged])
        body = [f"o = {cls}()"]
        ahead = False  # the next length (or the tag count) was read with a fixed run
        i = 0
        while i < len(regular):
            run = _fixed_run(regular, i)
            if run:
                targets = [f"o[{fname!r}]" for fname, _, _ in run]
                codes = "".join(kind[1] for _, kind, _ in run)
                width = sum(kind[2] for _, kind, _ in run)
                i += len(run)
                # read the next field's length, or the first byte of a uvarint one, with
                # the run (in flexible versions, usually all of it)
                after = regular[i][1] if i < len(regular) else None
                code = _length_code(after) if after else ("B" if self.flexible else None)
                if code:
                    targets, codes, width = targets + ["n"], codes + code, width + _WIDTH[code]
                    ahead = True
                unpack = self.fixed(codes, "unpack_from")
                body.append(f"{', '.join(targets)}{',' if len(targets) == 1 else ''} = "
                            f"{unpack}(buf, pos)")
                body.append(f"pos += {width}")
                continue
            fname, kind, _default = regular[i]
            body.extend(self.parse_value(kind, "v", f"{path} -> {fname}", ahead))
            body.append(f"o[{fname!r}] = v")
            ahead = False
            i += 1
        if self.flexible:
            body.extend(self.parse_tags(tagged, path, ahead))
        body.append("return o, pos")
        self.emit([f"def {name}(buf, pos):", *_indent(body)])
        return name

    def parse_value(self, kind: Kind, var: str, path: str, ahead: bool = False) -> list[str]:
        """Lines that read one value of `kind` at buf[pos] into `var` and advance pos.

        `ahead`: its length is in `n` already, read with the fixed run before it (for a
        uvarint length, only its first byte)."""
        what = kind[0]
        p = repr(path)
        if what == "fixed":
            unpack = self.fixed(kind[1], "unpack_from")
            return [f"{var}, = {unpack}(buf, pos)", f"pos += {kind[2]}"]
        if what == "uuid":
            return [f"{var} = _UUID(bytes=buf[pos:pos + 16])", "pos += 16"]
        if what == "struct":
            fn = self.parser(kind[1], path)
            if not kind[2]:
                return [f"{var}, pos = {fn}(buf, pos)"]
            # a nullable struct: an int8 marker, negative for null
            return ["if buf[pos] >= 0x80:", f"    {var} = None", "    pos += 1",
                    "else:", f"    {var}, pos = {fn}(buf, pos + 1)"]
        compact, nullable = kind[-2], kind[-1]
        if ahead:
            lines = ["if n >= 0x80:", "    n, pos = _uvarint(buf, pos - 1)", "n -= 1"] \
                if compact else []
        else:
            lines = self.read_length(compact, "n", wide=what != "string")
        lines += ["if n < 0:"]
        if nullable:
            lines += ["    if n != -1:", f"        raise _invalid({what!r}, n, {p})",
                      f"    {var} = None", "else:"]
        else:
            lines += [f"    raise _invalid({what!r}, n, {p})"]
        if what == "array":
            rest = ["if n > len(buf) - pos:", f"    raise _cannot_fit(n, buf, pos, {p})"]
            rest += self.parse_elements(kind[1], var, path)
        else:
            rest = ["end = pos + n", "if end > len(buf):",
                    f"    raise _exceeds(n, buf, pos, {p})"]
            rest += ([f"{var} = buf[pos:end].decode()"] if what == "string"
                     else [f"{var} = buf[pos:end]"])
            rest += ["pos = end"]
        return lines + (_indent(rest) if nullable else rest)

    def parse_elements(self, element: Kind, var: str, path: str) -> list[str]:
        if element[0] == "fixed":
            code, width = element[1], element[2]
            return [f"{var} = list(_unpack_from('>%d{code}' % n, buf, pos))",
                    f"pos += {width} * n"]
        if element[0] == "struct":
            fn = self.parser(element[1], path)
            return [f"{var} = []", f"append = {var}.append", "for _ in range(n):",
                    f"    x, pos = {fn}(buf, pos)", "    append(x)"]
        # strings or uuids: the element's own code, one at a time (n is reused inside)
        return [f"{var} = []", f"append = {var}.append", "for _ in range(n):",
                *_indent(self.parse_value(element, "x", path)), "    append(x)"]

    def read_length(self, compact: bool, var: str, wide: bool) -> list[str]:
        """A length or count: a uvarint of n+1 when compact, else int32 (int16 for strings)."""
        if compact:
            return self.read_uvarint(var) + [f"{var} -= 1"]
        if wide:
            return [f"{var}, = _unpack_i(buf, pos)", "pos += 4"]
        return [f"{var}, = _unpack_h(buf, pos)", "pos += 2"]

    @staticmethod
    def read_uvarint(var: str) -> list[str]:
        return [f"{var} = buf[pos]", f"if {var} < 0x80:", "    pos += 1", "else:",
                f"    {var}, pos = _uvarint(buf, pos)"]

    def parse_tags(self, tagged: list, path: str, ahead: bool) -> list[str]:
        """The tagged-field section; `ahead`: the count's first byte is in `n` already."""
        lines = []
        for _tag, fname, _kind, default in tagged:
            # a fresh list, so a caller appending to one message never alters the default
            lines.append(f"o[{fname!r}] = {'[]' if default == [] else self.const(default)}")
        if ahead:
            lines += ["if n:", "    if n >= 0x80:", "        n, pos = _uvarint(buf, pos - 1)"]
        else:
            lines += self.read_uvarint("n") + ["if n:"]
        lines += [f"    pos, raw = _tag_section(buf, pos, n, {path!r})"]
        for tag, fname, kind, _ in tagged:
            fn = self.tag_parser(kind, f"{path} -> {fname}")
            lines += [f"    if {tag} in raw:", f"        o[{fname!r}] = {fn}(raw[{tag}])"]
        return lines

    def tag_parser(self, kind: Kind, path: str) -> str:
        """A function parsing one tagged value from exactly its bytes."""
        name = self.fresh("parse_tag_")
        body = ["pos = 0", *self.parse_value(kind, "v", path), "if pos != len(buf):",
                f"    raise DecodeError({path + ': tagged field has trailing bytes'!r})",
                "return v"]
        self.emit([f"def {name}(buf):", *_indent(body)])
        return name

    # building ------------------------------------------------------------------------------

    def builder(self, fields: list, path: str) -> str:
        """Generate the build function of a struct; returns its name."""
        regular, tagged = _layout(fields, self.version, self.flexible)
        name = self.fresh("build_")
        body = ["try:", "    get = o.get", "except AttributeError:", "    if o is not None:",
                f"        raise _not_a_mapping(o, {path!r}) from None", "    get = _EMPTY.get"]
        tags_written = False
        i = 0
        while i < len(regular):
            run = _fixed_run(regular, i)
            if run:
                codes = "".join(kind[1] for _, kind, _ in run)
                i += len(run)
                if i == len(regular) and self.flexible and not tagged:
                    codes += "x"  # the empty tagged-field section, a zero byte, packed along
                    tags_written = True
                args = ", ".join(f"get({fname!r}, {self.const(d)})" for fname, _, d in run)
                body.append(f"w({self.fixed(codes, 'pack')}({args}))")
                continue
            fname, kind, default = regular[i]
            body.append(f"v = get({fname!r}, {self.const(default)})")
            body.extend(self.build_value(kind, "v", "w", f"{path} -> {fname}"))
            i += 1
        if self.flexible and not tags_written:
            body.extend(self.build_tags(tagged, path))
        self.emit([f"def {name}(o, w):", *_indent(body)])
        return name

    def build_value(self, kind: Kind, var: str, out: str, path: str) -> list[str]:
        """Lines that pass the encoding of `var` (of `kind`) to `out`, an append."""
        what = kind[0]
        if what == "fixed":
            return [f"{out}({self.fixed(kind[1], 'pack')}({var}))"]
        if what == "uuid":
            return [f"{out}(({var} or _ZERO_UUID).bytes)"]
        if what == "struct":
            fn = self.builder(kind[1], path)
            if not kind[2]:
                return [f"{fn}({var}, {out})"]
            return [f"if {var} is None:", f"    {out}(b'\\xff')", "else:",
                    f"    {out}(b'\\x01')", f"    {fn}({var}, {out})"]
        compact, nullable = kind[-2], kind[-1]
        null = b"\x00" if compact else (b"\xff\xff" if what == "string" else b"\xff\xff\xff\xff")
        if nullable:
            lines = [f"if {var} is None:", f"    {out}({null!r})", "else:"]
        else:
            noun = {"string": "a non-nullable string", "bytes": "non-nullable bytes",
                    "array": "a non-nullable array"}[what]
            lines = [f"if {var} is None:",
                     f"    raise EncodeError({f'{path}: null given for {noun}'!r})"]
        if what == "string":
            rest = [f"d = {var}.encode('utf-8')", "n = len(d)"]
            if compact:
                rest += [f"{out}(_ONE[n + 1] if n < 0x7F else _uvb(n + 1))"]
            else:
                rest += ["if n > 0x7FFF:",
                         f"    raise EncodeError({path + ': string longer than 32767 bytes'!r})",
                         f"{out}(_pack_h(n))"]
            rest += [f"{out}(d)"]
        else:
            rest = [f"n = len({var})"]
            rest += [f"{out}(_ONE[n + 1] if n < 0x7F else _uvb(n + 1))" if compact
                     else f"{out}(_pack_i(n))"]
            if what == "bytes":
                rest += [f"{out}({var})"]
            else:
                rest += self.build_elements(kind[1], var, out, path)
        return lines + (_indent(rest) if nullable else rest)

    def build_elements(self, element: Kind, var: str, out: str, path: str) -> list[str]:
        if element[0] == "fixed":
            return ["if n:", f"    {out}(_pack('>%d{element[1]}' % n, *{var}))"]
        if element[0] == "struct":
            fn = self.builder(element[1], path)
            return [f"for x in {var}:", f"    {fn}(x, {out})"]
        return [f"for x in {var}:", *_indent(self.build_value(element, "x", out, path))]

    def build_tags(self, tagged: list, path: str) -> list[str]:
        if not tagged:
            return ["w(b'\\x00')"]
        lines = ["tags = None"]
        for tag, fname, kind, default in tagged:
            d = self.const(default)
            wanted = "v is not None" if default is None else f"not (v is None or v == {d})"
            lines += [f"v = get({fname!r}, {d})", f"if {wanted}:", "    s = []",
                      *_indent(self.build_value(kind, "v", "s.append", f"{path} -> {fname}")),
                      "    if tags is None:", "        tags = []",
                      f"    tags.append(({tag}, s))"]
        lines += ["if tags is None:", "    w(b'\\x00')", "else:", "    _write_tags(tags, w)"]
        return lines


def _fixed_run(regular: list, i: int) -> list:
    """The run of fixed-width fields starting at regular[i] (empty if that one is not)."""
    j = i
    while j < len(regular) and regular[j][1][0] == "fixed":
        j += 1
    return regular[i:j]


_WIDTH = {"B": 1, "h": 2, "i": 4}


def _length_code(kind: Kind) -> str | None:
    """The struct code of what a field of `kind` begins with when that is a length: the
    first byte of a uvarint ("B"), an int16 for a string or an int32; else None."""
    if kind[0] not in ("string", "bytes", "array"):
        return None
    if kind[-2]:  # compact
        return "B"
    return "h" if kind[0] == "string" else "i"


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def compile_codec(name: str, fields: list, version: int, flexible: bool) -> Codec:
    """Generate, compile and return the codec of the struct `fields` in `version`.

    `fields` are protocol.schema.F declarations (read through their attributes only, so
    this module need not import the schema that calls it).
    """
    writer = _Writer(version, flexible)
    parse = writer.parser(fields, name)
    build = writer.builder(fields, name)
    source = "\n\n".join(writer.chunks) + "\n"
    namespace = writer.names
    exec(compile(source, f"<codec {name} v{version}>", "exec"), namespace)
    return Codec(namespace[parse], namespace[build], source)
