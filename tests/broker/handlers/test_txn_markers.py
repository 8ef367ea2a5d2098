"""The partition side of transactions through the wire: Produce of transactional batches,
WriteTxnMarkers (api 27) ending them, Fetch read_committed stopping at the LSO with the
aborted transactions, ListOffsets by isolation level, a restart, and bad input: markers for
partitions that are not here, stale epochs, refused principals, a client's control batch.

Most tests run a real broker in process (its log, partitions and handlers); the acks=all
corners (a follower that never fetches, a small ISR) use the fake broker around a real
partition, since one in-process broker has no followers."""

from __future__ import annotations

import uuid

import pytest
import trio

from broker.log import LogConfig, PartitionLog
from broker.partition import Partition
from harness.wait import wait_for
from protocol.control_records import EndTransactionMarker, end_txn_marker_batch
from protocol.errors import ErrorCode as E
from protocol.messages import FETCH, LIST_OFFSETS, PRODUCE, WRITE_TXN_MARKERS
from protocol.records import Record, decode_batches, encode_batch
from tests.broker.handlers.fakes import FakeBroker, call, register, topic
from tests.inproc import in_process_broker

# the partition side alone: batches of producers no coordinator knows, markers written
# by hand, so the leaders do not ask a coordinator first (KIP-890)
INPROC_OVERRIDES = {"transaction.partition.verification.enable": "false"}
NO_VERIFICATION = INPROC_OVERRIDES

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
LATEST = -1


def _batch(pid: int, seq: int, n: int = 1, *, transactional: bool = True) -> bytes:
    return encode_batch([Record(i, 1_000, b"k", b"p%d-%d" % (pid, seq + i)) for i in range(n)],
                        producer_id=pid, producer_epoch=0, base_sequence=seq,
                        is_transactional=transactional)


async def _produce(broker, records: bytes, *, transactional_id: str | None = "tx",
                   name: str = "t", index: int = 0) -> dict:
    answer = await call(broker, PRODUCE, 9, {
        "transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": name, "partition_data": [{"index": index,
                                                          "records": records}]}]})
    return answer["responses"][0]["partition_responses"][0]


def _marker(pid: int, commit: bool, partitions: dict[str, list[int]], *, epoch: int = 0,
            coordinator_epoch: int = 0) -> dict:
    return {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
            "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": n, "partition_indexes": ps} for n, ps in partitions.items()]}


async def _markers(broker, *markers: dict, version: int = 1) -> dict[tuple[int, str, int], int]:
    answer = await call(broker, WRITE_TXN_MARKERS, version, {"markers": list(markers)})
    return {(m["producer_id"], t["name"], p["partition_index"]): p["error_code"]
            for m in answer["markers"] for t in m["topics"] for p in t["partitions"]}


