"""The tables the analysis jobs read, and their schemas: the contract between the readers and
the jobs.

Owns: the schema constants (RECORDS_SCHEMA, BATCHES_SCHEMA, OFFSET_COMMITS_SCHEMA,
GROUP_METADATA_SCHEMA, ABORTED_TXNS_SCHEMA, EVENTS_SCHEMA, CONSUMER_EVENTS_SCHEMA), `schema_of` (the one mapping
from the event schemas' declared JSON types, broker.events and consumer_events, to Spark
types), and the functions that load each table from a broker's data directory (or a
rebalance bench's output directory).

Where a loader takes `data_dir`, a list (or tuple) of directories stands for the data
directories of a cluster's brokers, one each: the log tables read each partition from one
of its replicas (spark_jobs.segments.find_replica_segments) and `events` merges the brokers'
event logs.

Column order is part of the contract. Columns are nullable unless a value always exists,
even for a batch that could not be decoded (see spark_jobs.segments for those rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DataType, DoubleType,
                               IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from spark_jobs.consumer_events import CONSUMER_COMMON_FIELDS, CONSUMER_EVENT_TYPES
from broker.events import COMMON_FIELDS, EVENT_TYPES

__all__ = [
    "RECORDS_SCHEMA", "BATCHES_SCHEMA", "OFFSET_COMMITS_SCHEMA", "GROUP_METADATA_SCHEMA",
    "ABORTED_TXNS_SCHEMA", "EVENTS_SCHEMA", "CONSUMER_EVENTS_SCHEMA", "OFFSETS_TOPIC", "DATA_SOURCE",
    "schema_of", "records", "batches", "offset_commits", "group_metadata", "events",
    "consumer_events", "aborted_txns", "LOCAL_READ_BYTES", "needs_data_source",
]

DATA_SOURCE = "minibroker-log"
OFFSETS_TOPIC = "__consumer_offsets"


def _f(name: str, data_type: DataType, nullable: bool = True) -> StructField:
    return StructField(name, data_type, nullable)


HEADER_TYPE = StructType([_f("key", StringType(), False), _f("value", BinaryType())])

# Batch-header columns shared by both levels, in the contract's RECORDS order after `headers`.
RECORDS_SCHEMA = StructType([
    _f("topic", StringType(), False),
    _f("partition", IntegerType(), False),
    _f("offset", LongType(), False),          # the batch's base offset on an error row
    _f("timestamp", LongType()),
    _f("timestamp_type", StringType()),       # "CreateTime" | "LogAppendTime"
    _f("key", BinaryType()),
    _f("value", BinaryType()),
    _f("headers", ArrayType(HEADER_TYPE, False), False),
    _f("base_offset", LongType(), False),
    _f("last_offset", LongType()),
    _f("batch_position", LongType(), False),
    _f("batch_size", IntegerType()),
    _f("record_count", IntegerType()),
    _f("producer_id", LongType()),
    _f("producer_epoch", IntegerType()),
    _f("base_sequence", IntegerType()),
    _f("partition_leader_epoch", IntegerType()),
    _f("codec", StringType()),                # "none" | "gzip" | "snappy" | "lz4" | "zstd"
    _f("is_transactional", BooleanType()),
    _f("is_control", BooleanType()),
    _f("max_timestamp", LongType()),
    _f("crc_valid", BooleanType(), False),
    _f("error", StringType()),
    _f("segment", StringType(), False),
])

BATCHES_SCHEMA = StructType([
    _f("topic", StringType(), False),
    _f("partition", IntegerType(), False),
    _f("base_offset", LongType(), False),
    _f("last_offset", LongType()),
    _f("record_count", IntegerType()),
    _f("first_timestamp", LongType()),
    _f("max_timestamp", LongType()),
    _f("timestamp_type", StringType()),
    _f("batch_position", LongType(), False),
    _f("batch_size", IntegerType()),
    _f("producer_id", LongType()),
    _f("producer_epoch", IntegerType()),
    _f("base_sequence", IntegerType()),
    _f("partition_leader_epoch", IntegerType()),
    _f("codec", StringType()),
    _f("is_transactional", BooleanType()),
    _f("is_control", BooleanType()),
    _f("crc_valid", BooleanType(), False),
    _f("error", StringType()),
    _f("segment", StringType(), False),
])

OFFSET_COMMITS_SCHEMA = StructType([
    _f("group", StringType(), False),
    _f("topic", StringType(), False),
    _f("partition", IntegerType(), False),
    _f("committed_offset", LongType()),       # null for a tombstone
    _f("leader_epoch", IntegerType()),        # null when the commit carried none (-1)
    _f("metadata", StringType()),
    _f("commit_timestamp", LongType()),
    _f("expire_timestamp", LongType()),       # only value v1 has one; null otherwise
    _f("is_tombstone", BooleanType(), False),
    _f("record_timestamp", LongType(), False),
    _f("log_offset", LongType(), False),
    _f("offsets_partition", IntegerType(), False),
])

MEMBER_TYPE = StructType([
    _f("member_id", StringType(), False),
    _f("group_instance_id", StringType()),
    _f("client_id", StringType(), False),
    _f("client_host", StringType(), False),
    _f("rebalance_timeout", IntegerType(), False),
    _f("session_timeout", IntegerType(), False),
    _f("subscription_topics", ArrayType(StringType(), False), False),
    _f("owned_partitions", ArrayType(StringType(), False), False),   # "topic-partition"
    _f("assignment", ArrayType(StringType(), False), False),         # "topic-partition"
])

GROUP_METADATA_SCHEMA = StructType([
    _f("group", StringType(), False),
    _f("is_tombstone", BooleanType(), False),
    _f("protocol_type", StringType()),        # null for a tombstone, as the fields below
    _f("generation", IntegerType()),
    _f("protocol", StringType()),
    _f("leader", StringType()),
    _f("current_state_timestamp", LongType()),  # null when unset (-1)
    _f("members", ArrayType(MEMBER_TYPE, False), False),  # empty for a tombstone
    _f("record_timestamp", LongType(), False),
    _f("log_offset", LongType(), False),
    _f("offsets_partition", IntegerType(), False),
])

# one row per entry of the partitions' .txnindex files: an aborted transaction whose ABORT
# marker is in that segment (broker/log/txn_index.py)
ABORTED_TXNS_SCHEMA = StructType([
    _f("topic", StringType(), False),
    _f("partition", IntegerType(), False),
    _f("producer_id", LongType(), False),
    _f("first_offset", LongType(), False),
    _f("last_offset", LongType(), False),       # the ABORT marker's offset
    _f("last_stable_offset", LongType(), False),
    _f("segment", StringType(), False),         # the .log the .txnindex belongs to
])

_DECLARED_TYPES: dict[str, DataType] = {
    "long": LongType(),
    "double": DoubleType(),
    "string": StringType(),
    "boolean": BooleanType(),
    "array<string>": ArrayType(StringType()),
    "array<long>": ArrayType(LongType()),
}


def schema_of(declarations: Mapping[str, Mapping[str, str]],
              common: Mapping[str, str]) -> StructType:
    """The Spark schema of a JSON-lines event log declared as {type: {field: json type}}.

    Columns: the `common` fields in their order, every declared field sorted by name (one
    column even when several types declare it), then `time`, the timestamp of `ts`. A field
    declared with two different types, or with an unknown type, raises ValueError: the
    declarations would not describe one table. Every column is nullable, because each event
    carries only its own type's fields (and Spark's JSON reader makes columns nullable).
    """
    fields: dict[str, str] = {}
    owner: dict[str, str] = {}
    for event_type, declared in declarations.items():
        for name, json_type in declared.items():
            if json_type not in _DECLARED_TYPES:
                raise ValueError(f"event {event_type!r} field {name!r}: unknown type {json_type!r}")
            if name in common and common[name] != json_type:
                raise ValueError(f"event {event_type!r} redeclares common field {name!r} "
                                 f"as {json_type!r}, not {common[name]!r}")
            if name in fields and fields[name] != json_type:
                raise ValueError(f"field {name!r} is {fields[name]!r} in {owner[name]!r} but "
                                 f"{json_type!r} in {event_type!r}")
            fields[name] = json_type
            owner.setdefault(name, event_type)
    columns = [_f(name, _DECLARED_TYPES[t]) for name, t in common.items()]
    columns += [_f(name, _DECLARED_TYPES[fields[name]])
                for name in sorted(fields) if name not in common]
    columns.append(_f("time", TimestampType()))
    return StructType(columns)


EVENTS_SCHEMA = schema_of(EVENT_TYPES, COMMON_FIELDS)
CONSUMER_EVENTS_SCHEMA = schema_of(CONSUMER_EVENT_TYPES, CONSUMER_COMMON_FIELDS)


# --- loaders ------------------------------------------------------------------------

# Up to this many bytes of segments a table is decoded here, in the driver, and handed to
# Spark as a local table. Below it the data source's fixed costs dominate: Spark starts a
# Python process to create the source, one to push filters to it, one to plan it and
# workers to read it (each seconds on two busy cores), against well under a second of
# decoding in one process (about 100 MB/s of batch headers, 10 MB/s of records).
LOCAL_READ_BYTES = {"batch": 32 << 20, "record": 4 << 20}
_OFFSETS_COLUMNS = ("partition", "offset", "timestamp", "key", "value", "is_control", "error")


def _empty(spark, schema: StructType):
    """An empty table of `schema`, as a local relation: Spark answers queries over it in
    the driver, with no job (an empty list would make an RDD, and every query a job)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    return spark.createDataFrame(to_arrow_schema(schema, timezone="UTC").empty_table(), schema)


