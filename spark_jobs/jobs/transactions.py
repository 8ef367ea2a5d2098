"""The transactions job: every transaction of every transactional id, how it ended and how
long it took, the markers' latency, and how far each partition's open transactions hold
read_committed consumers back.

From the event log (broker/events.py), the pure transforms
- `transactions(events, end_ms)`: one row per transaction, from the transaction
  coordinator's `txn_state` events: transactional_id, producer_id, producer_epoch, start_ts,
  decided_ts, end_ts, duration_ms, outcome (commit | abort | open), abort_reason
  (requested | timeout | fenced), state, last_ts, decision_epoch, partitions,
  partition_count, timeout_ms, open_ms;
- `transactional_ids(txns)` and `transaction_summary(txns)`: the counts, the abort rate and
  the durations per transactional id and overall; `open_transactions(txns)`: those without
  a Complete state at the end of the log, and for how long they have been open;
- `marker_latency(events)`: result, transactions, p50_ms, p95_ms, p99_ms, max_ms, mean_ms,
  mean_partitions of the `txn_markers_written` events;
and from the data logs
- `control_markers(records)`: each end-transaction marker (COMMIT or ABORT, from its control
  key: protocol/control_records.py) by partition and offset;
- `partition_transactions(batches, markers)`: each producer's transaction in each
  partition: its transactional batches up to the producer's next marker;
- `lso_lag(batches, partition_txns, aborted_txns, end_ms)`: per partition with
  transactional data, the last stable offset the log itself implies (no high watermark),
  the offsets and records past it, and the transactions and records committed, aborted
  and open, with the aborted transactions the .txnindex files list beside them;
and `run(spark, ctx)`, with a chart of the transactions over time per transactional id.

A transaction is one transactional id's states from an Ongoing that follows no open
transaction to the next Complete, in the order of their records in __transaction_state (the
events' log_offset). docs/ANALYSIS.md defines each column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.jobs import JobResult, lookup, ms_to_text

if TYPE_CHECKING:
    import pandas as pd  # pandas ships no types: this names what toPandas() returns

__all__ = ["transaction_states", "transactions", "transactional_ids", "transaction_summary",
           "open_transactions", "marker_latency", "control_markers", "partition_transactions",
           "lso_lag", "run", "NO_TRANSACTIONS", "CHART_IDS"]

NO_TRANSACTIONS = "no transactions in the event log (txn_state events)"
CHART_IDS = 30  # lanes of the chart: the transactional ids with the most transactions

# the states of one transaction, in the order it passes them (Empty and Dead are a
# transactional id's, between transactions)
_RANK = {"Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 2, "CompleteCommit": 3,
         "CompleteAbort": 3}
# a control record's key is int16 version, int16 type: the type's two bytes, in hex
_MARKER_TYPES = {"0000": "ABORT", "0001": "COMMIT"}
TXN_COLUMNS = ["transactional_id", "producer_id", "producer_epoch", "start_ts", "decided_ts",
               "end_ts", "duration_ms", "outcome", "abort_reason", "state", "last_ts",
               "decision_epoch", "partitions", "partition_count", "timeout_ms", "open_ms"]


def transaction_states(events: DataFrame) -> DataFrame:
    return (events.where(F.col("type") == "txn_state")
            .select("ts", "broker", "transactional_id", "producer_id", "producer_epoch",
                    "state", "topic_partitions", "start_ms", "timeout_ms", "log_offset"))


def transactions(events: DataFrame, end_ms: int | None) -> DataFrame:
    """One row per transaction (see the module docstring); `end_ms` is the end of the log,
    which an open transaction's open_ms counts to."""
    state = F.col("state")
    ongoing, prepare, complete = (state == "Ongoing", state.startswith("Prepare"),
                                  state.startswith("Complete"))
    # One id's states in the order the coordinator wrote them: by their offset in
    # __transaction_state (one partition per id); time alone cannot order them, as a
    # fast producer's whole transactions share a millisecond. A state of a transaction
    # begins one when it follows a state between transactions (none, Empty, Complete*,
    # Dead), or one of another transaction (another start time or producer id: the
    # Complete between them is not in the log, whose events are written best effort).
    order = Window.partitionBy("transactional_id").orderBy("log_offset", "ts", "_rank")
    states = (transaction_states(events)
              .withColumn("_rank", F.coalesce(lookup(_RANK, state), F.lit(0)))
              .withColumn("_previous", F.lag(F.struct("state", "start_ms", "producer_id"))
                          .over(order)))
    previous = F.col("_previous")
    between = (previous.isNull()
               | ~previous["state"].isin("Ongoing", "PrepareCommit", "PrepareAbort")
               | (previous["start_ms"] != F.col("start_ms"))
               | (previous["producer_id"] != F.col("producer_id")))
    states = (states.withColumn("_begins", (state.isin(list(_RANK)) & between).cast("int"))
              .withColumn("_txn", F.sum("_begins").over(
                  order.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
              .where(state.isin(list(_RANK))))
    per = states.groupBy("transactional_id", "_txn").agg(
        F.min(F.struct("log_offset", "ts", "_rank", "producer_id"))["producer_id"]
        .alias("producer_id"),
        F.min(F.when(F.col("start_ms") >= 0, F.col("start_ms"))).alias("start_ms"),
        # the epoch it began with; the one its decision was written with
        F.min(F.when(ongoing, F.col("producer_epoch"))).alias("producer_epoch"),
        F.max(F.when(prepare, F.col("producer_epoch"))).alias("decision_epoch"),
        F.min(F.when(prepare, F.col("ts"))).alias("decided_ts"),
        F.max(F.when(prepare, state)).alias("_decision"),
        F.min(F.when(complete, F.col("ts"))).alias("end_ts"),
        F.max(F.when(complete, state)).alias("_complete"),
        F.max(F.struct("log_offset", "ts", "_rank", "state")).alias("_last"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("topic_partitions"))))
        .alias("partitions"),
        F.max("timeout_ms").alias("timeout_ms"))
    outcome = (F.when(F.col("_complete") == "CompleteCommit", "commit")
               .when(F.col("_complete") == "CompleteAbort", "abort").otherwise("open"))
    began, decided = F.col("producer_epoch"), F.col("decision_epoch")
    # An abort under a bumped epoch is the coordinator's (a fence); it fenced because the
    # transaction was past its timeout, or because a new producer took the id (its
    # InitProducerId). Without the Ongoing state (a log that starts mid-transaction) the
    # epoch it began with is unknown, and so is the reason.
    reason = F.when(F.col("_decision") == "PrepareAbort",
                    F.when(began.isNull(), F.lit(None))
                    .when(decided > began,
                          F.when(F.col("decided_ts") - F.col("start_ms") > F.col("timeout_ms"),
                                 "timeout").otherwise("fenced"))
                    .otherwise("requested"))
    is_open = outcome == "open"
    return (per.select(
        "transactional_id", "producer_id", "producer_epoch",
        F.col("start_ms").alias("start_ts"), "decided_ts", "end_ts",
        (F.col("end_ts") - F.col("start_ms")).alias("duration_ms"),
        outcome.alias("outcome"), reason.alias("abort_reason"),
        F.col("_last.state").alias("state"), F.col("_last.ts").alias("last_ts"),
        "decision_epoch", "partitions", F.size("partitions").alias("partition_count"),
        "timeout_ms",
        F.when(is_open, F.lit(end_ms).cast("long") - F.col("start_ms")).alias("open_ms"))
        .orderBy("transactional_id", "start_ts", "_txn"))


