"""The generated codec (protocol.codegen) against the construct tree it replaced, which stays
the reference: for every declared message and version, the same object builds to the same
bytes or fails with EncodeError in both, and the same bytes parse to the same Containers
(keys in the same order) or fail with DecodeError in both, whether they are well formed,
truncated, corrupted or random.
"""

from __future__ import annotations

import importlib
import io
import itertools
import math
import pkgutil
import struct
import tracemalloc
import uuid
from typing import Any

import pytest
from construct import Container
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import protocol.messages
from protocol import consumer_protocol, metadata_records
from protocol.errors import DecodeError, EncodeError
from protocol.messages import APIS
from protocol.primitives import encode_uvarint
from protocol.schema import F, Message, Struct
from tests.protocol.samples import _sample


def _all_messages() -> list[Message]:
    modules = [importlib.import_module(f"protocol.messages.{m.name}")
               for m in pkgutil.iter_modules(protocol.messages.__path__)]
    found: dict[int, Message] = {}
    for module in [*modules, metadata_records, consumer_protocol]:
        for value in vars(module).values():
            if isinstance(value, Message):
                found[id(value)] = value
    return sorted(found.values(), key=lambda m: m.name)


MESSAGES = _all_messages()
CASES = [pytest.param(m, v, id=f"{m.name}-v{v}") for m in MESSAGES
         for v in range(m.versions.low, (m.versions.high or m.versions.low) + 1)]

_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _int(bits: int, signed: bool = True):
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    # mostly in range, now and then one past either end (both codecs must refuse it)
    return st.one_of(st.integers(low, high), st.integers(low, high),
                     st.sampled_from([low - 1, high + 1, -1, 0]))


def _scalar(t: str, nullable: bool):
    if t in _BITS:
        return _int(_BITS[t])
    if t == "uint16":
        return _int(16, signed=False)
    if t == "uint32":
        return _int(32, signed=False)
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "bool":
        return st.booleans()
    if t == "uuid":
        return st.one_of(st.uuids(), st.none())
    if t == "string":
        # long enough now and then for a two-byte compact length
        base = st.one_of(st.text(max_size=6), st.text(min_size=120, max_size=200))
    else:
        base = st.one_of(st.binary(max_size=8), st.binary(min_size=127, max_size=140))
    # None also where the field is not nullable: both must refuse it
    return st.one_of(st.none(), base) if nullable or t == "records" else st.one_of(
        base, base, base, st.none())


def objects(fields: list[F], version: int, depth: int = 0):
    """Mappings for a struct in `version`: fields left out (their defaults), tagged ones at
    their defaults now and then, and rarely a value neither codec can encode."""
    parts = {}
    for f in fields:
        if version not in f.versions:
            continue
        nullable = version in f.nullable
        t = f.type
        if isinstance(t, list):
            inner = st.lists(objects(t, version, depth + 1), max_size=3 if depth < 2 else 1)
            s = st.one_of(st.none(), inner) if nullable else inner
        elif isinstance(t, Struct):
            s = st.one_of(st.none(), objects(t.fields, version, depth + 1))
        elif t.startswith("[]"):
            s = st.lists(_scalar(t[2:], False), max_size=3)
            s = st.one_of(st.none(), s) if nullable else s
        else:
            s = _scalar(t, nullable)
        if f.tag is not None:
            s = st.one_of(s, st.just(f.default_for(version)))
        parts[f.name] = s
    return st.fixed_dictionaries({}, optional=parts)


def _outcome(fn, *args) -> Any:
    try:
        return fn(*args)
    except EncodeError:
        return EncodeError
    except DecodeError:
        return DecodeError


def _plain(v: Any) -> Any:
    """Containers as lists of items, so key order counts; floats as their bytes (NaN)."""
    if isinstance(v, dict):
        return [(k, _plain(x)) for k, x in v.items()]
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, float):
        return struct.pack(">d", v)
    return v


def _same_parse(message: Message, version: int, data: bytes) -> Any:
    ref = _outcome(message.construct_parse, data, version)
    got = _outcome(message.parse, data, version)
    assert _plain(got) == _plain(ref)
    return got


