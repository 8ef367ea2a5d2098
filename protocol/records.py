"""RecordBatch v2 (magic 2): produce-side validation, iteration over the batches of a
buffer, and encoding/decoding of the records inside. The 61-byte header, its CRC-32C and
in-place rewrites are batch_header.py's, walking a run of batches batch_walk.py's; the
header names are re-exported here.

Layout and rules: docs/PROTOCOL.md §3 (Kafka's DefaultRecordBatch and DefaultRecord).
The broker's hot path uses only parse_batch_header, batch_crc_ok, validate_produced_batch,
iter_batch_headers, the set_* rewrites and refresh_crc; none of them looks at records or
copies the batch. encode_batch / decode_batch serve the client, the coordinator, tests and Spark.

Every length read from the wire is checked against the bytes actually present before it
is used, and every failure surfaces as a RecordError subclass (record_errors.py).
Sans-IO: no sockets, files or clocks; callers pass timestamps in.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

# The header layout is batch_header.py's; these names stay importable from here.
from .batch_header import (  # noqa: F401
    _HEADER, ATTRIBUTES_POS, BASE_OFFSET_POS, BASE_SEQUENCE_POS, BASE_TIMESTAMP_POS,
    BATCH_OVERHEAD, COMPRESSION_MASK, CONTROL_MASK, CRC_POS, CREATE_TIME, DELETE_HORIZON_MASK,
    LAST_OFFSET_DELTA_POS, LEADER_EPOCH_POS, LENGTH_POS, LOG_APPEND_TIME, LOG_OVERHEAD, MAGIC,
    MAGIC_POS, MAX_TIMESTAMP_POS, MIN_BATCH_LENGTH, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, PRODUCER_EPOCH_POS, PRODUCER_ID_POS,
    RECORDS_COUNT_POS, RECORDS_POS, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, BatchHeader,
    batch_crc_ok, parse_batch_header, refresh_crc, set_base_offset, set_partition_leader_epoch,
)
from .batch_walk import CORRUPT, BatchWalk
from .codecs import Codec, compress, decompress
from .primitives import uvarint_bytes
from .record_errors import (CorruptRecordError, InvalidRecordError, RecordError,
                            RecordTooLargeError, UnsupportedCodecError)

__all__ = [
    "BATCH_OVERHEAD", "MAGIC", "LOG_OVERHEAD", "DEFAULT_MAX_DECOMPRESSED",
    "BatchHeader", "Record", "parse_batch_header", "batch_crc_ok",
    "validate_produced_batch", "iter_batch_headers", "set_base_offset",
    "set_partition_leader_epoch", "refresh_crc", "encode_batch", "encode_producer_batch",
    "decode_batch", "decode_batches", "decode_rows", "row_batches", "decode_batch_rows",
    "zigzag_encode", "zigzag_decode", "encode_varint", "encode_varlong",
    "decode_varint", "decode_varlong", "varint_size",
    "RecordError", "CorruptRecordError", "InvalidRecordError", "RecordTooLargeError",
    "UnsupportedCodecError", "Codec",
]

# Bound on one batch's decompressed records. Kafka has none; ours stops bombs while
# leaving room for highly compressible batches near message.max.bytes.
DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024

_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# Smallest record: one byte each for length, attributes, timestamp delta, offset delta,
# key length, value length and header count.
_MIN_RECORD_SIZE = 7


@dataclass(slots=True)
class Record:
    """One record with absolute offset and timestamp. Header keys are str; a key that
    is not valid UTF-8 on the wire decodes with surrogateescape, so re-encoding it gives
    back the original bytes."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


# --- produce validation and iteration ---------------------------------------------

