"""protocol.records' fast paths against the reference code: encode_producer_batch (the
producer's encoder) gives byte for byte what encode_batch gives for the same records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codecs import Codec
from protocol.records import (
    UnsupportedCodecError, decode_batch, encode_batch, encode_producer_batch,
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
def test_same_bytes_with_every_codec_and_the_producer_fields(codec):
    records = [(TS + i % 7, None if i % 3 else b"k%d" % i, b"v" * (i % 300),
                [("h", b"1")] if i % 5 == 0 else []) for i in range(300)]
    kwargs = dict(compression=codec, producer_id=12345678901, producer_epoch=3,
                  base_sequence=2**31 - 10)
    assert encode_producer_batch(records, **kwargs) == reference(records, **kwargs)


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
