"""Transactions in a real partition over a real log: transactional batches open them, the
control batches of `append_control_batch` end them, the LSO follows the HW rule, aborted
transactions land in the .txnindex, followers track the same, and a restart or a
truncation rebuilds all of it from the log and the producer-state snapshots."""

from __future__ import annotations

import os

import pytest

from broker.log import LogConfig, PartitionLog
from broker.log.producer_snapshots import list_snapshots, snapshot_path
from broker.log.txn_index import AbortedTxn
from broker.partition import COORDINATOR, Partition
from protocol.control_records import ControlRecordType, decode_control_type
from protocol.errors import ErrorCode
from protocol.records import Record, decode_batches, encode_batch, parse_batch_header

SMALL = LogConfig(segment_bytes=400)


def open_log(path, config: LogConfig = SMALL, **kwargs) -> PartitionLog:
    return PartitionLog.open(str(path), "t", 0, config, **kwargs)


def leader(plog: PartitionLog, replicas=(0,), isr=None) -> Partition:
    p = Partition("t", 0, plog, node_id=0)
    p.make_leader(leader_epoch=1, partition_epoch=0, replicas=replicas,
                  isr=replicas if isr is None else isr, now_ms=0)
    return p


class Producer:
    """Sequences per producer id, as a client keeps them."""

    def __init__(self):
        self.seq: dict[int, int] = {}

    def batch(self, pid: int, count: int = 1, *, epoch: int = 0, transactional: bool = True,
              seq: int | None = None) -> bytearray:
        first = self.seq.get(pid, 0) if seq is None else seq
        self.seq[pid] = first + count
        return bytearray(encode_batch(
            [Record(i, 1_000, b"k%d" % i, b"v" * 20) for i in range(count)],
            producer_id=pid, producer_epoch=epoch, base_sequence=first,
            is_transactional=transactional))

    def send(self, p: Partition, pid: int, count: int = 1, **kwargs) -> tuple[ErrorCode, int]:
        buf = self.batch(pid, count, **kwargs)
        result = p.append_batch(buf, parse_batch_header(buf), 5_000)
        return result.error, result.base_offset


def end(p: Partition, pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0):
    result = p.append_control_batch(pid, epoch, coordinator_epoch, commit, 6_000)
    return result.error, result.base_offset


def aborted(p: Partition) -> list[AbortedTxn]:
    return p.log.collect_aborted_txns(0, p.log_end_offset)


def test_a_transaction_holds_the_lso_until_its_commit(tmp_path):
    p, client = leader(open_log(tmp_path)), Producer()
    assert client.send(p, 7, 2) == (ErrorCode.NONE, 0)          # 0-1
    assert client.send(p, 8, 1, transactional=False)[0] == ErrorCode.NONE  # 2
    assert client.send(p, 7, 1) == (ErrorCode.NONE, 3)          # 3
    assert p.high_watermark == 4 and p.last_stable_offset == 0
    assert end(p, 7, commit=True) == (ErrorCode.NONE, 4)
    assert p.high_watermark == 5 and p.last_stable_offset == 5
    assert aborted(p) == []


def test_the_lso_waits_for_the_high_watermark_to_pass_the_marker(tmp_path):
    p, client = leader(open_log(tmp_path), replicas=(0, 1)), Producer()
    client.send(p, 7, 3)                                        # 0-2
    p.follower_fetch(1, 3, now_ms=0)
    assert (p.high_watermark, p.last_stable_offset) == (3, 0)
    assert end(p, 7, commit=False) == (ErrorCode.NONE, 3)
    # the marker is written but not replicated: a new leader might not have it
    assert (p.high_watermark, p.last_stable_offset) == (3, 0)
    p.follower_fetch(1, 4, now_ms=0)
    assert (p.high_watermark, p.last_stable_offset) == (4, 4)
    assert aborted(p) == [AbortedTxn(7, 0, 3, 4)]


def test_an_abort_records_the_lso_of_the_other_open_transactions(tmp_path):
    p, client = leader(open_log(tmp_path)), Producer()
    client.send(p, 7)                                           # 0
    client.send(p, 8)                                           # 1
    client.send(p, 7)                                           # 2
    end(p, 7, commit=False)                                     # 3
    assert p.last_stable_offset == 1  # producer 8's transaction is still open
    end(p, 8, commit=False)                                     # 4
    assert aborted(p) == [AbortedTxn(7, 0, 3, 1), AbortedTxn(8, 1, 4, 5)]
    assert p.last_stable_offset == 5
    # a read from offset 2 only needs the transactions whose markers lie at or after it
    assert [t.producer_id for t in p.log.collect_aborted_txns(4, 5)] == [8]


def test_markers_are_checked_against_the_producer_and_coordinator_epochs(tmp_path):
    p, client = leader(open_log(tmp_path)), Producer()
    client.send(p, 7, epoch=3)
    assert end(p, 7, True, epoch=2)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert end(p, 7, True, epoch=3, coordinator_epoch=5)[0] == ErrorCode.NONE
    assert end(p, 7, False, epoch=3, coordinator_epoch=4)[0] == \
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert p.log_end_offset == 2  # nothing refused was written
    # a marker for a producer with no open transaction is written and completes nothing
    assert end(p, 99, False) == (ErrorCode.NONE, 2)
    assert aborted(p) == [] and p.last_stable_offset == 3


