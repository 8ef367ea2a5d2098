"""protocol.records: the batch header view, CRC, produce validation, rewrites, record
encoding/decoding, wire compatibility with kafka-python and aiokafka, hostile input."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy as AioBuilderPy
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from protocol import records as R
from protocol.codecs import Codec
from protocol.records import (
    BATCH_OVERHEAD, BatchHeader, CorruptRecordError, InvalidRecordError, Record,
    RecordError, RecordTooLargeError, UnsupportedCodecError, batch_crc_ok, decode_batch,
    decode_batches, decode_varint, decode_varlong, encode_batch, encode_varint,
    encode_varlong, iter_batch_headers, parse_batch_header, refresh_crc, set_base_offset,
    set_partition_leader_epoch, validate_produced_batch, varint_size,
)
from tests.protocol.test_codecs import BOMBS

MiB = 1 << 20
TS = 1_700_000_000_000


def sample_records(n=3, offset=0):
    base = [
        Record(offset, TS, b"key", b"value", [("trace", b"abc"), ("nul", None)]),
        Record(offset + 1, TS - 5, None, None, []),  # null key and value; earlier timestamp
        Record(offset + 2, TS + 10, b"", b"", [("ключ-🔑", b"")]),  # empty, unicode key
    ]
    out = base[:n]
    for i in range(len(out), n):
        out.append(Record(offset + i, TS + i, b"k%d" % i, b"v" * (i % 300), [("i", b"%d" % i)]))
    return out


def fix_crc(batch: bytearray, pos: int = 0) -> bytearray:
    refresh_crc(batch, pos)
    return batch


def wrap_payload(payload: bytes, *, attributes=0, count=1, last_offset_delta=None) -> bytes:
    """A batch header (valid CRC) around arbitrary record bytes."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    head = struct.pack(">qiibIhiqqqhii", 0, 49 + len(payload), -1, 2, 0, attributes, lod,
                       TS, TS, -1, -1, -1, count)
    return bytes(fix_crc(bytearray(head + payload)))


# --- header -----------------------------------------------------------------------

def test_header_positions_match_the_wire_layout():
    batch = encode_batch(sample_records(2, offset=0x0102030405060708), base_offset=0x0102030405060708,
                         producer_id=0x1112131415161718, producer_epoch=0x2122,
                         base_sequence=0x31323334, partition_leader_epoch=0x41424344,
                         is_transactional=True, compression=Codec.LZ4)
    at = lambda pos, fmt: struct.unpack_from(fmt, batch, pos)[0]  # noqa: E731
    assert at(R.BASE_OFFSET_POS, ">q") == 0x0102030405060708
    assert at(R.LENGTH_POS, ">i") == len(batch) - 12
    assert at(R.LEADER_EPOCH_POS, ">i") == 0x41424344
    assert at(R.MAGIC_POS, ">b") == R.MAGIC == 2
    assert at(R.CRC_POS, ">I") == crc32c.crc32c(batch[21:])
    assert at(R.ATTRIBUTES_POS, ">h") == 0x10 | 3
    assert at(R.LAST_OFFSET_DELTA_POS, ">i") == 1
    assert at(R.BASE_TIMESTAMP_POS, ">q") == TS
    assert at(R.MAX_TIMESTAMP_POS, ">q") == TS
    assert at(R.PRODUCER_ID_POS, ">q") == 0x1112131415161718
    assert at(R.PRODUCER_EPOCH_POS, ">h") == 0x2122
    assert at(R.BASE_SEQUENCE_POS, ">i") == 0x31323334
    assert at(R.RECORDS_COUNT_POS, ">i") == 2
    assert R.RECORDS_POS == BATCH_OVERHEAD == 61


def test_header_properties():
    batch = encode_batch(sample_records(3, offset=100), base_offset=100, compression=Codec.ZSTD,
                         timestamp_type=1, is_transactional=True)
    h = parse_batch_header(batch)
    assert isinstance(h, BatchHeader)
    assert (h.size, h.last_offset, h.compression) == (len(batch), 102, 4)
    assert (h.timestamp_type, h.is_transactional, h.is_control) == (1, True, False)
    assert (h.base_timestamp, h.max_timestamp) == (TS, TS + 10)
    c = parse_batch_header(encode_batch(sample_records(1), is_control=True))
    assert (c.is_control, c.is_transactional, c.timestamp_type, c.compression) == (True, False, 0, 0)


