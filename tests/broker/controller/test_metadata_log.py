"""The metadata log directory across restarts: appends, torn and corrupt tails, truncation,
the quorum-state file, snapshots (taken, installed, corrupt) and a single-voter RaftNode
restarted on the store it wrote."""

from __future__ import annotations

import logging
import os
import random
import uuid
from collections import Counter
from pathlib import Path

import pytest

from broker.controller.metadata_log import (
    MetadataLogError, MetadataLogStore, list_segments, list_snapshots, read_snapshot_file,
    snapshot_name, write_snapshot_file,
)
from broker.controller.quorum_state import ElectionState
from broker.controller.raft import (AppendEntries, InstallSnapshot, PersistElectionState,
                                    QuorumConfig, RaftNode, SnapshotTaken, TruncateTo)
from broker.controller.raft_batches import entry_to_batch, pack_records
from broker.controller.raft_log import Entry, RaftLog, Snapshot, SnapshotId
from protocol.metadata_records import MetadataRecordType, encode_metadata_record
from tests.broker.controller.raft_sim import SimConfig, Simulation


def entries(epochs: list[int], start: int = 0) -> list[Entry]:
    return [Entry(start + i, e, b"record %d" % (start + i), control=(i == 0 and start == 0))
            for i, e in enumerate(epochs)]


def the_segment(directory: Path) -> Path:
    segments = list_segments(directory)
    assert len(segments) == 1, segments
    return segments[0][1]


def reopen(directory: Path) -> MetadataLogStore:
    return MetadataLogStore.open(directory)


def test_a_new_directory_is_an_empty_log(tmp_path):
    with MetadataLogStore.open(tmp_path / "m") as store:
        assert store.election is None
        assert store.raft_log.end_offset == 0 and store.raft_log.snapshot is None
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["00000000000000000000.log"]


def test_append_then_reopen_gives_the_same_entries(tmp_path):
    written = entries([1, 1, 2, 2, 2, 5])
    with MetadataLogStore.open(tmp_path) as store:
        store.append(written[:2])
        store.append(written[2:])
        assert store.end_offset == 6
    with reopen(tmp_path) as store:
        assert store.raft_log.entries == written
        assert store.raft_log.last_fetched_epoch == 5
        assert store.raft_log.end_offset_for_epoch(2) == SnapshotId(5, 2)


def test_append_must_continue_the_log(tmp_path):
    with MetadataLogStore.open(tmp_path) as store:
        store.append(entries([1, 1]))
        with pytest.raises(ValueError):
            store.append(entries([1], start=3))
    with reopen(tmp_path) as store:
        assert store.raft_log.end_offset == 2


