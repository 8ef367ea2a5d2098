"""The share groups job (KIP-932): per share group and partition, the records in flight and
acquired over time, the acquisitions and redeliveries, the records archived (poison records:
rejected, or delivered to the delivery-count limit) and the locks that expired; and the
groups' members, joining, leaving and fenced.

From the event log (broker/events.py), the pure transforms
- `share_partition_timeline(events)`: ts, broker, group, topic, partition, start_offset,
  end_offset, in_flight, available_records, acquired_records, acknowledged_records,
  archived_records, acquisitions, redeliveries (the totals the event carries), from_ts,
  acquired_delta, redelivered_delta: one row per `share_partition_state` event, the deltas
  since the share partition's previous one;
- `archived(events)`: ts, broker, group, topic, partition, member, first_offset,
  last_offset, records, reason (rejected | delivery count limit), event: each range of
  records archived, by an acknowledgement or a member leaving (`share_records_archived`) or
  by a lock that expired on the last delivery (`share_lock_expired`, archived);
- `share_partition_summary(events, timeline)`: group, topic, partition, first_ts, last_ts,
  loads, samples, start_offset, end_offset, in_flight, acquired_records (the last sample's),
  max_in_flight, max_acquired, acquisitions, redeliveries, redelivery_rate, lock_expiries,
  expired_records, archived_rejected, archived_delivery_limit, archived_records;
- `share_members(events, end_ms)`: group, member, joined_ts, joins, assignments, assigned,
  end_ts, end (left | fenced | deleted | member), fenced_reason, member_ms: one row per
  member of each group;
- `share_group_summary(partitions, members)`: group, partitions, members, joins, left,
  fenced, acquisitions, redeliveries, redelivery_rate, lock_expiries, archived_records;
and `run(spark, ctx)`, with a chart of the records in flight and acquired over time per
share partition, and one of the members' time in their group.

The totals of a `share_partition_state` event count from the share partition's load on its
leader (`share_partition_loaded`): a new leader, or a reload after a refused write, starts
them at 0 again, so each delta is taken within one load. docs/ANALYSIS.md defines each
column.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.jobs import JobResult

__all__ = ["share_partition_timeline", "archived", "share_partition_summary", "share_members",
           "share_group_summary", "run", "NO_SHARE_GROUPS", "CHART_PARTITIONS"]

NO_SHARE_GROUPS = ("no share groups in the event log (share_group_* and share_partition_* "
                   "events)")
CHART_PARTITIONS = 6  # share partitions drawn: the most acquisitions (two lines each)
KEY = ["group", "topic", "partition"]
STATE_COLUMNS = ["start_offset", "end_offset", "in_flight", "available_records",
                 "acquired_records", "acknowledged_records", "archived_records",
                 "acquisitions", "redeliveries"]
_LOADED, _STATE = "share_partition_loaded", "share_partition_state"


def _partition_events(events: DataFrame, *types: str) -> DataFrame:
    return (events.where(F.col("type").isin(*types))
            .withColumn("group", F.col("group_id")))


def share_partition_timeline(events: DataFrame) -> DataFrame:
    """One row per share_partition_state event (see the module docstring). A share
    partition's first sample in the log counts its totals as its deltas when its load is in
    the log too (they count from 0 there), and has null deltas otherwise (the log begins
    after the load: what came before it is unknown)."""
    rows = (_partition_events(events, _LOADED, _STATE)
            .select("ts", "broker", "type", *KEY, *STATE_COLUMNS)
            .withColumn("_load", (F.col("type") == _LOADED).cast("int")))
    # one leader's loads of one share partition, in order; at one ms the load comes first
    order = (Window.partitionBy("broker", *KEY)
             .orderBy("ts", F.col("_load").desc()))
    rows = rows.withColumn("_loads", F.sum("_load").over(
        order.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    states = rows.where(F.col("type") == _STATE)
    within = Window.partitionBy("broker", *KEY, "_loads").orderBy("ts")
    previous = F.lag(F.struct("ts", "acquisitions", "redeliveries")).over(within)
    states = states.withColumn("_prev", previous)

    def delta(total: str) -> F.Column:
        prev = F.col("_prev")[total]
        return (F.when(prev.isNull() & (F.col("_loads") > 0), F.col(total))
                .when(prev.isNull(), F.lit(None))
                .when(F.col(total) >= prev, F.col(total) - prev)
                .otherwise(F.col(total))  # lower: a reload the log lost the event of
                .cast("long"))

    return (states.withColumn("from_ts", F.col("_prev")["ts"])
            .withColumn("acquired_delta", delta("acquisitions"))
            .withColumn("redelivered_delta", delta("redeliveries"))
            .select("ts", "broker", *KEY, *STATE_COLUMNS, "from_ts", "acquired_delta",
                    "redelivered_delta")
            .orderBy(*KEY, "ts", "broker"))


def archived(events: DataFrame) -> DataFrame:
    """Each range of archived records (see the module docstring), in time order."""
    by_ack = (_partition_events(events, "share_records_archived")
              .select("ts", "broker", *KEY, F.col("member_id").alias("member"),
                      "first_offset", "last_offset", "reason", "type"))
    by_expiry = (_partition_events(events, "share_lock_expired").where(F.col("archived"))
                 .select("ts", "broker", *KEY, F.col("member_id").alias("member"),
                         "first_offset", "last_offset",
                         F.lit("delivery count limit").alias("reason"), "type"))
    return (by_ack.unionByName(by_expiry)
            .withColumn("records", F.col("last_offset") - F.col("first_offset") + 1)
            .select("ts", "broker", *KEY, "member", "first_offset", "last_offset", "records",
                    "reason", F.col("type").alias("event"))
            .orderBy("ts", *KEY, "first_offset"))


def share_partition_summary(events: DataFrame, timeline: DataFrame) -> DataFrame:
    """One row per share partition named by any share-partition event."""
    each = _partition_events(events, _LOADED, _STATE, "share_lock_expired",
                             "share_records_archived")
    expiries = (_partition_events(events, "share_lock_expired")
                .groupBy(*KEY).agg(
                    F.count(F.lit(1)).alias("lock_expiries"),
                    F.sum(F.col("last_offset") - F.col("first_offset") + 1)
                    .alias("expired_records")))
    gone = archived(events).groupBy(*KEY).agg(
        F.sum(F.when(F.col("reason") == "rejected", F.col("records")))
        .alias("archived_rejected"),
        F.sum(F.when(F.col("reason") == "delivery count limit", F.col("records")))
        .alias("archived_delivery_limit"),
        F.sum("records").alias("archived_records"))
    last = F.max(F.struct("ts", "broker", "start_offset", "end_offset", "in_flight",
                          "acquired_records"))
    sampled = timeline.groupBy(*KEY).agg(
        F.count(F.lit(1)).alias("samples"), last.alias("_last"),
        F.max("in_flight").alias("max_in_flight"),
        F.max("acquired_records").alias("max_acquired"),
        F.sum("acquired_delta").alias("acquisitions"),
        F.sum("redelivered_delta").alias("redeliveries"))
    keys = each.groupBy(*KEY).agg(
        F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"),
        F.sum((F.col("type") == _LOADED).cast("long")).alias("loads"))
    zero = F.lit(0).cast("long")
    out = (keys.join(sampled, KEY, "left").join(expiries, KEY, "left").join(gone, KEY, "left")
           .select(*KEY, "first_ts", "last_ts", "loads",
                   F.coalesce("samples", zero).alias("samples"),
                   *[F.col("_last")[c].alias(c) for c in
                     ("start_offset", "end_offset", "in_flight", "acquired_records")],
                   "max_in_flight", "max_acquired",
                   F.coalesce("acquisitions", zero).alias("acquisitions"),
                   F.coalesce("redeliveries", zero).alias("redeliveries"),
                   *[F.coalesce(c, zero).alias(c) for c in
                     ("lock_expiries", "expired_records", "archived_rejected",
                      "archived_delivery_limit", "archived_records")]))
    return (out.withColumn("redelivery_rate", _rate("redeliveries", "acquisitions"))
            .select(*KEY, "first_ts", "last_ts", "loads", "samples", "start_offset",
                    "end_offset", "in_flight", "acquired_records", "max_in_flight",
                    "max_acquired", "acquisitions", "redeliveries", "redelivery_rate",
                    "lock_expiries", "expired_records", "archived_rejected",
                    "archived_delivery_limit", "archived_records")
            .orderBy(*KEY))


def _rate(part: str, whole: str) -> F.Column:
    return F.when(F.col(whole) > 0, F.col(part) / F.col(whole))


_ENDS = {"share_group_leave": "left", "share_group_fenced": "fenced"}


def share_members(events: DataFrame, end_ms: int | None) -> DataFrame:
    """One row per member of each share group (see the module docstring): from its first
    join in the log to its leaving, its fencing, its group's deletion, or (end `member`,
    still in the group) the end of the data, `end_ms`."""
    member_events = (events.where(F.col("type").isin("share_group_join",
                                                     "share_group_assignment",
                                                     *_ENDS))
                     .select("ts", "type", "group", "member", "reason", "assigned"))
    # a member id that rejoins after it left (a new member epoch 0 with the same id) is
    # one row: joined at its first join, ended at its last end
    per = member_events.groupBy("group", "member").agg(
        F.min(F.when(F.col("type") == "share_group_join", F.col("ts"))).alias("joined_ts"),
        F.min("ts").alias("_first_ts"),
        F.sum((F.col("type") == "share_group_join").cast("long")).alias("joins"),
        F.sum((F.col("type") == "share_group_assignment").cast("long")).alias("assignments"),
        F.max(F.when(F.col("type") == "share_group_assignment",
                     F.struct("ts", F.coalesce("assigned", F.array().cast("array<string>"))
                              .alias("a"))))["a"].alias("assigned"),
        F.max(F.when(F.col("type").isin(*_ENDS), F.struct("ts", "type", "reason")))
        .alias("_end"),
        F.max(F.when(F.col("type") == "share_group_join", F.col("ts"))).alias("_last_join"))
    deleted = (events.where(F.col("type") == "share_group_deleted")
               .groupBy("group").agg(F.max("ts").alias("_deleted_ts")))
    per = per.join(deleted, "group", "left")
    last_join = F.coalesce("_last_join", "_first_ts")
    ended = F.col("_end").isNotNull() & (F.col("_end")["ts"] >= last_join)
    end_kind = (F.when(ended, F.when(F.col("_end")["type"] == "share_group_leave", "left")
                       .otherwise("fenced"))
                .when(F.col("_deleted_ts") >= last_join, "deleted")
                .otherwise("member"))
    end_ts = (F.when(ended, F.col("_end")["ts"])
              .when(F.col("_deleted_ts") >= last_join, F.col("_deleted_ts"))
              .otherwise(F.lit(end_ms).cast("long")))
    joined = F.coalesce("joined_ts", "_first_ts")  # the log began after it joined
    return (per.select("group", "member", joined.alias("joined_ts"), "joins", "assignments",
                       F.coalesce("assigned", F.array().cast("array<string>"))
                       .alias("assigned"),
                       end_ts.alias("end_ts"), end_kind.alias("end"),
                       F.when(end_kind == "fenced", F.col("_end")["reason"])
                       .alias("fenced_reason"))
            .withColumn("member_ms", F.col("end_ts") - F.col("joined_ts"))
            .orderBy("group", "joined_ts", "member"))


def share_group_summary(partitions: DataFrame, members: DataFrame) -> DataFrame:
    """One row per share group with members or share partitions in the log."""
    by_partitions = partitions.groupBy("group").agg(
        F.count(F.lit(1)).alias("partitions"),
        *[F.sum(c).alias(c) for c in ("acquisitions", "redeliveries", "lock_expiries",
                                      "archived_records")])
    by_members = members.groupBy("group").agg(
        F.count(F.lit(1)).alias("members"), F.sum("joins").alias("joins"),
        F.sum((F.col("end") == "left").cast("long")).alias("left"),
        F.sum((F.col("end") == "fenced").cast("long")).alias("fenced"))
    zero = F.lit(0).cast("long")
    both = by_partitions.join(by_members, "group", "full_outer")
    counts = ["partitions", "members", "joins", "left", "fenced", "acquisitions",
              "redeliveries", "lock_expiries", "archived_records"]
    return (both.select("group", *[F.coalesce(c, zero).alias(c) for c in counts])
            .withColumn("redelivery_rate", _rate("redeliveries", "acquisitions"))
            .select("group", "partitions", "members", "joins", "left", "fenced",
                    "acquisitions", "redeliveries", "redelivery_rate", "lock_expiries",
                    "archived_records")
            .orderBy("group"))


# --- the job -----------------------------------------------------------------------------

def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("share_groups")
    events = ctx.table(spark, "events")
    span = ctx.time_span(spark)
    end_ms = span[1] if span is not None else None

    timeline = report.collect(share_partition_timeline(events))
    gone = report.collect(archived(events))
    partitions = report.collect(share_partition_summary(events, timeline.frame()))
    members = report.collect(share_members(events, end_ms))
    groups = report.collect(share_group_summary(partitions.frame(), members.frame()))
    result.tables.update(share_groups=groups, share_partitions=partitions,
                         share_members=members, archived_records=gone,
                         share_partition_timeline=timeline)
    result.show += ["share_groups", "share_partitions", "share_members", "archived_records"]

    group_rows = groups.rows()
    if not group_rows:
        result.notes.append(NO_SHARE_GROUPS)
        return result
    for g in group_rows:
        rate = "-" if g["redelivery_rate"] is None else f"{g['redelivery_rate']:.1%}"
        result.notes.append(
            f"share group {g['group']}: {g['members']} member(s) ({g['left']} left, "
            f"{g['fenced']} fenced), {g['partitions']} share partition(s); "
            f"{g['acquisitions']:,} records acquired, {g['redeliveries']:,} redelivered "
            f"({rate}), {g['lock_expiries']} lock expiries, {g['archived_records']:,} "
            f"records archived")
    out_dir = ctx.job_dir("share_groups")
    samples = timeline.rows()
    if samples:
        result.charts.append(_in_flight_chart(out_dir, samples, partitions.rows(), span))
    else:
        result.notes.append("no share_partition_state events: the share partitions' figures "
                            "are sampled with the metrics event (events.metrics.interval.ms)")
    bars = [(f"{r['group']} {r['member'][:24]}", r["joined_ts"], r["end_ts"], r["end"])
            for r in members.rows() if r["joined_ts"] is not None and r["end_ts"] is not None]
    if bars:
        result.charts.append(report.gantt(out_dir / "members.png", bars,
                                          "share group members, from joining to leaving",
                                          span=span))
    return result


def _in_flight_chart(out_dir, samples: list[dict[str, Any]], partitions: list[dict[str, Any]],
                     span) -> Any:
    """Records in flight and acquired, per share partition (the busiest), as steps: each
    sample's figures hold until the next."""
    from spark_jobs import report
    busiest = sorted(partitions, key=lambda r: -(r["acquisitions"] or 0))[:CHART_PARTITIONS]
    series: dict[str, tuple[list[int], list[int]]] = {}
    for p in busiest:
        key = (p["group"], p["topic"], p["partition"])
        mine = [r for r in samples if (r["group"], r["topic"], r["partition"]) == key]
        name = f"{p['group']} {p['topic']}-{p['partition']}"
        times = [r["ts"] for r in mine]
        series[f"{name} in flight"] = (times, [r["in_flight"] for r in mine])
        series[f"{name} acquired"] = (times, [r["acquired_records"] for r in mine])
    title = "share partitions: records in flight and acquired"
    if len(partitions) > CHART_PARTITIONS:
        title += f" (the {CHART_PARTITIONS} with the most acquisitions of {len(partitions)})"
    return report.lines(out_dir / "in_flight.png", series, title, "records", step=True,
                        span=span, zero_based=True)
