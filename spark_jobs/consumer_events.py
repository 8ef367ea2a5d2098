"""The event schema of the rebalance bench's consumers.

Owns: `CONSUMER_EVENT_TYPES`, what each consumer of `minibroker bench rebalance` writes to
OUT/consumers/<instance>.jsonl (one JSON object a line: `CONSUMER_COMMON_FIELDS`, then the
fields its type declares), and `CONSUMER_EVENT_ORDER`, how same-millisecond events sort.

This module is the contract between the bench, which writes these events, and spark_jobs
(tables.CONSUMER_EVENTS_SCHEMA and the rebalances job read them), as broker/events.py is for
the broker's own events; so it imports nothing of ours. It lives here, with its reader, so
that spark_jobs imports nothing of bench/ (bench/ already reads spark_jobs). The analysis joins the two logs: `instance` is the bench's name for the process
(c0..c9), `partitions` are "topic-partition" strings. Field types use broker/events.py's
names ("string", "long", "array<string>", ...).
"""

from __future__ import annotations

__all__ = ["CONSUMER_COMMON_FIELDS", "CONSUMER_EVENT_ORDER", "CONSUMER_EVENT_TYPES"]

# Every line carries these; no `broker` field, unlike the broker's own events.
CONSUMER_COMMON_FIELDS = {"ts": "long", "type": "string"}

CONSUMER_EVENT_TYPES: dict[str, dict[str, str]] = {
    "started": {"instance": "string", "client": "string", "protocol": "string"},
    "assigned": {"instance": "string", "member": "string", "generation": "long",
                 "partitions": "array<string>"},
    "revoked": {"instance": "string", "member": "string", "generation": "long",
                "partitions": "array<string>"},
    "lost": {"instance": "string", "member": "string", "generation": "long",
             "partitions": "array<string>"},
    "consumed": {"instance": "string", "topic": "string", "partition": "long",
                 "first_offset": "long", "last_offset": "long", "count": "long",
                 "produced_ts": "long"},
    "stopped": {"instance": "string", "reason": "string"},
}

# Same-millisecond consumer events sort as the protocol runs them: a member starts before it
# is assigned, an old owner gives a partition up before a new owner gets it. Used by the
# bench's plain-Python replay and by the Spark rebalances job, which must agree.
CONSUMER_EVENT_ORDER = {"started": 0, "revoked": 1, "lost": 1, "stopped": 2, "assigned": 3,
                        "consumed": 4}
