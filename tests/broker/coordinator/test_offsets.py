"""The committed-offset store: records then replay, Kafka's record bytes, expiry, group hashing.

Driven directly: no broker, no clock (times are plain integers), no sleeping. Expected
record bytes are built by hand with struct from docs/PROTOCOL.md §4, not with our encoder.
"""

from __future__ import annotations

import struct

import pytest

from broker.coordinator.offsets import (
    CommittedOffset,
    OffsetRecord,
    OffsetStore,
    java_string_hash,
    partition_of,
)
from protocol.errors import DecodeError, ErrorCode
from protocol.messages import offsets_topic

DAY = 24 * 3600 * 1000
RETENTION = 7 * DAY


# -- hand-built Kafka bytes (docs/PROTOCOL.md §4) ----------------------------------------

def _str(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def kafka_offset_key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    return struct.pack(">h", version) + _str(group) + _str(topic) + struct.pack(">i", partition)


def kafka_value_v3(offset: int, epoch: int, metadata: str, commit_ts: int) -> bytes:
    return (struct.pack(">hqi", 3, offset, epoch) + _str(metadata)
            + struct.pack(">q", commit_ts))


def kafka_value_v1(offset: int, metadata: str, commit_ts: int, expire_ts: int) -> bytes:
    return struct.pack(">hq", 1, offset) + _str(metadata) + struct.pack(">qq", commit_ts, expire_ts)


def kafka_value_v0(offset: int, metadata: str, commit_ts: int) -> bytes:
    return struct.pack(">hq", 0, offset) + _str(metadata) + struct.pack(">q", commit_ts)


def apply(store: OffsetStore, records: list[OffsetRecord]) -> None:
    for r in records:
        store.replay(r.key, r.value)


def commit(store: OffsetStore, group: str, offsets, now_ms: int) -> dict:
    records, errors = store.prepare_commit(group, offsets, now_ms)
    apply(store, records)
    return errors


# -- commit -> records -> replay -> fetch ------------------------------------------------

def test_commit_records_replay_fetch():
    store = OffsetStore()
    records, errors = store.prepare_commit(
        "g", [("t", 0, 42, 5, "m"), ("t", 1, 7, -1, None)], now_ms=1000)
    assert errors == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE}
    assert len(records) == 2
    apply(store, records)
    assert store.fetch("g", [("t", 0), ("t", 1), ("t", 2)]) == {
        ("t", 0): CommittedOffset(42, 5, "m", 1000),
        ("t", 1): CommittedOffset(7, -1, "", 1000),  # null metadata is stored as ""
        ("t", 2): None,
    }
    assert store.fetch("g", None) == {
        ("t", 0): CommittedOffset(42, 5, "m", 1000),
        ("t", 1): CommittedOffset(7, -1, "", 1000),
    }
    assert store.fetch("other", [("t", 0)]) == {("t", 0): None}
    assert store.fetch("other", None) == {}
    assert store.groups() == {"g"}
    assert store.has_offsets("g") and not store.has_offsets("other")


def test_state_is_unchanged_until_replay():
    store = OffsetStore()
    commit(store, "g", [("t", 0, 1, -1, "")], now_ms=10)
    records, _ = store.prepare_commit("g", [("t", 0, 2, -1, ""), ("u", 0, 3, -1, "")], now_ms=20)
    assert store.fetch("g", None) == {("t", 0): CommittedOffset(1, -1, "", 10)}
    tombstones = store.delete_group("g")
    assert store.fetch("g", None) == {("t", 0): CommittedOffset(1, -1, "", 10)}
    expired = store.expire(10 * RETENTION, RETENTION, lambda g: True, lambda g, t: False)
    assert _tombstoned(expired) == [("g", "t", 0)]
    assert store.fetch("g", None) == {("t", 0): CommittedOffset(1, -1, "", 10)}
    apply(store, records)
    assert store.fetch("g", None) == {("t", 0): CommittedOffset(2, -1, "", 20),
                                      ("u", 0): CommittedOffset(3, -1, "", 20)}
    apply(store, tombstones)  # prepared before the last commit: covers only ("t", 0)
    assert store.fetch("g", None) == {("u", 0): CommittedOffset(3, -1, "", 20)}


def test_overwrite_keeps_the_latest_commit():
    store = OffsetStore()
    commit(store, "g", [("t", 0, 1, 1, "a")], now_ms=1)
    commit(store, "g", [("t", 0, 9, 2, "b")], now_ms=2)
    assert store.fetch("g", [("t", 0)]) == {("t", 0): CommittedOffset(9, 2, "b", 2)}


