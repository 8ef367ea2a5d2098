"""One share partition (KIP-932): a share group's view of one topic partition, pure, with
time passed in.

Owns: `SharePartition` (Kafka's SharePartition): which records between the share-partition
start offset (SPSO, `start_offset`) and end offset (SPEO, `end_offset`, the first offset
never handed out) are in flight, and each one's state:

    AVAILABLE --acquire--> ACQUIRED --ACCEPT--> ACKNOWLEDGED
        ^                     |  |--REJECT, GAP--> ARCHIVED
        +--RELEASE, lock expiry, member gone (ARCHIVED once delivered delivery_count_limit times)

Acquiring hands a member records under a lock that expires `record_lock_duration_ms`
later: redeliveries first (AVAILABLE records in flight, oldest first), then new records
past SPEO from the batches the leader read from the log. Offsets the log does not hold
(transaction markers, compacted-away records) are never delivered: they enter flight as
ARCHIVED gaps. No more than `partition_max_record_locks` records are in flight; at the cap
nothing new is acquired until SPSO moves. SPSO moves over the leading run of ACKNOWLEDGED
and ARCHIVED records, which are then forgotten. A record is acquired by one member at a
time, acknowledged once, and delivered at most `delivery_count_limit` times.

An acknowledgement is checked whole before anything changes (INVALID_REQUEST for a
malformed one, INVALID_RECORD_STATE for a record this member does not hold), so a refused
one changes nothing. `persisted_state` is what WriteShareGroupState carries: every
in-flight record from SPSO, acquired ones as AVAILABLE (a lock does not outlive its
leader) with their delivery counts, which `from_persisted` reads back.

State is kept per offset in one dict: the cap bounds it (2,000 by default), and a
dict keeps acquisition, acknowledgement and expiry simple to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from protocol.errors import ErrorCode

E = ErrorCode

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4  # Kafka's RecordState ids
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3  # AcknowledgeType
_DONE = (ACKNOWLEDGED, ARCHIVED)


@dataclass(frozen=True)
class SharePartitionConfig:
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2_000


@dataclass(frozen=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class Expired:
    member_id: str
    first_offset: int
    last_offset: int
    archived: bool


def share_partition_config(broker, group_id: str) -> SharePartitionConfig:
    """The settings of one share group's partitions: the broker's group.share.*, and the
    group's own share.record.lock.duration.ms where set."""
    c = broker.config
    lock_ms = c.group_share_record_lock_duration_ms
    own = broker.metadata_cache.group_configs(group_id).get("share.record.lock.duration.ms")
    if own is not None:
        lock_ms = int(own)
    return SharePartitionConfig(lock_ms, c.group_share_delivery_count_limit,
                                c.group_share_partition_max_record_locks)


class _Record:
    __slots__ = ("state", "count", "member", "deadline")

    def __init__(self, state: int, count: int):
        self.state = state
        self.count = count
        self.member: str | None = None
        self.deadline = 0


def _runs(items: Iterable[tuple[int, tuple]]) -> list[tuple[int, int, tuple]]:
    """Consecutive offsets with the same key, as (first, last, key)."""
    out: list[tuple[int, int, tuple]] = []
    for offset, key in items:
        if out and out[-1][1] == offset - 1 and out[-1][2] == key:
            out[-1] = (out[-1][0], offset, key)
        else:
            out.append((offset, offset, key))
    return out


