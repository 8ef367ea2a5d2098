"""The declaration language: every declared version round-trips, hostile input is refused."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.errors import DecodeError, ProtocolError
from protocol.messages import APIS, CONTROLLER_APIS, PENDING_APIS
from protocol.schema import F, Message, Struct

_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _scalar(f: F, version: int):
    t = f.type
    if t in _INT_RANGES:
        bits = _INT_RANGES[t]
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if t == "uint16":
        return st.integers(0, 2**16 - 1)
    if t == "uint32":
        return st.integers(0, 2**32 - 1)
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "bool":
        return st.booleans()
    if t == "uuid":
        return st.uuids()
    base = st.text(max_size=8) if t == "string" else st.binary(max_size=16)
    nullable = version in f.nullable or t == "records"
    return st.one_of(st.none(), base) if nullable else base


def values(fields: list[F], version: int):
    """A hypothesis strategy for a struct of `fields` as they exist in `version`."""
    parts = {}
    for f in fields:
        if version not in f.versions:
            continue
        if isinstance(f.type, list):
            inner = st.lists(values(f.type, version), max_size=3)
            parts[f.name] = st.one_of(st.none(), inner) if version in f.nullable else inner
        elif isinstance(f.type, Struct):
            parts[f.name] = values(f.type.fields, version)
        elif f.type.startswith("[]"):
            inner = st.lists(_scalar(F(f.name, f.type[2:]), version), max_size=3)
            parts[f.name] = st.one_of(st.none(), inner) if version in f.nullable else inner
        else:
            parts[f.name] = _scalar(f, version)
    return st.fixed_dictionaries(parts)


ALL_APIS = [*APIS.values(), *CONTROLLER_APIS.values(), *PENDING_APIS.values()]


def _cases():
    for api in ALL_APIS:
        for message in (api.request, api.response):
            high = message.versions.high
            assert high is not None  # an API's declarations end at a version
            for v in range(message.versions.low, high + 1):
                yield pytest.param(message, v, id=f"{message.name}-v{v}")


@pytest.mark.parametrize("message,version", list(_cases()))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_declared_version_round_trips(message: Message, version: int, data):
    value = data.draw(values(message.fields, version))
    encoded = message.build(value, version)
    decoded = message.parse(encoded, version)
    assert _normalise(decoded) == _normalise(value)
    assert message.build(decoded, version) == encoded


def _normalise(v):
    if isinstance(v, dict):
        return {k: _normalise(x) for k, x in v.items() if not k.startswith("_")}
    if isinstance(v, list):
        return [_normalise(x) for x in v]
    return v


def test_missing_fields_take_defaults():
    produce = APIS[0].response
    decoded = produce.parse(produce.build({"responses": [{"name": "t", "partition_responses": [
        {"index": 0}]}]}, 8), 8)
    p = decoded.responses[0].partition_responses[0]
    assert (p.base_offset, p.log_append_time_ms, p.log_start_offset) == (0, -1, -1)
    assert p.error_message is None


def test_flexible_versions_use_compact_encodings_and_tags():
    metadata = APIS[3].request
    v8 = metadata.build({"topics": [{"name": "abc"}]}, 8)
    v9 = metadata.build({"topics": [{"name": "abc"}]}, 9)
    # v8: int32 array count, int16 string length; v9: uvarint count+1, uvarint length+1, tags
    assert v8[:9] == b"\x00\x00\x00\x01\x00\x03abc"
    assert v9[:6] == b"\x02\x04abc\x00"
    assert v9.endswith(b"\x00")


def test_tagged_fields_are_written_only_when_not_default_and_read_back():
    fetch = APIS[1].response
    part = {"partition_index": 0, "records": None}
    plain = fetch.build({"responses": [{"topic": "t", "partitions": [part]}]}, 12)
    tagged = fetch.build({"responses": [{"topic": "t", "partitions": [
        dict(part, current_leader={"leader_id": 3, "leader_epoch": 7})]}]}, 12)
    assert len(tagged) > len(plain)
    got = fetch.parse(tagged, 12).responses[0].partitions[0]
    assert (got.current_leader.leader_id, got.current_leader.leader_epoch) == (3, 7)
    assert fetch.parse(plain, 12).responses[0].partitions[0].current_leader is None


def test_unknown_tags_are_skipped():
    api_versions = APIS[18].request
    body = api_versions.build({"client_software_name": "x", "client_software_version": "1"}, 3)
    assert body.endswith(b"\x00")
    with_unknown = body[:-1] + b"\x01\x7f\x02hi"  # one tag (127) of two bytes
    assert api_versions.parse(with_unknown, 3).client_software_name == "x"


@pytest.mark.parametrize("raw,why", [
    (b"\x7f\xff\xff\xff", "array count far above the bytes present"),
    (b"\x00\x00\x00\x01\x7f\xff", "string length above the bytes present"),
    (b"\x00\x00\x00\x01\xff\xfe", "negative string length other than -1"),
    (b"\x00\x00\x00\x01\x00\x01\xff", "invalid UTF-8"),
])
def test_hostile_lengths_are_refused_without_allocating(raw, why):
    metadata = APIS[3].request
    with pytest.raises(DecodeError):
        metadata.parse(raw, 1)


def test_overlong_varint_is_refused():
    metadata = APIS[3].request
    with pytest.raises(DecodeError):
        metadata.parse(b"\xff\xff\xff\xff\xff\xff\x01", 9)


def test_trailing_bytes_are_refused():
    metadata = APIS[3].request
    ok = metadata.build({"topics": None}, 4)
    with pytest.raises(DecodeError):
        metadata.parse(ok + b"\x00", 4)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([(m, v) for api in ALL_APIS for m in (api.request, api.response)
                        for v in (m.versions.low, m.versions.high)]), st.binary(max_size=200))
def test_fuzz_any_bytes_give_a_message_or_a_decode_error(case, raw):
    message, version = case
    try:
        message.parse(raw, version)
    except ProtocolError:
        pass


def test_uuid_round_trip():
    metadata = APIS[3].response
    tid = uuid.uuid4()
    body = {"topics": [{"name": "t", "topic_id": tid, "partitions": []}]}
    assert metadata.parse(metadata.build(body, 12), 12).topics[0].topic_id == tid


def test_api_key_names_are_the_declarations_names_in_kafkas_form():
    import re

    import protocol.messages as messages

    constants = {name: value for name, value in vars(messages).items()
                 if re.fullmatch(r"[A-Z][A-Z_]+", name) and isinstance(value, int)}
    expected = {re.sub(r"(?<!^)(?=[A-Z])", "_", api.name).upper(): key
                for key, api in [*messages.APIS.items(), *messages.CONTROLLER_APIS.items(),
                                 *messages.PENDING_APIS.items()]}
    assert constants == expected
    assert constants["VOTE"] == 52 and constants["BROKER_HEARTBEAT"] == 63
    assert constants["OFFSET_FOR_LEADER_EPOCH"] == 23 and constants["PRODUCE"] == 0
