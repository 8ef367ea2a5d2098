"""protocol.batch_walk: where a walk over batch headers stops and why, over a buffer and
through a read function alike."""

from __future__ import annotations

import struct

import pytest

from protocol.batch_walk import CORRUPT, END, TORN, BatchWalk, WalkStop
from protocol.codecs import Codec
from protocol.records import (BATCH_OVERHEAD, Record, batch_crc_ok, encode_batch,
                              parse_batch_header)

TS = 1_700_000_000_000


def batches() -> list[bytes]:
    return [encode_batch([Record(o, TS + o, b"k", b"v" * (10 + 50 * o), [])
                          for o in range(base, base + 2)], base_offset=base, compression=codec)
            for base, codec in ((0, Codec.NONE), (2, Codec.GZIP), (4, Codec.NONE))]


def reader(data: bytes, calls: list | None = None):
    def read(position: int, size: int) -> bytes:
        if calls is not None:
            calls.append((position, size))
        return data[position:position + size]
    return read


def walked(walk: BatchWalk) -> tuple[list[tuple[int, int]], WalkStop]:
    return [(pos, h.base_offset) for pos, h in walk], walk.stop


def test_a_whole_run_ends_at_the_end():
    data = b"".join(batches())
    got, stop = walked(BatchWalk(data))
    sizes = [len(b) for b in batches()]
    assert got == [(0, 0), (sizes[0], 2), (sizes[0] + sizes[1], 4)]
    assert stop == WalkStop(len(data), END)


def test_every_cut_stops_at_the_last_whole_batch_and_says_how_it_is_torn():
    one, two, _ = batches()
    data = one + two
    for n in range(len(data) + 1):
        got, stop = walked(BatchWalk(data[:n]))
        whole = len(one) if n >= len(one) else 0
        expected = ([0] if whole else []) + ([len(one)] if n == len(data) else [])
        assert [pos for pos, _ in got] == expected
        if n in (0, len(one), len(data)):
            assert stop.reason == END and stop.position == n
            continue
        assert stop.reason == TORN and stop.position == whole, n
        left = n - whole
        assert stop.batch_size == (None if left < BATCH_OVERHEAD else len(data[whole:]) if whole
                                   else len(one)), n
        assert stop.base_offset == (None if left < BATCH_OVERHEAD else (2 if whole else 0))


@pytest.mark.parametrize("field, value, problem, steppable", [
    (16, b"\x07", "magic 7, expected 2", True),
    (8, struct.pack(">i", 7), "batch length 7 is below 49", False),
    (23, struct.pack(">i", -3), "lastOffsetDelta -3", True),
])
def test_a_corrupt_header_stops_the_walk_and_says_why(field, value, problem, steppable):
    one, two, three = batches()
    bad = bytearray(two)
    bad[field:field + len(value)] = value
    data = one + bytes(bad) + three
    got, stop = walked(BatchWalk(data))
    assert got == [(0, 0)]
    assert stop == WalkStop(len(one), CORRUPT, len(two) if steppable else None, 2, problem)
    if steppable:  # a caller may step over it and walk on
        assert walked(BatchWalk(data, len(one) + stop.batch_size))[0] == [(len(one) + len(two), 4)]


def test_a_window_of_the_buffer():
    one, two, three = batches()
    data = one + two + three
    got, stop = walked(BatchWalk(data, len(one), len(one) + len(two) + 70))
    assert got == [(len(one), 2)]
    assert stop == WalkStop(len(one) + len(two), TORN, len(three), 4)
    assert walked(BatchWalk(data, 0, 10**9))[1] == WalkStop(len(data), END)


@pytest.mark.parametrize("read_size", [1, BATCH_OVERHEAD, 100, 1 << 16])
def test_a_read_function_walks_like_the_buffer(read_size):
    one, two, three = batches()
    bad = bytearray(three)
    bad[16] = 0
    for data in (one + two + three, one + two + three[:70], one + two + bytes(bad), one[:30]):
        for end in (len(data), len(data) - 1, len(one)):
            calls: list = []
            through_read = walked(BatchWalk(reader(data, calls), 0, end, read_size=read_size))
            assert through_read == walked(BatchWalk(data, 0, end))
            assert all(pos + size <= end for pos, size in calls)  # never past `end`


def test_headers_come_from_one_chunk_and_small_reads_cost_one_read_per_batch():
    data = b"".join(batches())
    calls: list = []
    assert len(list(BatchWalk(reader(data, calls), 0, len(data)))) == 3
    assert calls == [(0, len(data))]
    calls.clear()
    assert len(list(BatchWalk(reader(data, calls), 0, len(data), read_size=BATCH_OVERHEAD))) == 3
    assert [size for _, size in calls] == [BATCH_OVERHEAD] * 3


def test_data_that_ends_before_end_is_a_torn_tail():
    one, two, _ = batches()
    data = one + two
    got, stop = walked(BatchWalk(reader(data[:len(one) + 20]), 0, len(data)))
    assert got == [(0, 0)]
    assert stop == WalkStop(len(one), TORN)


@pytest.mark.parametrize("read_size", [BATCH_OVERHEAD, 100, 1 << 16])
def test_batch_gives_the_whole_batch_and_the_walk_goes_on(read_size):
    expected = batches()
    data = b"".join(expected)
    for source, end in ((data, None), (reader(data), len(data))):
        walk = BatchWalk(source, 0, end, read_size=read_size)
        got = []
        for pos, header in walk:
            batch = walk.batch(pos, header)
            assert batch_crc_ok(batch, 0, header)
            got.append(bytes(batch))
        assert got == expected and walk.stop == WalkStop(len(data), END)


def test_batch_is_short_when_the_data_ends_early():
    one, two, _ = batches()
    data = one + two
    short = data[:-5]
    walk = BatchWalk(reader(short), 0, len(data), read_size=BATCH_OVERHEAD)
    got = [len(walk.batch(pos, h)) for pos, h in walk]
    assert got == [len(one), len(two) - 5]


def test_records_are_not_looked_at():
    one = bytearray(batches()[0])
    one[BATCH_OVERHEAD:] = b"\xff" * (len(one) - BATCH_OVERHEAD)  # garbage records, bad CRC
    (pos, header), = BatchWalk(bytes(one))
    assert header == parse_batch_header(bytes(one)) and pos == 0


def test_a_read_function_needs_an_end():
    with pytest.raises(ValueError):
        BatchWalk(reader(b""))
