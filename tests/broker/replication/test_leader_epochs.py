"""The leader-epoch cache and its checkpoint file (broker.replication.leader_epochs)."""

from __future__ import annotations

import logging
import os

import pytest

from broker.log.manager import CheckpointError as LogCheckpointError
from broker.replication.leader_epochs import (
    CHECKPOINT_FILE,
    CheckpointError,
    EpochEntry,
    LeaderEpochCache,
    entries_from_headers,
    new_log_cache,
    open_cache,
    read_checkpoint,
    write_checkpoint,
)

E = EpochEntry


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([E(epoch, start) for epoch, start in pairs])


class Recorder:
    """A `store` that keeps every list it was handed."""

    def __init__(self) -> None:
        self.calls: list[list[EpochEntry]] = []

    def __call__(self, entries: list[EpochEntry]) -> None:
        self.calls.append(entries)


# --- assign -----------------------------------------------------------------------------


def test_a_new_cache_is_empty():
    cache = LeaderEpochCache()
    assert cache.entries == []
    assert cache.latest_epoch is None
    assert cache.earliest_entry is None and cache.latest_entry is None


def test_assign_appends_a_newer_epoch():
    cache = LeaderEpochCache()
    assert cache.assign(0, 0) is True
    assert cache.assign(2, 5) is True
    assert cache.entries == [E(0, 0), E(2, 5)]
    assert cache.latest_epoch == 2
    assert cache.earliest_entry == E(0, 0) and cache.latest_entry == E(2, 5)


def test_later_batches_of_the_latest_epoch_change_nothing():
    cache = cache_of((1, 10))
    assert cache.assign(1, 10) is False
    assert cache.assign(1, 25) is False
    assert cache.entries == [E(1, 10)]


def test_the_latest_epoch_starting_earlier_replaces_its_entry():
    cache = cache_of((0, 0), (1, 10))
    assert cache.assign(1, 7) is True
    assert cache.entries == [E(0, 0), E(1, 7)]


def test_a_new_epoch_at_or_before_existing_starts_drops_them():
    cache = cache_of((0, 0), (1, 10), (2, 20))
    assert cache.assign(3, 10) is True
    assert cache.entries == [E(0, 0), E(3, 10)]


def test_an_older_epoch_drops_every_entry_not_older_than_it():
    # Kafka's maybeTruncateNonMonotonicEntries: epoch >= new or start >= new start goes
    cache = cache_of((0, 0), (3, 10), (5, 20))
    assert cache.assign(4, 30) is True
    assert cache.entries == [E(0, 0), E(3, 10), E(4, 30)]
    assert cache.assign(1, 40) is True
    assert cache.entries == [E(0, 0), E(1, 40)]


def test_a_non_trivial_drop_is_warned_about_and_a_trivial_one_is_not(caplog):
    cache = cache_of((0, 0), (1, 10))
    with caplog.at_level(logging.WARNING, logger="minibroker.leader_epochs"):
        cache.assign(2, 10)  # epoch 1 wrote nothing before epoch 2 took its start
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger="minibroker.leader_epochs"):
        cache.assign(3, 5)
    assert len(caplog.records) == 1
    assert cache.entries == [E(0, 0), E(3, 5)]


@pytest.mark.parametrize("epoch, start", [(-1, 0), (0, -1), (-2, -2)])
def test_assign_refuses_negative_values(epoch, start):
    cache = cache_of((0, 0))
    with pytest.raises(ValueError):
        cache.assign(epoch, start)
    assert cache.entries == [E(0, 0)]


def test_constructor_entries_are_assigned_so_disorder_is_dropped():
    cache = LeaderEpochCache([E(0, 0), E(2, 10), E(1, 20)])
    assert cache.entries == [E(0, 0), E(1, 20)]


def test_entries_is_a_copy():
    cache = cache_of((0, 0))
    cache.entries.append(E(9, 9))
    assert cache.entries == [E(0, 0)]


# --- end_offset_for ---------------------------------------------------------------------


def test_end_offset_for_an_empty_cache_is_undefined():
    assert LeaderEpochCache().end_offset_for(3, 100) == (-1, -1)


def test_end_offset_for_the_undefined_epoch_is_undefined():
    assert cache_of((0, 0)).end_offset_for(-1, 100) == (-1, -1)


