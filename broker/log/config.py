"""Per-log configuration: Kafka's log/topic properties as one frozen, typed dataclass.

Owns: `LogConfig` (the knobs a `PartitionLog` obeys: segment rolling, index density,
retention, size limits, flush policy, timestamp type, compaction) and the mapping from Kafka's
property names -- both the broker-wide ``log.*`` names and the topic-level overrides
(``segment.bytes``, ``retention.ms``...) -- onto its snake_case fields.

Defaults are Kafka's (``server.properties`` / ``LogConfig.java`` / ``ServerLogConfigs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

_LONG_MAX = (1 << 63) - 1
_HOUR_MS = 60 * 60 * 1000

# Kafka property name -> (field, converter). Broker-wide names first, then the topic-level
# override names (the ones CreateTopics / AlterConfigs carry). Both map onto one field.
_PROPERTY_FIELDS: dict[str, tuple[str, Any]] = {
    "log.segment.bytes": ("segment_bytes", int),
    "segment.bytes": ("segment_bytes", int),
    "log.roll.ms": ("segment_ms", int),
    "segment.ms": ("segment_ms", int),
    "log.retention.ms": ("retention_ms", int),
    "retention.ms": ("retention_ms", int),
    "log.retention.bytes": ("retention_bytes", int),
    "retention.bytes": ("retention_bytes", int),
    "log.index.interval.bytes": ("index_interval_bytes", int),
    "index.interval.bytes": ("index_interval_bytes", int),
    "log.index.size.max.bytes": ("segment_index_bytes", int),
    "segment.index.bytes": ("segment_index_bytes", int),
    "message.max.bytes": ("max_message_bytes", int),
    "max.message.bytes": ("max_message_bytes", int),
    "log.cleanup.policy": ("cleanup_policy", str),
    "cleanup.policy": ("cleanup_policy", str),
    "log.segment.delete.delay.ms": ("file_delete_delay_ms", int),
    "file.delete.delay.ms": ("file_delete_delay_ms", int),
    "log.flush.interval.messages": ("flush_interval_messages", int),
    "flush.messages": ("flush_interval_messages", int),
    "log.message.timestamp.type": ("message_timestamp_type", str),
    "message.timestamp.type": ("message_timestamp_type", str),
    "log.cleaner.delete.retention.ms": ("delete_retention_ms", int),
    "delete.retention.ms": ("delete_retention_ms", int),
    "log.cleaner.min.cleanable.ratio": ("min_cleanable_dirty_ratio", float),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float),
    "min.insync.replicas": ("min_insync_replicas", int),
}

# Coarser-unit broker properties: Kafka uses the *.ms form when present, else these.
_COARSE_FIELDS = {
    "log.roll.hours": ("segment_ms", _HOUR_MS),
    "log.retention.hours": ("retention_ms", _HOUR_MS),
    "log.retention.minutes": ("retention_ms", 60 * 1000),
}

_CLEANUP_POLICIES = frozenset({"delete", "compact"})
_TIMESTAMP_TYPES = frozenset({"CreateTime", "LogAppendTime"})


@dataclasses.dataclass(frozen=True, slots=True)
class LogConfig:
    """What one partition log obeys. Every field is a Kafka property (named in its comment)."""

    # log.segment.bytes / segment.bytes: roll when the active segment would exceed this.
    segment_bytes: int = 1024 * 1024 * 1024
    # log.roll.ms (log.roll.hours=168) / segment.ms: roll when the active segment is older.
    segment_ms: int = 168 * _HOUR_MS
    # log.retention.ms (log.retention.hours=168) / retention.ms; -1 = keep forever.
    retention_ms: int = 168 * _HOUR_MS
    # log.retention.bytes / retention.bytes: per-partition size bound; -1 = unlimited.
    retention_bytes: int = -1
    # log.index.interval.bytes / index.interval.bytes: bytes of log between index entries.
    index_interval_bytes: int = 4096
    # log.index.size.max.bytes / segment.index.bytes: a full index forces a roll.
    segment_index_bytes: int = 10 * 1024 * 1024
    # message.max.bytes / max.message.bytes: the largest batch a producer may append.
    max_message_bytes: int = 1024 * 1024 + 12
    # log.cleanup.policy / cleanup.policy: "delete", "compact" or "compact,delete".
    cleanup_policy: str = "delete"
    # log.segment.delete.delay.ms / file.delete.delay.ms: grace before unlinking .deleted files.
    file_delete_delay_ms: int = 60_000
    # log.flush.interval.messages / flush.messages: fsync after this many messages.
    flush_interval_messages: int = _LONG_MAX
    # log.message.timestamp.type / message.timestamp.type.
    message_timestamp_type: str = "CreateTime"
    # log.cleaner.delete.retention.ms / delete.retention.ms: how long a compacted topic keeps
    # a tombstone after the cleaner first saw it (KIP-534 delete horizon).
    delete_retention_ms: int = 24 * _HOUR_MS
    # log.cleaner.min.cleanable.ratio / min.cleanable.dirty.ratio: dirty share of the
    # non-active bytes at which a compacted log is cleaned.
    min_cleanable_dirty_ratio: float = 0.5
    # min.insync.replicas: the ISR size below which acks=all produce is refused.
    min_insync_replicas: int = 1

    def __post_init__(self) -> None:
        # Kafka's own lower bounds (LogConfig.java ConfigDef): a segment must hold at least a
        # legacy record overhead, an index at least one entry.
        if self.segment_bytes < 14:
            raise ValueError(f"segment.bytes must be >= 14, got {self.segment_bytes}")
        if self.segment_ms < 1:
            raise ValueError(f"segment.ms must be >= 1, got {self.segment_ms}")
        if self.retention_ms < -1:
            raise ValueError(f"retention.ms must be >= -1, got {self.retention_ms}")
        if self.index_interval_bytes < 0:
            raise ValueError("index.interval.bytes must be >= 0")
        if self.segment_index_bytes < 12:
            raise ValueError("segment.index.bytes must hold at least one time index entry")
        if self.max_message_bytes < 0:
            raise ValueError("max.message.bytes must be >= 0")
        if self.file_delete_delay_ms < 0:
            raise ValueError("file.delete.delay.ms must be >= 0")
        if self.flush_interval_messages < 1:
            raise ValueError("flush.messages must be >= 1")
        if self.delete_retention_ms < 0:
            raise ValueError("delete.retention.ms must be >= 0")
        if self.min_insync_replicas < 1:
            raise ValueError("min.insync.replicas must be >= 1")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError("min.cleanable.dirty.ratio must be in [0, 1]")
        if not self.cleanup_policies or not self.cleanup_policies <= _CLEANUP_POLICIES:
            raise ValueError(f"unknown cleanup.policy {self.cleanup_policy!r}")
        if self.message_timestamp_type not in _TIMESTAMP_TYPES:
            raise ValueError(f"unknown message.timestamp.type {self.message_timestamp_type!r}")

    @property
    def cleanup_policies(self) -> frozenset[str]:
        return frozenset(p.strip() for p in self.cleanup_policy.split(",") if p.strip())

    @property
    def deletes(self) -> bool:
        """True when time/size retention applies (cleanup.policy contains "delete")."""
        return "delete" in self.cleanup_policies

    @property
    def compacts(self) -> bool:
        """True when the log cleaner applies (cleanup.policy contains "compact")."""
        return "compact" in self.cleanup_policies

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], base: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka property names (broker-wide or topic-level); unknown keys ignored.

        Like Kafka, ``log.roll.ms`` beats ``log.roll.hours`` and ``log.retention.ms`` beats
        ``.minutes`` beats ``.hours``, whatever order the mapping lists them in.
        """
        values: dict[str, Any] = {}
        # Coarse units first (hours before minutes) so finer ones override them.
        for name in ("log.roll.hours", "log.retention.hours", "log.retention.minutes"):
            if name in props and props[name] is not None:
                field, unit = _COARSE_FIELDS[name]
                values[field] = int(props[name]) * unit
        for name, value in props.items():
            if name in _PROPERTY_FIELDS and value is not None:
                field, conv = _PROPERTY_FIELDS[name]
                values[field] = conv(value)
        return dataclasses.replace(base or cls(), **values)

    def with_overrides(self, **fields: Any) -> "LogConfig":
        return dataclasses.replace(self, **fields)
