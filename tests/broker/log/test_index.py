"""OffsetIndex / TimeIndex: Kafka's byte formats, floor lookups, truncation, sanity checks."""

import struct

import pytest

from broker.log.index import CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_format_and_lookup(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(path, 100)
    for off, pos in [(105, 4100), (112, 8300), (130, 12500)]:
        idx.append(off, pos)
    idx.close()
    raw = open(path, "rb").read()
    # Relative offsets and positions, big-endian int32 pairs: what kafka-dump-log reads.
    assert raw == struct.pack(">iiiiii", 5, 4100, 12, 8300, 30, 12500)

    idx = OffsetIndex(path, 100)
    idx.load(log_size=20000)
    assert idx.lookup(99) == (100, 0)      # before the first entry: segment start
    assert idx.lookup(104) == (100, 0)
    assert idx.lookup(105) == (105, 4100)
    assert idx.lookup(111) == (105, 4100)
    assert idx.lookup(112) == (112, 8300)
    assert idx.lookup(10**9) == (130, 12500)


def test_offset_index_rejects_out_of_order_append(tmp_path):
    idx = OffsetIndex(str(tmp_path / "a.index"), 0)
    idx.append(10, 100)
    with pytest.raises(ValueError):
        idx.append(10, 200)
    with pytest.raises(ValueError):
        idx.append(11, 100)


def test_offset_index_truncate(tmp_path):
    path = str(tmp_path / "a.index")
    idx = OffsetIndex(path, 0)
    for i in range(1, 6):
        idx.append(i * 10, i * 1000)
    idx.truncate_to(30)               # entries with offset >= 30 go
    assert len(idx) == 2 and idx.lookup(100) == (20, 2000)
    idx.truncate_to_position(2000)    # entries pointing at/after position 2000 go
    assert len(idx) == 1
    idx.close()
    assert len(open(path, "rb").read()) == 8


def test_offset_index_full(tmp_path):
    idx = OffsetIndex(str(tmp_path / "a.index"), 0, max_index_size=16)
    idx.append(1, 10)
    idx.append(2, 20)
    assert idx.is_full
    with pytest.raises(ValueError):
        idx.append(3, 30)


@pytest.mark.parametrize("junk", [b"\x01", b"\x00\x00\x00\x05\x00\x00\x00\x01",
                                  struct.pack(">ii", 50, 999_999)])
def test_offset_index_sanity_check(tmp_path, junk):
    path = str(tmp_path / "a.index")
    idx = OffsetIndex(path, 0)
    idx.append(10, 100)
    idx.close()
    with open(path, "ab") as f:
        f.write(junk)  # torn entry / going backwards / pointing past the log
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0).load(log_size=5000)


def test_time_index_only_new_maxima(tmp_path):
    path = str(tmp_path / "a.timeindex")
    idx = TimeIndex(path, 1000)
    idx.maybe_append(500, 1001)
    idx.maybe_append(500, 1005)   # not a new maximum: ignored
    idx.maybe_append(400, 1006)   # ignored
    idx.maybe_append(700, 1010)
    assert len(idx) == 2
    idx.close()
    assert open(path, "rb").read() == struct.pack(">qiqi", 500, 1, 700, 10)
    idx = TimeIndex(path, 1000)
    idx.load()
    assert idx.lookup(100) == (-1, 1000)
    assert idx.lookup(500) == (500, 1001)
    assert idx.lookup(699) == (500, 1001)
    assert idx.lookup(10**12) == (700, 1010)
    assert idx.last_entry() == (700, 1010)
    idx.truncate_to(1010)
    assert idx.last_entry() == (500, 1001)


def test_time_index_sanity_check(tmp_path):
    path = str(tmp_path / "a.timeindex")
    idx = TimeIndex(path, 0)
    idx.maybe_append(500, 1)
    idx.close()
    with open(path, "ab") as f:
        f.write(struct.pack(">qi", 400, 2))  # timestamp going backwards
    with pytest.raises(CorruptIndexError):
        TimeIndex(path, 0).load()