def test_same_partition_twice_in_one_commit_later_wins():
    store = OffsetStore()
    records, errors = store.prepare_commit("g", [("t", 0, 1, -1, ""), ("t", 0, 2, -1, "")], 5)
    assert len(records) == 2 and errors == {("t", 0): ErrorCode.NONE}
    apply(store, records)
    assert store.fetch("g", [("t", 0)])[("t", 0)].offset == 2


def test_negative_offset_is_accepted_as_kafka_does():
    """Kafka's broker does not check the offset; -1 reads back as 'no committed offset'."""
    store = OffsetStore()
    errors = commit(store, "g", [("t", 0, -1, -1, "")], now_ms=3)
    assert errors == {("t", 0): ErrorCode.NONE}
    assert store.fetch("g", [("t", 0)]) == {("t", 0): CommittedOffset(-1, -1, "", 3)}


# -- metadata size -----------------------------------------------------------------------

def test_metadata_too_large_fails_only_that_partition():
    store = OffsetStore(max_metadata_size=10)
    records, errors = store.prepare_commit(
        "g", [("t", 0, 1, -1, "x" * 11), ("t", 1, 2, -1, "x" * 10), ("u", 0, 3, -1, None)], 7)
    assert errors == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE,
                      ("t", 1): ErrorCode.NONE, ("u", 0): ErrorCode.NONE}
    assert [offsets_topic.decode_key(r.key) for r in records] == [
        offsets_topic.OffsetKey("g", "t", 1), offsets_topic.OffsetKey("g", "u", 0)]
    apply(store, records)
    assert store.fetch("g", [("t", 0)]) == {("t", 0): None}


def test_metadata_size_counts_java_chars_not_utf8_bytes():
    """Kafka checks metadata.length(): UTF-16 code units. 'é' is 1 unit (2 UTF-8 bytes),
    an emoji is 2 units (4 UTF-8 bytes)."""
    store = OffsetStore(max_metadata_size=4)
    _, errors = store.prepare_commit(
        "g", [("t", 0, 1, -1, "éééé"), ("t", 1, 1, -1, "😀😀"), ("t", 2, 1, -1, "😀😀x")], 0)
    assert errors == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE,
                      ("t", 2): ErrorCode.OFFSET_METADATA_TOO_LARGE}


def test_default_metadata_limit_is_4096():
    store = OffsetStore()
    _, errors = store.prepare_commit("g", [("t", 0, 1, -1, "x" * 4096),
                                           ("t", 1, 1, -1, "x" * 4097)], 0)
    assert errors == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE}


# -- tombstones --------------------------------------------------------------------------

def test_delete_offsets_writes_tombstones_for_committed_partitions_only():
    store = OffsetStore()
    commit(store, "g", [("t", 0, 1, -1, ""), ("t", 1, 2, -1, ""), ("u", 0, 3, -1, "")], 1)
    tombstones = store.delete_offsets("g", [("t", 0), ("t", 0), ("t", 9), ("u", 0)])
    assert tombstones == [OffsetRecord(kafka_offset_key("g", "t", 0), None),
                          OffsetRecord(kafka_offset_key("g", "u", 0), None)]
    apply(store, tombstones)
    assert store.fetch("g", None) == {("t", 1): CommittedOffset(2, -1, "", 1)}
    assert store.delete_offsets("nobody", [("t", 0)]) == []


def test_delete_group_tombstones_every_offset_and_forgets_the_group():
    store = OffsetStore()
    commit(store, "g", [("u", 0, 3, -1, ""), ("t", 1, 2, -1, ""), ("t", 0, 1, -1, "")], 1)
    commit(store, "h", [("t", 0, 5, -1, "")], 1)
    tombstones = store.delete_group("g")
    assert tombstones == [OffsetRecord(kafka_offset_key("g", t, p), None)
                          for t, p in [("t", 0), ("t", 1), ("u", 0)]]
    apply(store, tombstones)
    assert store.groups() == {"h"}
    assert not store.has_offsets("g")
    assert store.fetch("g", None) == {}
    assert store.delete_group("g") == []


def test_tombstone_for_unknown_offset_is_harmless():
    store = OffsetStore()
    store.replay(kafka_offset_key("g", "t", 0), None)
    assert store.groups() == set()


# -- load = replay -----------------------------------------------------------------------

