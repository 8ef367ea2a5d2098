"""New partitions' logs are made off the event loop (broker.broker's `_log_maker`): in a worker
thread, a batch at a time, while requests are served; a partition whose log is being made
answers NOT_LEADER_OR_FOLLOWER, becomes leader only once its log is adopted, and is neither
kept when its topic is deleted meanwhile nor taken for a stray log.

Real time (no autojump clock): the work runs on a real worker thread, which a test holds
still at a gate inside `LogManager.make_log`.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import trio

from broker.log.log import PartitionLog
from broker.log.manager import LogManager
from broker.replication import leader_epochs
from client.connection import BrokerConnection, background_nursery
from protocol.errors import ErrorCode
from protocol.messages import CREATE_TOPICS, DELETE_TOPICS, PRODUCE, request_body
from protocol.records import Record, encode_batch
from tests.inproc import CREATE_TOPICS_VERSION, InProcessBroker, in_process_broker

WAIT_S = 10.0


class Gate:
    """Holds each `make_log` after it has made its directory until `opened` is set; `made`
    is set once the first one has."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.made = threading.Event()


@contextmanager
def gate(monkeypatch) -> Iterator[Gate]:
    """A Gate in `LogManager.make_log` (opened on the way out in any case: a held worker
    thread would hold the test's teardown too)."""
    g = Gate()
    make_log = LogManager.make_log

    def held(self, *args, **kwargs):
        log = make_log(self, *args, **kwargs)
        g.made.set()
        if not g.opened.wait(WAIT_S * 2):
            raise OSError("the test never opened the gate")
        return log

    monkeypatch.setattr(LogManager, "make_log", held)
    try:
        yield g
    finally:
        g.opened.set()


async def _create(inproc: InProcessBroker, name: str, partitions: int) -> None:
    """CreateTopics through the controller, back once the image shows it (not its logs)."""
    body = request_body(CREATE_TOPICS, CREATE_TOPICS_VERSION, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1,
                    "assignments": [], "configs": []}],
        "timeout_ms": 10_000, "validate_only": False})
    response = await inproc.broker.controller_channel.forward(CREATE_TOPICS,
                                                             CREATE_TOPICS_VERSION, body)
    assert response["topics"][0]["error_code"] == 0, response
    assert await inproc.broker.wait_for_metadata(lambda c: c.partition_count(name) == partitions,
                                                 WAIT_S)


async def _served(inproc: InProcessBroker, name: str) -> None:
    assert await inproc.broker.wait_for_metadata(lambda _: inproc.broker.serves([name]), WAIT_S)