def _counts() -> list[Any]:
    outcome, reason = F.col("outcome"), F.col("abort_reason")

    def count(condition):
        return F.count(F.when(condition, True))

    committed, aborted = count(outcome == "commit"), count(outcome == "abort")
    return [F.count(F.lit(1)).alias("transactions"), committed.alias("committed"),
            aborted.alias("aborted"), count(outcome == "open").alias("open"),
            # null, not an error (ANSI), before any transaction ended
            F.try_divide(aborted, committed + aborted).alias("abort_rate"),
            count((outcome == "abort") & (reason == "requested")).alias("aborted_requested"),
            count((outcome == "abort") & (reason == "timeout")).alias("aborted_timeout"),
            count((outcome == "abort") & (reason == "fenced")).alias("aborted_fenced"),
            F.percentile("duration_ms", F.lit(0.5)).alias("p50_duration_ms"),
            F.percentile("duration_ms", F.lit(0.99)).alias("p99_duration_ms"),
            F.max("duration_ms").alias("max_duration_ms")]


def transactional_ids(txns: DataFrame) -> DataFrame:
    """Per transactional id: the counts (abort_rate = aborted / (committed + aborted), null
    before any transaction ended), the durations of those that ended, when the first began
    and the last ended, and the producer ids it had."""
    return (txns.groupBy("transactional_id")
            .agg(*_counts(), F.min("start_ts").alias("first_start_ts"),
                 F.max("end_ts").alias("last_end_ts"),
                 F.array_sort(F.collect_set("producer_id")).alias("producer_ids"))
            .orderBy(F.col("transactions").desc(), "transactional_id"))


