"""OffsetForLeaderEpoch answered by a leader from its epoch cache, rebuilt from the batch
headers of a real log spanning several segments (Kafka's LeaderEpochFileCache.endOffsetFor)."""

from __future__ import annotations

import uuid

import pytest

from broker.log import LogConfig, PartitionLog
from broker.partition import Partition, StaleLeaderEpoch
from broker.replication.leader_epochs import EpochEntry, LeaderEpochCache, entries_from_headers
from broker.replication.manager import ReplicaManager
from protocol import messages as m
from protocol.errors import ErrorCode as E
from protocol.records import Record, encode_batch
from tests.broker.handlers.fakes import FakeBroker, call, register, topic


def _batch(n: int = 2) -> bytes:
    return encode_batch([Record(i, 1_000 + i, b"k", b"v" * 100, []) for i in range(n)])


@pytest.fixture
def log(tmp_path):
    """Epoch 1: offsets 0-3; epoch 2: none; epoch 4: 4-9; epoch 7: 10-11. Small segments,
    so the epochs straddle segment boundaries."""
    log = PartitionLog.open(str(tmp_path), "t", 0, LogConfig(segment_bytes=400))
    for epoch, batches in ((1, 2), (4, 3), (7, 1)):
        for _ in range(batches):
            log.append(_batch(), leader_epoch=epoch, now_ms=1_000)
    assert len(log.segments) > 2
    yield log
    log.close()


def leading(topic: str, index: int, log, leader_epoch: int = 0) -> Partition:
    """A partition this broker (0) leads alone, so its HW is its LEO."""
    epochs = LeaderEpochCache(entries_from_headers(
        (h.partition_leader_epoch, h.base_offset)
        for segment in log.segments for _pos, h in segment.headers()))
    partition = Partition(topic, index, log, node_id=0, epochs=epochs)
    partition.make_leader(leader_epoch=leader_epoch, partition_epoch=0, replicas=(0,),
                          isr=(0,), now_ms=0)
    return partition


async def test_offset_for_leader_epoch_answers_from_the_log(log):
    broker = FakeBroker([*register(0), *topic("t", uuid.UUID(int=1), [[0]], epochs=[8])])
    broker.partitions[("t", 0)] = leading("t", 0, log, leader_epoch=8)
    body = await call(broker, m.OFFSET_FOR_LEADER_EPOCH, 4, {
        "replica_id": -1, "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": 8, "leader_epoch": e}
            for e in (8, 9, 7, 5, 2, 1)]}]})
    assert [(p["error_code"], p["leader_epoch"], p["end_offset"])
            for p in body["topics"][0]["partitions"]] == [
        (E.NONE, 8, 12),  # the current epoch: the log end, though it wrote nothing yet
        (E.NONE, -1, -1),  # newer than ours
        (E.NONE, 7, 12),  # where epoch 8 began
        (E.NONE, 4, 10),  # the largest epoch before it, up to where the next one starts
        (E.NONE, 1, 4),  # never written: the epoch before it
        (E.NONE, 1, 4)]


def test_a_leadership_older_than_the_log_is_refused_and_keeps_the_history(log):
    """An image older than the log (epoch 4 while the log already holds epoch 7) must not
    cut the epoch history back, nor make this replica lead at that epoch."""
    partition = leading("t", 0, log, leader_epoch=8)
    history = partition.epochs.entries
    with pytest.raises(StaleLeaderEpoch):
        partition.make_leader(leader_epoch=4, partition_epoch=1, replicas=(0,), isr=(0,),
                              now_ms=0)
    assert partition.epochs.entries == history
    assert partition.leader_epoch == 8
    # a newer one is taken as before (epoch 8 wrote nothing, so 9 replaces it at 12)
    partition.make_leader(leader_epoch=9, partition_epoch=2, replicas=(0,), isr=(0,), now_ms=0)
    assert partition.epochs.entries == [*history[:-1], EpochEntry(9, 12)]


def test_the_replica_manager_leaves_a_stale_leadership_untaken(log, caplog):
    broker = FakeBroker([*register(0), *topic("t", uuid.UUID(int=1), [[0]], epochs=[3])])
    partition = Partition("t", 0, log, node_id=0, epochs=LeaderEpochCache(entries_from_headers(
        (h.partition_leader_epoch, h.base_offset)
        for segment in log.segments for _pos, h in segment.headers())))
    replicas = ReplicaManager(broker)
    registration = broker.metadata_cache.partition("t", 0)
    assert registration.leader == 0 and registration.leader_epoch == 3
    replicas.apply_registration(partition, registration, now_ms=0)
    assert not partition.is_leader
    assert [e.epoch for e in partition.epochs.entries] == [1, 4, 7]
    assert "leader epoch 3 is older than epoch 7 in the log" in caplog.text
