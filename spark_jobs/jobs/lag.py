"""The lag job: consumer lag over the whole history, Burrow's status replayed at every commit,
and `groups describe` as it would have printed at any moment.

Owns the pure transforms
- `commit_history(offset_commits)`: one row per committed offset (tombstones dropped);
- `with_log_end_offset(points, batches, ts_col, out_col)`: the log end offset (LEO) each
  point's partition had at a time: last_offset + 1 of the batches whose max_timestamp is at
  or before it (a running max over one timeline of batches and points, no range join);
- `lag_history(offset_commits, batches)`: per commit, committed offset, LEO, lag in records
  and seconds (now minus the timestamp of the oldest unconsumed record's batch; 0 when
  caught up);
- `partition_status(history, ...)` and `group_status(partition_status)`: Burrow's evaluation
  (docs/ANALYSIS.md, lag) over the last `intervals` commits, at every instant the group committed
  anything and at the end of the data, so a partition that stops committing while the rest
  of its group goes on shows STOP;
- `describe_at(...)`: the `minibroker groups describe` view at a time, as data (state,
  members, rows); tools.analyze prints it with the tool's own printer, so the text is
  identical;
and `run(spark, ctx)`.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.jobs import JobResult, lookup, ms_to_text

__all__ = ["STATUS_CODES", "INTERVALS", "commit_history", "batch_ends", "with_log_end_offset",
           "with_oldest_unconsumed_ts", "lag_history", "partition_status", "group_status",
           "latest_status", "describe_at", "run"]

# Burrow's protocol.StatusConstant values
STATUS_CODES = {"NOTFOUND": 0, "OK": 1, "WARN": 2, "ERR": 3, "STOP": 4, "STALL": 5,
                "REWIND": 6}
INTERVALS = 10             # Burrow's storage `intervals`
OFFSET_REFRESH_MS = 10_000  # Burrow's cluster `offset-refresh`: how often it polls the LEO
ALLOWED_LAG = 0            # Burrow's evaluator `allowed-lag`

_KEY = ["group", "topic", "partition"]
_TP = ["topic", "partition"]


def commit_history(offset_commits: DataFrame) -> DataFrame:
    """group, topic, partition, ts, committed_offset, log_offset: the offsets a group
    committed, at the commit's own timestamp (the append time when it has none)."""
    return (offset_commits
            .where(~F.col("is_tombstone") & F.col("committed_offset").isNotNull())
            .select(*_KEY,
                    F.coalesce("commit_timestamp", "record_timestamp").alias("ts"),
                    "committed_offset", "log_offset"))


def batch_ends(batches: DataFrame) -> DataFrame:
    """topic, partition, ts (the batch's max_timestamp), end (last_offset + 1), first_ts:
    the batches that decoded far enough to know their offsets."""
    return (batches.where(F.col("last_offset").isNotNull() & F.col("max_timestamp").isNotNull())
            .select(*_TP, F.col("max_timestamp").alias("ts"),
                    (F.col("last_offset") + 1).alias("end"),
                    F.col("last_offset"),
                    F.coalesce("first_timestamp", "max_timestamp").alias("first_ts")))


