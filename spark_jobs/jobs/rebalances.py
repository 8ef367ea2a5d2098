"""The rebalances job: every consumer-group rebalance the coordinator ran, and what it cost
the consumers.

Owns the pure transforms
- `group_rebalances(events)`: one row per rebalance from the broker's group_state,
  group_assignment and group_join events: group, generation, protocol (the chosen
  assignor), protocol_kind (eager | cooperative), trigger, reason, start_ts, stable_ts,
  end_state, duration_ms, members_before, members_after, partitions_revoked,
  partitions_moved;
- `member_rebalance_intervals(events, rebalances)`: per member and rebalance, its JoinGroup
  to the assignment (the broker's view of a member's stop, docs/ANALYSIS.md, rebalances);
- over the bench's consumer events (CONSUMER_EVENTS; these names and columns are used by
  `minibroker bench rebalance` too): `partition_pauses`, `member_pauses`,
  `consumer_throughput`, `pause_totals`;
- `with_pauses(rebalances, consumer_events)`: the pauses attributed to the rebalance whose
  generation handed the partition (or the member) its next assignment;
and `run(spark, ctx)`.

A rebalance starts when the group enters PreparingRebalance from any state but
CompletingRebalance (from there, a sync that timed out restarts the same rebalance) and ends
at the next Stable, Empty or Dead. Under cooperative rebalancing one membership change usually takes two
rebalances (the second hands out what the first revoked): both are rows.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.consumer_events import CONSUMER_EVENT_ORDER
from spark_jobs.jobs import JobResult, lookup, ms_to_text

__all__ = ["partition_pauses", "member_pauses", "consumer_throughput", "pause_totals",
           "group_rebalances", "member_rebalance_intervals", "with_pauses", "protocol_kind",
           "run"]

_RELEASES = ("revoked", "lost")
# Instance-wide events: whatever the instance still owned is let go (a `started` means an
# earlier run of the instance ended without `stopped`, e.g. killed).
_ENDS = ("stopped", "started")

PARTITION_PAUSE_COLUMNS = ["partition", "old_instance", "new_instance", "released_ts",
                           "acquired_ts", "pause_ms"]
MEMBER_PAUSE_COLUMNS = ["instance", "start_ts", "end_ts", "pause_ms"]
CONSUMER_BUCKET_MS = 1000  # consumer_throughput's buckets


def _rank() -> Column:
    return lookup(CONSUMER_EVENT_ORDER, F.col("type"))


def protocol_kind(protocol: Column) -> Column:
    """eager | cooperative from the assignor's name (cooperative-sticky, librdkafka's too)."""
    return (F.when(protocol.isNull() | (protocol == ""), F.lit(None))
            .when(F.lower(protocol).contains("cooperative"), F.lit("cooperative"))
            .otherwise(F.lit("eager")))


# --- consumer-side pauses ------------------------------------------------------------------

def _ownership(consumer_events: DataFrame) -> DataFrame:
    """instance, partition, ts, rank, type, generation, prev_type: one row per partition of
    each assigned / revoked / lost event, plus, for each stopped / started event, one row per
    partition the instance ever had; prev_type is that (instance, partition)'s previous
    row, so `prev_type = 'assigned'` means the instance owned it just before."""
    ev = consumer_events.where(F.col("type").isin("assigned", *_RELEASES, *_ENDS))
    listed = (ev.where(F.col("type").isin("assigned", *_RELEASES))
              .select("instance", F.explode("partitions").alias("partition"), "ts", "type",
                      "generation"))
    ever = listed.where(F.col("type") == "assigned").select("instance", "partition").distinct()
    ends = (ev.where(F.col("type").isin(*_ENDS)).select("instance", "ts", "type")
            .join(ever, "instance").withColumn("generation", F.lit(None).cast("long")))
    rows = listed.unionByName(ends).withColumn("rank", _rank())
    w = Window.partitionBy("instance", "partition").orderBy("ts", "rank")
    return rows.withColumn("prev_type", F.lag("type").over(w))


def _partition_pauses(consumer_events: DataFrame) -> DataFrame:
    """partition_pauses plus `generation`: the generation of the assignment that ended it."""
    own = _ownership(consumer_events)
    releases = (own.where(F.col("type").isin(*_RELEASES, *_ENDS)
                          & (F.col("prev_type") == "assigned"))
                .select("partition", F.col("instance").alias("old_instance"),
                        F.col("ts").alias("released_ts"), "rank", F.lit(0).alias("_acq")))
    acquires = (own.where(F.col("type") == "assigned")
                .select("partition", "rank", F.lit(1).alias("_acq"),
                        F.struct(F.col("ts").alias("acquired_ts"),
                                 F.col("instance").alias("new_instance"),
                                 F.col("generation")).alias("_a"),
                        F.col("ts").alias("released_ts")))
    both = releases.unionByName(acquires, allowMissingColumns=True)
    # newest first, so "the first assignment at or after the release" is a running last()
    w = (Window.partitionBy("partition")
         .orderBy(F.col("released_ts").desc(), F.col("rank").desc())
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    matched = (both.withColumn("_next", F.last("_a", ignorenulls=True).over(w))
               .where((F.col("_acq") == 0) & F.col("_next").isNotNull()))
    return matched.select(
        "partition", "old_instance", F.col("_next.new_instance").alias("new_instance"),
        F.col("released_ts").cast("long").alias("released_ts"),
        F.col("_next.acquired_ts").cast("long").alias("acquired_ts"),
        (F.col("_next.acquired_ts") - F.col("released_ts")).cast("long").alias("pause_ms"),
        F.col("_next.generation").alias("generation"))


def partition_pauses(consumer_events: DataFrame) -> DataFrame:
    """partition, old_instance, new_instance, released_ts, acquired_ts, pause_ms.

    A partition pauses from the moment its owner gives it up (a revoked or lost event
    naming it, or its instance's stopped event) until the next assigned event of any
    instance naming it. Under eager rebalancing the same instance may get it back: still a
    pause. A release never followed by an assignment (the end of the run) is no row."""
    return _partition_pauses(consumer_events).select(*PARTITION_PAUSE_COLUMNS)


def _member_pauses(consumer_events: DataFrame) -> DataFrame:
    own = _ownership(consumer_events)
    delta = (F.when((F.col("type") == "assigned")
                    & (F.col("prev_type").isNull() | (F.col("prev_type") != "assigned")), 1)
             .when(F.col("type").isin(*_RELEASES, *_ENDS) & (F.col("prev_type") == "assigned"),
                   -1)
             .otherwise(0))
    per_event = (own.withColumn("delta", delta)
                 .groupBy("instance", "ts", "rank", "type")
                 .agg(F.sum("delta").alias("delta"), F.max("generation").alias("generation")))
    # instance-wide events of an instance that never had a partition have no rows above
    lifecycle = (consumer_events.where(F.col("type").isin(*_ENDS))
                 .select("instance", "ts", "type").withColumn("rank", _rank())
                 .withColumn("delta", F.lit(0).cast("long"))
                 .withColumn("generation", F.lit(None).cast("long")))
    per_event = per_event.unionByName(lifecycle).groupBy("instance", "ts", "rank", "type").agg(
        F.sum("delta").alias("delta"), F.max("generation").alias("generation"))
    w = (Window.partitionBy("instance").orderBy("ts", "rank")
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    counted = per_event.withColumn("owned_after", F.sum("delta").over(w))
    counted = counted.withColumn("owned_before", F.col("owned_after") - F.col("delta"))
    starts = counted.where(F.col("type").isin(*_RELEASES) & (F.col("owned_before") > 0)
                           & (F.col("owned_after") == 0))
    # what comes next for a member left with nothing: an assignment with partitions (end of
    # the pause), or its end (no pause: it is not a running member any more)
    nexts = counted.where(((F.col("type") == "assigned") & (F.col("owned_after") > 0))
                          | F.col("type").isin(*_ENDS))
    both = (starts.select("instance", "ts", "rank", F.lit(0).alias("_n"))
            .unionByName(nexts.select("instance", "ts", "rank", F.lit(1).alias("_n"),
                                      F.struct(F.col("ts").alias("end_ts"), "type",
                                               "generation").alias("_e")),
                         allowMissingColumns=True))
    wr = (Window.partitionBy("instance").orderBy(F.col("ts").desc(), F.col("rank").desc())
          .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    matched = (both.withColumn("_next", F.last("_e", ignorenulls=True).over(wr))
               .where((F.col("_n") == 0) & (F.col("_next.type") == "assigned")))
    return matched.select(
        "instance", F.col("ts").cast("long").alias("start_ts"),
        F.col("_next.end_ts").cast("long").alias("end_ts"),
        (F.col("_next.end_ts") - F.col("ts")).cast("long").alias("pause_ms"),
        F.col("_next.generation").alias("generation"))


def member_pauses(consumer_events: DataFrame) -> DataFrame:
    """instance, start_ts, end_ts, pause_ms: an instance that stays alive is paused from the
    revoked / lost event that leaves it owning nothing until its next assigned event that
    gives it partitions (under eager every member pauses on every rebalance; under
    cooperative a member keeps its other partitions and does not)."""
    return _member_pauses(consumer_events).select(*MEMBER_PAUSE_COLUMNS)


def consumer_throughput(consumer_events: DataFrame, bucket_ms: int = CONSUMER_BUCKET_MS
                        ) -> DataFrame:
    """bucket_ts, records: records consumed per bucket summed over instances, every bucket
    from the first to the last (empty ones 0: the dips are the point)."""
    consumed = (consumer_events.where(F.col("type") == "consumed")
                .withColumn("bucket_ts", (F.floor(F.col("ts") / bucket_ms) * bucket_ms)
                            .cast("long")))
    counts = consumed.groupBy("bucket_ts").agg(F.sum("count").cast("long").alias("records"))
    span = consumed.agg(F.min("bucket_ts").alias("lo"), F.max("bucket_ts").alias("hi"))
    every = span.where(F.col("lo").isNotNull()).select(
        F.explode(F.sequence("lo", "hi", F.lit(bucket_ms).cast("long"))).alias("bucket_ts"))
    return (every.join(counts, "bucket_ts", "left")
            .select("bucket_ts", F.coalesce("records", F.lit(0)).cast("long").alias("records"))
            .orderBy("bucket_ts"))


def pause_totals(consumer_events: DataFrame) -> dict[str, int]:
    """{partition_pause_ms, member_pause_ms, rebalances}: the sums of the two pause measures
    and the number of generations the instances were assigned in (librdkafka reports -1:
    left out)."""
    return _totals(consumer_events, partition_pauses(consumer_events),
                   member_pauses(consumer_events))


def _totals(consumer_events: DataFrame, pp: DataFrame, mp: DataFrame) -> dict[str, int]:
    pp_ms = pp.agg(F.sum("pause_ms")).collect()[0][0]
    mp_ms = mp.agg(F.sum("pause_ms")).collect()[0][0]
    gens = (consumer_events.where((F.col("type") == "assigned") & (F.col("generation") >= 0))
            .select("generation").distinct().count())
    return {"partition_pause_ms": int(pp_ms or 0), "member_pause_ms": int(mp_ms or 0),
            "rebalances": int(gens)}


# --- broker-side rebalances ------------------------------------------------------------------

_STATE_ORDER = {"PreparingRebalance": 0, "CompletingRebalance": 1, "Empty": 1, "Stable": 2,
                "Dead": 3}


def _trigger(reason: Column) -> Column:
    """The coordinator's reasons (broker/coordinator/membership.py) in Kafka's words."""
    r = F.coalesce(reason, F.lit(""))
    return (F.when(r.rlike(r"^member \S+ joined$"), "member join")
            .when(r.rlike(r"^member \S+ left the group$"), "member leave")
            .when(r.rlike(r"session timeout$"), "session timeout")
            .when(r.rlike(r"^static member \S+ rejoined$"), "static member rejoin")
            .when(r.rlike(r"^member \S+ rejoined$"), "member rejoin")
            .when(r.rlike(r"did not sync in time$"), "sync timeout")
            .when(r.rlike(r"did not rejoin in time$"), "join timeout")
            .when(r == "", "unknown")
            .otherwise(F.concat(F.lit("member rejoin: "), r)))


def group_rebalances(events: DataFrame) -> DataFrame:
    """One row per rebalance, in (group, start_ts) order; see the module docstring."""
    gs = (events.where(F.col("type") == "group_state")
          .select("group", "ts", "generation", "old_state", "new_state", "protocol",
                  "members", "reason")
          .withColumn("_o", F.coalesce(lookup(_STATE_ORDER, F.col("new_state")), F.lit(9))))
    w = (Window.partitionBy("group").orderBy("ts", "generation", "_o")
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    is_start = ((F.col("new_state") == "PreparingRebalance")
                & (F.coalesce(F.col("old_state"), F.lit("")) != "CompletingRebalance"))
    gs = gs.withColumn("rebalance", F.sum(is_start.cast("int")).over(w))
    is_end = F.col("new_state").isin("Stable", "Empty", "Dead")
    ends_first = F.struct("ts", "generation", "new_state", "protocol", "members")
    per = (gs.where(F.col("rebalance") > 0).groupBy("group", "rebalance").agg(
        F.min(F.when(is_start, F.struct("ts", "generation", "reason", "members"))).alias("s"),
        F.min(F.when(is_end, ends_first)).alias("e"),
        F.max(F.when(F.col("protocol") != "", F.col("protocol"))).alias("_any_protocol"),
        F.max(F.when(F.col("new_state") == "CompletingRebalance", F.col("generation")))
        .alias("_completing_gen")))
    rb = per.select(
        "group", "rebalance",
        # the generation the rebalance produced; none yet while it is in progress
        F.coalesce(F.col("e.generation"), F.col("_completing_gen")).alias("generation"),
        F.coalesce(F.when(F.col("e.protocol") != "", F.col("e.protocol")), F.col("_any_protocol"))
        .alias("protocol"),
        F.col("s.reason").alias("reason"),
        F.col("s.ts").alias("start_ts"),
        F.when(F.col("e.new_state") == "Stable", F.col("e.ts")).alias("stable_ts"),
        F.coalesce(F.col("e.new_state"), F.lit("in progress")).alias("end_state"),
        F.col("e.ts").alias("_end_ts"),
        F.col("s.generation").alias("_start_gen"))
    rb = (rb.withColumn("protocol_kind", protocol_kind(F.col("protocol")))
          .withColumn("trigger", _trigger(F.col("reason")))
          .withColumn("duration_ms", (F.col("_end_ts") - F.col("start_ts")).cast("long")))

    # assignments: the previous generation's (what members owned going in) and the new one's
    assigned = (events.where(F.col("type") == "group_assignment")
                .select("group", "generation", "member",
                        F.coalesce("assigned", F.array().cast("array<string>")).alias("assigned")))
    gens = assigned.select("group", F.col("generation").alias("_g")).distinct()
    # going in: the last assignment handed out before the rebalance began
    prev = (rb.select("group", "rebalance", "_start_gen").join(gens, "group")
            .where(F.col("_g") <= F.col("_start_gen"))
            .groupBy("group", "rebalance").agg(F.max("_g").alias("prev_generation")))
    rb = rb.join(prev, ["group", "rebalance"], "left")

    pairs = assigned.select("group", "generation", "member",
                            F.explode("assigned").alias("tp"))
    old = pairs.select("group", F.col("generation").alias("prev_generation"),
                       F.col("member").alias("_om"), F.col("tp"))
    new = pairs.select("group", "generation", F.col("member").alias("_nm"), "tp")
    keys = rb.select("group", "rebalance", "generation", "prev_generation")
    old_rows = keys.join(old, ["group", "prev_generation"]).select("group", "rebalance", "tp",
                                                                   "_om")
    new_rows = keys.join(new, ["group", "generation"]).select("group", "rebalance", "tp", "_nm")
    joined = old_rows.join(new_rows, ["group", "rebalance", "tp"], "full_outer")
    stats = joined.groupBy("group", "rebalance").agg(
        F.count(F.col("_om")).alias("_owned_before"),
        F.sum(F.when(F.col("_om").isNotNull()
                     & (F.col("_nm").isNull() | (F.col("_nm") != F.col("_om"))), 1)
              .otherwise(0)).alias("_given_up"),
        F.sum(F.when(F.col("_nm").isNotNull()
                     & (F.col("_om").isNull() | (F.col("_om") != F.col("_nm"))), 1)
              .otherwise(0)).alias("partitions_moved"))
    members_of = assigned.groupBy("group", "generation").agg(
        F.countDistinct("member").alias("_members"))
    rb = (rb.join(stats, ["group", "rebalance"], "left")
          .join(members_of.withColumnRenamed("generation", "prev_generation")
                .withColumnRenamed("_members", "members_before"),
                ["group", "prev_generation"], "left")
          .join(members_of.withColumnRenamed("_members", "_members_new"),
                ["group", "generation"], "left"))
    # eager: every member revokes everything it owns before it rejoins
    revoked = F.when(F.col("protocol_kind") == "eager", F.col("_owned_before")) \
        .otherwise(F.col("_given_up"))
    # both counts need the new assignment: unknown while a rebalance is in progress
    return (rb.withColumn("partitions_revoked",
                          F.when(F.col("stable_ts").isNotNull(),
                                 F.coalesce(revoked, F.lit(0))).cast("long"))
            .withColumn("partitions_moved",
                        F.when(F.col("stable_ts").isNotNull(),
                               F.coalesce("partitions_moved", F.lit(0))).cast("long"))
            .withColumn("members_before", F.coalesce("members_before", F.lit(0)).cast("long"))
            .withColumn("members_after",
                        F.when(F.col("end_state") == "Empty", F.lit(0))
                        .otherwise(F.col("_members_new")).cast("long"))
            .select("group", "generation", "protocol", "protocol_kind", "trigger", "reason",
                    "start_ts", "stable_ts", "end_state", "duration_ms", "members_before",
                    "members_after", "partitions_revoked", "partitions_moved")
            .orderBy("group", "start_ts"))


def member_rebalance_intervals(events: DataFrame, rebalances: DataFrame) -> DataFrame:
    """group, generation, member, client_id, join_ts, assigned_ts, in_rebalance_ms: per
    member of each completed rebalance, from its JoinGroup (its first group_join in the
    rebalance; members that did not rejoin count from the rebalance's start) to the
    assignment, when under eager rebalancing it can fetch again."""
    joins = (events.where(F.col("type") == "group_join")
             .select(F.col("group").alias("_jg"), F.col("member").alias("_jm"),
                     F.col("ts").alias("_jts")))
    assigned = (events.where(F.col("type") == "group_assignment")
                .select("group", "generation", "member", "client_id",
                        F.col("ts").alias("assigned_ts")))
    done = rebalances.where(F.col("stable_ts").isNotNull()).select("group", "generation",
                                                                    "start_ts")
    base = done.join(assigned, ["group", "generation"])
    # the window is part of the join: a member whose joins all fall outside it (its first
    # JoinGroup answered MEMBER_ID_REQUIRED before the rebalance began, say) keeps its row
    in_window = ((F.col("group") == F.col("_jg")) & (F.col("member") == F.col("_jm"))
                 & (F.col("_jts") >= F.col("start_ts")) & (F.col("_jts") <= F.col("assigned_ts")))
    with_join = (base.join(joins, in_window, "left")
                 .groupBy("group", "generation", "member", "client_id", "start_ts", "assigned_ts")
                 .agg(F.min("_jts").alias("_jts")))
    return (with_join.select("group", "generation", "member", "client_id",
                             F.coalesce("_jts", "start_ts").alias("join_ts"), "assigned_ts")
            .withColumn("in_rebalance_ms", F.col("assigned_ts") - F.col("join_ts"))
            .orderBy("group", "generation", "member"))


def with_pauses(rebalances: DataFrame, consumer_events: DataFrame) -> DataFrame:
    """rebalances plus partition_pause_ms, partition_pauses, member_pause_ms, member_pauses:
    each pause is charged to the rebalance whose generation ended it (the bench runs one
    group, whose generations the consumer events carry)."""
    return _charge(rebalances, _partition_pauses(consumer_events),
                   _member_pauses(consumer_events))


def _charge(rebalances: DataFrame, partition_pauses_g: DataFrame,
            member_pauses_g: DataFrame) -> DataFrame:
    pp = (partition_pauses_g.groupBy("generation")
          .agg(F.sum("pause_ms").alias("partition_pause_ms"),
               F.count(F.lit(1)).alias("partition_pauses")))
    mp = (member_pauses_g.groupBy("generation")
          .agg(F.sum("pause_ms").alias("member_pause_ms"),
               F.count(F.lit(1)).alias("member_pauses")))
    return (rebalances.join(pp, "generation", "left").join(mp, "generation", "left")
            .orderBy("group", "start_ts"))


# --- the job -----------------------------------------------------------------------------

def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("rebalances")
    events = ctx.table(spark, "events")
    # each table runs once (report.Collected): its files, the charts and the tables built
    # on it (over the collected rows) come from that
    rebalances_c = report.collect(group_rebalances(events))
    rebalances = rebalances_c.frame()
    intervals = report.collect(member_rebalance_intervals(events, rebalances))
    result.tables.update(rebalances=rebalances_c, member_intervals=intervals)
    result.show.append("rebalances")
    out_dir = ctx.job_dir("rebalances")
    span = ctx.time_span(spark)

    ce = ctx.table(spark, "consumer_events")
    if ce is not None:
        # each pause computed once: the table, the per-rebalance sums and the totals
        pp_g, mp_g = _partition_pauses(ce).persist(), _member_pauses(ce).persist()
        rebalances_p = _charge(rebalances, pp_g, mp_g)
        pp, mp = pp_g.select(*PARTITION_PAUSE_COLUMNS), mp_g.select(*MEMBER_PAUSE_COLUMNS)
        tp = consumer_throughput(ce)
        totals = _totals(ce, pp, mp)
        result.tables.update(rebalances=rebalances_p, partition_pauses=pp, member_pauses=mp,
                             consumer_throughput=tp,
                             pause_totals=spark.createDataFrame([totals]))
        result.show += ["pause_totals", "member_pauses"]
        result.notes.append(
            "consumer events from {}: total partition pause {:,} ms, total member pause "
            "{:,} ms over {} generations".format(ctx.consumer_events_dir,
                                                 totals["partition_pause_ms"],
                                                 totals["member_pause_ms"], totals["rebalances"]))
        rows = [(r["instance"], r["start_ts"], r["end_ts"], "member pause")
                for r in mp.collect()]
        if rows:
            result.charts.append(report.gantt(out_dir / "member_pauses.png", rows,
                                              "member pauses (owning no partition)",
                                              span=span))
        tpd = tp.collect()
        markers = [(r["start_ts"], r["trigger"]) for r in rebalances_c.rows()]
        if tpd:
            result.charts.append(report.lines(
                out_dir / "consumer_throughput.png",
                {"records consumed / s": ([r["bucket_ts"] for r in tpd],
                                          [r["records"] for r in tpd])},
                "throughput versus time (all consumers)", "records / s",
                markers=markers, span=span, bucket_ms=CONSUMER_BUCKET_MS))

    rows = [(f"{r['group']} {r['member'][:24]}", r["join_ts"], r["assigned_ts"],
             f"gen {r['generation']}") for r in intervals.rows()]
    if rows:
        kinds = sorted({k for *_, k in rows})
        if len(kinds) > 10:  # colour by rebalance only while the legend stays readable
            rows = [(lane, s, e, "in rebalance") for lane, s, e, _ in rows]
        result.charts.append(report.gantt(out_dir / "members_in_rebalance.png", rows,
                                          "members from JoinGroup to assignment (broker view)",
                                          span=span))
    # (the table is in group, start_ts order; a stable sort keeps that among equal starts)
    done = sorted((r for r in rebalances_c.rows() if r["duration_ms"] is not None),
                  key=lambda r: r["start_ts"])
    if done:
        result.charts.append(report.bars(
            out_dir / "rebalance_durations.png",
            [f"{r['group']} g{r['generation']}" for r in done],
            [r["duration_ms"] for r in done], "rebalance duration (start to stable)", "ms"))
    else:
        result.notes.append("no completed rebalances in the event log")
    first = min((r["start_ts"] for r in rebalances_c.rows() if r["start_ts"] is not None),
                default=None)
    if first is not None:
        result.notes.append(f"first rebalance at {ms_to_text(first)}")
    return result
