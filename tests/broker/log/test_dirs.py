"""LogDirs (broker/log/dirs.py): several log directories as one -- placement of new
partitions, loading from every directory, per-directory checkpoints, the future-replica
swap of a move between directories and what a crash in the middle of it leaves."""

from __future__ import annotations

import os
import uuid

from broker.log.dirs import LogDirs
from broker.log.manager import (
    FUTURE_DIR_SUFFIX, RECOVERY_POINT_CHECKPOINT, read_checkpoint, read_partition_metadata,
)

from protocol.aborted_txn import AbortedTxn

from .helpers import make_batch

TOPIC_ID = uuid.UUID(int=1234)


def _dirs(tmp_path, n=2, **kwargs) -> tuple[LogDirs, list[str]]:
    paths = [str(tmp_path / f"d{i}") for i in range(n)]
    logs = LogDirs(paths, **kwargs)
    logs.open(now_ms=0)
    return logs, paths


def _fill(log, batches: int, now_ms: int = 0) -> None:
    for i in range(batches):
        log.append(make_batch(3, seed=i), now_ms=now_ms)


def test_new_partitions_go_to_the_directory_with_fewest(tmp_path):
    logs, (d0, d1) = _dirs(tmp_path)
    placed = [os.path.dirname(logs.get_or_create("t", i).directory) for i in range(4)]
    # fewest partitions first; on the same disk the free bytes tie, then log.dirs order
    assert placed == [d0, d1, d0, d1]
    logs.delete_partition("t", 0)
    assert os.path.dirname(logs.get_or_create("u", 0).directory) == d0
    assert logs.partitions() == [("t", 1), ("t", 2), ("t", 3), ("u", 0)]


def test_logs_being_made_count_for_placement(tmp_path):
    logs, (d0, d1) = _dirs(tmp_path)
    made = [logs.make_log("t", i) for i in range(4)]
    assert [os.path.dirname(m.directory) for m in made] == [d0, d1, d0, d1]
    logs.sync_new_logs(made)
    for m in made:
        logs.adopt(m)
    assert logs._pending == {d0: 0, d1: 0}


def test_an_offline_directory_gets_no_new_partition_and_no_checkpoint(tmp_path):
    offline: set[str] = set()
    logs, (d0, d1) = _dirs(tmp_path, is_offline=lambda p: p in offline)
    logs.get_or_create("t", 0)
    offline.add(d1)
    assert [os.path.dirname(logs.get_or_create("t", i).directory) for i in (1, 2)] == [d0, d0]
    assert list(logs.checkpoints()) == [d0]
    offline.add(d0)
    assert logs.choose_dir() is None


def test_every_directory_is_loaded_with_its_own_checkpoints(tmp_path):
    logs, (d0, d1) = _dirs(tmp_path)
    for i in range(2):
        _fill(logs.get_or_create("t", i, topic_id=TOPIC_ID), 2)
    logs.close(broker_epoch=7)
    assert read_checkpoint(os.path.join(d0, RECOVERY_POINT_CHECKPOINT)) == {("t", 0): 6}
    assert read_checkpoint(os.path.join(d1, RECOVERY_POINT_CHECKPOINT)) == {("t", 1): 6}
    again = LogDirs([d0, d1])
    assert again.open(now_ms=0) == []
    assert again.had_clean_shutdown and again.clean_shutdown_broker_epoch == 7
    assert [again.get("t", i).log_end_offset for i in (0, 1)] == [6, 6]
    assert again.dir_of("t", 1) == d1


def test_a_future_replica_swaps_in_with_the_same_batches(tmp_path):
    logs, (d0, d1) = _dirs(tmp_path)
    current = logs.get_or_create("t", 0, topic_id=TOPIC_ID)
    _fill(current, 3)
    future = logs.make_future_log("t", 0, d1, current.config, TOPIC_ID)
    assert os.path.basename(future.directory).endswith(FUTURE_DIR_SUFFIX)
    assert logs.future_dir("t", 0) == d1
    aborted = AbortedTxn(producer_id=7, first_offset=3, last_offset=5, last_stable_offset=3)
    current.append_aborted_txn(aborted)  # (its marker stands at offset 5)
    batches = current.read(0, 1 << 20)
    future.append_as_follower(batches, now_ms=0)
    moved = logs.replace_current_with_future("t", 0)
    assert moved.collect_aborted_txns(0, 9) == [aborted]  # read_committed still skips it
    assert moved.directory == os.path.join(d1, "t-0") and logs.dir_of("t", 0) == d1
    assert moved.read(0, 1 << 20) == batches
    assert moved.log_end_offset == 9 and not os.path.exists(os.path.join(d0, "t-0"))
    assert read_partition_metadata(moved.directory) == TOPIC_ID
    assert logs.futures == {} and not [n for n in os.listdir(d0) if n.startswith("t-0")]
    logs.close()
    again = LogDirs([d0, d1])
    again.open(now_ms=0)
    assert again.dir_of("t", 0) == d1 and again.get("t", 0).log_end_offset == 9


def test_a_crash_between_the_renames_keeps_one_copy(tmp_path):
    """The future directory got the partition's name, the old one is still there: the
    start keeps one (the one with the higher log end offset; equal here) and deletes the
    other, rather than serving two."""
    logs, (d0, d1) = _dirs(tmp_path)
    _fill(logs.get_or_create("t", 0), 2)
    logs.close()
    os.makedirs(os.path.join(d1, "t-0"))
    for name in os.listdir(os.path.join(d0, "t-0")):
        with open(os.path.join(d0, "t-0", name), "rb") as src, \
                open(os.path.join(d1, "t-0", name), "wb") as dst:
            dst.write(src.read())
    again = LogDirs([d0, d1])
    again.open(now_ms=0)
    assert again.partitions() == [("t", 0)] and again.get("t", 0).log_end_offset == 6
    assert [os.path.exists(os.path.join(d, "t-0")) for d in (d0, d1)].count(True) == 1
    assert again.warnings and "both" in again.warnings[0]


def test_an_unfinished_move_resumes_at_start(tmp_path):
    """A future replica found at start is loaded (recovered whole) to go on copying, when
    the partition is in another directory; a stray one (no such partition, or in the
    partition's own directory) is removed."""
    logs, (d0, d1) = _dirs(tmp_path)
    current = logs.get_or_create("t", 0, topic_id=TOPIC_ID)
    _fill(current, 3)
    future = logs.make_future_log("t", 0, d1, current.config, TOPIC_ID)
    future.append_as_follower(current.read(0, 100), now_ms=0)  # one batch of three copied
    future_path = future.directory
    stray = [os.path.join(d1, f"gone-0.{'a' * 32}-future"),
             os.path.join(d0, f"t-0.{'b' * 32}-future")]
    logs.close()
    for path in stray:
        os.makedirs(path)
    again = LogDirs([d0, d1])
    again.open(now_ms=0)
    assert list(again.futures) == [("t", 0)] and again.future_dir("t", 0) == d1
    assert again.futures[("t", 0)].log_end_offset == 3
    assert again.dir_of("t", 0) == d0 and again.get("t", 0).log_end_offset == 9
    assert os.path.exists(future_path) and not any(os.path.exists(p) for p in stray)