def test_the_marker_is_a_control_batch_of_the_producer(tmp_path):
    p = leader(open_log(tmp_path))
    Producer().send(p, 7)
    end(p, 7, commit=False, epoch=0, coordinator_epoch=9)
    (header, records), = [b for b in decode_batches(p.log.read(1, 1 << 20))]
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_offset) == (7, 0, 1)
    assert decode_control_type(records[0].key) == ControlRecordType.ABORT


def test_a_follower_writes_no_marker(tmp_path):
    p = Partition("t", 0, open_log(tmp_path), node_id=0)
    p.make_follower(leader_id=1, leader_epoch=1, partition_epoch=0, replicas=(0, 1), isr=(0, 1))
    assert end(p, 7, True)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert p.log_end_offset == 0


def test_a_plain_batch_inside_a_transaction_is_refused(tmp_path):
    p, client = leader(open_log(tmp_path)), Producer()
    client.send(p, 7)
    assert client.send(p, 7, transactional=False)[0] == ErrorCode.INVALID_TXN_STATE
    end(p, 7, commit=True)
    assert client.send(p, 7, transactional=False, seq=1)[0] == ErrorCode.NONE


def test_a_restart_finds_a_transaction_begun_segments_ago(tmp_path):
    """Producer 7's transaction begins in the first segment and is still open after several
    rolls: the snapshots at each roll carry it, and the aborted transactions before it keep
    their .txnindex entries."""
    plog = open_log(tmp_path)
    p, client = leader(plog), Producer()
    client.send(p, 5)                                           # 0
    end(p, 5, commit=False)                                     # 1
    client.send(p, 7)                                           # 2: stays open
    for _ in range(12):
        client.send(p, 8, 2, transactional=False)
    assert len(plog.segments) > 3
    assert list_snapshots(str(tmp_path)) == [s.base_offset for s in plog.segments[1:]]
    plog.close()

    again = leader(open_log(tmp_path))
    assert again.last_stable_offset == 2
    assert again.producers.producers[7].current_txn_first_offset == 2
    assert aborted(again) == [AbortedTxn(5, 0, 1, 2)]
    end(again, 7, commit=False)
    assert aborted(again)[-1] == AbortedTxn(7, 2, again.log_end_offset - 1,
                                            again.log_end_offset)
    # producer 8's retry of its last batch is still a duplicate
    retry = client.batch(8, 2, transactional=False, seq=client.seq[8] - 2)
    result = again.append_batch(retry, parse_batch_header(retry), 0)
    assert result.error == ErrorCode.NONE and result.last_offset < again.log_end_offset - 1


def test_a_restart_without_snapshots_replays_the_whole_log_and_leaves_one(tmp_path):
    plog = open_log(tmp_path)
    p, client = leader(plog), Producer()
    client.send(p, 7)                                           # 0: stays open
    for _ in range(12):
        client.send(p, 8, 2, transactional=False)
    active = plog.active.base_offset
    plog.close()
    for offset in list_snapshots(str(tmp_path)):
        os.remove(snapshot_path(str(tmp_path), offset))
    again = leader(open_log(tmp_path))
    assert again.last_stable_offset == 0
    assert list_snapshots(str(tmp_path)) == [active]


def test_a_torn_snapshot_is_passed_over_for_an_older_one(tmp_path):
    plog = open_log(tmp_path)
    p, client = leader(plog), Producer()
    client.send(p, 7)                                           # 0: stays open
    for _ in range(12):
        client.send(p, 8, 2, transactional=False)
    plog.close()
    newest = list_snapshots(str(tmp_path))[-1]
    with open(snapshot_path(str(tmp_path), newest), "r+b") as f:
        f.truncate(20)
    assert leader(open_log(tmp_path)).last_stable_offset == 0


def test_unclean_recovery_rebuilds_a_lost_txnindex(tmp_path):
    plog = open_log(tmp_path, LogConfig())
    p, client = leader(plog), Producer()
    client.send(p, 7, 2)                                        # 0-1
    client.send(p, 8)                                           # 2
    end(p, 7, commit=False)                                     # 3
    end(p, 8, commit=False)                                     # 4
    expected = aborted(p)
    assert expected == [AbortedTxn(7, 0, 3, 2), AbortedTxn(8, 2, 4, 5)]
    plog.close()
    os.remove(os.path.join(str(tmp_path), f"{0:020d}.txnindex"))
    reopened = open_log(tmp_path, LogConfig(), clean_shutdown=False, recovery_point=0)
    assert reopened.segments[0].txn_index_stale
    again = leader(reopened)
    assert aborted(again) == expected
    assert not reopened.segments[0].txn_index_stale
    reopened.close()
    # and written to disk: a clean start reads it back
    assert aborted(leader(open_log(tmp_path, LogConfig()))) == expected


