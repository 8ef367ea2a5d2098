"""The server in-process, on a loopback socket: storage faults travel as error codes on an
open connection, housekeeping survives them, and idle connections are closed after
connections.max.idle.ms (on trio's MockClock, so minutes pass at once)."""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket

import pytest
import trio

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.events import read_events
from broker.main import describe_failure
from broker.server import serve
from protocol.connection import ClientConnection
from protocol.errors import ErrorCode
from protocol.messages import (
    API_VERSIONS, CREATE_TOPICS, FETCH, FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, PRODUCE,
)
from protocol.records import Record, encode_batch

from harness.ports import free_port

from .faults import FaultyDisk


class Client:
    """One connection speaking through our sans-IO ClientConnection."""

    def __init__(self, stream: trio.SocketStream):
        self.stream = stream
        self.conn = ClientConnection("server-faults-test")

    @classmethod
    async def connect(cls, port: int) -> "Client":
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, api_key: int, version: int, body) -> None:
        _, raw = self.conn.send_request(api_key, version, body)
        await self.stream.send_all(raw)

    async def receive(self):
        while (response := self.conn.next_response()) is None:
            data = await self.stream.receive_some(65536)
            assert data, "the broker closed the connection"
            self.conn.receive_data(data)
        return response.body

    async def call(self, api_key: int, version: int, body):
        await self.send(api_key, version, body)
        return await self.receive()

    async def closed_by_broker(self) -> bool:
        try:
            return await self.stream.receive_some(1) == b""
        except trio.BrokenResourceError:
            return True


def _batch(n: int = 3, seed: int = 0) -> bytes:
    return encode_batch([Record(i, 1_000 + i, b"k%d" % i, bytes([seed]) * 20, [])
                         for i in range(n)])


async def _create_topic(client: Client, name: str, partitions: int) -> int:
    body = await client.call(CREATE_TOPICS, 5, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1,
        "assignments": [], "configs": []}], "timeout_ms": 5000})
    return body.topics[0].error_code


async def _produce(client: Client, topic: str, batches: dict[int, bytes],
                   acks: int = -1) -> dict[int, tuple]:
    body = await client.call(PRODUCE, 9, {"acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": i, "records": b}
                                           for i, b in batches.items()]}]})
    return {p.index: (p.error_code, p.base_offset)
            for p in body.responses[0].partition_responses}


