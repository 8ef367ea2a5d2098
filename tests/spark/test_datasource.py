"""The Spark side: the minibroker-log data source and the tables, on tiny real data. Few tests,
one shared session (conftest's `spark`). The tables read this little data in the driver
(tables.LOCAL_READ_BYTES); here they go through the data source, except where a test says
otherwise."""

from __future__ import annotations

import json
import shutil

import pytest
from pyspark.sql import functions as F

from spark_jobs.consumer_events import CONSUMER_EVENT_TYPES
from spark_jobs import tables
from spark_jobs.segments import find_segments, iter_rows, segment_ranges
from tests.spark.conftest import CODECS, GROUP, MULTI_PARTITIONS, MULTI_TOPIC

PRODUCED_COLUMNS = ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
DRIVER_READS = dict(tables.LOCAL_READ_BYTES)


@pytest.fixture(autouse=True)
def through_the_data_source(monkeypatch):
    monkeypatch.setattr(tables, "LOCAL_READ_BYTES", {level: 0 for level in DRIVER_READS})


def as_produced(rows):
    return [{"topic": r.topic, "partition": r.partition, "offset": r.offset,
             "timestamp": r.timestamp, "key": None if r.key is None else bytes(r.key),
             "value": bytes(r.value),
             "headers": [(h.key, None if h.value is None else bytes(h.value))
                         for h in r.headers]} for r in rows]


def test_records_are_what_was_produced(spark, broker_data):
    topics = [f"codec-{c}" for c in CODECS]
    df = tables.records(spark, broker_data.data_dir, topics)
    assert df.schema == tables.RECORDS_SCHEMA
    # sorted here rather than by Spark: a shuffle would cost this tiny test seconds
    def order(m):
        return m["topic"], m["partition"], m["offset"]
    rows = df.collect()
    expected = sorted((m for t in topics for m in broker_data.of(t)), key=order)
    assert sorted(as_produced(rows), key=order) == expected
    assert {(r.topic, r.codec) for r in rows} == {(f"codec-{c}", c) for c in CODECS}


def test_records_with_only_some_columns(spark, broker_data):
    topics = [f"codec-{c}" for c in CODECS]
    df = tables.records(spark, broker_data.data_dir, topics, columns=["value", "offset"])
    assert df.schema.fieldNames() == ["topic", "partition", "offset", "value"]
    assert df.schema.fields == [f for f in tables.RECORDS_SCHEMA.fields
                                if f.name in ("topic", "partition", "offset", "value")]
    got = sorted((r.topic, r.partition, r.offset, bytes(r.value)) for r in df.collect())
    assert got == sorted((m["topic"], m["partition"], m["offset"], m["value"])
                         for t in topics for m in broker_data.of(t))


def test_batches_and_split_bytes(spark, broker_data):
    df = tables.batches(spark, broker_data.data_dir, [MULTI_TOPIC])
    assert df.schema == tables.BATCHES_SCHEMA
    segs = find_segments(broker_data.data_dir, [MULTI_TOPIC])
    expected = [row for r in segment_ranges(segs) for row in iter_rows(r, "batch")]
    got = [r.asDict() for r in df.orderBy("partition", "base_offset").collect()]
    assert got == sorted(expected, key=lambda b: (b["partition"], b["base_offset"]))
    per_partition = {r.partition: r.n for r in
                     df.groupBy("partition").agg(F.sum("record_count").alias("n")).collect()}
    assert per_partition == {p: len(broker_data.of(MULTI_TOPIC, p))
                             for p in range(MULTI_PARTITIONS)}
    # a small split_bytes makes more input partitions and the same rows
    small = (spark.read.format("minibroker-log").option("split_bytes", 300)
             .load(str(broker_data.data_dir / f"{MULTI_TOPIC}-0")))
    whole = spark.read.format("minibroker-log").load(str(broker_data.data_dir / f"{MULTI_TOPIC}-0"))
    assert small.rdd.getNumPartitions() > whole.rdd.getNumPartitions()
    assert sorted(small.select("offset").collect()) == sorted(whole.select("offset").collect())


def test_filters_on_topic_and_partition_prune_files(spark, broker_data):
    all_records = tables.records(spark, broker_data.data_dir)
    one = all_records.where((F.col("topic") == MULTI_TOPIC) & (F.col("partition") == 1))
    segments = find_segments(broker_data.data_dir, [MULTI_TOPIC], [1])
    assert one.rdd.getNumPartitions() == len(segment_ranges(segments))
    assert as_produced(one.orderBy("offset").collect()) == broker_data.of(MULTI_TOPIC, 1)
    # the unfiltered table afterwards is whole again (see tables._log on Spark's reuse)
    assert all_records.rdd.getNumPartitions() == len(
        segment_ranges(find_segments(broker_data.data_dir)))
    assert all_records.where(F.col("topic") != "__consumer_offsets").count() == len(
        broker_data.produced)
    # a filter the source cannot take is still applied by Spark
    later = all_records.where((F.col("topic").isin(MULTI_TOPIC, "codec-none"))
                              & (F.col("offset") >= 10))
    assert later.count() == sum(1 for m in broker_data.produced
                                if m["topic"] in (MULTI_TOPIC, "codec-none")
                                and m["offset"] >= 10)


