"""KIP-848 declarations on the wire: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69),
served by the broker, and the consumer group records of __consumer_offsets.

Every request and response round-trips through our client and server connections at every
declared version, with every field set and with every nullable field null; each record type
round-trips through its encode_* function and decode_key/decode_value. The golden bytes are
written out by hand from Kafka's encoding rules (compact strings and arrays in flexible
versions, a tagged-field section ending every struct, an int8 marker before a nullable
struct), so the layout is checked by something other than our own encoder. Readers written
before these records (the coordinator's replay, dump-log, the Spark job) keep skipping them.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from typing import Any, Callable

import pytest

from protocol import versions
from protocol.connection import ClientConnection, ServerConnection, decode_request
from protocol.errors import DecodeError
from protocol.messages import APIS, PENDING_APIS, consumer_group, offsets_topic
from protocol.messages import ALL_APIS, request_body
from protocol.messages.offsets_topic import ConsumerGroupKey
from protocol.schema import Message
from tests.protocol.samples import _sample

HEARTBEAT, DESCRIBE = 68, 69
KIP848 = {key: APIS[key] for key in (HEARTBEAT, DESCRIBE)}
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


def _nullable_paths(message: Message, version: int) -> list[tuple[str, ...]]:
    return [path for path, f in message.walk() if version in f.nullable]


def _cases():
    for key, api in sorted(KIP848.items()):
        for v in range(api.request.versions.low, api.request.versions.high + 1):
            yield pytest.param(key, v, id=f"{api.name}-v{v}")


# --- the registry -------------------------------------------------------------------------

def test_the_consumer_group_apis_are_served_and_advertised():
    assert KIP848[HEARTBEAT].name == "ConsumerGroupHeartbeat"
    assert KIP848[DESCRIBE].name == "ConsumerGroupDescribe"
    assert ALL_APIS[HEARTBEAT] is APIS[HEARTBEAT] and not PENDING_APIS.keys() & APIS.keys()
    advertised = {key: (low, high) for key, low, high in versions.advertised()}
    assert advertised[HEARTBEAT] == (0, 1) and advertised[DESCRIBE] == (0, 0)
    raw = ClientConnection("c", apis=KIP848).send_request(
        HEARTBEAT, 0, {"group_id": "g", "member_epoch": 0})[1]
    assert decode_request(raw[4:]).body.group_id == "g"


def test_heartbeat_is_declared_up_to_v1_and_describe_at_v0():
    """ConsumerGroupHeartbeat v1 (the topic regex) as Kafka 4.0 released it."""
    assert (KIP848[HEARTBEAT].request.versions.low,
            KIP848[HEARTBEAT].request.versions.high) == (0, 1)
    assert (KIP848[DESCRIBE].request.versions.low,
            KIP848[DESCRIBE].request.versions.high) == (0, 0)
    for api in KIP848.values():
        assert api.request.is_flexible(0) and api.response.is_flexible(0)
    assert versions.accepts(KIP848, HEARTBEAT, 1) and not versions.accepts(KIP848, HEARTBEAT, 2)


# --- round trips through the connections --------------------------------------------------

def _exchange(key: int, version: int, request: dict, response: dict):
    client = ClientConnection("kip848", apis=KIP848)
    server = ServerConnection(apis=KIP848)
    cid, raw = client.send_request(key, version, request)
    server.receive_data(raw)
    got_request = server.next_request()
    assert got_request.api_key == key and got_request.api_version == version
    client.receive_data(server.encode_response(got_request, response))
    got_response = client.next_response()
    assert got_response.correlation_id == cid and got_response.api_version == version
    return got_request.body, got_response.body


@pytest.mark.parametrize("key,version", list(_cases()))
def test_every_field_set_round_trips(key: int, version: int):
    api = KIP848[key]
    request = _sample(api.request.fields, version, itertools.count())
    response = _sample(api.response.fields, version, itertools.count(1000))
    got_request, got_response = _exchange(key, version, request, response)
    assert got_request == request and got_response == response
    assert api.request.build(got_request, version) == api.request.build(request, version)
    assert api.response.build(got_response, version) == api.response.build(response, version)


@pytest.mark.parametrize("key,version", list(_cases()))
def test_every_nullable_field_null_round_trips(key: int, version: int):
    """An empty mapping builds every default: null wherever Kafka's default is null."""
    api = KIP848[key]
    got_request, got_response = _exchange(key, version, {}, {})
    for message, got in ((api.request, got_request), (api.response, got_response)):
        for path in _nullable_paths(message, version):
            if len(path) == 1:  # nested ones live in (empty) arrays
                assert got[path[0]] is None, (message.name, path)
        assert message.parse(message.build(got, version), version) == got


