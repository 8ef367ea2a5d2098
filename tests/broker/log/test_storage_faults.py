"""A write the file system refuses: KafkaStorageError (56), the log as it was, and the same
append succeeding once the disk has room or the directory is writable again."""

from __future__ import annotations

import os

import pytest

from broker.log import KafkaStorageError, LogConfig
from protocol.errors import ErrorCode

from ..faults import FaultyDisk
from .helpers import batches_in, make_batch, open_log


def _file_size(path) -> int:
    return os.stat(path).st_size


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_full_disk_mid_batch_cuts_the_torn_bytes_and_a_retry_succeeds(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    log.append(make_batch(3), now_ms=0)
    before = log.read(0, 1 << 20)
    disk = FaultyDisk(monkeypatch, tmp_path, "full", budget=20)  # 20 bytes of a longer batch
    with pytest.raises(KafkaStorageError) as exc:
        log.append(make_batch(5, seed=1), now_ms=0)
    assert exc.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR == 56
    assert "No space left on device" in str(exc.value)
    assert disk.failures >= 1
    assert log.log_end_offset == 3
    assert log.read(0, 1 << 20) == before                      # the torn bytes never show
    assert _file_size(log.active.log_path) == len(before)      # and are cut from the file
    disk.heal()
    assert log.append(make_batch(5, seed=1), now_ms=0).base_offset == 3
    assert batches_in(log.read(0, 1 << 20)) == [(0, 2), (3, 7)]
    log.close()
    reopened = open_log(tmp_path)                               # clean reopen: nothing to recover
    assert reopened.recovery_report is None
    assert batches_in(reopened.read(0, 1 << 20)) == [(0, 2), (3, 7)]


def test_failed_index_write_leaves_no_entry_behind(tmp_path, monkeypatch):
    log = open_log(tmp_path, LogConfig(index_interval_bytes=1))  # an entry for every batch
    for i in range(3):
        log.append(make_batch(2, seed=i), now_ms=0)
    entries = len(log.active.offset_index)
    disk = FaultyDisk(monkeypatch, tmp_path, "full", only_suffix=".index")
    with pytest.raises(KafkaStorageError):
        log.append(make_batch(2, seed=9), now_ms=0)
    assert len(log.active.offset_index) == entries
    assert _file_size(log.active.offset_index.path) == 8 * entries
    assert _file_size(log.active.log_path) == log.active.size
    disk.heal()
    assert log.append(make_batch(2, seed=9), now_ms=0).base_offset == 6
    log.close()
    reopened = open_log(tmp_path, LogConfig(index_interval_bytes=1))
    assert reopened.recovery_report is None
    assert batches_in(reopened.read(0, 1 << 20)) == [(0, 1), (2, 3), (4, 5), (6, 7)]


def test_an_undo_the_disk_refuses_is_finished_by_the_next_append(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    log.append(make_batch(3), now_ms=0)
    good = log.active.size
    # a short write, then the device fails outright: the undo cannot cut the file either
    disk = FaultyDisk(monkeypatch, tmp_path, "full", budget=30, then="eio")
    with pytest.raises(KafkaStorageError):
        log.append(make_batch(5, seed=1), now_ms=0)
    assert log.active.size == good
    assert _file_size(log.active.log_path) > good              # could not be cut yet
    assert batches_in(log.read(0, 1 << 20)) == [(0, 2)]        # but reads stop at the good end
    with pytest.raises(KafkaStorageError):                     # still broken: still refused
        log.append(make_batch(5, seed=1), now_ms=0)
    disk.heal()
    assert log.append(make_batch(5, seed=1), now_ms=0).base_offset == 3
    assert _file_size(log.active.log_path) == log.active.size
    assert batches_in(log.read(0, 1 << 20)) == [(0, 2), (3, 7)]


def test_roll_into_an_unwritable_directory_is_refused_then_retried(tmp_path, monkeypatch):
    config = LogConfig(segment_bytes=400)
    log = open_log(tmp_path, config)
    while len(log.segments) == 1:
        log.append(make_batch(2, value_size=50), now_ms=0)
    leo, segments = log.log_end_offset, len(log.segments)
    fds = _open_fds()
    disk = FaultyDisk(monkeypatch, tmp_path, "readonly")
    # the active segment still takes what fits (its file is open)...
    while True:
        try:
            log.append(make_batch(2, value_size=50), now_ms=0)
        except KafkaStorageError as exc:
            assert isinstance(exc.__cause__, PermissionError)  # ...the roll is what fails
            break
    assert len(log.segments) == segments                        # no half-made segment
    assert _open_fds() == fds                                   # and no descriptor leaked
    leo = log.log_end_offset
    assert batches_in(log.read(leo - 2, 1 << 20)) == [(leo - 2, leo - 1)]
    with pytest.raises(KafkaStorageError):
        log.append(make_batch(2, value_size=50), now_ms=0)
    disk.heal()
    assert log.append(make_batch(2, value_size=50), now_ms=0).base_offset == leo
    assert len(log.segments) == segments + 1
    log.close()
    reopened = open_log(tmp_path, config)
    assert reopened.recovery_report is None and reopened.log_end_offset == leo + 2


def test_failed_flush_messages_fsync_undoes_the_append(tmp_path, monkeypatch):
    log = open_log(tmp_path, LogConfig(flush_interval_messages=1))  # fsync after every batch
    log.append(make_batch(3), now_ms=0)
    disk = FaultyDisk(monkeypatch, tmp_path, "eio")
    with pytest.raises(KafkaStorageError):
        log.append(make_batch(2, seed=1), now_ms=0)
    assert log.log_end_offset == 3 and batches_in(log.read(0, 1 << 20)) == [(0, 2)]
    disk.heal()
    assert log.append(make_batch(2, seed=1), now_ms=0).base_offset == 3


def test_retention_in_an_unwritable_directory_leaks_nothing_and_moves_the_start(
        tmp_path, monkeypatch):
    config = LogConfig(segment_bytes=400, file_delete_delay_ms=0)
    log = open_log(tmp_path, config)
    while len(log.segments) < 4:
        log.append(make_batch(2, value_size=50), now_ms=0)
    active_base = log.active.base_offset
    log.delete_records_before(active_base)  # the three older segments are now due
    fds = _open_fds()
    disk = FaultyDisk(monkeypatch, tmp_path, "readonly")  # no rename to .deleted
    with pytest.raises(PermissionError):
        log.apply_retention(now_ms=0)
    assert [s.base_offset for s in log.segments] == [active_base]
    assert log.log_start_offset == active_base
    assert _open_fds() == fds - 3 * 3  # three segments' .log/.index/.timeindex closed
    disk.heal()
    log.close()
    # the files kept their names; below the checkpointed start, the next retention takes them
    reopened = open_log(tmp_path, config, log_start_offset=active_base)
    assert len(reopened.segments) == 4
    reopened.apply_retention(now_ms=0)
    assert [s.base_offset for s in reopened.segments] == [active_base]