def test_parse_header_at_offset_in_memoryview_without_copy():
    batch = encode_batch(sample_records(2))
    buf = bytearray(b"x" * 7 + batch)
    assert parse_batch_header(memoryview(buf), 7) == parse_batch_header(batch)


@pytest.mark.parametrize("pos,fmt,value", [(R.MAGIC_POS, ">b", 1), (R.MAGIC_POS, ">b", 3),
                                           (R.LENGTH_POS, ">i", 48), (R.LENGTH_POS, ">i", -1)])
def test_parse_header_rejects_bad_magic_and_length(pos, fmt, value):
    batch = bytearray(encode_batch(sample_records(1)))
    struct.pack_into(fmt, batch, pos, value)
    with pytest.raises(CorruptRecordError):
        parse_batch_header(batch)
    with pytest.raises(CorruptRecordError):
        decode_batch(bytes(batch))


# --- round trips ------------------------------------------------------------------

@pytest.mark.parametrize("codec", list(Codec))
def test_round_trip_small(codec):
    recs = sample_records(3, offset=500)
    batch = encode_batch(recs, base_offset=500, compression=codec)
    header, out = decode_batch(batch)
    assert out == recs
    assert header.compression == codec and header.records_count == 3
    assert header.base_timestamp == TS and header.max_timestamp == TS + 10


@pytest.mark.parametrize("codec", list(Codec))
def test_round_trip_1000_records(codec):
    recs = sample_records(1000, offset=10**12)
    batch = encode_batch(recs, base_offset=10**12, compression=codec,
                         producer_id=77, producer_epoch=3, base_sequence=2**31 - 10)
    header, out = decode_batch(batch)
    assert out == recs
    assert (header.last_offset_delta, header.producer_id, header.base_sequence) == (999, 77, 2**31 - 10)
    assert validate_produced_batch(batch, len(batch)) == header


def test_tuples_bytes_keys_and_large_fields():
    big = bytes(range(256)) * 700  # multi-byte length varints
    recs = [(0, TS, big, big, [(b"raw-key", big)]), (1, TS + 2**40, None, b"x", ())]
    _, out = decode_batch(encode_batch(recs))
    assert out == [Record(0, TS, big, big, [("raw-key", big)]), Record(1, TS + 2**40, None, b"x", [])]


def test_offset_gaps_are_kept_as_written_for_compacted_batches():
    recs = [Record(3, TS, b"a", b"1"), Record(7, TS, b"b", b"2")]
    batch = encode_batch(recs, base_offset=2)
    h, out = decode_batch(batch)
    assert (h.last_offset_delta, h.records_count, h.last_offset) == (5, 2, 7)
    assert [r.offset for r in out] == [3, 7]


def test_invalid_utf8_header_key_round_trips():
    key = b"\xff\xfebad"
    _, out = decode_batch(encode_batch([(0, TS, None, None, [(key, b"v")])]))
    assert out[0].headers[0][0].encode("utf-8", "surrogateescape") == key
    _, again = decode_batch(encode_batch(out))
    assert again == out


def test_log_append_time_batches_report_max_timestamp():
    recs = sample_records(3)
    _, out = decode_batch(encode_batch(recs, timestamp_type=1))
    assert [r.timestamp for r in out] == [TS + 10] * 3
    _, out = decode_batch(encode_batch(recs, timestamp_type=0))
    assert [r.timestamp for r in out] == [TS, TS - 5, TS + 10]


def test_explicit_base_timestamp():
    recs = sample_records(2)
    h, out = decode_batch(encode_batch(recs, base_timestamp=0))
    assert h.base_timestamp == 0 and out == recs


@pytest.mark.parametrize("kwargs", [dict(producer_epoch=2**15), dict(base_sequence=2**31),
                                    dict(timestamp_type=2)])
def test_encode_rejects_out_of_range_header_fields(kwargs):
    with pytest.raises(ValueError):
        encode_batch(sample_records(1), **kwargs)