@pytest.mark.parametrize("key,version", list(_cases()))
def test_every_truncation_is_a_decode_error(key: int, version: int):
    api = KIP848[key]
    for message, base in ((api.request, 0), (api.response, 1000)):
        encoded = message.build(_sample(message.fields, version, itertools.count(base)), version)
        for cut in range(len(encoded)):
            with pytest.raises(DecodeError):
                message.parse(encoded[:cut], version)


def test_request_body_builds_a_pending_request():
    body = request_body(DESCRIBE, 0, {"group_ids": ["a", "b"]})
    assert body.group_ids == ["a", "b"] and body.include_authorized_operations is False


# --- golden bytes, by hand ----------------------------------------------------------------

def _cstr(s: str | None) -> bytes:
    """COMPACT_(NULLABLE_)STRING: uvarint length + 1 (0 for null), then UTF-8."""
    if s is None:
        return b"\x00"
    data = s.encode()
    assert len(data) < 127
    return bytes([len(data) + 1]) + data


def _i32(*values: int) -> bytes:
    return b"".join(struct.pack(">i", v) for v in values)


TAGS = b"\x00"  # an empty tagged-field section


def test_heartbeat_request_v0_bytes():
    body = {"group_id": "g", "member_id": "", "member_epoch": 0,
            "rebalance_timeout_ms": 300000, "subscribed_topic_names": ["t"],
            "topic_partitions": []}
    expected = (_cstr("g") + _cstr("") + _i32(0)
                + _cstr(None) + _cstr(None)              # instance_id, rack_id: null
                + _i32(300000)
                + b"\x02" + _cstr("t")                   # one subscribed topic
                + _cstr(None)                            # server_assignor: null
                + b"\x01"                                # topic_partitions: empty
                + TAGS)
    req = consumer_group.ConsumerGroupHeartbeatRequest
    assert req.build(body, 0) == expected
    # a leaving member sends nulls for everything that did not change, the array too
    leave = req.build({"group_id": "g", "member_id": "m", "member_epoch": -1}, 0)
    assert leave == (_cstr("g") + _cstr("m") + _i32(-1) + b"\x00\x00" + _i32(-1)
                     + b"\x00" + b"\x00" + b"\x00" + TAGS)
    assert req.parse(leave, 0).topic_partitions is None


def test_heartbeat_response_v0_bytes_with_and_without_an_assignment():
    resp = consumer_group.ConsumerGroupHeartbeatResponse
    head = _i32(0) + b"\x00\x00" + _cstr(None) + _cstr("m") + _i32(1, 5000)
    body = {"error_code": 0, "member_id": "m", "member_epoch": 1, "heartbeat_interval_ms": 5000}
    assert resp.build(body, 0) == head + b"\xff" + TAGS         # null assignment: int8 -1
    assert resp.parse(head + b"\xff" + TAGS, 0).assignment is None
    assigned = dict(body, assignment={"topic_partitions": [
        {"topic_id": TOPIC_ID, "partitions": [0, 1]}]})
    expected = (head + b"\x01"                                  # present: int8 1
                + b"\x02" + TOPIC_ID.bytes + b"\x03" + _i32(0, 1) + TAGS  # one topic
                + TAGS                                          # the Assignment struct's
                + TAGS)                                         # the response's
    assert resp.build(assigned, 0) == expected
    got = resp.parse(expected, 0)
    assert got.assignment.topic_partitions[0].partitions == [0, 1]
    with pytest.raises(DecodeError):  # the marker byte is there even for an empty struct
        resp.parse(head + TAGS, 0)


def test_describe_request_and_response_v0_bytes():
    req = consumer_group.ConsumerGroupDescribeRequest
    assert req.build({"group_ids": ["g"], "include_authorized_operations": True}, 0) == (
        b"\x02" + _cstr("g") + b"\x01" + TAGS)
    resp = consumer_group.ConsumerGroupDescribeResponse
    member = {"member_id": "m", "member_epoch": 3, "client_id": "c", "client_host": "/h",
              "subscribed_topic_names": ["t"],
              "assignment": {"topic_partitions": [
                  {"topic_id": TOPIC_ID, "topic_name": "t", "partitions": [2]}]}}
    body = {"throttle_time_ms": 0, "groups": [{
        "error_code": 0, "group_id": "g", "group_state": "Stable", "group_epoch": 4,
        "assignment_epoch": 4, "assignor_name": "uniform", "members": [member]}]}
    expected = (_i32(0) + b"\x02"
                + b"\x00\x00" + _cstr(None) + _cstr("g") + _cstr("Stable") + _i32(4, 4)
                + _cstr("uniform")
                + b"\x02" + _cstr("m") + _cstr(None) + _cstr(None) + _i32(3) + _cstr("c")
                + _cstr("/h") + b"\x02" + _cstr("t") + _cstr(None)
                + b"\x02" + TOPIC_ID.bytes + _cstr("t") + b"\x02" + _i32(2) + TAGS + TAGS
                + b"\x01" + TAGS                        # target_assignment: no topics
                + TAGS                                  # the member's tags
                + _i32(-2147483648)                     # authorized_operations: omitted
                + TAGS + TAGS)                          # the group's, the response's
    assert resp.build(body, 0) == expected
    assert resp.parse(expected, 0).groups[0].members[0].assignment.topic_partitions[0].\
        topic_name == "t"


