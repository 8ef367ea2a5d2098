"""Compression codecs for RecordBatch v2 (attribute bits 0-2) and bounded decompression.

Owns the byte formats real Kafka clients put inside a compressed batch:

- 1 gzip: one gzip member (java.util.zip.GZIPOutputStream); readers accept concatenated
  members and, like GZIPInputStream, ignore trailing bytes that do not start a member.
- 2 snappy: the Java client writes xerial framing (SnappyOutputStream): a 16-byte header
  (b'\\x82SNAPPY\\x00', int32 version 1, int32 compat 1) then blocks of int32 BE length +
  raw snappy, each block holding at most 32 KiB of input. librdkafka writes *raw* snappy
  (uncompressed-length varint + elements). We write xerial and read both.
- 3 lz4: the LZ4 frame format as Kafka's Lz4BlockOutputStream writes it: FLG 0x60
  (version 1, independent blocks, no checksums, no content size), BD 0x40 (64 KiB
  blocks). Java readers reject linked blocks, so we never write them; we do read them.
- 4 zstd: standard zstd frames.

Decompression never allocates more than about max_size + 1 bytes of output (plus a copy
of the result): sizes declared by the format are checked before anything is allocated,
and otherwise the output goes into a fixed buffer that the decoder cannot grow (see
_decompress_bounded).

Sans-IO: no sockets, files or clocks (the anonymous mmap used as a bounded output
buffer is memory, not a file).
"""

from __future__ import annotations

import enum
import mmap
import struct
import zlib

import cramjam

from .record_errors import CorruptRecordError, UnsupportedCodecError

# What the codecs accept: batches are built in bytearrays and read through memoryviews.
BytesLike = bytes | bytearray | memoryview

__all__ = ["Codec", "CODEC_NAMES", "compress", "decompress"]


