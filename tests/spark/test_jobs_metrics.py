"""The broker metrics job on a crafted event log: counter rates between a broker's metrics
events (a restart counting from 0), request rates and mean times from the name=value
arrays, the per-broker summary, and the charts on the report's time axis."""

from __future__ import annotations

from spark_jobs.jobs import Context, frame
from spark_jobs.jobs.metrics import (broker_metrics, client_metrics, metrics_summary,
                                     request_rates, run)
from spark_jobs.report import time_axis
from spark_jobs.tables import EVENTS_SCHEMA


def _metrics(ts, broker, messages_in, *, under=0, shrinks=0, active=0, requests=(),
             times=()):
    return {"ts": ts, "type": "metrics", "broker": broker, "messages_in": messages_in,
            "bytes_in": messages_in * 100, "bytes_out": messages_in * 50,
            "replication_bytes_out": 0, "failed_produce_requests": 0,
            "partition_count": 4, "leader_count": 2, "under_replicated_partitions": under,
            "under_min_isr_partitions": 0, "at_min_isr_partitions": 0, "offline_replicas": 0,
            "isr_shrinks": shrinks, "isr_expands": 0, "fetch_sessions": 0,
            "fetch_session_partitions": 0, "fetch_session_evictions": 0, "connections": 1,
            "broker_state": 3, "active_controller": active, "offline_partitions": 0,
            "global_topics": 1, "global_partitions": 4, "active_brokers": 2,
            "fenced_brokers": 0, "preferred_replica_imbalance": 0,
            "requests": list(requests), "request_time_ms": list(times)}


ROWS = [
    _metrics(0, 0, 0, active=1, requests=["Produce=0"], times=["Produce=0"]),
    _metrics(60_000, 0, 6_000, active=1, requests=["Produce=60", "Metadata=2"],
             times=["Produce=120.0", "Metadata=1.0"]),
    _metrics(120_000, 0, 18_000, under=1, shrinks=1, active=1,
             requests=["Produce=180", "Metadata=2"], times=["Produce=600.0", "Metadata=1.0"]),
    # broker 1 restarts between its two events: 500 counted from 0
    _metrics(30_000, 1, 900),
    _metrics(90_000, 1, 500),
    {"ts": 10_000, "type": "broker_start", "broker": 1, "listener": "x", "data_dir": "d",
     "cluster_id": "c", "clean_shutdown": True, "version": "0.1.0"},
    # a client's KIP-714 push
    {"ts": 70_000, "type": "client_metrics", "broker": 0, "client_instance_id": "i-1",
     "client_id": "app", "peer": "127.0.0.1:1", "terminating": False,
     "points": ["org.apache.kafka.producer.request.latency.avg=2.5",
                "org.apache.kafka.producer.node.request.latency.avg{node.id=0}=1e-05",
                "a.total{k=a=b}=7"]},
]


def test_rates_between_a_brokers_events_and_a_restart_counting_from_zero(spark):
    events = frame(spark, EVENTS_SCHEMA, ROWS)
    rows = [r.asDict() for r in broker_metrics(events).collect()]
    assert [(r["broker"], r["ts"], r["from_ts"], r["messages_in_per_s"]) for r in rows] == [
        (0, 0, None, None), (0, 60_000, 0, 100.0), (0, 120_000, 60_000, 200.0),
        (1, 30_000, None, None), (1, 90_000, 30_000, 500 / 60)]
    assert rows[2]["bytes_in_per_s"] == 20_000.0 and rows[2]["bytes_out_per_s"] == 10_000.0
    assert [r["isr_shrinks_delta"] for r in rows[:3]] == [None, 0, 1]
    assert rows[2]["under_replicated_partitions"] == 1


def test_request_rates_and_mean_times(spark):
    events = frame(spark, EVENTS_SCHEMA, ROWS)
    got = [(r["request"], r["ts"], r["requests"], r["requests_per_s"], r["mean_ms"])
           for r in request_rates(events).collect()]
    assert got == [("Metadata", 120_000, 0, 0.0, None),
                   ("Produce", 60_000, 60, 1.0, 2.0),
                   ("Produce", 120_000, 120, 2.0, 4.0)]


def test_client_points_one_row_each(spark):
    events = frame(spark, EVENTS_SCHEMA, ROWS)
    got = [(r["client_id"], r["metric"], r["attributes"], r["value"])
           for r in client_metrics(events).collect()]
    assert got == [("app", "a.total", "k=a=b", 7.0),
                   ("app", "org.apache.kafka.producer.node.request.latency.avg", "node.id=0",
                    1e-05),
                   ("app", "org.apache.kafka.producer.request.latency.avg", "", 2.5)]


def test_summary_per_broker(spark):
    events = frame(spark, EVENTS_SCHEMA, ROWS)
    rows = {r["broker"]: r.asDict() for r in metrics_summary(events).collect()}
    assert rows[0]["messages_in"] == 18_000 and rows[0]["samples"] == 3
    assert rows[1]["messages_in"] == 900 + 500  # before the restart, and after it
    assert rows[0]["max_under_replicated"] == 1 and rows[0]["isr_shrinks"] == 1
    assert rows[0]["active_controller_samples"] == 3 and rows[1]["active_controller_samples"] == 0
    assert rows[1]["last_partition_count"] == 4


def test_the_charts_share_the_reports_time_axis(spark, tmp_path):
    events_dir = tmp_path / "data" / "events"
    events_dir.mkdir(parents=True)
    import json
    with open(events_dir / "events-0000000000.jsonl", "w") as f:
        for row in ROWS:
            f.write(json.dumps(row) + "\n")
    ctx = Context(data_dir=tmp_path / "data", out=tmp_path / "out")
    result = run(spark, ctx)
    names = sorted(p.name for p in result.charts)
    assert names == ["bytes.png", "client_latency.png", "isr_changes.png", "messages_in.png",
                     "partitions.png", "request_time.png", "requests.png",
                     "under_replicated.png"]
    span = ctx.time_span(spark)
    assert span == (0, 120_000)
    for chart in result.charts:
        axis = time_axis(chart)
        assert axis is not None and axis["t0_ms"] == 0 and axis["span"] == [0, 120_000], chart


def test_no_metrics_events_says_so(spark, tmp_path):
    (tmp_path / "data" / "events").mkdir(parents=True)
    result = run(spark, Context(data_dir=tmp_path / "data", out=tmp_path / "out"))
    assert result.charts == [] and result.notes and "no metrics events" in result.notes[0]
