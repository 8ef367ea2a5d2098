"""Transactions across a power cut on a simulated disk: whatever survived of the log, the
segments' .txnindex files and the producer-state snapshots, the restarted partition knows
what a replay of the surviving log from its first batch says (the open transactions, the
aborted ones and their LSOs), and nothing more. The replay is done here with the
snapshots and .txnindex files deleted, so it owes nothing to them."""

from __future__ import annotations

import os
import random

import pytest

from broker.log import LogConfig, LogManager
from broker.log.producer_snapshots import SNAPSHOT_SUFFIX
from broker.log.txn_index import AbortedTxn
from broker.partition import Partition
from broker.storage import SimulatedFileSystem
from protocol.errors import ErrorCode
from protocol.records import Record, encode_batch, parse_batch_header

DATA = "/node-1/data"
CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=0)


def _leader(plog) -> Partition:
    p = Partition("t", 0, plog, node_id=0)
    p.make_leader(leader_epoch=0, partition_epoch=0, replicas=(0,), isr=(0,), now_ms=0)
    return p


def _workload(p: Partition, rng: random.Random, steps: int, seq: dict[int, int],
              open_txns: set[int]) -> None:
    """Three producers opening, writing to and ending transactions, and a plain one."""
    for _ in range(steps):
        pid = rng.choice((5, 6, 7, 9))
        if pid != 9 and pid in open_txns and rng.random() < 0.3:
            assert p.append_control_batch(pid, 0, 0, rng.random() < 0.5, 0).error == 0
            open_txns.discard(pid)
            continue
        n = rng.randint(1, 3)
        batch = bytearray(encode_batch(
            [Record(i, 1_000, b"k", b"v" * 30) for i in range(n)], producer_id=pid,
            producer_epoch=0, base_sequence=seq[pid], is_transactional=pid != 9))
        assert p.append_batch(batch, parse_batch_header(batch), 0).error == 0
        seq[pid] += n
        if pid != 9:
            open_txns.add(pid)


def _knowledge(p: Partition) -> tuple:
    p.state.high_watermark = p.log_end_offset
    return (sorted((t.first_offset, t.producer_id) for t in p.producers.ongoing_txns.values()),
            p.log.collect_aborted_txns(0, p.log_end_offset), p.last_stable_offset)


def _from_scratch(fs: SimulatedFileSystem) -> tuple:
    directory = f"{DATA}/t-0"
    for name in fs.listdir(directory):
        if name.endswith(SNAPSHOT_SUFFIX) or name.endswith(".txnindex"):
            fs.remove(os.path.join(directory, name))
    mgr = LogManager(DATA, CONFIG, fs=fs)
    mgr.open(now_ms=0)
    return _knowledge(_leader(mgr.get("t", 0)))


@pytest.mark.parametrize("seed", range(8))
def test_after_a_power_cut_the_partition_knows_what_the_surviving_log_says(seed):
    rng = random.Random(seed)
    fs = SimulatedFileSystem()
    mgr = LogManager(DATA, CONFIG, fs=fs)
    mgr.open(now_ms=0)
    p = _leader(mgr.get_or_create("t", 0))
    seq, open_txns = {pid: 0 for pid in (5, 6, 7, 9)}, set[int]()
    _workload(p, rng, 60, seq, open_txns)
    p.log.flush()
    mgr.checkpoint()  # the recovery point: a restart re-reads only what follows it
    _workload(p, rng, 20, seq, open_txns)
    assert len(p.log.segments) > 3
    fs.crash(random.Random(seed))

    mgr = LogManager(DATA, CONFIG, fs=fs)
    mgr.open(now_ms=0)
    restarted = _knowledge(_leader(mgr.get("t", 0)))
    mgr.close()
    assert restarted == _from_scratch(fs)
    assert restarted[0] or restarted[1]  # the workload left something to know


def test_an_abort_whose_index_entry_the_disk_refuses_is_taken_back():
    """The marker is in the log but its .txnindex entry cannot be written: the marker goes
    again (KAFKA_STORAGE_ERROR, the coordinator retries), so the log never holds an abort
    that read_committed consumers would not be told of; once the disk heals it goes in."""
    fs = SimulatedFileSystem()
    mgr = LogManager(DATA, CONFIG, fs=fs)
    mgr.open(now_ms=0)
    p = _leader(mgr.get_or_create("t", 0))
    batch = bytearray(encode_batch([Record(0, 1_000, b"k", b"v")], producer_id=5,
                                   producer_epoch=0, base_sequence=0, is_transactional=True))
    p.append_batch(batch, parse_batch_header(batch), 0)
    fault = fs.fail("write", f"{DATA}/t-0/{p.log.active.base_offset:020d}.txnindex")
    refused = p.append_control_batch(5, 0, 0, False, 0)
    assert refused.error == ErrorCode.KAFKA_STORAGE_ERROR and fault.hits
    assert p.log_end_offset == 1 and p.last_stable_offset == 0
    assert p.producers.producers[5].current_txn_first_offset == 0
    fs.heal()
    assert p.append_control_batch(5, 0, 0, False, 0).error == ErrorCode.NONE
    assert p.log.collect_aborted_txns(0, 2) == [AbortedTxn(5, 0, 1, 2)]
