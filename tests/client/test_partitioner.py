"""client.partitioner against Java's Utils.murmur2 and kafka-python's murmur2."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from client.partitioner import murmur2, partition_for_key, to_positive

# Computed with Java 17 by a throwaway program holding a verbatim copy of
# org.apache.kafka.common.utils.Utils.murmur2 (apache/kafka clients/.../utils/Utils.java) and
# toPositive(n) = n & 0x7fffffff; not kept in the repository.
# (key bytes, Utils.murmur2(key), toPositive(h) % 3, % 10, % 100)
JAVA_VALUES = [
    (bytes.fromhex(""), 275646681, 0, 1, 81),
    (bytes.fromhex("61"), -1563381124, 1, 4, 24),  # a
    (bytes.fromhex("6162"), 316155434, 2, 4, 34),  # ab
    (bytes.fromhex("616263"), 479470107, 0, 7, 7),  # abc
    (bytes.fromhex("61626364"), -1323649548, 2, 0, 0),  # abcd
    (bytes.fromhex("6162636465"), 461995741, 1, 1, 41),  # abcde
    (bytes.fromhex("666f6f"), 597841616, 2, 6, 16),  # foo
    (bytes.fromhex("3231"), -973932308, 0, 0, 40),  # 21
    (bytes.fromhex("666f6f626172"), -790332482, 0, 6, 66),  # foobar
    (b"a-little-bit-long-string", -985981536, 2, 2, 12),
    (b"a-little-bit-longer-string", -1486304829, 2, 9, 19),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 2, 7, 77),
    (bytes.fromhex("757365722d3432"), 1459644460, 1, 0, 60),  # user-42
    (bytes.fromhex("68c3a96c6c6f2077c3b6726c64"), 439213890, 0, 0, 90),  # "héllo wörld" UTF-8
    (bytes.fromhex("e697a5e69cace8aa9e"), 1431860170, 1, 0, 70),  # "日本語" UTF-8
    (bytes.fromhex("ff"), -311467685, 0, 3, 63),
    (bytes.fromhex("ffff"), -1642832928, 2, 0, 20),
    (bytes.fromhex("ffffff"), 1548199422, 0, 2, 22),
    (bytes.fromhex("ffffffff"), 644171429, 2, 9, 29),
    (bytes.fromhex("80000000"), -65415266, 0, 2, 82),
    (bytes.fromhex("00"), 375494588, 2, 8, 88),
    (bytes.fromhex("0000000000"), 263274959, 2, 9, 59),
    (bytes.fromhex("fffefdfcfbfaf9f8f7"), -248068958, 0, 0, 90),
    (bytes.fromhex("7f80ff00017e81"), 1346465242, 1, 2, 42),
]


@pytest.mark.parametrize("key, java_hash, p3, p10, p100", JAVA_VALUES)
def test_murmur2_matches_java(key, java_hash, p3, p10, p100):
    assert murmur2(key) == java_hash
    assert [partition_for_key(key, n) for n in (3, 10, 100)] == [p3, p10, p100]


def test_to_positive_masks_the_sign_bit_rather_than_taking_abs():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(-790332482) == 1357151166  # abs() would give 790332482
    assert partition_for_key(b"foobar", 7) == 1357151166 % 7


def test_partition_count_must_be_positive():
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=200))
def test_murmur2_matches_kafka_python(key):
    ours = murmur2(key)
    assert -(2**31) <= ours < 2**31
    assert ours & 0xFFFFFFFF == kafka_python_murmur2(key)  # kafka-python returns it unsigned


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=10_000))
def test_partition_for_key_matches_kafka_python(key, partitions):
    # kafka.partitioner.default.DefaultPartitioner: (murmur2(key) & 0x7fffffff) % len(all)
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
    assert partition_for_key(key, partitions) == expected
