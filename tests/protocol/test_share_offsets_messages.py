"""DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets
(92), which neither our reference copy of Kafka's definitions nor kafka-python's newer one
has: the bytes are laid out here field by field in the order of Kafka 4.1's definitions
(clients/src/main/resources/common/message/*ShareGroupOffsets*.json), all v0 and flexible:
compact strings and arrays, a tagged-field section closing every struct."""

from __future__ import annotations

import uuid

from protocol.messages.share_offsets import (
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse,
)
from tests.protocol.test_share_messages import TAGS, arr, cstr, i16, i32, i64

TOPIC = uuid.UUID(int=0x5678)
NULL = b"\x00"  # a null compact string or array


def test_describe_request_names_partitions_or_null_for_all():
    raw = (arr(2)
           + cstr("g") + arr(1) + cstr("t") + arr(2) + i32(0) + i32(3) + TAGS + TAGS
           + cstr("h") + NULL + TAGS
           + TAGS)
    body = DescribeShareGroupOffsetsRequest.parse(raw, 0)
    g, h = body.groups
    assert g.group_id == "g" and [(t.topic_name, list(t.partitions)) for t in g.topics] == \
        [("t", [0, 3])]
    assert h.group_id == "h" and h.topics is None
    assert DescribeShareGroupOffsetsRequest.build(body, 0) == raw


def test_describe_response_layout():
    body = {"throttle_time_ms": 0, "groups": [{
        "group_id": "g", "error_code": 0, "error_message": None,
        "topics": [{"topic_name": "t", "topic_id": TOPIC, "partitions": [{
            "partition_index": 2, "start_offset": 40, "leader_epoch": 7, "error_code": 0,
            "error_message": None}]}]}]}
    assert DescribeShareGroupOffsetsResponse.build(body, 0) == (
        i32(0) + arr(1) + cstr("g")
        + arr(1) + cstr("t") + TOPIC.bytes
        + arr(1) + i32(2) + i64(40) + i32(7) + i16(0) + NULL + TAGS  # a partition
        + TAGS                                                         # the topic
        + i16(0) + NULL + TAGS                                         # the group's error
        + TAGS)


def test_alter_request_and_response_layout():
    raw = (cstr("g") + arr(1) + cstr("t") + arr(1) + i32(1) + i64(99) + TAGS + TAGS + TAGS)
    body = AlterShareGroupOffsetsRequest.parse(raw, 0)
    (t,) = body.topics
    assert (body.group_id, t.topic_name, t.partitions[0].partition_index,
            t.partitions[0].start_offset) == ("g", "t", 1, 99)
    response = {"throttle_time_ms": 0, "error_code": 68, "error_message": "busy",
                "responses": [{"topic_name": "t", "topic_id": TOPIC, "partitions": [
                    {"partition_index": 1, "error_code": 3, "error_message": None}]}]}
    assert AlterShareGroupOffsetsResponse.build(response, 0) == (
        i32(0) + i16(68) + cstr("busy")
        + arr(1) + cstr("t") + TOPIC.bytes + arr(1) + i32(1) + i16(3) + NULL + TAGS + TAGS
        + TAGS)


def test_delete_names_whole_topics_and_answers_per_topic():
    raw = cstr("g") + arr(2) + cstr("t") + TAGS + cstr("u") + TAGS + TAGS
    body = DeleteShareGroupOffsetsRequest.parse(raw, 0)
    assert [t.topic_name for t in body.topics] == ["t", "u"]
    response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "responses": [{"topic_name": "t", "topic_id": TOPIC, "error_code": 0,
                               "error_message": None}]}
    assert DeleteShareGroupOffsetsResponse.build(response, 0) == (
        i32(0) + i16(0) + NULL
        + arr(1) + cstr("t") + TOPIC.bytes + i16(0) + NULL + TAGS
        + TAGS)
