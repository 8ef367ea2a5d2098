"""The Fetch handler with incremental fetch sessions (KIP-227) on a real broker in process:
what a full and an incremental fetch answer, what they read, Kafka's session errors, topic
ids (v13+), and bad input (a partition named twice, an unknown topic id)."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter

import pytest
import trio

from broker.log.log import PartitionLog
from protocol.errors import ErrorCode
from protocol.messages import DELETE_TOPICS, FETCH, PRODUCE
from protocol.records import Record, decode_batches, encode_batch
from tests.broker.handlers.fakes import call

PARTITIONS = 20
MARGIN_S = 0.01


def _partition(index: int, offset: int = 0) -> dict:
    return {"partition": index, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}


def _fetch_body(session_id: int, epoch: int, topics: list, *, max_wait_ms: int = 0,
                forgotten: list | None = None) -> dict:
    return {"cluster_id": None, "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": 1 << 24, "isolation_level": 0, "session_id": session_id,
            "session_epoch": epoch, "topics": topics,
            "forgotten_topics_data": forgotten or [], "rack_id": ""}


async def _produce(broker, topic: str, index: int, value: bytes) -> None:
    answer = await call(broker, PRODUCE, 9, {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": index, "records": encode_batch([Record(0, 0, None, value, [])])}]}]})
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NONE


def _answered(answer: dict) -> dict[int, dict]:
    return {p["partition_index"]: p for t in answer["responses"] for p in t["partitions"]}


def _values(records: bytes) -> list[bytes]:
    return [r.value for _, rs in decode_batches(records) for r in rs]


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """How many times each partition's log was read."""
    counted: Counter = Counter()
    original = PartitionLog.read

    def read(self, *args, **kwargs):
        counted[(self.topic, self.partition)] += 1
        return original(self, *args, **kwargs)
    monkeypatch.setattr(PartitionLog, "read", read)
    return counted


async def test_an_incremental_fetch_answers_and_reads_only_what_moved(inproc, autojump_clock,
                                                                      reads):
    broker = inproc.broker
    await inproc.create_topic("many", PARTITIONS)
    every = [{"topic": "many", "partitions": [_partition(i) for i in range(PARTITIONS)]}]
    full = await call(broker, FETCH, 12, _fetch_body(0, 0, every))
    session_id = full["session_id"]
    assert session_id != 0 and len(_answered(full)) == PARTITIONS  # a full answer: all

    idle = await call(broker, FETCH, 12, _fetch_body(session_id, 1, []))
    assert idle["error_code"] == ErrorCode.NONE and idle["responses"] == []

    await _produce(broker, "many", 7, b"seven")
    reads.clear()
    moved = await call(broker, FETCH, 12, _fetch_body(session_id, 2, []))
    (seven,) = _answered(moved).values()
    assert seven["partition_index"] == 7 and _values(seven["records"]) == [b"seven"]
    assert seven["high_watermark"] == 1
    assert set(reads) == {("many", 7)}  # the 19 idle partitions were not even read

    # the fetcher moves past the record: nothing more to say about partition 7 (at the
    # log's end, not even a read of it)
    reads.clear()
    caught_up = await call(broker, FETCH, 12, _fetch_body(
        session_id, 3, [{"topic": "many", "partitions": [_partition(7, offset=1)]}]))
    assert caught_up["responses"] == [] and not reads


