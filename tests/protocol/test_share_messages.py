"""ShareFetch and ShareAcknowledge v1 (Kafka 4.1), which our reference copy of Kafka's
definitions (v0 only) cannot check: the bytes are laid out here field by field in the
order librdkafka 2.16 writes the requests (rd_kafka_ShareFetchRequest,
rd_kafka_ShareAcknowledgeRequest in rdkafka_fetcher.c) and reads the responses
(rd_kafka_share_fetch_reply_handle and its partition reader)."""

from __future__ import annotations

import struct
import uuid

from protocol.messages.share import (ShareAcknowledgeRequest, ShareFetchRequest,
                                     ShareFetchResponse)

TOPIC = uuid.UUID(int=0x1234)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def cstr(s: str) -> bytes:
    data = s.encode()
    return uvarint(len(data) + 1) + data


def arr(n: int) -> bytes:
    return uvarint(n + 1)


TAGS = b"\x00"
i8, i16, i32, i64 = (struct.Struct(f">{c}").pack for c in "bhiq")


def test_share_fetch_v1_request_as_librdkafka_writes_it():
    raw = (cstr("g") + cstr("m") + i32(3)            # GroupId, MemberId, ShareSessionEpoch
           + i32(500) + i32(1) + i32(52428800)       # MaxWaitMs, MinBytes, MaxBytes
           + i32(500) + i32(500)                     # MaxRecords, BatchSize (v1)
           + arr(1) + TOPIC.bytes                    # Topics: TopicId
           + arr(1) + i32(0)                         # Partitions: PartitionIndex (no max bytes)
           + arr(1) + i64(10) + i64(12) + arr(1) + i8(1) + TAGS  # one acknowledgement batch
           + TAGS + TAGS
           + arr(0)                                  # ForgottenTopicsData
           + TAGS)
    body = ShareFetchRequest.parse(raw, 1)
    assert (body.group_id, body.member_id, body.share_session_epoch) == ("g", "m", 3)
    assert (body.max_records, body.batch_size, body.max_bytes) == (500, 500, 52428800)
    (topic,) = body.topics
    (p,) = topic.partitions
    assert topic.topic_id == TOPIC and p.partition_index == 0
    (batch,) = p.acknowledgement_batches
    assert (batch.first_offset, batch.last_offset, list(batch.acknowledge_types)) == (10, 12, [1])
    assert ShareFetchRequest.build(body, 1) == raw


def test_share_fetch_v0_has_partition_max_bytes_and_no_max_records():
    body = {"group_id": "g", "member_id": "m", "share_session_epoch": 0, "max_wait_ms": 0,
            "min_bytes": 0, "topics": [{"topic_id": TOPIC, "partitions": [
                {"partition_index": 1, "partition_max_bytes": 1024,
                 "acknowledgement_batches": []}]}], "forgotten_topics_data": []}
    parsed = ShareFetchRequest.parse(ShareFetchRequest.build(body, 0), 0)
    assert parsed.topics[0].partitions[0].partition_max_bytes == 1024
    assert "max_records" not in parsed


def test_share_fetch_v1_response_reads_in_librdkafkas_order():
    body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout_ms": 30000,
            "responses": [{"topic_id": TOPIC, "partitions": [{
                "partition_index": 2, "error_code": 0, "error_message": None,
                "acknowledge_error_code": 121, "acknowledge_error_message": None,
                "current_leader": {"leader_id": 1, "leader_epoch": 4},
                "records": b"RECS",
                "acquired_records": [{"first_offset": 5, "last_offset": 9,
                                      "delivery_count": 2}]}]}],
            "node_endpoints": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}]}
    expected = (i32(0) + i16(0) + uvarint(0)                  # throttle, error, null message
                + i32(30000)                                  # AcquisitionLockTimeoutMs (v1)
                + arr(1) + TOPIC.bytes + arr(1)
                + i32(2) + i16(0) + uvarint(0) + i16(121) + uvarint(0)
                + i32(1) + i32(4) + TAGS                      # CurrentLeader
                + uvarint(5) + b"RECS"                        # Records
                + arr(1) + i64(5) + i64(9) + i16(2) + TAGS    # AcquiredRecords
                + TAGS + TAGS
                + arr(1) + i32(1) + cstr("h") + i32(9092) + uvarint(0) + TAGS  # NodeEndpoints
                + TAGS)
    assert ShareFetchResponse.build(body, 1) == expected


def test_share_acknowledge_v1_request_as_librdkafka_writes_it():
    raw = (cstr("g") + cstr("m") + i32(-1)
           + arr(1) + TOPIC.bytes + arr(1) + i32(0)
           + arr(1) + i64(0) + i64(2) + arr(3) + i8(1) + i8(2) + i8(3) + TAGS
           + TAGS + TAGS + TAGS)
    body = ShareAcknowledgeRequest.parse(raw, 1)
    batch = body.topics[0].partitions[0].acknowledgement_batches[0]
    assert body.share_session_epoch == -1 and list(batch.acknowledge_types) == [1, 2, 3]
