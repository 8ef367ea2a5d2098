"""The authentication failures job on a crafted event log: failures grouped by principal and
peer host (the port dropped, an unnamed principal shown as such) and counted per minute."""

from __future__ import annotations

from spark_jobs.jobs import frame
from spark_jobs.jobs.auth import UNNAMED, auth_failures, failures_by_source, failures_per_minute
from spark_jobs.tables import EVENTS_SCHEMA


def _failure(ts, broker, principal, peer, mechanism, reason):
    return {"ts": ts, "type": "auth_failure", "broker": broker, "principal": principal,
            "listener": "SASL_SSL", "peer": peer, "mechanism": mechanism, "reason": reason}


ROWS = [
    _failure(60_000, 0, "User:mallory", "10.0.0.9:50001", "SCRAM-SHA-512", "bad password"),
    _failure(61_000, 1, "User:mallory", "10.0.0.9:50002", "SCRAM-SHA-512", "bad password"),
    _failure(125_000, 0, "User:mallory", "10.0.0.9:50003", "PLAIN", "bad password"),
    _failure(70_000, 0, "", "[::1]:40000", "", "TLS handshake failed"),
    _failure(130_000, 2, "User:bob", "10.0.0.5:1234", "PLAIN", "unknown user"),
    # not a failure: other events are ignored
    {"ts": 65_000, "type": "connection_error", "broker": 0, "peer": "10.0.0.9:1",
     "error": "x"},
]


def test_failures_by_principal_and_peer_host(spark):
    events = frame(spark, EVENTS_SCHEMA, ROWS)
    assert auth_failures(events).count() == 5
    rows = [r.asDict() for r in failures_by_source(events).collect()]
    assert [(r["principal"], r["peer_host"], r["failures"], r["first_ts"], r["last_ts"],
             r["mechanisms"], r["brokers"]) for r in rows] == [
        ("User:mallory", "10.0.0.9", 3, 60_000, 125_000, ["PLAIN", "SCRAM-SHA-512"], [0, 1]),
        (UNNAMED, "::1", 1, 70_000, 70_000, [""], [0]),
        ("User:bob", "10.0.0.5", 1, 130_000, 130_000, ["PLAIN"], [2]),
    ]
    assert rows[0]["reasons"] == ["bad password"]


def test_failures_per_minute(spark):
    events = frame(spark, EVENTS_SCHEMA, ROWS)
    got = [tuple(r) for r in failures_per_minute(events).collect()]
    assert got == [(60_000, UNNAMED, "::1", 1), (60_000, "User:mallory", "10.0.0.9", 2),
                   (120_000, "User:bob", "10.0.0.5", 1),
                   (120_000, "User:mallory", "10.0.0.9", 1)]
