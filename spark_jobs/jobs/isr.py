"""The ISR and leadership health job: under-replicated intervals and how long each took to
recover, ISR churn, leader moves and offline time per partition, and Cruise Control's
per-broker Leader / OutOfSync counts, from the replication events (leader_change,
isr_change, broker_fenced / broker_unfenced; declared in broker/events.py). A single broker
at replication factor 1 writes none: the tables are then empty and the report says so.

Owns the pure transforms
- `broker_stops(events)`: broker, started_ts, shutdown_ts, stop_ts, reason, uptime_ms,
  last_event_ts: per broker, whether its event log ends with a clean broker_stop, and when
  its shutdown began; `cluster_stop(rows)` reads the cluster's stop from them;
- `isr_timeline(events, end_ts, stopping_ts)`: topic, partition, ts, kind, leader, old_isr,
  new_isr, isr_size, replication_factor, under_replicated, until_ts, stopping: each ISR
  state and how long it lasted;
- `under_replicated_intervals(timeline)`: topic, partition, start_ts, end_ts, duration_ms,
  recovered, replication_factor, min_isr_size, isr_shrinks, left_isr: each stretch from the
  ISR change that left the partition short of its replication factor to the one that
  brought the ISR back to it (end_ts null, and duration up to the end of the log, while it
  has not come back);
- `leader_changes(events, end_ts, stopping_ts)`: topic, partition, ts, leader_epoch,
  old_leader, new_leader, reason, until_ts, stopping: each leadership, once per leader epoch;
- `partition_health(events, end_ts, ...)`: topic, partition, replication_factor, isr_shrinks,
  isr_expands, leader_changes, under_replicated_intervals, recoveries, max_recovery_ms,
  total_recovery_ms, under_replicated_s, under_replicated_now, offline_s, last_leader,
  last_isr;
- `broker_health(events)`: broker, leaders, out_of_sync, isr_shrinks_led: at the end of
  the log, the partitions each broker leads and those it fell out of the ISR of;
and `run(spark, ctx)`, which also draws the under-replicated count and a timeline of every
partition's ISR states and leader changes, under a lane per broker of its fenced and
stopped times.

A cluster whose every broker's log ends with broker_stop was stopped, not broken: its
health is evaluated as of `stopping_ts`, the moment its shutdown began (the first broker's
controlled shutdown, or its broker_stop). The ISR shrinks, leader moves and offline
partitions of the shutdown itself are kept in the timeline and leader tables, marked
`stopping`, and are not counted as under-replication or offline time; a partition already
under-replicated when the shutdown began is still `under_replicated_now`. A broker that
crashed (no broker_stop) leaves the cluster unstopped, and everything counts.

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

__all__ = ["NO_EVENTS", "replication_events", "broker_stops", "cluster_stop", "isr_timeline",
           "under_replicated_intervals", "leader_changes", "partition_health", "broker_health",
           "run", "TIMELINE_LANES"]

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


def _stopping(until, stopping_ts: int | None) -> list:
    """The `stopping` column (a change made once the cluster's shutdown had begun) and
    `until_ts`: a state that began before the shutdown lasts, as far as the health is
    concerned, until the shutdown began."""
    if stopping_ts is None:
        return [until.alias("until_ts"), F.lit(False).alias("stopping")]
    stopping = F.col("ts") >= F.lit(stopping_ts)
    return [F.when(stopping, until).otherwise(F.least(until, F.lit(stopping_ts).cast("long")))
            .alias("until_ts"), stopping.alias("stopping")]


def broker_stops(events: DataFrame) -> DataFrame:
    """One row per broker: each broker whose event log is read, and each one the
    controller registered. `started_ts` is its last broker_start. When its log ends with
    broker_stop (a clean stop: the broker writes it last, as it closes), `stop_ts`, `reason`
    and `uptime_ms` are that event's, and `shutdown_ts` is when its shutdown began: the
    controller registering it again with the epoch it already had, which is how KRaft
    marks a broker in controlled shutdown (its leaderships and ISR places move then), or
    else its broker_stop (the last broker has nowhere to move anything). Otherwise those
    are null: it crashed, was killed, is still running, or its log was not given.
    `last_event_ts` is its log's last event."""
    is_stop = F.col("type") == "broker_stop"
    per_log = events.groupBy("broker").agg(
        F.max_by(F.struct("type", "reason", "uptime_ms"),
                 F.struct("ts", is_stop.cast("int"))).alias("_last"),
        F.max("ts").alias("last_event_ts"),
        F.max(F.when(F.col("type") == "broker_start", F.col("ts"))).alias("started_ts"))
    registered = (events.where(F.col("type") == "broker_registered")
                  .select(F.col("broker_id").alias("broker"), "broker_epoch", "ts"))
    known = per_log.select("broker").union(registered.select("broker")).distinct()
    stopped = F.col("_last.type") == "broker_stop"
    logs = known.join(per_log, "broker", "left").select(
        "broker", "started_ts", F.when(stopped, F.col("last_event_ts")).alias("stop_ts"),
        F.when(stopped, F.col("_last.reason")).alias("reason"),
        F.when(stopped, F.col("_last.uptime_ms")).alias("uptime_ms"), "last_event_ts")
    first = Window.partitionBy("broker", "broker_epoch").orderBy("ts")
    again = (registered.withColumn("_n", F.row_number().over(first)).where(F.col("_n") > 1)
             .join(logs.select("broker", "started_ts", "stop_ts"), "broker")
             .where((F.col("ts") >= F.coalesce("started_ts", F.lit(0)))
                    & (F.col("ts") <= F.col("stop_ts")))
             .groupBy("broker").agg(F.min("ts").alias("_controlled")))
    return (logs.join(again, "broker", "left")
            .select("broker", "started_ts",
                    F.when(F.col("stop_ts").isNotNull(),
                           F.coalesce("_controlled", "stop_ts")).alias("shutdown_ts"),
                    "stop_ts", "reason", "uptime_ms", "last_event_ts")
            .orderBy("broker"))


def cluster_stop(stops: list[dict[str, Any]]) -> tuple[int, int] | None:
    """(stopping_ts, stopped_ts) from broker_stops' rows when every broker stopped cleanly:
    when the first shutdown began, and when the last broker stopped. None otherwise."""
    if not stops or any(r["stop_ts"] is None for r in stops):
        return None
    return min(r["shutdown_ts"] for r in stops), max(r["stop_ts"] for r in stops)


def isr_timeline(events: DataFrame, end_ts: int | None,
                 stopping_ts: int | None = None) -> DataFrame:
    isr = (events.where(F.col("type") == "isr_change")
           .select(*_TP, "ts", "old_isr", "new_isr", "kind",
                   F.col("leader_id").alias("leader")))
    w = Window.partitionBy(*_TP).orderBy("ts")
    return (isr.join(_replication_factor(events, isr), _TP)
            .withColumn("isr_size", F.size("new_isr").cast("long"))
            .withColumn("under_replicated", F.col("isr_size") < F.col("replication_factor"))
            .select(*_TP, "ts", "kind", "leader", "old_isr", "new_isr", "isr_size",
                    "replication_factor", "under_replicated",
                    *_stopping(F.coalesce(F.lead("ts").over(w), _end(end_ts)), stopping_ts))
            .orderBy(*_TP, "ts"))


def under_replicated_intervals(timeline: DataFrame) -> DataFrame:
    """Runs of consecutive under-replicated ISR states of isr_timeline's table. An ISR that
    grows but stays short (1 -> 2 of 3) does not end the run; the change that brings it
    back to the replication factor does, and `end_ts` is that change's time. The changes of
    a stopped cluster's shutdown (`stopping`) are not under-replication: a run still open
    when the shutdown began ends there, unrecovered."""
    timeline = timeline.where(~F.col("stopping"))
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


def leader_changes(events: DataFrame, end_ts: int | None,
                   stopping_ts: int | None = None) -> DataFrame:
    """One row per leadership: a leader epoch names one, so a leader_change seen twice
    (written by two controller nodes, or read from two copies of a log) counts once; its
    first sighting stands. `until_ts` is when the next leadership began (or end_ts, or for
    one begun before a stopped cluster's shutdown, stopping_ts)."""
    lc = (events.where(F.col("type") == "leader_change")
          .select(*_TP, "ts", "leader_epoch", "old_leader", "new_leader", "reason"))
    first = Window.partitionBy(*_TP, "leader_epoch").orderBy("ts")
    once = (lc.withColumn("_n", F.row_number().over(first))
            .where((F.col("_n") == 1) | F.col("leader_epoch").isNull()).drop("_n"))
    w = Window.partitionBy(*_TP).orderBy("ts", "leader_epoch")
    return (once.select("*", *_stopping(F.coalesce(F.lead("ts").over(w), _end(end_ts)),
                                        stopping_ts))
            .orderBy(*_TP, "ts", "leader_epoch"))


def partition_health(events: DataFrame, end_ts: int | None,
                     timeline: DataFrame | None = None,
                     leaders: DataFrame | None = None,
                     stopping_ts: int | None = None) -> DataFrame:
    """Per partition. `timeline` and `leaders` are isr_timeline's and leader_changes'
    tables when the caller has them already (made with the same stopping_ts). A leader
    change is a leadership whose leader differs from the one before (an epoch bump that
    keeps the leader is not one); `offline_s` is the time spent with no leader (new_leader
    -1). Of a stopped cluster, the health is as the shutdown found it: the changes marked
    `stopping` are not counted, and last_leader and last_isr are those before it."""
    timeline = isr_timeline(events, end_ts, stopping_ts) if timeline is None else timeline
    leaders = leader_changes(events, end_ts, stopping_ts) if leaders is None else leaders
    live = ~F.col("stopping")
    isr = timeline.groupBy(*_TP).agg(
        F.max("replication_factor").alias("replication_factor"),
        F.count(F.when(live & (F.col("kind") == "shrink"), 1)).alias("isr_shrinks"),
        F.count(F.when(live & (F.col("kind") == "expand"), 1)).alias("isr_expands"),
        # max_by passes over the rows whose ordering is null: the shutdown's
        F.max_by("new_isr", F.when(live, F.col("ts"))).alias("last_isr"))
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
        F.count(F.when(live & moved, 1)).alias("leader_changes"),
        (F.sum(F.when(live & (F.col("new_leader") < 0), F.col("until_ts") - F.col("ts")))
         / 1000.0).alias("offline_s"),
        F.max_by("new_leader", F.when(live, F.struct("ts", "leader_epoch")))
        .alias("last_leader"))

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


