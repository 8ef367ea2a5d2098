"""The authentication failures job: who failed to authenticate, from where, how and when,
from the brokers' `auth_failure` events (declared in broker/events.py: principal, listener,
peer, mechanism, reason; one per connection refused at the TLS handshake or SASL).

Owns the pure transforms
- `auth_failures(events)`: ts, broker, principal, peer_host, listener, mechanism, reason:
  each failure, the peer without its port (a client reconnects from a new port each time);
- `failures_by_source(events)`: principal, peer_host, failures, first_ts, last_ts,
  mechanisms, reasons, brokers: one row per principal and peer host, the busiest first:
  the table an operator reads to find a misconfigured client or someone guessing passwords;
- `failures_per_minute(events)`: bucket_ts, principal, peer_host, failures: the same over
  time, one-minute buckets (the table `auth`);
and `run(spark, ctx)`, which also charts failures per minute for the busiest sources.

A failure before the client named itself (a TLS handshake that failed, a mechanism the
listener does not offer) has the principal "" and is shown as "(none)".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.jobs import JobResult

if TYPE_CHECKING:
    import pandas as pd  # pandas ships no types: this names what toPandas() returns

__all__ = ["NO_FAILURES", "auth_failures", "failures_by_source", "failures_per_minute", "run",
           "CHART_SOURCES"]

NO_FAILURES = "no authentication failures in the event log"
UNNAMED = "(none)"
CHART_SOURCES = 8  # lines in the chart: the sources with the most failures
_SOURCE = ["principal", "peer_host"]
MINUTE_MS = 60_000


def _host(peer: F.Column) -> F.Column:
    """`10.0.0.7:51234` -> `10.0.0.7`; `[::1]:51234` -> `::1`; a peer without a port as is."""
    without_port = F.when(peer.rlike(r":\d+$"), F.regexp_replace(peer, r":\d+$", "")) \
        .otherwise(peer)
    return F.regexp_replace(without_port, r"^\[(.*)\]$", "$1")


def auth_failures(events: DataFrame) -> DataFrame:
    principal = F.coalesce(F.col("principal"), F.lit(""))
    return (events.where(F.col("type") == "auth_failure")
            .select("ts", "broker",
                    F.when(principal == "", F.lit(UNNAMED)).otherwise(principal)
                    .alias("principal"),
                    _host(F.coalesce(F.col("peer"), F.lit(""))).alias("peer_host"),
                    "listener", "mechanism", "reason"))


def failures_by_source(events: DataFrame) -> DataFrame:
    return (auth_failures(events).groupBy(*_SOURCE)
            .agg(F.count(F.lit(1)).alias("failures"),
                 F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"),
                 F.array_sort(F.collect_set("mechanism")).alias("mechanisms"),
                 F.array_sort(F.collect_set("reason")).alias("reasons"),
                 F.array_sort(F.collect_set("broker")).alias("brokers"))
            .orderBy(F.col("failures").desc(), *_SOURCE))


def failures_per_minute(events: DataFrame) -> DataFrame:
    bucket = (F.floor(F.col("ts") / MINUTE_MS) * MINUTE_MS).cast("long")
    return (auth_failures(events).withColumn("bucket_ts", bucket)
            .groupBy("bucket_ts", *_SOURCE).agg(F.count(F.lit(1)).alias("failures"))
            .orderBy("bucket_ts", *_SOURCE))


def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("auth")
    events = ctx.table(spark, "events")
    by_source = report.collect(failures_by_source(events))
    per_minute = report.collect(failures_per_minute(events))
    # `auth` is the table: failures per principal and peer over time
    result.tables.update(auth=per_minute, auth_failures=auth_failures(events),
                         auth_by_source=by_source)
    result.show.append("auth_by_source")
    pdf: pd.DataFrame = per_minute.pandas()
    if pdf.empty:
        result.notes.append(NO_FAILURES)
        return result
    pdf["source"] = pdf["principal"] + "@" + pdf["peer_host"]
    busiest = (pdf.groupby("source")["failures"].sum().sort_values(ascending=False)
               .index[:CHART_SOURCES])
    series = {source: (pdf.loc[pdf.source == source, "bucket_ts"].tolist(),
                       pdf.loc[pdf.source == source, "failures"].tolist())
              for source in busiest}
    result.charts.append(report.lines(ctx.job_dir("auth") / "auth_failures.png", series,
                                      "authentication failures per minute, by principal "
                                      "and peer", "failures", span=ctx.time_span(spark),
                                      bucket_ms=MINUTE_MS))
    result.notes.append(f"{int(pdf['failures'].sum())} authentication failure(s) from "
                        f"{pdf['source'].nunique()} principal/peer pair(s)")
    return result
