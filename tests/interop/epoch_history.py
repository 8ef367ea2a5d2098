"""A partition's leader-epoch history as a real broker process shows it, for the restart
tests (one broker: tests/interop/test_leader_epoch_restarts.py; a cluster:
tests/cluster/test_leader_epoch_restarts.py).

Owns three views that must agree: the epochs stamped on the batches themselves (fetched
from offset 0), the partition's `leader-epoch-checkpoint` on disk, and what
OffsetForLeaderEpoch answers for each epoch.
"""

from __future__ import annotations

from pathlib import Path

from harness.raw import call
from broker.replication.leader_epochs import EpochEntry, entries_from_headers, read_checkpoint
from protocol import messages as m
from protocol.records import iter_batch_headers


def batch_epochs(port: int, topic: str, partition: int = 0) -> list[tuple[int, int]]:
    """(partition leader epoch, base offset) of every batch, as the leader serves them."""
    pairs: list[tuple[int, int]] = []
    offset = 0
    while True:
        body = call(port, m.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 22,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 22}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        answer = body["responses"][0]["partitions"][0]
        assert answer["error_code"] == 0, answer
        data = bytes(answer["records"] or b"")
        headers = [h for _pos, h in iter_batch_headers(data)]
        if not headers:
            return pairs
        pairs += [(h.partition_leader_epoch, h.base_offset) for h in headers]
        offset = headers[-1].last_offset + 1


def checkpoint(data_dir: Path, topic: str, partition: int = 0) -> list[EpochEntry]:
    entries = read_checkpoint(data_dir / f"{topic}-{partition}" / "leader-epoch-checkpoint")
    assert entries is not None, f"no leader-epoch-checkpoint for {topic}-{partition}"
    return entries


def expected_entries(batches: list[tuple[int, int]]) -> list[EpochEntry]:
    """The entries the batches' headers imply: where each epoch wrote its first batch."""
    return entries_from_headers(batches)


def end_offsets(port: int, topic: str, epochs: list[int], partition: int = 0
                ) -> dict[int, tuple[int, int, int]]:
    """epoch -> (error, answered epoch, end offset) from the leader's OffsetForLeaderEpoch,
    asked as a consumer (replica_id -1, current epoch unchecked)."""
    body = call(port, m.OFFSET_FOR_LEADER_EPOCH, 4, {
        "replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "current_leader_epoch": -1, "leader_epoch": e}
            for e in epochs]}]})
    answers = body["topics"][0]["partitions"]
    return {e: (a["error_code"], a["leader_epoch"], a["end_offset"])
            for e, a in zip(epochs, answers)}


def check_history(port: int, data_dir: Path, topic: str, log_end_offset: int,
                  partition: int = 0) -> list[EpochEntry]:
    """The checkpoint keeps an entry for every epoch that wrote (plus at most the current
    one, begun at the log end), and OffsetForLeaderEpoch answers each old epoch's end: the
    start of the next epoch that wrote. Returns the written epochs' entries."""
    written = expected_entries(batch_epochs(port, topic, partition))
    assert written, "no batches"
    on_disk = checkpoint(data_dir, topic, partition)
    assert on_disk[:len(written)] == written, (on_disk, written)
    extra = on_disk[len(written):]
    assert len(extra) <= 1 and all(e.start_offset == log_end_offset for e in extra), extra
    answers = end_offsets(port, topic, [e.epoch for e in written], partition)
    for i, entry in enumerate(written):
        end = written[i + 1].start_offset if i + 1 < len(written) else log_end_offset
        assert answers[entry.epoch] == (0, entry.epoch, end), (entry, answers[entry.epoch])
    return written
