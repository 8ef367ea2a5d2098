"""The log, the checkpoints and the metadata log on a simulated disk that crashes: after a
power cut, recovery finds exactly what was fsynced (and, with writeback, a prefix of the
rest), never a torn batch, and a full or failing disk fails appends without losing data."""

import errno
import random

import pytest

from broker.controller.metadata_log import MetadataLogStore
from broker.controller.quorum_state import ElectionState
from broker.controller.raft_log import Entry
from broker.log import LogConfig, LogManager
from broker.log.errors import KafkaStorageError
from broker.storage import SimulatedFileSystem
from protocol.records import iter_batch_headers
from tests.broker.log.helpers import make_batch

DATA = "/node-1/data"
TOPIC = "orders"
CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=0)


def _append(log, first: int, count: int) -> None:
    for i in range(first, first + count):
        log.append(make_batch(3, ts=1_000 + i, seed=i), now_ms=1_000 + i)


def _open(fs) -> tuple[LogManager, list]:
    mgr = LogManager(DATA, CONFIG, fs=fs)
    return mgr, mgr.open(now_ms=5_000)


def _batches(log) -> list[tuple[int, int]]:
    """(base, last offset) of every batch, read as a consumer would (one segment a read)."""
    found: list[tuple[int, int]] = []
    offset = log.log_start_offset
    while data := log.read(offset, 1 << 30):
        found += [(h.base_offset, h.last_offset) for _, h in iter_batch_headers(data)]
        offset = found[-1][1] + 1
    return found


def test_a_crash_loses_what_was_not_fsynced_and_recovery_cuts_the_log_back():
    fs = SimulatedFileSystem()
    mgr, _ = _open(fs)
    log = mgr.get_or_create(TOPIC, 0)
    _append(log, 0, 20)  # rolls a few segments: each fsynced as it stops being active
    log.flush()
    flushed = log.log_end_offset
    _append(log, 20, 5)
    assert log.log_end_offset == flushed + 15
    fs.crash()  # no writeback: every unsynced byte is gone
    mgr, reports = _open(fs)
    log = mgr.get(TOPIC, 0)
    assert not mgr.had_clean_shutdown
    assert log.log_end_offset == flushed
    assert _batches(log) == [(i * 3, i * 3 + 2) for i in range(20)]
    assert [r.topic for r in reports] == [TOPIC]


@pytest.mark.parametrize("seed", range(12))
def test_recovery_after_a_crash_with_writeback_keeps_whole_batches_only(seed):
    """The platter got a random prefix of the unsynced writes, torn at a random byte:
    the log keeps every fsynced batch, then some whole batches, never a torn one, and
    appends continue from there."""
    fs = SimulatedFileSystem()
    mgr, _ = _open(fs)
    log = mgr.get_or_create(TOPIC, 0)
    _append(log, 0, 12)  # a roll at about 11 batches: the second segment is active
    log.flush()
    _append(log, 12, 8)
    fs.crash(random.Random(seed))
    mgr, _ = _open(fs)
    log = mgr.get(TOPIC, 0)
    batches = _batches(log)
    assert 36 <= log.log_end_offset <= 60
    assert batches == [(i * 3, i * 3 + 2) for i in range(log.log_end_offset // 3)]
    info = log.append(make_batch(3, seed=99), now_ms=9_000)
    assert info.base_offset == batches[-1][1] + 1


def test_a_clean_shutdown_survives_a_crash_right_after_it():
    fs = SimulatedFileSystem()
    mgr, _ = _open(fs)
    _append(mgr.get_or_create(TOPIC, 0), 0, 7)
    mgr.close()  # flush, checkpoints, marker: all durable
    fs.crash(random.Random(1))
    mgr, reports = _open(fs)
    assert mgr.had_clean_shutdown and reports == []
    assert mgr.get(TOPIC, 0).log_end_offset == 21


def test_a_partition_created_without_its_directory_fsynced_is_gone_after_a_crash():
    """`get_or_create` makes the new directory durable before it returns: the partition
    is there after a crash even though nothing was appended."""
    fs = SimulatedFileSystem()
    mgr, _ = _open(fs)
    mgr.get_or_create(TOPIC, 3)
    fs.crash()
    mgr, _ = _open(fs)
    assert mgr.partitions() == [(TOPIC, 3)]


def test_a_full_disk_fails_the_append_and_keeps_the_log_whole():
    fs = SimulatedFileSystem()
    mgr, _ = _open(fs)
    log = mgr.get_or_create(TOPIC, 0)
    _append(log, 0, 2)
    fs.limit_space(40, DATA)  # less than one batch
    with pytest.raises(KafkaStorageError):
        _append(log, 2, 1)
    assert log.log_end_offset == 6 and _batches(log) == [(0, 2), (3, 5)]
    fs.heal()
    _append(log, 2, 1)
    assert _batches(log) == [(0, 2), (3, 5), (6, 8)]


def test_a_failing_fsync_fails_the_flush_and_the_data_stays_volatile():
    fs = SimulatedFileSystem()
    mgr, _ = _open(fs)
    log = mgr.get_or_create(TOPIC, 0)
    _append(log, 0, 3)
    fs.fail("fsync", f"{DATA}/{TOPIC}-0")
    with pytest.raises(OSError) as raised:
        log.flush()
    assert raised.value.errno == errno.EIO
    assert log.recovery_point == 0
    fs.crash()
    fs.heal()
    mgr, _ = _open(fs)
    assert mgr.get(TOPIC, 0).log_end_offset == 0


def _entries(epochs: list[int], start: int = 0) -> list[Entry]:
    return [Entry(start + i, e, b"record %d" % (start + i), control=(i == 0 and start == 0))
            for i, e in enumerate(epochs)]


@pytest.mark.parametrize("seed", range(6))
def test_the_metadata_log_keeps_every_append_it_answered_for(seed):
    """`append` and `persist_election` are durable when they return (a Raft voter must
    not forget a vote or an acknowledged entry): a crash, with any writeback, loses none."""
    fs = SimulatedFileSystem()
    directory = f"{DATA}/__cluster_metadata-0"
    written = _entries([1, 1, 2, 2, 3, 3, 3])
    state = ElectionState(epoch=3, leader_id=1, voted_id=1, voters=(1, 2, 3))
    store = MetadataLogStore.open(directory, fs)
    store.persist_election(state)
    store.append(written[:3])
    store.append(written[3:])
    fs.crash(random.Random(seed))
    store = MetadataLogStore.open(directory, fs)
    assert store.election == state
    assert store.raft_log.entries == written
