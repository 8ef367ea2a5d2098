"""protocol.records' fast paths against the reference code: encode_producer_batch (the
producer's encoder) gives byte for byte what encode_batch gives for the same records, and
decode_rows (the consumer's decoder) gives what decode_batches gives, as tuples."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codecs import Codec
from typing import NamedTuple

from protocol.records import (
    BATCH_OVERHEAD, LOG_APPEND_TIME, CorruptRecordError, Record, UnsupportedCodecError, decode_batch,
    decode_batches, decode_rows, encode_batch, encode_producer_batch, refresh_crc,
)

TS = 1_700_000_000_000


def reference(records, **kwargs) -> bytes:
    return encode_batch([(i, *r) for i, r in enumerate(records)], **kwargs)


nullable = st.one_of(st.none(), st.binary(max_size=40),
                     st.binary(min_size=1020, max_size=1030),  # lengths past the table
                     st.binary(min_size=8200, max_size=8200))  # a three-byte varint
header_key = st.one_of(st.text(max_size=8), st.binary(max_size=8))
headers = st.lists(st.tuples(header_key, st.one_of(st.none(), st.binary(max_size=8))),
                   max_size=3)
timestamps = st.one_of(st.integers(TS - 10, TS + 10),  # small deltas either way
                       st.integers(0, 2**62), st.just(-1))
record = st.tuples(timestamps, nullable, nullable, headers)


@settings(max_examples=200, deadline=None)
@given(st.lists(record, min_size=1, max_size=6))
def test_same_bytes_as_encode_batch(records):
    assert encode_producer_batch(records) == reference(records)


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("is_transactional", [False, True])
def test_same_bytes_with_every_codec_and_the_producer_fields(codec, is_transactional):
    records = [(TS + i % 7, None if i % 3 else b"k%d" % i, b"v" * (i % 300),
                [("h", b"1")] if i % 5 == 0 else []) for i in range(300)]
    kwargs = dict(compression=codec, producer_id=12345678901, producer_epoch=3,
                  base_sequence=2**31 - 10, is_transactional=is_transactional)
    batch = encode_producer_batch(records, **kwargs)
    assert batch == reference(records, **kwargs)
    assert decode_batch(batch)[0].is_transactional is is_transactional


def test_offset_deltas_past_the_table():
    """More than 1024 records: offset deltas whose zigzag needs more than the table."""
    records = [(TS, None, b"x" * 100, []) for _ in range(3000)]
    batch = encode_producer_batch(records)
    assert batch == reference(records)
    header, decoded = decode_batch(batch)
    assert header.records_count == 3000 and [r.offset for r in decoded] == list(range(3000))


def test_null_key_and_value_and_headers_round_trip():
    records = [(TS, None, None, [("a", None), (b"\xff", b"")]), (TS - 1, b"", b"", [])]
    _, decoded = decode_batch(encode_producer_batch(records))
    assert [(r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (TS, None, None, [("a", None), ("\udcff", b"")]), (TS - 1, b"", b"", [])]


def test_refuses_what_the_reference_refuses():
    with pytest.raises(ValueError):
        encode_producer_batch([])
    with pytest.raises(ValueError):
        encode_producer_batch([(2**62, None, b"v", []), (-(2**62) - 10, None, b"v", [])])
    with pytest.raises(UnsupportedCodecError):
        encode_producer_batch([(TS, None, b"v", [])], compression=9)


# -- decode_rows ---------------------------------------------------------------------------

class Row(NamedTuple):  # the consumer's record layout
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list


def reference_rows(buf, min_offset=0):
    return [Row("t", 7, r.offset, r.timestamp, h.timestamp_type, r.key, r.value, r.headers or ())
            for h, recs in decode_batches(buf) if not h.is_control
            for r in recs if r.offset >= min_offset]


def rows(buf, min_offset=0):
    got, next_offset = decode_rows(buf, Row, "t", 7, min_offset)
    assert all(type(r) is Row for r in got)
    return got, next_offset


@settings(max_examples=200, deadline=None)
@given(st.lists(record, min_size=1, max_size=6), st.sampled_from([1, 64, 9000, 2**20]))
def test_rows_as_decode_batches(records, gap):
    """Null keys and values, headers, lengths and timestamp deltas of one, two and more
    varint bytes; offset deltas past two bytes with a gap (a compacted batch)."""
    offsets = [100 + i * gap for i in range(len(records))]
    buf = encode_batch([Record(o, *r) for o, r in zip(offsets, records)], base_offset=100)
    got, next_offset = rows(buf)
    assert got == reference_rows(buf) and next_offset == offsets[-1] + 1


@pytest.mark.parametrize("codec", list(Codec))
def test_rows_of_several_batches_from_a_position_inside_the_first(codec):
    first = encode_batch([(i, TS + i, None, b"a%d" % i, []) for i in range(10)],
                         compression=codec)
    second = encode_batch([(i, TS, b"k", b"b", [("h", b"1")]) for i in range(10, 13)],
                          base_offset=10, compression=codec, timestamp_type=LOG_APPEND_TIME)
    buf = first + second + second[:20]  # an incomplete batch at the end is left for later
    got, next_offset = rows(buf, min_offset=4)
    assert [r.offset for r in got] == list(range(4, 13)) and next_offset == 13
    assert got == reference_rows(buf, 4)
    assert {r.timestamp_type for r in got} == {0, 1}


def test_control_batches_move_the_next_offset_but_give_no_rows():
    data = encode_batch([(0, TS, None, b"v", [])])
    marker = encode_batch([(1, TS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])],
                          base_offset=1, is_control=True)
    got, next_offset = rows(data + marker)
    assert [r.offset for r in got] == [0] and next_offset == 2
    assert rows(marker, min_offset=1) == ([], 2)
    assert rows(b"", min_offset=5) == ([], 5)


@pytest.mark.parametrize("cut", [1, 3, 20])
def test_rows_of_a_record_not_ending_where_its_length_says_are_corrupt(cut):
    """A record length that claims more than its fields take is refused."""
    good = encode_batch([(0, TS, b"key", b"value", [])])
    bad = bytearray(good)
    bad[BATCH_OVERHEAD] += 2 * cut  # the record's length (zigzag, one byte), `cut` more
    refresh_crc(bad)
    with pytest.raises(CorruptRecordError):
        decode_rows(bytes(bad), Row, "t", 0)