@pytest.mark.parametrize("damage", ["cut mid-batch", "flip a byte", "garbage header"])
def test_a_damaged_tail_is_cut_to_the_last_whole_entry(tmp_path, caplog, damage):
    written = entries([1, 1, 1, 2])
    with MetadataLogStore.open(tmp_path) as store:
        store.append(written)
    path = the_segment(tmp_path)
    data = path.read_bytes()
    last = len(entry_to_batch(written[-1]))
    good = len(data) - last
    if damage == "cut mid-batch":
        path.write_bytes(data[:-last // 2])
    elif damage == "flip a byte":
        broken = bytearray(data)
        broken[-3] ^= 0xFF  # inside the last record: its CRC no longer matches
        path.write_bytes(bytes(broken))
    else:
        path.write_bytes(data[:good] + b"\x00" * 70)
    with caplog.at_level(logging.WARNING, logger="minibroker.controller.metadata_log"):
        store = reopen(tmp_path)
    with store:
        assert store.raft_log.entries == written[:-1]
        assert path.stat().st_size == good
        store.append(written[-1:])  # the log goes on where the whole entries end
    assert any("dropping" in r.message and f"position {good}" in r.message
               for r in caplog.records), caplog.text
    with reopen(tmp_path) as store:
        assert store.raft_log.entries == written


def test_an_entry_out_of_sequence_ends_the_log(tmp_path, caplog):
    with MetadataLogStore.open(tmp_path) as store:
        store.append(entries([1, 2]))
    path = the_segment(tmp_path)
    # a whole, CRC-valid batch, but of a lower epoch than the entry before it
    path.write_bytes(path.read_bytes() + entry_to_batch(Entry(2, 1, b"stale")))
    with caplog.at_level(logging.WARNING, logger="minibroker.controller.metadata_log"):
        store = reopen(tmp_path)
    with store:
        assert [e.epoch for e in store.raft_log.entries] == [1, 2]
    assert "epoch 1, below 2" in caplog.text


def test_truncate_then_append_then_reopen(tmp_path):
    with MetadataLogStore.open(tmp_path) as store:
        store.append(entries([1, 1, 1, 1]))
        store.truncate_to(2)
        store.truncate_to(5)  # above the end: nothing to do
        assert store.end_offset == 2
        store.append([Entry(2, 3, b"new two"), Entry(3, 3, b"new three")])
    with reopen(tmp_path) as store:
        assert [(e.offset, e.epoch, e.record) for e in store.raft_log.entries[2:]] == [
            (2, 3, b"new two"), (3, 3, b"new three")]
        store.truncate_to(0)
    with reopen(tmp_path) as store:
        assert store.raft_log.entries == []


def test_quorum_state_survives_a_restart(tmp_path):
    state = ElectionState(epoch=7, leader_id=2, voted_id=1, voters=(0, 1, 2))
    with MetadataLogStore.open(tmp_path) as store:
        store.persist_election(state)
        assert store.election == state
    assert (tmp_path / "quorum-state").exists()
    assert not list(tmp_path.glob("*.tmp"))
    with reopen(tmp_path) as store:
        assert store.election == state
        store.persist_election(ElectionState(8, -1, -1, (0, 1, 2)))
    with reopen(tmp_path) as store:
        assert store.election == ElectionState(8, -1, -1, (0, 1, 2))


def test_an_unreadable_quorum_state_refuses_to_open(tmp_path):
    (tmp_path / "quorum-state").write_bytes(b'{"leaderEpoch": ')
    with pytest.raises(MetadataLogError, match="quorum-state"):
        MetadataLogStore.open(tmp_path)


def test_leftover_temporary_files_are_deleted(tmp_path):
    with MetadataLogStore.open(tmp_path) as store:
        store.append(entries([1]))
    (tmp_path / "quorum-state.tmp").write_bytes(b"half")
    (tmp_path / "00000000000000000001-0000000001.checkpoint.part").write_bytes(b"half")
    with reopen(tmp_path) as store:
        assert store.raft_log.end_offset == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000000.log"]


# -- snapshots -------------------------------------------------------------------------------

def snapshot_at(end: int, epoch: int) -> Snapshot:
    return Snapshot(SnapshotId(end, epoch), b"image up to %d" % end)


def test_take_snapshot_then_reopen(tmp_path):
    written = entries([1, 1, 2, 2, 2, 3, 3, 3])
    with MetadataLogStore.open(tmp_path) as store:
        store.append(written)
        store.take_snapshot(snapshot_at(3, 2))
        # the only snapshot: the segment still holds everything, as the fallback
        assert store.segment_base == 0
    assert [sid for sid, _ in list_snapshots(tmp_path)] == [SnapshotId(3, 2)]
    with reopen(tmp_path) as store:
        assert store.raft_log.snapshot == snapshot_at(3, 2)
        assert store.raft_log.start_offset == 3
        assert store.raft_log.entries == written[3:]
        store.take_snapshot(snapshot_at(5, 2))
        assert store.segment_base == 3  # entries below the older kept snapshot are gone
        store.take_snapshot(snapshot_at(7, 3))
        assert store.segment_base == 5
        store.append([Entry(8, 4, b"after")])
    assert [sid for sid, _ in list_snapshots(tmp_path)] == [SnapshotId(5, 2), SnapshotId(7, 3)]
    assert the_segment(tmp_path).name == "00000000000000000005.log"
    with reopen(tmp_path) as store:
        assert store.raft_log.snapshot == snapshot_at(7, 3)
        assert store.raft_log.entries == [written[7], Entry(8, 4, b"after")]
        assert store.raft_log.epoch_at(6) == 3


def test_take_snapshot_beyond_the_log_is_refused(tmp_path):
    with MetadataLogStore.open(tmp_path) as store:
        store.append(entries([1, 1]))
        with pytest.raises(ValueError):
            store.take_snapshot(snapshot_at(3, 1))
        with pytest.raises(ValueError):
            store.truncate_to(-1)


def test_install_snapshot_replaces_the_log(tmp_path):
    with MetadataLogStore.open(tmp_path) as store:
        store.append(entries([1, 1, 1]))
        store.install_snapshot(snapshot_at(10, 4))
        assert store.end_offset == 10
        store.append([Entry(10, 4, b"ten"), Entry(11, 5, b"eleven")])
    assert the_segment(tmp_path).name == "00000000000000000010.log"
    with reopen(tmp_path) as store:
        assert store.raft_log.snapshot == snapshot_at(10, 4)
        assert store.raft_log.entries == [Entry(10, 4, b"ten"), Entry(11, 5, b"eleven")]
        store.truncate_to(11)
    with reopen(tmp_path) as store:
        assert store.raft_log.end_offset == 11


def test_an_interrupted_install_keeps_only_what_continues_the_snapshot(tmp_path, caplog):
    # the snapshot file was written, the old segment not yet replaced
    with MetadataLogStore.open(tmp_path) as store:
        store.append(entries([1, 1, 1, 1, 1]))
    write_snapshot_file(tmp_path, snapshot_at(3, 2))  # entry 2 has epoch 1: it diverges
    with caplog.at_level(logging.WARNING, logger="minibroker.controller.metadata_log"):
        store = reopen(tmp_path)
    with store:
        assert store.raft_log.snapshot == snapshot_at(3, 2)
        assert store.raft_log.entries == []
        store.append([Entry(3, 2, b"three")])
    assert "has epoch 1, not the snapshot's 2" in caplog.text
    with reopen(tmp_path) as store:
        assert store.raft_log.entries == [Entry(3, 2, b"three")]


def test_a_snapshot_beyond_the_segment_starts_an_empty_one(tmp_path):
    with MetadataLogStore.open(tmp_path) as store:
        store.append(entries([1, 1]))
    write_snapshot_file(tmp_path, snapshot_at(9, 3))
    with reopen(tmp_path) as store:
        assert store.raft_log.start_offset == 9 and store.raft_log.entries == []
        store.append([Entry(9, 3, b"nine")])
    assert the_segment(tmp_path).name == "00000000000000000009.log"
    with reopen(tmp_path) as store:
        assert store.raft_log.entries == [Entry(9, 3, b"nine")]


def corrupt(path: Path, at: int = -1) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_snapshot_file_round_trip_and_corruption(tmp_path):
    path = write_snapshot_file(tmp_path, snapshot_at(4, 2))
    assert path.name == snapshot_name(SnapshotId(4, 2))
    assert read_snapshot_file(path) == snapshot_at(4, 2)
    for at in (0, 10, 20, 28, -1):
        write_snapshot_file(tmp_path, snapshot_at(4, 2))
        corrupt(path, at)
        with pytest.raises(MetadataLogError):
            read_snapshot_file(path)
    # a size field that promises far more than the file holds is refused before any read
    data = bytearray(path.read_bytes())
    data[18:26] = (2**62).to_bytes(8, "big")
    path.write_bytes(bytes(data))
    with pytest.raises(MetadataLogError, match="header says"):
        read_snapshot_file(path)
    # a file renamed to another id
    write_snapshot_file(tmp_path, snapshot_at(4, 2))
    other = path.with_name(snapshot_name(SnapshotId(5, 2)))
    path.rename(other)
    with pytest.raises(MetadataLogError, match="not the one its name gives"):
        read_snapshot_file(other)


def test_a_corrupt_latest_snapshot_falls_back_to_the_older_one(tmp_path, caplog):
    written = entries([1, 1, 2, 2, 2, 3])
    with MetadataLogStore.open(tmp_path) as store:
        store.append(written)
        store.take_snapshot(snapshot_at(2, 1))
        store.take_snapshot(snapshot_at(4, 2))
    corrupt(tmp_path / snapshot_name(SnapshotId(4, 2)))
    with caplog.at_level(logging.WARNING, logger="minibroker.controller.metadata_log"):
        store = reopen(tmp_path)
    with store:
        # the older snapshot and the entries kept above it give the same log
        assert store.raft_log.snapshot == snapshot_at(2, 1)
        assert store.raft_log.entries == written[2:]
    assert "ignoring snapshot 00000000000000000004-0000000002.checkpoint" in caplog.text


def test_the_only_snapshot_corrupt_is_an_error(tmp_path):
    with MetadataLogStore.open(tmp_path) as store:
        store.append(entries([1, 1, 1]))
        store.take_snapshot(snapshot_at(2, 1))
    corrupt(tmp_path / snapshot_name(SnapshotId(2, 1)), 5)
    with pytest.raises(MetadataLogError, match="no readable snapshot"):
        MetadataLogStore.open(tmp_path)


def test_a_replaced_segment_left_behind_is_deleted(tmp_path):
    # a crash after the new segment was renamed into place, before the old one went
    with MetadataLogStore.open(tmp_path) as store:
        store.append(entries([1, 1, 1, 1]))
        store.take_snapshot(snapshot_at(1, 1))
        store.take_snapshot(snapshot_at(2, 1))
        old = tmp_path / "00000000000000000000.log"
        old.write_bytes(b"".join(entry_to_batch(e) for e in entries([1, 1, 1, 1])))
    with reopen(tmp_path) as store:
        assert store.segment_base == 1
        assert store.raft_log.start_offset == 2 and store.raft_log.end_offset == 4
    assert not old.exists()


# -- a RaftNode on the store -----------------------------------------------------------------

def carry_out(store: MetadataLogStore, effects: list) -> None:
    """What the runtime does with a node's storage effects, in order."""
    for effect in effects:
        if isinstance(effect, PersistElectionState):
            store.persist_election(effect.state)
        elif isinstance(effect, AppendEntries):
            store.append(effect.entries)
        elif isinstance(effect, TruncateTo):
            store.truncate_to(effect.offset)
        elif isinstance(effect, InstallSnapshot):
            store.install_snapshot(effect.snapshot)
        elif isinstance(effect, SnapshotTaken):
            store.take_snapshot(effect.snapshot)


def start_node(store: MetadataLogStore, now_ms: int) -> RaftNode:
    node = RaftNode(0, QuorumConfig(voters=(0,)), random.Random(1), store.election,
                    store.raft_log)
    carry_out(store, node.start(now_ms))
    assert node.is_leader
    return node


def topic_entry(name: str) -> bytes:
    return pack_records([encode_metadata_record(MetadataRecordType.TOPIC_RECORD, 0, {
        "name": name, "topic_id": uuid.UUID(int=len(name))})])


def test_a_single_voter_keeps_its_log_across_restarts(tmp_path):
    with MetadataLogStore.open(tmp_path) as store:
        node = start_node(store, 0)
        first_epoch = node.epoch
        for name in ("a", "bb", "ccc"):
            carry_out(store, node.append(node.epoch, [topic_entry(name)], 10))
        assert node.high_watermark == node.log.end_offset == 4
        carry_out(store, node.create_snapshot(2, b"image of 2"))
        carry_out(store, node.append(node.epoch, [topic_entry("dddd")], 20))
        before = list(node.log.entries), node.log.snapshot, node.election

    with reopen(tmp_path) as store:
        assert (list(store.raft_log.entries), store.raft_log.snapshot, store.election) == before
        node = start_node(store, 100)
        # a restarted leader never leads its old epoch again: a new one, with its control
        # entry after everything it had
        assert node.epoch > first_epoch
        assert node.log.entries[:len(before[0])] == before[0]
        assert node.log.entries[-1].control and node.log.entries[-1].epoch == node.epoch
        carry_out(store, node.append(node.epoch, [topic_entry("eeeee")], 110))
        after = list(node.log.entries), node.election

    with reopen(tmp_path) as store:
        assert (list(store.raft_log.entries), store.election) == after
        assert store.raft_log.snapshot == Snapshot(SnapshotId(2, first_epoch), b"image of 2")
        assert store.raft_log.entries[-1].record == topic_entry("eeeee")


def test_a_log_rebuilt_by_the_store_equals_the_nodes(tmp_path):
    """The epoch cache too: what fetch validation answers must not change over a restart."""
    with MetadataLogStore.open(tmp_path) as store:
        node = start_node(store, 0)
        carry_out(store, node.append(node.epoch, [b"x"], 1))
    for _ in range(2):
        with reopen(tmp_path) as store:
            node = start_node(store, 10)
            carry_out(store, node.append(node.epoch, [b"y"], 11))
            mem = node.log
    with reopen(tmp_path) as store:
        disk = store.raft_log
        assert isinstance(disk, RaftLog)
        for epoch in range(0, node.epoch + 2):
            assert disk.end_offset_for_epoch(epoch) == mem.end_offset_for_epoch(epoch)


# -- the simulated quorum on real stores -----------------------------------------------------

class StoredSimulation(Simulation):
    """The seeded quorum of raft_sim, each node's effects also carried out on a
    MetadataLogStore; every (re)start builds the node from the store reopened from its
    files, which must equal what the simulation's in-memory disk holds."""

    def __init__(self, seed: int, config: SimConfig, root: Path):
        super().__init__(seed, config)
        self.root = root
        self.stores = {i: MetadataLogStore.open(root / str(i)) for i in self.nodes}
        self.reopened = 0
        self.snapshots = 0

    def _apply(self, node_id: int, effects: list, request: tuple | None = None) -> None:
        carry_out(self.stores[node_id], effects)
        self.snapshots += sum(isinstance(e, (SnapshotTaken, InstallSnapshot)) for e in effects)
        super()._apply(node_id, effects, request)

    def _start(self, node_id: int) -> None:
        self.stores[node_id].close()
        store = self.stores[node_id] = MetadataLogStore.open(self.root / str(node_id))
        disk = self.disks[node_id]
        assert (store.election or ElectionState(voters=self.quorum.voters)) == disk.election
        assert store.raft_log.snapshot == disk.log.snapshot
        assert store.raft_log.entries == disk.log.entries
        for epoch in range(disk.log.last_fetched_epoch + 2):
            assert (store.raft_log.end_offset_for_epoch(epoch)
                    == disk.log.end_offset_for_epoch(epoch))
        self.reopened += 1
        super()._start(node_id)

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


@pytest.mark.parametrize("voters,seeds", [(3, range(30)), (5, range(10))])
def test_a_simulated_quorum_restarts_from_its_stores(tmp_path, monkeypatch, voters, seeds):
    # durability is not what this checks, and thousands of fsyncs would take minutes
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    reopened = 0
    counts: Counter = Counter()
    for seed in seeds:
        sim = StoredSimulation(seed, SimConfig(voters=voters), tmp_path / str(seed))
        try:
            result = sim.run()
        finally:
            sim.close()
        reopened += sim.reopened - voters  # not counting the first starts
        counts.update(result.counts)
    # the schedules did restart nodes onto every kind of change to their files
    assert reopened > 0, reopened
    assert all(counts[kind] > 0 for kind in (
        "AppendEntries", "TruncateTo", "SnapshotTaken", "InstallSnapshot")), counts
