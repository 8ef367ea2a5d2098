"""The "minibroker-log" PySpark data source: a broker's log segments as a table.

    spark.read.format("minibroker-log").load(DATA_DIR)                    # RECORDS_SCHEMA
    spark.read.format("minibroker-log").option("level", "batch").load(p)  # BATCHES_SCHEMA
    spark.read.format("minibroker-log").option("columns", "topic,partition,key").load(p)
    spark.read.format("minibroker-log").option("data_dirs", json.dumps([d1, d2])).load()

Owns the Spark side only: planning (one input partition per byte range of a segment, cut on
batch boundaries by spark_jobs.segments; option "split_bytes", default 32 MiB), pushing
EqualTo / In filters on `topic` and `partition` down to skip other partitions' files, and
turning each range's rows into Arrow record batches. Option "columns" (comma-separated)
narrows the table to those columns, in the schema's order: Python data sources get no
column pruning from Spark, and building a column nobody reads (a record's value, its
headers) costs more than decoding it. The path may be a data directory, one
partition directory or one .log file; option "data_dirs" (a JSON list, instead of a path)
names several brokers' data directories, each partition then read from one of its replicas
(spark_jobs.segments.find_replica_segments). Needs spark.sql.python.filterPushdown.enabled=true
(spark_jobs.session sets it).

Spark 4.3 caveat: Spark stores the reader that pushFilters narrowed on the DataFrame's
relation and reuses it for a later query on that DataFrame that pushes no filter, which then
sees only the earlier query's topics/partitions. spark_jobs.tables adds an always-true
pushed filter to every table it returns; a bare `.load()` should do the same before it is
both filtered and read whole.
"""

from __future__ import annotations

import json
from typing import Iterator

from pyspark.sql.datasource import (DataSource, DataSourceReader, EqualTo, Filter, In,
                                    InputPartition)
from pyspark.sql.types import StructType

from .segments import DEFAULT_SPLIT_BYTES, ByteRange, find_segments, iter_column_chunks, \
    segment_ranges
from .tables import BATCHES_SCHEMA, DATA_SOURCE, RECORDS_SCHEMA

__all__ = ["MinibrokerLogDataSource"]

_LEVELS = {"record": RECORDS_SCHEMA, "batch": BATCHES_SCHEMA}
# Rows per Arrow batch handed to Spark: big enough to amortise the conversion.
_CHUNK_ROWS = 8192


def _level(options) -> str:
    level = options.get("level", "record")
    if level not in _LEVELS:
        raise ValueError(f"option level must be one of {sorted(_LEVELS)}, not {level!r}")
    return level


def _schema(options) -> StructType:
    full = _LEVELS[_level(options)]
    columns = options.get("columns")
    if not columns:
        return full
    wanted = {c.strip() for c in columns.split(",") if c.strip()}
    unknown = wanted.difference(full.fieldNames())
    if unknown:
        raise ValueError(f"option columns: no column(s) {sorted(unknown)} in this table")
    return StructType([f for f in full.fields if f.name in wanted])


class MinibrokerLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE

    def schema(self) -> StructType:
        return _schema(self.options)

    def reader(self, schema: StructType) -> "MinibrokerLogReader":
        return MinibrokerLogReader(self.options, schema)


class RangePartition(InputPartition):
    """One ByteRange of one segment."""

    def __init__(self, value: ByteRange) -> None:
        super().__init__(value)


class MinibrokerLogReader(DataSourceReader):
    def __init__(self, options, schema: StructType) -> None:
        path = options.get("path")
        data_dirs = options.get("data_dirs")
        if data_dirs:
            dirs = json.loads(data_dirs)
            if not (isinstance(dirs, list) and dirs and all(isinstance(d, str) for d in dirs)):
                raise ValueError(f"option data_dirs must be a JSON list of paths, not "
                                 f"{data_dirs!r}")
            if path:
                raise ValueError("minibroker-log takes a path or option data_dirs, not both")
            self.path: str | list[str] = dirs
        elif not path:
            raise ValueError("minibroker-log needs a path: .load(DATA_DIR)")
        else:
            self.path = path
        self.level = _level(options)
        self.split_bytes = int(options.get("split_bytes", DEFAULT_SPLIT_BYTES))
        if self.split_bytes <= 0:
            raise ValueError(f"option split_bytes must be positive, not {self.split_bytes}")
        self.schema = schema
        self.topics: set[str] | None = None
        self.partition_ids: set[int] | None = None

    def _narrow(self, column: str, values) -> None:
        # Several filters on one column are ANDed: keep the values all of them allow.
        values = set(values)
        if column == "topic":
            self.topics = values if self.topics is None else self.topics & values
        else:
            self.partition_ids = (values if self.partition_ids is None
                                  else self.partition_ids & values)

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            if (isinstance(f, (EqualTo, In)) and len(f.attribute) == 1
                    and f.attribute[0] in ("topic", "partition")):
                values = (f.value,) if isinstance(f, EqualTo) else f.value
                self._narrow(f.attribute[0], values)
            else:
                yield f

    def partitions(self) -> list[InputPartition]:
        segments = find_segments(self.path, self.topics, self.partition_ids)
        return [RangePartition(r) for r in segment_ranges(segments, self.split_bytes)]

    def read(self, partition: InputPartition):
        r = partition.value
        if r is None:  # Spark's stand-in partition when there are no segments at all
            return
        arrow_schema = _arrow_schema(self.schema)
        for chunk in iter_column_chunks(ByteRange(*r), self.level, _CHUNK_ROWS,
                                        self.schema.fieldNames()):
            yield chunk.to_arrow(arrow_schema)


def _arrow_schema(schema: StructType):
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(schema)
