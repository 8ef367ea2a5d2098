"""spark_jobs.offsets_topic without Spark: the __consumer_offsets records our broker wrote
for a librdkafka consumer group, and the cases a short run does not produce."""

from __future__ import annotations

from protocol.consumer_protocol import Assignment, Subscription, encode_assignment, \
    encode_subscription
from protocol.messages.offsets_topic import (encode_group_key, encode_group_value,
                                             encode_offset_key, encode_offset_value)
from spark_jobs.offsets_topic import GROUP_METADATA, OFFSET_COMMITS, decode_record
from spark_jobs.segments import find_segments, iter_rows, segment_ranges
from tests.spark.conftest import GROUP, MULTI_PARTITIONS, MULTI_TOPIC


def offsets_rows(data_dir):
    out = {OFFSET_COMMITS: [], GROUP_METADATA: []}
    segs = find_segments(data_dir, ["__consumer_offsets"])
    for r in segment_ranges(segs):
        for row in iter_rows(r):
            decoded = decode_record(row["key"], row["value"], record_timestamp=row["timestamp"],
                                    log_offset=row["offset"], offsets_partition=row["partition"])
            assert decoded is not None
            out[decoded[0]].append(decoded[1])
    return out


def test_the_groups_commits(broker_data):
    commits = offsets_rows(broker_data.data_dir)[OFFSET_COMMITS]
    ours = [c for c in commits if c["group"] == GROUP]
    expected = {(MULTI_TOPIC, p): len(broker_data.of(MULTI_TOPIC, p))
                for p in range(MULTI_PARTITIONS)}
    assert {(c["topic"], c["partition"]): c["committed_offset"] for c in ours} == expected
    for c in ours:
        assert c["is_tombstone"] is False
        assert c["commit_timestamp"] > 0 and c["record_timestamp"] >= c["commit_timestamp"] - 1000
        assert c["metadata"] == "" and c["expire_timestamp"] is None
        assert c["log_offset"] >= 0 and 0 <= c["offsets_partition"] < 3


def test_the_groups_metadata(broker_data):
    metadata = [g for g in offsets_rows(broker_data.data_dir)[GROUP_METADATA]
                if g["group"] == GROUP]
    assert metadata, "the coordinator wrote no group metadata"
    with_members = [g for g in metadata if g["members"]]
    assert with_members, metadata
    g = with_members[-1]
    assert g["protocol_type"] == "consumer" and g["generation"] >= 1 and g["protocol"]
    (member,) = g["members"]
    assert g["leader"] == member["member_id"]
    assert member["client_id"] == "spark-tests"
    assert member["subscription_topics"] == [MULTI_TOPIC]
    assert sorted(member["assignment"]) == [f"{MULTI_TOPIC}-{p}" for p in range(MULTI_PARTITIONS)]
    assert member["session_timeout"] > 0
    # closing the consumer left the group: the last record has no members
    assert metadata[-1]["members"] == [] and metadata[-1]["is_tombstone"] is False


def test_tombstones():
    table, row = decode_record(encode_offset_key("g", "t", 4), None, record_timestamp=5,
                               log_offset=6, offsets_partition=7)
    assert table == OFFSET_COMMITS
    assert row == {"group": "g", "topic": "t", "partition": 4, "committed_offset": None,
                   "leader_epoch": None, "metadata": None, "commit_timestamp": None,
                   "expire_timestamp": None, "is_tombstone": True, "record_timestamp": 5,
                   "log_offset": 6, "offsets_partition": 7}
    table, row = decode_record(encode_group_key("g"), None)
    assert table == GROUP_METADATA and row["is_tombstone"] and row["members"] == []


def test_a_commit_with_a_leader_epoch_and_metadata():
    _, row = decode_record(encode_offset_key("g", "t", 0),
                           encode_offset_value(42, 3, "meta", 1_700_000_000_000))
    assert (row["committed_offset"], row["leader_epoch"], row["metadata"],
            row["commit_timestamp"]) == (42, 3, "meta", 1_700_000_000_000)


def _group_value(protocol_type: str, subscription: bytes, assignment: bytes) -> bytes:
    return encode_group_value({
        "protocol_type": protocol_type, "generation": 2, "protocol": "range", "leader": "m1",
        "current_state_timestamp": -1,
        "members": [{"member_id": "m1", "group_instance_id": "i1", "client_id": "c",
                     "client_host": "/127.0.0.1", "rebalance_timeout": 300000,
                     "session_timeout": 45000, "subscription": subscription,
                     "assignment": assignment}]})


def test_owned_partitions_are_decoded_for_the_consumer_protocol():
    sub = encode_subscription(Subscription(["a", "b"], owned_partitions={"a": [0, 2]}))
    asg = encode_assignment(Assignment({"a": [0, 2], "b": [1]}))
    _, row = decode_record(encode_group_key("g"), _group_value("consumer", sub, asg))
    (m,) = row["members"]
    assert (m["subscription_topics"], m["owned_partitions"], m["assignment"]) == (
        ["a", "b"], ["a-0", "a-2"], ["a-0", "a-2", "b-1"])
    assert m["group_instance_id"] == "i1" and row["current_state_timestamp"] is None


def test_other_protocol_types_keep_their_bytes_opaque():
    _, row = decode_record(encode_group_key("g"), _group_value("connect", b"\x00\x01", b"xyz"))
    (m,) = row["members"]
    assert (m["subscription_topics"], m["owned_partitions"], m["assignment"]) == ([], [], [])
    assert row["protocol_type"] == "connect" and row["generation"] == 2


def test_unknown_record_types_are_skipped():
    assert decode_record(b"\x00\x05" + b"\x00" * 4, b"\x00\x00") is None