# --- __consumer_offsets records -----------------------------------------------------------

def _str(s: str) -> bytes:
    """STRING (the keys are not flexible): int16 length, then UTF-8."""
    return struct.pack(">h", len(s)) + s.encode()


def _h(v: int) -> bytes:
    return struct.pack(">h", v)


MEMBER_VALUE = {"client_id": "c", "client_host": "h", "subscribed_topic_names": ["t"],
                "rebalance_timeout_ms": 300000, "server_assignor": "uniform"}
CLASSIC = {"session_timeout_ms": 45000,
           "supported_protocols": [{"name": "range", "metadata": b"\x01"}]}
ASSIGNMENT_VALUE = {"member_epoch": 5, "previous_member_epoch": 4, "state": 0,
                    "assigned_partitions": [{"topic_id": TOPIC_ID, "partitions": [1]}],
                    "partitions_pending_revocation": []}

# (record type, key encoder and its arguments, value encoder and its argument, the key's
#  golden bytes, the value's golden bytes)
RECORDS: list[tuple[int, Callable[..., bytes], tuple, Callable[[Any], bytes], Any, bytes,
                    bytes]] = [
    (3, offsets_topic.encode_consumer_group_metadata_key, ("g",),
     offsets_topic.encode_consumer_group_metadata_value, 7,
     _h(3) + _str("g"),
     _h(0) + _i32(7) + TAGS),
    (4, offsets_topic.encode_consumer_group_partition_metadata_key, ("g",),
     offsets_topic.encode_consumer_group_partition_metadata_value,
     {"topics": [{"topic_id": TOPIC_ID, "topic_name": "t", "num_partitions": 2,
                  "partition_metadata": [{"partition": 0, "racks": ["r"]}]}]},
     _h(4) + _str("g"),
     _h(0) + b"\x02" + TOPIC_ID.bytes + _cstr("t") + _i32(2)
     + b"\x02" + _i32(0) + b"\x02" + _cstr("r") + TAGS + TAGS + TAGS),
    (5, offsets_topic.encode_consumer_group_member_metadata_key, ("g", "m"),
     offsets_topic.encode_consumer_group_member_metadata_value, MEMBER_VALUE,
     _h(5) + _str("g") + _str("m"),
     _h(0) + _cstr(None) + _cstr(None) + _cstr("c") + _cstr("h") + b"\x02" + _cstr("t")
     + _cstr(None) + _i32(300000) + _cstr("uniform")
     + TAGS),                                  # classic_member_metadata null: no tag 0
    (6, offsets_topic.encode_consumer_group_target_assignment_metadata_key, ("g",),
     offsets_topic.encode_consumer_group_target_assignment_metadata_value, 3,
     _h(6) + _str("g"),
     _h(0) + _i32(3) + TAGS),
    (7, offsets_topic.encode_consumer_group_target_assignment_member_key, ("g", "m"),
     offsets_topic.encode_consumer_group_target_assignment_member_value,
     {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [0, 2]}]},
     _h(7) + _str("g") + _str("m"),
     _h(0) + b"\x02" + TOPIC_ID.bytes + b"\x03" + _i32(0, 2) + TAGS + TAGS),
    (8, offsets_topic.encode_consumer_group_current_member_assignment_key, ("g", "m"),
     offsets_topic.encode_consumer_group_current_member_assignment_value, ASSIGNMENT_VALUE,
     _h(8) + _str("g") + _str("m"),
     _h(0) + _i32(5, 4) + b"\x00" + b"\x02" + TOPIC_ID.bytes + b"\x02" + _i32(1) + TAGS
     + b"\x01" + TAGS),
]


def _record_id(case) -> str:
    return offsets_topic.CONSUMER_GROUP_RECORDS[case[0]][0].name.removesuffix("Key")


@pytest.mark.parametrize("case", RECORDS, ids=_record_id)
def test_record_golden_bytes(case):
    record_type, encode_key, key_args, encode_value, value_arg, key_bytes, value_bytes = case
    assert encode_key(*key_args) == key_bytes
    assert key_bytes[:2] == struct.pack(">h", record_type)
    assert encode_value(value_arg) == value_bytes


