"""The analysis jobs run by `minibroker analyze`, and what they share.

Owns: `JOBS` (name -> module; each module has `run(spark, ctx) -> JobResult` over pure
DataFrame -> DataFrame transforms), `Context` (the inputs of a run: data directory, or one per
broker of a cluster, output directory, `--at`, the bench's consumer events, each input table
loaded once, and the report's time span, which every time-based chart shares), `JobResult`
(the tables, charts, notes and text blocks a job hands to spark_jobs.report), `frame`, which
builds a DataFrame of one of the contract's schemas from partial rows (tests and empty tables),
and `lookup`, a Python dict applied to a column.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["EXTRA_JOBS", "JOBS", "Context", "JobResult", "frame", "load_job", "lookup", "ms_to_text"]

# Order matters only for the report: the lag job first, it answers "is anyone behind?".
JOBS = ("lag", "rebalances", "throughput", "latency", "isr", "auth", "metrics",
        "transactions", "share_groups")
# Jobs over inputs other than a data directory, run when those are given: `chaos` charts
# `minibroker chaos` histories (--chaos).
EXTRA_JOBS = ("chaos",)


def load_job(name: str):
    if name not in JOBS + EXTRA_JOBS:
        raise ValueError(f"unknown job {name!r} (one of {', '.join(JOBS + EXTRA_JOBS)})")
    return importlib.import_module(f"spark_jobs.jobs.{name}")


@dataclass
class JobResult:
    """What a job produced. Tables are written as Parquet and CSV by spark_jobs.report;
    `show` names the small tables the HTML report prints; `texts` are preformatted blocks
    (e.g. the `groups describe` replay); `charts` are PNG paths under OUT/<job>/;
    `described` maps a group to the `groups describe` view the lag job replayed (`--at`),
    which tools.analyze prints into `texts`."""
    name: str
    tables: dict[str, Any] = field(default_factory=dict)
    show: list[str] = field(default_factory=list)
    charts: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    described: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Context:
    """One run's inputs. Tables are loaded lazily, once, and cached in Spark's memory because
    several jobs read the same ones. `data_dir` is one broker's data directory, or a tuple
    of several brokers' (spark_jobs.tables: the logs read from one replica each, the event
    logs merged)."""
    data_dir: Path | tuple[Path, ...]
    out: Path
    at_ms: int | None = None
    consumer_events_dir: Path | None = None
    chaos_histories: tuple[Path, ...] = ()
    _loaded: dict[str, Any] = field(default_factory=dict, repr=False)
    # jobs may run in threads side by side (tools.analyze): each table is loaded once
    _lock: Any = field(default_factory=threading.RLock, repr=False)
    _source_checked: bool = field(default=False, repr=False)
    _span: Any = field(default=None, repr=False)

    @property
    def data_dirs(self) -> tuple[Path, ...]:
        return self.data_dir if isinstance(self.data_dir, tuple) else (self.data_dir,)

    def _source(self) -> str | list[str]:
        """What spark_jobs.tables' loaders take: one path, or a list of data directories."""
        if isinstance(self.data_dir, tuple):
            return [str(d) for d in self.data_dir]
        return str(self.data_dir)

    def job_dir(self, job: str) -> Path:
        path = Path(self.out) / job
        path.mkdir(parents=True, exist_ok=True)
        return path

    def table(self, spark, name: str):
        """batches | records | offset_commits | group_metadata | aborted_txns | events |
        consumer_events."""
        with self._lock:
            return self._table(spark, name)

    def _data_source(self, spark) -> None:
        # The log's data source costs a Python process to register; tools.analyze starts
        # Spark without it, and it is registered here only for a log too large to decode
        # in the driver.
        if not self._source_checked:
            from spark_jobs import tables
            from spark_jobs.session import register_data_source
            if tables.needs_data_source(self._source()):
                register_data_source(spark)
            self._source_checked = True

    def _table(self, spark, name: str):
        if name not in self._loaded:
            from spark_jobs import tables
            if name not in ("events", "consumer_events"):  # the JSON logs need no source
                self._data_source(spark)
            if name == "consumer_events":
                if self.consumer_events_dir is None:
                    return None
                df = tables.consumer_events(spark, str(self.consumer_events_dir))
            else:
                df = getattr(tables, name)(spark, self._source())
            if name != "records" and not df.isLocal():
                # Cached with as many partitions as the machine has cores, not one per
                # input range (a 1 GB log has 30, a data directory with groups one per
                # __consumer_offsets segment): every later query over a cached table runs
                # one task per partition, and these tables are small. The scan keeps its
                # parallelism: coalesce merges ranges into tasks without a shuffle.
                # A table decoded in the driver (spark_jobs.tables) is a local relation,
                # already in memory: caching it would only add a job.
                df = df.coalesce(max(1, spark.sparkContext.defaultParallelism)).persist()
            # records are the whole log: read once per job that needs them, not cached
            # (Context.records reads only the columns a job uses)
            self._loaded[name] = df
        return self._loaded[name]

    def time_span(self, spark) -> tuple[int, int] | None:
        """The whole report's time range, (first ms, last ms): the broker events, the log's
        batch timestamps (every record and offset commit) and the bench's consumer events,
        None when there is no time at all. Every time-based chart of the report counts
        seconds from its start over this range (spark_jobs.report), whichever job draws
        it; computed once, by the first job that asks."""
        with self._lock:
            if self._span is None:
                self._span = self._time_span(spark) or ()
            return self._span or None

    def _time_span(self, spark) -> tuple[int, int] | None:
        from pyspark.sql import functions as F
        ends = []
        times = [(self.table(spark, "events"), "ts"),
                 (self.table(spark, "batches"), "max_timestamp"),
                 (self.table(spark, "consumer_events"), "ts")]
        for df, column in times:
            if df is not None:
                # a batch written without timestamps has -1: not a time
                row = df.where(F.col(column) >= 0).agg(F.min(column), F.max(column)).first()
                ends += [v for v in row if v is not None]
        return (int(min(ends)), int(max(ends))) if ends else None

    def records(self, spark, columns: Iterable[str], topics: Iterable[str] | None = None):
        """The records table with only `columns` (and topic and partition), of `topics`
        only if given: a full scan of (those topics') log, so neither cached nor shared;
        each job reads just what it uses."""
        from spark_jobs import tables
        with self._lock:
            self._data_source(spark)
        return tables.records(spark, self._source(), topics=topics, columns=columns)

    def release(self) -> None:
        for df in self._loaded.values():
            if df is not None and df.is_cached:
                df.unpersist()
        self._loaded.clear()


def frame(spark, schema, rows: Iterable[Mapping[str, Any]]):
    """A DataFrame of `schema` from dicts that may leave columns out (they become null, or
    an empty list for non-nullable array columns)."""
    from pyspark.sql.types import ArrayType
    full = []
    for row in rows:
        values = []
        for f in schema.fields:
            if f.name in row:
                values.append(row[f.name])
            elif isinstance(f.dataType, ArrayType) and not f.nullable:
                values.append([])
            else:
                values.append(None)
        full.append(tuple(values))
    return spark.createDataFrame(full, schema)


def lookup(mapping: Mapping[Any, Any], column):
    """The Column of `mapping[column]` (null for a value the mapping lacks): a literal map
    indexed by the column, e.g. a status name to its code."""
    from pyspark.sql import functions as F
    return F.create_map(*[F.lit(x) for item in mapping.items() for x in item])[column]


def ms_to_text(ms: int | None) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds (for notes and labels)."""
    if ms is None:
        return "-"
    from datetime import datetime, timezone
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")