def _history() -> list[OffsetRecord]:
    """A __consumer_offsets partition as the log would hold it, in order."""
    s = OffsetStore()  # only used to build records; its cache follows along
    log: list[OffsetRecord] = []

    def step(records):
        log.extend(records)
        apply(s, records)

    step(s.prepare_commit("g", [("t", 0, 10, 1, "a"), ("t", 1, 20, 1, "b")], 100)[0])
    step(s.prepare_commit("h", [("t", 0, 5, -1, None)], 110)[0])
    step([OffsetRecord(offsets_topic.encode_group_key("g"), b"\x00\x03garbage-the-group-code-owns")])
    step(s.prepare_commit("g", [("t", 0, 11, 2, "c")], 120)[0])           # overwrite
    step(s.delete_offsets("g", [("t", 1)]))                              # OffsetDelete
    step([OffsetRecord(struct.pack(">h", 3) + _str("g"), b"\x00\x00anything")])  # KIP-848
    step(s.delete_group("h"))                                            # DeleteGroups
    step(s.prepare_commit("h", [("u", 3, 1, -1, "again")], 130)[0])      # group reused
    return log


def test_replaying_the_log_twice_from_scratch_gives_the_same_state():
    log = _history()
    first, second = OffsetStore(), OffsetStore()
    apply(first, log)
    apply(second, log)
    expected = {
        "g": {("t", 0): CommittedOffset(11, 2, "c", 120)},
        "h": {("u", 3): CommittedOffset(1, -1, "again", 130)},
    }
    for store in (first, second):
        assert store.groups() == {"g", "h"}
        assert {g: store.fetch(g, None) for g in store.groups()} == expected


def test_replay_is_idempotent_for_a_reloaded_partition():
    """Loading on leadership again replays records the cache already holds."""
    log = _history()
    store = OffsetStore()
    apply(store, log)
    apply(store, log)
    assert store.fetch("g", None) == {("t", 0): CommittedOffset(11, 2, "c", 120)}
    assert store.fetch("h", None) == {("u", 3): CommittedOffset(1, -1, "again", 130)}


# -- record types that are not ours ------------------------------------------------------

@pytest.mark.parametrize("key_type", [3, 4, 5, 6, 7, 8, 9, 42])
def test_kip848_and_unknown_record_types_are_skipped(key_type):
    store = OffsetStore()
    key = struct.pack(">h", key_type) + _str("g") + _str("member")
    store.replay(key, struct.pack(">hi", 0, 7) + b"\x00")
    store.replay(key, None)
    assert store.groups() == set()


def test_group_metadata_records_are_left_to_the_group_code():
    store = OffsetStore()
    commit(store, "g", [("t", 0, 1, -1, "")], 1)
    key = struct.pack(">h", 2) + _str("g")
    store.replay(key, b"\x00\x03 not parsed here")
    store.replay(key, None)  # a group tombstone does not delete offsets: they have their own
    assert store.fetch("g", None) == {("t", 0): CommittedOffset(1, -1, "", 1)}


def test_a_corrupt_offset_record_is_reported_not_skipped():
    store = OffsetStore()
    with pytest.raises(DecodeError):
        store.replay(kafka_offset_key("g", "t", 0), kafka_value_v3(1, 1, "", 1) + b"x")
    with pytest.raises(DecodeError):
        store.replay(kafka_offset_key("g", "t", 0), struct.pack(">h", 9) + b"\x00" * 24)
    assert store.groups() == set()


# -- byte compatibility with Kafka -------------------------------------------------------

def test_written_records_are_key_v1_and_value_v3_byte_for_byte():
    store = OffsetStore()
    records, _ = store.prepare_commit("my-group", [("orders", 7, 12345, 3, "meta")], 1_700_000_000_000)
    assert records == [OffsetRecord(
        kafka_offset_key("my-group", "orders", 7, version=1),
        kafka_value_v3(12345, 3, "meta", 1_700_000_000_000),
    )]
    assert records[0].key[:2] == b"\x00\x01" and records[0].value[:2] == b"\x00\x03"