def broker_health(events: DataFrame, leaders: DataFrame | None = None,
                  stopping_ts: int | None = None) -> DataFrame:
    """A broker is out of sync for a partition when it was in some ISR of it but is not in
    the last one (the replicas are not in the event log; the ISRs ever seen stand in). Of
    a stopped cluster, as the shutdown found it (the changes before stopping_ts)."""
    leaders = leader_changes(events, None, stopping_ts) if leaders is None else leaders
    leaders = leaders.where(~F.col("stopping"))
    isr = events.where(F.col("type") == "isr_change")
    if stopping_ts is not None:
        isr = isr.where(F.col("ts") < F.lit(stopping_ts))
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


def _broker_lanes(events: DataFrame, end_ts: int, stops: list[dict[str, Any]]
                  ) -> tuple[list[tuple[str, int, int, str]], list[tuple[str, int, str]]]:
    """Bars on a lane per broker: fenced (broker_fenced until its next broker_unfenced or
    its stop) and stopped (broker_stop until its next broker_start, or the end); and as
    points each broker_stop (the last broker's stop is the end: a bar of no width), each
    start after an unclean shutdown, and the last event of a log that ends without a
    broker_stop (a broker killed falls silent then)."""
    rows = (events.where(F.col("type").isin("broker_fenced", "broker_unfenced", "broker_start",
                                             "broker_stop"))
            .select("ts", "type", "clean_shutdown",
                    F.coalesce("broker_id", "broker").alias("id"))
            .orderBy("ts").collect())
    bars: list[tuple[str, int, int, str]] = []
    fenced: dict[int, int] = {}
    stopped: dict[int, int] = {}
    for r in rows:
        broker, ts, kind = r["id"], r["ts"], r["type"]
        if kind == "broker_fenced":
            fenced.setdefault(broker, ts)
        elif kind in ("broker_unfenced", "broker_stop") and broker in fenced:
            bars.append((f"broker {broker}", fenced.pop(broker), ts, "broker fenced"))
        if kind == "broker_stop":
            stopped.setdefault(broker, ts)
        elif kind == "broker_start" and broker in stopped:
            bars.append((f"broker {broker}", stopped.pop(broker), ts, "broker stopped"))
    bars += [(f"broker {b}", ts, end_ts, "broker fenced") for b, ts in fenced.items()]
    bars += [(f"broker {b}", ts, end_ts, "broker stopped") for b, ts in stopped.items()]
    points = [(f"broker {r['id']}", r["ts"], "broker_stop") for r in rows
              if r["type"] == "broker_stop"]
    points += [(f"broker {r['id']}", r["ts"], "start after an unclean shutdown") for r in rows
               if r["type"] == "broker_start" and r["clean_shutdown"] is False]
    points += [(f"broker {r['broker']}", r["last_event_ts"], "log ends, no broker_stop")
               for r in stops if r["stop_ts"] is None and r["last_event_ts"] is not None
               and r["last_event_ts"] < end_ts]
    return bars, points