@pytest.mark.parametrize("case", RECORDS, ids=_record_id)
def test_record_round_trips_and_its_tombstone_is_none(case):
    record_type, encode_key, key_args, encode_value, value_arg, _kb, _vb = case
    key = offsets_topic.decode_key(encode_key(*key_args), kip848=True)
    member = key_args[1] if len(key_args) > 1 else None
    assert key == ConsumerGroupKey(record_type, "g", member)
    assert offsets_topic.encode_consumer_group_key(key) == encode_key(*key_args)
    value = offsets_topic.decode_value(key, encode_value(value_arg))
    key_message, value_message = offsets_topic.CONSUMER_GROUP_RECORDS[record_type]
    assert key.record == key_message.name.removesuffix("Key")
    assert _h(0) + value_message.build(value, 0) == encode_value(value_arg)  # v0, as Kafka
    if isinstance(value_arg, dict):
        assert {k: value[k] for k in value_arg} == value_arg
    assert offsets_topic.decode_value(key, None) is None


def test_member_metadata_carries_a_classic_member_in_tag_0():
    """A classic member of a consumer group: its protocols ride in tagged field 0 as a
    nullable struct, the int8 marker inside the tag's size."""
    value = offsets_topic.encode_consumer_group_member_metadata_value(
        dict(MEMBER_VALUE, classic_member_metadata=CLASSIC))
    payload = (b"\x01" + _i32(45000) + b"\x02" + _cstr("range") + b"\x02\x01" + TAGS + TAGS)
    assert len(payload) == 16
    untagged = offsets_topic.encode_consumer_group_member_metadata_value(MEMBER_VALUE)[:-1]
    assert value == untagged + b"\x01" + b"\x00" + bytes([len(payload)]) + payload
    key = ConsumerGroupKey(offsets_topic.CONSUMER_GROUP_MEMBER_METADATA, "g", "m")
    got = offsets_topic.decode_value(key, value).classic_member_metadata
    assert got.session_timeout_ms == 45000 and got.supported_protocols[0].metadata == b"\x01"
    assert offsets_topic.decode_value(
        key, offsets_topic.encode_consumer_group_member_metadata_value(MEMBER_VALUE)
    ).classic_member_metadata is None


def test_unknown_value_version_and_short_values_are_decode_errors():
    key = ConsumerGroupKey(offsets_topic.CONSUMER_GROUP_METADATA, "g")
    with pytest.raises(DecodeError):
        offsets_topic.decode_value(key, _h(1) + _i32(7) + TAGS)
    with pytest.raises(DecodeError):
        offsets_topic.decode_value(key, b"\x00")
    with pytest.raises(DecodeError):  # trailing bytes
        offsets_topic.decode_value(key, _h(0) + _i32(7) + TAGS + b"x")


def test_other_record_types_stay_unknown():
    """Share group records (9 and up in Kafka) and any newer type: None, even with kip848."""
    for record_type in (9, 10, 15, 16, 100):
        assert offsets_topic.decode_key(_h(record_type) + _str("g"), kip848=True) is None
    assert set(offsets_topic.CONSUMER_GROUP_RECORDS) == {3, 4, 5, 6, 7, 8}


# --- readers written before these records keep skipping them ------------------------------

def _all_records() -> list[tuple[bytes, bytes | None]]:
    out: list[tuple[bytes, bytes | None]] = []
    for _t, encode_key, key_args, encode_value, value_arg, _kb, _vb in RECORDS:
        out.append((encode_key(*key_args), encode_value(value_arg)))
        out.append((encode_key(*key_args), None))  # its tombstone
    return out


def test_decode_key_without_kip848_still_skips_them():
    for key, _value in _all_records():
        assert offsets_topic.decode_key(key) is None


def test_the_coordinator_replay_skips_them():
    from broker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
    from broker.coordinator.group import ClassicGroup

    c = GroupCoordinator(CoordinatorConfig(num_partitions=1))
    c.begin_load(0)
    c.replay(offsets_topic.encode_offset_key("g", "t", 0),
             offsets_topic.encode_offset_value(5, -1, "", 1), 0, loading=True)
    for key, value in _all_records():
        c.replay(key, value, 0, loading=True)
    c.finish_load(0, 0)
    # no classic group made of a consumer group's records (the one map holds the
    # consumer group they describe)
    assert [g for g in c.groups.values() if isinstance(g, ClassicGroup)] == []
    assert c.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 5


def test_dump_log_and_the_spark_reader_skip_them():
    from spark_jobs.offsets_topic import decode_record
    from tools.dump_log import decode_offsets_record

    for offset, (key, value) in enumerate(_all_records()):
        assert decode_record(key, value) is None
        text, payload, fields = decode_offsets_record(offset, key, value)
        record_type = struct.unpack_from(">h", key)[0]
        assert text == f"Unknown record type {record_type} at offset {offset}, skipping."
        assert payload is None and fields == {"error": text}