def transaction_summary(txns: DataFrame) -> DataFrame:
    """One row: the same counts over every transactional id."""
    return txns.agg(F.countDistinct("transactional_id").alias("transactional_ids"), *_counts())


def open_transactions(txns: DataFrame) -> DataFrame:
    """The transactions without a Complete state when the log ends, the oldest first:
    past_timeout when open longer than their timeout (the coordinator aborts those)."""
    return (txns.where(F.col("outcome") == "open")
            .select("transactional_id", "producer_id", "producer_epoch", "state", "start_ts",
                    "last_ts", "open_ms", "timeout_ms",
                    (F.col("open_ms") > F.col("timeout_ms")).alias("past_timeout"),
                    "partitions")
            .orderBy("start_ts", "transactional_id"))


def marker_latency(events: DataFrame) -> DataFrame:
    """Per result (COMMIT, ABORT): how long writing every marker of a transaction took
    (exact percentiles of duration_ms) and to how many partitions."""
    pct = F.percentile("duration_ms", F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99)))
    return (events.where(F.col("type") == "txn_markers_written").groupBy("result")
            .agg(F.count(F.lit(1)).alias("transactions"), pct.alias("_p"),
                 F.max("duration_ms").alias("max_ms"), F.avg("duration_ms").alias("mean_ms"),
                 F.avg("partitions").alias("mean_partitions"))
            .select("result", "transactions", F.col("_p")[0].alias("p50_ms"),
                    F.col("_p")[1].alias("p95_ms"), F.col("_p")[2].alias("p99_ms"),
                    "max_ms", "mean_ms", "mean_partitions")
            .orderBy("result"))


# --- the data logs -------------------------------------------------------------------------

MARKER_COLUMNS = ("offset", "key", "is_control", "is_transactional", "error")


def control_markers(records: DataFrame) -> DataFrame:
    """topic, partition, base_offset, marker: every end-transaction marker (a control batch
    holds one record, at its base offset); marker is null for another control type."""
    kind = F.hex(F.substring("key", 3, 2))
    return (records.where(F.col("is_control") & F.col("is_transactional")
                          & F.col("error").isNull() & F.col("key").isNotNull())
            .select("topic", "partition", F.col("offset").alias("base_offset"),
                    lookup(_MARKER_TYPES, kind).alias("marker")))


def partition_transactions(batches: DataFrame, markers: DataFrame) -> DataFrame:
    """One row per transaction of a producer in a partition: its transactional batches
    from the producer's previous marker (or its first batch) to its next marker, and that
    marker: topic, partition, producer_id, producer_epoch, first_offset, last_offset,
    records, batches, first_ts, marker_offset, marker_ts, result (COMMIT, ABORT, open when
    no marker follows, unknown for a marker batch the cleaner emptied). A marker with no
    data of its producer before it (a partition added to a transaction that wrote nothing
    there) is a transaction of 0 records, as Kafka's .txnindex counts it."""
    b = (batches.where(F.col("is_transactional") & F.col("error").isNull()
                       & F.col("last_offset").isNotNull() & (F.col("producer_id") >= 0))
         .join(markers, ["topic", "partition", "base_offset"], "left"))
    before = (Window.partitionBy("topic", "partition", "producer_id").orderBy("base_offset")
              .rowsBetween(Window.unboundedPreceding, -1))
    control = F.col("is_control")
    data = ~control
    b = b.withColumn("_txn", F.coalesce(F.sum(control.cast("int")).over(before), F.lit(0)))
    return (b.groupBy("topic", "partition", "producer_id", "_txn").agg(
        F.coalesce(F.max(F.when(data, F.col("producer_epoch"))),
                   F.max("producer_epoch")).alias("producer_epoch"),
        F.min(F.when(data, F.col("base_offset"))).alias("first_offset"),
        F.max(F.when(data, F.col("last_offset"))).alias("last_offset"),
        F.coalesce(F.sum(F.when(data, F.col("record_count"))), F.lit(0)).cast("long")
        .alias("records"),
        F.count(F.when(data, True)).alias("batches"),
        F.min(F.when(data, F.col("first_timestamp"))).alias("first_ts"),
        F.min(F.when(control, F.col("base_offset"))).alias("marker_offset"),
        F.min(F.when(control, F.col("first_timestamp"))).alias("marker_ts"),
        F.max(F.when(control, F.coalesce(F.col("marker"), F.lit("unknown")))).alias("_marker"))
        .select("topic", "partition", "producer_id", "producer_epoch", "first_offset",
                "last_offset", "records", "batches", "first_ts", "marker_offset", "marker_ts",
                F.coalesce(F.col("_marker"), F.lit("open")).alias("result"))
        .orderBy("topic", "partition", F.coalesce("first_offset", "marker_offset")))


