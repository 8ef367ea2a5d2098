"""Our replica fetcher (broker.replication.fetcher) speaking KIP-227 to a scripted leader:
what its Fetch requests carry round after round, and how it answers session errors.

The leader is a fake channel that records each Fetch and answers from a script; the
partitions are real (logs in tmp_path), so an answer's records are appended and the next
request carries the new fetch offset."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
import trio

from broker.config import BrokerConfig, topic_log_config
from broker.log.log import PartitionLog
from broker.partition import Partition
from broker.replication.fetcher import FETCH_VERSION, ReplicaFetcher
from broker.replication.quota import ReplicationQuotas
from protocol.errors import ErrorCode
from protocol.records import Record, encode_batch

LEADER = 1
TOPIC_ID = uuid.UUID(int=7)
PARTITIONS = 50


class ScriptedLeader:
    """A PeerChannel stand-in: each Fetch is recorded and answered by `answer(body)`."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.answers: list[dict] = []

    async def request(self, api_key, version, body, timeout_s):
        assert version == FETCH_VERSION
        self.requests.append(body)
        return self.answers.pop(0)


def answer(session_id: int, partitions: dict[int, bytes] | None = None, *,
           error: ErrorCode = ErrorCode.NONE, high_watermark: int = 0) -> dict:
    parts = [{"partition_index": i, "error_code": 0, "high_watermark": high_watermark,
              "log_start_offset": 0, "records": records}
             for i, records in (partitions or {}).items()]
    return {"error_code": error, "session_id": session_id,
            "responses": [{"topic_id": TOPIC_ID, "partitions": parts}] if parts else []}


def named(body: dict) -> dict[int, int]:
    """partition -> fetch offset, as a request names them."""
    return {p["partition"]: p["fetch_offset"] for t in body["topics"] for p in t["partitions"]}


@pytest.fixture
async def fetcher(tmp_path):
    config = BrokerConfig.load({"broker.id": "0"})
    broker = SimpleNamespace(
        config=config, node_id=0, lifecycle=SimpleNamespace(broker_epoch=42),
        metadata_cache=SimpleNamespace(
            topic=lambda name: SimpleNamespace(topic_id=TOPIC_ID) if name == "t" else None),
        now_ms=lambda: 1_000, notify_data_arrived=lambda topic, index: None,
        events=SimpleNamespace(emit=lambda *a, **k: None),
        replication_quotas=ReplicationQuotas(0, {}))
    f = ReplicaFetcher(broker, LEADER, 0)
    logs = []
    for i in range(PARTITIONS):
        log = PartitionLog.open(str(tmp_path / f"t-{i}"), "t", i, topic_log_config(config, {}))
        logs.append(log)
        p = Partition("t", i, log, node_id=0)
        p.make_follower(leader_id=LEADER, leader_epoch=3, partition_epoch=0,
                        replicas=(0, 1), isr=(0, 1))
        f.add(p)
        state = f.partitions[("t", i)]
        state.truncating = False  # as after OffsetForLeaderEpoch: ready to fetch
        f._sync(state)
    yield f
    for log in logs:
        log.close()


async def test_the_first_fetch_is_full_and_the_next_ones_carry_only_what_moved(fetcher):
    leader = ScriptedLeader()
    record = encode_batch([Record(0, 0, None, b"r", [])], base_offset=0)
    leader.answers = [answer(99), answer(99), answer(99, {7: record}, high_watermark=1),
                      answer(99)]
    await fetcher._fetch(leader)
    full = leader.requests[0]
    assert (full["session_id"], full["session_epoch"]) == (0, 0)
    assert named(full) == {i: 0 for i in range(PARTITIONS)}
    assert full["replica_state"] == {"replica_id": 0, "replica_epoch": 42}  # KIP-903
    assert full["topics"][0]["topic_id"] == TOPIC_ID

    await fetcher._fetch(leader)  # idle: nothing to name
    idle = leader.requests[1]
    assert (idle["session_id"], idle["session_epoch"], idle["topics"]) == (99, 1, [])

    await fetcher._fetch(leader)  # the answer brings a record for partition 7
    assert fetcher.partitions[("t", 7)].partition.log_end_offset == 1
    await fetcher._fetch(leader)
    moved = leader.requests[3]
    # only the partition whose fetch offset moved: that is what advances the leader's HW
    assert (moved["session_epoch"], named(moved)) == (3, {7: 1})


async def test_session_errors_make_the_next_fetch_a_full_one(fetcher):
    leader = ScriptedLeader()
    leader.answers = [answer(99), answer(0, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
                      answer(55), answer(0, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH),
                      answer(56)]
    for _ in range(5):
        await fetcher._fetch(leader)
    sessions = [(r["session_id"], r["session_epoch"], len(named(r))) for r in leader.requests]
    assert sessions == [
        (0, 0, PARTITIONS),   # full: opens session 99
        (99, 1, 0),           # incremental: the leader no longer knows 99
        (0, 0, PARTITIONS),   # full: a new session (55)
        (55, 1, 0),           # incremental: out of step
        (55, 0, PARTITIONS),  # full, naming 55 so that the leader closes it
    ]


async def test_a_partition_that_leaves_is_forgotten_and_one_backing_off_comes_back(fetcher):
    leader = ScriptedLeader()
    leader.answers = [answer(99), answer(99), answer(99)]
    await fetcher._fetch(leader)
    fetcher.remove(("t", 3))  # its leadership moved to another broker
    backing_off = fetcher.partitions[("t", 4)]
    fetcher._delay(backing_off, 10.0)  # an error: replica.fetch.backoff.ms
    await fetcher._fetch(leader)
    forgotten = leader.requests[1]["forgotten_topics_data"]
    assert [(t["topic_id"], sorted(t["partitions"])) for t in forgotten] == [(TOPIC_ID, [3, 4])]
    backing_off.delayed_until = 0.0  # the back-off is over
    fetcher._expire_delays(trio.current_time())
    await fetcher._fetch(leader)
    assert named(leader.requests[2]) == {4: 0}  # added back, and only it


async def test_over_its_throttle_a_follower_leaves_out_only_throttled_replicas_not_in_sync(
        fetcher):
    """KIP-73: a follower over follower.replication.throttled.rate stops fetching the
    throttled partitions it is out of the ISR of; in-sync and unthrottled ones go on."""
    quota = fetcher.broker.replication_quotas.follower
    quota.bound, quota.throttled = 1_000, {"t": frozenset({5, 6, 7})}
    for i in (5, 6):  # added by a reassignment: not in the ISR yet (7 is in sync)
        fetcher.partitions[("t", i)].partition.make_follower(
            leader_id=LEADER, leader_epoch=3, partition_epoch=1, replicas=(0, 1), isr=(1,))
    leader = ScriptedLeader()
    big = encode_batch([Record(0, 0, None, b"x" * 5_000, [])], base_offset=0)
    leader.answers = [answer(99, {5: big}), answer(99), answer(99)]
    fetcher._hold_throttled()
    await fetcher._fetch(leader)  # under the bound: everything is fetched
    assert set(named(leader.requests[0])) == set(range(PARTITIONS))
    assert quota.is_exceeded(trio.current_time())  # 5 KB recorded against 1 KB/s
    fetcher._hold_throttled()
    await fetcher._fetch(leader)
    forgotten = leader.requests[1]["forgotten_topics_data"]
    assert [(t["topic_id"], sorted(t["partitions"])) for t in forgotten] == [(TOPIC_ID, [5, 6])]
    assert fetcher.partitions[("t", 5)].delayed_until > trio.current_time() + 1