BROKER_COLOURS = {"broker fenced": "#e57373", "broker stopped": "#9e9e9e"}


def _under_replicated_count(pdf: pd.DataFrame, span: tuple[int, int] | None,
                            stop: tuple[int, int] | None) -> tuple[list, list]:
    """The count of under-replicated partitions, stepping at every ISR change (the changes
    of one millisecond as one step); of a stopped cluster, up to its shutdown."""
    deltas: dict[int, int] = {}
    for _, r in pdf.iterrows():
        if r["under_replicated"] and not r["stopping"]:
            deltas[r["ts"]] = deltas.get(r["ts"], 0) + 1
            if stop is None or r["until_ts"] < stop[0]:
                deltas[r["until_ts"]] = deltas.get(r["until_ts"], 0) - 1
    xs, ys, level = [], [], 0
    if span is not None and (not deltas or span[0] < min(deltas)):
        xs, ys = [span[0]], [0]
    for ts in sorted(deltas):
        level += deltas[ts]
        xs.append(ts)
        ys.append(level)
    end = stop[0] if stop is not None else span[1] if span is not None else None
    if end is not None and (not xs or xs[-1] < end):
        xs.append(end)
        ys.append(level)
    return xs, ys


def _timeline_chart(path, timeline: list[dict[str, Any]], leaders: list[dict[str, Any]],
                    health: list[dict[str, Any]],
                    brokers: tuple[list[tuple[str, int, int, str]], list[tuple[str, int, str]]],
                    span: tuple[int, int] | None, shaded: list[tuple[int, int, str]]):
    from spark_jobs import report
    ranked = sorted(health, key=lambda r: (-(r["under_replicated_s"] or 0),
                                           -(r["leader_changes"] or 0),
                                           r["topic"], r["partition"]))
    lanes = {(r["topic"], r["partition"]) for r in ranked[:TIMELINE_LANES]
             if r["under_replicated_intervals"] or r["leader_changes"] or r["offline_s"]}
    broker_bars, stop_points = brokers
    if not lanes and not broker_bars and not stop_points:
        return None

    def lane(r):
        return f"{r['topic']}-{r['partition']}"
    bars = [(lane(r), r["ts"], r["until_ts"],
             f"ISR {r['isr_size']}/{r['replication_factor']}")
            for r in timeline if r["under_replicated"] and not r["stopping"]
            and (r["topic"], r["partition"]) in lanes]
    bars += [(lane(r), r["ts"], r["until_ts"], "offline (no leader)") for r in leaders
             if r["new_leader"] is not None and r["new_leader"] < 0 and not r["stopping"]
             and (r["topic"], r["partition"]) in lanes]
    # the shutdown's leader moves are drawn (they happened), its ISR states are not
    points = [(lane(r), r["ts"], "leader change") for r in leaders
              if r["old_leader"] != r["new_leader"] and (r["topic"], r["partition"]) in lanes]
    title = "under-replicated ISR states and leader changes"
    with_events = sum(1 for r in health if r["under_replicated_intervals"]
                      or r["leader_changes"] or r["offline_s"])
    if with_events > len(lanes):
        title += f" (the {len(lanes)} longest under-replicated of {with_events} partitions)"
    order = sorted({b[0] for b in broker_bars} | {p[0] for p in stop_points},
                   key=lambda b: int(b.split()[-1]))
    return report.gantt(path, bars + broker_bars, title, points=points + stop_points,
                        span=span, lanes=order,
                        colours=BROKER_COLOURS, shaded=shaded)


