"""The broker's structured event log: the schema, and the JSON-lines writer.

Owns: `EVENT_TYPES`, the one declaration of every event the broker writes and the fields each
carries (spark_jobs reads its schema from here: this module is that contract), and
`EventLog`, which writes one JSON object per line to DIR/events/events-<n>.jsonl and rotates
by size, keeping a bounded number of files.

Every event has `ts` (epoch milliseconds), `type` and `broker`. Writing an event with a field
its type does not declare is a bug and raises, so the schema cannot drift from what is
written. Writing is best effort: a full disk drops events (counted in `EventLog.dropped`)
and never stops the broker.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from broker.storage import REAL, FileHandle, FileSystem, read_file

log = logging.getLogger("minibroker.events")

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
    # the cluster's control plane, written by the active controller's node (once per cluster)
    # except controller_elected, which every node writes as it learns of a new quorum leader
    "controller_elected": {"leader_id": "long", "epoch": "long", "node_id": "long"},
    "broker_registered": {"broker_id": "long", "broker_epoch": "long", "rack": "string",
                          "incarnation_id": "string"},
    "broker_fenced": {"broker_id": "long", "broker_epoch": "long"},
    "broker_unfenced": {"broker_id": "long", "broker_epoch": "long"},
    "broker_unregistered": {"broker_id": "long", "broker_epoch": "long"},
    # a broker's log directory failed (broker/log_dirs.py), once, when it goes offline;
    # replicas_held: the replicas that were in it
    "log_dir_failure": {"log_dir": "string", "directory_id": "string", "reason": "string",
                        "replicas_held": "array<string>"},
    # a replica moved between two log directories of its broker (AlterReplicaLogDirs)
    "log_dir_move": {"topic": "string", "partition": "long", "source": "string",
                     "target": "string", "log_end_offset": "long"},
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
    # a client's telemetry push (KIP-714, broker/telemetry.py): each point
    # "name{attribute=value,...}=value", as the client measured it
    "client_metrics": {"client_instance_id": "string", "client_id": "string",
                       "peer": "string", "terminating": "boolean",
                       "points": "array<string>"},
    # the broker's operational figures (broker/metrics.py), every events.metrics.interval.ms
    # and at shutdown: counters are totals since the process started (a restart starts them
    # again at 0), the rest gauges read when written; the controller's figures are the
    # active controller's (0 elsewhere); requests and request_time_ms are "name=count" and
    # "name=total ms" per request name, also totals
    "metrics": {"messages_in": "long", "bytes_in": "long", "bytes_out": "long",
                "replication_bytes_out": "long", "failed_produce_requests": "long",
                "partition_count": "long", "leader_count": "long",
                "under_replicated_partitions": "long", "under_min_isr_partitions": "long",
                "at_min_isr_partitions": "long", "offline_replicas": "long",
                "isr_shrinks": "long", "isr_expands": "long", "fetch_sessions": "long",
                "fetch_session_partitions": "long", "fetch_session_evictions": "long",
                "connections": "long", "broker_state": "long", "active_controller": "long",
                "offline_partitions": "long", "global_topics": "long",
                "global_partitions": "long", "active_brokers": "long",
                "fenced_brokers": "long", "preferred_replica_imbalance": "long",
                "requests": "array<string>", "request_time_ms": "array<string>"},
    # a connection refused at the TLS handshake or SASL authentication (issue 15): who it
    # claimed to be ("" before a name was given), where from, and why; the connection closes
    "auth_failure": {"principal": "string", "listener": "string", "peer": "string",
                     "mechanism": "string", "reason": "string"},
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
    # transactions: a TxnOffsetCommit (pending until its marker), each transition the
    # transaction coordinator writes to __transaction_state (state is Kafka's name:
    # Ongoing, PrepareCommit, CompleteAbort...; start_ms the transaction's start; log_offset
    # the record's offset there, which orders one id's states when they share a ms), and a
    # transaction's markers all written (result COMMIT or ABORT); topic_partitions, not
    # partitions, which other events declare as a count (one column per name in spark_jobs)
    "txn_offset_commit": {"group": "string", "producer_id": "long", "offsets": "array<string>"},
    "txn_state": {"transactional_id": "string", "producer_id": "long", "producer_epoch": "long",
                  "state": "string", "topic_partitions": "array<string>", "start_ms": "long",
                  "timeout_ms": "long", "log_offset": "long"},
    "txn_markers_written": {"transactional_id": "string", "producer_id": "long",
                            "producer_epoch": "long", "result": "string", "partitions": "long",
                            "duration_ms": "double"},
    # KIP-848 consumer groups: a member's assignment each time it changes (what it holds,
    # and what it is asked to give up), and members leaving or fenced
    "consumer_group_assignment": {"group": "string", "member": "string",
                                  "member_epoch": "long", "state": "string",
                                  "assigned": "array<string>",
                                  "pending_revocation": "array<string>"},
    "consumer_group_leave": {"group": "string", "member": "string", "static": "boolean"},
    "consumer_group_fenced": {"group": "string", "member": "string", "reason": "string"},
    # KIP-932 share groups: members joining, their assignment each time it changes, members
    # leaving or fenced, and an empty group deleted
    "share_group_join": {"group": "string", "member": "string", "group_epoch": "long"},
    "share_group_assignment": {"group": "string", "member": "string", "member_epoch": "long",
                               "assigned": "array<string>"},
    "share_group_leave": {"group": "string", "member": "string"},
    "share_group_fenced": {"group": "string", "member": "string", "reason": "string"},
    "share_group_deleted": {"group": "string"},
    # a share partition (KIP-932) loaded by its leader, and what became of its records
    "share_partition_loaded": {"group_id": "string", "topic": "string", "partition": "long",
                               "start_offset": "long", "in_flight": "long"},
    "share_lock_expired": {"group_id": "string", "topic": "string", "partition": "long",
                           "member_id": "string", "first_offset": "long",
                           "last_offset": "long", "archived": "boolean"},
    "share_records_archived": {"group_id": "string", "topic": "string", "partition": "long",
                               "member_id": "string", "first_offset": "long",
                               "last_offset": "long", "reason": "string"},
    # a share partition's figures, written by its leader with each `metrics` event (every
    # events.metrics.interval.ms and at shutdown) when they changed since its last one:
    # SPSO and SPEO, the records in flight between them by state, and the totals since the
    # share partition was loaded (a new leader, or a reload, starts them at 0 again) of
    # records acquired and of those redelivered (acquired with a delivery count above 1)
    "share_partition_state": {"group_id": "string", "topic": "string", "partition": "long",
                              "start_offset": "long", "end_offset": "long",
                              "in_flight": "long", "available_records": "long",
                              "acquired_records": "long", "acknowledged_records": "long",
                              "archived_records": "long", "acquisitions": "long",
                              "redeliveries": "long"},
    # replication: leader_change is written by the active controller's node as each
    # committed PartitionChangeRecord moves a leadership; isr_change by the partition's
    # leader when the controller commits its AlterPartition; log_truncation by a follower
    # that cut its log where its leader's diverged
    "leader_change": {"topic": "string", "partition": "long", "old_leader": "long",
                      "new_leader": "long", "leader_epoch": "long", "reason": "string"},
    "isr_change": {"topic": "string", "partition": "long", "leader_id": "long", "kind": "string",
                   "old_isr": "array<long>", "new_isr": "array<long>",
                   "high_watermark": "long", "reason": "string"},
    "log_truncation": {"topic": "string", "partition": "long", "old_log_end_offset": "long",
                       "new_log_end_offset": "long", "leader_id": "long",
                       "leader_epoch": "long"},
}


BUFFERED_TYPES = frozenset({"request"})
BUFFER_BYTES = 64 * 1024  # buffered events are written at least this often, and on flush()


class EventLog:
    """Append-only JSON-lines writer with size rotation. Not thread-safe; one per broker.

    Writing is best effort: the event log describes the broker, it must never stop it. A
    write the file system refuses (a full disk, an unwritable directory) drops the events
    it carried, counts them in `dropped`, and logs one line when the failures start and one
    with the count when writing works again. A line cut short by ENOSPC is cut off the
    file, so the events written after it parse.
    """

    def __init__(self, data_dir: str | os.PathLike, broker_id: int, *,
                 segment_bytes: int = 64 * 1024 * 1024, retention_files: int = 20,
                 clock: Callable[[], float] = time.time, fs: FileSystem = REAL):
        self.dir = Path(data_dir) / "events"
        self._fs = fs
        fs.makedirs(str(self.dir))
        self.broker_id = broker_id
        self.segment_bytes = segment_bytes
        self.retention_files = retention_files
        self._clock = clock
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self.dropped = 0  # events lost to failed writes since start
        self._dropped_at_failure = 0  # `dropped` when the current run of failures began
        self._failing = False
        self._torn_line = False  # the file ends in a fragment that could not be cut off
        self._file: FileHandle | None = None
        existing = self._files()
        self._seq = int(existing[-1].stem.split("-")[1]) if existing else 0
        self._file, self._size = self._open(self._seq)

    def _files(self) -> list[Path]:
        return sorted(self.dir / name for name in self._fs.listdir(str(self.dir))
                      if name.startswith("events-") and name.endswith(".jsonl"))

    def _path_of(self, seq: int) -> Path:
        return self.dir / f"events-{seq:010d}.jsonl"

    def _open(self, seq: int) -> tuple[FileHandle, int]:
        f = self._fs.open(str(self._path_of(seq)), append=True)
        return f, f.size()

    def emit(self, type: str, **fields: Any) -> None:
        declared = EVENT_TYPES.get(type)
        if declared is None:
            raise ValueError(f"undeclared event type {type!r}")
        extra = fields.keys() - declared.keys()
        if extra:
            raise ValueError(f"event {type!r} has undeclared fields {sorted(extra)}")
        record = {"ts": int(self._clock() * 1000), "type": type, "broker": self.broker_id}
        record.update(fields)
        line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
        self._pending.append(line)
        self._pending_bytes += len(line)
        if type not in BUFFERED_TYPES or self._pending_bytes >= BUFFER_BYTES:
            # rare events reach the OS at once so a kill -9 cannot take them with it;
            # sampled request events are flushed by the broker every half second
            self.flush()

    def flush(self) -> None:
        """Hand the buffered events to the OS; never raises (see the class docstring)."""
        if not self._pending or self._file is None:
            return
        events = len(self._pending)
        prefix = b"\n" if self._torn_line else b""
        data = memoryview(prefix + b"".join(self._pending))
        self._pending.clear()
        self._pending_bytes = 0
        written = 0
        try:
            self._file.append(data)
            written = len(data)
        except OSError as exc:
            written = self._landed(len(data))
            whole = bytes(data[:written]).rfind(b"\n") + 1  # complete lines that got out
            self._size += whole
            lines_out = bytes(data[len(prefix):whole]).count(b"\n") if whole else 0
            self._torn_line = self._torn_line and whole == 0
            if whole != written:
                self._cut_torn_line()
            self._dropped(events - lines_out, exc)
            return
        self._torn_line = False
        self._size += written
        if self._failing:
            self._failing = False
            log.warning("event log writable again: %d events dropped while it was not "
                        "(%d since start)", self.dropped - self._dropped_at_failure,
                        self.dropped)
        if self._size >= self.segment_bytes:
            self._rotate()

    def _landed(self, most: int) -> int:
        """How much of a write that failed got into the file (a short write, then ENOSPC)."""
        assert self._file is not None
        try:
            return max(0, min(most, self._file.size() - self._size))
        except OSError:
            return 0

    def _cut_torn_line(self) -> None:
        assert self._file is not None  # only called from flush, which has one
        try:
            self._file.truncate(self._size)
        except OSError:
            # cannot cut it: the next write ends the fragment first, so it stays one bad
            # line (readers skip it) and does not swallow the next event
            self._torn_line = True

    def _dropped(self, events: int, exc: OSError) -> None:
        if not self._failing:
            self._failing = True
            self._dropped_at_failure = self.dropped
            log.warning("cannot write the event log %s: %s; dropping events until it can",
                        self._path_of(self._seq), exc)
        self.dropped += events

    def _rotate(self) -> None:
        try:
            f, size = self._open(self._seq + 1)
        except OSError as exc:  # keep writing to the current file; retried on next flush
            log.warning("cannot rotate the event log: %s", exc)
            return
        self._close_file()
        self._seq += 1
        self._file, self._size = f, size
        for old in self._files()[:-self.retention_files]:
            try:
                self._fs.remove(str(old))
            except FileNotFoundError:
                pass
            except OSError:
                pass  # retried at the next rotation

    def _close_file(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    def close(self) -> None:
        if self._file is None:
            return
        self.flush()
        try:
            self._file.fsync()
        except OSError as exc:
            log.warning("cannot fsync the event log: %s", exc)
        self._close_file()
        if self.dropped:
            log.warning("the event log dropped %d events since start", self.dropped)


def read_jsonl(path: str | os.PathLike, *, fs: FileSystem | None = None) -> list[dict[str, Any]]:
    """The JSON objects of one JSON-lines file, skipping a torn line (a kill -9 mid-write).
    Streamed from the real disk, or read whole from the file system ``fs`` (a simulated
    node's, in tests)."""
    out = []
    with open(path, encoding="utf-8") if fs is None else _lines(fs, path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return out


def _lines(fs: FileSystem, path: str | os.PathLike) -> io.StringIO:
    return io.StringIO(read_file(path, fs=fs).decode("utf-8", errors="replace"))


def read_events(data_dir: str | os.PathLike, *, fs: FileSystem | None = None
                ) -> list[dict[str, Any]]:
    """Every event under DIR/events in order (for tools and tests)."""
    directory = Path(data_dir) / "events"
    if fs is None:
        paths = sorted(directory.glob("events-*.jsonl"))
    else:
        paths = sorted(directory / name for name in fs.listdir(str(directory))
                       if name.startswith("events-") and name.endswith(".jsonl"))
    return [event for path in paths for event in read_jsonl(path, fs=fs)]
