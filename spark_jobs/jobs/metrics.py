"""The broker metrics job: the figures each broker recorded in its `metrics` events (the
ones its Prometheus endpoint serves, broker/metrics.py) charted over the report's time
axis: records and bytes in and out per second, partitions, leaders and under-replicated
partitions, ISR shrinks and expands, and requests per second and their mean time by request.

Owns the pure transforms
- `broker_metrics(events)`: ts, broker, from_ts, every figure of the event, and for each
  counter its rate over the interval since the broker's previous metrics event
  (`<counter>_delta`, and `<counter>_per_s`), null for a broker's first;
- `request_rates(events)`: broker, request, from_ts, ts, requests, requests_per_s,
  mean_ms: the same for each request name's count and total time;
- `metrics_summary(events)`: broker, samples, first_ts, last_ts, messages_in, bytes_in,
  bytes_out, isr_shrinks, isr_expands, max_under_replicated, last_partition_count,
  last_leader_count, active_controller_samples: one row per broker;
- `client_metrics(events)`: ts, broker, client_id, client_instance_id, metric, attributes,
  value: every point the clients pushed (KIP-714 `client_metrics` events);
and `run(spark, ctx)`, which also charts the latencies the clients measured.

The counters are totals since the broker's process started: one that went down between two
events is a restart, and the interval counts the new total from 0. The controller's figures
are the active controller's (0 on the other nodes), so summing over brokers counts once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.jobs import JobResult

if TYPE_CHECKING:
    import pandas as pd  # pandas ships no types: this names what toPandas() returns

__all__ = ["NO_METRICS", "COUNTERS", "GAUGES", "broker_metrics", "request_rates",
           "metrics_summary", "client_metrics", "run"]

NO_METRICS = ("no metrics events in the event log (a broker writes one every "
              "events.metrics.interval.ms and at shutdown)")
# totals since the process started: charted as rates
COUNTERS = ("messages_in", "bytes_in", "bytes_out", "replication_bytes_out",
            "failed_produce_requests", "isr_shrinks", "isr_expands",
            "fetch_session_evictions")
# read when the event was written
GAUGES = ("partition_count", "leader_count", "under_replicated_partitions",
          "under_min_isr_partitions", "at_min_isr_partitions", "offline_replicas",
          "fetch_sessions", "fetch_session_partitions", "connections", "broker_state",
          "active_controller", "offline_partitions", "global_topics", "global_partitions",
          "active_brokers", "fenced_brokers", "preferred_replica_imbalance")
CHART_REQUESTS = 8  # lines in the request charts: the busiest request names and brokers


def _delta(column: str, window) -> F.Column:
    """The counter's growth since the previous sample; a total that went down is a
    restart, which counts from 0."""
    prev = F.lag(column).over(window)
    return (F.when(prev.isNull(), F.lit(None))
            .when(F.col(column) >= prev, F.col(column) - prev)
            .otherwise(F.col(column)))


def broker_metrics(events: DataFrame) -> DataFrame:
    w = Window.partitionBy("broker").orderBy("ts")
    m = events.where(F.col("type") == "metrics").withColumn("from_ts", F.lag("ts").over(w))
    seconds = (F.col("ts") - F.col("from_ts")) / 1000
    for counter in COUNTERS:
        m = m.withColumn(f"{counter}_delta", _delta(counter, w))
        m = m.withColumn(f"{counter}_per_s", F.when(seconds > 0, F.col(f"{counter}_delta")
                                                     / seconds))
    keep = ["ts", "broker", "from_ts", *COUNTERS, *GAUGES]
    keep += [f"{c}_delta" for c in COUNTERS] + [f"{c}_per_s" for c in COUNTERS]
    return m.select(*keep).orderBy("broker", "ts")


def _named(column: str, alias: str) -> F.Column:
    """A "name=value" array as a map name -> double."""
    return F.map_from_entries(F.transform(
        F.coalesce(F.col(column), F.array().cast("array<string>")),
        lambda s: F.struct(F.substring_index(s, "=", 1).alias("k"),
                           F.substring_index(s, "=", -1).cast("double").alias("v")))
    ).alias(alias)


def request_rates(events: DataFrame) -> DataFrame:
    m = (events.where(F.col("type") == "metrics")
         .select("ts", "broker", _named("requests", "counts"),
                 _named("request_time_ms", "times")))
    per = m.select("ts", "broker", "times", F.explode("counts").alias("request", "count")) \
        .select("ts", "broker", "request", "count",
                F.coalesce(F.col("times")[F.col("request")], F.lit(0.0)).alias("time_ms"))
    w = Window.partitionBy("broker", "request").orderBy("ts")
    requests = _delta("count", w)
    time_ms = _delta("time_ms", w)
    seconds = (F.col("ts") - F.col("from_ts")) / 1000
    return (per.withColumn("from_ts", F.lag("ts").over(w))
            .withColumn("requests", requests.cast("long"))
            .withColumn("_time", time_ms)
            .where(F.col("requests").isNotNull())
            .select("broker", "request", "from_ts", "ts", "requests",
                    F.when(seconds > 0, F.col("requests") / seconds).alias("requests_per_s"),
                    F.when(F.col("requests") > 0, F.col("_time") / F.col("requests"))
                    .alias("mean_ms"))
            .orderBy("broker", "request", "ts"))


def metrics_summary(events: DataFrame) -> DataFrame:
    m = broker_metrics(events)
    # a broker's first sample counts whole: its process counted from 0
    total = {c: F.sum(F.when(F.col("from_ts").isNull(), F.col(c))
                      .otherwise(F.col(f"{c}_delta")))
             for c in ("messages_in", "bytes_in", "bytes_out", "isr_shrinks", "isr_expands")}
    last = F.max_by
    return (m.groupBy("broker")
            .agg(F.count(F.lit(1)).alias("samples"), F.min("ts").alias("first_ts"),
                 F.max("ts").alias("last_ts"),
                 *[v.cast("long").alias(c) for c, v in total.items()],
                 F.max("under_replicated_partitions").alias("max_under_replicated"),
                 last("partition_count", "ts").alias("last_partition_count"),
                 last("leader_count", "ts").alias("last_leader_count"),
                 F.sum("active_controller").alias("active_controller_samples"))
            .orderBy("broker"))


def client_metrics(events: DataFrame) -> DataFrame:
    """`name{k=v,...}=value` points, one row each."""
    pushes = events.where(F.col("type") == "client_metrics")
    points = pushes.select("ts", "broker", "client_id", "client_instance_id",
                           F.explode("points").alias("point"))
    value_at = F.length("point") - F.locate("=", F.reverse("point")) + 1  # the last "="
    head = F.expr("substring(point, 1, length(point) - locate('=', reverse(point)))")
    return (points.select("ts", "broker", "client_id", "client_instance_id",
                          F.regexp_extract(head, r"^([^{]*)", 1).alias("metric"),
                          F.regexp_extract(head, r"\{(.*)\}$", 1).alias("attributes"),
                          F.substring("point", value_at + 1, 1 << 16).cast("double")
                          .alias("value"))
            .orderBy("ts", "client_id", "metric", "attributes"))


def _series(pdf: pd.DataFrame, key: str, x: str, y: str, label=str
            ) -> dict[str, tuple[list, list]]:
    return {label(k): (g[x].tolist(), g[y].tolist()) for k, g in pdf.groupby(key)}


def _rate_series(pdf: pd.DataFrame, key: str, y: str, label=str
                 ) -> dict[str, tuple[list, list]]:
    """A rate over (from_ts, ts] drawn as a step from from_ts, held to the last ts."""
    out = {}
    for k, g in pdf.dropna(subset=[y]).groupby(key):
        xs, ys = g["from_ts"].tolist(), g[y].tolist()
        out[label(k)] = (xs + g["ts"].tolist()[-1:], ys + ys[-1:])
    return out


def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("metrics")
    events = ctx.table(spark, "events")
    samples = report.collect(broker_metrics(events))
    requests = report.collect(request_rates(events))
    summary = report.collect(metrics_summary(events))
    clients = report.collect(client_metrics(events))
    result.tables.update(broker_metrics=samples, request_rates=requests,
                         metrics_summary=summary, client_metrics=clients)
    result.show.append("metrics_summary")
    out_dir, span = ctx.job_dir("metrics"), ctx.time_span(spark)
    _client_charts(result, clients.pandas(), out_dir, span)
    pdf: pd.DataFrame = samples.pandas()
    if pdf.empty:
        result.notes.append(NO_METRICS)
        return result
    broker = lambda b: f"broker {b}"  # noqa: E731
    charts = result.charts
    charts.append(report.lines(out_dir / "messages_in.png",
                               _rate_series(pdf, "broker", "messages_in_per_s", broker),
                               "records in per second (MessagesInPerSec), by broker",
                               "records / s", step=True, span=span, zero_based=True))
    bytes_series = {}
    for column, what in (("bytes_in_per_s", "in"), ("bytes_out_per_s", "out"),
                         ("replication_bytes_out_per_s", "replication out")):
        for name, xy in _rate_series(pdf, "broker", column, broker).items():
            bytes_series[f"{name} {what}"] = xy
    charts.append(report.lines(out_dir / "bytes.png", bytes_series,
                               "record bytes per second in, out to consumers and to "
                               "followers, by broker", "bytes / s", step=True, span=span,
                               zero_based=True))
    replication = _series(pdf, "broker", "ts", "under_replicated_partitions",
                          lambda b: f"broker {b} under-replicated")
    replication |= _series(pdf, "broker", "ts", "under_min_isr_partitions",
                           lambda b: f"broker {b} under min ISR")
    offline = pdf[pdf.active_controller == 1]
    if not offline.empty:
        replication["offline (active controller)"] = (offline["ts"].tolist(),
                                                       offline["offline_partitions"].tolist())
    charts.append(report.lines(out_dir / "under_replicated.png", replication,
                               "under-replicated partitions led by each broker, and offline "
                               "partitions", "partitions", step=True, span=span,
                               zero_based=True))
    counts = _series(pdf, "broker", "ts", "partition_count", lambda b: f"broker {b} replicas")
    counts |= _series(pdf, "broker", "ts", "leader_count", lambda b: f"broker {b} leaders")
    charts.append(report.lines(out_dir / "partitions.png", counts,
                               "partitions and leaders per broker", "partitions", step=True,
                               span=span, zero_based=True))
    isr = _rate_series(pdf, "broker", "isr_shrinks_delta", lambda b: f"broker {b} shrinks")
    isr |= _rate_series(pdf, "broker", "isr_expands_delta", lambda b: f"broker {b} expands")
    charts.append(report.lines(out_dir / "isr_changes.png", isr,
                               "ISR shrinks and expands per interval, by leader", "changes",
                               step=True, span=span, zero_based=True))
    rdf: pd.DataFrame = requests.pandas()
    if not rdf.empty:
        rdf = rdf.assign(key=rdf["request"] + " @" + rdf["broker"].astype(str))
        busiest = (rdf.groupby("key")["requests"].sum().sort_values(ascending=False)
                   .index[:CHART_REQUESTS])
        rdf = rdf[rdf.key.isin(busiest)]
        charts.append(report.lines(out_dir / "requests.png",
                                   _rate_series(rdf, "key", "requests_per_s"),
                                   "requests per second, by request and broker",
                                   "requests / s", step=True, span=span, zero_based=True))
        charts.append(report.lines(out_dir / "request_time.png",
                                   _rate_series(rdf, "key", "mean_ms"),
                                   "mean request time (TotalTimeMs) per interval, by request "
                                   "and broker", "ms", step=True, span=span, zero_based=True))
    result.notes.append(f"{len(pdf)} metrics event(s) from {pdf['broker'].nunique()} "
                        f"broker(s); rates are over the interval between a broker's events")
    return result


def _client_charts(result: JobResult, cdf: pd.DataFrame, out_dir, span) -> None:
    """What the clients measured: each client's latencies (the metrics named *latency.avg,
    per broker node where the client reports them so)."""
    from spark_jobs import report
    if cdf.empty:
        return
    latency = cdf[cdf.metric.str.endswith("latency.avg")]
    if not latency.empty:
        short = latency.metric.str.replace("org.apache.kafka.", "", regex=False)
        key = latency.client_id + " " + short + latency.attributes.map(
            lambda a: f" {{{a}}}" if a else "")
        series = _series(latency.assign(key=key), "key", "ts", "value")
        result.charts.append(report.lines(out_dir / "client_latency.png", series,
                                          "latencies the clients measured (KIP-714 pushes)",
                                          "ms", step=True, span=span, zero_based=True))
    result.notes.append(f"{cdf.client_instance_id.nunique()} client instance(s) pushed "
                        f"{len(cdf)} metric point(s) (KIP-714)")