async def test_session_errors_answer_the_whole_request_and_leave_the_session_as_it_was(
        inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("errs", 2)
    topics = [{"topic": "errs", "partitions": [_partition(0), _partition(1)]}]
    session_id = (await call(broker, FETCH, 12, _fetch_body(0, 0, topics)))["session_id"]
    other = (await call(broker, FETCH, 12, _fetch_body(0, 0, topics)))["session_id"]
    assert (await call(broker, FETCH, 12, _fetch_body(session_id, 1, [])))["error_code"] == 0

    stale = await call(broker, FETCH, 12, _fetch_body(session_id, 1, []))
    assert stale["error_code"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert stale["responses"] == [] and stale["session_id"] == 0
    unknown = await call(broker, FETCH, 12, _fetch_body(session_id ^ 0x5A5A, 1, []))
    assert unknown["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    v13 = await call(broker, FETCH, 13, _fetch_body(session_id, 2, []))
    assert v13["error_code"] == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR

    # neither session was disturbed: each goes on at its next epoch
    await _produce(broker, "errs", 1, b"x")
    for sid in (session_id, other):
        epoch = 2 if sid == session_id else 1
        answer = await call(broker, FETCH, 12, _fetch_body(sid, epoch, []))
        assert answer["error_code"] == ErrorCode.NONE and set(_answered(answer)) == {1}


async def test_a_waiting_incremental_fetch_is_woken_by_its_partition_and_reads_only_it(
        inproc, autojump_clock, reads):
    broker = inproc.broker
    await inproc.create_topic("wait", PARTITIONS)
    every = [{"topic": "wait", "partitions": [_partition(i) for i in range(PARTITIONS)]}]
    session_id = (await call(broker, FETCH, 12, _fetch_body(0, 0, every)))["session_id"]
    await inproc.create_topic("elsewhere", 1)
    answers: list[tuple[float, dict]] = []

    async def poll() -> None:
        answer = await call(broker, FETCH, 12, _fetch_body(session_id, 1, [],
                                                           max_wait_ms=30_000))
        answers.append((trio.current_time(), answer))

    reads.clear()
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await trio.sleep(1)
        await _produce(broker, "elsewhere", 0, b"not ours")  # wakes nothing of the session
        await trio.sleep(0.5)
        await _produce(broker, "wait", 11, b"eleven")
    ((at, answer),) = answers
    assert at - started == pytest.approx(1.5, abs=MARGIN_S)
    assert list(_answered(answer)) == [11]
    assert _values(_answered(answer)[11]["records"]) == [b"eleven"]
    assert reads[("wait", 11)] == 1 and sum(reads[("wait", i)] for i in range(20)) == 1


async def test_forgotten_partitions_leave_the_session(inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("forget", 3)
    topics = [{"topic": "forget", "partitions": [_partition(i) for i in range(3)]}]
    session_id = (await call(broker, FETCH, 12, _fetch_body(0, 0, topics)))["session_id"]
    await call(broker, FETCH, 12, _fetch_body(
        session_id, 1, [], forgotten=[{"topic": "forget", "partitions": [0, 2]}]))
    assert set(broker.fetch_sessions.get(session_id).partitions) == {("forget", 1)}
    for index in range(3):
        await _produce(broker, "forget", index, b"v")
    answer = await call(broker, FETCH, 12, _fetch_body(session_id, 2, []))
    assert set(_answered(answer)) == {1}


async def test_fetch_v13_names_topics_by_id_and_an_unknown_id_is_unknown_topic_id(
        inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("byid", 2)
    await _produce(broker, "byid", 1, b"by id")
    topic_id = broker.metadata_cache.topic("byid").topic_id
    missing = uuid.UUID(int=12345)
    body = _fetch_body(0, 0, [
        {"topic_id": topic_id, "partitions": [_partition(0), _partition(1)]},
        {"topic_id": missing, "partitions": [_partition(0)]}])
    for version in (13, 17):
        answer = await call(broker, FETCH, version, body)
        by_id = {t["topic_id"]: {p["partition_index"]: p for p in t["partitions"]}
                 for t in answer["responses"]}
        assert by_id[missing][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
        assert by_id[topic_id][0]["error_code"] == ErrorCode.NONE
        assert _values(by_id[topic_id][1]["records"]) == [b"by id"]


async def test_a_partition_named_twice_is_answered_once_for_the_last_naming(
        inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("twice", 1)
    await _produce(broker, "twice", 0, b"first")
    await _produce(broker, "twice", 0, b"second")
    body = _fetch_body(0, -1, [{"topic": "twice", "partitions": [
        _partition(0, offset=0), _partition(0, offset=1)]}])
    answer = await call(broker, FETCH, 12, body)
    (only,) = [p for t in answer["responses"] for p in t["partitions"]]
    assert _values(only["records"]) == [b"second"]


async def test_a_v13_session_never_serves_a_recreated_topic_under_the_old_id(
        inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("again", 1)
    old_id = broker.metadata_cache.topic("again").topic_id
    full = await call(broker, FETCH, 13, _fetch_body(0, 0, [
        {"topic_id": old_id, "partitions": [_partition(0)]}]))
    session_id = full["session_id"]
    deleted = await call(broker, DELETE_TOPICS, 5, {"topic_names": ["again"],
                                                    "timeout_ms": 10_000})
    assert deleted["responses"][0]["error_code"] == ErrorCode.NONE
    assert await broker.wait_for_metadata(lambda c: c.topic("again") is None, 10)
    await inproc.create_topic("again", 1)
    assert broker.metadata_cache.topic("again").topic_id != old_id
    await _produce(broker, "again", 0, b"the new topic's")
    answer = await call(broker, FETCH, 13, _fetch_body(session_id, 1, []))
    (old,) = [p for t in answer["responses"] if t["topic_id"] == old_id
              for p in t["partitions"]]
    assert old["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID and not old["records"]


async def test_a_new_isr_makes_the_session_read_the_partition_at_its_next_fetch(
        inproc, autojump_clock):
    """A follower the controller dropped from an idle partition's ISR (its broker fenced,
    say, while paused) is caught up there, so its incremental fetches never name the
    partition again: unless the new ISR marks it, the leader never looks at the
    follower's offset and never lets it back in (a Docker chaos run stayed short of a full
    ISR on 24 idle partitions for 90 s after healing)."""
    broker = inproc.broker
    await inproc.create_topic("isr", 2)
    topics = [{"topic": "isr", "partitions": [_partition(0), _partition(1)]}]
    session_id = (await call(broker, FETCH, 12, _fetch_body(0, 0, topics)))["session_id"]
    assert (await call(broker, FETCH, 12, _fetch_body(session_id, 1, [])))["responses"] == []

    local = broker.partitions[("isr", 1)]
    registration = broker.metadata_cache.topic("isr").partitions[1]
    grown = dataclasses.replace(registration, replicas=(0, 1), isr=(0, 1),
                                partition_epoch=registration.partition_epoch + 1)
    shrunk = dataclasses.replace(grown, isr=(0,), partition_epoch=grown.partition_epoch + 1)
    session = broker.fetch_sessions.get(session_id)
    broker._follow("isr", local, grown, fresh=False)
    assert session.changed == {("isr", 1)}  # the partition whose ISR moved, and only it
    session.changed.clear()
    broker._follow("isr", local, shrunk, fresh=False)
    assert local.isr == (0,) and local.leader_epoch == registration.leader_epoch
    assert session.changed == {("isr", 1)}
    broker._follow("isr", local, shrunk, fresh=False)  # the same registration again
    assert (await call(broker, FETCH, 12, _fetch_body(session_id, 2, [])))["error_code"] == 0
    assert not session.changed
