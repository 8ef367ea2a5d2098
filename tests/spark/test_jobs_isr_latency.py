"""The ISR health and request latency jobs on crafted event logs (a single broker writes no
replication events, so the ISR job is exercised on a made-up three-broker history)."""

from __future__ import annotations

import pytest

from spark_jobs.jobs import frame
from spark_jobs.jobs.isr import broker_health, partition_health
from spark_jobs.jobs.latency import rebalance_markers, request_latency
from spark_jobs.tables import EVENTS_SCHEMA


def _isr(ts, partition, leader, kind, old, new):
    return {"ts": ts, "type": "isr_change", "broker": leader, "topic": "t",
            "partition": partition, "leader_id": leader, "kind": kind, "old_isr": old,
            "new_isr": new}


def test_isr_health_from_replication_events(spark):
    events = frame(spark, EVENTS_SCHEMA, [
        {"ts": 0, "type": "topic_create", "broker": 1, "topic": "t", "partitions": 2,
         "replication_factor": 3},
        {"ts": 1000, "type": "leader_change", "broker": 2, "topic": "t", "partition": 0,
         "old_leader": 1, "new_leader": 2, "leader_epoch": 1},
        _isr(1000, 0, 2, "shrink", [1, 2, 3], [2, 3]),
        _isr(4000, 0, 2, "expand", [2, 3], [1, 2, 3]),
        _isr(5000, 1, 1, "shrink", [1, 2, 3], [1, 2]),   # still under-replicated at the end
    ])
    rows = {r["partition"]: r for r in partition_health(events, 10_000).collect()}
    assert [(r["replication_factor"], r["isr_shrinks"], r["isr_expands"], r["leader_changes"],
             r["under_replicated_s"], r["last_leader"], r["last_isr"])
            for _, r in sorted(rows.items())] == [
        (3, 1, 1, 1, 3.0, 2, [1, 2, 3]),
        (3, 1, 0, 0, 5.0, None, [1, 2])]
    assert [tuple(r) for r in broker_health(events).collect()] == [
        (1, 0, 0, 1), (2, 1, 0, 1), (3, 0, 1, 0)]


def test_request_latency_percentiles_per_minute(spark):
    rows = [{"ts": 60_000 + i, "type": "request", "broker": 0, "api": "Fetch", "api_key": 1,
             "latency_ms": float(i), "error": "NOT_LEADER_OR_FOLLOWER" if i > 97 else None}
            for i in range(1, 101)]
    rows += [{"ts": 125_000, "type": "request", "broker": 0, "api": "Fetch", "api_key": 1,
              "latency_ms": 7.0, "error": ""},
             {"ts": 61_000, "type": "group_state", "broker": 0, "group": "g", "generation": 3,
              "old_state": "Stable", "new_state": "PreparingRebalance",
              "reason": "member m joined"}]
    events = frame(spark, EVENTS_SCHEMA, rows)
    got = [(r["bucket_ts"], r["requests"], r["errors"], r["p50_ms"], r["p95_ms"], r["p99_ms"],
            r["max_ms"]) for r in request_latency(events).collect()]
    assert got[0][:3] == (60_000, 100, 3)
    assert got[0][3:] == pytest.approx((50.5, 95.05, 99.01, 100.0))
    assert got[1] == (120_000, 1, 0, 7.0, 7.0, 7.0, 7.0)
    assert [tuple(r) for r in rebalance_markers(events).collect()] == [
        (61_000, "g", 3, "member m joined")]