async def _produce(inproc: InProcessBroker, topic: str) -> ErrorCode:
    async with background_nursery() as nursery:
        conn = BrokerConnection(inproc.broker.advertised.host, inproc.broker.advertised.port)
        await conn.open(nursery)
        resp = await conn.request(PRODUCE, {
            "transactional_id": None, "acks": -1, "timeout_ms": 10_000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": encode_batch([Record(0, 0, b"k", b"v", [])])}]}]})
        return ErrorCode(resp.body.responses[0].partition_responses[0].error_code)


async def test_new_partitions_logs_are_made_on_a_worker_thread(tmp_path, monkeypatch):
    """The logs on a worker thread; the new leader's first epoch is written to its
    leader-epoch checkpoint only before the first batch (none of them on creation)."""
    threads: list[threading.Thread] = []
    checkpoints: list[str] = []
    open_log = PartitionLog.open.__func__  # type: ignore[attr-defined]
    write_checkpoint = leader_epochs.write_checkpoint

    def recording(cls, *args, **kwargs):
        threads.append(threading.current_thread())
        return open_log(cls, *args, **kwargs)

    def recording_checkpoint(path, *args, **kwargs):
        checkpoints.append(str(path))
        return write_checkpoint(path, *args, **kwargs)

    async with in_process_broker(tmp_path / "data") as inproc:
        monkeypatch.setattr(PartitionLog, "open", classmethod(recording))
        monkeypatch.setattr(leader_epochs, "write_checkpoint", recording_checkpoint)
        await inproc.create_topic("many", 250)  # three batches
        assert len(threads) == 250
        assert threading.main_thread() not in threads, "a log made on the event loop thread"
        assert checkpoints == []  # leading 250 new partitions wrote no checkpoint
        for i in range(250):
            partition = inproc.broker.partition("many", i)
            assert partition is not None and partition.is_leader
            assert partition.epochs.entries == [
                leader_epochs.EpochEntry(partition.leader_epoch, 0)]
            assert (tmp_path / "data" / f"many-{i}" / "partition.metadata").exists()
        assert await _produce(inproc, "many") == ErrorCode.NONE
        # the produce to partition 0 wrote its epoch first, and nobody else's
        assert checkpoints == [str(tmp_path / "data" / "many-0" / leader_epochs.CHECKPOINT_FILE)]
        assert leader_epochs.read_checkpoint(checkpoints[0]) == [
            leader_epochs.EpochEntry(inproc.broker.partition("many", 0).leader_epoch, 0)]


async def test_a_partition_whose_log_is_being_made_answers_not_leader_or_follower(
        tmp_path, monkeypatch):
    async with in_process_broker(tmp_path / "data") as inproc:
        with gate(monkeypatch) as g:
            await _create(inproc, "slow", 1)
            assert inproc.broker.partition("slow", 0) is None
            assert ("slow", 0) in inproc.broker.creating
            # the request is answered at once, not after the log: the loop is not held
            with trio.fail_after(WAIT_S):
                assert await _produce(inproc, "slow") == ErrorCode.NOT_LEADER_OR_FOLLOWER
            g.opened.set()
            await _served(inproc, "slow")
        partition = inproc.broker.partition("slow", 0)
        assert partition is not None and partition.is_leader
        assert await _produce(inproc, "slow") == ErrorCode.NONE
        assert partition.log_end_offset == 1


async def test_a_topic_deleted_while_its_logs_are_made_leaves_no_log(tmp_path, monkeypatch):
    data = tmp_path / "data"
    async with in_process_broker(data) as inproc:
        with gate(monkeypatch) as g:
            await _create(inproc, "brief", 3)
            body = request_body(DELETE_TOPICS, 4, {"topic_names": ["brief"],
                                                   "timeout_ms": 10_000})
            response = await inproc.broker.controller_channel.forward(DELETE_TOPICS, 4, body)
            assert [r["error_code"] for r in response["responses"]] == [0]
            assert await inproc.broker.wait_for_metadata(lambda c: c.topic("brief") is None,
                                                         WAIT_S)
            g.opened.set()
        # the batch in hand is made, then discarded as it would be adopted
        assert await inproc.broker.wait_for_metadata(
            lambda _: not any(d.name.startswith("brief-") for d in data.iterdir()), WAIT_S)
        assert all(inproc.broker.partition("brief", i) is None for i in range(3))
        assert all(inproc.broker.logs.get("brief", i) is None for i in range(3))


async def test_a_log_being_made_is_not_a_stray_log(tmp_path, monkeypatch):
    data = tmp_path / "data"
    async with in_process_broker(data) as inproc:
        with gate(monkeypatch) as g:
            await _create(inproc, "young", 1)
            assert await trio.to_thread.run_sync(g.made.wait, WAIT_S)  # made, held
            inproc.broker._delete_stray_logs(inproc.broker.metadata_cache.image)
            assert (data / "young-0").exists()
            g.opened.set()
            await _served(inproc, "young")
        assert inproc.broker.partition("young", 0) is not None
        assert await _produce(inproc, "young") == ErrorCode.NONE


async def _create_through_broker(inproc: InProcessBroker, name: str) -> ErrorCode:
    """CreateTopics as a client sends it: to the broker, which forwards it and holds the
    answer (broker.handlers.topics)."""
    async with background_nursery() as nursery:
        conn = BrokerConnection(inproc.broker.advertised.host, inproc.broker.advertised.port)
        await conn.open(nursery)
        resp = await conn.request(CREATE_TOPICS, {
            "topics": [{"name": name, "num_partitions": 1, "replication_factor": -1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 30_000, "validate_only": False}, version=CREATE_TOPICS_VERSION)
        return ErrorCode(resp.body.topics[0].error_code)


async def test_create_topics_answers_once_the_logs_here_are_made(tmp_path):
    async with in_process_broker(tmp_path / "data") as inproc:
        assert await _create_through_broker(inproc, "quick") == ErrorCode.NONE
        assert inproc.broker.serves(["quick"])
        assert await _produce(inproc, "quick") == ErrorCode.NONE


async def test_create_topics_does_not_wait_long_for_logs_still_being_made(tmp_path,
                                                                          monkeypatch):
    """A creation whose logs take long (thousands of partitions) is answered once the image
    shows it and LOGS_WAIT_S have passed, as Kafka's controller answers at commit; the
    partition answers NOT_LEADER_OR_FOLLOWER until its log is made."""
    from broker.handlers import topics
    # the image's own wait may be long: only the logs' wait is short
    monkeypatch.setattr(topics, "VISIBILITY_WAIT_S", WAIT_S * 10)
    LOGS_WAIT_S = topics.LOGS_WAIT_S
    async with in_process_broker(tmp_path / "data") as inproc:
        with gate(monkeypatch) as g:
            started = trio.current_time()
            with trio.fail_after(LOGS_WAIT_S + WAIT_S):
                assert await _create_through_broker(inproc, "held") == ErrorCode.NONE
            assert trio.current_time() - started >= LOGS_WAIT_S
            assert g.made.is_set() and ("held", 0) in inproc.broker.creating
            assert inproc.broker.metadata_cache.partition_count("held") == 1
            assert await _produce(inproc, "held") == ErrorCode.NOT_LEADER_OR_FOLLOWER
            g.opened.set()
            await _served(inproc, "held")
        assert await _produce(inproc, "held") == ErrorCode.NONE
