"""Kafka's on-disk log: segments (.log/.index/.timeindex), partition logs, recovery,
retention and the per-data-dir LogManager. Plain synchronous file I/O; see each module."""

from .config import LogConfig
from .errors import (
    CorruptRecordError,
    CorruptSegmentError,
    InvalidRecordError,
    KafkaStorageError,
    LogError,
    OffsetOutOfRange,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from .loader import RecoveryReport
from .log import AppendInfo, PartitionLog
from .manager import LogManager
from .segment import LogSegment, OffsetAndTimestamp

__all__ = [
    "AppendInfo", "CorruptRecordError", "CorruptSegmentError", "InvalidRecordError",
    "KafkaStorageError", "LogConfig", "LogError", "LogManager", "LogSegment", "OffsetOutOfRange",
    "OffsetOutOfRangeError", "PartitionLog", "RecordBatchTooLargeError",
    "RecordTooLargeError", "RecoveryReport", "OffsetAndTimestamp",
]