@pytest.mark.parametrize("message,version", CASES)
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_both_codecs_build_the_same_bytes_and_parse_them_alike(message, version, data):
    obj = data.draw(objects(message.fields, version))
    ref = _outcome(message.construct_build, obj, version)
    got = _outcome(message.build, obj, version)
    assert got == ref
    if got is EncodeError:
        return
    parsed = _same_parse(message, version, got)
    assert message.build(parsed, version) == got
    # every truncation fails alike (or, cut where an optional tail begins, parses alike)
    cuts = data.draw(st.lists(st.integers(0, max(len(got) - 1, 0)), max_size=4))
    for cut in cuts:
        _same_parse(message, version, got[:cut])
    # a corrupted byte: the same value or the same refusal
    if got:
        at = data.draw(st.integers(0, len(got) - 1))
        byte = data.draw(st.integers(0, 255))
        _same_parse(message, version, got[:at] + bytes([byte]) + got[at + 1:])


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([(m, v) for m in MESSAGES
                        for v in sorted({m.versions.low, m.versions.high or m.versions.low})]),
       st.binary(max_size=120))
def test_random_bytes_parse_alike_in_both(case, raw):
    message, version = case
    _same_parse(message, version, raw)


@pytest.mark.parametrize("message,version", [
    pytest.param(m, v, id=f"{m.name}-v{v}") for m in MESSAGES
    for v in sorted({m.versions.low, m.versions.high or m.versions.low})])
def test_every_field_set_builds_and_parses_alike(message, version):
    value = _sample(message.fields, version, itertools.count())
    built = message.build(value, version)
    assert built == message.construct_build(value, version)
    assert _plain(message.parse(built, version)) == _plain(
        message.construct_parse(built, version))
    for cut in range(len(built)):
        _same_parse(message, version, built[:cut])