class Codec(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Codec:
        """Kafka's compression.type spelling: 'none', 'gzip', 'snappy', 'lz4', 'zstd'."""
        try:
            return _BY_NAME[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown compression type {name!r}") from None


_BY_NAME = {c.name.lower(): c for c in Codec}
CODEC_NAMES = tuple(_BY_NAME)  # compression.type's values, for option choices

_I32 = struct.Struct(">i")
_U32LE = struct.Struct("<I")

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # xerial's SnappyOutputStream default block size

_LZ4_MAGIC = b"\x04\x22\x4d\x18"  # 0x184D2204 little-endian
# FLG 0x60, BD 0x40 and the header checksum (xxh32(FLG, BD) >> 8) & 0xFF = 0x82: the
# exact 7 bytes Kafka's Lz4BlockOutputStream writes with its defaults.
_LZ4_HEADER = _LZ4_MAGIC + b"\x60\x40\x82"
_LZ4_BLOCK = 64 * 1024
_LZ4_UNCOMPRESSED = 0x80000000
_LZ4_END_MARK = b"\x00\x00\x00\x00"

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

_GZIP_STEP = 256 * 1024
_GZIP_LEVEL = 6  # Deflater.DEFAULT_COMPRESSION, what Kafka uses unless configured
_ZSTD_LEVEL = 3  # zstd-jni / Kafka default

# First-attempt output size when a format does not declare its decompressed size.
_MIN_GUESS = 64 * 1024
_RATIO_GUESS = 8

# What cramjam raises on bad input (DecompressionError) or from its stream layer.
_CRAMJAM_ERRORS = (cramjam.DecompressionError, OSError, ValueError)


def compress(codec: int, data: BytesLike, *, level: int | None = None) -> bytes:
    """Compress `data` the way the Java client does for `codec` (0..4).

    `level` follows KIP-390 for gzip (1-9) and zstd (-131072..22); None means Kafka's
    default. Snappy has no levels, and lz4 ignores `level`: cramjam's block compressor
    has only the fast mode, which is also what Java uses at lz4's default level.
    """
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        c = zlib.compressobj(_GZIP_LEVEL if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == Codec.SNAPPY:
        return _xerial_compress(data)
    if codec == Codec.LZ4:
        return _lz4_frame_compress(data)
    if codec == Codec.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL if level is None else level))
    raise UnsupportedCodecError(f"unsupported compression codec id {codec}")


def decompress(codec: int, data: BytesLike, max_size: int) -> bytes:
    """Decompress `data` (any bytes-like) written with `codec`.

    Raises CorruptRecordError if the data is malformed or would decompress to more than
    `max_size` bytes, UnsupportedCodecError for a codec id outside 0..4.
    """
    if codec == Codec.NONE:
        if len(data) > max_size:
            raise CorruptRecordError(f"{len(data)} bytes exceed the limit of {max_size}")
        return bytes(data)
    if codec == Codec.GZIP:
        return _gunzip(data, max_size)
    if codec == Codec.SNAPPY:
        return _snappy_decompress(memoryview(data).cast("B"), max_size)
    if codec == Codec.LZ4:
        mv = memoryview(data).cast("B")
        return _decompress_bounded("lz4", cramjam.lz4.decompress_into, mv, max_size,
                                   _lz4_content_size(mv))
    if codec == Codec.ZSTD:
        mv = memoryview(data).cast("B")
        return _decompress_bounded("zstd", cramjam.zstd.decompress_into, mv, max_size,
                                   _zstd_content_size(mv))
    raise UnsupportedCodecError(f"unsupported compression codec id {codec}")


# --- gzip -------------------------------------------------------------------------

def _gunzip(data: BytesLike, max_size: int) -> bytes:
    out = bytearray()
    d = zlib.decompressobj(31)
    pending = data
    try:
        while True:
            # max_length caps what zlib may produce in this call; small steps keep the
            # temporary chunk small, and the budget is never 0 (0 means "unlimited").
            chunk = d.decompress(pending, min(_GZIP_STEP, max_size + 1 - len(out)))
            out += chunk
            if len(out) > max_size:
                raise CorruptRecordError(f"gzip payload decompresses to more than {max_size} bytes")
            if d.eof:
                rest = d.unused_data
                if rest[:2] != b"\x1f\x8b":
                    # GZIPInputStream ignores bytes after a member that are not a header.
                    return bytes(out)
                d = zlib.decompressobj(31)
                pending = rest
                continue
            pending = d.unconsumed_tail
            if not pending and not chunk:
                raise CorruptRecordError("truncated gzip payload")
    except zlib.error as e:
        raise CorruptRecordError(f"corrupt gzip payload: {e}") from None


# --- snappy -----------------------------------------------------------------------

def _xerial_compress(data: BytesLike) -> bytes:
    mv = memoryview(data).cast("B")
    out = bytearray(_XERIAL_HEADER)
    for i in range(0, len(mv), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(mv[i : i + _XERIAL_BLOCK])
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def _uvarint32(buf: memoryview, pos: int) -> tuple[int, int]:
    """The unsigned length varint that starts every raw snappy stream (<= 5 bytes)."""
    result = 0
    for shift in (0, 7, 14, 21, 28):
        if pos >= len(buf):
            raise CorruptRecordError("truncated snappy length")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result > 0xFFFFFFFF:
                break
            return result, pos
    raise CorruptRecordError("bad snappy length varint")


def _snappy_decompress(mv: memoryview, max_size: int) -> bytes:
    # A raw stream cannot begin with the xerial magic: after its length varint
    # (0x82 0x53) the first element would be a copy, and a copy needs earlier output.
    if len(mv) >= len(_XERIAL_HEADER) and mv[:8] == _XERIAL_MAGIC:
        # Version and compat are not checked: some producers write them little-endian
        # (kafka-python issue #2414) and readers accept that.
        return _xerial_decompress(mv, max_size)
    size, _ = _uvarint32(mv, 0)
    if size > max_size:
        raise CorruptRecordError(f"snappy payload declares {size} bytes, limit {max_size}")
    out = bytearray(size)
    _snappy_raw_into(mv, out, size)
    return bytes(out)


def _xerial_decompress(mv: memoryview, max_size: int) -> bytes:
    blocks = []
    total = 0
    pos = len(_XERIAL_HEADER)
    end = len(mv)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("truncated xerial block length")
        (blen,) = _I32.unpack_from(mv, pos)
        pos += 4
        if blen < 0 or blen > end - pos:
            raise CorruptRecordError(f"bad xerial block length {blen}")
        block = mv[pos : pos + blen]
        pos += blen
        size, _ = _uvarint32(block, 0)
        total += size
        if total > max_size:
            raise CorruptRecordError(f"snappy payload decompresses to more than {max_size} bytes")
        blocks.append((block, size))
    out = bytearray(total)
    view = memoryview(out)
    at = 0
    for block, size in blocks:
        _snappy_raw_into(block, view[at : at + size], size)
        at += size
    view.release()
    return bytes(out)


def _snappy_raw_into(src: memoryview, dst, size: int) -> None:
    try:
        got = cramjam.snappy.decompress_raw_into(src, dst)
    except _CRAMJAM_ERRORS as e:
        raise CorruptRecordError(f"corrupt snappy payload: {e}") from None
    if got != size:
        raise CorruptRecordError(f"snappy block produced {got} bytes, declared {size}")


# --- lz4 / zstd -------------------------------------------------------------------

def _lz4_frame_compress(data: BytesLike) -> bytes:
    mv = memoryview(data).cast("B")
    out = bytearray(_LZ4_HEADER)
    for i in range(0, len(mv), _LZ4_BLOCK):
        chunk = mv[i : i + _LZ4_BLOCK]
        block = cramjam.lz4.compress_block(chunk, store_size=False)
        if len(block) >= len(chunk):
            # Incompressible: stored as is, flagged by the high bit of the size.
            out += _U32LE.pack(len(chunk) | _LZ4_UNCOMPRESSED)
            out += chunk
        else:
            out += _U32LE.pack(len(block))
            out += block
    out += _LZ4_END_MARK
    return bytes(out)


def _lz4_content_size(mv: memoryview) -> int | None:
    if len(mv) < 14 or mv[:4] != _LZ4_MAGIC or not mv[4] & 0x08:
        return None
    return int.from_bytes(mv[6:14], "little")


def _zstd_content_size(mv: memoryview) -> int | None:
    """Frame_Content_Size of the first frame, if declared (RFC 8878 section 3.1.1.1)."""
    if len(mv) < 5 or mv[:4] != _ZSTD_MAGIC:
        return None
    fhd = mv[4]
    single_segment = (fhd >> 5) & 1
    fcs_bytes = (single_segment, 2, 4, 8)[fhd >> 6]
    if not fcs_bytes:
        return None
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3]
    if pos + fcs_bytes > len(mv):
        return None
    size = int.from_bytes(mv[pos : pos + fcs_bytes], "little")
    return size + 256 if fcs_bytes == 2 else size


def _decompress_bounded(name, decompress_into, mv: memoryview, max_size: int,
                        declared: int | None) -> bytes:
    """Decode into a fixed-size output that the decoder fails to overrun.

    First try a buffer of the declared or guessed size. If that is too small, decode
    again into an anonymous mapping of max_size + 1 bytes: only the pages the decoder
    writes cost memory, so garbage fails fast and a bomb stops after max_size + 1
    bytes. A result that fills a buffer exactly is never taken as complete.
    """
    if declared is not None:
        if declared > max_size:
            raise CorruptRecordError(f"{name} payload declares {declared} bytes, limit {max_size}")
        # Only a hint: a later frame may add more.
        guess = declared + 1
    else:
        guess = max(_MIN_GUESS, len(mv) * _RATIO_GUESS)
    if guess <= max_size:
        out = bytearray(guess)
        try:
            n = decompress_into(mv, out)
        except _CRAMJAM_ERRORS:
            n = guess
        if n < guess:
            del out[n:]
            return bytes(out)
        del out
    with mmap.mmap(-1, max_size + 1) as big:
        try:
            n = decompress_into(mv, big)
        except _CRAMJAM_ERRORS as e:
            raise CorruptRecordError(
                f"{name} payload is corrupt or decompresses to more than {max_size} bytes: {e}"
            ) from None
        if n > max_size:
            raise CorruptRecordError(f"{name} payload decompresses to more than {max_size} bytes")
        return big[:n]