def validate_produced_batch(buf, max_size: int, *, allow_control: bool = False) -> BatchHeader:
    """What a broker checks on one partition's records from a Produce request (v3+), in
    the order Kafka checks them (UnifiedLog.analyzeAndValidateRecords, then LogValidator).

    In order: exactly one complete batch filling `buf` (empty or trailing bytes ->
    InvalidRecordError, truncated or structurally bad -> CorruptRecordError); size <=
    max_size (RecordTooLargeError); CRC (CorruptRecordError); codec id 0..4
    (UnsupportedCodecError); LastOffsetDelta + 1 == RecordsCount > 0 (InvalidRecordError);
    not a control batch unless `allow_control` (InvalidRecordError: only the broker's own
    writers, Kafka's AppendOrigin.COORDINATOR, may append transaction markers). Records
    are not decoded.
    """
    n = len(buf)
    if n == 0:
        raise InvalidRecordError("produce data holds no record batch")
    header = parse_batch_header(buf, 0)
    size = header.size
    if size > n:
        raise CorruptRecordError(f"truncated batch: header says {size} bytes, {n} present")
    if size < n:
        raise InvalidRecordError(
            f"produce data must be exactly one batch; {n - size} bytes follow the first")
    if size > max_size:
        raise RecordTooLargeError(f"batch of {size} bytes exceeds the limit of {max_size}")
    if not batch_crc_ok(buf, 0, header):
        raise CorruptRecordError("batch CRC mismatch")
    if header.attributes & COMPRESSION_MASK > Codec.ZSTD:
        raise UnsupportedCodecError(f"unsupported compression codec id {header.compression}")
    count = header.records_count
    if count <= 0 or header.last_offset_delta + 1 != count:
        raise InvalidRecordError(
            f"LastOffsetDelta {header.last_offset_delta} + 1 != RecordsCount {count} or no records")
    if header.attributes & CONTROL_MASK and not allow_control:
        raise InvalidRecordError("clients may not produce control batches")
    return header


def iter_batch_headers(buf, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete batch in buf[pos:end] (a BatchWalk).

    Stops silently at an incomplete tail (fetch responses may end mid-batch); raises
    CorruptRecordError where the walk finds a header it cannot trust.
    """
    walk = BatchWalk(buf, pos, end)
    yield from walk
    stop = walk.stop
    if stop is not None and stop.reason == CORRUPT:
        raise CorruptRecordError(f"corrupt batch header at {stop.position}: {stop.problem}")


# --- varints (zigzag, as Kafka's ByteUtils.writeVarint / writeVarlong) ---------------

def zigzag_encode(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def zigzag_decode(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


_VARINT_TABLE = [uvarint_bytes(z) for z in range(2048)]
_ZERO_HEADER = bytes(BATCH_OVERHEAD)


def _put_nullable_bytes(out: bytearray, data: bytes | None) -> None:
    """A record's length-prefixed bytes: zigzag varint length (-1 for null), then the bytes."""
    if data is None:
        out += b"\x01"  # zigzag(-1)
        return
    z = len(data) << 1
    out += _VARINT_TABLE[z] if z < 2048 else uvarint_bytes(z)
    out += data


def _zz(n: int) -> bytes:
    """Zigzag varint bytes of an int64 without a range check (callers check)."""
    return uvarint_bytes((n << 1) ^ (n >> 63))


def encode_varint(n: int) -> bytes:
    """Zigzag varint of an int32 (1-5 bytes)."""
    if not -(2**31) <= n <= _INT32_MAX:
        raise ValueError(f"{n} is outside the int32 range")
    return _zz(n)


def encode_varlong(n: int) -> bytes:
    """Zigzag varint of an int64 (1-10 bytes)."""
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"{n} is outside the int64 range")
    return _zz(n)