def lso_lag(batches: DataFrame, partition_txns: DataFrame, aborted_txns: DataFrame,
            end_ms: int | None) -> DataFrame:
    """Per partition with transactional data (see docs/ANALYSIS.md): log_end_offset (one
    past the last batch), last_stable_offset (the first offset of the oldest open
    transaction, or the log end offset without one), unstable_offsets (the difference:
    what a read_committed consumer cannot read yet), unstable_records (records in data
    batches from the last stable offset on), the oldest open transaction's producer and
    first batch time (open_since_ts; open_ms to `end_ms`), and the transactions and records
    committed, aborted and open, with txnindex_aborted: the entries of the partition's
    .txnindex files."""
    tp = ["topic", "partition"]
    result = F.col("result")

    def count(condition):
        return F.count(F.when(condition, True))

    def records(condition):
        return F.coalesce(F.sum(F.when(condition, F.col("records"))), F.lit(0)).cast("long")

    is_open = (result == "open") & F.col("first_offset").isNotNull()
    per = partition_txns.groupBy(*tp).agg(
        count(is_open).alias("open_transactions"),
        F.min(F.when(is_open, F.struct("first_offset", "producer_id", "first_ts")))
        .alias("_oldest"),
        count(result == "COMMIT").alias("committed_transactions"),
        count(result == "ABORT").alias("aborted_transactions"),
        records(result == "COMMIT").alias("committed_records"),
        records(result == "ABORT").alias("aborted_records"),
        records(is_open).alias("open_records"))
    headed = batches.where(F.col("last_offset").isNotNull())
    ends = headed.groupBy(*tp).agg((F.max("last_offset") + 1).alias("log_end_offset"))
    indexed = aborted_txns.groupBy(*tp).agg(F.count(F.lit(1)).alias("txnindex_aborted"))
    lso = (per.join(ends, tp).join(indexed, tp, "left")
           .withColumn("last_stable_offset",
                       F.coalesce(F.col("_oldest.first_offset"), F.col("log_end_offset"))))
    past = (headed.where(~F.col("is_control")).join(lso.select(*tp, "last_stable_offset"), tp)
            .where(F.col("base_offset") >= F.col("last_stable_offset"))
            .groupBy(*tp).agg(F.sum("record_count").cast("long").alias("unstable_records")))
    since = F.col("_oldest.first_ts")
    return (lso.join(past, tp, "left").select(
        *tp, "log_end_offset", "last_stable_offset",
        (F.col("log_end_offset") - F.col("last_stable_offset")).alias("unstable_offsets"),
        F.coalesce("unstable_records", F.lit(0)).cast("long").alias("unstable_records"),
        "open_transactions", F.col("_oldest.producer_id").alias("oldest_open_producer_id"),
        since.alias("open_since_ts"),
        (F.lit(end_ms).cast("long") - since).alias("open_ms"),
        "committed_transactions", "aborted_transactions", "committed_records",
        "aborted_records", "open_records",
        F.coalesce("txnindex_aborted", F.lit(0)).cast("long").alias("txnindex_aborted"))
        .orderBy(*tp))


# --- the job -------------------------------------------------------------------------------

_COLOURS = {"commit": "#4caf50", "abort (requested)": "#f44336", "abort (timeout)": "#ff9800",
            "abort (fenced)": "#9c27b0", "abort": "#e57373", "open": "#9e9e9e"}


def _kind(row: dict[str, Any]) -> str:
    if row["outcome"] == "abort":
        return f"abort ({row['abort_reason']})" if row["abort_reason"] else "abort"
    return row["outcome"]


