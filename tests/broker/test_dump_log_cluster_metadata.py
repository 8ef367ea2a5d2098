"""`minibroker dump-log --cluster-metadata`: a __cluster_metadata-0 directory written by
broker.controller.metadata_log, dumped as text and JSON: the quorum-state, the snapshots,
each entry and its decoded metadata records, and what is wrong (a torn tail, an
undecodable record, a corrupt snapshot)."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest

from broker.controller.image import MetadataImage
from broker.controller.metadata_log import MetadataLogStore
from broker.controller.quorum_state import ElectionState
from broker.controller.raft_batches import pack_records
from broker.controller.raft_log import Entry, Snapshot, SnapshotId
from broker.controller.snapshot import decode_snapshot, encode_snapshot
from protocol.metadata_records import MetadataRecordType as T, encode_metadata_record
from cli.main import build_parser
from tools.dump_log import dump, main

TOPIC_ID = uuid.UUID(int=7)
TOPIC_ID_B64 = "AAAAAAAAAAAAAAAAAAAABw"  # as Kafka prints a Uuid
SEGMENT = "00000000000000000000.log"
SNAPSHOT = "00000000000000000002-0000000001.checkpoint"


def topic_entry(offset: int, epoch: int) -> Entry:
    return Entry(offset, epoch, pack_records([
        encode_metadata_record(T.TOPIC_RECORD, 0, {"name": "orders", "topic_id": TOPIC_ID}),
        encode_metadata_record(T.PARTITION_RECORD, 0, {
            "partition_id": 0, "topic_id": TOPIC_ID, "replicas": [1, 2], "isr": [1],
            "leader": 1}),
    ]))


def fence_entry(offset: int, epoch: int) -> Entry:
    return Entry(offset, epoch, pack_records([
        encode_metadata_record(T.FENCE_BROKER_RECORD, 0, {"id": 2, "epoch": 5})]))


def write_metadata_dir(data_dir: Path, *, snapshot: bool = False) -> Path:
    directory = data_dir / "__cluster_metadata-0"
    with MetadataLogStore.open(directory) as store:
        store.persist_election(ElectionState(3, 1, 1, (1, 2, 3)))
        store.append([Entry(0, 1, b"", control=True), topic_entry(1, 1), fence_entry(2, 3)])
        if snapshot:  # the image of entries 0 and 1: the topic and its partition
            store.take_snapshot(Snapshot(SnapshotId(2, 1), snapshot_data()))
    return directory


def snapshot_data() -> bytes:
    image = MetadataImage.EMPTY.replay(decode_snapshot(topic_entry(1, 1).record))
    return encode_snapshot(image)


def run_dump(*paths, **options) -> list[str]:
    out = io.StringIO()
    dump([str(p) for p in paths], out=out, cluster_metadata=True, **options)
    return out.getvalue().splitlines()


def test_a_data_dir_dumps_quorum_state_snapshots_and_entries(tmp_path):
    directory = write_metadata_dir(tmp_path, snapshot=True)
    lines = run_dump(tmp_path)
    orders = [
        '|   payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"orders",'
        f'"topicId":"{TOPIC_ID_B64}"}}}}',
        '|   payload: {"type":"PARTITION_RECORD","version":0,"data":{"partitionId":0,'
        f'"topicId":"{TOPIC_ID_B64}","replicas":[1,2],"isr":[1],"removingReplicas":[],'
        '"addingReplicas":[],"leader":1,"leaderEpoch":-1,"partitionEpoch":-1,'
        '"leaderRecoveryState":0}}']
    # the snapshot writes the partition at the version the controller writes (v2: KIP-966's
    # eligible leader replicas, none here)
    snapshot_orders = [orders[0], orders[1].replace('"version":0', '"version":2').replace(
        '"leaderRecoveryState":0}}',
        '"directories":[],"leaderRecoveryState":0,"eligibleLeaderReplicas":null,'
        '"lastKnownElr":null}}')]
    assert lines[:7] == [
        f"Dumping {directory}",
        "Quorum state: leaderEpoch: 3 leaderId: 1 votedId: 1 voters: [1, 2, 3]",
        f"Snapshot {SNAPSHOT}: endOffset: 2 epoch: 1 size: {len(snapshot_data())} "
        "isvalid: true",
        *snapshot_orders,  # the snapshot's records: the image they rebuild
        f"Dumping {directory / SEGMENT}",
        "Log starting offset: 0",
    ]
    assert lines[7].startswith("baseOffset: 0 lastOffset: 0 count: 1 ")
    assert " isControl: true " in lines[7] and lines[7].endswith(" isvalid: true")
    entry_lines = [line for line in lines[7:] if line.startswith("|")]
    assert entry_lines == [
        "| offset: 0 epoch: 1 isControl: true LeaderChange",
        "| offset: 1 epoch: 1 isControl: false records: 2",
        *orders,
        "| offset: 2 epoch: 3 isControl: false records: 1",
        '|   payload: {"type":"FENCE_BROKER_RECORD","version":0,"data":{"id":2,"epoch":5}}',
    ]
    # the __cluster_metadata-0 directory itself gives the same dump
    assert run_dump(directory) == lines
    [snapshot] = [o for o in map(json.loads, run_dump(directory, as_json=True))
                  if o["type"] == "snapshot"]
    assert [r["type"] for r in snapshot["records"]] == ["TOPIC_RECORD", "PARTITION_RECORD"]


def test_json(tmp_path):
    directory = write_metadata_dir(tmp_path)
    objects = [json.loads(line) for line in run_dump(directory, as_json=True)]
    assert [o["type"] for o in objects] == [
        "directory", "quorumState", "file", "batch", "entry", "batch", "entry", "batch",
        "entry"]
    assert objects[1] == {"type": "quorumState", "file": str(directory / "quorum-state"),
                          "leaderEpoch": 3, "leaderId": 1, "votedId": 1, "voters": [1, 2, 3]}
    entries = [o for o in objects if o["type"] == "entry"]
    assert [(e["offset"], e["epoch"], e["isControl"]) for e in entries] == [
        (0, 1, True), (1, 1, False), (2, 3, False)]
    assert entries[2]["records"] == [
        {"type": "FENCE_BROKER_RECORD", "version": 0, "data": {"id": 2, "epoch": 5}}]
    assert entries[1]["records"][0]["data"] == {"name": "orders", "topicId": TOPIC_ID_B64}


def test_a_segment_file_alone_and_problems(tmp_path):
    directory = write_metadata_dir(tmp_path)
    segment = directory / SEGMENT
    with MetadataLogStore.open(directory) as store:
        # a record whose framing lies, and one of an unknown type
        store.append([Entry(3, 3, b"\x01\x05xx"),
                      Entry(4, 3, pack_records([b"\x01\x63\x00"]))])
    with open(segment, "ab") as f:
        f.write(b"\x00" * 20)  # a torn tail
    lines = run_dump(segment)
    assert lines[0] == f"Dumping {segment}"  # a lone segment: no quorum-state, no snapshots
    assert "|   error: a metadata record runs past its entry" in lines
    assert "|   error: unknown metadata record type 99" in lines
    assert lines[-1].startswith(f"Found 20 invalid bytes at the end of {SEGMENT}")


def test_missing_quorum_state_and_a_corrupt_snapshot(tmp_path):
    directory = write_metadata_dir(tmp_path, snapshot=True)
    (directory / "quorum-state").unlink()
    snapshot = directory / SNAPSHOT
    data = bytearray(snapshot.read_bytes())
    data[-1] ^= 1
    snapshot.write_bytes(bytes(data))
    lines = run_dump(directory)
    assert lines[1] == "Quorum state: none"
    assert lines[2] == f"Snapshot {SNAPSHOT}: isvalid: false {SNAPSHOT}: CRC-32C does not match"
    (directory / "quorum-state").write_bytes(b"[]")
    assert run_dump(directory)[1] == ("Quorum state: unreadable: quorum-state is not a JSON "
                                      "object")


def test_cli(tmp_path, capsys):
    write_metadata_dir(tmp_path)
    args = build_parser().parse_args(["dump-log", "--cluster-metadata", str(tmp_path)])
    assert args.cluster_metadata
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("Quorum state: leaderEpoch: 3")
    args = build_parser().parse_args(["dump-log", "--cluster-metadata",
                                      str(tmp_path / "nope")])
    assert main(args) == 1
    assert "no such file or directory" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    args = build_parser().parse_args(["dump-log", "--cluster-metadata",
                                      str(tmp_path / "other")])
    assert main(args) == 1
    assert "neither a data directory" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [[], ["--json"]])
def test_an_empty_metadata_dir(tmp_path, flag):
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    lines = run_dump(tmp_path, as_json=bool(flag))
    assert len(lines) == 2  # the directory and its (absent) quorum-state


def test_the_controllers_no_op_records_are_printed(tmp_path):
    """The active controller's NoOpRecord (KIP-835), one each idle interval, is an entry of
    its own like any other: printed with its type and empty data."""
    directory = tmp_path / "__cluster_metadata-0"
    with MetadataLogStore.open(directory) as store:
        store.append([Entry(0, 1, b"", control=True), Entry(1, 1, pack_records([
            encode_metadata_record(T.NO_OP_RECORD, 0, {})]))])
    lines = run_dump(tmp_path)
    assert '|   payload: {"type":"NO_OP_RECORD","version":0,"data":{}}' in lines, lines


def test_a_voters_record_and_a_snapshot_with_voters_are_dumped(tmp_path):
    """A dynamic quorum's VotersRecord entry (KIP-853) prints its voters; a snapshot that
    carries the voter set (file version 1) reads back with it."""
    from broker.controller.metadata_log import read_snapshot_file
    from broker.controller.voter_set import Endpoint, Voter, VoterSet

    voters = VoterSet.of([Voter(0, uuid.UUID(int=0), (Endpoint("CONTROLLER", "h0", 9192),)),
                          Voter(3, TOPIC_ID, (Endpoint("CONTROLLER", "h3", 9195),))])
    directory = tmp_path / "__cluster_metadata-0"
    with MetadataLogStore.open(directory) as store:
        store.append([Entry(0, 1, b"", control=True), Entry(1, 1, b"", True, voters),
                      topic_entry(2, 1)])
        store.take_snapshot(Snapshot(SnapshotId(3, 1), snapshot_data(), voters))
    snapshot = read_snapshot_file(directory / "00000000000000000003-0000000001.checkpoint")
    assert snapshot.voters == voters and snapshot.data == snapshot_data()
    lines = run_dump(directory / SEGMENT)
    line = next(x for x in lines if x.startswith("| offset: 1 "))
    assert line.startswith("| offset: 1 epoch: 1 isControl: true KRaftVoters: ")
    assert '"voterId":3,"voterDirectoryId":"%s"' % TOPIC_ID_B64 in line
    assert '"endpoints":["CONTROLLER://h3:9195"]' in line
    entries = [json.loads(x) for x in run_dump(directory / SEGMENT, as_json=True)]
    [voters_entry] = [e for e in entries if e.get("voters")]
    assert [v["voterId"] for v in voters_entry["voters"]] == [0, 3]