def with_log_end_offset(points: DataFrame, batches: DataFrame, ts_col: str = "ts",
                        out_col: str = "log_end_offset") -> DataFrame:
    """`points` (with topic, partition and `ts_col`) plus `out_col`: the partition's LEO at
    that time, 0 before its first batch. A batch counts from its max_timestamp on."""
    ends = batch_ends(batches).select(*_TP, F.col("ts").alias("_t"), F.col("end").alias("_end"),
                                      F.lit(0).alias("_k"))
    marked = points.withColumn("_t", F.col(ts_col)).withColumn("_k", F.lit(1))
    both = marked.unionByName(ends, allowMissingColumns=True)
    # batches sort before points of the same millisecond: a batch at t is in the LEO at t
    w = (Window.partitionBy(*_TP).orderBy("_t", "_k")
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    return (both.withColumn(out_col, F.coalesce(F.max("_end").over(w), F.lit(0)).cast("long"))
            .where(F.col("_k") == 1).drop("_t", "_k", "_end"))


def with_oldest_unconsumed_ts(points: DataFrame, batches: DataFrame,
                              offset_col: str = "committed_offset",
                              out_col: str = "oldest_unconsumed_ts") -> DataFrame:
    """`points` plus the timestamp of the first batch holding an offset at or past
    `offset_col` (the oldest record not yet consumed; batch precision, which over-states
    lag by at most one batch's linger)."""
    ends = batch_ends(batches).select(*_TP, F.col("last_offset").alias("_o"),
                                      F.col("first_ts").alias("_fts"), F.lit(1).alias("_k"))
    marked = points.withColumn("_o", F.col(offset_col)).withColumn("_k", F.lit(0))
    both = marked.unionByName(ends, allowMissingColumns=True)
    # Descending, so "the nearest batch at or after" is a running last() (a growing frame,
    # linear) rather than a first() over an unbounded-following frame (quadratic).
    w = (Window.partitionBy(*_TP).orderBy(F.col("_o").desc(), F.col("_k").desc())
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    return (both.withColumn(out_col, F.last("_fts", ignorenulls=True).over(w))
            .where(F.col("_k") == 0).drop("_o", "_k", "_fts"))


def _lag_columns(df: DataFrame, at_col: str, offset_col: str) -> DataFrame:
    lag = F.greatest(F.col("log_end_offset") - F.col(offset_col), F.lit(0)).cast("long")
    seconds = F.when(lag > 0, F.greatest(F.col(at_col) - F.col("oldest_unconsumed_ts"), F.lit(0))
                     / 1000.0).otherwise(F.lit(0.0))
    return df.withColumn("lag_records", lag).withColumn("lag_seconds", seconds.cast("double"))


def lag_history(offset_commits: DataFrame, batches: DataFrame) -> DataFrame:
    """group, topic, partition, ts, committed_offset, log_end_offset, lag_records,
    lag_seconds, log_offset: one row per commit."""
    h = commit_history(offset_commits)
    h = with_log_end_offset(h, batches)
    h = with_oldest_unconsumed_ts(h, batches)
    h = _lag_columns(h, "ts", "committed_offset")
    return h.select(*_KEY, "ts", "committed_offset", "log_end_offset", "lag_records",
                    "lag_seconds", "log_offset")


_STATUS_SQL = """
CASE
  WHEN current_lag <= {allowed} THEN 'OK'
  WHEN (ts - element_at(w, -1).ts) > (element_at(w, -1).ts - w[0].ts)
       AND NOT (ring_log_end_offset <= element_at(w, -1).offset) THEN 'STOP'
  WHEN CASE WHEN size(w) > 1 THEN exists(sequence(1, size(w) - 1), i ->
         w[i].offset < w[i - 1].offset
         AND NOT exists(slice(w, i + 1, size(w) - i), x -> x.offset >= w[i - 1].offset))
       ELSE false END THEN 'REWIND'
  WHEN exists(w, x -> x.lag <= {allowed}) THEN 'OK'
  WHEN forall(w, x -> x.offset = w[0].offset) THEN 'STALL'
  WHEN NOT CASE WHEN size(w) > 1
                THEN exists(sequence(1, size(w) - 1), i -> w[i].lag < w[i - 1].lag)
                ELSE false END THEN 'WARN'
  ELSE 'OK'
END
"""


def partition_status(history: DataFrame, batches: DataFrame, end_ts: int | None = None,
                     intervals: int = INTERVALS, allowed_lag: int = ALLOWED_LAG,
                     offset_refresh_ms: int = OFFSET_REFRESH_MS) -> DataFrame:
    """Burrow's partition evaluation replayed.

    Evaluated for every partition a group has committed, at every instant the group
    committed anything (the `ts` column) and at `end_ts` (the end of the data) when given.
    The window is the partition's last `intervals` commits at or before `ts`, each with the
    lag it had when committed; current_lag is the LEO at `ts` minus the last commit. The rules
    and their order are Burrow's: OK when current_lag <= allowed_lag; else STOP when the
    time since the last commit exceeds the window's span, unless the broker offsets Burrow
    would have polled in its ring (`intervals` polls, `offset_refresh_ms` apart) show the
    last commit caught up; REWIND when an offset decreased and no later one recovered it;
    OK when the lag was within allowed_lag at any commit in the window; STALL when every
    offset is equal; WARN when the lag never decreased; else OK.

    Columns: group, topic, partition, ts, committed_offset, log_end_offset, current_lag,
    lag_seconds, window_commits, complete, window_start_offset, window_end_offset, status,
    status_code.
    """
    per_commit = Window.partitionBy(*_KEY).orderBy("ts", "log_offset")
    commits = history.withColumn(
        "w", F.collect_list(F.struct(F.col("ts"), F.col("committed_offset").alias("offset"),
                                     F.col("lag_records").alias("lag")))
        .over(per_commit.rowsBetween(-(intervals - 1), Window.currentRow)))

    instants = history.select("group", "ts").distinct()
    if end_ts is not None:
        instants = instants.unionByName(
            history.select("group").distinct().withColumn("ts", F.lit(end_ts).cast("long")))
        instants = instants.distinct()
    grid = instants.join(history.select(*_KEY).distinct(), "group")

    # each grid point takes the window of the last commit at or before it
    both = (commits.select(*_KEY, "ts", "w", F.lit(0).alias("_k"))
            .unionByName(grid.withColumn("_k", F.lit(1)), allowMissingColumns=True))
    running = (Window.partitionBy(*_KEY).orderBy("ts", "_k")
               .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    evaluated = (both.withColumn("w", F.last("w", ignorenulls=True).over(running))
                 .where((F.col("_k") == 1) & F.col("w").isNotNull()).drop("_k")
                 .withColumn("committed_offset", F.element_at("w", -1)["offset"]))

    evaluated = with_log_end_offset(evaluated, batches)
    evaluated = evaluated.withColumn("_ring_ts", F.col("ts") - (intervals - 1) * offset_refresh_ms)
    evaluated = with_log_end_offset(evaluated, batches, "_ring_ts", "ring_log_end_offset")
    evaluated = with_oldest_unconsumed_ts(evaluated, batches)
    evaluated = (_lag_columns(evaluated, "ts", "committed_offset")
                 .withColumnRenamed("lag_records", "current_lag"))
    status = F.expr(_STATUS_SQL.format(allowed=int(allowed_lag)))
    return (evaluated
            .withColumn("status", status)
            .withColumn("status_code", lookup(STATUS_CODES, F.col("status")))
            .withColumn("window_commits", F.size("w"))
            .withColumn("complete", F.size("w") >= intervals)
            .withColumn("window_start_offset", F.col("w")[0]["offset"])
            .withColumn("window_end_offset", F.element_at("w", -1)["offset"])
            .select(*_KEY, "ts", "committed_offset", "log_end_offset", "current_lag",
                    "lag_seconds", "window_commits", "complete", "window_start_offset",
                    "window_end_offset", "status", "status_code"))


def group_status(partition_status_df: DataFrame) -> DataFrame:
    """Burrow's group rollup at each evaluation instant: the worst partition status, capped
    at ERR. Columns: group, ts, status, status_code, total_lag, max_lag, max_lag_partition,
    partition_count, complete (fraction of partitions with a full window)."""
    names = {v: k for k, v in STATUS_CODES.items()}
    worst = F.least(F.max("status_code"), F.lit(STATUS_CODES["ERR"]))
    top = F.max_by(F.struct("current_lag",
                            F.concat_ws("-", "topic", F.col("partition")).alias("tp")),
                   "current_lag")
    return (partition_status_df.groupBy("group", "ts")
            .agg(worst.alias("status_code"), F.sum("current_lag").alias("total_lag"),
                 top.alias("_top"), F.count(F.lit(1)).alias("partition_count"),
                 F.avg(F.col("complete").cast("double")).alias("complete"))
            .select("group", "ts", lookup(names, F.col("status_code")).alias("status"),
                    "status_code", "total_lag", F.col("_top")["current_lag"].alias("max_lag"),
                    F.col("_top")["tp"].alias("max_lag_partition"), "partition_count", "complete"))


def latest_status(status_df: DataFrame, keys: list[str]) -> DataFrame:
    """The last evaluation per key (e.g. per group: what Burrow says at the end)."""
    w = Window.partitionBy(*keys).orderBy(F.col("ts").desc())
    return status_df.withColumn("_n", F.row_number().over(w)).where("_n = 1").drop("_n")


# --- groups describe as of a time --------------------------------------------------------

DESCRIBE_COLUMNS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                    "CONSUMER-ID", "HOST", "CLIENT-ID"]


def _split_tp(tp: str) -> tuple[str, int]:
    topic, _, partition = tp.rpartition("-")
    return topic, int(partition)


def last_state(latest: list[dict]) -> str:
    """The group's state after the newest of its group_state events (newest first).

    Transitions in one millisecond of one generation (CompletingRebalance then Stable, as a
    lone member's SyncGroup completes) tie on (ts, generation), and the event log has no
    finer order: the last of them is the one whose new_state no other tied event left."""
    tied = [e for e in latest
            if (e["ts"], e["generation"]) == (latest[0]["ts"], latest[0]["generation"])]
    for e in tied:
        if not any(o is not e and o["old_state"] == e["new_state"] for o in tied):
            return e["new_state"]
    return tied[0]["new_state"]  # a cycle within one millisecond: no order to recover


def describe_at(offset_commits: DataFrame, batches: DataFrame, group_metadata: DataFrame,
                events: DataFrame | None, group: str, at_ms: int) -> dict[str, Any]:
    """What `minibroker groups describe GROUP` would have shown at `at_ms`.

    Committed offsets: each partition's last commit appended to __consumer_offsets at or
    before `at_ms` (a tombstone removes it). Members and assignments: the group's last
    metadata record at or before then; the state: the last group_state event (else Stable
    with members, Empty without). As DescribeGroups does, members of a group that is not
    Stable are shown without assignment. LEO: as `with_log_end_offset`.

    Returns {"state", "members": [...], "rows": DataFrame with group, topic, partition,
    current_offset, log_end_offset, lag, consumer_id, host, client_id in the tool's order}.
    """
    spark = offset_commits.sparkSession
    w = Window.partitionBy(*_TP).orderBy(F.col("log_offset").desc())
    committed = (offset_commits
                 .where((F.col("group") == group) & (F.col("record_timestamp") <= at_ms))
                 .withColumn("_n", F.row_number().over(w)).where("_n = 1")
                 .where(~F.col("is_tombstone"))
                 .select(*_TP, F.col("committed_offset").alias("current_offset")))

    meta = (group_metadata.where((F.col("group") == group) & (F.col("record_timestamp") <= at_ms))
            .orderBy(F.col("log_offset").desc()).limit(1).collect())
    members: list[dict] = []
    if meta and not meta[0]["is_tombstone"]:
        members = [m.asDict() for m in meta[0]["members"]]
    state = "Stable" if members else "Empty"
    if events is not None:
        latest = (events.where((F.col("type") == "group_state") & (F.col("group") == group)
                               & (F.col("ts") <= at_ms))
                  .orderBy(F.col("ts").desc(), F.col("generation").desc())
                  .select("ts", "generation", "old_state", "new_state").limit(8).collect())
        if latest:
            state = last_state([r.asDict() for r in latest])
    if state != "Stable":
        for m in members:
            m["assignment"] = []

    owners = [(*_split_tp(tp), m["member_id"], m["client_host"], m["client_id"])
              for m in members for tp in m["assignment"]]
    owner_df = spark.createDataFrame(
        owners, "topic string, partition int, consumer_id string, host string, client_id string")
    rows = committed.join(owner_df, _TP, "full_outer")
    rows = with_log_end_offset(rows.withColumn("_at", F.lit(at_ms).cast("long")), batches, "_at")
    rows = (rows.withColumn("lag", F.col("log_end_offset") - F.col("current_offset"))
            .select(F.lit(group).alias("group"), *_TP, "current_offset", "log_end_offset", "lag",
                    "consumer_id", "host", "client_id")
            .orderBy(*_TP))
    return {"state": state, "members": members, "rows": rows}


# --- the job -----------------------------------------------------------------------------

def _end_of_data(batches: DataFrame, history) -> int | None:
    """The latest batch or commit time; `history` is the collected lag_history (its rows
    are in the driver: no join of two aggregates, one small query)."""
    last_batch = batches.agg(F.max("max_timestamp")).collect()[0][0]  # one row: an aggregate
    values = [v for v in (last_batch, history.max("ts")) if v is not None]
    return max(values) if values else None


def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("lag")
    batches = ctx.table(spark, "batches")
    commits = ctx.table(spark, "offset_commits")
    # Every row of these tables is a committed offset's, so without commits they are empty
    # whatever the log holds. Evaluated over no batches, Spark's optimizer folds their plans
    # to empty relations instead of running each window over every batch (a dozen queries
    # on a data directory that has no consumer group).
    lag_batches = batches if not commits.isEmpty() else batches.limit(0)
    # Each table runs once (report.Collected); the tables built on it, and the charts,
    # read the collected rows, so no window plan runs twice and nothing is cached.
    history = report.collect(lag_history(commits, lag_batches))
    end_ts = _end_of_data(batches, history)
    statuses = report.collect(partition_status(history.frame(), lag_batches, end_ts))
    groups = report.collect(group_status(statuses.frame()))
    result.tables.update(lag_history=history, partition_status=statuses, group_status=groups)
    now = latest_status(groups.frame(), ["group"]).orderBy("group")
    now_partitions = (latest_status(statuses.frame(), _KEY).where(F.col("status") != "OK")
                      .orderBy("group", "topic", "partition"))
    result.tables.update(burrow_group_now=now, burrow_partitions_not_ok=now_partitions)
    result.show += ["burrow_group_now", "burrow_partitions_not_ok"]
    if end_ts is None:
        result.notes.append("no committed offsets in __consumer_offsets: no consumer lag")
        return result
    result.notes.append(f"Burrow evaluation at every group commit and at the end of the data "
                        f"({ms_to_text(end_ts)}); intervals={INTERVALS}, allowed-lag={ALLOWED_LAG}")

    if ctx.at_ms is not None:
        events = ctx.table(spark, "events")
        gm = ctx.table(spark, "group_metadata")
        names = [r["group"] for r in commits.select("group").union(gm.select("group"))
                 .distinct().orderBy("group").collect()]
        frames = []
        for g in names:
            described = describe_at(commits, batches, gm, events, g, ctx.at_ms)
            result.described[g] = described
            frames.append(described["rows"])
        if frames:
            table = frames[0]
            for f in frames[1:]:
                table = table.unionByName(f)
            result.tables["describe_at"] = table.withColumn("as_of", F.lit(ctx.at_ms))
            result.show.append("describe_at")

    pdf = history.pandas([*_KEY, "ts", "lag_records", "lag_seconds"])
    span = ctx.time_span(spark)
    result.charts += report.lag_charts(pdf, ctx.job_dir("lag"), span=span)
    spdf = statuses.pandas([*_KEY, "ts", "status_code"])
    result.charts += report.status_heatmap(spdf, ctx.job_dir("lag"), STATUS_CODES, span=span)
    return result
