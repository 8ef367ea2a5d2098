"""Admin and offset APIs over raw sockets, checked against Kafka's semantics.

ListOffsets (v0's old-style offset lists, v7's -3 max timestamp and lookups by time),
OffsetForLeaderEpoch, DescribeConfigs, DeleteTopics by id, CreateTopics and
CreatePartitions (validate_only, manual assignments, replication factor), Metadata's
empty-list and auto-creation rules, and acks=0 Produce, all spoken through our sans-IO
client connection to the real broker process.
"""

from __future__ import annotations

import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.messages import (
    CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, FETCH, LIST_OFFSETS,
    METADATA, OFFSET_FOR_LEADER_EPOCH, PRODUCE,
)
from protocol.records import Record, decode_batches, encode_batch
from tests.interop import raw as raw_api
from tests.interop.raw import Raw
from tests.util import unique

pytestmark = pytest.mark.interop

# A static broker override, so DescribeConfigs has a non-default value to report.
SHARED_BROKER_OVERRIDES = {"message.max.bytes": "2000000"}

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
TOPIC, BROKER = 2, 4  # DescribeConfigs resource types
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5  # config_source
ZERO_UUID = uuid.UUID(int=0)


@pytest.fixture
def raw(connect, shared_broker) -> Raw:
    """One connection to the module's broker (here, not conftest's factory of them)."""
    return connect(shared_broker)


def create(r: Raw, name: str, partitions: int = 1, replication_factor: int = 1,
           assignments=(), validate_only: bool = False, **configs: str):
    body = r.call(CREATE_TOPICS, 7, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
        "assignments": list(assignments),
        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout_ms": 5000, "validate_only": validate_only})
    (topic,) = body.topics
    assert topic.name == name
    return topic


def metadata_topic(r: Raw, name: str, version: int = 12, allow_auto: bool = False):
    """The Metadata answer for one topic, without auto-creating it unless asked."""
    body = r.call(METADATA, version, {"topics": [{"name": name}],
                                      "allow_auto_topic_creation": allow_auto})
    (topic,) = body.topics
    assert topic.name == name
    return topic


def exists(r: Raw, name: str) -> bool:
    topic = metadata_topic(r, name)
    assert topic.error_code in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return topic.error_code == ErrorCode.NONE


def batch(timestamps: list[int], tag: bytes = b"v") -> bytes:
    """One uncompressed batch, a record per timestamp; same-length input, same-size batch."""
    return encode_batch([Record(i, ts, None, b"%s-%03d" % (tag, i), [])
                         for i, ts in enumerate(timestamps)])


def produce(r: Raw, topic: str, data: bytes) -> int:
    result = raw_api.produce(r, topic, data)
    assert result.error_code == ErrorCode.NONE, result
    return result.base_offset


def list_offsets(r: Raw, topic: str, timestamp: int, version: int = 7, partition: int = 0,
                 max_num_offsets: int = 1, current_leader_epoch: int = -1):
    body = r.call(LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{
            "partition_index": partition, "timestamp": timestamp,
            "max_num_offsets": max_num_offsets, "current_leader_epoch": current_leader_epoch}]}]})
    (t,) = body.topics
    (p,) = t.partitions
    assert (t.name, p.partition_index) == (topic, partition)
    return p


def old_style(r: Raw, topic: str, timestamp: int, max_num_offsets: int) -> list[int]:
    p = list_offsets(r, topic, timestamp, version=0, max_num_offsets=max_num_offsets)
    assert p.error_code == ErrorCode.NONE
    return list(p.old_style_offsets)


def found(p) -> tuple[int, int, int, int]:
    return p.error_code, p.offset, p.timestamp, p.leader_epoch


def fetch(r: Raw, topic: str, offset: int = 0, current_leader_epoch: int = -1):
    body = r.call(FETCH, 12, fetch_body(topic, offset, current_leader_epoch))
    return body.responses[0].partitions[0]


def fetch_body(topic: str, offset: int = 0, current_leader_epoch: int = -1) -> dict:
    return {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                "current_leader_epoch": current_leader_epoch}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def segment_topic(r: Raw, broker, prefix: str, timestamps: list[list[int]]) -> str:
    """A topic whose segment.bytes holds exactly one of these (equal-size) batches, so each
    produced batch rolls a new segment; returns its name once the rolls are on disk."""
    batches = [batch(ts) for ts in timestamps]
    assert len({len(b) for b in batches}) == 1
    name = unique(prefix)
    assert create(r, name, **{"segment.bytes": str(len(batches[0]))}).error_code == 0
    for b in batches:
        produce(r, name, b)
    logs = sorted((broker.data_dir / f"{name}-0").glob("*.log"))
    expected, base = [], 0
    for ts in timestamps:
        expected.append(f"{base:020d}.log")
        base += len(ts)
    assert [p.name for p in logs] == expected
    return name


