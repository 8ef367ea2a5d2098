"""protocol.codecs: formats the Java client writes, interop with kafka-python and aiokafka
codec code, bounded decompression (bombs), and corrupt input."""

from __future__ import annotations

import os
import random
import struct
import zlib

import aiokafka.codec as aio_codec
import cramjam
import kafka.codec as kp_codec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codecs import Codec, compress, decompress
from protocol.record_errors import CorruptRecordError, UnsupportedCodecError

MiB = 1 << 20
COMPRESSED = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


def _text(n: int, seed: int = 7) -> bytes:
    """Compressible but not trivial: words from a small random vocabulary."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choices(b"abcdefghijklmnop", k=rnd.randint(2, 9))) for _ in range(300)]
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(words) + b" "
    return bytes(out[:n])


PAYLOADS = {
    "empty": b"",
    "one": b"x",
    "text": _text(10_000),
    "random": random.Random(1).randbytes(200_000),  # incompressible: lz4 stores blocks raw
    "zeros": bytes(3 * MiB),
    "block_edges": _text(64 * 1024 * 2 + 32 * 1024),  # exact multiples of lz4/xerial blocks
}


# --- bombs: 100 MiB of zeros, built without ever holding 100 MiB -------------------

BOMB_SIZE = 100 * MiB


def gzip_bomb() -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(MiB)
    return b"".join(c.compress(chunk) for _ in range(BOMB_SIZE // MiB)) + c.flush()


def xerial_bomb() -> bytes:
    block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    framed = struct.pack(">i", len(block)) + block
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + framed * (BOMB_SIZE // (32 * 1024))


def raw_snappy_bomb() -> bytes:
    # Length varint, a 1-byte literal (tag 0x00, byte 0), then copies of 64 bytes at
    # offset 1 (tag (63 << 2) | 2, offset 0x0001 little-endian).
    copies = (BOMB_SIZE - 1) // 64
    size = 1 + 64 * copies
    varint = bytearray()
    while size >= 0x80:
        varint.append(size & 0x7F | 0x80)
        size >>= 7
    varint.append(size)
    return bytes(varint) + b"\x00\x00" + b"\xfe\x01\x00" * copies


def lz4_bomb() -> bytes:
    block = bytes(cramjam.lz4.compress_block(bytes(64 * 1024), store_size=False))
    framed = struct.pack("<I", len(block)) + block
    return b"\x04\x22\x4d\x18\x60\x40\x82" + framed * (BOMB_SIZE // (64 * 1024)) + b"\0\0\0\0"


def zstd_bomb() -> bytes:
    # Streaming compression does not declare a content size, so the decoder cannot
    # reject it up front and must stop while writing.
    c = cramjam.zstd.Compressor()
    chunk = bytes(MiB)
    for _ in range(BOMB_SIZE // MiB):
        c.compress(chunk)
    return bytes(c.finish())


BOMBS = {
    "gzip": (Codec.GZIP, gzip_bomb),
    "snappy-xerial": (Codec.SNAPPY, xerial_bomb),
    "snappy-raw": (Codec.SNAPPY, raw_snappy_bomb),
    "lz4": (Codec.LZ4, lz4_bomb),
    "zstd": (Codec.ZSTD, zstd_bomb),
}


# --- Codec enum -------------------------------------------------------------------

def test_codec_ids_match_the_attribute_bits():
    assert [int(c) for c in Codec] == [0, 1, 2, 3, 4]
    assert [Codec.from_name(n) for n in ("none", "gzip", "snappy", "lz4", "zstd")] == list(Codec)


@pytest.mark.parametrize("name", ["NONE", "Gzip", "uncompressed", "producer", "lz4 ", "", None])
def test_codec_from_name_rejects_other_spellings(name):
    with pytest.raises(ValueError):
        Codec.from_name(name)


# --- round trips and exact limits -------------------------------------------------

@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_round_trip_at_exact_limit(codec, name):
    data = PAYLOADS[name]
    blob = compress(codec, data)
    assert decompress(codec, blob, len(data)) == data
    assert decompress(codec, memoryview(bytearray(blob)), len(data)) == data
    if data:
        with pytest.raises(CorruptRecordError):
            decompress(codec, blob, len(data) - 1)


@pytest.mark.parametrize("codec,level", [(Codec.GZIP, 1), (Codec.GZIP, 9), (Codec.ZSTD, 1),
                                         (Codec.ZSTD, 19), (Codec.LZ4, 12)])
def test_levels_still_round_trip(codec, level):
    data = PAYLOADS["text"]
    assert decompress(codec, compress(codec, data, level=level), len(data)) == data


def test_gzip_level_is_applied():
    data = PAYLOADS["text"]
    assert len(compress(Codec.GZIP, data, level=1)) > len(compress(Codec.GZIP, data, level=9))


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 99])
def test_unknown_codec(codec):
    with pytest.raises(UnsupportedCodecError):
        compress(codec, b"abc")
    with pytest.raises(UnsupportedCodecError):
        decompress(codec, b"abc", 100)


# --- the bytes the Java client writes ---------------------------------------------

def test_gzip_is_a_single_gzip_member():
    blob = compress(Codec.GZIP, PAYLOADS["text"])
    assert blob[:3] == b"\x1f\x8b\x08"
    d = zlib.decompressobj(31)
    assert d.decompress(blob) == PAYLOADS["text"] and d.eof and d.unused_data == b""


def test_snappy_is_xerial_framed_in_32k_blocks():
    data = PAYLOADS["block_edges"]  # 5 full 32 KiB blocks
    blob = compress(Codec.SNAPPY, data)
    assert blob[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    pos, out, sizes = 16, b"", []
    while pos < len(blob):
        (n,) = struct.unpack_from(">i", blob, pos)
        block = bytes(cramjam.snappy.decompress_raw(blob[pos + 4 : pos + 4 + n]))
        sizes.append(len(block))
        out += block
        pos += 4 + n
    assert out == data and sizes == [32 * 1024] * 5


def test_lz4_frame_matches_kafka_lz4_block_output_stream():
    data = PAYLOADS["block_edges"] + b"tail"  # 2.5 blocks of 64 KiB + 4 bytes
    blob = compress(Codec.LZ4, data)
    # Magic, FLG 0x60 (v1, independent blocks, no checksums, no size), BD 0x40 (64 KiB), HC.
    assert blob[:7] == bytes.fromhex("04224d18604082")
    assert blob[-4:] == b"\0\0\0\0"
    # Java decodes every block on its own (LZ4SafeDecompressor, no dictionary); do the same.
    pos, out = 7, b""
    while True:
        (n,) = struct.unpack_from("<I", blob, pos)
        pos += 4
        if n == 0:
            break
        size = n & 0x7FFFFFFF
        block = blob[pos : pos + size]
        if n & 0x80000000:
            out += block
        else:
            buf = bytearray(64 * 1024)
            got = cramjam.lz4.decompress_block_into(block, buf, output_len=len(buf))
            out += buf[:got]
        pos += size
    assert pos == len(blob) and out == data


def test_lz4_header_checksum_is_verified_by_the_reader():
    # Why 0x82 is the only right HC byte: cramjam checks it, and any other value fails.
    blob = bytearray(compress(Codec.LZ4, b"hello"))
    blob[6] ^= 0x01
    with pytest.raises(CorruptRecordError):
        decompress(Codec.LZ4, bytes(blob), 100)


def test_incompressible_lz4_blocks_are_stored_raw():
    data = PAYLOADS["random"][: 64 * 1024]
    blob = compress(Codec.LZ4, data)
    (n,) = struct.unpack_from("<I", blob, 7)
    assert n == 0x80000000 | len(data) and blob[11 : 11 + len(data)] == data


def test_zstd_is_a_standard_frame():
    blob = compress(Codec.ZSTD, PAYLOADS["text"])
    assert blob[:4] == b"\x28\xb5\x2f\xfd"
    assert bytes(cramjam.zstd.decompress(blob)) == PAYLOADS["text"]


# --- interop with the codec code of real clients -----------------------------------

def _libs():
    """(library, codec, encode, decode) for every codec the installed clients support.
    kafka-python needs python-snappy/lz4/zstandard, absent here, for all but gzip."""
    out = []
    for name, mod in (("aiokafka", aio_codec), ("kafka-python", kp_codec)):
        table = {
            Codec.GZIP: (mod.has_gzip(), mod.gzip_encode, mod.gzip_decode),
            Codec.SNAPPY: (mod.has_snappy(), mod.snappy_encode, mod.snappy_decode),
            Codec.LZ4: (mod.has_lz4(), mod.lz4_encode, mod.lz4_decode),
            Codec.ZSTD: (mod.has_zstd(), mod.zstd_encode, mod.zstd_decode),
        }
        for codec, (available, enc, dec) in table.items():
            marks = () if available else pytest.mark.skip(f"{name} lacks {codec.name}")
            out.append(pytest.param(codec, enc, dec, id=f"{name}-{codec.name.lower()}",
                                    marks=marks))
    return out


@pytest.mark.parametrize("codec,their_encode,their_decode", _libs())
@pytest.mark.parametrize("name", ["one", "text", "random", "zeros", "block_edges"])
def test_interop_with_client_codecs(codec, their_encode, their_decode, name):
    data = PAYLOADS[name]
    assert bytes(their_decode(compress(codec, data))) == data
    assert decompress(codec, bytes(their_encode(data)), len(data)) == data


def test_reads_raw_snappy_as_librdkafka_writes_it():
    data = PAYLOADS["text"]
    assert decompress(Codec.SNAPPY, bytes(cramjam.snappy.compress_raw(data)), len(data)) == data
    raw = aio_codec.snappy_encode(data, xerial_compatible=False)
    assert decompress(Codec.SNAPPY, raw, len(data)) == data


def test_reads_xerial_with_little_endian_version_fields():
    blob = bytearray(compress(Codec.SNAPPY, PAYLOADS["text"]))
    blob[8:16] = struct.pack("<ii", 1, 1)  # as some non-Java producers write it
    assert decompress(Codec.SNAPPY, bytes(blob), len(PAYLOADS["text"])) == PAYLOADS["text"]


def test_reads_linked_lz4_blocks_and_checksums():
    data = _text(300_000)
    c = cramjam.lz4.Compressor()  # cramjam's default: linked blocks, content checksum
    c.compress(data)
    blob = bytes(c.finish())
    assert not blob[4] & 0x20  # really linked
    assert decompress(Codec.LZ4, blob, len(data)) == data


def _lz4_frame_with_content_size(payload: bytes, declared: int) -> bytes:
    """A frame declaring `declared` as content size; the header checksum is found by
    trial against cramjam, which verifies it."""
    body = compress(Codec.LZ4, payload)[7:]
    for hc in range(256):
        blob = b"\x04\x22\x4d\x18\x68\x40" + struct.pack("<Q", declared) + bytes([hc]) + body
        try:
            cramjam.lz4.decompress(blob)
            return blob
        except Exception:
            continue
    raise AssertionError("no header checksum accepted")


def test_lz4_declared_content_size_is_checked_before_decoding():
    data = PAYLOADS["text"]
    blob = _lz4_frame_with_content_size(data, len(data))
    assert decompress(Codec.LZ4, blob, len(data)) == data
    lying = bytearray(blob)
    lying[6:14] = struct.pack("<Q", 10 * 2**30)  # HC now wrong too; rejected before that
    with pytest.raises(CorruptRecordError, match="declares"):
        decompress(Codec.LZ4, bytes(lying), MiB)


def test_zstd_with_and_without_declared_size_and_several_frames():
    data = PAYLOADS["zeros"]
    one_shot = compress(Codec.ZSTD, data)  # declares its content size
    c = cramjam.zstd.Compressor()
    c.compress(data)
    streamed = bytes(c.finish())  # does not: the growth path
    assert one_shot[4] & 0xC0 and not streamed[4] & 0xC0
    for blob in (one_shot, streamed):
        assert decompress(Codec.ZSTD, blob, len(data)) == data
        with pytest.raises(CorruptRecordError):
            decompress(Codec.ZSTD, blob, len(data) - 1)
    two = one_shot + compress(Codec.ZSTD, b"more")  # first frame's size undercounts
    assert decompress(Codec.ZSTD, two, len(data) + 4) == data + b"more"
    with pytest.raises(CorruptRecordError):
        decompress(Codec.ZSTD, two, len(data) + 3)


def test_gzip_concatenated_members_and_trailing_bytes():
    a, b = compress(Codec.GZIP, b"first "), compress(Codec.GZIP, b"second")
    assert decompress(Codec.GZIP, a + b, 100) == b"first second"
    # java.util.zip.GZIPInputStream ignores trailing bytes that are not a gzip header.
    assert decompress(Codec.GZIP, a + b"\0\0junk", 100) == b"first "
    with pytest.raises(CorruptRecordError):  # but a second member must be sound
        decompress(Codec.GZIP, a + b[:12], 100)
    with pytest.raises(CorruptRecordError):
        decompress(Codec.GZIP, a + b, 11)


# --- corrupt input ----------------------------------------------------------------

@pytest.mark.parametrize("codec", COMPRESSED)
def test_every_prefix_is_refused_or_a_prefix(codec):
    # Xerial has no end marker, so a cut on a block boundary is a shorter valid stream;
    # every other cut must raise CorruptRecordError.
    data = _text(70_000)
    blob = compress(codec, data)
    step = max(1, len(blob) // 400)
    for n in list(range(0, 64)) + list(range(64, len(blob), step)):
        try:
            out = decompress(codec, blob[:n], len(data))
        except CorruptRecordError:
            continue
        assert codec == Codec.SNAPPY and data.startswith(out), n


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_is_corrupt(codec):
    for blob in (b"", b"\0" * 20, b"\xff" * 64, random.Random(3).randbytes(5000)):
        with pytest.raises(CorruptRecordError):
            decompress(codec, blob, MiB)


def test_raw_snappy_whose_data_disagrees_with_its_length():
    data = PAYLOADS["text"]
    raw = bytearray(cramjam.snappy.compress_raw(data))
    assert raw[:2] == b"\x90\x4e"  # varint 10000
    raw[:2] = b"\x8f\x4e"  # claims 9999: the decoder must not write past it
    with pytest.raises(CorruptRecordError):
        decompress(Codec.SNAPPY, bytes(raw), MiB)


def test_xerial_block_length_past_the_end():
    blob = bytearray(compress(Codec.SNAPPY, PAYLOADS["text"]))
    blob[16:20] = struct.pack(">i", len(blob))
    with pytest.raises(CorruptRecordError):
        decompress(Codec.SNAPPY, bytes(blob), MiB)
    blob[16:20] = struct.pack(">i", -5)
    with pytest.raises(CorruptRecordError):
        decompress(Codec.SNAPPY, bytes(blob), MiB)


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from(list(Codec)), blob=st.binary(max_size=300))
def test_random_bytes_only_decode_or_raise_corrupt(codec, blob):
    try:
        out = decompress(codec, blob, 64 * 1024)
    except CorruptRecordError:
        return
    assert isinstance(out, bytes) and len(out) <= 64 * 1024


_SEEDS = {c: compress(c, _text(3000)) for c in COMPRESSED}


@settings(max_examples=400, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.data())
def test_mutated_streams_only_decode_or_raise_corrupt(codec, data):
    blob = bytearray(_SEEDS[codec])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    try:
        out = decompress(codec, bytes(blob), 8192)
    except CorruptRecordError:
        return
    assert isinstance(out, bytes) and len(out) <= 8192


# --- bombs ------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(BOMBS))
def test_bomb_is_refused(name):
    codec, build = BOMBS[name]
    bomb = build()
    assert len(bomb) < 6 * MiB
    with pytest.raises(CorruptRecordError):
        decompress(codec, bomb, MiB)


def test_snappy_declared_size_is_refused_before_allocating():
    # A raw stream that claims 4 GiB - 1 in five bytes: refused from the varint alone.
    with pytest.raises(CorruptRecordError, match="declares"):
        decompress(Codec.SNAPPY, b"\xff\xff\xff\xff\x0f" + os.urandom(10), MiB)