async def _fetch(broker, offset: int, isolation: int, *, max_wait_ms: int = 0) -> dict:
    answer = await call(broker, FETCH, 12, {
        "cluster_id": None, "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
        "max_bytes": 1 << 20, "isolation_level": isolation, "session_id": 0,
        "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": "t", "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20}]}]})
    return answer["responses"][0]["partitions"][0]


def _values(records: bytes | None) -> list[bytes]:
    return [r.value for h, rs in decode_batches(records or b"") if not h.is_control
            for r in rs]


async def _latest(broker, isolation: int) -> int:
    answer = await call(broker, LIST_OFFSETS, 5, {
        "replica_id": -1, "isolation_level": isolation, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": LATEST}]}]})
    p = answer["topics"][0]["partitions"][0]
    assert p["error_code"] == E.NONE
    return p["offset"]


async def test_markers_end_transactions_and_read_committed_sees_only_what_committed(
        inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("t", 1)
    assert (await _produce(broker, _batch(7, 0, 2)))["error_code"] == E.NONE      # 0-1
    assert (await _produce(broker, _batch(8, 0)))["error_code"] == E.NONE         # 2
    assert (await _produce(broker, _batch(9, 0, transactional=False),
                           transactional_id=None))["error_code"] == E.NONE          # 3
    assert (await _produce(broker, _batch(7, 2)))["error_code"] == E.NONE         # 4

    pending = await _fetch(broker, 0, READ_COMMITTED)
    assert (pending["high_watermark"], pending["last_stable_offset"]) == (5, 0)
    assert pending["records"] in (b"", None) and pending["aborted_transactions"] == []
    assert await _latest(broker, READ_COMMITTED) == 0
    assert await _latest(broker, READ_UNCOMMITTED) == 5
    dirty = await _fetch(broker, 0, READ_UNCOMMITTED)
    assert len(_values(dirty["records"])) == 5 and dirty["aborted_transactions"] is None
    assert dirty["last_stable_offset"] == 0  # every answer reports the LSO

    assert await _markers(broker, _marker(7, False, {"t": [0]}),
                          _marker(8, True, {"t": [0]})) == {
        (7, "t", 0): E.NONE, (8, "t", 0): E.NONE}
    done = await _fetch(broker, 0, READ_COMMITTED)
    assert (done["high_watermark"], done["last_stable_offset"]) == (7, 7)
    assert done["aborted_transactions"] == [{"producer_id": 7, "first_offset": 0}]
    assert len(_values(done["records"])) == 5  # the consumer drops producer 7's itself
    # a read past the aborted transaction's marker is told of none
    assert (await _fetch(broker, 6, READ_COMMITTED))["aborted_transactions"] == []
    assert await _latest(broker, READ_COMMITTED) == 7


async def test_a_read_committed_fetch_waits_until_a_marker_moves_the_lso(inproc,
                                                                         autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("t", 1)
    await _produce(broker, _batch(7, 0))                                           # 0
    answers: list[dict] = []

    async def poll() -> None:
        answers.append(await _fetch(broker, 0, READ_COMMITTED, max_wait_ms=60_000))

    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await trio.sleep(1)
        await _produce(broker, _batch(7, 1))  # more of the open transaction: nothing to read
        await trio.sleep(1)
        assert answers == []
        await _markers(broker, _marker(7, True, {"t": [0]}))
    assert trio.current_time() - started < 10
    assert _values(answers[0]["records"]) == [b"p7-0", b"p7-1"]
    assert answers[0]["last_stable_offset"] == 3


async def test_markers_for_what_is_not_here_or_is_stale_are_refused(inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("t", 1)
    await _produce(broker, _batch(7, 0))
    assert await _markers(broker, _marker(7, True, {"t": [0, 5], "nope": [0], "": [-1]})) == {
        (7, "t", 0): E.NONE, (7, "t", 5): E.UNKNOWN_TOPIC_OR_PARTITION,
        (7, "nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION, (7, "", -1): E.UNKNOWN_TOPIC_OR_PARTITION}
    end = broker.partition("t", 0).log_end_offset
    await _produce(broker, encode_batch([Record(0, 1_000, b"k", b"v")], producer_id=7,
                                        producer_epoch=2, base_sequence=0,
                                        is_transactional=True))
    assert await _markers(broker, _marker(7, False, {"t": [0]}, epoch=1)) == {
        (7, "t", 0): E.INVALID_PRODUCER_EPOCH}
    assert await _markers(broker, _marker(7, False, {"t": [0]}, epoch=2,
                                          coordinator_epoch=4)) == {(7, "t", 0): E.NONE}
    assert await _markers(broker, _marker(7, True, {"t": [0]}, epoch=2,
                                          coordinator_epoch=3)) == {
        (7, "t", 0): E.TRANSACTION_COORDINATOR_FENCED}
    assert broker.partition("t", 0).log_end_offset == end + 2  # the batch and one marker
    # nothing to do, and one producer's markers merged into one answer
    assert (await call(broker, WRITE_TXN_MARKERS, 0, {"markers": []}))["markers"] == []
    answer = await call(broker, WRITE_TXN_MARKERS, 2, {"markers": [
        {**_marker(11, True, {"t": [0]}), "transaction_version": 2},
        {**_marker(11, True, {"t": [0]}), "transaction_version": 2}]})
    assert [m["producer_id"] for m in answer["markers"]] == [11]


async def test_a_client_may_not_write_markers_nor_transactions_without_its_id(
        inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("t", 1)
    marker = end_txn_marker_batch(EndTransactionMarker(False, 0), producer_id=7,
                                  producer_epoch=0, timestamp_ms=1_000)
    assert (await _produce(broker, marker))["error_code"] == E.INVALID_RECORD
    assert (await _produce(broker, _batch(7, 0), transactional_id=None))["error_code"] == \
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert broker.partition("t", 0).log_end_offset == 0


async def test_a_marker_in_the_offsets_topic_is_handed_to_the_group_coordinator(
        inproc, autojump_clock):
    broker = inproc.broker
    assert await broker.groups.ensure_offsets_topic()
    # (after the partition's load: the coordinator's loader does not read markers yet)
    await wait_for(lambda: broker.partition("__consumer_offsets", 0) is not None
                   and not broker.groups.coordinator.loading, 10, "the offsets topic loaded")
    completed: list[tuple] = []
    if not hasattr(type(broker.groups), "complete_transaction"):
        broker.groups.complete_transaction = lambda *args: completed.append(args)
    else:  # the coordinator's own: watch it
        own = broker.groups.complete_transaction

        def complete_transaction(*args):
            completed.append(args)
            return own(*args)
        broker.groups.complete_transaction = complete_transaction
    assert await _markers(broker, _marker(7, True, {"__consumer_offsets": [0]}),
                          _marker(8, False, {"__consumer_offsets": [0]}, epoch=3)) == {
        (7, "__consumer_offsets", 0): E.NONE, (8, "__consumer_offsets", 0): E.NONE}
    assert completed == [(0, 7, 0, True), (0, 8, 3, False)]


async def test_a_restarted_broker_knows_open_and_aborted_transactions(tmp_path,
                                                                       autojump_clock):
    async with in_process_broker(tmp_path, **{"log.segment.bytes": "300"},
                                 **NO_VERIFICATION) as inproc:
        broker = inproc.broker
        await inproc.create_topic("t", 1)
        await _produce(broker, _batch(7, 0))                                       # 0
        await _markers(broker, _marker(7, False, {"t": [0]}))                      # 1
        await _produce(broker, _batch(8, 0))                                       # 2
        for seq in range(6):                                                       # 3-8
            await _produce(broker, _batch(9, seq, transactional=False),
                           transactional_id=None)
        assert len(broker.partition("t", 0).log.segments) > 2
    async with in_process_broker(tmp_path, **NO_VERIFICATION) as inproc:
        broker = inproc.broker
        assert await broker.wait_for_metadata(lambda cache: broker.serves(["t"]), 10)
        fetched = await _fetch(broker, 0, READ_COMMITTED)
        assert fetched["last_stable_offset"] == 2  # producer 8's transaction is still open
        assert fetched["aborted_transactions"] == [{"producer_id": 7, "first_offset": 0}]
        await _markers(broker, _marker(8, True, {"t": [0]}))
        assert (await _fetch(broker, 0, READ_COMMITTED))["last_stable_offset"] == 10


def _fake_with_partition(tmp_path, *, replicas: tuple[int, ...], isr: tuple[int, ...],
                         leader: int = 0, config: dict[str, str] | None = None,
                         log_config: LogConfig | None = None) -> FakeBroker:
    broker = FakeBroker([*register(0), *register(1),
                         *topic("t", uuid.UUID(int=1), [list(replicas)], leaders=[leader],
                                isr=[list(isr)])], config={**NO_VERIFICATION, **(config or {})})
    plog = PartitionLog.open(str(tmp_path), "t", 0, log_config or LogConfig())
    partition = Partition("t", 0, plog, node_id=0)
    if leader == 0:
        partition.make_leader(leader_epoch=0, partition_epoch=0, replicas=replicas, isr=isr,
                              now_ms=0)
    else:
        partition.make_follower(leader_id=leader, leader_epoch=0, partition_epoch=0,
                                replicas=replicas, isr=isr)
    broker.partitions[("t", 0)] = partition
    return broker


async def test_a_marker_waits_for_the_isr_as_acks_all_does(tmp_path, autojump_clock):
    broker = _fake_with_partition(tmp_path / "a", replicas=(0, 1), isr=(0, 1),
                                  config={"request.timeout.ms": "2000"})
    started = trio.current_time()
    assert await _markers(broker, _marker(7, True, {"t": [0]})) == {
        (7, "t", 0): E.REQUEST_TIMED_OUT}  # follower 1 never fetches it
    assert trio.current_time() - started == pytest.approx(2, abs=0.1)
    assert broker.partition("t", 0).log_end_offset == 1  # written all the same, as in Kafka

    small = _fake_with_partition(tmp_path / "b", replicas=(0, 1), isr=(0,),
                                 log_config=LogConfig(min_insync_replicas=2))
    assert await _markers(small, _marker(7, True, {"t": [0]})) == {
        (7, "t", 0): E.NOT_ENOUGH_REPLICAS}
    assert small.partition("t", 0).log_end_offset == 0

    follower = _fake_with_partition(tmp_path / "c", replicas=(0, 1), isr=(0, 1), leader=1)
    assert await _markers(follower, _marker(7, True, {"t": [0]})) == {
        (7, "t", 0): E.NOT_LEADER_OR_FOLLOWER}


async def test_only_a_cluster_principal_may_write_markers(tmp_path, autojump_clock):
    broker = _fake_with_partition(tmp_path, replicas=(0,), isr=(0,), config={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    assert await _markers(broker, _marker(7, True, {"t": [0], "nope": [3]})) == {
        (7, "t", 0): E.CLUSTER_AUTHORIZATION_FAILED,
        (7, "nope", 3): E.CLUSTER_AUTHORIZATION_FAILED}
    assert broker.partition("t", 0).log_end_offset == 0
