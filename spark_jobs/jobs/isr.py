"""The ISR and leadership health job: under-replication, ISR churn and leader moves per
partition, and Cruise Control's per-broker Leader / OutOfSync counts, from the replication
events (leader_change, isr_change; declared in broker/events.py). A single broker at
replication factor 1 writes none: the tables are then empty and the report says so.

Owns the pure transforms
- `isr_timeline(events, end_ts)`: topic, partition, ts, isr_size, replication_factor,
  under_replicated, until_ts: each ISR state and how long it lasted;
- `partition_health(events, end_ts)`: topic, partition, replication_factor, isr_shrinks,
  isr_expands, leader_changes, under_replicated_s, last_leader, last_isr;
- `broker_health(events)`: broker, leaders, out_of_sync, isr_shrinks_led: at the end of
  the log, the partitions each broker leads and those it fell out of the ISR of;
and `run(spark, ctx)`.

The replication factor of a topic is its topic_create event's; without one, the largest ISR
the partition ever had.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.jobs import JobResult

if TYPE_CHECKING:
    import pandas as pd  # pandas ships no types: this names what toPandas() returns

__all__ = ["NO_EVENTS", "replication_events", "isr_timeline", "partition_health",
           "broker_health", "run"]

NO_EVENTS = "no replication events (single broker)"
_TP = ["topic", "partition"]


def replication_events(events: DataFrame) -> DataFrame:
    return events.where(F.col("type").isin("leader_change", "isr_change"))


def _replication_factor(events: DataFrame, isr: DataFrame) -> DataFrame:
    created = (events.where(F.col("type") == "topic_create")
               .groupBy("topic").agg(F.max_by("replication_factor", "ts").alias("_rf")))
    seen = isr.groupBy(*_TP).agg(
        F.max(F.greatest(F.size("old_isr"), F.size("new_isr"))).alias("_seen"))
    return (seen.join(created, "topic", "left")
            .select(*_TP, F.coalesce("_rf", "_seen").cast("long").alias("replication_factor")))


def isr_timeline(events: DataFrame, end_ts: int | None) -> DataFrame:
    isr = (events.where(F.col("type") == "isr_change")
           .select(*_TP, "ts", "old_isr", "new_isr", "kind",
                   F.col("leader_id").alias("leader")))
    w = Window.partitionBy(*_TP).orderBy("ts")
    end = F.lit(end_ts).cast("long") if end_ts is not None else F.col("ts")
    return (isr.join(_replication_factor(events, isr), _TP)
            .withColumn("isr_size", F.size("new_isr").cast("long"))
            .withColumn("under_replicated", F.col("isr_size") < F.col("replication_factor"))
            .withColumn("until_ts", F.coalesce(F.lead("ts").over(w), end))
            .select(*_TP, "ts", "kind", "leader", "new_isr", "isr_size", "replication_factor",
                    "under_replicated", "until_ts"))


def partition_health(events: DataFrame, end_ts: int | None) -> DataFrame:
    timeline = isr_timeline(events, end_ts)
    isr = timeline.groupBy(*_TP).agg(
        F.max("replication_factor").alias("replication_factor"),
        F.sum((F.col("kind") == "shrink").cast("int")).cast("long").alias("isr_shrinks"),
        F.sum((F.col("kind") == "expand").cast("int")).cast("long").alias("isr_expands"),
        (F.sum(F.when(F.col("under_replicated"), F.col("until_ts") - F.col("ts"))
               .otherwise(0)) / 1000.0).alias("under_replicated_s"),
        F.max_by("new_isr", "ts").alias("last_isr"))
    leaders = (events.where(F.col("type") == "leader_change").groupBy(*_TP)
               .agg(F.count(F.lit(1)).alias("leader_changes"),
                    F.max_by("new_leader", "ts").alias("last_leader")))
    return (isr.join(leaders, _TP, "full_outer")
            .select(*_TP, "replication_factor",
                    F.coalesce("isr_shrinks", F.lit(0)).cast("long").alias("isr_shrinks"),
                    F.coalesce("isr_expands", F.lit(0)).cast("long").alias("isr_expands"),
                    F.coalesce("leader_changes", F.lit(0)).cast("long").alias("leader_changes"),
                    F.coalesce("under_replicated_s", F.lit(0.0)).alias("under_replicated_s"),
                    "last_leader", "last_isr")
            .orderBy(*_TP))


def broker_health(events: DataFrame) -> DataFrame:
    """A broker is out of sync for a partition when it was in some ISR of it but is not in
    the last one (the replicas are not in the event log; the ISRs ever seen stand in)."""
    isr = events.where(F.col("type") == "isr_change")
    last = isr.groupBy(*_TP).agg(F.max_by("new_isr", "ts").alias("last_isr"),
                                 F.max_by("leader_id", "ts").alias("isr_leader"))
    ever = (isr.select(*_TP, F.explode(F.array_union(
        F.coalesce("old_isr", F.array().cast("array<long>")),
        F.coalesce("new_isr", F.array().cast("array<long>")))).alias("broker")).distinct())
    out_of_sync = (ever.join(last, _TP).where(~F.array_contains("last_isr", F.col("broker")))
                   .groupBy("broker").agg(F.count(F.lit(1)).alias("out_of_sync")))
    leader_now = (events.where(F.col("type") == "leader_change").groupBy(*_TP)
                  .agg(F.max_by("new_leader", "ts").alias("broker")))
    leaders = leader_now.groupBy("broker").agg(F.count(F.lit(1)).alias("leaders"))
    shrinks = (isr.where(F.col("kind") == "shrink").groupBy(F.col("leader_id").alias("broker"))
               .agg(F.count(F.lit(1)).alias("isr_shrinks_led")))
    brokers = (ever.select("broker").union(leaders.select("broker"))
               .union(shrinks.select("broker")).distinct())
    return (brokers.join(leaders, "broker", "left").join(out_of_sync, "broker", "left")
            .join(shrinks, "broker", "left")
            .select("broker", *[F.coalesce(c, F.lit(0)).cast("long").alias(c)
                                for c in ("leaders", "out_of_sync", "isr_shrinks_led")])
            .orderBy("broker"))


def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("isr")
    events = ctx.table(spark, "events")
    end_ts = events.agg(F.max("ts")).first()[0]
    timeline = report.collect(isr_timeline(events, end_ts))
    result.tables.update(isr_timeline=timeline, partition_health=partition_health(events, end_ts),
                         broker_health=broker_health(events))
    result.show += ["partition_health", "broker_health"]
    if replication_events(events).limit(1).count() == 0:
        result.notes.append(NO_EVENTS)
        return result
    pdf: pd.DataFrame = timeline.pandas(["ts", "until_ts", "topic", "partition",
                                         "under_replicated"])
    if not pdf.empty:
        # the count of under-replicated partitions, stepping at every ISR change
        changes = []
        for _, r in pdf.iterrows():
            if r["under_replicated"]:
                changes += [(r["ts"], 1), (r["until_ts"], -1)]
        changes.sort()
        xs, ys, level = [], [], 0
        for ts, d in changes:
            level += d
            xs.append(ts)
            ys.append(level)
        if xs:
            result.charts.append(report.lines(ctx.job_dir("isr") / "under_replicated.png",
                                              {"under-replicated partitions": (xs, ys)},
                                              "under-replicated partitions", "partitions",
                                              step=True))
    return result
