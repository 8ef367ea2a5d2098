"""The KRaft metadata records and their ApiMessageAndVersion frame (protocol.metadata_records)."""

from __future__ import annotations

import uuid

import pytest

from protocol import metadata_records as mr
from protocol.errors import DecodeError, EncodeError
from protocol.metadata_records import MetadataRecordType as T
from protocol.primitives import encode_uvarint

TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")
DIR_A = uuid.UUID(int=0xA)
DIR_B = uuid.UUID(int=0xB)

# One body per record with every field away from its default, so a field that is dropped
# or mis-ordered on the wire cannot round-trip by luck.
SAMPLES: dict[T, dict] = {
    T.REGISTER_BROKER_RECORD: {
        "broker_id": 2, "is_migrating_zk_broker": True, "incarnation_id": uuid.UUID(int=77),
        "broker_epoch": 1234, "end_points": [
            {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092, "security_protocol": 0},
            {"name": "CONTROLLER", "host": "localhost", "port": 65535, "security_protocol": 0}],
        "features": [{"name": "metadata.version", "min_supported_version": 1,
                      "max_supported_version": 20}],
        "rack": "rack-2", "fenced": False, "in_controlled_shutdown": True,
        "log_dirs": [DIR_A, DIR_B]},
    T.UNREGISTER_BROKER_RECORD: {"broker_id": 3, "broker_epoch": 43},
    T.TOPIC_RECORD: {"name": "orders", "topic_id": TOPIC_ID},
    T.PARTITION_RECORD: {
        "partition_id": 4, "topic_id": TOPIC_ID, "replicas": [1, 2, 3], "isr": [1, 2],
        "removing_replicas": [3], "adding_replicas": [4], "leader": 1,
        "leader_recovery_state": 1, "leader_epoch": 9, "partition_epoch": 11,
        "directories": [DIR_A, DIR_B, DIR_A], "eligible_leader_replicas": [3],
        "last_known_elr": [5]},
    T.CONFIG_RECORD: {"resource_type": 2, "resource_name": "orders",
                      "name": "retention.ms", "value": "1000"},
    T.PARTITION_CHANGE_RECORD: {
        "partition_id": 0, "topic_id": TOPIC_ID, "isr": [2], "leader": 2, "replicas": [2, 1],
        "removing_replicas": [], "adding_replicas": [1], "leader_recovery_state": 0,
        "directories": [DIR_B, DIR_A], "eligible_leader_replicas": [1], "last_known_elr": []},
    T.FENCE_BROKER_RECORD: {"id": 3, "epoch": 41},
    T.UNFENCE_BROKER_RECORD: {"id": 3, "epoch": 42},
    T.REMOVE_TOPIC_RECORD: {"topic_id": TOPIC_ID},
    T.FEATURE_LEVEL_RECORD: {"name": "metadata.version", "feature_level": 19},
    T.PRODUCER_IDS_RECORD: {"broker_id": 1, "broker_epoch": 8, "next_producer_id": 5000},
    T.BROKER_REGISTRATION_CHANGE_RECORD: {"broker_id": 3, "broker_epoch": 42, "fenced": -1,
                                          "in_controlled_shutdown": 1,
                                          "log_dirs": [DIR_B]},
    T.NO_OP_RECORD: {},
    T.USER_SCRAM_CREDENTIAL_RECORD: {"name": "alice", "mechanism": 2, "salt": b"s" * 16,
                                     "stored_key": b"k" * 64, "server_key": b"v" * 64,
                                     "iterations": 8192},
    T.REMOVE_USER_SCRAM_CREDENTIAL_RECORD: {"name": "alice", "mechanism": 1},
    T.ACCESS_CONTROL_ENTRY_RECORD: {
        "id": uuid.UUID(int=5), "resource_type": 2, "resource_name": "orders-",
        "pattern_type": 4, "principal": "User:alice", "host": "*", "operation": 3,
        "permission_type": 3},
    T.REMOVE_ACCESS_CONTROL_ENTRY_RECORD: {"id": uuid.UUID(int=5)},
    T.CLIENT_QUOTA_RECORD: {
        "entity": [{"entity_type": "user", "entity_name": "alice"},
                   {"entity_type": "client-id", "entity_name": None}],
        "key": "producer_byte_rate", "value": 1024.5, "remove": True},
    T.DELEGATION_TOKEN_RECORD: {
        "owner": "User:alice", "requester": "User:bob", "renewers": ["User:carol"],
        "issue_timestamp": 1000, "max_timestamp": 9000, "expiration_timestamp": 5000,
        "token_id": "tok-1"},
    T.REMOVE_DELEGATION_TOKEN_RECORD: {"token_id": "tok-1"},
}