def test_offset_commits_and_group_metadata(spark, broker_data):
    commits = tables.offset_commits(spark, broker_data.data_dir)
    assert commits.schema == tables.OFFSET_COMMITS_SCHEMA
    got = {(r.topic, r.partition): r.committed_offset
           for r in commits.where(F.col("group") == GROUP).collect()}
    assert got == {(MULTI_TOPIC, p): len(broker_data.of(MULTI_TOPIC, p))
                   for p in range(MULTI_PARTITIONS)}
    groups = tables.group_metadata(spark, broker_data.data_dir)
    assert groups.schema == tables.GROUP_METADATA_SCHEMA
    assigned = (groups.where(F.col("group") == GROUP)
                .select(F.explode("members").alias("m"))
                .select(F.explode("m.assignment").alias("tp")).distinct().collect())
    assert sorted(r.tp for r in assigned) == [f"{MULTI_TOPIC}-{p}" for p in range(MULTI_PARTITIONS)]


def test_events_read_the_broker_log_and_drop_torn_lines(spark, broker_data, tmp_path):
    shutil.copytree(broker_data.data_dir / "events", tmp_path / "events")
    (log,) = (tmp_path / "events").glob("*.jsonl")
    lines = log.read_text().splitlines()
    with open(log, "a") as f:
        f.write(lines[-1][: len(lines[-1]) // 2])  # a torn last line, as after a crash
    df = tables.events(spark, tmp_path)
    assert df.schema == tables.EVENTS_SCHEMA
    rows = df.collect()
    assert len(rows) == len(lines)
    created = {r.topic for r in rows if r.type == "topic_create"}
    assert {MULTI_TOPIC, *(f"codec-{c}" for c in CODECS)} <= created
    assert {r.leader for r in rows if r.type == "group_sync"} == {True}
    first = json.loads(lines[0])
    assert rows[0].ts == first["ts"] and rows[0].type == first["type"]
    assert int(rows[0].time.timestamp() * 1000) == first["ts"]
    empty = tables.events(spark, tmp_path / "nowhere")
    assert empty.schema == tables.EVENTS_SCHEMA and empty.count() == 0


def test_consumer_events(spark, tmp_path):
    (tmp_path / "consumers").mkdir()
    events = [{"ts": 1_700_000_000_000 + i, "type": "assigned", "instance": "c0",
               "member": "m", "generation": i, "partitions": ["t-0", "t-1"]} for i in range(3)]
    with open(tmp_path / "consumers" / "c0.jsonl", "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
        f.write('{"ts": 17, "type": "assig')
    df = tables.consumer_events(spark, tmp_path)
    assert df.schema == tables.CONSUMER_EVENTS_SCHEMA
    assert "broker" not in df.columns
    assert set(df.columns) == {"ts", "type", "time"} | {
        f for fields in CONSUMER_EVENT_TYPES.values() for f in fields}
    rows = df.orderBy("ts").collect()
    assert [(r.generation, r.partitions) for r in rows] == [(i, ["t-0", "t-1"]) for i in range(3)]


def test_schema_of_declarations():
    from pyspark.sql.types import (ArrayType, DoubleType, LongType, StringType,
                                   TimestampType)

    schema = tables.schema_of({"a": {"x": "long", "y": "array<string>"},
                               "b": {"x": "long", "w": "double"}},
                              {"ts": "long", "type": "string"})
    assert [(f.name, f.dataType) for f in schema.fields] == [
        ("ts", LongType()), ("type", StringType()), ("w", DoubleType()), ("x", LongType()),
        ("y", ArrayType(StringType())), ("time", TimestampType())]
    clash = {"a": {"x": "long"}, "b": {"x": "boolean"}}
    try:
        tables.schema_of(clash, {})
    except ValueError as e:
        assert "'x'" in str(e)
    else:
        raise AssertionError("a field declared with two types was accepted")
    names = tables.EVENTS_SCHEMA.names
    assert names[:3] == ["ts", "type", "broker"] and names[-1] == "time"
    assert names[3:-1] == sorted(names[3:-1])
    from broker.events import EVENT_TYPES
    assert set(names[3:-1]) == {f for fields in EVENT_TYPES.values() for f in fields}


def _sorted_rows(df):
    return sorted((tuple(r) for r in df.collect()), key=repr)


@pytest.mark.parametrize("table", ["records", "batches", "offset_commits", "group_metadata",
                                   "narrow records"])
def test_a_small_log_read_in_the_driver_is_the_same_table(spark, broker_data, monkeypatch,
                                                          table):
    def load():
        if table == "narrow records":
            return tables.records(spark, broker_data.data_dir, [MULTI_TOPIC],
                                  columns=["key", "headers"])
        return getattr(tables, table)(spark, broker_data.data_dir)
    scanned = load()
    monkeypatch.setattr(tables, "LOCAL_READ_BYTES", DRIVER_READS)
    local = load()
    # no data source in the plan: a local table
    assert "minibroker" not in local._jdf.queryExecution().analyzed().toString().lower()
    assert local.schema == scanned.schema
    rows = _sorted_rows(local)
    assert rows and rows == _sorted_rows(scanned)