@pytest.mark.parametrize("recs", [[], [Record(1, TS, None, None), Record(1, TS, None, None)],
                                  [Record(2, TS, None, None), Record(1, TS, None, None)],
                                  [Record(-1, TS, None, None)], [Record(2**31, TS, None, None)]])
def test_encode_rejects_bad_offsets(recs):
    with pytest.raises(ValueError):
        encode_batch(recs)


def test_encode_rejects_unknown_codec():
    with pytest.raises(UnsupportedCodecError):
        encode_batch(sample_records(1), compression=5)


# --- wire compatibility with kafka-python and aiokafka ----------------------------

# kafka-python 3.0.12 DefaultRecordBatchBuilder output for the two records below
# (it writes PartitionLeaderEpoch 0, where Java and aiokafka write -1).
GOLDEN = bytes.fromhex(
    "00000000000000000000004500000000029244a6ea00000000000100000000000003e800000000000003e8"
    "ffffffffffffffffffffffffffff0000000218000000026b027602026802780c000102010100")
GOLDEN_RECORDS = [Record(0, 1000, b"k", b"v", [("h", b"x")]), Record(1, 999, None, None, [])]


def test_golden_bytes():
    assert encode_batch(GOLDEN_RECORDS, partition_leader_epoch=0) == GOLDEN
    header, out = decode_batch(GOLDEN)
    assert out == GOLDEN_RECORDS and header.crc == 0x9244A6EA and header.max_timestamp == 1000


def _build_with(builder_cls, recs, producer=(-1, -1, -1), transactional=False, codec=0):
    builder = builder_cls(2, codec, transactional, *producer, 10**9)
    for r in recs:
        builder.append(r.offset, r.timestamp, r.key, r.value, r.headers)
    return bytes(builder.build())


BUILDERS = [pytest.param(KpBuilder, 0, id="kafka-python"),
            pytest.param(AioBuilder, -1, id="aiokafka-c"),
            pytest.param(AioBuilderPy, -1, id="aiokafka-py")]


@pytest.mark.parametrize("builder,epoch", BUILDERS)
@pytest.mark.parametrize("n", [1, 3, 200])
def test_byte_identical_to_client_builders(builder, epoch, n):
    recs = sample_records(n)
    theirs = _build_with(builder, recs)
    assert encode_batch(recs, partition_leader_epoch=epoch) == theirs
    assert decode_batch(theirs)[1] == recs