def test_end_offset_for_the_latest_epoch_is_the_log_end():
    cache = cache_of((0, 0), (2, 10))
    assert cache.end_offset_for(2, 17) == (2, 17)


def test_end_offset_for_a_newer_epoch_is_the_latest_ending_at_the_log_end():
    cache = cache_of((0, 0), (2, 10))
    assert cache.end_offset_for(5, 17) == (2, 17)


def test_end_offset_for_an_epoch_held_is_the_next_start():
    cache = cache_of((0, 0), (2, 10), (4, 30))
    assert cache.end_offset_for(0, 40) == (0, 10)
    assert cache.end_offset_for(2, 40) == (2, 30)


def test_end_offset_for_an_epoch_not_held_is_the_largest_below_it():
    cache = cache_of((0, 0), (2, 10), (4, 30))
    assert cache.end_offset_for(1, 40) == (0, 10)
    assert cache.end_offset_for(3, 40) == (2, 30)


def test_end_offset_for_an_epoch_older_than_all_is_the_first_start():
    # Kafka: the log's start removed older epochs; asker must cut back to where we begin
    cache = cache_of((3, 50), (5, 80))
    assert cache.end_offset_for(1, 100) == (1, 50)


# --- epoch_for_offset -------------------------------------------------------------------


def test_epoch_for_offset():
    cache = cache_of((1, 5), (3, 10))
    assert cache.epoch_for_offset(4) is None
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(10) == 3
    assert cache.epoch_for_offset(1000) == 3
    assert LeaderEpochCache().epoch_for_offset(0) is None


# --- truncation -------------------------------------------------------------------------


def test_truncate_from_end_drops_epochs_starting_at_or_after_it():
    cache = cache_of((0, 0), (1, 10), (2, 20))
    cache.truncate_from_end(20)
    assert cache.entries == [E(0, 0), E(1, 10)]
    cache.truncate_from_end(11)
    assert cache.entries == [E(0, 0), E(1, 10)]
    cache.truncate_from_end(0)
    assert cache.entries == []


def test_truncate_from_end_ignores_a_negative_offset():
    cache = cache_of((0, 0))
    cache.truncate_from_end(-1)
    assert cache.entries == [E(0, 0)]


def test_truncate_from_start_clamps_the_epoch_the_new_start_falls_in():
    cache = cache_of((0, 0), (1, 10), (2, 20))
    cache.truncate_from_start(15)
    assert cache.entries == [E(1, 15), E(2, 20)]


def test_truncate_from_start_is_exclusive_of_an_epoch_starting_there():
    cache = cache_of((0, 0), (1, 10), (2, 20))
    cache.truncate_from_start(10)
    assert cache.entries == [E(1, 10), E(2, 20)]


def test_truncate_from_start_before_the_first_entry_changes_nothing():
    store = Recorder()
    cache = LeaderEpochCache([E(1, 10)], store=store)
    cache.truncate_from_start(5)
    cache.truncate_from_start(10)
    assert cache.entries == [E(1, 10)]
    assert store.calls == []


def test_truncate_from_start_past_every_entry_keeps_the_latest():
    cache = cache_of((0, 0), (1, 10))
    cache.truncate_from_start(99)
    assert cache.entries == [E(1, 99)]


def test_clear():
    store = Recorder()
    cache = LeaderEpochCache([E(0, 0)], store=store)
    cache.clear()
    cache.clear()
    assert cache.entries == [] and cache.latest_epoch is None
    assert store.calls == [[]]


# --- store ------------------------------------------------------------------------------


def test_store_sees_every_change_and_nothing_else():
    store = Recorder()
    cache = LeaderEpochCache([E(0, 0)], store=store)
    assert store.calls == []  # loading is not a change
    cache.assign(0, 5)
    cache.assign(1, 10)
    cache.assign(2, 20)
    cache.truncate_from_end(30)
    cache.truncate_from_end(20)
    cache.truncate_from_start(12)
    assert store.calls == [
        [E(0, 0), E(1, 10)],
        [E(0, 0), E(1, 10), E(2, 20)],
        [E(0, 0), E(1, 10)],
        [E(1, 12)],
    ]
    store.calls[0].clear()  # the store gets its own copy
    assert cache.entries == [E(1, 12)]