def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("transactions")
    events = ctx.table(spark, "events")
    batches = ctx.table(spark, "batches")
    span = ctx.time_span(spark)
    end_ms = span[1] if span is not None else None

    txns = report.collect(transactions(events, end_ms))
    frame = txns.frame()
    ids = report.collect(transactional_ids(frame))
    summary = report.collect(transaction_summary(frame))
    still_open = report.collect(open_transactions(frame))
    latency = report.collect(marker_latency(events))

    # the markers' types are in their records: decode only the topics that have markers
    topics = [r[0] for r in batches.where(F.col("is_control") & F.col("is_transactional"))
              .select("topic").distinct().collect()]
    markers = control_markers(ctx.records(spark, MARKER_COLUMNS, topics=sorted(topics)))
    per_partition = report.collect(partition_transactions(batches, markers))
    lso = report.collect(lso_lag(batches, per_partition.frame(),
                                 ctx.table(spark, "aborted_txns"), end_ms))
    result.tables.update(transactions=txns, transactional_ids=ids,
                         transaction_summary=summary, open_transactions=still_open,
                         marker_latency=latency, partition_transactions=per_partition,
                         lso_lag=lso)
    result.show += ["transaction_summary", "transactional_ids", "open_transactions",
                    "marker_latency", "lso_lag"]

    rows = txns.rows()
    if not rows:
        result.notes.append(NO_TRANSACTIONS)
    else:
        s = summary.rows()[0]
        rate = "-" if s["abort_rate"] is None else f"{s['abort_rate']:.1%}"
        result.notes.append(
            f"{s['transactions']} transaction(s) of {s['transactional_ids']} transactional "
            f"id(s): {s['committed']} committed, {s['aborted']} aborted "
            f"({s['aborted_requested']} by their producer, {s['aborted_timeout']} timed out, "
            f"{s['aborted_fenced']} fenced by a new producer), {s['open']} open at the end "
            f"of the log ({ms_to_text(end_ms)}); abort rate {rate}")
        for r in still_open.rows():
            result.notes.append(
                f"still open: {r['transactional_id']} (producer {r['producer_id']}, epoch "
                f"{r['producer_epoch']}), {r['state']} since {ms_to_text(r['start_ts'])}, "
                f"open {r['open_ms'] / 1000:.1f} s of its {r['timeout_ms'] / 1000:.0f} s "
                f"timeout")
        result.charts.append(_chart(ctx, rows, ids.rows(), end_ms, span))
    _partition_notes(result, ctx, lso)
    return result


def _chart(ctx, rows: list[dict[str, Any]], ids: list[dict[str, Any]], end_ms: int | None,
           span) -> Any:
    from spark_jobs import report
    lanes = [r["transactional_id"] for r in ids[:CHART_IDS]]
    keep = set(lanes)
    bars = [(r["transactional_id"], r["start_ts"],
             r["end_ts"] if r["end_ts"] is not None else (end_ms or r["last_ts"]), _kind(r))
            for r in rows if r["transactional_id"] in keep]
    # a tick where each abort was decided: a transaction of a millisecond is no wider
    aborts = [(r["transactional_id"], r["decided_ts"], "abort decided") for r in rows
              if r["transactional_id"] in keep and r["decided_ts"] is not None
              and (r["outcome"] == "abort" or r["state"] == "PrepareAbort")]
    title = "transactions over time, by transactional id"
    if len(ids) > CHART_IDS:
        title += f" (the {CHART_IDS} with the most of {len(ids)})"
    return report.gantt(ctx.job_dir("transactions") / "transactions.png", bars, title,
                        points=aborts, span=span, lanes=lanes, colours=_COLOURS)


def _partition_notes(result: JobResult, ctx, lso) -> None:
    from spark_jobs import report
    pdf: pd.DataFrame = lso.pandas()
    held = pdf[pdf["unstable_offsets"] > 0]
    if not held.empty:
        labels = (held["topic"] + "-" + held["partition"].astype(str)).tolist()
        result.notes.append(
            f"{len(held)} partition(s) held back by an open transaction (offsets a "
            f"read_committed consumer cannot read yet): " + ", ".join(
                f"{label} ({n})" for label, n in zip(labels, held["unstable_offsets"])))
        result.charts.append(report.bars(
            ctx.job_dir("transactions") / "unstable_offsets.png", labels,
            held["unstable_offsets"].tolist(),
            "offsets past the last stable offset, per partition", "offsets"))
    differ = pdf[pdf["txnindex_aborted"] != pdf["aborted_transactions"]]
    for _, r in differ.iterrows():
        result.notes.append(
            f"{r['topic']}-{r['partition']}: {r['aborted_transactions']} ABORT marker(s) in "
            f"the log but {r['txnindex_aborted']} aborted transaction(s) in its .txnindex "
            f"files")
