"""The rebalances job on crafted broker events (one row per rebalance) and the pause
functions on crafted consumer events: under eager rebalancing every partition and every
running member pauses; under cooperative only the partitions that move do."""

from __future__ import annotations

from spark_jobs.jobs import frame
from spark_jobs.jobs.rebalances import (consumer_throughput, group_rebalances,
                                        member_pauses, member_rebalance_intervals,
                                        partition_pauses, pause_totals, with_pauses)
from spark_jobs.tables import CONSUMER_EVENTS_SCHEMA, EVENTS_SCHEMA

P = ["t-0", "t-1", "t-2", "t-3"]


def consumer_events(spark, rows):
    return frame(spark, CONSUMER_EVENTS_SCHEMA,
                 [dict(zip(("ts", "type", "instance"), r[:3]), **(r[3] if len(r) > 3 else {}))
                  for r in rows])


def eager_bounce(spark):
    """c1 is bounced: it revokes everything and stops; c0 revokes everything for the
    rebalance and gets all four; c1 comes back, everyone revokes, both get two back."""
    a = lambda parts, g: {"partitions": parts, "generation": g}  # noqa: E731
    return consumer_events(spark, [
        (0, "started", "c0", {"protocol": "eager"}), (0, "started", "c1", {"protocol": "eager"}),
        (100, "assigned", "c0", a(P[:2], 1)), (100, "assigned", "c1", a(P[2:], 1)),
        (200, "consumed", "c0", {"count": 5}), (1200, "consumed", "c1", {"count": 3}),
        (1000, "revoked", "c1", a(P[2:], 1)), (1010, "stopped", "c1"),
        (1100, "revoked", "c0", a(P[:2], 1)),
        (1500, "assigned", "c0", a(P, 2)),
        (2000, "started", "c1", {"protocol": "eager"}),
        (2100, "revoked", "c0", a(P, 2)),
        (2500, "assigned", "c0", a(P[:2], 3)), (2520, "assigned", "c1", a(P[2:], 3)),
        (2600, "consumed", "c1", {"count": 7}), (2601, "consumed", "c0", {"count": 1}),
    ])


def cooperative_bounce(spark):
    """The same bounce under cooperative-sticky: assignments are increments, and only what
    moves is revoked."""
    a = lambda parts, g: {"partitions": parts, "generation": g}  # noqa: E731
    return consumer_events(spark, [
        (0, "started", "c0", {"protocol": "cooperative"}),
        (0, "started", "c1", {"protocol": "cooperative"}),
        (100, "assigned", "c0", a(P[:2], 1)), (100, "assigned", "c1", a(P[2:], 1)),
        (1000, "revoked", "c1", a(P[2:], 1)), (1010, "stopped", "c1"),
        (1500, "assigned", "c0", a(P[2:], 2)),
        (2000, "started", "c1", {"protocol": "cooperative"}),
        (2100, "revoked", "c0", a(["t-3"], 2)),          # first rebalance: give t-3 up
        (2110, "assigned", "c0", a([], 3)), (2110, "assigned", "c1", a([], 3)),
        (2600, "assigned", "c1", a(["t-3"], 4)),         # second: the new owner gets it
    ])


def _rows(df, order):
    return [tuple(r) for r in df.orderBy(*order).collect()]


def test_eager_everything_pauses(spark):
    ce = eager_bounce(spark)
    assert _rows(partition_pauses(ce), ["released_ts", "partition"]) == [
        ("t-2", "c1", "c0", 1000, 1500, 500), ("t-3", "c1", "c0", 1000, 1500, 500),
        ("t-0", "c0", "c0", 1100, 1500, 400), ("t-1", "c0", "c0", 1100, 1500, 400),
        ("t-0", "c0", "c0", 2100, 2500, 400), ("t-1", "c0", "c0", 2100, 2500, 400),
        ("t-2", "c0", "c1", 2100, 2520, 420), ("t-3", "c0", "c1", 2100, 2520, 420)]
    # c1 stopped after giving everything up and started owning nothing: never a paused member
    assert _rows(member_pauses(ce), ["start_ts"]) == [("c0", 1100, 1500, 400),
                                                      ("c0", 2100, 2500, 400)]
    assert pause_totals(ce) == {"partition_pause_ms": 3440, "member_pause_ms": 800,
                                "rebalances": 3}