async def _fetch(client: Client, topic: str, partition: int, offset: int = 0):
    body = await client.call(FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [{
            "topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return body.responses[0].partitions[0]


async def test_full_partition_answers_56_and_the_connection_stays_open(running, monkeypatch):
    broker, server, port = await running()
    client = await Client.connect(port)
    assert await _create_topic(client, "t", 2) == ErrorCode.NONE
    assert await _produce(client, "t", {0: _batch(seed=1), 1: _batch(seed=1)}) == {
        0: (ErrorCode.NONE, 0), 1: (ErrorCode.NONE, 0)}
    before = (await _fetch(client, "t", 0)).records

    disk = FaultyDisk(monkeypatch, broker.partition("t", 0).log.directory, "full", budget=10)
    assert await _produce(client, "t", {0: _batch(seed=2), 1: _batch(seed=2)}) == {
        0: (ErrorCode.KAFKA_STORAGE_ERROR, -1), 1: (ErrorCode.NONE, 3)}
    # the same connection goes on: reads of what is on disk, and more failed writes
    assert (await _fetch(client, "t", 0)).records == before
    for _ in range(3):
        assert (await _produce(client, "t", {0: _batch(seed=2)}))[0][0] == 56
    assert (await client.call(API_VERSIONS, 3, {"client_software_name": "t",
                                                "client_software_version": "1"})).error_code == 0
    assert broker.partition("t", 0).storage_failures == 4

    disk.heal()  # space is back: the retry lands where the failed batch would have
    assert await _produce(client, "t", {0: _batch(seed=2)}) == {0: (ErrorCode.NONE, 3)}
    assert broker.partition("t", 0).storage_failures == 0
    fetched = await _fetch(client, "t", 0)
    assert fetched.high_watermark == 6 and fetched.records.startswith(before)
    assert server.connections == 1


async def test_offset_commit_on_a_full_disk_answers_not_coordinator(running, monkeypatch):
    broker, server, port = await running(**{"offsets.topic.num.partitions": 1})
    client = await Client.connect(port)
    found = await client.call(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
    assert found.error_code == ErrorCode.NONE

    async def commit(offset: int) -> int:
        body = await client.call(OFFSET_COMMIT, 8, {
            "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}]})
        return body.topics[0].partitions[0].error_code

    async def committed() -> int:
        body = await client.call(OFFSET_FETCH, 6, {
            "group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]})
        return body.topics[0].partitions[0].committed_offset

    assert await commit(5) == ErrorCode.NONE
    disk = FaultyDisk(monkeypatch, broker.partition("__consumer_offsets", 0).log.directory,
                      "full")
    # Kafka's GroupMetadataManager answers a storage error on the offsets log this way
    assert await commit(7) == ErrorCode.NOT_COORDINATOR
    assert await committed() == 5  # what is not in the log is not committed
    disk.heal()
    assert await commit(7) == ErrorCode.NONE
    assert await committed() == 7
    assert server.connections == 1


async def test_a_partition_directory_the_disk_refuses_answers_56_until_it_can_be_made(
        running, monkeypatch):
    """The controller makes the topic (metadata is not partition data); the one replica whose
    directory cannot be made answers KAFKA_STORAGE_ERROR, the others serve, and it is made
    as soon as the disk lets it (as Kafka serves an offline log directory's partitions)."""
    broker, _server, port = await running()
    client = await Client.connect(port)
    FaultyDisk(monkeypatch, os.path.join(broker.data_dir, "nope-2"), "readonly")
    assert await _create_topic(client, "nope", 3) == ErrorCode.NONE
    assert broker.partition("nope", 2) is None and broker.partition("nope", 0) is not None
    assert await _produce(client, "nope", {0: _batch(), 2: _batch()}) == {
        0: (ErrorCode.NONE, 0), 2: (ErrorCode.KAFKA_STORAGE_ERROR, -1)}
    monkeypatch.undo()
    assert await _produce(client, "nope", {2: _batch()}) == {2: (ErrorCode.NONE, 0)}


async def test_a_metadata_log_the_disk_refuses_stops_the_broker_naming_it(tmp_path,
                                                                         monkeypatch):
    """Kafka's controller halts when its metadata log cannot be written: Raft's state in
    memory would claim what the disk does not hold. The broker stops with the cause."""
    port = free_port()
    config = BrokerConfig.load({}, **{"log.dirs": str(tmp_path / "data"),
                                      "listeners": f"127.0.0.1:{port}"})
    broker = Broker(config)
    broker.open()
    with pytest.raises(BaseException) as stopped:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(serve, broker, install_signal_handlers=False))
            client = await Client.connect(port)
            def full(*_args):
                raise OSError(errno.ENOSPC, "No space left on device")
            monkeypatch.setattr(broker.runtime.store, "append", full)
            with trio.fail_after(10):
                await _create_topic(client, "t", 1)
    assert "cannot write the metadata log" in describe_failure(stopped.value)


async def test_event_log_failures_drop_events_and_the_broker_keeps_serving(
        running, monkeypatch, caplog, autojump_clock):
    broker, _server, port = await running()
    client = await Client.connect(port)
    disk = FaultyDisk(monkeypatch, os.path.join(broker.data_dir, "events"), "full")
    with caplog.at_level(logging.WARNING, logger="minibroker.events"):
        assert await _create_topic(client, "a", 1) == ErrorCode.NONE  # topic_create dropped
        await trio.sleep(5)  # ten housekeeping flushes on the mock clock, each refused
        assert broker.events.dropped >= 1
        assert await _create_topic(client, "b", 1) == ErrorCode.NONE
        dropped = broker.events.dropped
        disk.heal()
        assert await _create_topic(client, "c", 1) == ErrorCode.NONE
        await trio.sleep(1)
    assert broker.events.dropped == dropped
    assert any(f"{dropped} events dropped" in r.getMessage() for r in caplog.records)
    created = [e["topic"] for e in read_events(broker.data_dir) if e["type"] == "topic_create"]
    assert created == ["c"]


async def test_a_checkpoint_the_disk_refuses_is_retried_and_the_broker_serves_on(
        running, monkeypatch, caplog, autojump_clock):
    broker, _server, port = await running()
    client = await Client.connect(port)
    disk = FaultyDisk(monkeypatch, broker.data_dir, "readonly")  # no checkpoint .tmp file
    with caplog.at_level(logging.WARNING, logger="minibroker.server"):
        await trio.sleep(125)  # two checkpoint intervals (60 s)
        assert (await client.call(API_VERSIONS, 3, {"client_software_name": "t",
                                                    "client_software_version": "1"})
                ).error_code == 0
        messages = [r.getMessage() for r in caplog.records]
        assert sum(m.startswith("checkpoint failed") for m in messages) == 1  # once, not twice
        disk.heal()
        await trio.sleep(60)
    assert "checkpoint works again after 2 failures" in [r.getMessage() for r in caplog.records]


async def test_idle_connections_close_after_connections_max_idle_ms(running, autojump_clock):
    _broker, server, port = await running(**{"connections.max.idle.ms": 60_000})
    idle = [await Client.connect(port) for _ in range(200)]
    busy = await Client.connect(port)
    polling = await Client.connect(port)
    await _until(lambda: server.connections == 202)  # all accepted
    start = trio.current_time()
    # a fetch long-polling for longer than the idle limit is a request in flight
    await polling.send(FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 90_000, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [],
        "forgotten_topics_data": [], "rack_id": ""})

    async def keep_busy():
        for _ in range(4):  # a request every 30 s keeps a connection alive
            await trio.sleep(30)
            assert (await busy.call(API_VERSIONS, 3, {"client_software_name": "t",
                                                      "client_software_version": "1"})
                    ).error_code == 0

    async with trio.open_nursery() as n:
        n.start_soon(keep_busy)
        await trio.sleep(59.9)
        assert server.connections == 202 and server.idle_closed == 0
        for client in idle:
            assert await client.closed_by_broker()
        closed_at = trio.current_time() - start
        assert 60 <= closed_at < 61
        assert server.idle_closed == 200
    assert (await polling.receive()).error_code == 0  # answered at max_wait, not cut off
    assert server.connections == 2


async def _until(predicate, timeout_s: float = 10) -> None:
    """Let the other tasks run until ``predicate()`` holds; fail after ``timeout_s``."""
    with trio.fail_after(timeout_s):
        while True:
            if predicate():
                return
            await trio.sleep(0.01)


def test_connections_max_idle_ms_is_validated():
    from broker.config import ConfigError
    assert BrokerConfig.load({})["connections.max.idle.ms"] == 600_000
    assert BrokerConfig.load({"connections.max.idle.ms": "-1"})["connections.max.idle.ms"] == -1
    for bad in ("-2", "soon"):
        with pytest.raises(ConfigError, match="connections.max.idle.ms"):
            BrokerConfig.load({"connections.max.idle.ms": bad})


async def test_a_taken_port_raises_listen_error(tmp_path):
    from broker.server import ListenError
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = Broker(BrokerConfig.load({}, **{"log.dirs": str(tmp_path),
                                                 "listeners": f"127.0.0.1:{port}"}))
        broker.open()
        with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{port}: "):
            await serve(broker, install_signal_handlers=False)


@pytest.mark.interop  # runs `minibroker serve` as a process
def test_serve_on_a_taken_port_says_so_in_one_line_and_exits_1(tmp_path):
    """`minibroker serve` as a person runs it: nothing but the one line on stderr (no
    traceback, no start-up log of a node that could never serve), exit status 1."""
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "tools.cli", "serve", "--listen", f"127.0.0.1:{port}",
             "--data-dir", str(tmp_path / "data")],
            cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
            timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"minibroker: cannot listen on 127.0.0.1:{port}: address already in use"]


def test_any_other_reason_to_stop_is_named_on_the_last_line(tmp_path, monkeypatch, capsys):
    import argparse

    import broker.server
    from broker import main

    async def fails(broker, **kwargs):
        async with trio.open_nursery() as n:  # as the real one: wrapped in a group
            n.start_soon(_raise_enospc)

    monkeypatch.setattr(broker.server, "serve", fails)
    args = argparse.Namespace(override=[], config=None, broker_id=None,
                              data_dir=str(tmp_path), listen=f"127.0.0.1:{free_port()}",
                              log_level="error")
    assert main.serve(args) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == "minibroker: stopped: OSError: [Errno 28] No space left on device"


async def _raise_enospc():
    raise OSError(28, "No space left on device")
