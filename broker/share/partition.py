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
ARCHIVED gaps, and SPEO moves over them. No more than `partition_max_record_locks` records
are in flight; at the cap nothing new is acquired until SPSO moves. SPSO moves over the
leading run of ACKNOWLEDGED and ARCHIVED records, which are then forgotten. A record is
acquired by one member at a time, acknowledged once, and delivered at most
`delivery_count_limit` times.

An acknowledgement is checked whole before anything changes (INVALID_REQUEST for a
malformed one, INVALID_RECORD_STATE for a record this member does not hold), so a refused
one changes nothing. `persisted_state` is what WriteShareGroupState carries: every
in-flight record from SPSO, acquired ones as AVAILABLE (a lock does not outlive its
leader) with their delivery counts, which `from_persisted` reads back.

State is kept in runs, as Kafka keeps in-flight batches: consecutive offsets that share
state, delivery count, holder and lock deadline are one `_Run`, split only where a request
names part of one and joined again when neighbours agree. A consumer that takes and
accepts whole fetches keeps a handful of runs however many records are in flight.

`state_counts` (in-flight records by state) and the totals `acquisitions` and
`redeliveries` (records acquired since the share partition was made, and those among them
delivered before) are what the leader's `share_partition_state` events report.

Also here: `share_partition_config`, the settings one share group's partitions run with,
and (re-exported from broker.share.offset_reset) `parse_auto_offset_reset`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TypeVar

from broker.share.offset_reset import AutoOffsetReset, parse_auto_offset_reset
from protocol.errors import ErrorCode

__all__ = [
    "ACCEPT", "ACKNOWLEDGED", "ACQUIRED", "ARCHIVED", "AVAILABLE", "Acquired",
    "AutoOffsetReset", "Expired", "GAP", "REJECT", "RELEASE", "SharePartition",
    "SharePartitionConfig", "parse_auto_offset_reset", "share_partition_config"]

E = ErrorCode

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4  # Kafka's RecordState ids
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3  # AcknowledgeType
_DONE = (ACKNOWLEDGED, ARCHIVED)
_STATE_NAMES = {AVAILABLE: "available", ACQUIRED: "acquired", ACKNOWLEDGED: "acknowledged",
                ARCHIVED: "archived"}
_TYPES = frozenset((GAP, ACCEPT, RELEASE, REJECT))

# Kafka 4.1's defaults for group.share.record.lock.duration.ms, group.share.delivery.count.limit
# and group.share.partition.max.record.locks
DEFAULT_LOCK_MS, DEFAULT_DELIVERY_LIMIT, DEFAULT_MAX_LOCKS = 30_000, 5, 2_000