def _summary(intervals: list[dict[str, Any]], stop: tuple[int, int] | None) -> str:
    partitions = {(r["topic"], r["partition"]) for r in intervals}
    now = sum(1 for r in intervals if not r["recovered"])
    when = "when the cluster began stopping" if stop is not None else "at the end of the log"
    text = (f"{len(intervals)} under-replicated intervals over {len(partitions)} partitions; "
            f"{now} still under-replicated {when}")
    done = [r for r in intervals if r["recovered"]]
    if done:
        worst = max(done, key=lambda r: r["duration_ms"])
        text += (f"; longest recovery {worst['duration_ms']:,} ms "
                 f"({worst['topic']}-{worst['partition']} from "
                 f"{ms_to_text(worst['start_ts'])})")
    return text


def _stop_note(stops: list[dict[str, Any]], stop: tuple[int, int] | None) -> str | None:
    """What the operator should know of how the brokers' logs end, or None when none of
    them ends with a stop (a running cluster's logs)."""
    clean = [r for r in stops if r["stop_ts"] is not None]
    if not clean:
        return None
    each = ", ".join(f"broker {r['broker']} at {ms_to_text(r['stop_ts'])} ({r['reason']})"
                     for r in sorted(clean, key=lambda r: r["stop_ts"]))
    if stop is not None:
        first = min(stops, key=lambda r: (r["shutdown_ts"], r["broker"]))
        how = ("controlled shutdown" if first["shutdown_ts"] < first["stop_ts"]
               else "broker_stop")
        return (f"cluster stopped at {ms_to_text(stop[1])}: every broker stopped cleanly "
                f"({each}). Replication health is as of {ms_to_text(stop[0])}, when the "
                f"shutdown began (broker {first['broker']}'s {how}); "
                f"the ISR shrinks and leader moves of the shutdown are not counted as "
                f"under-replication or offline time")
    unclean = ", ".join(
        f"broker {r['broker']}'s event log " + (
            f"ends at {ms_to_text(r['last_event_ts'])} without broker_stop"
            if r["last_event_ts"] is not None else "was not given")
        for r in stops if r["stop_ts"] is None)
    return (f"stopped cleanly: {each}; not stopped: {unclean} (crashed, killed or still "
            f"running), so the partitions are evaluated at the end of the log")