# --- entries_from_headers ---------------------------------------------------------------


def test_entries_from_headers_keeps_the_first_batch_of_each_epoch():
    headers = [(0, 0), (0, 3), (2, 7), (2, 9), (5, 12)]
    assert entries_from_headers(headers) == [E(0, 0), E(2, 7), E(5, 12)]


def test_entries_from_headers_passes_over_batches_without_an_epoch():
    headers = [(-1, 0), (-1, 4), (1, 8), (1, 9)]
    assert entries_from_headers(headers) == [E(1, 8)]
    assert entries_from_headers([]) == []


# --- checkpoint file --------------------------------------------------------------------


def test_checkpoint_round_trip_in_kafkas_format(tmp_path):
    path = tmp_path / CHECKPOINT_FILE
    entries = [E(0, 0), E(3, 17), E(2**31 - 1, 2**63 - 1)]
    write_checkpoint(path, entries)
    assert path.read_text() == f"0\n3\n0 0\n3 17\n{2**31 - 1} {2**63 - 1}\n"
    assert read_checkpoint(path) == entries


def test_an_empty_checkpoint_round_trips(tmp_path):
    path = tmp_path / CHECKPOINT_FILE
    write_checkpoint(path, [])
    assert path.read_text() == "0\n0\n"
    assert read_checkpoint(path) == []


def test_a_missing_checkpoint_reads_as_none(tmp_path):
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) is None


def test_a_leftover_temp_file_is_ignored(tmp_path):
    path = tmp_path / CHECKPOINT_FILE
    write_checkpoint(path, [E(1, 0)])
    # a crash between writing the temp file and renaming it
    (tmp_path / (CHECKPOINT_FILE + ".tmp")).write_text("0\n2\n1 0\n")
    assert read_checkpoint(path) == [E(1, 0)]
    write_checkpoint(path, [E(1, 0), E(2, 4)])
    assert read_checkpoint(path) == [E(1, 0), E(2, 4)]
    assert sorted(os.listdir(tmp_path)) == [CHECKPOINT_FILE]


def test_a_temp_file_alone_reads_as_no_checkpoint(tmp_path):
    (tmp_path / (CHECKPOINT_FILE + ".tmp")).write_text("0\n1\n1 0\n")
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) is None


def test_a_failed_write_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / CHECKPOINT_FILE
    write_checkpoint(path, [E(1, 0)])

    def no_room(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_room)
    with pytest.raises(OSError):
        write_checkpoint(path, [E(1, 0), E(2, 5)])
    monkeypatch.undo()
    assert read_checkpoint(path) == [E(1, 0)]
    assert sorted(os.listdir(tmp_path)) == [CHECKPOINT_FILE]


MALFORMED = {
    "empty file": b"",
    "version only": b"0\n",
    "other version": b"1\n0\n",
    "version not a number": b"x\n0\n",
    "count not a number": b"0\nmany\n",
    "negative count": b"0\n-1\n",
    "count above lines": b"0\n3\n0 0\n1 5\n",
    "count below lines": b"0\n1\n0 0\n1 5\n",
    "huge count": b"0\n9999999999999999\n0 0\n",
    "torn last line": b"0\n2\n0 0\n1 5",
    "torn mid line": b"0\n2\n0 0\n1",
    "blank line": b"0\n1\n\n",
    "trailing blank line": b"0\n1\n0 0\n\n",
    "one field": b"0\n1\n7\n",
    "three fields": b"0\n1\n7 0 1\n",
    "negative epoch": b"0\n1\n-1 0\n",
    "negative offset": b"0\n1\n0 -5\n",
    "not digits": b"0\n1\n1e3 0\n",
    "underscore digits": b"0\n1\n1_0 0\n",
    "non-ascii digits": "0\n1\n\u0663 0\n".encode(),
    "epoch over int32": b"0\n1\n2147483648 0\n",
    "offset over int64": b"0\n1\n0 9223372036854775808\n",
    "epochs not ascending": b"0\n2\n3 0\n3 5\n",
    "offsets not ascending": b"0\n2\n1 5\n2 5\n",
    "overlong line": b"0\n1\n0 " + b"0" * 200 + b"\n",
    "binary junk": b"\x00\xff\xfe\n\x01\n",
    "no newline at all": b"0" * 10_000,
}


