"""The Raft state machine's view of the metadata log: entries with (offset, epoch), a
snapshot, and the epoch lookups that fetch validation and truncation need.

Owns: `Entry`, `SnapshotId`, `Snapshot`, `RaftLog` (Kafka's ReplicatedLog as
KafkaMetadataLog implements it, with the leader epoch cache of LeaderEpochFileCache, and
the history of voter sets Kafka's KRaftControlRecordStateMachine reads off the log) and
`validate_offset_and_epoch`'s answer. It is plain memory: the runtime mirrors the effects
`broker.controller.raft` returns onto the `__cluster_metadata` segments and rebuilds a
`RaftLog` from them at start-up.

Offsets are Kafka's: the log end offset is the offset the next entry gets, a snapshot id's
end offset is exclusive, and the epoch of "nothing yet" is 0 (the first leader has epoch 1).
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass

from broker.controller.voter_set import VoterSet


@dataclass(frozen=True)
class Entry:
    offset: int
    epoch: int
    record: bytes  # opaque to Raft
    # the first entry of a leader's epoch, Kafka's LeaderChangeMessage control record; it is
    # what lets the leader commit (KafkaRaftClient appends it on becoming leader)
    control: bool = False
    # a control entry holding KIP-853's KRaftVersionRecord and VotersRecord: the voter set
    # from this offset on, in force as soon as it is appended (committed or not)
    voters: VoterSet | None = None


@dataclass(frozen=True)
class SnapshotId:
    """Kafka's OffsetAndEpoch as a snapshot id: entries below end_offset are in the image,
    and epoch is the epoch of the entry at end_offset - 1."""
    end_offset: int
    epoch: int


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: SnapshotId
    data: bytes  # the image, opaque to Raft
    # the voter set at the snapshot's end (kraft.version 1), as Kafka's snapshots carry
    # their VotersRecord; None in a static quorum
    voters: VoterSet | None = None


class ValidationKind(enum.Enum):
    VALID = "valid"
    DIVERGING = "diverging"  # the fetcher must truncate to (epoch, end_offset) and retry
    SNAPSHOT = "snapshot"  # the fetcher is behind the log start: it must fetch the snapshot


@dataclass(frozen=True)
class Validation:
    """Kafka's ValidOffsetAndEpoch: for DIVERGING, `at` is the end offset of the largest
    epoch this log has at or below the fetcher's; for SNAPSHOT, the latest snapshot's id."""
    kind: ValidationKind
    at: SnapshotId | None = None


class RaftLog:
    def __init__(self, entries: list[Entry] | tuple[Entry, ...] = (),
                 snapshot: Snapshot | None = None):
        self.snapshot = snapshot
        self.start_offset = snapshot.snapshot_id.end_offset if snapshot else 0
        base_epoch = snapshot.snapshot_id.epoch if snapshot else 0
        self.entries: list[Entry] = []
        # (epoch, first offset) for each epoch present, as LeaderEpochFileCache; the first
        # item stands for what lies below start_offset (the snapshot's epoch, or 0)
        self._epochs: list[tuple[int, int]] = [(base_epoch, self.start_offset)]
        # (offset, voter set) of every VotersRecord entry present, oldest first
        self._voter_history: list[tuple[int, VoterSet]] = []
        self.append(list(entries))

    # -- reading --------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self.entries)

    @property
    def last_fetched_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else self._epochs[0][0]

    @property
    def voters(self) -> VoterSet | None:
        """The latest voter set in the log, uncommitted or not, else the snapshot's; None
        when neither has one (a static quorum, kraft.version 0)."""
        if self._voter_history:
            return self._voter_history[-1][1]
        return self.snapshot.voters if self.snapshot is not None else None

    @property
    def voters_offset(self) -> int:
        """The offset of the latest VotersRecord entry; -1 when the voter set comes from
        the snapshot or the configuration (committed either way)."""
        return self._voter_history[-1][0] if self._voter_history else -1

    def voters_at(self, end_offset: int) -> VoterSet | None:
        """The voter set in force below `end_offset` (what a snapshot there carries)."""
        for offset, voters in reversed(self._voter_history):
            if offset < end_offset:
                return voters
        return self.snapshot.voters if self.snapshot is not None else None

    def epoch_at(self, offset: int) -> int:
        """The epoch of the entry at `offset`; the snapshot's epoch for start_offset - 1."""
        if offset == self.start_offset - 1:
            return self._epochs[0][0]
        if offset < 0:
            return 0
        return self.entries[offset - self.start_offset].epoch

    def read(self, start: int, max_bytes: int) -> tuple[Entry, ...]:
        """Entries from `start` up to max_bytes of records, but at least one if any."""
        out: list[Entry] = []
        size = 0
        for entry in self.entries[max(0, start - self.start_offset):]:
            size += len(entry.record)
            if out and size > max_bytes:
                break
            out.append(entry)
        return tuple(out)

    def end_offset_for_epoch(self, epoch: int) -> SnapshotId | None:
        """The largest epoch at or below `epoch` in this log and where it ends (exclusive);
        None when `epoch` is older than anything the log can still tell apart."""
        firsts = [e for e, _ in self._epochs]
        i = bisect.bisect_right(firsts, epoch) - 1
        if i < 0:
            return None
        end = self._epochs[i + 1][1] if i + 1 < len(self._epochs) else self.end_offset
        return SnapshotId(end, self._epochs[i][0])

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> Validation:
        """Does a fetcher whose log ends at `offset` with last epoch `epoch` agree with
        this log? (Kafka's ReplicatedLog.validateOffsetAndEpoch.)"""
        if offset < self.start_offset:
            return Validation(ValidationKind.SNAPSHOT, self._snapshot_id())
        found = self.end_offset_for_epoch(epoch)
        if found is None:
            return Validation(ValidationKind.SNAPSHOT, self._snapshot_id())
        if found.epoch == epoch and offset <= found.end_offset:
            return Validation(ValidationKind.VALID)
        return Validation(ValidationKind.DIVERGING, found)

    def _snapshot_id(self) -> SnapshotId:
        assert self.snapshot is not None, "a log that starts above 0 has a snapshot"
        return self.snapshot.snapshot_id

    # -- writing --------------------------------------------------------------------------

    def append(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        for entry in entries:
            if entry.offset != self.end_offset:
                raise ValueError(f"entry at {entry.offset} appended at end offset "
                                 f"{self.end_offset}")
            last = self.last_fetched_epoch
            if entry.epoch < last:
                raise ValueError(f"entry epoch {entry.epoch} below the log's {last}")
            if entry.epoch > last:
                self._epochs.append((entry.epoch, entry.offset))
            if entry.voters is not None:
                self._voter_history.append((entry.offset, entry.voters))
            self.entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        if offset < self.start_offset:
            raise ValueError(f"cannot truncate to {offset}, below log start {self.start_offset}")
        del self.entries[offset - self.start_offset:]
        while len(self._epochs) > 1 and self._epochs[-1][1] >= offset:
            self._epochs.pop()
        while self._voter_history and self._voter_history[-1][0] >= offset:
            self._voter_history.pop()

    def truncate_to_end_offset(self, diverging: SnapshotId) -> int:
        """Where a follower cuts its log when the leader says its epoch `diverging.epoch`
        ends at `diverging.end_offset`: at the smaller of that and where this log's own
        largest epoch at or below it ends (KafkaMetadataLog.truncateToEndOffset)."""
        found = self.end_offset_for_epoch(diverging.epoch)
        local_end = found.end_offset if found is not None else self.start_offset
        return max(self.start_offset, min(diverging.end_offset, local_end, self.end_offset))

    def take_snapshot(self, snapshot: Snapshot) -> None:
        """The image covers everything below its end offset: drop those entries."""
        end = snapshot.snapshot_id.end_offset
        if not self.start_offset < end <= self.end_offset:
            raise ValueError(f"snapshot end {end} outside ({self.start_offset}, "
                             f"{self.end_offset}]")
        if self.epoch_at(end - 1) != snapshot.snapshot_id.epoch:
            raise ValueError(f"snapshot epoch {snapshot.snapshot_id.epoch} is not the epoch "
                             f"of entry {end - 1}")
        del self.entries[:end - self.start_offset]
        self._voter_history = [(o, v) for o, v in self._voter_history if o >= end]
        self.start_offset = end
        self.snapshot = snapshot
        self._epochs = [(snapshot.snapshot_id.epoch, end)] + [
            (e, first) for e, first in self._epochs
            if first >= end and e > snapshot.snapshot_id.epoch]

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """A follower replaces its whole log by a snapshot fetched from the leader."""
        self.entries = []
        self._voter_history = []
        self.snapshot = snapshot
        self.start_offset = snapshot.snapshot_id.end_offset
        self._epochs = [(snapshot.snapshot_id.epoch, self.start_offset)]