def varint_size(n: int) -> int:
    """Encoded size of the zigzag varint of `n`."""
    return max(1, (zigzag_encode(n).bit_length() + 6) // 7)


def _decode_uvarint(buf, pos: int, max_shift: int, max_value: int) -> tuple[int, int]:
    try:
        b = buf[pos]
        pos += 1
        result = b & 0x7F
        shift = 0
        while b >= 0x80:
            shift += 7
            if shift > max_shift:
                raise CorruptRecordError("varint is too long")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
    except IndexError:
        raise CorruptRecordError("truncated varint") from None
    if result > max_value:
        raise CorruptRecordError("varint is out of range")
    return result, pos


def _decode_zigzag(buf, pos: int, max_shift: int, max_value: int) -> tuple[int, int]:
    try:
        b = buf[pos]
    except IndexError:
        raise CorruptRecordError("truncated varint") from None
    if b < 0x80:  # the common one-byte case, without the loop
        return (b >> 1) ^ -(b & 1), pos + 1
    z, pos = _decode_uvarint(buf, pos, max_shift, max_value)
    return (z >> 1) ^ -(z & 1), pos


def decode_varint(buf, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag int32 varint (at most 5 bytes); returns (value, next position)."""
    return _decode_zigzag(buf, pos, 28, 0xFFFFFFFF)


def decode_varlong(buf, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag int64 varint (at most 10 bytes); returns (value, next position)."""
    return _decode_zigzag(buf, pos, 63, 2**64 - 1)


# --- encoding ---------------------------------------------------------------------

def encode_batch(
    records: Sequence[Record | tuple],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    compression: int = Codec.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type: int = CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    compression_level: int | None = None,
) -> bytes:
    """Build one RecordBatch v2 and return its bytes, CRC-32C included.

    `records` are Record objects or tuples in Record's field order
    (offset, timestamp, key, value, headers). Offsets are absolute: each record's
    OffsetDelta is offset - base_offset, which must be >= 0, strictly increasing and fit
    an int32; LastOffsetDelta is the last record's delta. BaseTimestamp defaults to the
    first record's timestamp (as the Java producer does) and MaxTimestamp is the largest
    record timestamp. Header keys are str (UTF-8) or bytes.

        >>> batch = encode_batch([Record(0, 1_700_000_000_000, b"k", b"v", [("h", b"1")]),
        ...                       (1, 1_700_000_000_005, None, b"v2", [])],
        ...                      compression=Codec.ZSTD)
        >>> header, recs = decode_batch(batch)
        >>> header.records_count, header.last_offset_delta, recs[1].timestamp
        (2, 1, 1700000000005)

    Raises ValueError (or TypeError for wrong value types) on bad input and
    UnsupportedCodecError for an unknown codec.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type}")
    if not 0 <= compression <= Codec.ZSTD:
        raise UnsupportedCodecError(f"unsupported compression codec id {compression}")

    # The header is packed into the first 61 bytes once the records are known; for an
    # uncompressed batch this avoids copying the body.
    body = bytearray(BATCH_OVERHEAD) if compression == Codec.NONE else bytearray()
    prev_delta = -1
    max_ts = None
    table = _VARINT_TABLE
    uv = uvarint_bytes
    put = _put_nullable_bytes
    for r in records:
        if isinstance(r, tuple):
            offset, ts, key, value, headers = r
        else:
            offset, ts, key, value, headers = r.offset, r.timestamp, r.key, r.value, r.headers
        if base_timestamp is None:
            base_timestamp = ts
        if max_ts is None or ts > max_ts:
            max_ts = ts
        delta = offset - base_offset
        if delta <= prev_delta or delta > _INT32_MAX:
            raise ValueError(
                f"record offset {offset} must exceed the previous one and be within "
                f"int32 of base_offset {base_offset}")
        prev_delta = delta
        ts_delta = ts - base_timestamp
        if not _INT64_MIN <= ts_delta <= _INT64_MAX:
            raise ValueError(f"timestamp {ts} is too far from base timestamp {base_timestamp}")

        # Varints inline: a table lookup for zigzag values below 2048 (every length
        # under 1 KiB), uvarint_bytes otherwise. Lengths are >= 0, so zigzag is n << 1.
        z = (ts_delta << 1) ^ (ts_delta >> 63)
        rec = bytearray(b"\x00")  # record attributes: unused, always 0
        rec += table[z] if z < 2048 else uv(z)
        z = delta << 1
        rec += table[z] if z < 2048 else uv(z)
        put(rec, key)
        put(rec, value)
        if headers:
            z = len(headers) << 1
            rec += table[z] if z < 2048 else uv(z)
            for hkey, hvalue in headers:
                put(rec, hkey.encode("utf-8", "surrogateescape") if type(hkey) is str else hkey)
                put(rec, hvalue)
        else:
            rec += b"\x00"
        z = len(rec) << 1
        body += table[z] if z < 2048 else uv(z)
        body += rec

    if compression == Codec.NONE:
        out = body
    else:
        out = bytearray(BATCH_OVERHEAD)
        out += compress(compression, body, level=compression_level)
    attributes = (compression | timestamp_type << 3 | bool(is_transactional) << 4
                  | bool(is_control) << 5)
    try:
        _HEADER.pack_into(
            out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0,
            attributes, prev_delta, base_timestamp, max_ts, producer_id, producer_epoch,
            base_sequence, len(records))
    except struct.error as e:
        raise ValueError(f"batch header field out of range: {e}") from None
    refresh_crc(out)
    return bytes(out)


def encode_producer_batch(
    records: Sequence[tuple],
    *,
    compression: int = Codec.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    compression_level: int | None = None,
    is_transactional: bool = False,
) -> bytes:
    """A producer's batch: the same bytes as encode_batch over [(i, *record) for i, record
    in enumerate(records)], built with fewer Python steps per record (the client's produce
    path runs this once per record sent; tests compare the two byte for byte).
    `is_transactional` sets the attributes' transactional bit (a transactional producer's
    batches, KIP-98).

    `records` are (timestamp, key, value, headers) tuples, the producer accumulator's:
    offsets are 0, 1, ... (the broker assigns the real ones), BaseTimestamp is the first
    record's, create time. Keys and values are bytes or None; header keys str or bytes.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    if not 0 <= compression <= Codec.ZSTD:
        raise UnsupportedCodecError(f"unsupported compression codec id {compression}")
    stamps = [r[0] for r in records]
    base_ts = stamps[0]
    max_ts = max(stamps)
    if min(stamps) - base_ts < _INT64_MIN or max_ts - base_ts > _INT64_MAX:
        raise ValueError(f"a timestamp is too far from base timestamp {base_ts}")
    if len(records) - 1 > _INT32_MAX:
        raise ValueError("too many records for one batch")
    table = _VARINT_TABLE
    uv = uvarint_bytes
    parts: list[bytes] = [_ZERO_HEADER]  # the header's place, packed once the body is known
    add = parts.append
    # Per record: the varints through a table lookup (zigzag values under 2048, so
    # lengths under 1 KiB and offset deltas under 1024), the fixed bytes joined into one
    # `head`, and the value appended as it is; b"".join copies everything once at the end.
    for i, (ts, key, value, headers) in enumerate(records):
        z = ts - base_ts
        z = (z << 1) ^ (z >> 63)
        head = b"\x00" + (table[z] if z < 2048 else uv(z)) + (
            table[i << 1] if i < 1024 else uv(i << 1))
        if key is None:
            head += b"\x01"
        else:
            z = len(key) << 1
            head += (table[z] if z < 2048 else uv(z)) + key
        if value is None:
            head += b"\x01"
            value = b""
        else:
            z = len(value) << 1
            head += table[z] if z < 2048 else uv(z)
        if headers:
            tail = bytearray()
            z = len(headers) << 1
            tail += table[z] if z < 2048 else uv(z)
            for hkey, hvalue in headers:
                _put_nullable_bytes(
                    tail, hkey.encode("utf-8", "surrogateescape") if type(hkey) is str else hkey)
                _put_nullable_bytes(tail, hvalue)
            z = (len(head) + len(value) + len(tail)) << 1
            add(table[z] if z < 2048 else uv(z))
            add(head)
            add(value)
            add(bytes(tail))
        else:
            z = (len(head) + len(value) + 1) << 1
            add(table[z] if z < 2048 else uv(z))
            add(head)
            add(value)
            add(b"\x00")  # no headers
    if compression == Codec.NONE:
        out = bytearray().join(parts)
    else:
        parts[0] = b""
        out = bytearray(BATCH_OVERHEAD)
        out += compress(compression, b"".join(parts), level=compression_level)
    try:
        _HEADER.pack_into(
            out, 0, 0, len(out) - LOG_OVERHEAD, NO_PARTITION_LEADER_EPOCH, MAGIC, 0,
            compression | bool(is_transactional) << 4, len(records) - 1, base_ts, max_ts,
            producer_id, producer_epoch,
            base_sequence, len(records))
    except struct.error as e:
        raise ValueError(f"batch header field out of range: {e}") from None
    refresh_crc(out)
    return bytes(out)