@pytest.mark.parametrize("content", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_checkpoint_raises(tmp_path, content):
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(content)
    with pytest.raises(CheckpointError):
        read_checkpoint(path)


def test_checkpoint_error_is_a_log_checkpoint_error():
    assert issubclass(CheckpointError, LogCheckpointError)


def test_blanks_between_the_two_fields_are_accepted(tmp_path):
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(b"0\n2\n0  0\n4\t9\n")
    assert read_checkpoint(path) == [E(0, 0), E(4, 9)]


# --- open_cache -------------------------------------------------------------------------


class Headers:
    """headers_if_missing that counts its calls."""

    def __init__(self, pairs: list[tuple[int, int]]) -> None:
        self.pairs = pairs
        self.calls = 0

    def __call__(self) -> list[tuple[int, int]]:
        self.calls += 1
        return self.pairs


def test_open_cache_reads_an_existing_checkpoint_without_walking_the_log(tmp_path):
    write_checkpoint(tmp_path / CHECKPOINT_FILE, [E(0, 0), E(2, 8)])
    headers = Headers([(9, 0)])
    cache = open_cache(tmp_path, headers)
    assert cache.entries == [E(0, 0), E(2, 8)]
    assert headers.calls == 0


def test_open_cache_rebuilds_a_missing_checkpoint_from_headers_and_writes_it(tmp_path):
    headers = Headers([(0, 0), (0, 1), (3, 2)])
    cache = open_cache(tmp_path, headers)
    assert cache.entries == [E(0, 0), E(3, 2)]
    assert headers.calls == 1
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == [E(0, 0), E(3, 2)]


def test_open_cache_writes_no_checkpoint_for_an_empty_log(tmp_path):
    # an idle partition: a restart must not write (and fsync) an empty file for it
    headers = Headers([])
    cache = open_cache(tmp_path, headers, log_start_offset=7, log_end_offset=7)
    assert cache.entries == []
    assert headers.calls == 1
    assert not (tmp_path / CHECKPOINT_FILE).exists()
    cache.assign(2, 7)
    cache.make_durable()  # the first batch's assignment writes it, as for a new log
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == [E(2, 7)]


def test_open_cache_writes_the_checkpoint_of_a_log_whose_batches_carry_no_epoch(tmp_path):
    # batches from before leader epochs rebuild to nothing too, but walking them is not
    # free: the file is written, so that the next start reads it instead
    headers = Headers([(-1, 0), (-1, 3)])
    assert open_cache(tmp_path, headers, log_start_offset=0, log_end_offset=5).entries == []
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == []
    again = Headers([(-1, 0), (-1, 3)])
    open_cache(tmp_path, again, log_start_offset=0, log_end_offset=5)
    assert again.calls == 0


def test_open_cache_rewrites_a_malformed_checkpoint_even_when_the_log_is_empty(tmp_path):
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(b"0\n5\n0 0\n")
    cache = open_cache(tmp_path, Headers([]))
    assert cache.entries == []
    assert read_checkpoint(path) == []


def test_open_cache_rebuilds_a_malformed_checkpoint_with_a_warning(tmp_path, caplog):
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(b"0\n5\n0 0\n")
    with caplog.at_level(logging.WARNING, logger="minibroker.leader_epochs"):
        cache = open_cache(tmp_path, Headers([(1, 0), (4, 6)]))
    assert cache.entries == [E(1, 0), E(4, 6)]
    assert read_checkpoint(path) == [E(1, 0), E(4, 6)]
    assert any(CHECKPOINT_FILE in r.getMessage() for r in caplog.records)


def test_open_cache_persists_assignments_when_made_durable_and_truncations_at_once(tmp_path):
    cache = open_cache(tmp_path, Headers([]))
    cache.assign(0, 0)
    cache.assign(1, 4)
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == []  # epochs begun, nothing written
    cache.make_durable()  # what the partition does before it appends
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == [E(0, 0), E(1, 4)]
    cache.truncate_from_end(4)
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == [E(0, 0)]
    reopened = open_cache(tmp_path, Headers([(7, 0)]))
    assert reopened.entries == [E(0, 0)]


def test_open_cache_cuts_entries_the_loaded_log_no_longer_holds(tmp_path):
    # the checkpoint is written before the batches: a crash can leave it ahead of the log
    write_checkpoint(tmp_path / CHECKPOINT_FILE, [E(0, 0), E(1, 10), E(2, 20)])
    cache = open_cache(tmp_path, Headers([]), log_start_offset=5, log_end_offset=15)
    assert cache.entries == [E(0, 5), E(1, 10)]
    # not written back: every load cuts the same, and the next change writes the whole
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == [E(0, 0), E(1, 10), E(2, 20)]
    again = open_cache(tmp_path, Headers([]), log_start_offset=5, log_end_offset=15)
    assert again.entries == [E(0, 5), E(1, 10)]
    again.truncate_from_end(10)
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == [E(0, 5)]


# --- durability -------------------------------------------------------------------------


def test_an_assignment_is_flushed_once_by_make_durable_and_truncations_never():
    store, flushes = Recorder(), Recorder()
    cache = LeaderEpochCache([E(0, 0)], store=store, flush=flushes)
    cache.make_durable()
    assert flushes.calls == []  # loading is not an assignment
    cache.assign(1, 10)
    assert store.calls == [] and flushes.calls == []  # an epoch at the log end: no file yet
    cache.make_durable()
    cache.make_durable()
    assert flushes.calls == [[E(0, 0), E(1, 10)]]
    cache.assign(1, 15)  # a later batch of the latest epoch changes nothing
    cache.truncate_from_end(10)
    cache.make_durable()
    assert store.calls == [[E(0, 0)]]  # stored, not flushed: a lost truncation is redone
    assert flushes.calls == [[E(0, 0), E(1, 10)]]


def test_a_leader_makes_its_epoch_durable_before_it_appends_a_batch(tmp_path):
    from broker.log import LogConfig, PartitionLog
    from broker.partition import Partition
    from protocol.records import Record, encode_batch, iter_batch_headers

    log = PartitionLog.open(str(tmp_path / "t-0"), "t", 0, LogConfig())
    at_flush: list[int] = []
    cache = LeaderEpochCache(store=lambda entries: None,
                             flush=lambda entries: at_flush.append(log.log_end_offset))
    partition = Partition("t", 0, log, node_id=0, epochs=cache)
    partition.make_leader(leader_epoch=3, partition_epoch=0, replicas=(0,), isr=(0,), now_ms=0)
    assert at_flush == []  # leading costs no fsync
    batch = bytearray(encode_batch([Record(0, 1000, b"k", b"v", [])]))
    for _ in range(2):
        [(_pos, header)] = list(iter_batch_headers(batch))
        result = partition.append_batch(batch, header, now_ms=1000)
        assert result.error == 0
    assert at_flush == [0]  # once, before the first batch of epoch 3 reached the log
    log.close()


# --- new_log_cache ----------------------------------------------------------------------

def test_a_new_logs_cache_writes_no_file_until_its_first_entry_is_made_durable(tmp_path):
    cache = new_log_cache(tmp_path)
    cache.assign(3, 0)
    assert cache.entries == [E(3, 0)] and not (tmp_path / CHECKPOINT_FILE).exists()
    cache.make_durable()
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == [E(3, 0)]


def test_a_new_logs_cache_can_start_with_the_epoch_it_is_to_lead_at(tmp_path, monkeypatch):
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    cache = new_log_cache(tmp_path, leader_epoch=7)
    assert cache.entries == [E(7, 0)] and not (tmp_path / CHECKPOINT_FILE).exists()
    assert synced == []  # leading a new partition costs no write and no fsync
    cache.make_durable()
    assert len(synced) == 2  # the file, then its directory
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE) == [E(7, 0)]


@pytest.mark.parametrize("left", ["", "0\n", "0\n1\n"])
def test_what_a_crash_leaves_of_a_first_checkpoint_is_rebuilt_from_the_log(tmp_path, left):
    """The first checkpoint went unsynced: a crash may leave it empty or cut short, and
    open_cache then rebuilds it from the batches' headers, which are right."""
    (tmp_path / CHECKPOINT_FILE).write_text(left)
    cache = open_cache(tmp_path, lambda: [(3, 0), (3, 5), (4, 10)])
    assert cache.entries == [E(3, 0), E(4, 10)]