def _log_bytes(data_dir, topics: Iterable[str] | None) -> int | None:
    """The bytes of the segments under data_dir holding `topics`' log; None for a path
    that is not a data directory, partition directory or segment (the data source's own
    error then says so)."""
    from .segments import find_segments
    try:
        return sum(s.size for s in find_segments(data_dir, topics))
    except (OSError, ValueError):
        return None


def needs_data_source(data_dir) -> bool:
    """Whether some table of data_dir's log is too large to decode in the driver, so that
    reading it needs the "minibroker-log" data source registered."""
    size = _log_bytes(data_dir, None)
    return size is None or size > min(LOCAL_READ_BYTES.values())


def _subset(schema: StructType, columns: Iterable[str] | None) -> StructType:
    if columns is None:
        return schema
    keep = {"topic", "partition", *columns}  # always: tables filter on them
    return StructType([f for f in schema.fields if f.name in keep])


def _local_arrow(data_dir, level: str, topics: Iterable[str] | None, schema: StructType):
    """The rows of `topics`' segments, decoded here, as a pyarrow.Table of `schema`."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from .segments import find_segments, iter_column_chunks, segment_ranges

    arrow_schema = to_arrow_schema(schema)
    names = schema.fieldNames()
    return pa.Table.from_batches(
        [chunk.to_arrow(arrow_schema)
         for r in segment_ranges(find_segments(data_dir, topics))
         for chunk in iter_column_chunks(r, level, columns=names)], schema=arrow_schema)


def _log(spark, data_dir, level: str, topics: Iterable[str] | None,
         columns: Iterable[str] | None = None):
    from pyspark.sql import functions as F

    schema = _subset(RECORDS_SCHEMA if level == "record" else BATCHES_SCHEMA, columns)
    size = _log_bytes(data_dir, topics)
    if size == 0:  # e.g. no __consumer_offsets: nothing to start Python for
        return _empty(spark, schema)
    if size is not None and size <= LOCAL_READ_BYTES[level]:
        return spark.createDataFrame(_local_arrow(data_dir, level, topics, schema), schema)
    reader = spark.read.format(DATA_SOURCE).option("level", level)
    if columns is not None:
        reader = reader.option("columns", ",".join(schema.fieldNames()))
    if isinstance(data_dir, (list, tuple)):
        import json
        df = reader.option("data_dirs", json.dumps([str(d) for d in data_dir])).load()
    else:
        df = reader.load(str(data_dir))
    # Spark 4.3 keeps the reader that pushFilters narrowed on the DataFrame's relation and
    # reuses it for a later query that pushes no filter, so `df.where(topic == x)` followed
    # by `df.count()` would count topic x only. An always-true filter Spark can hand to
    # Python makes every query push (the source declines it; Spark evaluates it).
    df = df.where(F.col("partition") >= 0)
    if topics is not None:
        # An In filter on topic, which the data source pushes down to skip other topics' files.
        df = df.where(F.col("topic").isin(list(topics)))
    return df


def records(spark, data_dir, topics: Iterable[str] | None = None,
            columns: Iterable[str] | None = None):
    """RECORDS_SCHEMA: every record of every segment under data_dir (a data directory, one
    partition directory or one .log file), optionally only of `topics`; with `columns`,
    only those columns (and topic and partition), in RECORDS_SCHEMA's order. Spark cannot
    prune a Python data source's columns itself, and a full scan of the log spends most of
    its time building values and headers a query may never read."""
    return _log(spark, data_dir, "record", topics, columns)


def batches(spark, data_dir, topics: Iterable[str] | None = None):
    """BATCHES_SCHEMA: one row per batch, from the headers only (no decompression)."""
    return _log(spark, data_dir, "batch", topics)


def _offsets_records(spark, data_dir):
    from pyspark.sql import functions as F

    # Only batches that decoded: a damaged batch has no keys to read.
    return (records(spark, data_dir, [OFFSETS_TOPIC], _OFFSETS_COLUMNS)
            .where(F.col("error").isNull() & ~F.col("is_control"))
            .select("partition", "offset", "timestamp", "key", "value"))


def _offsets_table(spark, data_dir, table: str, schema: StructType):
    """One table decoded from __consumer_offsets, in the driver when the topic is small
    (LOCAL_READ_BYTES), else by Python workers."""
    decoder = _OffsetsDecoder(table, schema)
    size = _log_bytes(data_dir, [OFFSETS_TOPIC])
    if size == 0:
        return _empty(spark, schema)
    if size is not None and size <= LOCAL_READ_BYTES["record"]:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql.pandas.types import to_arrow_schema

        rows = _local_arrow(data_dir, "record", [OFFSETS_TOPIC],
                            _subset(RECORDS_SCHEMA, _OFFSETS_COLUMNS))
        # as the Spark filter above: a null is not true (Kleene logic), so it drops the row
        rows = rows.filter(pc.and_kleene(pc.is_null(rows["error"]),
                                         pc.invert(rows["is_control"])))
        rows = rows.select(["partition", "offset", "timestamp", "key", "value"])
        decoded = pa.Table.from_batches(list(decoder(rows.to_batches())),
                                        schema=to_arrow_schema(schema))
        return spark.createDataFrame(decoded, schema)
    return _offsets_records(spark, data_dir).mapInArrow(decoder, schema)


class _OffsetsDecoder:
    """mapInArrow function: __consumer_offsets records in, one table's rows out. Records of
    the other table, of unknown types (KIP-848) or that do not decode are left out: the
    tables have no column for them (dump-log --offsets-decoder shows them)."""

    def __init__(self, table: str, schema: StructType) -> None:
        self.table = table
        self.schema = schema

    def __call__(self, batches):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        from .offsets_topic import decode_record

        arrow_schema = to_arrow_schema(self.schema)
        for batch in batches:
            rows = []
            cols = batch.to_pydict()
            for partition, offset, ts, key, value in zip(
                    cols["partition"], cols["offset"], cols["timestamp"], cols["key"],
                    cols["value"]):
                try:
                    decoded = decode_record(key, value, record_timestamp=ts, log_offset=offset,
                                            offsets_partition=partition)
                except Exception:  # noqa: BLE001 - see the class docstring
                    continue
                if decoded is not None and decoded[0] == self.table:
                    rows.append(decoded[1])
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)


def offset_commits(spark, data_dir):
    """OFFSET_COMMITS_SCHEMA: every offset commit (and tombstone) in __consumer_offsets."""
    from .offsets_topic import OFFSET_COMMITS
    return _offsets_table(spark, data_dir, OFFSET_COMMITS, OFFSET_COMMITS_SCHEMA)


def group_metadata(spark, data_dir):
    """GROUP_METADATA_SCHEMA: every group metadata record (and tombstone) in
    __consumer_offsets."""
    from .offsets_topic import GROUP_METADATA
    return _offsets_table(spark, data_dir, GROUP_METADATA, GROUP_METADATA_SCHEMA)


def aborted_txns(spark, data_dir):
    """ABORTED_TXNS_SCHEMA: the entries of the .txnindex files beside the segments under
    data_dir (of the replica each partition is read from, for several data directories).
    Read here, in the driver: an entry is one aborted transaction, 34 bytes."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from .segments import find_segments, iter_aborted_txns

    rows = list(iter_aborted_txns(find_segments(data_dir)))
    if not rows:
        return _empty(spark, ABORTED_TXNS_SCHEMA)
    arrow_schema = to_arrow_schema(ABORTED_TXNS_SCHEMA)
    return spark.createDataFrame(pa.Table.from_pylist(rows, schema=arrow_schema),
                                 ABORTED_TXNS_SCHEMA)


