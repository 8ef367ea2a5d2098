"""Typed errors for RecordBatch v2 parsing, validation and compression.

They live in their own module so that codecs.py and records.py can both raise them
without importing each other. records.py re-exports every name here.

Mapping to Kafka error codes (done by the broker, not here): CorruptRecordError ->
CORRUPT_MESSAGE (2), InvalidRecordError -> INVALID_RECORD (87), RecordTooLargeError ->
MESSAGE_TOO_LARGE (10), UnsupportedCodecError -> UNSUPPORTED_COMPRESSION_TYPE (76).
"""

from __future__ import annotations

__all__ = [
    "RecordError",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordTooLargeError",
    "UnsupportedCodecError",
]


class RecordError(ValueError):
    """Base of every error raised for bad record bytes."""


class CorruptRecordError(RecordError):
    """Bytes that are not a well-formed batch: bad CRC, bad magic, truncated data,
    impossible lengths, undecodable or oversized compressed payload."""


class InvalidRecordError(RecordError):
    """A well-formed batch that a broker must still refuse from a client
    (LastOffsetDelta + 1 != RecordsCount, no records, control batch, not exactly one
    batch per partition)."""


class RecordTooLargeError(RecordError):
    """A batch larger than the configured maximum (max.message.bytes)."""


class UnsupportedCodecError(RecordError):
    """A compression codec id outside 0..4."""