# --- ListOffsets v0 -------------------------------------------------------------------------

def test_list_offsets_v0_earliest_and_latest(raw):
    name = unique("lo-v0")
    assert create(raw, name).error_code == 0
    assert old_style(raw, name, LATEST, 1) == [0]  # an empty log
    assert old_style(raw, name, EARLIEST, 1) == [0]
    for ts in ([1000, 1001], [2000, 2001], [3000, 3001]):
        produce(raw, name, batch(ts))
    assert old_style(raw, name, LATEST, 1) == [6]
    assert old_style(raw, name, EARLIEST, 1) == [0]
    assert old_style(raw, name, EARLIEST, 10) == [0]  # nothing precedes the log start
    assert old_style(raw, name, LATEST, 0) == []  # max_num_offsets caps the list
    assert old_style(raw, name, EARLIEST, 0) == []
    missing = list_offsets(raw, unique("lo-v0-missing"), LATEST, version=0)
    assert (missing.error_code, list(missing.old_style_offsets)) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])


def test_list_offsets_v0_latest_lists_segment_base_offsets(raw, shared_broker):
    """Kafka's v0 answer for LATEST is the log end offset followed by the base offset of
    every segment, newest first, at most max_num_offsets of them
    (UnifiedLog.legacyFetchOffsetsBefore)."""
    name = segment_topic(raw, shared_broker, "lo-v0-seg", [[1000 + 10 * i, 1001 + 10 * i]
                                                           for i in range(5)])
    assert old_style(raw, name, LATEST, 1) == [10]
    assert old_style(raw, name, LATEST, 3) == [10, 8, 6]
    assert old_style(raw, name, LATEST, 10) == [10, 8, 6, 4, 2, 0]
    assert old_style(raw, name, EARLIEST, 10) == [0]
    single = unique("lo-v0-one")
    assert create(raw, single).error_code == 0
    produce(raw, single, batch([1000, 1001, 1002]))
    assert old_style(raw, single, LATEST, 10) == [3, 0]


# --- ListOffsets v7 -------------------------------------------------------------------------

def _topic_with(raw, shared_broker, layout: str, prefix: str, timestamps: list[list[int]]):
    if layout == "segment-per-batch":
        return segment_topic(raw, shared_broker, prefix, timestamps)
    name = unique(prefix)
    assert create(raw, name).error_code == 0
    for ts in timestamps:
        produce(raw, name, batch(ts))
    return name


@pytest.mark.parametrize("layout", ["one-segment", "segment-per-batch"])
def test_list_offsets_v7_max_timestamp(raw, shared_broker, layout):
    empty = unique("lo-max-empty")
    assert create(raw, empty).error_code == 0
    assert found(list_offsets(raw, empty, MAX_TIMESTAMP)) == (0, -1, -1, -1)
    assert found(list_offsets(raw, empty, LATEST)) == (0, 0, -1, 0)

    # the largest timestamp is in the second batch, and a later batch only ties it
    name = _topic_with(raw, shared_broker, layout, "lo-max",
                       [[1000, 1001], [5000, 5001], [3000, 3001], [5001, 5000]])
    assert found(list_offsets(raw, name, MAX_TIMESTAMP)) == (0, 3, 5001, 0)
    assert found(list_offsets(raw, name, LATEST)) == (0, 8, -1, 0)
    assert found(list_offsets(raw, name, EARLIEST)) == (0, 0, -1, 0)


@pytest.mark.parametrize("layout", ["one-segment", "segment-per-batch"])
def test_list_offsets_v7_by_timestamp_across_batches(raw, shared_broker, layout):
    name = _topic_with(raw, shared_broker, layout, "lo-ts",
                       [[1000, 1010], [2000, 2010], [3000, 3010]])
    expected = {
        0: (1000, 0), 1000: (1000, 0),  # the first record at or after the time
        1005: (1010, 1),  # inside a batch: the record, not the batch
        1011: (2000, 2), 2000: (2000, 2), 2010: (2010, 3),
        2500: (3000, 4), 3010: (3010, 5),
    }
    for ts, (record_ts, offset) in expected.items():
        assert found(list_offsets(raw, name, ts)) == (0, offset, record_ts, 0), ts
    # after the last record: no offset, and no error
    assert found(list_offsets(raw, name, 3011)) == (0, -1, -1, -1)