@pytest.mark.parametrize("builder,epoch", BUILDERS)
def test_byte_identical_idempotent_transactional(builder, epoch):
    recs = sample_records(5)
    theirs = _build_with(builder, recs, producer=(4242, 7, 99), transactional=True)
    ours = encode_batch(recs, partition_leader_epoch=epoch, producer_id=4242,
                        producer_epoch=7, base_sequence=99, is_transactional=True)
    assert ours == theirs


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_aiokafka_reads_ours_and_we_read_theirs_compressed(codec):
    recs = sample_records(300)
    theirs = _build_with(AioBuilder, recs, codec=codec)
    h, out = decode_batch(theirs)
    assert h.compression == codec and out == recs  # they compressed it (it helps here)
    ours = encode_batch(recs, compression=codec)
    batch = AioBatch(ours)
    assert batch.validate_crc()
    got = [Record(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == recs


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_kafka_python_reads_ours_and_we_read_theirs(codec):
    recs = sample_records(300)
    theirs = _build_with(KpBuilder, recs, codec=codec)
    assert decode_batch(theirs)[1] == recs
    ours = encode_batch(recs, compression=codec)
    batch = KpBatch(ours)
    assert batch.validate_crc() and batch.compression_type == codec
    got = [Record(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == recs


# --- CRC and in-place rewrites ----------------------------------------------------

def test_crc_mismatch():
    batch = bytearray(encode_batch(sample_records(2)))
    batch[-1] ^= 0x40
    h = parse_batch_header(batch)
    assert batch_crc_ok(batch, 0, h) is False
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batch(batch)
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_produced_batch(bytes(batch), MiB)


def test_every_flipped_byte_in_the_crc_area_is_detected():
    batch = encode_batch(sample_records(2), compression=Codec.NONE)
    assert batch_crc_ok(batch, 0, parse_batch_header(batch))
    for i in range(R.CRC_POS, len(batch)):
        bad = bytearray(batch)
        bad[i] ^= 0x01
        assert not batch_crc_ok(bad, 0, parse_batch_header(bad)), i
        with pytest.raises(CorruptRecordError):
            decode_batch(bad)


def test_batch_crc_ok_on_a_truncated_buffer_raises():
    batch = encode_batch(sample_records(2))
    with pytest.raises(CorruptRecordError):
        batch_crc_ok(batch[:-1], 0, parse_batch_header(batch))


def test_rewrites_keep_the_crc_valid():
    one = encode_batch(sample_records(3), compression=Codec.SNAPPY)
    buf = bytearray(b"\0" * 5 + one + one)
    for pos in (5, 5 + len(one)):
        set_base_offset(buf, pos, 2**40 + pos)
        set_partition_leader_epoch(memoryview(buf), pos, 17)
    for pos in (5, 5 + len(one)):
        h = parse_batch_header(buf, pos)
        assert (h.base_offset, h.partition_leader_epoch) == (2**40 + pos, 17)
        assert batch_crc_ok(buf, pos, h)
        _, out = decode_batch(buf, pos)
        assert [r.offset for r in out] == [2**40 + pos + i for i in range(3)]


def test_refresh_crc_after_a_rewrite_inside_the_crc():
    one = encode_batch(sample_records(3), compression=Codec.GZIP)
    buf = bytearray(b"\0" * 7 + one + one)
    pos = 7 + len(one)
    struct.pack_into(">q", buf, pos + R.MAX_TIMESTAMP_POS, TS + 99)
    assert not batch_crc_ok(buf, pos, parse_batch_header(buf, pos))
    refresh_crc(buf, pos)
    h = parse_batch_header(buf, pos)
    assert h.crc == crc32c.crc32c(bytes(buf[pos + 21 : pos + h.size]))  # independent of R
    assert buf[:pos] == b"\0" * 7 + one  # nothing outside the batch moved
    assert decode_batch(buf, pos)[0].max_timestamp == TS + 99


def test_refresh_crc_refuses_a_batch_the_buffer_does_not_hold():
    batch = bytearray(encode_batch(sample_records(2)))
    before = bytes(batch[:-1])
    cut = bytearray(before)
    with pytest.raises(CorruptRecordError):
        refresh_crc(cut)
    assert cut == before


# --- truncation and iteration ------------------------------------------------------

@pytest.mark.parametrize("codec", list(Codec))
def test_every_truncation_is_corrupt(codec):
    batch = encode_batch(sample_records(3), compression=codec)
    for n in range(len(batch)):
        cut = batch[:n]
        with pytest.raises(CorruptRecordError):
            decode_batch(cut)
        with pytest.raises(CorruptRecordError if n else InvalidRecordError):
            validate_produced_batch(cut, MiB)
        if n < BATCH_OVERHEAD:
            with pytest.raises(CorruptRecordError):
                parse_batch_header(cut)
        assert list(iter_batch_headers(cut)) == []
        assert decode_batches(cut) == []


def test_iter_batch_headers_and_decode_batches_stop_at_a_partial_tail():
    a = encode_batch(sample_records(2), base_offset=0)
    b = encode_batch(sample_records(3, offset=2), base_offset=2, compression=Codec.GZIP)
    c = encode_batch(sample_records(1, offset=5), base_offset=5, compression=Codec.ZSTD)
    buf = a + b + c
    assert [(pos, h.base_offset) for pos, h in iter_batch_headers(buf)] == \
        [(0, 0), (len(a), 2), (len(a) + len(b), 5)]
    for cut in range(len(a) + len(b), len(buf)):
        got = decode_batches(buf[:cut])
        assert [r.offset for _, recs in got for r in recs] == [0, 1, 2, 3, 4]
    assert [h.base_offset for _, h in iter_batch_headers(buf, len(a))] == [2, 5]
    assert [h.base_offset for _, h in iter_batch_headers(buf, 0, len(a) + len(b))] == [0, 2]
    assert [recs[0].offset for _, recs in decode_batches(buf)] == [0, 2, 5]


@pytest.mark.parametrize("pos, value", [(R.MAGIC_POS, b"\x01"),
                                        (R.LENGTH_POS, b"\x00\x00\x00\x30"),
                                        (R.LAST_OFFSET_DELTA_POS, b"\xff\xff\xff\xff")])
def test_iter_batch_headers_raises_on_a_bad_header_mid_stream(pos, value):
    a = encode_batch(sample_records(2))
    bad = bytearray(a)
    bad[pos:pos + len(value)] = value
    seen = []
    with pytest.raises(CorruptRecordError, match=f"at {len(a)}"):
        for position, _ in iter_batch_headers(a + bytes(bad)):
            seen.append(position)
    assert seen == [0]


# --- produce validation -----------------------------------------------------------

def test_validate_produced_batch_accepts_a_client_batch():
    batch = encode_batch(sample_records(3), producer_id=5, producer_epoch=0, base_sequence=0)
    h = validate_produced_batch(batch, len(batch))
    assert h.records_count == 3 and h.producer_id == 5


@pytest.mark.parametrize("buf,error", [
    (b"", InvalidRecordError),
    (encode_batch(sample_records(2)) * 2, InvalidRecordError),
    (encode_batch(sample_records(2)) + b"\0", InvalidRecordError),
    (encode_batch([Record(0, TS, None, None), Record(2, TS, None, None)]), InvalidRecordError),
    (encode_batch(sample_records(1), is_control=True), InvalidRecordError),
    (wrap_payload(b"", count=0, last_offset_delta=-1), InvalidRecordError),
    (wrap_payload(b"\x0e\x00\x00\x00\x01\x01\x00", count=1, last_offset_delta=1), InvalidRecordError),
    (wrap_payload(b"x" * 10, attributes=5), UnsupportedCodecError),
    (encode_batch(sample_records(1))[:70], CorruptRecordError),
    (b"\0" * 30, CorruptRecordError),
], ids=["empty", "two-batches", "trailing-byte", "offset-gap", "control", "no-records",
        "delta-mismatch", "codec-5", "truncated", "short-header"])
def test_validate_produced_batch_rejects(buf, error):
    with pytest.raises(error):
        validate_produced_batch(buf, MiB)


def test_validate_produced_batch_allows_control_batches_only_when_told():
    marker = encode_batch([Record(0, TS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", [])],
                          producer_id=9, producer_epoch=1, is_transactional=True, is_control=True)
    with pytest.raises(InvalidRecordError, match="control"):
        validate_produced_batch(marker, MiB)
    assert validate_produced_batch(marker, MiB, allow_control=True).is_control
    # The flag lifts only the control rule; every other check still applies.
    bad = bytearray(marker)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        validate_produced_batch(bytes(bad), MiB, allow_control=True)


def test_validate_produced_batch_checks_in_kafkas_order():
    # Size before CRC, CRC before codec, codec before the count rule (Kafka's
    # analyzeAndValidateRecords, then LogValidator): a batch broken several ways fails on
    # the first of them.
    both = bytearray(wrap_payload(b"x" * 10, attributes=5, count=2, last_offset_delta=5))
    with pytest.raises(UnsupportedCodecError):
        validate_produced_batch(bytes(both), MiB)
    both[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        validate_produced_batch(bytes(both), MiB)
    with pytest.raises(RecordTooLargeError):
        validate_produced_batch(bytes(both), len(both) - 1)


def test_validate_produced_batch_size_limit_is_inclusive():
    batch = encode_batch(sample_records(3))
    validate_produced_batch(batch, len(batch))
    with pytest.raises(RecordTooLargeError):
        validate_produced_batch(batch, len(batch) - 1)


# --- hostile record bytes ---------------------------------------------------------

def _record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


@pytest.mark.parametrize("payload,count", [
    (_record(b"\x00\x00\x00" + encode_varint(50) + b"k" + b"\x01\x00"), 1),  # key overruns
    (_record(b"\x00\x00\x00\x01" + encode_varint(9) + b"v\x00"), 1),  # value overruns
    (_record(b"\x00\x00\x00\x01\x01\x01"), 1),  # header count -1
    (_record(b"\x00\x00\x00\x01\x01\x02\x01\x00\x01"), 1),  # header key length -1
    (_record(b"\x00\x00\x00\x01\x01\x00\xff"), 1),  # record longer than its fields
    # ... even when the unread bytes would parse as the next record
    (_record(b"\x00\x00\x00\x01\x01\x00" + _record(b"\x00\x00\x02\x01\x01\x00")), 2),
    (_record(b"\x00\x00\x00\x01\x01\x00") + b"\x00", 1),  # bytes after the last record
    (_record(b"\x00\x00\x00\x01\x01\x00"), 2),  # fewer records than counted
    (_record(b"\x00\x00\x00\x01\x01\x00"), 2**31 - 1),  # absurd count
    (_record(b"\x00\x00\x00\x01\x01\x00"), -1),
    (encode_varint(-1) + b"\x00" * 10, 1),  # negative record length
    (b"\xff\xff\xff\xff\xff\x01" + b"\x00" * 10, 1),  # varint longer than 5 bytes
    (_record(b"\x00" + b"\xff" * 10 + b"\x01\x00\x01\x01\x00"), 1),  # varlong too long
])
def test_structurally_bad_records_are_corrupt(payload, count):
    with pytest.raises(CorruptRecordError):
        decode_batch(wrap_payload(payload, count=count))


def test_absurd_counts_fail_before_any_loop():
    rec = _record(b"\x00\x00\x00\x01\x01\x00")
    with pytest.raises(CorruptRecordError, match="records count"):
        decode_batch(wrap_payload(rec * 3, count=2**31 - 1))
    many_headers = _record(b"\x00\x00\x00\x01\x01" + encode_varint(2**30) + b"\x00\x01" * 4)
    with pytest.raises(CorruptRecordError, match="header count"):
        decode_batch(wrap_payload(many_headers, count=1))


def test_a_minimal_hand_built_record_decodes():
    payload = _record(b"\x00\x04\x02\x01\x02v\x00")  # ts delta 2, offset delta 1, value b"v"
    _, out = decode_batch(wrap_payload(payload, count=1))
    assert out == [Record(1, TS + 2, None, b"v", [])]


@pytest.mark.parametrize("codec", [6, 7])
def test_unknown_codec_in_a_batch(codec):
    with pytest.raises(UnsupportedCodecError):
        decode_batch(wrap_payload(b"\x00" * 20, attributes=codec))


def test_compressed_payload_that_is_garbage():
    for codec in (1, 2, 3, 4):
        with pytest.raises(CorruptRecordError):
            decode_batch(wrap_payload(b"\x01\x02\x03" * 20, attributes=codec))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_only_return_or_raise_record_errors(buf):
    for fn in (decode_batch, parse_batch_header, decode_batches,
               lambda b: list(iter_batch_headers(b)), lambda b: validate_produced_batch(b, MiB)):
        try:
            fn(buf)
        except RecordError:
            pass


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([0, 0, 1, 2, 3, 4, 5]), st.integers(-2, 40))
def test_random_record_bytes_behind_a_valid_header(payload, codec, count):
    # A correct CRC takes the fuzz past the header into the records (and decompressors).
    try:
        decode_batch(wrap_payload(payload, attributes=codec, count=count))
    except RecordError:
        pass


_SEED_BATCHES = [encode_batch(sample_records(4), compression=c) for c in Codec]


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(_SEED_BATCHES), st.data())
def test_mutated_batches_with_fixed_crc(seed, data):
    batch = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(R.ATTRIBUTES_POS, len(batch) - 1))
        batch[i] = data.draw(st.integers(0, 255))
    fix_crc(batch)
    try:
        header, out = decode_batch(bytes(batch))
    except RecordError:
        return
    assert all(isinstance(r, Record) for r in out)


# --- varints ----------------------------------------------------------------------

VARINT_VECTORS = [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"),
                  (-65, "8101"), (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f")]


@pytest.mark.parametrize("value,hexed", VARINT_VECTORS)
def test_varint_vectors(value, hexed):
    # Same bytes as Kafka's ByteUtils.writeVarint (zigzag then base-128 little-endian).
    assert encode_varint(value).hex() == hexed
    assert decode_varint(bytes.fromhex(hexed) + b"\xaa", 0) == (value, len(hexed) // 2)
    assert varint_size(value) == len(hexed) // 2


def test_varlong_extremes():
    assert encode_varlong(-(2**63)).hex() == "ffffffffffffffffff01"
    assert decode_varlong(bytes.fromhex("feffffffffffffffff01")) == (2**63 - 1, 10)
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(ValueError):
            encode_varlong(bad)
    for bad in (2**31, -(2**31) - 1):
        with pytest.raises(ValueError):
            encode_varint(bad)


@pytest.mark.parametrize("buf", ["", "80", "ffffffff", "ffffffffff01", "ffffffff1f"])
def test_bad_varints_are_corrupt(buf):
    with pytest.raises(CorruptRecordError):
        decode_varint(bytes.fromhex(buf), 0)


@given(st.integers(-(2**63), 2**63 - 1), st.binary(max_size=3))
def test_varlong_round_trip(value, tail):
    enc = encode_varlong(value)
    assert decode_varlong(b"\x07" + enc + tail, 1) == (value, 1 + len(enc))
    assert len(enc) == varint_size(value)
    if -(2**31) <= value < 2**31:
        assert encode_varint(value) == enc and decode_varint(enc) == (value, len(enc))


# --- decompression bombs: bounded memory ------------------------------------------

_BOMB_SCRIPT = textwrap.dedent("""
    import gc, json, re, resource, sys
    from protocol.records import CorruptRecordError, decode_batch, encode_batch, Record

    def peak_reset():
        # Linux: writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS,
        # so the growth of one call is measured exactly. Elsewhere fall back to the
        # process-wide high-water mark, which can only under-report.
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return status("VmRSS")
        except OSError:
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def status(field):
        with open("/proc/self/status") as f:
            return int(re.search(field + r":\\s+(\\d+)", f.read()).group(1)) * 1024

    def peak():
        try:
            return status("VmHWM")
        except OSError:
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    path, codec = sys.argv[1], int(sys.argv[2])
    batch = open(path, "rb").read()
    # Warm up the codec with a small batch so one-time setup is not counted.
    decode_batch(encode_batch([Record(0, 0, b"k", b"v" * 5000)], compression=codec))
    gc.collect()
    before = peak_reset()
    try:
        decode_batch(batch, max_decompressed=1 << 20)
        refused = False
    except CorruptRecordError:
        refused = True
    bounded = peak() - before
    # Control: the same bomb with room to expand must show up in the measurement.
    before = peak_reset()
    try:
        decode_batch(batch, max_decompressed=200 << 20)
    except CorruptRecordError:
        pass  # the zeros are not records; the point is the allocation
    unbounded = peak() - before
    print(json.dumps({"refused": refused, "bounded": bounded, "unbounded": unbounded}))
""")


@pytest.mark.parametrize("name", list(BOMBS))
def test_bomb_in_a_batch_is_refused_within_twice_the_limit(name, tmp_path):
    codec, build = BOMBS[name]
    path = tmp_path / "bomb.batch"
    path.write_bytes(wrap_payload(build(), attributes=codec))
    proc = subprocess.run([sys.executable, "-c", _BOMB_SCRIPT, str(path), str(int(codec))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["refused"]
    # Peak RSS growth: at most 2x the 1 MiB limit plus 1 MiB for decoder state.
    assert result["bounded"] < 3 * MiB, result
    assert result["unbounded"] > 50 * MiB, result  # the measurement sees the codec's memory


def _filled(n: int) -> bytes:
    return bytes(i % 251 for i in range(n))


# sizes matter here, not contents: lengths of every varint width, cheap to generate
_optional_bytes = st.one_of(st.none(), st.integers(0, 300).map(_filled),
                            st.integers(8000, 9000).map(_filled))


@given(st.lists(st.tuples(_optional_bytes, _optional_bytes), min_size=1, max_size=20))
@settings(max_examples=60, deadline=None)
def test_keys_and_values_of_every_varint_width_round_trip(fields):
    # lengths of one, two and three varint bytes, and null (-1), through the inline paths
    recs = [Record(i, 1_700_000_000_000 + i, k, v, []) for i, (k, v) in enumerate(fields)]
    _, decoded = decode_batch(encode_batch(recs))
    assert [(r.key, r.value) for r in decoded] == fields
