"""An in-process broker for tests: `Broker` and its `Server` in the test's own trio run.

    async def test_x(inproc):          # the fixture in tests/conftest.py
        async with Consumer(topic, bootstrap_servers=inproc.bootstrap, ...) as consumer:
            ...

The broker reads its time from the run's clock (`trio.current_time()`, offset to the wall
clock at start), so with pytest-trio's `autojump_clock` (a `MockClock(autojump_threshold=0)`)
minutes of session timeouts, rebalance timeouts and long polls pass in milliseconds.

Clients reach it through memory streams, not sockets: `in_process_broker` binds
`client.connection.stream_opener`, and each connection the client library opens gets one
end of a `trio.testing.memory_stream_pair()` while the server serves the other end in this
nursery. With sockets, the autojump clock would jump whenever every task waits on the
kernel (a loopback connect or a send that has not reached the other side yet), and a
deadline could pass in virtual time while bytes are still in flight; with memory streams a
task is blocked only on another task, so virtual time moves only when the whole system is
truly idle until its next deadline.
"""

from __future__ import annotations

import errno
import itertools
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator

import trio
import trio.testing

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.events import read_events
from broker.server import Server
from broker.storage import REAL, FileSystem
from client.connection import stream_opener
from client.producer.producer import Producer
from protocol.messages import CREATE_TOPICS, request_body

CREATE_TOPICS_VERSION = 5

__all__ = ["InProcessBroker", "TEST_DEFAULTS", "in_process_broker"]

# Kafka's own integration tests use one __consumer_offsets partition too: creating fifty
# costs about fifty directory fsyncs, most of an in-process test's real time
TEST_DEFAULTS = {"offsets.topic.num.partitions": "1",
                 "transaction.state.log.num.partitions": "1"}


@dataclass
class InProcessBroker:
    broker: Broker
    server: Server
    nursery: trio.Nursery
    _peers: itertools.count = field(default_factory=lambda: itertools.count(40000))

    @property
    def bootstrap(self) -> str:
        return f"{self.broker.advertised.host}:{self.broker.advertised.port}"

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        """What a client's connect does here: a new connection served by this broker."""
        if (host, port) != (self.broker.advertised.host, self.broker.advertised.port):
            raise OSError(errno.ECONNREFUSED, f"no in-process broker at {host}:{port}")
        client_end, server_end = trio.testing.memory_stream_pair()
        peer = f"127.0.0.1:{next(self._peers)}"
        self.nursery.start_soon(self.server.handle_connection, server_end, peer)
        return client_end

    async def create_topic(self, name: str, partitions: int, **configs: str) -> None:
        """CreateTopics through the controller, as a client's would go, and back once the
        broker serves the topic."""
        body = request_body(CREATE_TOPICS, CREATE_TOPICS_VERSION, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1,
                        "assignments": [], "configs": [{"name": k, "value": v}
                                                       for k, v in configs.items()]}],
            "timeout_ms": 10_000, "validate_only": False})
        response = await self.broker.controller_channel.forward(CREATE_TOPICS,
                                                                 CREATE_TOPICS_VERSION, body)
        assert response["topics"][0]["error_code"] == 0, response
        assert await self.broker.wait_for_metadata(
            lambda cache: cache.partition_count(name) == partitions
            and self.broker.serves([name]), 10)

    async def produce(self, topic: str, records: list[tuple[int, bytes]],
                      key: bytes = b"k") -> None:
        """(partition, value) pairs through our Producer, each acknowledged."""
        async with Producer(bootstrap_servers=self.bootstrap) as producer:
            for partition, value in records:
                await producer.send(topic, value, key=key, partition=partition)
            await producer.flush()

    def events(self, **match: object) -> list[dict]:
        """The broker's event log so far, those whose fields equal `match`."""
        self.broker.events.flush()
        return [e for e in read_events(self.broker.data_dir)
                if all(e.get(k) == v for k, v in match.items())]

    def describe_group(self, group_id: str) -> dict:
        return self.broker.groups.coordinator.describe(group_id)

    def member_ids(self, group_id: str) -> set[str]:
        return {m["member_id"] for m in self.describe_group(group_id)["members"]}


@asynccontextmanager
async def in_process_broker(data_dir: Path | str, *, fs: FileSystem = REAL, close: bool = True,
                            **overrides: str) -> AsyncIterator[InProcessBroker]:
    """A broker on `data_dir` (on the file system `fs`: the real disk unless given) with
    these property overrides (Kafka names), serving the clients created inside the block;
    closed, as on shutdown, when the block ends -- or, ``close=False``, only stopped, as a
    process killed there would be (then crash `fs` before the next broker starts on it)."""
    config = BrokerConfig.load({"log.dirs": str(data_dir), **TEST_DEFAULTS, **overrides})
    offset = time.time() - trio.current_time()
    broker = Broker(config, clock=lambda: offset + trio.current_time(), fs=fs)
    broker.open()
    try:
        async with trio.open_nursery() as nursery:
            await broker.start(nursery)
            await broker.lifecycle.unfenced.wait()
            inproc = InProcessBroker(broker, Server(broker), nursery)
            # the transaction coordinator reaches partition leaders (itself) this way
            broker.inter_broker_opener = inproc.open_stream
            token = stream_opener.set(inproc.open_stream)
            try:
                yield inproc
            finally:
                stream_opener.reset(token)
                nursery.cancel_scope.cancel()
    finally:
        if close:
            broker.close()
