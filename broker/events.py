"""The broker's structured event log: the schema, and the JSON-lines writer.

Owns: `EVENT_TYPES`, the one declaration of every event the broker writes and the fields each
carries (spark_jobs reads its schema from here: this module is that contract), and
`EventLog`, which writes one JSON object per line to DIR/events/events-<n>.jsonl and rotates
by size, keeping a bounded number of files.

Every event has `ts` (epoch milliseconds), `type` and `broker`. Writing an event with a field
its type does not declare is a bug and raises, so the schema cannot drift from what is
written.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

# type -> {field: json type}. Types: "string", "long", "double", "boolean", "array<string>",
# "array<long>". Partitions in arrays are written "topic-partition"; offsets "topic-partition=offset".
COMMON_FIELDS = {"ts": "long", "type": "string", "broker": "long"}

EVENT_TYPES: dict[str, dict[str, str]] = {
    "broker_start": {"listener": "string", "data_dir": "string", "cluster_id": "string",
                     "clean_shutdown": "boolean", "version": "string"},
    "broker_stop": {"reason": "string", "uptime_ms": "long"},
    "topic_create": {"topic": "string", "topic_id": "string", "partitions": "long",
                     "replication_factor": "long", "configs": "string", "auto": "boolean"},
    "topic_delete": {"topic": "string", "topic_id": "string"},
    "partitions_create": {"topic": "string", "old_count": "long", "new_count": "long"},
    "segment_roll": {"topic": "string", "partition": "long", "base_offset": "long"},
    "segment_delete": {"topic": "string", "partition": "long", "base_offset": "long",
                       "reason": "string"},
    "log_clean": {"topic": "string", "partition": "long", "bytes_before": "long",
                  "bytes_after": "long", "records_removed": "long",
                  "tombstones_removed": "long", "duration_ms": "double"},
    "log_recovery": {"topic": "string", "partition": "long", "truncated_bytes": "long",
                     "segments_recovered": "long", "log_end_offset": "long",
                     "duration_ms": "double"},
    "request": {"api": "string", "api_key": "long", "api_version": "long", "client_id": "string",
                "latency_ms": "double", "request_bytes": "long", "response_bytes": "long",
                "error": "string"},
    "connection_error": {"peer": "string", "error": "string"},
    # group coordinator: enough to rebuild every rebalance (owned and assigned partitions are
    # decoded from the consumer protocol bytes when the protocol type is "consumer")
    "group_state": {"group": "string", "generation": "long", "old_state": "string",
                    "new_state": "string", "protocol_type": "string", "protocol": "string",
                    "members": "long", "reason": "string"},
    "group_join": {"group": "string", "generation": "long", "member": "string",
                   "group_instance_id": "string", "client_id": "string", "client_host": "string",
                   "protocol_type": "string", "protocols": "array<string>",
                   "owned": "array<string>", "session_timeout_ms": "long",
                   "rebalance_timeout_ms": "long", "kind": "string", "reason": "string"},
    "group_sync": {"group": "string", "generation": "long", "member": "string",
                   "leader": "boolean"},
    "group_assignment": {"group": "string", "generation": "long", "protocol": "string",
                         "member": "string", "client_id": "string", "leader": "boolean",
                         "assigned": "array<string>"},
    "group_leave": {"group": "string", "generation": "long", "member": "string",
                    "group_instance_id": "string", "reason": "string"},
    "offset_commit": {"group": "string", "generation": "long", "member": "string",
                      "offsets": "array<string>"},
    # replication: declared now so the analysis (spark_jobs ISR job) is written against the
    # contract; a single broker at replication factor 1 never emits them
    "leader_change": {"topic": "string", "partition": "long", "old_leader": "long",
                      "new_leader": "long", "leader_epoch": "long", "reason": "string"},
    "isr_change": {"topic": "string", "partition": "long", "leader_id": "long", "kind": "string",
                   "old_isr": "array<long>", "new_isr": "array<long>",
                   "high_watermark": "long", "reason": "string"},
}


BUFFERED_TYPES = frozenset({"request"})


class EventLog:
    """Append-only JSON-lines writer with size rotation. Not thread-safe; one per broker."""

    def __init__(self, data_dir: str | os.PathLike, broker_id: int, *,
                 segment_bytes: int = 64 * 1024 * 1024, retention_files: int = 20,
                 clock: Callable[[], float] = time.time):
        self.dir = Path(data_dir) / "events"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.broker_id = broker_id
        self.segment_bytes = segment_bytes
        self.retention_files = retention_files
        self._clock = clock
        existing = self._files()
        self._seq = int(existing[-1].stem.split("-")[1]) if existing else 0
        self._open()

    def _files(self) -> list[Path]:
        return sorted(self.dir.glob("events-*.jsonl"))

    def _open(self) -> None:
        self._path = self.dir / f"events-{self._seq:010d}.jsonl"
        self._file = open(self._path, "a", encoding="utf-8", buffering=64 * 1024)
        self._size = self._file.tell()

    def emit(self, type: str, **fields: Any) -> None:
        declared = EVENT_TYPES.get(type)
        if declared is None:
            raise ValueError(f"undeclared event type {type!r}")
        extra = fields.keys() - declared.keys()
        if extra:
            raise ValueError(f"event {type!r} has undeclared fields {sorted(extra)}")
        record = {"ts": int(self._clock() * 1000), "type": type, "broker": self.broker_id}
        record.update(fields)
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        self._file.write(line)
        self._size += len(line)
        if type not in BUFFERED_TYPES:
            # rare events reach the OS at once so a kill -9 cannot take them with it;
            # sampled request events are flushed by the broker every half second
            self._file.flush()
        if self._size >= self.segment_bytes:
            self._rotate()

    def _rotate(self) -> None:
        self._file.close()
        self._seq += 1
        self._open()
        for old in self._files()[:-self.retention_files]:
            old.unlink(missing_ok=True)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The JSON objects of one JSON-lines file, skipping a torn line (a kill -9 mid-write)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return out


def read_events(data_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every event under DIR/events in order (for tools and tests)."""
    return [event for path in sorted((Path(data_dir) / "events").glob("events-*.jsonl"))
            for event in read_jsonl(path)]