# --- decoding ---------------------------------------------------------------------

def decode_batch(buf, pos: int = 0, *,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at `pos`: check its CRC, decompress (at most `max_decompressed`
    bytes) and return its header and records with absolute offsets and timestamps.

    For LogAppendTime batches every record's timestamp is the batch's MaxTimestamp, as
    Java's DefaultRecordBatch reports it. Raises CorruptRecordError for any structural
    problem and UnsupportedCodecError for codec ids 5-7.
    """
    return _decode_at(buf, pos, parse_batch_header(buf, pos), max_decompressed)


def decode_batches(buf, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
                   ) -> list[tuple[BatchHeader, list[Record]]]:
    """decode_batch over every complete batch in `buf`; an incomplete tail is skipped."""
    return [_decode_at(buf, pos, header, max_decompressed)
            for pos, header in iter_batch_headers(buf)]


def decode_rows(buf, cls: type, topic: str, partition: int, min_offset: int = 0, *,
                max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> tuple[list, int]:
    """The records of every complete batch in `buf` (a fetched partition's data) straight
    into tuples of type `cls` laid out as (topic, partition, offset, timestamp,
    timestamp_type, key, value, headers) — a consumer's record, one object per record
    instead of a Record and then a copy; headers are a list, or () when there are none.
    Records below `min_offset` and control batches are left out. Returns (rows, the
    offset after the last batch, control ones included; `min_offset` when there is none).
    Checks and errors as decode_batch's. A consumer that decodes batch by batch, as the
    application reaches them, uses row_batches and decode_batch_rows instead."""
    positions, next_offset = row_batches(buf, min_offset)
    rows: list = []
    for pos, header in positions:
        batch = decode_batch_rows(buf, pos, header, cls, topic, partition, min_offset,
                                  max_decompressed=max_decompressed)
        if rows:
            rows += batch
        else:
            rows = batch
    return rows, next_offset


def row_batches(buf, min_offset: int = 0,
                keep: Callable[[int, BatchHeader], bool] | None = None
                ) -> tuple[list[tuple[int, BatchHeader]], int]:
    """The (position, header) of every complete batch in `buf` that may hold records at
    or after `min_offset` (not a control batch, last offset not below it), and the offset
    after the last batch, control ones included (`min_offset` when there is none). Reads
    headers only; raises CorruptRecordError for one it cannot trust. `keep`, when given,
    sees every batch in order, control ones too, and drops those it answers False for (a
    read_committed consumer's aborted transactions)."""
    found: list[tuple[int, BatchHeader]] = []
    next_offset = min_offset
    for pos, header in iter_batch_headers(buf):
        last = header.last_offset + 1
        if last > next_offset:
            next_offset = last
        if keep is not None and not keep(pos, header):
            continue
        if last > min_offset and not header.attributes & CONTROL_MASK:
            found.append((pos, header))
    return found, next_offset


def decode_batch_rows(buf, pos: int, header: BatchHeader, cls: type, topic: str,
                      partition: int, min_offset: int = 0, *,
                      max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> list:
    """The records at or after `min_offset` of the batch at `pos` (`header` from
    row_batches) as decode_rows' tuples; checks the CRC and decompresses first."""
    _, rows = _decode_at(buf, pos, header, max_decompressed, (
        cls, topic, partition, 1 if header.attributes & TIMESTAMP_TYPE_MASK else 0))
    if header.base_offset < min_offset:  # a batch that starts before the position
        rows = [r for r in rows if r[2] >= min_offset]
    return rows


def _decode_at(buf, pos: int, header: BatchHeader, max_decompressed: int,
               row: tuple | None = None):
    end = pos + header.size
    if not batch_crc_ok(buf, pos, header):  # also rejects a truncated batch
        raise CorruptRecordError(f"batch CRC mismatch at {pos}")
    count = header.records_count
    codec = header.attributes & COMPRESSION_MASK
    if codec != Codec.NONE:  # decompress refuses codec ids 5-7
        with memoryview(buf) as mv:
            data = decompress(codec, mv[pos + RECORDS_POS : end], max_decompressed)
        start, stop = 0, len(data)
    elif type(buf) is bytes:
        data, start, stop = buf, pos + RECORDS_POS, end
    else:
        # Copy once so that keys and values slice out as bytes.
        with memoryview(buf) as mv:
            data = mv[pos + RECORDS_POS : end].tobytes()
        start, stop = 0, len(data)
    if count < 0 or count * _MIN_RECORD_SIZE > stop - start:
        raise CorruptRecordError(f"records count {count} does not fit {stop - start} bytes")
    if header.attributes & TIMESTAMP_TYPE_MASK:
        fixed_ts = header.max_timestamp
    else:
        fixed_ts = None
    records = _decode_records(data, start, stop, count, header.base_offset,
                              header.base_timestamp, fixed_ts, row)
    return header, records


# zigzag value of every varint of one or two bytes, by its 14 payload bits: the decoder
# reads one list entry where it would otherwise compute (z >> 1) ^ -(z & 1)
_UNZIGZAG = [(z >> 1) ^ -(z & 1) for z in range(1 << 14)]


def _decode_records(data: bytes, pos: int, end: int, count: int, base_offset: int,
                    base_ts: int, fixed_ts: int | None, row: tuple | None = None) -> list:
    # Hot loop for consumers and Spark (about a third of a consumer's CPU): one- and
    # two-byte varints (lengths up to 8191, offset deltas up to 8191, timestamp deltas
    # within 8 s: the common case) are decoded inline through _UNZIGZAG, longer ones
    # through decode_varint. A field that overruns its record, or a length that does not
    # match, shows as the record not ending where its length said, the one check per
    # record; IndexError means a varint or field ran off the end of `data`. `row` (cls,
    # topic, partition, timestamp_type): build `cls` tuples (see decode_rows), not Records;
    # a row without headers holds (), so that it refers to no object the cyclic GC tracks.
    dv = decode_varint
    dvl = decode_varlong
    unzz = _UNZIGZAG
    records: list = []
    append = records.append
    new = tuple.__new__
    if row is not None:
        cls, topic, partition, ts_type = row
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = unzz[b]
                pos += 1
            elif data[pos + 1] < 0x80:  # 64..8191 bytes: most records
                length = unzz[(b & 0x7F) | (data[pos + 1] << 7)]
                pos += 2
            else:
                length, pos = dv(data, pos)
            rec_end = pos + length
            b = data[pos + 1]  # after the unused record attributes byte
            if b < 0x80:
                ts_delta = unzz[b]
                pos += 2
            elif data[pos + 2] < 0x80:
                ts_delta = unzz[(b & 0x7F) | (data[pos + 2] << 7)]
                pos += 3
            else:
                ts_delta, pos = dvl(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                off_delta = unzz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                off_delta = unzz[(b & 0x7F) | (data[pos + 1] << 7)]
                pos += 2
            else:
                off_delta, pos = dv(data, pos)
            b = data[pos]
            if b == 1:  # zigzag -1: a null key, the common case
                key = None
                pos += 1
            else:
                if b < 0x80:
                    n = unzz[b]
                    pos += 1
                elif data[pos + 1] < 0x80:
                    n = unzz[(b & 0x7F) | (data[pos + 1] << 7)]
                    pos += 2
                else:
                    n, pos = dv(data, pos)
                if n < 0:  # any negative length means null, as in Java
                    key = None
                else:
                    key = data[pos : pos + n]
                    pos += n
            b = data[pos]
            if b < 0x80:
                n = unzz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                n = unzz[(b & 0x7F) | (data[pos + 1] << 7)]
                pos += 2
            else:
                n, pos = dv(data, pos)
            if n < 0:
                value = None
            else:
                value = data[pos : pos + n]
                pos += n
            if data[pos] == 0:
                headers: Sequence[tuple[str, bytes | None]] = ()  # no list to allocate
                pos += 1
            else:
                headers, pos = _decode_headers(data, pos, rec_end)
            if pos != rec_end:
                raise CorruptRecordError(
                    f"record declared {length} bytes but its fields take {length + pos - rec_end}")
            if row is None:
                append(Record(base_offset + off_delta,
                              base_ts + ts_delta if fixed_ts is None else fixed_ts,
                              key, value, list(headers)))
            else:
                append(new(cls, (topic, partition, base_offset + off_delta,
                                 base_ts + ts_delta if fixed_ts is None else fixed_ts,
                                 ts_type, key, value, headers)))
    except IndexError:
        raise CorruptRecordError("truncated record") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes follow the last of {count} records")
    return records


def _decode_headers(data: bytes, pos: int, rec_end: int) -> tuple[list, int]:
    dv = decode_varint
    count, pos = dv(data, pos)
    # Each header takes at least 2 bytes, so this also bounds the loop.
    if count < 0 or 2 * count > rec_end - pos:
        raise CorruptRecordError(f"bad header count {count}")
    headers = []
    for _ in range(count):
        n, pos = dv(data, pos)
        if n < 0 or n > rec_end - pos:
            raise CorruptRecordError(f"bad header key length {n}")
        key = str(data[pos : pos + n], "utf-8", "surrogateescape")
        pos += n
        n, pos = dv(data, pos)
        if n < 0:
            value = None
        elif n > rec_end - pos:
            raise CorruptRecordError(f"header value length {n} overruns its record")
        else:
            value = data[pos : pos + n]
            pos += n
        headers.append((key, value))
    return headers, pos