def test_every_declared_record_has_a_sample():
    assert set(SAMPLES) == set(mr.METADATA_RECORDS) == set(T)


def _cases():
    for record_type, message in mr.METADATA_RECORDS.items():
        low, high = message.versions.low, message.versions.high
        for version in sorted({low, high}):
            yield pytest.param(record_type, version, id=f"{message.name}-v{version}")


@pytest.mark.parametrize("record_type,version", list(_cases()))
def test_round_trip_at_lowest_and_highest_version(record_type: T, version: int):
    message = mr.METADATA_RECORDS[record_type]
    value = mr.encode_metadata_record(record_type, version, SAMPLES[record_type])
    decoded_type, decoded_version, body = mr.decode_metadata_record(value)
    assert (decoded_type, decoded_version) == (record_type, version)
    expected = {f.name: SAMPLES[record_type][f.name] for f in message.fields
                if version in f.versions}
    assert dict(body) == expected


def test_defaults_mean_unchanged_and_are_left_off_the_wire():
    """A PartitionChangeRecord naming only its partition carries no tagged field at all."""
    value = mr.encode_metadata_record(T.PARTITION_CHANGE_RECORD, 0,
                                      {"partition_id": 1, "topic_id": TOPIC_ID})
    assert value == b"\x01\x05\x00" + b"\x00\x00\x00\x01" + TOPIC_ID.bytes + b"\x00"
    _, _, body = mr.decode_metadata_record(value)
    assert body.leader == -2 and body.leader_recovery_state == -1
    assert body.isr is None and body.replicas is None


def test_fence_broker_record_against_hand_built_bytes():
    value = mr.encode_metadata_record(T.FENCE_BROKER_RECORD, 0, {"id": 3, "epoch": 7})
    assert value == bytes([
        0x01,  # frame version: uvarint 1, the only one Kafka's AbstractApiMessageSerde writes
        0x07,  # type: uvarint 7, FenceBrokerRecord's apiKey
        0x00,  # version: uvarint 0
        0x00, 0x00, 0x00, 0x03,  # Id: int32 3
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07,  # Epoch: int64 7
        0x00,  # tagged fields: uvarint count 0 (every metadata record is flexible)
    ])
    assert mr.decode_metadata_record(value) == (T.FENCE_BROKER_RECORD, 0, {"id": 3, "epoch": 7})


def test_partition_change_record_tagged_fields_against_hand_built_bytes():
    body = {"partition_id": 0, "topic_id": TOPIC_ID, "isr": [1, 2], "leader": 1}
    value = mr.encode_metadata_record(T.PARTITION_CHANGE_RECORD, 0, body)
    assert value == (
        b"\x01\x05\x00"  # frame version 1, type 5 (PartitionChangeRecord), version 0
        + b"\x00\x00\x00\x00"  # PartitionId: int32 0
        + TOPIC_ID.bytes  # TopicId: 16 raw bytes
        + b"\x02"  # two tagged fields follow, in ascending tag order
        + b"\x00\x09"  # tag 0 (Isr), 9 bytes:
        + b"\x03\x00\x00\x00\x01\x00\x00\x00\x02"  # compact array, length+1 = 3; 1; 2
        + b"\x01\x04"  # tag 1 (Leader), 4 bytes:
        + b"\x00\x00\x00\x01"  # int32 1
    )
    _, _, decoded = mr.decode_metadata_record(value)
    assert decoded.isr == [1, 2] and decoded.leader == 1 and decoded.replicas is None


def test_a_multi_byte_type_varint_is_read_as_kafka_writes_it():
    """Type 20 fits one byte; a two-byte varint for it (0x94 0x00) still means 20."""
    value = b"\x01\x94\x00\x00\x00"
    assert mr.decode_metadata_record(value) == (T.NO_OP_RECORD, 0, {})