def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("isr")
    events = ctx.table(spark, "events")
    end_ts = events.agg(F.max("ts")).first()[0]
    stops = report.collect(broker_stops(events))
    stop = cluster_stop(stops.rows())
    stopping_ts = stop[0] if stop is not None else None
    # each table runs once (report.Collected); the ones built on it read the held rows
    timeline = report.collect(isr_timeline(events, end_ts, stopping_ts))
    leaders = report.collect(leader_changes(events, end_ts, stopping_ts))
    intervals = report.collect(under_replicated_intervals(timeline.frame()))
    health = report.collect(partition_health(events, end_ts, timeline.frame(),
                                             leaders.frame(), stopping_ts))
    result.tables.update(isr_timeline=timeline, under_replicated_intervals=intervals,
                         leader_changes=leaders, partition_health=health,
                         broker_health=broker_health(events, leaders.frame(), stopping_ts),
                         broker_stops=stops)
    result.show += ["partition_health", "under_replicated_intervals", "broker_health",
                    "broker_stops"]
    if replication_events(events).limit(1).count() == 0:
        result.notes.append(NO_EVENTS)
        return result
    note = _stop_note(stops.rows(), stop)
    if note is not None:
        result.notes.append(note)
    result.notes.append(_summary(intervals.rows(), stop))
    out_dir = ctx.job_dir("isr")
    span = ctx.time_span(spark)
    shaded = [(stop[0], stop[1], "cluster stopping")] if stop is not None else []
    xs, ys = _under_replicated_count(
        timeline.pandas(["ts", "until_ts", "under_replicated", "stopping"]), span, stop)
    if xs:
        result.charts.append(report.lines(out_dir / "under_replicated.png",
                                          {"under-replicated partitions": (xs, ys)},
                                          "under-replicated partitions", "partitions",
                                          step=True, span=span, shaded=shaded,
                                          zero_based=True))
    brokers = _broker_lanes(events, span[1] if span else end_ts, stops.rows())
    chart = _timeline_chart(out_dir / "isr_timeline.png", timeline.rows(), leaders.rows(),
                            health.rows(), brokers, span, shaded)
    if chart is not None:
        result.charts.append(chart)
    return result