# --- OffsetForLeaderEpoch and leader-epoch fencing --------------------------------------------

def offset_for_leader_epoch(r: Raw, topic: str, partitions: list[tuple[int, int, int]]):
    """partitions: (partition, current_leader_epoch, leader_epoch); returns
    [(error, partition, leader_epoch, end_offset)] in request order."""
    body = r.call(OFFSET_FOR_LEADER_EPOCH, 2, {"topics": [{"topic": topic, "partitions": [
        {"partition": p, "current_leader_epoch": c, "leader_epoch": e}
        for p, c, e in partitions]}]})
    (t,) = body.topics
    assert t.topic == topic
    return [(p.error_code, p.partition, p.leader_epoch, p.end_offset) for p in t.partitions]


def test_offset_for_leader_epoch_v2(raw):
    """Our partitions are at leader epoch 0 (Metadata says so): epoch 0 ends at the log end
    offset; a later epoch is unknown, answered UNDEFINED_EPOCH -1 / UNDEFINED_EPOCH_OFFSET -1
    without an error (LeaderEpochFileCache.endOffsetFor), as is the undefined epoch -1."""
    name = unique("ofle")
    assert create(raw, name).error_code == 0
    assert metadata_topic(raw, name).partitions[0].leader_epoch == 0
    assert offset_for_leader_epoch(raw, name, [(0, -1, 0)]) == [(0, 0, 0, 0)]  # empty log
    produce(raw, name, batch([1000, 1001, 1002]))
    produce(raw, name, batch([2000, 2001]))
    assert offset_for_leader_epoch(raw, name, [
        (0, -1, 0),  # no current epoch given
        (0, 0, 0),  # the current epoch, which matches ours
        (0, -1, 5),  # an epoch we never had
        (0, 0, -1),  # the undefined epoch
        (7, -1, 0),  # no such partition
    ]) == [
        (0, 0, 0, 5),
        (0, 0, 0, 5),
        (0, 0, -1, -1),
        (0, 0, -1, -1),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 7, -1, -1),
    ]
    assert offset_for_leader_epoch(raw, unique("ofle-missing"), [(0, -1, 0)]) == [
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0, -1, -1)]


