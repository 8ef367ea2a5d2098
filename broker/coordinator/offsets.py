"""Committed offsets of one broker's group coordinator (docs/PROTOCOL.md §4, §6).

Owns: `OffsetStore`, the cache of committed offsets for the groups whose __consumer_offsets
partitions this broker leads; `CommittedOffset` and `OffsetRecord`; and the mapping of a
group id to its __consumer_offsets partition (`java_string_hash`, `partition_of`).

Pure: no trio, no I/O, no clock (`now_ms` is always a parameter). It follows "records,
then replay" (docs/ARCHITECTURE.md §5): every operation that would change stored offsets
(commit, OffsetDelete, DeleteGroups, expiry) only *returns* the records to append to
__consumer_offsets, and `replay` is the one place that changes the cache. The caller appends
the records and then replays them; loading a partition at start-up or on leadership is the
same replay over the partition's records in log order, so a loaded cache equals the cache
the leader had. This mirrors Kafka's OffsetMetadataManager (group-coordinator, 3.9).

Records are Kafka's own: OffsetCommitKey v1 and OffsetCommitValue v3, written through
protocol.messages.offsets_topic, so a real Kafka can read our __consumer_offsets and we can
read its. GroupMetadata records (key type 2) belong to the group state machine, and the
KIP-848 record types (key type 3 and up) are skipped, as Kafka tells old readers to do.

Not here: transactional offset commits (TxnOffsetCommit keeps pending offsets per producer
until the transaction marker), and the generation/member checks of OffsetCommit, which
belong to the group (ClassicGroup.validateOffsetCommit in Kafka).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from protocol.errors import ErrorCode
from protocol.messages import offsets_topic
from protocol.messages.offsets_topic import OffsetKey

# What OffsetFetch answers for a partition without a committed offset (Kafka's
# OffsetFetchResponse.INVALID_OFFSET); the leader epoch answer is then -1 and metadata "".
INVALID_OFFSET = -1
NO_LEADER_EPOCH = -1
NO_EXPIRE_TIMESTAMP = -1

# offsets.retention.minutes defaults to 10080 (7 days, KIP-186); the caller passes the
# configured value to `expire` in milliseconds.
DEFAULT_OFFSETS_RETENTION_MS = 10080 * 60 * 1000
# offset.metadata.max.bytes
DEFAULT_MAX_METADATA_SIZE = 4096

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class CommittedOffset:
    """One partition's committed position, as OffsetFetch reports it.

    `leader_epoch` is -1 when the commit carried none (OffsetCommit before v6, or records
    older than OffsetCommitValue v3). `expire_timestamp_ms` is -1 except for offsets read
    from an OffsetCommitValue v1 record, which an older Kafka wrote when the commit asked
    for its own retention (OffsetCommit v2-4 retention_time_ms); such an offset expires at
    that time instead of by the broker's retention (see `OffsetStore.expire`).
    """

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = NO_EXPIRE_TIMESTAMP


@dataclass(frozen=True)
class OffsetRecord:
    """One record for __consumer_offsets: key and value bytes; value None is a tombstone.

    `entry` is what the bytes say, (group, topic, partition, CommittedOffset or None), when
    this coordinator built the record itself: replay then applies it without parsing the
    bytes it has just encoded. Records read from disk have no entry and are decoded.
    """

    key: bytes
    value: bytes | None
    entry: tuple[str, str, int, "CommittedOffset | None"] | None = field(default=None,
                                                                          compare=False)


def _java_length(s: str) -> int:
    """Java's String.length(): UTF-16 code units, so a non-BMP character counts twice."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def _tombstone(group: str, topic: str, partition: int) -> OffsetRecord:
    return OffsetRecord(offsets_topic.encode_offset_key(group, topic, partition), None,
                        (group, topic, partition, None))