class SharePartition:
    def __init__(self, config: SharePartitionConfig, start_offset: int):
        self.config = config
        self.start_offset = start_offset
        self.end_offset = start_offset
        self._records: dict[int, _Record] = {}  # every offset in [start, end)
        # what the last acknowledgement archived: (first, last, why), for the events
        self.last_archived: list[tuple[int, int, str]] = []

    @classmethod
    def initial(cls, config: SharePartitionConfig, start_offset: int) -> SharePartition:
        return cls(config, start_offset)

    @classmethod
    def from_persisted(cls, config: SharePartitionConfig, start_offset: int,
                       state_batches: list[dict]) -> SharePartition:
        sp = cls(config, start_offset)
        for b in sorted(state_batches, key=lambda b: b["first_offset"]):
            state = b["delivery_state"] if b["delivery_state"] in _DONE else AVAILABLE
            if state == AVAILABLE and b["delivery_count"] >= config.delivery_count_limit:
                state = ARCHIVED  # its last delivery's lock died with the old leader
            for offset in range(max(b["first_offset"], start_offset), b["last_offset"] + 1):
                sp._records[offset] = _Record(state, b["delivery_count"])
        if sp._records:
            sp.end_offset = max(sp._records) + 1
            for offset in range(start_offset, sp.end_offset):  # never delivered
                sp._records.setdefault(offset, _Record(AVAILABLE, 0))
        sp._advance()
        return sp

    # -- queries --------------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where the leader reads the log from: the first AVAILABLE record, else SPEO."""
        for offset in range(self.start_offset, self.end_offset):
            if self._records[offset].state == AVAILABLE:
                return offset
        return self.end_offset

    def in_flight_count(self) -> int:
        return self.end_offset - self.start_offset

    def acquired_count(self) -> int:
        return sum(1 for r in self._records.values() if r.state == ACQUIRED)

    def acquired_by(self, member_id: str) -> int:
        return sum(1 for r in self._records.values()
                   if r.state == ACQUIRED and r.member == member_id)

    def state_of(self, offset: int) -> tuple[int, int, str | None] | None:
        """(state, delivery count, holder) of an in-flight offset; None outside flight."""
        r = self._records.get(offset)
        return None if r is None else (r.state, r.count, r.member)

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline for r in self._records.values() if r.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    # -- acquiring ------------------------------------------------------------------------------

    def acquire(self, member_id: str, now_ms: int, fetched_batches: list[tuple[int, int]],
                max_records: int) -> list[Acquired]:
        """Acquire up to `max_records` records for a member from what the leader read:
        `fetched_batches` are the (first, last) offsets of the data batches read from
        next_fetch_offset() on."""
        if not fetched_batches or max_records <= 0:
            return []
        readable = max(last for _, last in fetched_batches)
        deadline = now_ms + self.config.record_lock_duration_ms
        taken: list[int] = []
        for offset in range(self.start_offset, min(self.end_offset, readable + 1)):
            if len(taken) >= max_records:
                break
            r = self._records[offset]
            if r.state == AVAILABLE:
                self._take(r, member_id, deadline)
                taken.append(offset)
        cap = self.config.partition_max_record_locks
        for first, last in sorted(fetched_batches):
            if last < self.end_offset:
                continue
            while self.end_offset < first and self.end_offset - self.start_offset < cap:
                # not in the log (a marker, compacted away): a gap, never delivered
                self._records[self.end_offset] = _Record(ARCHIVED, 0)
                self.end_offset += 1
            while self.end_offset <= last and len(taken) < max_records \
                    and self.end_offset - self.start_offset < cap:
                r = self._records[self.end_offset] = _Record(AVAILABLE, 0)
                self._take(r, member_id, deadline)
                taken.append(self.end_offset)
                self.end_offset += 1
            if self.end_offset <= last:
                break
        self._advance()  # gaps at the head
        return [Acquired(first, last, key[0]) for first, last, key
                in _runs((o, (self._records[o].count,)) for o in sorted(taken))]

    def _take(self, r: _Record, member_id: str, deadline: int) -> None:
        r.state, r.member, r.deadline = ACQUIRED, member_id, deadline
        r.count += 1

    # -- acknowledging --------------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: list[tuple[int, int, list[int]]],
                    now_ms: int) -> ErrorCode:
        """Apply a member's acknowledgements, all or none."""
        previous_last = -1
        changes: list[tuple[int, int]] = []
        for first, last, types in batches:
            if first < 0 or first > last or first <= previous_last:
                return E.INVALID_REQUEST
            previous_last = last
            count = last - first + 1
            if len(types) not in (1, count) or any(t not in (GAP, ACCEPT, RELEASE, REJECT)
                                                    for t in types):
                return E.INVALID_REQUEST
            if count > self.config.partition_max_record_locks:
                return E.INVALID_RECORD_STATE  # more than could ever be in flight
            for i, offset in enumerate(range(first, last + 1)):
                changes.append((offset, types[0] if len(types) == 1 else types[i]))
        for offset, _ in changes:
            r = self._records.get(offset)
            if r is None or r.state != ACQUIRED or r.member != member_id:
                return E.INVALID_RECORD_STATE
        archived: list[tuple[int, tuple]] = []
        for offset, kind in changes:
            r = self._records[offset]
            if kind == ACCEPT:
                r.state = ACKNOWLEDGED
            elif kind == RELEASE:
                self._release(r)
                if r.state == ARCHIVED:
                    archived.append((offset, ("delivery count limit",)))
            else:  # REJECT, GAP
                r.state = ARCHIVED
                if kind == REJECT:
                    archived.append((offset, ("rejected",)))
            r.member, r.deadline = None, 0
        self.last_archived = [(first, last, key[0]) for first, last, key in _runs(archived)]
        self._advance()
        return E.NONE

    def _release(self, r: _Record) -> None:
        r.state = ARCHIVED if r.count >= self.config.delivery_count_limit else AVAILABLE
        r.member, r.deadline = None, 0

    # -- locks and members --------------------------------------------------------------------

    def expire_locks(self, now_ms: int) -> list[Expired]:
        """Records whose lock ran out go back (archived at the delivery limit)."""
        gone = []
        for offset in range(self.start_offset, self.end_offset):
            r = self._records[offset]
            if r.state == ACQUIRED and r.deadline <= now_ms:
                member = r.member or ""
                self._release(r)
                gone.append((offset, (member, r.state == ARCHIVED)))
        self._advance()
        return [Expired(key[0], first, last, key[1]) for first, last, key in _runs(gone)]

    def release_member(self, member_id: str, now_ms: int) -> bool:
        """A member gone (session closed, left the group): its records go back."""
        changed = False
        for r in self._records.values():
            if r.state == ACQUIRED and r.member == member_id:
                self._release(r)
                changed = True
        if changed:
            self._advance()
        return changed

    # -- the start offset ---------------------------------------------------------------------

    def move_start_offset(self, log_start_offset: int) -> None:
        """The log no longer holds what is below `log_start_offset` (retention, deleted
        records): nothing below it is delivered again."""
        if log_start_offset <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            del self._records[offset]
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)

    def _advance(self) -> None:
        while self.start_offset < self.end_offset \
                and self._records[self.start_offset].state in _DONE:
            del self._records[self.start_offset]
            self.start_offset += 1

    # -- persistence --------------------------------------------------------------------------

    def persisted_state(self) -> tuple[int, list[dict]]:
        """(SPSO, the state batches of every in-flight record) for WriteShareGroupState."""
        items = ((o, (AVAILABLE if r.state == ACQUIRED else r.state, r.count))
                 for o in range(self.start_offset, self.end_offset)
                 if (r := self._records[o]) is not None)
        return self.start_offset, [
            {"first_offset": first, "last_offset": last, "delivery_state": key[0],
             "delivery_count": key[1]} for first, last, key in _runs(items)]