@pytest.mark.parametrize("record_type", list(T), ids=lambda t: t.name)
def test_one_byte_headers_decode_as_the_general_varint_path_does(record_type: T):
    """decode reads one-byte headers directly; the same record with its type and version
    written as two-byte varints (the general path) decodes to the same."""
    version = mr.METADATA_RECORDS[record_type].versions.high
    value = mr.encode_metadata_record(record_type, version, SAMPLES[record_type])
    assert value[:3] == bytes([1, int(record_type), version])
    longer = bytes([1, 0x80 | int(record_type), 0, 0x80 | version, 0]) + value[3:]
    assert mr.decode_metadata_record(value) == mr.decode_metadata_record(longer)


@pytest.mark.parametrize("record_type", list(T), ids=lambda t: t.name)
def test_every_truncation_is_a_decode_error(record_type: T):
    version = mr.METADATA_RECORDS[record_type].versions.high
    value = mr.encode_metadata_record(record_type, version, SAMPLES[record_type])
    for cut in range(len(value)):
        with pytest.raises(DecodeError):
            mr.decode_metadata_record(value[:cut])


@pytest.mark.parametrize("frame_version", [0, 2, 127])
def test_unknown_frame_version_is_refused(frame_version: int):
    value = mr.encode_metadata_record(T.NO_OP_RECORD, 0, {})
    with pytest.raises(DecodeError, match="frame version"):
        mr.decode_metadata_record(encode_uvarint(frame_version) + value[1:])


@pytest.mark.parametrize("record_type", [6, 13, 21, 300])
def test_unknown_record_type_is_refused(record_type: int):
    with pytest.raises(DecodeError, match="unknown metadata record type"):
        mr.decode_metadata_record(b"\x01" + encode_uvarint(record_type) + b"\x00\x00")


def test_version_outside_the_record_range_is_refused():
    with pytest.raises(DecodeError, match="no version 1"):
        mr.decode_metadata_record(b"\x01\x07\x01" + bytes(12) + b"\x00")


def test_type_or_version_beyond_int16_is_refused():
    with pytest.raises(DecodeError, match="int16"):
        mr.decode_metadata_record(b"\x01" + encode_uvarint(0x8000) + b"\x00\x00")
    with pytest.raises(DecodeError, match="int16"):
        mr.decode_metadata_record(b"\x01\x14" + encode_uvarint(0x10000) + b"\x00")


def test_overlong_varint_is_refused():
    with pytest.raises(DecodeError):
        mr.decode_metadata_record(b"\xff\xff\xff\xff\xff\x01\x14\x00\x00")


def test_trailing_bytes_are_refused():
    value = mr.encode_metadata_record(T.FENCE_BROKER_RECORD, 0, {"id": 1, "epoch": 1})
    with pytest.raises(DecodeError, match="trailing"):
        mr.decode_metadata_record(value + b"\x00")


@pytest.mark.parametrize("length_prefix", [
    encode_uvarint(0x0FFFFFFF),  # compact array of 268 million replicas
    encode_uvarint(0xFFFFFFFF),  # the largest count a uvarint can claim
])
def test_a_huge_declared_length_fails_before_anything_is_allocated(length_prefix: bytes):
    """PartitionRecord's Replicas claiming far more elements than there are bytes left."""
    value = (b"\x01\x03\x00" + b"\x00\x00\x00\x00" + TOPIC_ID.bytes + length_prefix
             + b"\x00" * 8)
    # the bound check names the count: it fired before any element was read
    with pytest.raises(DecodeError, match="cannot fit"):
        mr.decode_metadata_record(value)


def test_a_huge_string_length_is_refused():
    value = b"\x01\x02\x00" + encode_uvarint(0x7FFFFFFF) + b"abc"
    with pytest.raises(DecodeError):
        mr.decode_metadata_record(value)


def test_encoding_an_unknown_type_or_version_is_our_bug():
    with pytest.raises(EncodeError):
        mr.encode_metadata_record(6, 0, {})
    with pytest.raises(EncodeError):
        mr.encode_metadata_record(T.TOPIC_RECORD, 1, SAMPLES[T.TOPIC_RECORD])
    with pytest.raises(EncodeError):
        mr.encode_metadata_record(T.FENCE_BROKER_RECORD, 0, {"id": "three"})