class OffsetStore:
    """The committed offsets of the groups this coordinator owns: group -> (topic, partition).

    Kafka semantics worth knowing:

    - **Negative offsets are accepted.** Kafka's broker does not check the offset of an
      OffsetCommit (OffsetMetadataManager.commitOffset validates only the metadata size);
      the clients do: Java's OffsetAndMetadata rejects offset < 0 and librdkafka leaves
      partitions with an invalid (negative) offset out of the request. A stored -1 reads
      back as -1, which clients take as "no committed offset", the same answer as a
      partition that never committed, so accepting it is harmless and Kafka-compatible.
    - **Metadata size is counted as Java does**: `metadata.length() > offset.metadata.max.bytes`
      counts UTF-16 code units, not UTF-8 bytes, despite the property's name. Null metadata
      is stored as "" (OffsetAndMetadata.NO_METADATA).
    - A request that names the same partition twice yields two records; the later one wins
      on replay, as in Kafka.
    """

    def __init__(self, max_metadata_size: int = DEFAULT_MAX_METADATA_SIZE) -> None:
        self.max_metadata_size = max_metadata_size
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # producer id -> group -> partition -> offset: TxnOffsetCommits in the log whose
        # transaction has not ended yet (Kafka's pendingTransactionalOffsetCommits)
        self._pending_txn: dict[int, dict[str, dict[TopicPartition, CommittedOffset | None]]] = {}

    # -- writes: return records, never change the cache ---------------------------------

    def prepare_commit(
        self,
        group: str,
        offsets: Iterable[tuple[str, int, int, int, str | None]],
        now_ms: int,
    ) -> tuple[list[OffsetRecord], dict[TopicPartition, ErrorCode]]:
        """Records for an OffsetCommit of (topic, partition, offset, leader_epoch, metadata).

        Returns the records for the valid partitions (OffsetCommitKey v1 / OffsetCommitValue
        v3, commit timestamp `now_ms`) and an error per partition: OFFSET_METADATA_TOO_LARGE
        when the metadata is longer than `max_metadata_size` (that partition gets no record;
        the others are still committed, as in Kafka), NONE otherwise. The caller checks the
        group's generation and member first and appends the records before answering, so
        the answer NONE means "durably committed".
        """
        records: list[OffsetRecord] = []
        errors: dict[TopicPartition, ErrorCode] = {}
        for topic, partition, offset, leader_epoch, metadata in offsets:
            if metadata is not None and _java_length(metadata) > self.max_metadata_size:
                errors[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            errors[(topic, partition)] = ErrorCode.NONE
            records.append(OffsetRecord(
                offsets_topic.encode_offset_key(group, topic, partition),
                offsets_topic.encode_offset_value(offset, leader_epoch, metadata or "", now_ms),
                (group, topic, partition,
                 CommittedOffset(offset, leader_epoch, metadata or "", now_ms)),
            ))
        return records, errors

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> list[OffsetRecord]:
        """Tombstones for OffsetDelete: one per named partition that has a committed offset.

        Partitions without an offset get no tombstone (nothing to delete), and a partition
        named twice gets one. Whether the group may delete them (GROUP_SUBSCRIBED_TO_TOPIC,
        GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) is the group's decision, made before this call.
        """
        committed = self._offsets.get(group, {})
        records: list[OffsetRecord] = []
        seen: set[TopicPartition] = set()
        for tp in partitions:
            if tp in committed and tp not in seen:
                seen.add(tp)
                records.append(_tombstone(group, *tp))
        return records

    def delete_group(self, group: str) -> list[OffsetRecord]:
        """Tombstones for every committed offset of `group` (DeleteGroups), in (topic, partition) order."""
        return [_tombstone(group, *tp) for tp in sorted(self._offsets.get(group, {}))]

    def expire(
        self,
        now_ms: int,
        retention_ms: int,
        is_empty: Callable[[str], bool],
        subscribed: Callable[[str, str], bool],
        empty_since_ms: Callable[[str], int | None] | None = None,
    ) -> list[OffsetRecord]:
        """Tombstones for the offsets that have outlived offsets.retention.minutes (KIP-211).

        The rule, per group (Kafka 3.9 ClassicGroup.offsetExpirationCondition and
        OffsetMetadataManager.cleanupExpiredOffsets):

        - **Empty group** (`is_empty(group)`: no members, including a "simple" group that
          only commits and never joins): every offset is a candidate. Its retention counts
          from the moment the group became Empty, `empty_since_ms(group)`, when the caller
          knows it (the group's current-state timestamp), so all of its offsets go
          together; otherwise from each offset's own commit timestamp (Kafka's rule for
          simple groups and for group metadata without a state timestamp). As in Kafka,
          the Empty-since base applies even to an offset committed after that moment (a
          standalone commit to a long-Empty group): such a group is about to be deleted.
        - **Group with members**: only offsets of topics it does not subscribe to
          (`subscribed(group, topic)` False) are candidates, each counted from its commit
          timestamp; subscribed topics never expire. Kafka applies this only to a Stable
          group using the "consumer" protocol type whose subscriptions it knows; in any
          other non-empty state nothing expires, so `subscribed` should answer True there.
        - A candidate is expired when `now_ms - base >= retention_ms`, or, for an offset
          read from an OffsetCommitValue v1 with an explicit expire timestamp, when
          `now_ms >= expire_timestamp_ms` (the old per-commit retention wins).

        Example, retention 7 days: group "g" Empty since day 1 with offsets committed on
        day 0 expires on day 8 when `empty_since_ms` is given, on day 7 without it. Group
        "h", Stable and subscribed to "a" only, with offsets for "a" and "b" committed on
        day 0: "b" expires on day 7, "a" stays.

        Returns the tombstones (group, then topic, then partition order); the cache
        changes only when they are replayed. A group left without offsets and without
        members may then be deleted by the caller, as Kafka does.
        """
        records: list[OffsetRecord] = []
        for group in sorted(self._offsets):
            empty = is_empty(group)
            since = empty_since_ms(group) if (empty and empty_since_ms is not None) else None
            for (topic, partition), committed in sorted(self._offsets[group].items()):
                if not empty and subscribed(group, topic):
                    continue
                if committed.expire_timestamp_ms != NO_EXPIRE_TIMESTAMP:
                    expired = now_ms >= committed.expire_timestamp_ms
                else:
                    base = since if since is not None and since >= 0 else committed.commit_timestamp_ms
                    expired = now_ms - base >= retention_ms
                if expired:
                    records.append(_tombstone(group, topic, partition))
        return records

    # -- replay: the only mutation ------------------------------------------------------

    def replay_record(self, record: OffsetRecord) -> None:
        """`replay` for a record this coordinator built: its entry, no parsing."""
        if record.entry is None:
            self.replay(record.key, record.value)
            return
        group, topic, partition, committed = record.entry
        self._set(group, (topic, partition), committed)

    def _set(self, group: str, tp: TopicPartition, committed: CommittedOffset | None) -> None:
        if committed is None:
            group_offsets = self._offsets.get(group)
            if group_offsets is not None:
                group_offsets.pop(tp, None)
                if not group_offsets:
                    del self._offsets[group]  # so groups() forgets it
            return
        self._offsets.setdefault(group, {})[tp] = committed

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one __consumer_offsets record, in log order: a commit sets, a tombstone deletes.

        GroupMetadata records are left to the group state machine; record types this
        broker does not know (the KIP-848 ones, key type >= 3) are skipped. A malformed
        offset record raises protocol.errors.DecodeError: the partition is corrupt and the
        loader must not pretend otherwise.
        """
        decoded = offsets_topic.decode_key(key)
        if isinstance(decoded, OffsetKey):
            self.replay_offset(decoded, value)
        # else a GroupKey (the group code replays it) or an unknown type (None)

    def replay_offset(self, key: OffsetKey, value: bytes | None) -> None:
        """`replay` of an offset record whose key the caller has already decoded."""
        tp = (key.topic, key.partition)
        if value is None:
            self._set(key.group, tp, None)
            return
        self._set(key.group, tp, self._committed_of(key, value))

    @staticmethod
    def _committed_of(key: OffsetKey, value: bytes) -> CommittedOffset:
        v = offsets_topic.decode_value(key, value)
        return CommittedOffset(
            offset=v.offset,
            # absent before OffsetCommitValue v3; the expire timestamp exists in v1 only
            leader_epoch=v.get("leader_epoch", NO_LEADER_EPOCH),
            metadata=v.metadata,
            commit_timestamp_ms=v.commit_timestamp,
            expire_timestamp_ms=v.get("expire_timestamp", NO_EXPIRE_TIMESTAMP),
        )

    # -- transactional offsets (TxnOffsetCommit, KIP-98) ---------------------------------

    def replay_txn_record(self, producer_id: int, record: OffsetRecord) -> None:
        """A TxnOffsetCommit's record is in the log: pending until its transaction's marker
        (`complete_txn`), invisible to OffsetFetch until then."""
        if record.entry is not None:
            group, topic, partition, committed = record.entry
        else:
            decoded = offsets_topic.decode_key(record.key)
            if not isinstance(decoded, OffsetKey):
                return
            group, topic, partition = decoded.group, decoded.topic, decoded.partition
            committed = None if record.value is None else self._committed_of(decoded,
                                                                             record.value)
        self._pending_txn.setdefault(producer_id, {}).setdefault(group, {})[
            (topic, partition)] = committed

    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """The producer's transaction ended: its pending offsets become the committed ones
        (COMMIT) or are dropped (ABORT)."""
        pending = self._pending_txn.pop(producer_id, {})
        if not commit:
            return
        for group, offsets in pending.items():
            for tp, committed in offsets.items():
                self._set(group, tp, committed)

    def has_pending_txn(self, group: str, partitions: Iterable[TopicPartition] | None) -> bool:
        """Whether a transaction not yet ended holds offsets of these partitions (None: of
        any) for the group: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT."""
        wanted = None if partitions is None else set(partitions)
        return any(wanted is None or wanted & pending[group].keys()
                   for pending in self._pending_txn.values() if group in pending)

    # -- reads --------------------------------------------------------------------------

    def fetch(
        self, group: str, partitions: Iterable[TopicPartition] | None,
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """Committed offsets for OffsetFetch.

        With `partitions`, every named partition is in the answer, None where nothing is
        committed (the handler answers INVALID_OFFSET, epoch -1, metadata ""). With None
        (OffsetFetch's null topics: "all"), exactly the committed partitions, in (topic,
        partition) order.
        """
        committed = self._offsets.get(group, {})
        if partitions is None:
            return {tp: committed[tp] for tp in sorted(committed)}
        return {tp: committed.get(tp) for tp in partitions}

    def unload(self, belongs: Callable[[str], bool]) -> None:
        """Forget the groups of a partition this broker no longer leads (not a state change
        of the groups themselves: the new leader replays the same records)."""
        for group in [g for g in self._offsets if belongs(g)]:
            del self._offsets[group]
        for pending in self._pending_txn.values():
            for group in [g for g in pending if belongs(g)]:
                del pending[group]

    def groups(self) -> set[str]:
        """Groups with at least one committed offset."""
        return set(self._offsets)

    def has_offsets(self, group: str) -> bool:
        return group in self._offsets


def java_string_hash(s: str) -> int:
    """Java's String.hashCode() as a signed int32.

    h = 31*h + c over the UTF-16 code units of `s` (a non-BMP character is two surrogates),
    with int32 wraparound; "" -> 0. Example: "a" -> 97, "ab" -> 31*97 + 98 = 3105.
    """
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")  # lone surrogates hash as Java's would
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_of(group: str, num_partitions: int) -> int:
    """The __consumer_offsets partition whose leader coordinates `group` (docs/PROTOCOL.md §6).

    Kafka: Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions, where Utils.abs
    maps Integer.MIN_VALUE to 0 (Math.abs would leave it negative). Not `& 0x7fffffff`,
    which gives a different partition for every negative hash: "my-group" hashes to
    -1906497762, so it lives in partition 1906497762 % 50 = 12, not 36.
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