def test_cooperative_only_the_moved_partition_pauses(spark):
    ce = cooperative_bounce(spark)
    assert _rows(partition_pauses(ce), ["released_ts", "partition"]) == [
        ("t-2", "c1", "c0", 1000, 1500, 500), ("t-3", "c1", "c0", 1000, 1500, 500),
        ("t-3", "c0", "c1", 2100, 2600, 500)]
    assert member_pauses(ce).count() == 0
    assert pause_totals(ce) == {"partition_pause_ms": 1500, "member_pause_ms": 0,
                                "rebalances": 4}


def test_stopped_releases_what_the_instance_still_owned(spark):
    # killed without a revocation: its stopped event is when its partitions were let go
    ce = consumer_events(spark, [
        (0, "assigned", "c0", {"partitions": ["t-0"], "generation": 1}),
        (0, "assigned", "c1", {"partitions": ["t-1"], "generation": 1}),
        (700, "stopped", "c1"),
        (900, "assigned", "c0", {"partitions": ["t-1"], "generation": 2})])
    assert _rows(partition_pauses(ce), ["released_ts"]) == [("t-1", "c1", "c0", 700, 900, 200)]


def test_consumer_throughput_fills_empty_buckets(spark):
    rows = _rows(consumer_throughput(eager_bounce(spark), bucket_ms=1000), ["bucket_ts"])
    assert rows == [(0, 5), (1000, 3), (2000, 8)]
    assert _rows(consumer_throughput(eager_bounce(spark), bucket_ms=500), ["bucket_ts"]) == [
        (0, 5), (500, 0), (1000, 3), (1500, 0), (2000, 0), (2500, 8)]


def _state(ts, group, gen, old, new, reason, protocol="", members=0):
    return {"ts": ts, "type": "group_state", "broker": 0, "group": group, "generation": gen,
            "old_state": old, "new_state": new, "reason": reason, "protocol": protocol,
            "protocol_type": "consumer", "members": members}


def _assign(ts, group, gen, member, parts, protocol):
    return {"ts": ts, "type": "group_assignment", "broker": 0, "group": group,
            "generation": gen, "member": member, "assigned": parts, "protocol": protocol}


def broker_events(spark):
    e, c = "range", "cooperative-sticky"
    rows = []
    for group, proto in (("eager", e), ("coop", c)):
        rows += [_state(50, group, 0, "Empty", "PreparingRebalance", "member A joined"),
                 _state(80, group, 1, "PreparingRebalance", "CompletingRebalance",
                        "rebalance complete", proto, 2),
                 _state(90, group, 1, "CompletingRebalance", "Stable", "assignment received",
                        proto, 2),
                 _assign(90, group, 1, "A", P[:2], proto), _assign(90, group, 1, "B", P[2:], proto),
                 _state(1005, group, 1, "Stable", "PreparingRebalance",
                        "member B left the group", proto, 1),
                 _state(1400, group, 2, "PreparingRebalance", "CompletingRebalance",
                        "rebalance complete", proto, 1),
                 _state(1450, group, 2, "CompletingRebalance", "Stable", "assignment received",
                        proto, 1),
                 _assign(1450, group, 2, "A", P, proto)]
    # cooperative: C joins; the first rebalance takes t-3 from A, the second gives it to C
    rows += [_state(2005, "coop", 2, "Stable", "PreparingRebalance", "member C joined", c, 2),
             _state(2050, "coop", 3, "PreparingRebalance", "CompletingRebalance",
                    "rebalance complete", c, 2),
             _state(2060, "coop", 3, "CompletingRebalance", "Stable", "assignment received", c, 2),
             _assign(2060, "coop", 3, "A", P[:3], c), _assign(2060, "coop", 3, "C", [], c),
             _state(2200, "coop", 3, "Stable", "PreparingRebalance", "member A rejoined", c, 2),
             _state(2230, "coop", 4, "PreparingRebalance", "CompletingRebalance",
                    "rebalance complete", c, 2),
             _state(2240, "coop", 4, "CompletingRebalance", "Stable", "assignment received", c, 2),
             _assign(2240, "coop", 4, "A", P[:3], c), _assign(2240, "coop", 4, "C", ["t-3"], c),
             # a session timeout still in progress at the end of the log
             _state(3000, "coop", 4, "Stable", "PreparingRebalance",
                    "member C session timeout", c, 1)]
    return frame(spark, EVENTS_SCHEMA, rows)