@dataclass(frozen=True)
class SharePartitionConfig:
    record_lock_duration_ms: int = DEFAULT_LOCK_MS
    delivery_count_limit: int = DEFAULT_DELIVERY_LIMIT
    partition_max_record_locks: int = DEFAULT_MAX_LOCKS
    auto_offset_reset: AutoOffsetReset = AutoOffsetReset("latest")


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
    group's own share.record.lock.duration.ms and share.auto.offset.reset where set. A group
    value that does not parse leaves the broker's (group configs are checked when altered;
    one that slipped through must not stop the partition from loading)."""
    c = broker.config
    lock_ms = getattr(c, "group_share_record_lock_duration_ms", DEFAULT_LOCK_MS)
    reset = AutoOffsetReset("latest")
    own = broker.metadata_cache.group_configs(group_id)
    if (value := own.get("share.record.lock.duration.ms")) is not None:
        try:
            lock_ms = int(value)
        except ValueError:
            pass
    if (value := own.get("share.auto.offset.reset")) is not None:
        try:
            reset = parse_auto_offset_reset(value)
        except ValueError:
            pass
    return SharePartitionConfig(
        record_lock_duration_ms=lock_ms,
        delivery_count_limit=getattr(c, "group_share_delivery_count_limit",
                                     DEFAULT_DELIVERY_LIMIT),
        partition_max_record_locks=getattr(c, "group_share_partition_max_record_locks",
                                           DEFAULT_MAX_LOCKS),
        auto_offset_reset=reset)


class _Run:
    """Offsets first..last, all in one state with one delivery count (and, ACQUIRED, one
    holder and one lock deadline)."""

    __slots__ = ("first", "last", "state", "count", "member", "deadline")

    def __init__(self, first: int, last: int, state: int, count: int,
                 member: str | None = None, deadline: int = 0):
        self.first, self.last = first, last
        self.state, self.count = state, count
        self.member, self.deadline = member, deadline

    def same(self, other: _Run) -> bool:
        return (self.state == other.state and self.count == other.count
                and self.member == other.member and self.deadline == other.deadline)

    def size(self) -> int:
        return self.last - self.first + 1

    def __repr__(self) -> str:
        return (f"_Run({self.first}-{self.last} state={self.state} count={self.count}"
                f" member={self.member!r} deadline={self.deadline})")


K = TypeVar("K")


def _joined(ranges: list[tuple[int, int, K]]) -> list[tuple[int, int, K]]:
    """Sorted (first, last, key) ranges with adjacent equal keys joined."""
    out: list[tuple[int, int, K]] = []
    for first, last, key in ranges:
        if out and out[-1][1] == first - 1 and out[-1][2] == key:
            out[-1] = (out[-1][0], last, key)
        else:
            out.append((first, last, key))
    return out


class SharePartition:
    def __init__(self, config: SharePartitionConfig, start_offset: int):
        self.config = config
        self.start_offset = start_offset
        self.end_offset = start_offset
        self._runs: list[_Run] = []  # sorted, contiguous, exactly covering [start, end)
        # what the last acknowledgement or member release archived: (first, last, why), for
        # the events
        self.last_archived: list[tuple[int, int, str]] = []
        # records acquired since this share partition was made (loaded), and those of them
        # delivered before (delivery count > 1): the share_partition_state events' totals
        self.acquisitions = 0
        self.redeliveries = 0

    @classmethod
    def initial(cls, config: SharePartitionConfig, start_offset: int) -> SharePartition:
        return cls(config, start_offset)

    @classmethod
    def from_persisted(cls, config: SharePartitionConfig, start_offset: int,
                       state_batches: list[dict]) -> SharePartition:
        """A share partition as the share coordinator last had it. Offsets between SPSO and
        the state batches were never delivered; a record persisted AVAILABLE at the
        delivery limit is archived (its last delivery's lock died with the old leader)."""
        sp = cls(config, start_offset)
        for b in sorted(state_batches, key=lambda b: b["first_offset"]):
            first, last = max(b["first_offset"], sp.end_offset), b["last_offset"]
            if first > last:
                continue  # below SPSO, or overlapping what an earlier batch said
            if first > sp.end_offset:
                sp._append(_Run(sp.end_offset, first - 1, AVAILABLE, 0))
            state = b["delivery_state"] if b["delivery_state"] in _DONE else AVAILABLE
            count = max(b["delivery_count"], 0)
            if state == AVAILABLE and count >= config.delivery_count_limit:
                state = ARCHIVED
            sp._append(_Run(first, last, state, count))
        sp._advance()
        return sp

    # -- queries --------------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where the leader reads the log from: the first AVAILABLE record, else SPEO."""
        for r in self._runs:
            if r.state == AVAILABLE:
                return r.first
        return self.end_offset

    def in_flight_count(self) -> int:
        return self.end_offset - self.start_offset

    def acquired_count(self) -> int:
        return sum(r.size() for r in self._runs if r.state == ACQUIRED)

    def state_counts(self) -> dict[str, int]:
        """In-flight records by state: available, acquired, acknowledged, archived (the
        last two only until SPSO moves past them)."""
        counts = dict.fromkeys(_STATE_NAMES.values(), 0)
        for r in self._runs:
            counts[_STATE_NAMES[r.state]] += r.size()
        return counts

    def acquired_by(self, member_id: str) -> int:
        return sum(r.size() for r in self._runs
                   if r.state == ACQUIRED and r.member == member_id)

    def state_of(self, offset: int) -> tuple[int, int, str | None] | None:
        """(state, delivery count, holder) of an in-flight offset; None outside flight."""
        if not self.start_offset <= offset < self.end_offset:
            return None
        r = self._runs[self._index(offset)]
        return r.state, r.count, r.member

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline for r in self._runs if r.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    # -- acquiring ------------------------------------------------------------------------------

    def acquire(self, member_id: str, now_ms: int, fetched_batches: list[tuple[int, int]],
                max_records: int) -> list[Acquired]:
        """Acquire up to `max_records` records for a member from what the leader read:
        `fetched_batches` are the (first, last) offsets of the data batches read from
        next_fetch_offset() on, transaction markers left out."""
        if not fetched_batches or max_records <= 0:
            return []
        batches = sorted(fetched_batches)
        readable = max(last for _, last in batches)
        deadline = now_ms + self.config.record_lock_duration_ms
        budget = max_records
        taken: list[tuple[int, int, int]] = []
        i = 0
        while i < len(self._runs) and budget > 0:  # redeliveries, oldest first
            r = self._runs[i]
            if r.first > readable:
                break
            if r.state == AVAILABLE:
                last = min(r.last, readable, r.first + budget - 1)
                self._split(last + 1)
                r.state, r.member, r.deadline = ACQUIRED, member_id, deadline
                r.count += 1
                taken.append((r.first, r.last, r.count))
                budget -= r.size()
            i += 1
        touched = i
        cap = self.config.partition_max_record_locks
        for first, last in batches:  # then new records, past SPEO
            if budget <= 0 or last < self.end_offset:
                continue
            if first > self.end_offset and not self._add_gap(first, cap):
                break
            n = min(last - self.end_offset + 1, budget, cap - self.in_flight_count())
            if n <= 0:
                break
            new = _Run(self.end_offset, self.end_offset + n - 1, ACQUIRED, 1, member_id, deadline)
            taken.append((new.first, new.last, 1))
            self._append(new)
            budget -= n
            if self.end_offset <= last:
                break  # stopped inside the batch: at max_records or the cap
        self._merge(0, touched)  # runs past `touched` were only appended, joined as they came
        self._advance()
        for first, last, count in taken:
            self.acquisitions += last - first + 1
            if count > 1:
                self.redeliveries += last - first + 1
        return [Acquired(first, last, count) for first, last, count in _joined(taken)]

    def _add_gap(self, before: int, cap: int) -> bool:
        """Offsets from SPEO up to `before` are not in the log: archive them unread, as far
        as the cap allows. True when SPEO reached `before`."""
        if not self._runs:  # nothing in flight: the gap is simply passed
            self.start_offset = self.end_offset = before
            return True
        n = min(before - self.end_offset, cap - self.in_flight_count())
        if n > 0:
            self._append(_Run(self.end_offset, self.end_offset + n - 1, ARCHIVED, 0))
        return self.end_offset == before

    # -- acknowledging --------------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: list[tuple[int, int, list[int]]],
                    now_ms: int) -> ErrorCode:
        """Apply a member's acknowledgements, all or none: `batches` are (first offset,
        last offset, acknowledge types), one type for the range or one per offset."""
        plan = self._check_acknowledgement(member_id, batches)
        if isinstance(plan, ErrorCode):
            return plan
        limit = self.config.delivery_count_limit
        archived: list[tuple[int, int, str]] = []
        for first, last, kind in plan:
            i, j = self._slice(first, last)
            for r in self._runs[i:j]:
                r.member, r.deadline = None, 0
                if kind == ACCEPT:
                    r.state = ACKNOWLEDGED
                elif kind == RELEASE:
                    r.state = ARCHIVED if r.count >= limit else AVAILABLE
                    if r.state == ARCHIVED:
                        archived.append((r.first, r.last, "delivery count limit"))
                else:
                    r.state = ARCHIVED
                    if kind == REJECT:
                        archived.append((r.first, r.last, "rejected"))
            self._merge(i, j)
        self.last_archived = _joined(archived)
        self._advance()
        return E.NONE

    def _check_acknowledgement(self, member_id: str, batches: list[tuple[int, int, list[int]]]
                               ) -> list[tuple[int, int, int]] | ErrorCode:
        """The (first, last, type) ranges an acknowledgement applies, or why it is refused:
        the form first (INVALID_REQUEST), then what the member holds (INVALID_RECORD_STATE)."""
        previous_last = -1
        plan: list[tuple[int, int, int]] = []
        for first, last, types in batches:
            if first < 0 or first > last or first <= previous_last:
                return E.INVALID_REQUEST
            previous_last = last
            if len(types) not in (1, last - first + 1) or any(t not in _TYPES for t in types):
                return E.INVALID_REQUEST
            if len(types) == 1:
                plan.append((first, last, types[0]))
            else:
                plan.extend(_joined([(first + k, first + k, t) for k, t in enumerate(types)]))
        for first, last, _ in plan:
            if not self._holds(member_id, first, last):
                return E.INVALID_RECORD_STATE
        return plan

    def _holds(self, member_id: str, first: int, last: int) -> bool:
        """Whether every offset first..last is in flight and ACQUIRED by this member."""
        if first < self.start_offset or last >= self.end_offset:
            return False
        i = self._index(first)
        while i < len(self._runs) and self._runs[i].first <= last:
            r = self._runs[i]
            if r.state != ACQUIRED or r.member != member_id:
                return False
            i += 1
        return True

    # -- locks and members --------------------------------------------------------------------

    def expire_locks(self, now_ms: int) -> list[Expired]:
        """Records whose lock ran out go back (archived at the delivery limit)."""
        return self._give_back(lambda r: r.deadline <= now_ms)

    def release_member(self, member_id: str, now_ms: int) -> bool:
        """A member gone (session closed, left the group): its records go back, those at
        the delivery limit archived (in `last_archived`)."""
        gone = self._give_back(lambda r: r.member == member_id)
        self.last_archived = [(e.first_offset, e.last_offset, "delivery count limit")
                              for e in gone if e.archived]
        return bool(gone)

    def _give_back(self, which) -> list[Expired]:
        limit = self.config.delivery_count_limit
        gone: list[tuple[int, int, object]] = []
        for r in self._runs:
            if r.state == ACQUIRED and which(r):
                member = r.member or ""
                r.state = ARCHIVED if r.count >= limit else AVAILABLE
                r.member, r.deadline = None, 0
                gone.append((r.first, r.last, (member, r.state == ARCHIVED)))
        if gone:
            self._merge(0, len(self._runs))
            self._advance()
        return [Expired(key[0], first, last, key[1])  # type: ignore[index]
                for first, last, key in _joined(gone)]

    # -- the start offset ---------------------------------------------------------------------

    def move_start_offset(self, log_start_offset: int) -> None:
        """The log no longer holds what is below `log_start_offset` (retention, deleted
        records): nothing below it is delivered again."""
        if log_start_offset <= self.start_offset:
            return
        if log_start_offset >= self.end_offset:
            self._runs.clear()
            self.start_offset = self.end_offset = log_start_offset
            return
        del self._runs[:self._split(log_start_offset)]
        self.start_offset = log_start_offset
        self._advance()

    def _advance(self) -> None:
        """SPSO moves over the leading ACKNOWLEDGED and ARCHIVED records."""
        n = 0
        while n < len(self._runs) and self._runs[n].state in _DONE:
            n += 1
        if n:
            self.start_offset = self._runs[n - 1].last + 1
            del self._runs[:n]

    # -- persistence --------------------------------------------------------------------------

    def persisted_state(self) -> tuple[int, list[dict]]:
        """(SPSO, the state batches of every in-flight record) for WriteShareGroupState."""
        items = [(r.first, r.last, (AVAILABLE if r.state == ACQUIRED else r.state, r.count))
                 for r in self._runs]
        return self.start_offset, [
            {"first_offset": first, "last_offset": last, "delivery_state": key[0],
             "delivery_count": key[1]} for first, last, key in _joined(items)]

    # -- runs -----------------------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """The index of the run holding an in-flight offset."""
        return bisect.bisect_right(self._runs, offset, key=lambda r: r.first) - 1

    def _split(self, offset: int) -> int:
        """Make a run start at `offset` (within flight); the index of the first run at or
        past it."""
        if offset >= self.end_offset:
            return len(self._runs)
        if offset <= self.start_offset:
            return 0
        i = self._index(offset)
        r = self._runs[i]
        if r.first == offset:
            return i
        self._runs.insert(i + 1, _Run(offset, r.last, r.state, r.count, r.member, r.deadline))
        r.last = offset - 1
        return i + 1

    def _slice(self, first: int, last: int) -> tuple[int, int]:
        """Indexes i, j with runs[i:j] exactly first..last (all in flight)."""
        i = self._split(first)
        return i, self._split(last + 1)

    def _merge(self, lo: int, hi: int) -> None:
        """Join neighbouring runs that agree, from run lo - 1 to run hi."""
        lo, hi = max(lo - 1, 0), min(hi + 1, len(self._runs))
        out: list[_Run] = []
        for r in self._runs[lo:hi]:
            if out and out[-1].same(r):
                out[-1].last = r.last
            else:
                out.append(r)
        self._runs[lo:hi] = out

    def _append(self, run: _Run) -> None:
        """A run at SPEO; SPEO moves past it."""
        if self._runs and self._runs[-1].same(run):
            self._runs[-1].last = run.last
        else:
            self._runs.append(run)
        self.end_offset = run.last + 1
