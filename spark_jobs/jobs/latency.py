"""The request latency job: how long the broker took to answer, per API and minute, with
the consumer-group rebalances marked so a latency spike can be laid beside its cause.

Owns the pure transforms
- `request_latency(events, bucket_ms)`: broker, api, api_key, bucket_ts, requests, errors,
  p50_ms, p95_ms, p99_ms, max_ms, mean_ms (exact percentiles of latency_ms);
- `rebalance_markers(events)`: ts, group, generation, reason of every entry into
  PreparingRebalance;
and `run(spark, ctx)`. Request events are sampled by the broker (broker/events.py): the
percentiles describe the sample.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.jobs import JobResult

if TYPE_CHECKING:
    import pandas as pd  # pandas ships no types: this names what toPandas() returns

__all__ = ["request_latency", "rebalance_markers", "run"]

MINUTE_MS = 60_000


def request_latency(events: DataFrame, bucket_ms: int = MINUTE_MS) -> DataFrame:
    req = (events.where((F.col("type") == "request") & F.col("latency_ms").isNotNull())
           .withColumn("bucket_ts", (F.floor(F.col("ts") / bucket_ms) * bucket_ms).cast("long")))
    pct = F.percentile(F.col("latency_ms"), F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99)))
    failed = (F.col("error").isNotNull() & (F.col("error") != "") & (F.col("error") != "NONE"))
    return (req.groupBy("broker", "api", "api_key", "bucket_ts")
            .agg(F.count(F.lit(1)).alias("requests"),
                 F.sum(failed.cast("int")).cast("long").alias("errors"),
                 pct.alias("_p"), F.max("latency_ms").alias("max_ms"),
                 F.avg("latency_ms").alias("mean_ms"))
            .select("broker", "api", "api_key", "bucket_ts", "requests", "errors",
                    F.col("_p")[0].alias("p50_ms"), F.col("_p")[1].alias("p95_ms"),
                    F.col("_p")[2].alias("p99_ms"), "max_ms", "mean_ms")
            .orderBy("broker", "api", "bucket_ts"))


def rebalance_markers(events: DataFrame) -> DataFrame:
    return (events.where((F.col("type") == "group_state")
                         & (F.col("new_state") == "PreparingRebalance"))
            .select("ts", "group", "generation", "reason").orderBy("ts"))


def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("latency")
    events = ctx.table(spark, "events")
    # each table runs once (report.Collected): its files and the charts come from that
    latency = report.collect(request_latency(events))
    markers = report.collect(rebalance_markers(events))
    result.tables.update(request_latency=latency, rebalance_markers=markers)
    overall = (events.where(F.col("type") == "request").groupBy("api")
               .agg(F.count(F.lit(1)).alias("requests"),
                    F.percentile("latency_ms", F.lit(0.5)).alias("p50_ms"),
                    F.percentile("latency_ms", F.lit(0.99)).alias("p99_ms"),
                    F.max("latency_ms").alias("max_ms"))
               .orderBy(F.col("requests").desc()))
    result.tables["latency_by_api"] = overall
    result.show.append("latency_by_api")
    pdf: pd.DataFrame = latency.pandas()
    if pdf.empty:
        result.notes.append("no request events in the event log")
        return result
    marks = [(r["ts"], r["group"]) for r in markers.rows()]
    busiest = pdf.groupby("api")["requests"].sum().sort_values(ascending=False).index
    out_dir = ctx.job_dir("latency")
    span = ctx.time_span(spark)
    for column in ("p50_ms", "p99_ms", "max_ms"):
        series = {api: (pdf.loc[pdf.api == api, "bucket_ts"].tolist(),
                        pdf.loc[pdf.api == api, column].tolist()) for api in busiest}
        result.charts.append(report.lines(out_dir / f"latency_{column[:-3]}.png", series,
                                          f"request latency {column[:-3]} per minute, by API",
                                          "ms", markers=marks, span=span,
                                          bucket_ms=MINUTE_MS))
    result.notes.append(f"{len(marks)} rebalance start(s) marked (group_state to "
                        f"PreparingRebalance)")
    return result
