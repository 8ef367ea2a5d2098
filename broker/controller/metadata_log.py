"""The KRaft metadata log on disk: DATA_DIR/__cluster_metadata-0/ (Kafka's KafkaMetadataLog
with its FileQuorumStateStore and snapshot files).

Owns: `MetadataLogStore` -- recovery of the directory at start-up (the election state, the
latest readable snapshot, the entries above it, as a `RaftLog` to hand to `RaftNode`) and the
durable side of the node's log effects (`persist_election`, `append`, `truncate_to`,
`install_snapshot`, `take_snapshot`); and the snapshot file format (`write_snapshot_file`,
`read_snapshot_file`), which `minibroker dump-log --cluster-metadata` reads too. Plain
synchronous file I/O through the storage seam (broker/storage, the broker's `fs`): no
trio, no clock; the runtime calls it from a worker thread or accepts the blocking fsync.

The directory holds:

    quorum-state                                 the ElectionState (quorum_state.encode),
                                                 replaced atomically: tmp, fsync, rename
    <base:020d>.log                              ONE segment: the entries from `base` on, one
                                                 RecordBatch v2 per entry (raft_batches)
    <end_offset:020d>-<epoch:010d>.checkpoint    a snapshot, at most the latest 2

A snapshot file is, all integers big-endian:

    magic       4 bytes  b"MBMS"
    version     int16    0
    end_offset  int64    the SnapshotId
    epoch       int32
    data_size   int64    must be exactly the file's size minus the 30-byte header
    crc         uint32   CRC-32C of the 26 bytes before it and of the data
    data        data_size bytes, the image (opaque here)
    voters      version 1 only: the rest of the file, the VotersRecord of the voter set at
                the snapshot's end (a dynamic quorum's, KIP-853), covered by the CRC too

A static quorum's snapshots stay version 0, byte for byte what they were.

Why one segment, rewritten rather than rolled: the metadata log is small (the image is
snapshotted), and one file makes truncation a single ftruncate at a remembered position.
The segment keeps entries from the end offset of the OLDER of the two retained snapshots
(from its base while only one exists): if the newest snapshot is found corrupt at start-up,
the older one plus those entries rebuild the same log. The `RaftLog` starts at the newest
readable snapshot; entries below it stay in the file only as that fallback.

Crash safety: a segment is replaced by writing `<new base>.log.tmp`, fsync, rename, fsync
the directory, then unlinking the old segment; recovery keeps the segment with the largest
base (a renamed one is complete) and deletes the others and any `*.tmp`. A snapshot file is
written as `*.checkpoint.part` and renamed the same way. An append is fsynced before
`append` returns (KafkaRaftClient flushes before it answers a fetch or a vote).

At start-up a segment tail that is torn (a batch cut short), fails its CRC, or does not
follow on from the entry before it (offset + 1, epoch not lower) is cut off, with a warning
naming the bytes dropped. A segment that does not continue the latest readable snapshot
(it starts above its end offset, ends below it, or diverges from it: the entry at
end_offset - 1 has another epoch, as when an install was interrupted) is replaced by an
empty one starting at the snapshot (Kafka's truncateFullyAndStartAt), with a warning. A
corrupt snapshot is skipped, with a warning, for an older one; when none is readable, or
the quorum-state does not decode, `open` raises `MetadataLogError` rather than guess.
Lengths read from disk are checked against the file's size before anything is read or
allocated from them.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from crc32c import crc32c

from broker.controller import quorum_state
from broker.controller.quorum_state import ElectionState
from broker.controller.raft_batches import batches_to_entries, entry_to_batch
from broker.controller.raft_log import Entry, RaftLog, Snapshot, SnapshotId
from broker.controller.voter_set import VoterSetError, decode_voters, encode_voters
from broker.storage import REAL, FileHandle, FileSystem, read_file, write_atomically
from protocol.batch_walk import CORRUPT, BatchWalk
from broker import planted

log = logging.getLogger("minibroker.controller.metadata_log")

METADATA_LOG_DIR = "__cluster_metadata-0"
QUORUM_STATE_FILE = "quorum-state"
SNAPSHOTS_KEPT = 2

SNAPSHOT_MAGIC = b"MBMS"
SNAPSHOT_VERSION = 0
SNAPSHOT_VERSION_VOTERS = 1
_SNAPSHOT_HEAD = struct.Struct(">4shqiq")  # magic, version, end_offset, epoch, data_size
_SNAPSHOT_CRC = struct.Struct(">I")
SNAPSHOT_HEADER_SIZE = _SNAPSHOT_HEAD.size + _SNAPSHOT_CRC.size  # 30

SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_LEFTOVER_SUFFIXES = (".tmp", ".part")


class MetadataLogError(Exception):
    """The directory cannot give a log that is safe to run on (an unreadable quorum-state,
    no readable snapshot although snapshots exist)."""


class SnapshotError(MetadataLogError):
    """A snapshot file that is not one this module wrote whole (bad size, magic, CRC)."""


# -- names and small helpers -----------------------------------------------------------------

def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def snapshot_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}.checkpoint"


def metadata_log_dir(data_dir: str | os.PathLike) -> Path:
    return Path(data_dir) / METADATA_LOG_DIR


def _files(directory: Path, fs: FileSystem) -> list[Path]:
    return [p for name in fs.listdir(str(directory))
            if not fs.isdir(str(p := Path(directory) / name))]


def list_segments(directory: Path, fs: FileSystem = REAL) -> list[tuple[int, Path]]:
    """(base offset, path) of every segment file, lowest base first."""
    return sorted((int(m.group(1)), p) for p in _files(directory, fs)
                  if (m := SEGMENT_NAME.match(p.name)))


def list_snapshots(directory: Path, fs: FileSystem = REAL) -> list[tuple[SnapshotId, Path]]:
    """(id named by the file, path) of every snapshot file, oldest first."""
    return sorted(((SnapshotId(int(m.group(1)), int(m.group(2))), p)
                   for p in _files(directory, fs)
                   if (m := SNAPSHOT_NAME.match(p.name))),
                  key=lambda item: (item[0].end_offset, item[0].epoch))


# -- snapshot files --------------------------------------------------------------------------

def encode_snapshot(snapshot: Snapshot) -> bytes:
    sid = snapshot.snapshot_id
    version = SNAPSHOT_VERSION if snapshot.voters is None else SNAPSHOT_VERSION_VOTERS
    voters = b"" if snapshot.voters is None else encode_voters(snapshot.voters)
    head = _SNAPSHOT_HEAD.pack(SNAPSHOT_MAGIC, version, sid.end_offset, sid.epoch,
                               len(snapshot.data))
    crc = crc32c(voters, crc32c(snapshot.data, crc32c(head)))
    return head + _SNAPSHOT_CRC.pack(crc) + snapshot.data + voters


def write_snapshot_file(directory: Path, snapshot: Snapshot, fs: FileSystem = REAL) -> Path:
    path = directory / snapshot_name(snapshot.snapshot_id)
    write_atomically(path, encode_snapshot(snapshot), suffix=".part", fs=fs)
    return path


def read_snapshot_file(path: str | os.PathLike, fs: FileSystem = REAL) -> Snapshot:
    """The snapshot a file holds; SnapshotError unless it is whole, its CRC matches and the
    id in it is the one its name gives."""
    path = Path(path)
    try:
        f = fs.open(str(path), create=False)
        try:
            size = f.size()
            if size < SNAPSHOT_HEADER_SIZE:
                raise SnapshotError(f"{path.name}: {size} bytes, shorter than the "
                                    f"{SNAPSHOT_HEADER_SIZE}-byte header")
            header = f.pread(SNAPSHOT_HEADER_SIZE, 0)
            if len(header) != SNAPSHOT_HEADER_SIZE:
                raise SnapshotError(f"{path.name}: the file shrank while it was read")
            magic, version, end_offset, epoch, data_size = _SNAPSHOT_HEAD.unpack_from(header)
            (crc,) = _SNAPSHOT_CRC.unpack_from(header, _SNAPSHOT_HEAD.size)
            if magic != SNAPSHOT_MAGIC or version not in (SNAPSHOT_VERSION,
                                                          SNAPSHOT_VERSION_VOTERS):
                raise SnapshotError(f"{path.name}: not a snapshot file (magic {magic!r}, "
                                    f"version {version})")
            # the size is checked against the file before anything is read from it
            body_size = size - SNAPSHOT_HEADER_SIZE
            if data_size != body_size if version == SNAPSHOT_VERSION else not (
                    0 <= data_size < body_size):
                raise SnapshotError(f"{path.name}: header says {data_size} bytes of data, the "
                                    f"file holds {body_size}")
            body = f.pread(body_size, SNAPSHOT_HEADER_SIZE)
        finally:
            f.close()
    except OSError as e:
        raise SnapshotError(f"{path.name}: cannot read: {e.strerror or e}") from None
    if len(body) != body_size:
        raise SnapshotError(f"{path.name}: the file shrank while it was read")
    data, voters_bytes = body[:data_size], body[data_size:]
    check = crc32c(data, crc32c(header[:_SNAPSHOT_HEAD.size]))
    if version == SNAPSHOT_VERSION_VOTERS:
        check = crc32c(voters_bytes, check)
    if check != crc:
        raise SnapshotError(f"{path.name}: CRC-32C does not match")
    voters = None
    if version == SNAPSHOT_VERSION_VOTERS:
        try:
            voters = decode_voters(voters_bytes)
        except VoterSetError as e:
            raise SnapshotError(f"{path.name}: {e}") from None
    sid = SnapshotId(end_offset, epoch)
    m = SNAPSHOT_NAME.match(path.name)
    if m and SnapshotId(int(m.group(1)), int(m.group(2))) != sid:
        raise SnapshotError(f"{path.name}: holds snapshot {sid}, not the one its name gives")
    return Snapshot(sid, data, voters)


# -- segment scanning ------------------------------------------------------------------------

@dataclass
class ScannedSegment:
    """The entries of a segment that can be trusted, and where the rest begins."""
    entries: list[Entry]
    positions: list[int]  # file position of each entry
    valid_bytes: int  # [0, valid_bytes) holds exactly `entries`
    size: int
    problem: str | None  # why the scan stopped before `size`


def scan_segment(f: FileHandle, base_offset: int, size: int) -> ScannedSegment:
    """Walk a segment's batches from the start: whole, CRC-valid, each the entry after the
    one before (offset + 1, epoch not lower, the first at `base_offset`)."""
    def read(position: int, n: int) -> bytes:
        return f.pread(n, position)

    entries: list[Entry] = []
    positions: list[int] = []
    problem: str | None = None
    walk = BatchWalk(read, 0, size)
    valid = 0
    for pos, header in walk:
        data = bytes(walk.batch(pos, header))
        found = batches_to_entries(data) if len(data) == header.size else []
        if len(found) != 1:
            problem = f"a corrupt batch at position {pos} (CRC or records)"
            break
        entry = found[0]
        expected = entries[-1].offset + 1 if entries else base_offset
        if entry.offset != expected:
            problem = f"the entry at position {pos} has offset {entry.offset}, not {expected}"
            break
        if entries and entry.epoch < entries[-1].epoch:
            problem = (f"the entry at offset {entry.offset} has epoch {entry.epoch}, below "
                       f"{entries[-1].epoch}")
            break
        entries.append(entry)
        positions.append(pos)
        valid = pos + header.size
    else:
        stop = walk.stop
        assert stop is not None
        if stop.position < size:
            problem = (f"a corrupt batch header at position {stop.position} ({stop.problem})"
                       if stop.reason == CORRUPT else
                       f"a torn batch at position {stop.position}")
    return ScannedSegment(entries, positions, valid, size, problem)


# -- the store -------------------------------------------------------------------------------

class MetadataLogStore:
    """The __cluster_metadata-0 directory of one node. `open` recovers it; `election` and
    `raft_log` are what to build the `RaftNode` from. The node keeps its `RaftLog` in step
    itself: the methods here only mirror its effects onto disk (they never touch
    `raft_log`), each durable before it returns."""

    def __init__(self, directory: Path, election: ElectionState | None, raft_log: RaftLog,
                 segment_base: int, positions: list[int], segment_size: int,
                 fs: FileSystem = REAL):
        self.directory = directory
        self.fs = fs
        self.election = election
        self.raft_log = raft_log
        self._base = segment_base  # offset of the segment's first entry
        self._positions = positions  # offset - _base -> file position
        self._snapshot_end = raft_log.start_offset
        self._file: FileHandle | None = fs.open(str(self._segment_path()), append=True)
        self._size = segment_size

    # -- recovery ---------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str | os.PathLike, fs: FileSystem = REAL) -> "MetadataLogStore":
        directory = Path(directory)
        fs.makedirs(str(directory))
        for p in _files(directory, fs):
            if p.name.endswith(_LEFTOVER_SUFFIXES):
                log.info("%s: deleting %s, left by an interrupted write", directory, p.name)
                fs.remove(str(p))
        election = cls._load_election(directory, fs)
        snapshot = cls._load_snapshot(directory, fs)
        snap_end = snapshot.snapshot_id.end_offset if snapshot else 0

        segments = list_segments(directory, fs)
        for _, stale in segments[:-1]:  # a replacement that was renamed into place won
            log.info("%s: deleting %s, replaced by %s", directory, stale.name,
                     segments[-1][1].name)
            fs.remove(str(stale))
        if segments:
            base, path = segments[-1]
        else:
            base, path = snap_end, directory / segment_name(snap_end)
            fs.open(str(path)).close()
            fs.fsync_dir(str(directory))

        f = fs.open(str(path), create=False)
        try:
            size = f.size()
            scan = scan_segment(f, base, size)
            keep = scan.valid_bytes
            if scan.problem is not None:
                log.warning("%s: dropping %d bytes at position %d of %s: %s", directory,
                            size - keep, keep, path.name, scan.problem)
            entries, positions = scan.entries, scan.positions
            if keep < size:
                f.truncate(keep)
                f.fsync()
        finally:
            f.close()
        end = base + len(entries)

        # Does the segment continue the snapshot? Not when it starts above it or ends below
        # it, nor when the entry before the snapshot's end has another epoch or the one at
        # it a lower epoch (an install of a leader's snapshot was interrupted: the old log
        # diverges). Then, as Kafka's truncateFullyAndStartAt, the log restarts empty there.
        reason = None
        if base > snap_end:
            reason = f"it starts at {base}, above"
        elif end < snap_end:
            reason = f"it ends at {end}, below"
        elif snapshot is not None and base < snap_end:
            epoch = entries[snap_end - 1 - base].epoch
            if epoch != snapshot.snapshot_id.epoch:
                reason = (f"its entry {snap_end - 1} has epoch {epoch}, not the snapshot's "
                          f"{snapshot.snapshot_id.epoch}, at")
        if reason is None and snapshot is not None and snap_end < end and (
                entries[snap_end - base].epoch < snapshot.snapshot_id.epoch):
            reason = f"its entry {snap_end} has an epoch below the snapshot's, at"
        if reason is not None:
            if entries:
                log.warning("%s: dropping %s (offsets %d-%d, %d bytes): %s the snapshot's "
                            "end %d; the log restarts empty there", directory, path.name,
                            base, end - 1, keep, reason, snap_end)
            new_path = directory / segment_name(snap_end)
            write_atomically(new_path, b"", fs=fs)
            if new_path != path:
                fs.remove(str(path))
                fs.fsync_dir(str(directory))
            return cls(directory, election, RaftLog((), snapshot), snap_end, [], 0, fs)
        store_entries = entries[snap_end - base:]
        return cls(directory, election, RaftLog(store_entries, snapshot), base, positions,
                   keep, fs)

    @staticmethod
    def _load_election(directory: Path, fs: FileSystem) -> ElectionState | None:
        path = directory / QUORUM_STATE_FILE
        try:
            data = read_file(path, fs=fs)
        except FileNotFoundError:
            return None
        try:
            return quorum_state.decode(data)
        except quorum_state.QuorumStateError as e:
            # never guess: a voter that forgot its vote could vote twice in one epoch
            raise MetadataLogError(f"{path}: {e}") from None

    @staticmethod
    def _load_snapshot(directory: Path, fs: FileSystem) -> Snapshot | None:
        found = list_snapshots(directory, fs)
        for i, (_, path) in enumerate(reversed(found)):
            try:
                snapshot = read_snapshot_file(path, fs)
            except SnapshotError as e:
                if i + 1 == len(found):
                    raise MetadataLogError(f"{directory}: no readable snapshot: {e}") from None
                log.warning("%s: ignoring snapshot %s, falling back to an older one: %s",
                            directory, path.name, e)
                continue
            return snapshot
        return None

    # -- reading ----------------------------------------------------------------------------

    @property
    def segment_base(self) -> int:
        return self._base

    @property
    def end_offset(self) -> int:
        return self._base + len(self._positions)

    @property
    def snapshot_end_offset(self) -> int:
        return self._snapshot_end

    def _segment_path(self, base: int | None = None) -> Path:
        return self.directory / segment_name(self._base if base is None else base)

    def _handle(self) -> FileHandle:
        if self._file is None:
            raise ValueError("the metadata log store is closed")
        return self._file

    # -- the node's effects -----------------------------------------------------------------

    def persist_election(self, state: ElectionState) -> None:
        write_atomically(self.directory / QUORUM_STATE_FILE, quorum_state.encode(state),
                         fs=self.fs)
        self.election = state

    def append(self, entries: Iterable[Entry]) -> None:
        items = list(entries)
        if not items:
            return
        for i, entry in enumerate(items):
            if entry.offset != self.end_offset + i:
                raise ValueError(f"entry at {entry.offset} appended at end offset "
                                 f"{self.end_offset + i}")
        batches = [entry_to_batch(e) for e in items]
        f = self._handle()
        try:
            f.append(b"".join(batches))
            if not planted.on("metadata-fsync-skipped"):
                f.fsync()
        except OSError:
            # a full disk: cut back what part of the write landed, so that the file and
            # the positions agree; the caller learns the append failed
            try:
                f.truncate(self._size)
            except OSError:
                pass
            raise
        for batch in batches:
            self._positions.append(self._size)
            self._size += len(batch)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries at and above `offset`."""
        if offset < self._snapshot_end:
            raise ValueError(f"cannot truncate to {offset}, below log start "
                             f"{self._snapshot_end}")
        if offset >= self.end_offset:
            return
        cut = self._positions[offset - self._base]
        f = self._handle()
        f.truncate(cut)
        f.fsync()
        del self._positions[offset - self._base:]
        self._size = cut

    def take_snapshot(self, snapshot: Snapshot) -> None:
        """Store the snapshot, keep the latest two, and drop the entries below the older
        of those two (see the module docstring)."""
        end = snapshot.snapshot_id.end_offset
        if not self._snapshot_end < end <= self.end_offset:
            raise ValueError(f"snapshot end {end} outside ({self._snapshot_end}, "
                             f"{self.end_offset}]")
        write_snapshot_file(self.directory, snapshot, self.fs)
        self._snapshot_end = end
        kept = self._prune_snapshots()
        if len(kept) == SNAPSHOTS_KEPT and kept[0].end_offset > self._base:
            self._rewrite_segment(kept[0].end_offset)

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by `snapshot` (a follower too far behind its leader)."""
        write_snapshot_file(self.directory, snapshot, self.fs)
        self._snapshot_end = snapshot.snapshot_id.end_offset
        self._prune_snapshots()
        self._replace_segment(self._snapshot_end, b"", [])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "MetadataLogStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _prune_snapshots(self) -> list[SnapshotId]:
        found = list_snapshots(self.directory, self.fs)
        for _, path in found[:-SNAPSHOTS_KEPT]:
            self.fs.remove(str(path))
        if len(found) > SNAPSHOTS_KEPT:
            self.fs.fsync_dir(str(self.directory))
        return [sid for sid, _ in found[-SNAPSHOTS_KEPT:]]

    def _rewrite_segment(self, new_base: int) -> None:
        """Keep the entries from `new_base` on, copied byte for byte into a new segment."""
        cut = self._positions[new_base - self._base] if new_base < self.end_offset else self._size
        self._handle()  # still open
        src = self.fs.open(str(self._segment_path()), create=False)
        try:
            data = src.pread(self._size - cut, cut)
        finally:
            src.close()
        if len(data) != self._size - cut:
            raise OSError(f"{self._segment_path()} shrank under the store")
        positions = [p - cut for p in self._positions[new_base - self._base:]]
        self._replace_segment(new_base, data, positions)

    def _replace_segment(self, new_base: int, data: bytes, positions: list[int]) -> None:
        old = self._segment_path()
        new = self._segment_path(new_base)
        self.close()
        write_atomically(new, data, fs=self.fs)
        if old != new:
            self.fs.remove(str(old))
            self.fs.fsync_dir(str(self.directory))
        self._base, self._positions, self._size = new_base, positions, len(data)
        self._file = self.fs.open(str(new), append=True)