def _json_lines(spark, directory: Path | list[Path], schema: StructType):
    from pyspark.sql import functions as F

    files = [str(p) for d in (directory if isinstance(directory, list) else [directory])
             if d.is_dir() for p in sorted(d.glob("*.jsonl"))]
    if not files:
        return _empty(spark, schema)
    json_schema = StructType([f for f in schema.fields if f.name != "time"])
    df = (spark.read.schema(json_schema).option("mode", "DROPMALFORMED").json(files)
          # A torn last line that still parses as JSON (cut between fields) lacks ts or type;
          # the filter also makes Spark parse every line, so no pruned count keeps a bad one.
          .where(F.col("ts").isNotNull() & F.col("type").isNotNull()))
    return df.withColumn("time", F.timestamp_millis("ts"))


def events(spark, data_dir):
    """EVENTS_SCHEMA: the broker's event log, DATA_DIR/events/*.jsonl. Malformed or torn
    lines are dropped; no events directory gives an empty table.

    Given several data directories, their event logs merged: an event found more than once
    (the same line in two copies of a log) is kept once, and the table is in `ts` order
    (then broker, then type)."""
    if not isinstance(data_dir, (list, tuple)):
        return _json_lines(spark, Path(data_dir) / "events", EVENTS_SCHEMA)
    df = _json_lines(spark, [Path(d) / "events" for d in data_dir], EVENTS_SCHEMA)
    # every column but `time`, which is ts again
    return (df.dropDuplicates([c for c in df.columns if c != "time"])
            .orderBy("ts", "broker", "type"))


def consumer_events(spark, bench_dir):
    """CONSUMER_EVENTS_SCHEMA: what a rebalance bench's consumers logged,
    BENCH_DIR/consumers/*.jsonl."""
    return _json_lines(spark, Path(bench_dir) / "consumers", CONSUMER_EVENTS_SCHEMA)
