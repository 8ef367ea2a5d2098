"""The leader's replication throttle (KIP-73, broker.replication.quota) on a real broker in
process: set through the topic and broker configs as reassign-partitions sets them, it
holds back a follower out of the ISR once over the rate, never a consumer, and lets go
when the rate config is deleted."""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import FETCH, INCREMENTAL_ALTER_CONFIGS, request_body
from tests.broker.handlers.fakes import call

# a window long enough that no jump of the virtual clock forgets what was recorded
INPROC_OVERRIDES = {"replication.quota.window.size.seconds": "3600"}
FOLLOWER = 7  # a broker out of the ISR (a replica a reassignment is adding)
SET, DELETE = 0, 1


def _fetch(replica_id: int) -> dict:
    return {"cluster_id": None, "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 1,
            "max_bytes": 1 << 24, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "moving", "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}]}


async def _records(broker, replica_id: int) -> bytes:
    answer = await call(broker, FETCH, 12, _fetch(replica_id))
    (part,) = answer["responses"][0]["partitions"]
    assert part["error_code"] == ErrorCode.NONE and part["high_watermark"] == 20
    return part["records"]


async def _broker_rate(inproc, op: int, value: str | None) -> None:
    broker = inproc.broker
    body = request_body(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [{
        "resource_type": 4, "resource_name": str(broker.node_id), "configs": [
            {"name": "leader.replication.throttled.rate", "config_operation": op,
             "value": value}]}]})
    answer = await broker.controller_channel.forward(INCREMENTAL_ALTER_CONFIGS, 1, body)
    assert answer["responses"][0]["error_code"] == ErrorCode.NONE
    assert await broker.wait_for_metadata(
        lambda cache: (cache.image.broker_configs(broker.node_id)
                       .get("leader.replication.throttled.rate") == value), 10)


async def test_a_leader_over_its_throttle_holds_back_an_out_of_sync_follower_only(
        inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("moving", 1, **{"leader.replication.throttled.replicas": "*"})
    await inproc.produce("moving", [(0, b"v" * 500)] * 20)
    await _broker_rate(inproc, SET, "1")  # 1 B/s: 10 KB over an hour window is over it

    assert await _records(broker, FOLLOWER)  # under the rate yet: ~10 KB go out
    assert broker.replication_quotas.leader.is_exceeded(autojump_clock.current_time())
    assert await _records(broker, FOLLOWER) == b""  # over it: held back, HW still told
    assert await _records(broker, -1)  # a consumer is never throttled

    await _broker_rate(inproc, DELETE, None)  # what --verify does once the move is done
    assert await _records(broker, FOLLOWER)
