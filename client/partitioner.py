"""The default partitioner for keyed records, byte for byte Java's.

Owns: `murmur2(data)` (Kafka's Utils.murmur2: the same signed 32-bit result as Java) and
`partition_for_key(key, num_partitions)` = toPositive(murmur2(key)) % num_partitions, as
Java's BuiltInPartitioner.partitionForKey (docs/PROTOCOL.md §7). toPositive is `& 0x7fffffff`, a
mask and not abs(). So our producer, a Java producer, kafka-python and aiokafka place the same
key on the same partition; librdkafka does too with partitioner=murmur2_random (its default,
consistent_random, hashes with CRC32 instead).

    murmur2(b"foobar")              # -> -790332482, as Java's Utils.murmur2
    partition_for_key(b"foobar", 3) # -> (-790332482 & 0x7fffffff) % 3 == 0

Records without a key are the producer's business (sticky or round robin), not this
module's.
"""

from __future__ import annotations

__all__ = ["murmur2", "partition_for_key", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 of `data` as Java's Utils.murmur2 computes it: int32 arithmetic, 4-byte
    little-endian blocks, the 1-3 byte tail XORed in, then the final mix. Returns a signed
    32-bit int, as Java's `int` (kafka-python's murmur2 returns the same bits unsigned)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java's Utils.toPositive: clear the sign bit (not abs: -1 -> 2147483647)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for a non-null key."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