def test_tombstone_key_is_key_v1():
    store = OffsetStore()
    commit(store, "g", [("t", 2, 1, -1, "")], 1)
    assert store.delete_group("g") == [OffsetRecord(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x02", None)]


def test_reads_a_kafka_v1_value_with_expire_timestamp():
    store = OffsetStore()
    store.replay(kafka_offset_key("g", "t", 0, version=0), kafka_value_v1(77, "old", 1000, 5000))
    assert store.fetch("g", [("t", 0)]) == {
        ("t", 0): CommittedOffset(77, -1, "old", 1000, expire_timestamp_ms=5000)}


def test_reads_kafka_v3_and_v0_values_and_both_key_versions():
    store = OffsetStore()
    store.replay(kafka_offset_key("g", "t", 0, version=1), kafka_value_v3(8, 4, "ü", 2000))
    store.replay(kafka_offset_key("g", "t", 1, version=0), kafka_value_v0(9, "", 3000))
    assert store.fetch("g", None) == {
        ("t", 0): CommittedOffset(8, 4, "ü", 2000),
        ("t", 1): CommittedOffset(9, -1, "", 3000),
    }
    # key versions 0 and 1 name the same offset: a v1 tombstone deletes a v0 commit
    store.replay(kafka_offset_key("g", "t", 1, version=1), None)
    assert store.fetch("g", [("t", 1)]) == {("t", 1): None}


# -- expiry (KIP-211) --------------------------------------------------------------------

def _tombstoned(records: list[OffsetRecord]) -> list[tuple[str, str, int]]:
    assert all(r.value is None for r in records)
    return [(k.group, k.topic, k.partition)
            for k in (offsets_topic.decode_key(r.key) for r in records)]


def test_empty_group_offsets_expire_after_retention_from_the_commit():
    store = OffsetStore()
    commit(store, "g", [("t", 0, 1, -1, ""), ("u", 0, 2, -1, "")], now_ms=0)
    commit(store, "g", [("u", 0, 3, -1, "")], now_ms=DAY)
    empty, never = (lambda g: True), (lambda g, t: pytest.fail("not asked for Empty groups"))
    assert store.expire(RETENTION - 1, RETENTION, empty, never) == []
    assert _tombstoned(store.expire(RETENTION, RETENTION, empty, never)) == [("g", "t", 0)]
    expired = store.expire(RETENTION + DAY, RETENTION, empty, never)
    assert _tombstoned(expired) == [("g", "t", 0), ("g", "u", 0)]
    apply(store, expired)
    assert store.groups() == set()


def test_empty_group_retention_counts_from_when_it_became_empty():
    store = OffsetStore()
    commit(store, "g", [("t", 0, 1, -1, "")], now_ms=0)
    commit(store, "g", [("t", 1, 1, -1, "")], now_ms=DAY)

    def args(now):
        return now, RETENTION, (lambda g: True), (lambda g, t: False)

    since = {"g": 3 * DAY}.get
    assert store.expire(*args(RETENTION), empty_since_ms=since) == []
    assert store.expire(*args(3 * DAY + RETENTION - 1), empty_since_ms=since) == []
    assert _tombstoned(store.expire(*args(3 * DAY + RETENTION), empty_since_ms=since)) == [
        ("g", "t", 0), ("g", "t", 1)]
    # no known state timestamp (-1 or None): per-offset commit timestamps, as in Kafka
    for unknown in ({"g": -1}.get, {}.get):
        assert _tombstoned(store.expire(*args(RETENTION), empty_since_ms=unknown)) == [("g", "t", 0)]


def test_non_empty_group_expires_only_unsubscribed_topics():
    store = OffsetStore()
    commit(store, "g", [("subscribed", 0, 1, -1, ""), ("dropped", 0, 2, -1, ""),
                        ("dropped", 1, 3, -1, "")], now_ms=0)
    active = lambda g: False  # noqa: E731
    subscribed = lambda g, t: t == "subscribed"  # noqa: E731
    assert store.expire(RETENTION - 1, RETENTION, active, subscribed) == []
    expired = store.expire(100 * RETENTION, RETENTION, active, subscribed)
    assert _tombstoned(expired) == [("g", "dropped", 0), ("g", "dropped", 1)]
    apply(store, expired)
    assert store.fetch("g", None) == {("subscribed", 0): CommittedOffset(1, -1, "", 0)}


def test_expiry_judges_each_group_by_its_own_state():
    store = OffsetStore()
    commit(store, "empty", [("t", 0, 1, -1, "")], 0)
    commit(store, "stable", [("t", 0, 1, -1, "")], 0)
    expired = store.expire(RETENTION, RETENTION, lambda g: g == "empty", lambda g, t: True)
    assert _tombstoned(expired) == [("empty", "t", 0)]


def test_v1_explicit_expire_timestamp_overrides_retention():
    store = OffsetStore()
    store.replay(kafka_offset_key("g", "t", 0), kafka_value_v1(1, "", 0, 500))
    store.replay(kafka_offset_key("g", "t", 1), kafka_value_v1(1, "", 0, 10 * RETENTION))
    empty = lambda g: True  # noqa: E731
    assert store.expire(499, RETENTION, empty, lambda g, t: False) == []
    assert _tombstoned(store.expire(500, RETENTION, empty, lambda g, t: False)) == [("g", "t", 0)]
    assert _tombstoned(store.expire(RETENTION, RETENTION, empty, lambda g, t: False)) == [("g", "t", 0)]
    # a subscribed topic of a live group never expires, explicit timestamp or not
    assert store.expire(500, RETENTION, lambda g: False, lambda g, t: True) == []


# -- the coordinator partition of a group (docs/PROTOCOL.md §6) --------------------------

# Values printed by OpenJDK 17.0.15 on this machine with a throwaway program:
#   System.out.println(s.hashCode() + " " + (Utils.abs(h) % 50))   (Utils.abs as in Kafka)
# and, where short enough, checked by hand below.
JAVA_HASHES = [
    ("", 0, 0),
    ("a", 97, 47),
    ("hello", 99162322, 22),
    ("polygenelubricants", -2147483648, 0),
    ("GydZG_", -2147483648, 0),
    ("消费组", 28099635, 35),
    ("group-😀", 508083057, 7),
    ("my-group", -1906497762, 12),
    ("console-consumer-12345", 158455506, 6),
]


@pytest.mark.parametrize(("group", "java_hash", "partition_of_50"), JAVA_HASHES)
def test_java_string_hash_and_partition(group, java_hash, partition_of_50):
    assert java_string_hash(group) == java_hash
    assert partition_of(group, 50) == partition_of_50


def test_java_hash_worked_by_hand():
    """The UTF-16 rule, h = 31*h + unit in int32, worked without Java.

    "hello": 104, 101, 108, 108, 111 -> 104*31^4 + 101*31^3 + 108*31^2 + 108*31 + 111
             = 96046184 + 3008891 + 103788 + 3348 + 111 = 99162322 (no overflow).
    "消费组": U+6D88 (28040), U+8D39 (36153), U+7EC4 (32452), one unit each
             -> 28040*961 + 36153*31 + 32452 = 26946440 + 1120743 + 32452 = 28099635.
    "group-😀": U+1F600 is two UTF-16 units, D83D DE00. h("group-") = 3057506702 mod 2^32;
             (31*(31*h + 0xD83D) + 0xDE00) mod 2^32 = 508083057. Hashing the code point
             instead (31*h + 0x1F600) would give 293555762: the wrong partition (12, not 7).
    """
    assert 104 * 31**4 + 101 * 31**3 + 108 * 31**2 + 108 * 31 + 111 == 99162322
    assert 28040 * 961 + 36153 * 31 + 32452 == 28099635
    h = java_string_hash("group-") & 0xFFFFFFFF
    assert h == 3057506702
    assert (31 * ((31 * h + 0xD83D) & 0xFFFFFFFF) + 0xDE00) & 0xFFFFFFFF == 508083057
    assert (31 * h + 0x1F600) & 0xFFFFFFFF == 293555762 != java_string_hash("group-😀")


def test_int32_minimum_maps_to_partition_zero_for_every_count():
    """Utils.abs(Integer.MIN_VALUE) is 0; Math.abs would stay negative, & 0x7fffffff gives 0
    too but differs for every other negative hash (see "my-group": 12, not 36)."""
    for n in (1, 3, 7, 50, 51, 1000):
        assert partition_of("polygenelubricants", n) == 0
    assert (-1906497762 & 0x7FFFFFFF) % 50 == 36 != partition_of("my-group", 50)


def test_partition_count_must_be_positive():
    with pytest.raises(ValueError):
        partition_of("g", 0)


def test_replaying_built_records_by_entry_equals_replaying_their_bytes():
    """The fast path (a record's own entry) and the load path (its bytes) agree."""
    from broker.coordinator.offsets import OffsetStore
    source = OffsetStore()
    records, _ = source.prepare_commit("g", [("t", 0, 5, 2, "m"), ("t", 1, 9, -1, None),
                                             ("u", 0, 1, -1, "x")], 1_000)
    by_entry, by_bytes = OffsetStore(), OffsetStore()
    for r in records:
        by_entry.replay_record(r)
        by_bytes.replay(r.key, r.value)
    for r in by_bytes.delete_offsets("g", [("u", 0)]):
        by_entry.replay_record(r)
        by_bytes.replay(r.key, r.value)
    assert by_entry.fetch("g", None) == by_bytes.fetch("g", None)
    assert set(by_bytes.fetch("g", None)) == {("t", 0), ("t", 1)}