def test_group_rebalances_rows(spark):
    rows = group_rebalances(broker_events(spark)).collect()
    got = [(r["group"], r["generation"], r["protocol_kind"], r["trigger"], r["start_ts"],
            r["stable_ts"], r["duration_ms"], r["members_before"], r["members_after"],
            r["partitions_revoked"], r["partitions_moved"]) for r in rows]
    assert got == [
        ("coop", 1, "cooperative", "member join", 50, 90, 40, 0, 2, 0, 4),
        ("coop", 2, "cooperative", "member leave", 1005, 1450, 445, 2, 1, 2, 2),
        ("coop", 3, "cooperative", "member join", 2005, 2060, 55, 1, 2, 1, 0),
        ("coop", 4, "cooperative", "member rejoin", 2200, 2240, 40, 2, 2, 0, 1),
        ("coop", None, "cooperative", "session timeout", 3000, None, None, 2, None, None, None),
        ("eager", 1, "eager", "member join", 50, 90, 40, 0, 2, 0, 4),
        ("eager", 2, "eager", "member leave", 1005, 1450, 445, 2, 1, 4, 2),
    ]
    assert {r["protocol"] for r in rows} == {"range", "cooperative-sticky"}
    assert rows[4]["end_state"] == "in progress"


def test_pauses_are_charged_to_the_generation_that_ended_them(spark):
    eager = group_rebalances(broker_events(spark)).where("group = 'eager'")
    rows = {r["generation"]: r for r in with_pauses(eager, eager_bounce(spark)).collect()}
    assert (rows[2]["partition_pause_ms"], rows[2]["partition_pauses"],
            rows[2]["member_pause_ms"], rows[2]["member_pauses"]) == (1800, 4, 400, 1)
    assert rows[1]["partition_pause_ms"] is None


def _join(ts, group, member):
    return {"ts": ts, "type": "group_join", "broker": 0, "group": group, "member": member}


def test_each_member_of_a_rebalance_counts_from_its_join_or_from_the_start(spark):
    """A joins inside the window; B's only JoinGroup came before the rebalance began (its
    first, answered MEMBER_ID_REQUIRED): B counts from the start and is not dropped."""
    events = frame(spark, EVENTS_SCHEMA, [
        _join(40, "g", "B"),
        _state(50, "g", 0, "Empty", "PreparingRebalance", "member A joined"),
        _join(60, "g", "A"),
        _state(80, "g", 1, "PreparingRebalance", "CompletingRebalance", "rebalance complete",
               "range", 2),
        _state(90, "g", 1, "CompletingRebalance", "Stable", "assignment received", "range", 2),
        _assign(90, "g", 1, "A", P[:2], "range"), _assign(95, "g", 1, "B", P[2:], "range")])
    rows = member_rebalance_intervals(events, group_rebalances(events)).collect()
    assert [(r["member"], r["join_ts"], r["assigned_ts"], r["in_rebalance_ms"])
            for r in rows] == [("A", 60, 90, 30), ("B", 50, 95, 45)]
