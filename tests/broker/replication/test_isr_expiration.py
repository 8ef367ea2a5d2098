"""The leader's ISR-expiration pass (ReplicaManager.expire_isr) over partitions whose
followers fetch through KIP-227 sessions: besides shrinking, it lets back in a follower that
still fetches the partition in its session and has caught up, even when no fetch names the
partition again (an idle partition the follower was caught up on before it fell out)."""

from __future__ import annotations

from types import SimpleNamespace

from broker.config import BrokerConfig, topic_log_config
from broker.log.log import PartitionLog
from broker.partition import Partition
from broker.replication.manager import ReplicaManager

NOW_MS = 1_000_000


def _fake_broker(partition: Partition, session_used_ms: int) -> SimpleNamespace:
    key = (partition.topic, partition.index)
    session = SimpleNamespace(replica_id=1, last_used_ms=session_used_ms,
                              partitions={key: SimpleNamespace(read_ms=session_used_ms)})
    return SimpleNamespace(
        config=BrokerConfig.load({"broker.id": "0"}), partitions={key: partition},
        fetch_sessions=SimpleNamespace(holding=lambda topic, index: [(session, key)]))


def _caught_up_follower_outside_the_isr(tmp_path) -> tuple[Partition, PartitionLog]:
    config = BrokerConfig.load({"broker.id": "0"})
    log = PartitionLog.open(str(tmp_path / "t-0"), "t", 0, topic_log_config(config, {}))
    p = Partition("t", 0, log, node_id=0)
    p.make_leader(leader_epoch=1, partition_epoch=1, replicas=(0, 1), isr=(0,), now_ms=NOW_MS)
    # the follower's one fetch that named the partition: caught up; its proposal was
    # refused (its broker still fenced), and no later fetch names the idle partition
    update = p.follower_fetch(1, p.log_end_offset, NOW_MS, 7)
    assert update is not None and update.expand is not None
    p.state.on_alter_partition_result(update.expand, error=True)
    assert p.state.pending is None and p.isr == (0,)
    return p, log


async def test_a_caught_up_follower_still_fetching_is_proposed_back_into_the_isr(tmp_path):
    p, log = _caught_up_follower_outside_the_isr(tmp_path)
    try:
        manager = ReplicaManager(_fake_broker(p, session_used_ms=NOW_MS + 500))
        manager.expire_isr(NOW_MS + 1_000)
        change = manager._proposals[("t", 0)]
        assert change.kind == "expand" and change.new_isr == (0, 1)
    finally:
        log.close()


async def test_a_follower_whose_session_went_quiet_is_not_proposed(tmp_path):
    p, log = _caught_up_follower_outside_the_isr(tmp_path)
    try:
        broker = _fake_broker(p, session_used_ms=NOW_MS)
        manager = ReplicaManager(broker)
        manager.expire_isr(NOW_MS + broker.config.replica_lag_time_max_ms + 1)
        assert ("t", 0) not in manager._proposals and p.state.pending is None
    finally:
        log.close()