def _fetch_response(version: int, partitions: int = 1000, with_records: int = 10) -> dict:
    records = bytes(range(256)) * 4
    return {"throttle_time_ms": 0, "session_id": 7, "responses": [
        {"topic": f"topic-{t}-" + "x" * (200 if t == 0 else 5), "partitions": [
            {"partition_index": p, "high_watermark": 1000 + p, "last_stable_offset": 1000 + p,
             "log_start_offset": 0,
             "records": records if (t * 100 + p) % (partitions // with_records) == 0 else None,
             "aborted_transactions": None if p % 3 else [],
             "current_leader": {"leader_id": 1, "leader_epoch": 5} if p % 7 == 0 else None}
            for p in range(100)]}
        for t in range(partitions // 100)],
        "node_endpoints": [{"node_id": i, "host": f"broker-{i}.example", "port": 9092}
                           for i in range(20)]}


@pytest.mark.parametrize("version", [4, 11, 12, 16, 17])
def test_a_large_fetch_response_is_the_same_bytes(version):
    """Counts, lengths and tags long enough for two-byte varints."""
    message = APIS[1].response
    body = _fetch_response(version)
    built = message.build(body, version)
    assert built == message.construct_build(body, version)
    _same_parse(message, version, built)


def test_unknown_tags_are_skipped_whatever_their_number():
    fetch = APIS[1].request
    body = fetch.build({"topics": [{"topic": "t", "partitions": [{"partition": 3}]}]}, 12)
    # the request's own tag section is its last byte: two unknown tags, the second > 127,
    # beside the known cluster_id (tag 0)
    tags = (b"\x03" + b"\x00\x02\x02c" + b"\x05\x01\xff" + encode_uvarint(300) + b"\x02ab")
    data = body[:-1] + tags
    parsed = _same_parse(fetch, 12, data)
    assert parsed.cluster_id == "c" and parsed.topics[0].partitions[0].partition == 3


def test_tags_out_of_order_or_repeated_are_refused():
    fetch = APIS[1].request
    body = fetch.build({}, 12)
    for tags in (b"\x02\x05\x00\x01\x00", b"\x02\x01\x00\x01\x00"):
        assert _same_parse(fetch, 12, body[:-1] + tags) is DecodeError


def test_parsed_tagged_defaults_are_fresh_lists():
    fetch = APIS[1].response
    data = fetch.build({}, 16)
    first, second = fetch.parse(data, 16), fetch.parse(data, 16)
    first.node_endpoints.append({"node_id": 1})
    assert second.node_endpoints == [] and fetch.parse(data, 16).node_endpoints == []


def test_parse_stream_leaves_the_stream_after_the_message_and_reads_any_buffer():
    metadata = APIS[3].request
    body = metadata.build({"topics": [{"name": "abc"}]}, 9)
    stream = io.BytesIO(b"hdr" + body + b"tail")
    stream.seek(3)
    assert metadata.parse_stream(stream, 9).topics[0].name == "abc"
    assert stream.read() == b"tail"
    assert metadata.parse(memoryview(body), 9) == metadata.parse(bytearray(body), 9)


def test_builders_accept_any_mapping_and_refuse_what_is_not_one():
    produce = APIS[0].request
    c = Container(acks=-1, timeout_ms=5, topic_data=[Container(name="t", partition_data=[
        {"index": 1, "records": memoryview(b"abc")}])])
    assert produce.build(c, 9) == produce.construct_build(c, 9)
    assert produce.build({"topic_data": [None]}, 9) == produce.construct_build(
        {"topic_data": [None]}, 9)
    with pytest.raises(EncodeError, match="expected a mapping"):
        produce.build({"topic_data": [5]}, 9)
    with pytest.raises(EncodeError):
        produce.build({"topic_data": [{"name": "t", "partition_data": [
            {"records": "not bytes"}]}]}, 9)


@pytest.mark.parametrize("count", [encode_uvarint(0x0FFFFFFF), encode_uvarint(0xFFFFFFFF)])
def test_a_huge_count_is_refused_before_anything_is_allocated(count):
    fetch = APIS[1].request
    # replica_id .. session_epoch (25 bytes), then a compact topic array claiming `count`
    raw = bytes(25) + count + bytes(4)
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="cannot fit"):
            fetch.parse(raw, 12)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


def test_generated_source_is_readable_and_cached():
    fetch = APIS[1].request
    codec = fetch.codec(12)
    assert fetch.codec(12) is codec
    assert "def parse_" in codec.source and "def build_" in codec.source
    with pytest.raises(EncodeError, match="no version 99"):
        fetch.codec(99)


def test_floats_and_uuids_round_trip_alike():
    # no client-facing float64 besides a few configs: a synthetic declaration
    m = Message("Synthetic", valid="0-1", flexible="1+", fields=[
        F("f", "float64"), F("u", "uuid"), F("ids", "[]uuid"), F("b", "bool"),
        F("s", Struct([F("x", "uint32"), F("y", "uint16")]), nullable="0+"),
        F("t", Struct([F("x", "int8")]), tag=3)])
    for v in (0, 1):
        for obj in ({"f": math.pi, "u": uuid.uuid4(), "ids": [uuid.uuid4()], "b": True,
                     "s": {"x": 2**32 - 1, "y": 7}, "t": {"x": -3}}, {}, {"s": None}):
            built = m.build(obj, v)
            assert built == m.construct_build(obj, v)
            assert _plain(_same_parse(m, v, built)) == _plain(m.construct_parse(built, v))


def test_build_into_writes_what_build_returns_and_refuses_alike():
    produce = APIS[0].request
    body = {"acks": 1, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": bytes(70_000)}]}]}
    stream = io.BytesIO()
    stream.write(b"head")
    produce.build_into(body, 9, stream)
    assert stream.getvalue() == b"head" + produce.build(body, 9)
    body["topic_data"][0]["partition_data"][0]["records"] = "text"
    with pytest.raises(EncodeError):
        produce.build_into(body, 9, io.BytesIO())


def test_parsed_structs_are_containers_with_fast_fields_and_the_same_manners():
    import copy
    import pickle

    fetch = APIS[1].request
    body = fetch.parse(fetch.build({"topics": [{"topic": "t", "partitions": [
        {"partition": 3, "fetch_offset": 42}]}]}, 12), 12)
    p = body.topics[0].partitions[0]
    assert isinstance(p, Container) and (p.partition, p.fetch_offset) == (3, 42)
    assert repr(p).startswith("Container(partition=3,") and str(p).startswith("Container:")
    p.fetch_offset = 7  # setting an attribute sets the key
    assert p["fetch_offset"] == 7 and list(p)[2] == "fetch_offset"
    del p["fetch_offset"]
    assert not hasattr(p, "fetch_offset") and not hasattr(p, "no_such_field")
    with pytest.raises(AttributeError):
        _ = body.no_such_field
    assert body.rack_id == "" and body.get("rack_id") == ""
    for clone in (copy.deepcopy(body), pickle.loads(pickle.dumps(body)), body.copy()):
        assert type(clone) is Container and clone == body
        assert clone.topics[0].partitions[0] == p
