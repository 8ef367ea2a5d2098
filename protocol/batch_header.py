"""The RecordBatch v2 (magic 2) header: its 61-byte layout, the `BatchHeader` view of it,
the CRC-32C, and the in-place rewrites the broker makes (Kafka's DefaultRecordBatch).

Owns the header only. Walking a run of batches is batch_walk.py's; produce validation
and the records inside are records.py's, which re-exports every name here. Nothing here
looks at records or copies a batch. Sans-IO.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from .record_errors import CorruptRecordError

__all__ = [
    "BATCH_OVERHEAD", "LOG_OVERHEAD", "MIN_BATCH_LENGTH", "MAGIC", "BatchHeader",
    "parse_batch_header", "batch_crc_ok", "set_base_offset", "set_partition_leader_epoch",
    "refresh_crc",
]

# Header field offsets within a batch.
BASE_OFFSET_POS = 0
LENGTH_POS = 8
LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
BASE_TIMESTAMP_POS = 27
MAX_TIMESTAMP_POS = 35
PRODUCER_ID_POS = 43
PRODUCER_EPOCH_POS = 51
BASE_SEQUENCE_POS = 53
RECORDS_COUNT_POS = 57
RECORDS_POS = 61

BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12  # BaseOffset + BatchLength: the bytes BatchLength does not count
MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD
MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")

assert _HEADER.size == BATCH_OVERHEAD


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, BaseOffset and BatchLength included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


_new_header = tuple.__new__  # builds the NamedTuple from unpack_from's tuple directly


# --- header view ------------------------------------------------------------------

def parse_batch_header(buf, pos: int = 0) -> BatchHeader:
    """Read the 61-byte header at `pos` of bytes/bytearray/memoryview without copying.

    Checks only structure (enough bytes for a header, magic 2, BatchLength >= 49); the
    batch body may be incomplete and the CRC is not checked (see batch_crc_ok).
    """
    if pos < 0 or len(buf) - pos < BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"need {BATCH_OVERHEAD} bytes for a batch header at {pos}, have {len(buf) - pos}")
    fields = _HEADER.unpack_from(buf, pos)
    if fields[3] != MAGIC:
        raise CorruptRecordError(f"unsupported batch magic {fields[3]} at {pos}")
    if fields[1] < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch length {fields[1]} at {pos} is below {MIN_BATCH_LENGTH}")
    return _new_header(BatchHeader, fields)


def batch_crc_ok(buf, pos: int, header: BatchHeader) -> bool:
    """True if the CRC-32C over bytes [pos+21, pos+size) matches the header's CRC.

    Raises CorruptRecordError if `buf` does not hold the whole batch.
    """
    end = pos + header.size
    if len(buf) < end:
        raise CorruptRecordError(f"batch at {pos} needs {header.size} bytes, buffer ends at {len(buf)}")
    with memoryview(buf) as mv:
        return crc32c(mv[pos + ATTRIBUTES_POS : end]) == header.crc


def set_base_offset(buf, pos: int, base_offset: int) -> None:
    """Rewrite BaseOffset in place; it is outside the CRC, so the CRC stays valid."""
    _I64.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)


def set_partition_leader_epoch(buf, pos: int, epoch: int) -> None:
    """Rewrite PartitionLeaderEpoch in place; also outside the CRC."""
    _I32.pack_into(buf, pos + LEADER_EPOCH_POS, epoch)


def refresh_crc(buf, pos: int = 0) -> None:
    """Recompute, in place, the CRC-32C of the batch at `pos` after a rewrite of a field
    the CRC covers (Attributes onwards: timestamp type, MaxTimestamp, LastOffsetDelta...).

    BatchLength gives the batch's extent; raises CorruptRecordError if `buf` ends first.
    """
    end = pos + LOG_OVERHEAD + _I32.unpack_from(buf, pos + LENGTH_POS)[0]
    if end > len(buf) or end < pos + BATCH_OVERHEAD:
        raise CorruptRecordError(f"batch at {pos} claims to end at {end}; buffer holds {len(buf)}")
    with memoryview(buf) as mv:
        crc = crc32c(mv[pos + ATTRIBUTES_POS : end])
    _U32.pack_into(buf, pos + CRC_POS, crc)