def test_a_follower_tracks_transactions_and_knows_them_as_leader(tmp_path):
    lead, client = leader(open_log(tmp_path / "a")), Producer()
    client.send(lead, 7, 2)                                     # 0-1
    client.send(lead, 8)                                        # 2
    end(lead, 7, commit=False)                                  # 3
    follower = Partition("t", 0, open_log(tmp_path / "b"), node_id=1)
    follower.make_follower(leader_id=0, leader_epoch=1, partition_epoch=0, replicas=(0, 1),
                           isr=(0, 1))
    follower.append_as_follower(lead.log.read(0, 1 << 20), now_ms=0)
    assert aborted(follower) == aborted(lead) == [AbortedTxn(7, 0, 3, 2)]
    follower.make_leader(leader_epoch=2, partition_epoch=1, replicas=(1,), isr=(1,), now_ms=0)
    assert follower.last_stable_offset == 2  # producer 8's transaction, begun under the old leader
    assert end(follower, 8, commit=True) == (ErrorCode.NONE, 4)
    assert follower.last_stable_offset == 5


def test_truncation_reopens_a_transaction_whose_marker_went(tmp_path):
    plog = open_log(tmp_path)
    p, client = leader(plog), Producer()
    client.send(p, 7)                                           # 0
    for _ in range(8):
        client.send(p, 8, 2, transactional=False)
    end(p, 7, commit=False)
    marker = p.log_end_offset - 1
    client.send(p, 8, 2, transactional=False)
    assert aborted(p) == [AbortedTxn(7, 0, marker, marker + 1)]
    p.make_follower(leader_id=1, leader_epoch=2, partition_epoch=1, replicas=(0, 1),
                    isr=(0, 1))
    p.state.high_watermark = 5
    assert p.truncate_to(marker)
    assert aborted(p) == []
    assert p.producers.producers[7].current_txn_first_offset == 0
    assert p.last_stable_offset == 0
    assert all(o <= marker for o in list_snapshots(str(tmp_path)))


@pytest.mark.parametrize("kind", ["snapshot", "txnindex"])
def test_garbage_files_do_not_stop_a_partition(tmp_path, kind):
    plog = open_log(tmp_path, LogConfig())
    p, client = leader(plog), Producer()
    client.send(p, 7)
    end(p, 7, commit=False)
    plog.close()
    name = f"{0:020d}.{kind}"
    with open(os.path.join(str(tmp_path), name), "wb") as f:
        f.write(b"\xff" * 77)
    again = leader(open_log(tmp_path, LogConfig()))
    assert aborted(again) == [AbortedTxn(7, 0, 1, 2)]


def test_a_cleaner_swap_finished_at_start_has_its_txnindex_rebuilt(tmp_path):
    """A crash after the cleaner renamed its output .swap: the loader finishes the swap and
    drops the swap's indexes, the .txnindex with them; the partition re-indexes it."""
    plog = open_log(tmp_path)
    p, client = leader(plog), Producer()
    client.send(p, 7)                                           # 0
    end(p, 7, commit=False)                                     # 1
    for _ in range(12):
        client.send(p, 8, 2, transactional=False)
    assert len(plog.segments) > 2
    plog.close()
    stem = os.path.join(str(tmp_path), f"{0:020d}")
    with open(stem + ".log", "rb") as src, open(stem + ".log.swap", "wb") as dst:
        dst.write(src.read())  # the cleaner's output: here the same batches
    with open(stem + ".txnindex.swap", "wb") as f:
        f.write(b"torn")
    reopened = open_log(tmp_path)
    assert reopened.segments[0].txn_index_stale
    assert not os.path.exists(stem + ".txnindex")
    assert aborted(leader(reopened)) == [AbortedTxn(7, 0, 1, 2)]


def test_a_coordinators_batches_are_not_taken_for_retries(tmp_path):
    """Transactional offset commits carry the producer's id and epoch with sequence 0 each
    time (Kafka's group coordinator writes them so): as COORDINATOR origin they are all
    appended, epochs still fenced, and they belong to the producer's transaction."""
    p, client = leader(open_log(tmp_path)), Producer()
    for expected in (0, 1):
        buf = client.batch(7, seq=0, epoch=2)
        result = p.append_batch(buf, parse_batch_header(buf), 0, origin=COORDINATOR)
        assert (result.error, result.base_offset) == (ErrorCode.NONE, expected)
    stale = client.batch(7, seq=0, epoch=1)
    assert p.append_batch(stale, parse_batch_header(stale), 0,
                          origin=COORDINATOR).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert p.last_stable_offset == 0
    assert end(p, 7, commit=True, epoch=2) == (ErrorCode.NONE, 2)
    assert p.last_stable_offset == 3
    # a client's batch with the same sequence again is a retry, as before
    retry = client.batch(8, seq=0)
    p.append_batch(retry, parse_batch_header(retry), 0)
    again = p.append_batch(bytearray(retry), parse_batch_header(retry), 0)
    assert again.base_offset == 3 and p.log_end_offset == 4