def test_current_leader_epoch_newer_than_ours_is_unknown_leader_epoch(raw):
    """KIP-320: a client whose current_leader_epoch is newer than the broker's gets
    UNKNOWN_LEADER_EPOCH (75). The older case (FENCED_LEADER_EPOCH, 74) cannot arise while
    every partition is at epoch 0, so only the newer one and the matching one are checked."""
    name = unique("epoch-fence")
    assert create(raw, name).error_code == 0
    produce(raw, name, batch([1000, 1001]))

    assert offset_for_leader_epoch(raw, name, [(0, 1, 0)]) == [
        (ErrorCode.UNKNOWN_LEADER_EPOCH, 0, -1, -1)]
    assert list_offsets(raw, name, LATEST, current_leader_epoch=1).error_code == (
        ErrorCode.UNKNOWN_LEADER_EPOCH)
    assert fetch(raw, name, current_leader_epoch=1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH

    assert found(list_offsets(raw, name, LATEST, current_leader_epoch=0)) == (0, 2, -1, 0)
    ok = fetch(raw, name, current_leader_epoch=0)
    assert ok.error_code == 0
    assert [r.value for _, recs in decode_batches(ok.records) for r in recs] == [
        b"v-000", b"v-001"]


# --- DescribeConfigs -------------------------------------------------------------------------

def describe(r: Raw, resource_type: int, name: str, keys=None, version: int = 1):
    body = r.call(DESCRIBE_CONFIGS, version, {"resources": [{
        "resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": False, "include_documentation": False})
    (result,) = body.results
    assert (result.resource_type, result.resource_name) == (resource_type, name)
    return result


@pytest.mark.parametrize("version", [0, 1, 4])
def test_describe_configs_of_the_broker(raw, version):
    result = describe(raw, BROKER, "0", version=version)
    assert result.error_code == ErrorCode.NONE
    configs = {c.name: c for c in result.configs}
    assert len(configs) == len(result.configs)  # each name once
    overridden, default = configs["message.max.bytes"], configs["num.partitions"]
    assert (overridden.value, default.value) == ("2000000", "1")
    assert configs["auto.create.topics.enable"].value == "true"
    if version == 0:
        assert (overridden.is_default, default.is_default) == (False, True)
    else:
        assert (overridden.config_source, default.config_source) == (
            STATIC_BROKER_CONFIG, DEFAULT_CONFIG)

    filtered = describe(raw, BROKER, "0", keys=["num.partitions", "log.retention.bytes"],
                        version=version)
    assert sorted((c.name, c.value) for c in filtered.configs) == [
        ("log.retention.bytes", "-1"), ("num.partitions", "1")]

    other = describe(raw, BROKER, "7", version=version)  # not this broker
    assert (other.error_code, list(other.configs)) == (ErrorCode.INVALID_REQUEST, [])


@pytest.mark.parametrize("version", [0, 1, 4])
def test_describe_configs_of_a_topic_with_key_filter(raw, version):
    name = unique("dc")
    assert create(raw, name, **{"retention.ms": "3600000"}).error_code == 0
    result = describe(raw, TOPIC, name, keys=["retention.ms", "cleanup.policy", "no.such.key"],
                      version=version)
    assert result.error_code == ErrorCode.NONE
    configs = {c.name: c for c in result.configs}
    assert sorted(configs) == ["cleanup.policy", "retention.ms"]  # unknown keys are dropped
    assert (configs["retention.ms"].value, configs["cleanup.policy"].value) == (
        "3600000", "delete")
    if version == 0:
        assert (configs["retention.ms"].is_default, configs["cleanup.policy"].is_default) == (
            False, True)
    else:
        assert configs["retention.ms"].config_source == DYNAMIC_TOPIC_CONFIG
        assert configs["cleanup.policy"].config_source == DEFAULT_CONFIG

    everything = describe(raw, TOPIC, name, version=version)
    assert {"retention.ms", "cleanup.policy", "segment.bytes", "max.message.bytes"} <= {
        c.name for c in everything.configs}

    missing = describe(raw, TOPIC, unique("dc-missing"), version=version)
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("resource_type", [TOPIC, BROKER], ids=["topic", "broker"])
def test_describe_configs_empty_key_list_means_every_key(raw, resource_type):
    """Kafka's ConfigHelper.describeConfigs filters only when configuration_keys is neither
    null nor empty: an empty list describes everything, exactly as null does."""
    name = "0"
    if resource_type == TOPIC:
        name = unique("dc-empty-keys")
        assert create(raw, name).error_code == 0
    everything = describe(raw, resource_type, name, keys=None)
    assert len(everything.configs) > 5
    empty = describe(raw, resource_type, name, keys=[])
    assert empty.error_code == ErrorCode.NONE
    assert [(c.name, c.value) for c in empty.configs] == [
        (c.name, c.value) for c in everything.configs]


def test_topic_config_inherited_from_a_static_broker_setting(raw):
    """A topic without an override takes the broker's value; when the broker's own config
    sets it (message.max.bytes here), Kafka reports the source as STATIC_BROKER_CONFIG (4),
    not DEFAULT_CONFIG (5): ConfigHelper.createTopicConfigEntry takes the source of the first
    synonym, and the static broker config is one."""
    name = unique("dc-inherit")
    assert create(raw, name).error_code == 0
    (entry,) = describe(raw, TOPIC, name, keys=["max.message.bytes"]).configs
    assert entry.value == "2000000"
    assert entry.config_source == STATIC_BROKER_CONFIG


# --- DeleteTopics, CreateTopics, CreatePartitions ----------------------------------------------

def test_delete_topics_v6_by_topic_id(raw):
    name = unique("del-id")
    created = create(raw, name)
    assert created.error_code == 0 and created.topic_id != ZERO_UUID
    assert metadata_topic(raw, name).topic_id == created.topic_id

    body = raw.call(DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": created.topic_id}],
                                       "timeout_ms": 5000})
    (result,) = body.responses
    assert (result.error_code, result.name, result.topic_id) == (0, name, created.topic_id)
    assert not exists(raw, name)

    again = raw.call(DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": created.topic_id}],
                                        "timeout_ms": 5000}).responses[0]
    assert (again.error_code, again.topic_id) == (ErrorCode.UNKNOWN_TOPIC_ID, created.topic_id)

    by_name = unique("del-name")
    assert create(raw, by_name).error_code == 0
    result = raw.call(DELETE_TOPICS, 6, {"topics": [{"name": by_name, "topic_id": ZERO_UUID}],
                                         "timeout_ms": 5000}).responses[0]
    assert (result.error_code, result.name) == (0, by_name)
    assert not exists(raw, by_name)


def test_delete_topics_refuses_the_internal_offsets_topic(raw):
    body = raw.call(DELETE_TOPICS, 6, {"topics": [{"name": "__consumer_offsets",
                                                    "topic_id": ZERO_UUID}],
                                       "timeout_ms": 5000})
    (result,) = body.responses
    assert result.error_code == ErrorCode.INVALID_REQUEST
    assert "internal" in result.error_message


def test_create_topics_validate_only_creates_nothing(raw):
    name = unique("ct-validate")
    checked = create(raw, name, partitions=3, validate_only=True, **{"retention.ms": "60000"})
    assert (checked.error_code, checked.num_partitions, checked.replication_factor) == (0, 3, 1)
    assert not exists(raw, name)
    assert name not in {t.name for t in raw.call(METADATA, 1, {"topics": None}).topics}

    real = create(raw, name, partitions=3)
    assert real.error_code == 0
    assert len(metadata_topic(raw, name).partitions) == 3
    assert create(raw, name, validate_only=True).error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_create_topics_with_manual_assignments(raw):
    name = unique("ct-assign")
    topic = create(raw, name, partitions=-1, replication_factor=-1, assignments=[
        {"partition_index": i, "broker_ids": [0]} for i in (0, 1, 2)])
    assert (topic.error_code, topic.num_partitions, topic.replication_factor) == (0, 3, 1)
    md = metadata_topic(raw, name)
    assert md.error_code == 0
    assert sorted((p.partition_index, p.leader_id, list(p.replica_nodes)) for p in md.partitions) == [
        (0, 0, [0]), (1, 0, [0]), (2, 0, [0])]

    elsewhere = unique("ct-assign-bad")  # a broker that does not exist
    assert create(raw, elsewhere, partitions=-1, replication_factor=-1, assignments=[
        {"partition_index": 0, "broker_ids": [1]}]).error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    both = unique("ct-assign-both")  # a count and an assignment at once
    assert create(raw, both, partitions=1, replication_factor=1, assignments=[
        {"partition_index": 0, "broker_ids": [0]}]).error_code == ErrorCode.INVALID_REQUEST
    assert not exists(raw, elsewhere) and not exists(raw, both)


def test_create_topics_replication_factor_above_broker_count(raw):
    name = unique("ct-rf2")
    topic = create(raw, name, replication_factor=2)
    assert topic.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert topic.error_message
    assert not exists(raw, name)


def test_create_partitions_validate_only(raw):
    name = unique("cp")
    assert create(raw, name).error_code == 0

    def grow(count: int, validate_only: bool):
        body = raw.call(CREATE_PARTITIONS, 3, {"topics": [
            {"name": name, "count": count, "assignments": None}],
            "timeout_ms": 5000, "validate_only": validate_only})
        (result,) = body.results
        assert result.name == name
        return result.error_code

    assert grow(3, validate_only=True) == ErrorCode.NONE
    assert len(metadata_topic(raw, name).partitions) == 1
    assert grow(1, validate_only=True) == ErrorCode.INVALID_PARTITIONS
    assert grow(3, validate_only=False) == ErrorCode.NONE
    assert len(metadata_topic(raw, name).partitions) == 3


# --- Metadata --------------------------------------------------------------------------------

def test_metadata_empty_topic_list_means_all_in_v0_and_none_from_v1(raw):
    names = [unique("md-all"), unique("md-all")]
    for name in names:
        assert create(raw, name).error_code == 0
    v0 = raw.call(METADATA, 0, {"topics": []})
    assert set(names) <= {t.name for t in v0.topics}
    for version in (1, 4, 9, 12):
        assert list(raw.call(METADATA, version, {"topics": []}).topics) == [], version
        everything = raw.call(METADATA, version, {"topics": None})
        assert set(names) <= {t.name for t in everything.topics}, version


def test_metadata_auto_creation_only_when_allowed(raw):
    name = unique("md-auto")
    refused = metadata_topic(raw, name, version=12, allow_auto=False)
    assert refused.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not exists(raw, name)
    created = metadata_topic(raw, name, version=12, allow_auto=True)
    assert created.error_code == ErrorCode.NONE and len(created.partitions) == 1
    assert exists(raw, name)


def test_metadata_with_auto_creation_disabled(make_broker, connect):
    broker = make_broker(**{"auto.create.topics.enable": "false"})
    r = connect(broker)
    name = unique("md-noauto")
    for version in (0, 1, 4, 12):  # v0-v3 cannot say no, v4+ ask for creation here
        body = r.call(METADATA, version, {"topics": [{"name": name}],
                                          "allow_auto_topic_creation": True})
        assert [(t.name, t.error_code) for t in body.topics] == [
            (name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)], version
    assert raw_api.produce(r, name, batch([1000])).error_code == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert name not in {t.name for t in r.call(METADATA, 1, {"topics": None}).topics}
    assert create(r, name).error_code == 0  # explicit creation still works
    assert exists(r, name)


# --- Produce acks=0 -------------------------------------------------------------------------

def test_produce_acks_0_gets_no_response_but_appends(raw):
    name = unique("acks0")
    assert create(raw, name).error_code == 0
    conn = raw.conn

    def acks0(data: bytes) -> bytes:
        _, wire = conn.send_request(PRODUCE, 9, {"acks": 0, "timeout_ms": 5000, "topic_data": [
            {"name": name, "partition_data": [{"index": 0, "records": data}]}]},
            expect_response=False)
        return wire

    first, second = batch([1000, 1001, 1002], b"a"), batch([2000, 2001], b"b")
    stream = acks0(first) + acks0(second)
    lo_id, wire = conn.send_request(LIST_OFFSETS, 7, {"replica_id": -1, "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "timestamp": LATEST}]}]})
    stream += wire
    fetch_id, wire = conn.send_request(FETCH, 12, fetch_body(name))
    stream += wire
    raw.sock.sendall(stream)  # all four pipelined on one connection

    responses = []
    while len(responses) < 2:
        data = raw.sock.recv(65536)
        assert data, "broker closed the connection"
        # a response to either acks=0 produce would carry an unknown correlation id here
        conn.receive_data(data)
        while (resp := conn.next_response()) is not None:
            responses.append(resp)
    assert [r.correlation_id for r in responses] == [lo_id, fetch_id]
    assert conn.in_flight == 0
    assert responses[0].body.topics[0].partitions[0].offset == 5
    fetched = responses[1].body.responses[0].partitions[0]
    assert (fetched.error_code, fetched.high_watermark) == (0, 5)
    assert [(r.offset, r.value) for _, recs in decode_batches(fetched.records) for r in recs] == [
        (0, b"a-000"), (1, b"a-001"), (2, b"a-002"), (3, b"b-000"), (4, b"b-001")]

    # the connection still answers, and nothing for the produces arrives late
    assert raw.call(METADATA, 12, {"topics": [{"name": name}],
                                   "allow_auto_topic_creation": False}).topics[0].error_code == 0


def test_produce_acks_0_with_an_error_closes_the_connection(raw, connect, shared_broker):
    """With acks=0 the producer hears nothing, so Kafka closes the connection when any
    partition of the request fails (KafkaApis.handleProduceRequest: "the server will close
    socket server so that the producer client will know that some error has happened and
    will refresh its metadata"). A request pipelined after it is never answered."""
    name = unique("acks0-bad")
    assert create(raw, name).error_code == 0
    victim = connect(shared_broker)
    corrupt = bytearray(batch([1000, 1001]))
    corrupt[-1] ^= 0xFF  # CRC mismatch: CORRUPT_MESSAGE
    _, wire = victim.conn.send_request(PRODUCE, 9, {"acks": 0, "timeout_ms": 5000, "topic_data": [
        {"name": name, "partition_data": [{"index": 0, "records": bytes(corrupt)}]}]},
        expect_response=False)
    _, after = victim.conn.send_request(METADATA, 12, {"topics": None})
    victim.sock.sendall(wire + after)
    answered = None
    while answered is None:
        try:
            data = victim.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            break
        victim.conn.receive_data(data)
        answered = victim.conn.next_response()
    assert answered is None, "the connection stayed open after a failed acks=0 produce"
    assert found(list_offsets(raw, name, LATEST)) == (0, 0, -1, 0)  # nothing appended
