"""Exceptions of the storage layer, each carrying the Kafka error code a handler answers with.

Owns: `LogError` and its subclasses for conditions a partition log detects itself
(offset out of range, a batch too large for a segment, a corrupt segment file, a write the
file system refused). Errors
about the bytes a producer sent (bad CRC, bad magic, too large, invalid record) are
protocol/records' `CorruptRecordError`, `InvalidRecordError` and `RecordTooLargeError`,
re-exported here so callers of the log can catch everything from one place.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.record_errors import (  # noqa: F401  (re-exported)
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    RecordTooLargeError,
)


class LogError(Exception):
    """Base of the storage layer's own errors."""

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(LogError):
    """A fetch offset below the log start offset or above the log end offset (LEO)."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int | None = None,
                 log_end_offset: int | None = None) -> None:
        super().__init__(f"offset {offset} is outside [{log_start_offset}, {log_end_offset}]"
                         if log_end_offset is not None else f"offset {offset} is out of range")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


# Short alias: the brief and Kafka call it OffsetOutOfRange.
OffsetOutOfRange = OffsetOutOfRangeError


class RecordBatchTooLargeError(LogError, RecordTooLargeError):
    """A batch larger than segment.bytes can never fit a segment (Kafka's
    RecordBatchTooLargeException -> RECORD_LIST_TOO_LARGE). Also a RecordTooLargeError, so
    a handler that maps record errors alone still answers instead of failing; the more
    precise code is in ``error_code``."""

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class CorruptSegmentError(LogError):
    """A segment's .log does not parse as a sequence of whole batches where it must
    (found outside recovery); the log recovers the segment when it sees this at load."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class KafkaStorageError(LogError):
    """The file system refused a write (ENOSPC, EACCES, EIO, ...): Kafka's
    KafkaStorageException -> KAFKA_STORAGE_ERROR, which clients retry. The log has been
    put back to its state before the failed write, so a retry can succeed once the disk
    has room or the directory is writable again."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR
