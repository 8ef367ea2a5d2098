"""The ISR and leadership health job: under-replicated intervals and how long each took to
recover, ISR churn, leader moves and offline time per partition, and Cruise Control's
per-broker Leader / OutOfSync counts, from the replication events (leader_change,
isr_change, broker_fenced / broker_unfenced; declared in broker/events.py). A single broker
at replication factor 1 writes none: the tables are then empty and the report says so.

Owns the pure transforms
- `isr_timeline(events, end_ts)`: topic, partition, ts, kind, leader, old_isr, new_isr,
  isr_size, replication_factor, under_replicated, until_ts: each ISR state and how long it
  lasted;
- `under_replicated_intervals(timeline)`: topic, partition, start_ts, end_ts, duration_ms,
  recovered, replication_factor, min_isr_size, isr_shrinks, left_isr: each stretch from the
  ISR change that left the partition short of its replication factor to the one that
  brought the ISR back to it (end_ts null, and duration up to the end of the log, while it
  has not come back);
- `leader_changes(events, end_ts)`: topic, partition, ts, leader_epoch, old_leader,
  new_leader, reason, until_ts: each leadership, once per leader epoch;
- `partition_health(events, end_ts)`: topic, partition, replication_factor, isr_shrinks,
  isr_expands, leader_changes, under_replicated_intervals, recoveries, max_recovery_ms,
  total_recovery_ms, under_replicated_s, under_replicated_now, offline_s, last_leader,
  last_isr;
- `broker_health(events)`: broker, leaders, out_of_sync, isr_shrinks_led: at the end of
  the log, the partitions each broker leads and those it fell out of the ISR of;
and `run(spark, ctx)`, which also draws the under-replicated count and a timeline of every
partition's ISR states, leader changes and broker fencing.

The replication factor of a topic is its topic_create event's; without one, the largest ISR
the partition ever had. Events are ordered by `ts` only: two ISR changes of one partition in
the same millisecond have no order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.jobs import JobResult, ms_to_text

if TYPE_CHECKING:
    import pandas as pd  # pandas ships no types: this names what toPandas() returns

__all__ = ["NO_EVENTS", "replication_events", "isr_timeline", "under_replicated_intervals",
           "leader_changes", "partition_health", "broker_health", "run", "TIMELINE_LANES"]

NO_EVENTS = "no replication events (single broker)"
TIMELINE_LANES = 30  # partitions in the timeline chart: the longest under-replicated first
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


def _end(end_ts: int | None):
    return F.lit(end_ts).cast("long") if end_ts is not None else F.col("ts")


def isr_timeline(events: DataFrame, end_ts: int | None) -> DataFrame:
    isr = (events.where(F.col("type") == "isr_change")
           .select(*_TP, "ts", "old_isr", "new_isr", "kind",
                   F.col("leader_id").alias("leader")))
    w = Window.partitionBy(*_TP).orderBy("ts")
    return (isr.join(_replication_factor(events, isr), _TP)
            .withColumn("isr_size", F.size("new_isr").cast("long"))
            .withColumn("under_replicated", F.col("isr_size") < F.col("replication_factor"))
            .withColumn("until_ts", F.coalesce(F.lead("ts").over(w), _end(end_ts)))
            .select(*_TP, "ts", "kind", "leader", "old_isr", "new_isr", "isr_size",
                    "replication_factor", "under_replicated", "until_ts")
            .orderBy(*_TP, "ts"))


def under_replicated_intervals(timeline: DataFrame) -> DataFrame:
    """Runs of consecutive under-replicated ISR states of isr_timeline's table. An ISR that
    grows but stays short (1 -> 2 of 3) does not end the run; the change that brings it
    back to the replication factor does, and `end_ts` is that change's time."""
    w = Window.partitionBy(*_TP).orderBy("ts")
    starts = F.col("under_replicated") & ~F.coalesce(F.lag("under_replicated").over(w),
                                                     F.lit(False))
    # brokers a shrink took out of the ISR
    left = F.when(F.col("kind") == "shrink",
                  F.array_except(F.coalesce("old_isr", F.array().cast("array<long>")),
                                 F.coalesce("new_isr", F.array().cast("array<long>"))))
    runs = (timeline
            .withColumn("_next_ts", F.lead("ts").over(w))
            .withColumn("_run", F.sum(starts.cast("long")).over(
                w.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
            .withColumn("_left", left)
            .where(F.col("under_replicated")))
    return (runs.groupBy(*_TP, "_run").agg(
                F.min("ts").alias("start_ts"),
                F.max_by("_next_ts", "ts").alias("end_ts"),
                F.max("until_ts").alias("_until_ts"),
                F.max("replication_factor").alias("replication_factor"),
                F.min("isr_size").alias("min_isr_size"),
                F.count(F.when(F.col("kind") == "shrink", 1)).alias("isr_shrinks"),
                F.array_sort(F.array_distinct(F.flatten(F.collect_list(
                    F.coalesce("_left", F.array().cast("array<long>")))))).alias("left_isr"))
            .select(*_TP, "start_ts", "end_ts",
                    (F.col("_until_ts") - F.col("start_ts")).cast("long").alias("duration_ms"),
                    F.col("end_ts").isNotNull().alias("recovered"), "replication_factor",
                    "min_isr_size", "isr_shrinks", "left_isr")
            .orderBy(*_TP, "start_ts"))


def leader_changes(events: DataFrame, end_ts: int | None) -> DataFrame:
    """One row per leadership: a leader epoch names one, so a leader_change seen twice
    (written by two controller nodes, or read from two copies of a log) counts once; its
    first sighting stands. `until_ts` is when the next leadership began (or end_ts)."""
    lc = (events.where(F.col("type") == "leader_change")
          .select(*_TP, "ts", "leader_epoch", "old_leader", "new_leader", "reason"))
    first = Window.partitionBy(*_TP, "leader_epoch").orderBy("ts")
    once = (lc.withColumn("_n", F.row_number().over(first))
            .where((F.col("_n") == 1) | F.col("leader_epoch").isNull()).drop("_n"))
    w = Window.partitionBy(*_TP).orderBy("ts", "leader_epoch")
    return (once.withColumn("until_ts", F.coalesce(F.lead("ts").over(w), _end(end_ts)))
            .orderBy(*_TP, "ts", "leader_epoch"))


def partition_health(events: DataFrame, end_ts: int | None,
                     timeline: DataFrame | None = None,
                     leaders: DataFrame | None = None) -> DataFrame:
    """Per partition. `timeline` and `leaders` are isr_timeline's and leader_changes'
    tables when the caller has them already. A leader change is a leadership whose leader
    differs from the one before (an epoch bump that keeps the leader is not one);
    `offline_s` is the time spent with no leader (new_leader -1)."""
    timeline = isr_timeline(events, end_ts) if timeline is None else timeline
    leaders = leader_changes(events, end_ts) if leaders is None else leaders
    isr = timeline.groupBy(*_TP).agg(
        F.max("replication_factor").alias("replication_factor"),
        F.count(F.when(F.col("kind") == "shrink", 1)).alias("isr_shrinks"),
        F.count(F.when(F.col("kind") == "expand", 1)).alias("isr_expands"),
        F.max_by("new_isr", "ts").alias("last_isr"))
    recovered = F.col("recovered")
    stretches = under_replicated_intervals(timeline).groupBy(*_TP).agg(
        F.count(F.lit(1)).alias("under_replicated_intervals"),
        F.count(F.when(recovered, 1)).alias("recoveries"),
        F.max(F.when(recovered, F.col("duration_ms"))).alias("max_recovery_ms"),
        F.sum(F.when(recovered, F.col("duration_ms"))).alias("total_recovery_ms"),
        (F.sum("duration_ms") / 1000.0).alias("under_replicated_s"),
        F.bool_or(~recovered).alias("under_replicated_now"))
    moved = ~F.col("old_leader").eqNullSafe(F.col("new_leader"))
    lead = leaders.groupBy(*_TP).agg(
        F.count(F.when(moved, 1)).alias("leader_changes"),
        (F.sum(F.when(F.col("new_leader") < 0, F.col("until_ts") - F.col("ts")))
         / 1000.0).alias("offline_s"),
        F.max_by("new_leader", F.struct("ts", "leader_epoch")).alias("last_leader"))

    def zero(column: str, cast: str = "long"):
        return F.coalesce(column, F.lit(0)).cast(cast).alias(column)
    return (isr.join(stretches, _TP, "left").join(lead, _TP, "full_outer")
            .select(*_TP, "replication_factor", zero("isr_shrinks"), zero("isr_expands"),
                    zero("leader_changes"), zero("under_replicated_intervals"),
                    zero("recoveries"), F.col("max_recovery_ms").cast("long"),
                    zero("total_recovery_ms"), zero("under_replicated_s", "double"),
                    F.coalesce("under_replicated_now", F.lit(False))
                    .alias("under_replicated_now"),
                    zero("offline_s", "double"), "last_leader", "last_isr")
            .orderBy(*_TP))


def broker_health(events: DataFrame, leaders: DataFrame | None = None) -> DataFrame:
    """A broker is out of sync for a partition when it was in some ISR of it but is not in
    the last one (the replicas are not in the event log; the ISRs ever seen stand in)."""
    leaders = leader_changes(events, None) if leaders is None else leaders
    isr = events.where(F.col("type") == "isr_change")
    last = isr.groupBy(*_TP).agg(F.max_by("new_isr", "ts").alias("last_isr"),
                                 F.max_by("leader_id", "ts").alias("isr_leader"))
    ever = (isr.select(*_TP, F.explode(F.array_union(
        F.coalesce("old_isr", F.array().cast("array<long>")),
        F.coalesce("new_isr", F.array().cast("array<long>")))).alias("broker")).distinct())
    out_of_sync = (ever.join(last, _TP).where(~F.array_contains("last_isr", F.col("broker")))
                   .groupBy("broker").agg(F.count(F.lit(1)).alias("out_of_sync")))
    leader_now = (leaders.groupBy(*_TP)
                  .agg(F.max_by("new_leader", F.struct("ts", "leader_epoch")).alias("broker"))
                  .where(F.col("broker") >= 0))
    leading = leader_now.groupBy("broker").agg(F.count(F.lit(1)).alias("leaders"))
    shrinks = (isr.where(F.col("kind") == "shrink").groupBy(F.col("leader_id").alias("broker"))
               .agg(F.count(F.lit(1)).alias("isr_shrinks_led")))
    brokers = (ever.select("broker").union(leading.select("broker"))
               .union(shrinks.select("broker")).distinct())
    return (brokers.join(leading, "broker", "left").join(out_of_sync, "broker", "left")
            .join(shrinks, "broker", "left")
            .select("broker", *[F.coalesce(c, F.lit(0)).cast("long").alias(c)
                                for c in ("leaders", "out_of_sync", "isr_shrinks_led")])
            .orderBy("broker"))


def _fencing_markers(events: DataFrame) -> list[tuple[int, str]]:
    rows = (events.where(F.col("type").isin("broker_fenced", "broker_unfenced"))
            .select("ts", "type", "broker_id").orderBy("ts").collect())
    return [(r["ts"], f"{r['type'].removeprefix('broker_')} {r['broker_id']}") for r in rows]


def _under_replicated_count(pdf: pd.DataFrame) -> tuple[list, list]:
    """The count of under-replicated partitions, stepping at every ISR change."""
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
    return xs, ys


def _timeline_chart(path, timeline: list[dict[str, Any]], leaders: list[dict[str, Any]],
                    health: list[dict[str, Any]], markers: list[tuple[int, str]]):
    from spark_jobs import report
    ranked = sorted(health, key=lambda r: (-(r["under_replicated_s"] or 0),
                                           -(r["leader_changes"] or 0),
                                           r["topic"], r["partition"]))
    lanes = {(r["topic"], r["partition"]) for r in ranked[:TIMELINE_LANES]
             if r["under_replicated_intervals"] or r["leader_changes"] or r["offline_s"]}
    if not lanes:
        return None

    def lane(r):
        return f"{r['topic']}-{r['partition']}"
    bars = [(lane(r), r["ts"], r["until_ts"],
             f"ISR {r['isr_size']}/{r['replication_factor']}")
            for r in timeline if r["under_replicated"] and (r["topic"], r["partition"]) in lanes]
    bars += [(lane(r), r["ts"], r["until_ts"], "offline (no leader)") for r in leaders
             if r["new_leader"] is not None and r["new_leader"] < 0
             and (r["topic"], r["partition"]) in lanes]
    points = [(lane(r), r["ts"], "leader change") for r in leaders
              if r["old_leader"] != r["new_leader"] and (r["topic"], r["partition"]) in lanes]
    title = "under-replicated ISR states and leader changes"
    with_events = sum(1 for r in health if r["under_replicated_intervals"]
                      or r["leader_changes"] or r["offline_s"])
    if with_events > len(lanes):
        title += f" (the {len(lanes)} longest under-replicated of {with_events} partitions)"
    return report.gantt(path, bars, title, points=points, markers=markers)


def _summary(intervals: list[dict[str, Any]]) -> str:
    partitions = {(r["topic"], r["partition"]) for r in intervals}
    now = sum(1 for r in intervals if not r["recovered"])
    text = (f"{len(intervals)} under-replicated intervals over {len(partitions)} partitions; "
            f"{now} still under-replicated at the end of the log")
    done = [r for r in intervals if r["recovered"]]
    if done:
        worst = max(done, key=lambda r: r["duration_ms"])
        text += (f"; longest recovery {worst['duration_ms']:,} ms "
                 f"({worst['topic']}-{worst['partition']} from "
                 f"{ms_to_text(worst['start_ts'])})")
    return text


def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("isr")
    events = ctx.table(spark, "events")
    end_ts = events.agg(F.max("ts")).first()[0]
    # each table runs once (report.Collected); the ones built on it read the held rows
    timeline = report.collect(isr_timeline(events, end_ts))
    leaders = report.collect(leader_changes(events, end_ts))
    intervals = report.collect(under_replicated_intervals(timeline.frame()))
    health = report.collect(partition_health(events, end_ts, timeline.frame(),
                                             leaders.frame()))
    result.tables.update(isr_timeline=timeline, under_replicated_intervals=intervals,
                         leader_changes=leaders, partition_health=health,
                         broker_health=broker_health(events, leaders.frame()))
    result.show += ["partition_health", "under_replicated_intervals", "broker_health"]
    if replication_events(events).limit(1).count() == 0:
        result.notes.append(NO_EVENTS)
        return result
    result.notes.append(_summary(intervals.rows()))
    out_dir = ctx.job_dir("isr")
    xs, ys = _under_replicated_count(timeline.pandas(["ts", "until_ts", "under_replicated"]))
    if xs:
        result.charts.append(report.lines(out_dir / "under_replicated.png",
                                          {"under-replicated partitions": (xs, ys)},
                                          "under-replicated partitions", "partitions",
                                          step=True))
    chart = _timeline_chart(out_dir / "isr_timeline.png", timeline.rows(), leaders.rows(),
                            health.rows(), _fencing_markers(events))
    if chart is not None:
        result.charts.append(chart)
    return result
