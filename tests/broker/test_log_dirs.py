"""A failed log directory on a running broker (broker/log_dirs.py): with another broker to
take over, a refused write or read takes the directory offline until restart, the next
heartbeat names it at once and the controller moves its leaderships; alone, the broker
keeps answering KAFKA_STORAGE_ERROR per request and recovers when the disk does.

The in-process broker is a single node whose controller also accepts a second, scripted
broker (id 1): registered and unfenced over the controller channel, it never serves, but
the controller may elect it."""

from __future__ import annotations

import errno
import os
import uuid

import pytest
import trio

from broker.broker import Broker
from broker.controller.image import LOST_DIR
from broker.events import read_events
from broker.log_dirs import LogDirFailureChannel
from broker.metadata import load_cluster_id, load_directory_id
from protocol.errors import ErrorCode
from protocol.messages import (BROKER_HEARTBEAT, BROKER_REGISTRATION, CREATE_TOPICS, FETCH,
                               request_body)

from .faults import FaultyDisk
from .test_server_faults import Client, _batch, _fetch, _produce, _until

PEER = 1
PEER_DIR = uuid.UUID("0d1e0000-0000-4000-8000-000000000001")
# the broker's own heartbeats are far apart: only a prompt one can meet the test's deadlines
SLOW_HEARTBEATS = {"broker.heartbeat.interval.ms": "20000",
                   "broker.session.timeout.ms": "60000"}


# -- the channel and the directory id ----------------------------------------------------


def test_the_channel_goes_offline_once_and_tells_its_listeners():
    told: list[tuple[str, str]] = []
    channel = LogDirFailureChannel([("/data", uuid.UUID(int=500))])
    channel.listeners.append(lambda d, reason: told.append((d.path, reason)))
    [data] = channel.dirs
    assert (data.offline, channel.offline_dir_ids()) == (False, [])
    assert channel.storage_failed("ENOSPC", "/data/orders-0") is True
    assert channel.storage_failed("EIO") is False and channel.mark_offline(data, "EIO") is False
    assert (data.offline, data.reason, told) == (True, "ENOSPC", [("/data", "ENOSPC")])
    assert channel.offline_dir_ids() == channel.dir_ids() == [uuid.UUID(int=500)]
    assert channel.all_offline and channel.is_offline("/data/orders-0")


def test_one_directory_of_several_goes_offline_alone():
    channel = LogDirFailureChannel([("/d1", uuid.UUID(int=500)), ("/d2", uuid.UUID(int=501))])
    assert channel.storage_failed("EIO", "/d2/orders-3") is True
    assert channel.offline_dir_ids() == [uuid.UUID(int=501)]
    assert channel.dir_ids() == [uuid.UUID(int=500), uuid.UUID(int=501)]
    assert channel.is_offline("/d2/orders-3") and not channel.is_offline("/d1/orders-3")
    assert not channel.all_offline and channel.path == "/d1"
    assert channel.storage_failed("EIO", "/elsewhere/x-0") is False  # not one of ours


def test_a_broker_with_no_one_to_take_over_keeps_the_directory_online():
    alone = LogDirFailureChannel([("/data", uuid.UUID(int=500))], can_fail_over=lambda: False)
    assert alone.storage_failed("ENOSPC") is False
    assert not alone.all_offline and alone.offline_dir_ids() == []


def test_the_directory_id_is_made_once_and_kept_in_meta_properties(tmp_path):
    cluster_id = load_cluster_id(tmp_path, 3, None)
    first = load_directory_id(tmp_path)
    assert first.int >= 100  # not one of Kafka's reserved ids
    assert load_directory_id(tmp_path) == first
    props = dict(line.split("=", 1) for line in
                 (tmp_path / "meta.properties").read_text().splitlines())
    assert props["cluster.id"] == cluster_id and props["node.id"] == "3"
    assert props["version"] == "1" and len(props["directory.id"]) == 22  # Kafka's base64
    assert load_cluster_id(tmp_path, 3, None) == cluster_id
    other = tmp_path / "other"
    load_cluster_id(other, 3, None)
    assert load_directory_id(other) != first


# -- a running broker ----------------------------------------------------------------------


@pytest.fixture
def served(running):
    """start(**overrides) -> (broker, client): conftest's `running`, with a connection."""

    async def start(**overrides):
        broker, _server, port = await running(**overrides)
        return broker, await Client.connect(port)

    return start


async def _add_peer(broker: Broker) -> None:
    """Broker 1 registers with the node's controller and is unfenced."""
    channel = broker.controller_channel
    registration = await channel.forward(BROKER_REGISTRATION, 2, request_body(
        BROKER_REGISTRATION, 2, {
            "broker_id": PEER, "cluster_id": broker.cluster_id,
            "incarnation_id": uuid.UUID(int=77),
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1,
                           "security_protocol": 0}],
            "features": [], "rack": None, "log_dirs": [PEER_DIR]}))
    assert registration["error_code"] == ErrorCode.NONE
    heartbeat = await channel.forward(BROKER_HEARTBEAT, 1, request_body(BROKER_HEARTBEAT, 1, {
        "broker_id": PEER, "broker_epoch": registration["broker_epoch"],
        "current_metadata_offset": 2**62, "want_fence": False, "want_shut_down": False}))
    assert heartbeat["is_fenced"] is False
    assert await broker.wait_for_metadata(lambda c: c.is_alive(PEER), 5)


async def _create(client: Client, name: str, assignments: list[list[int]]) -> None:
    body = await client.call(CREATE_TOPICS, 5, {"topics": [{
        "name": name, "num_partitions": -1, "replication_factor": -1,
        "assignments": [{"partition_index": i, "broker_ids": b}
                        for i, b in enumerate(assignments)],
        "configs": []}], "timeout_ms": 5000})
    assert body.topics[0].error_code == ErrorCode.NONE


def _moved_away(broker: Broker, name: str, indexes: range):
    def check(cache) -> bool:
        return all(p.leader == PEER and broker.node_id not in p.isr
                   for i in indexes if (p := cache.partition(name, i)) is not None)
    return check


async def test_a_failed_write_takes_the_directory_offline_and_its_leaderships_move(served, monkeypatch):
    broker, client = await served(**SLOW_HEARTBEATS)
    await _add_peer(broker)  # a peer that never fetches: acks=1, as acks=all would wait for it
    await _create(client, "t", [[0, 1], [0, 1]])
    await _create(client, "elsewhere", [[1]])
    assert await _produce(client, "t", {0: _batch(), 1: _batch()}, acks=1) == {
        0: (ErrorCode.NONE, 0), 1: (ErrorCode.NONE, 0)}
    directory_id = broker.log_dirs.dirs[0].directory_id
    assert broker.metadata_cache.broker(0).log_dirs == (directory_id,)  # registered

    disk = FaultyDisk(monkeypatch, broker.partition("t", 0).log.directory, "eio")
    assert await _produce(client, "t", {0: _batch(seed=1)}, acks=1) == {
        0: (ErrorCode.KAFKA_STORAGE_ERROR, -1)}
    assert broker.log_dirs.all_offline
    assert broker.lifecycle._heartbeat()["offline_log_dirs"] == [directory_id]

    # the heartbeat goes at once, not 20 s later: both leaderships move to broker 1
    assert await broker.wait_for_metadata(_moved_away(broker, "t", range(2)), 5)
    me = broker.metadata_cache.broker(0)
    assert me is not None and me.log_dirs == (LOST_DIR,) and not me.fenced
    assert broker.metadata_cache.offline_replicas(broker.metadata_cache.partition("t", 0)) == [0]

    # offline until restart: a healed disk changes nothing, every replica here answers 56
    disk.heal()
    assert await _produce(client, "t", {0: _batch(seed=2), 1: _batch(seed=2)}, acks=1) == {
        0: (ErrorCode.KAFKA_STORAGE_ERROR, -1), 1: (ErrorCode.KAFKA_STORAGE_ERROR, -1)}
    assert (await _fetch(client, "t", 1)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert (await _fetch(client, "elsewhere", 0)).error_code == (
        ErrorCode.NOT_LEADER_OR_FOLLOWER)

    [event] = [e for e in read_events(broker.data_dir) if e["type"] == "log_dir_failure"]
    assert event["directory_id"] == str(directory_id)
    assert event["log_dir"] == str(broker.data_dir) and "Input/output error" in event["reason"]
    assert set(event["replicas_held"]) >= {"t-0", "t-1"}
    assert "elsewhere-0" not in event["replicas_held"]


async def test_a_read_the_device_fails_takes_the_directory_offline(served, monkeypatch):
    broker, client = await served(**SLOW_HEARTBEATS)
    await _add_peer(broker)
    await _create(client, "r", [[0, 1]])
    assert (await _produce(client, "r", {0: _batch()}, acks=1))[0] == (ErrorCode.NONE, 0)
    partition = broker.partition("r", 0)  # the peer has it: the HW covers it, a read is due
    broker.replicas.on_follower_fetch(partition, PEER, partition.log_end_offset, -1)

    def eio(*_args, **_kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(broker.partition("r", 0).log, "read", eio)
    assert (await _fetch(client, "r", 0)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert broker.log_dirs.all_offline
    assert await broker.wait_for_metadata(_moved_away(broker, "r", range(1)), 5)


async def test_a_log_the_disk_refuses_to_make_takes_the_directory_offline(served, monkeypatch):
    broker, client = await served(**SLOW_HEARTBEATS)
    await _add_peer(broker)
    FaultyDisk(monkeypatch, os.path.join(broker.data_dir, "nope-0"), "readonly")
    await _create(client, "nope", [[0, 1]])
    assert broker.partition("nope", 0) is None and not broker.log_dirs.all_offline
    assert await _produce(client, "nope", {0: _batch()}, acks=1) == {
        0: (ErrorCode.KAFKA_STORAGE_ERROR, -1)}  # made again on demand, refused again
    assert broker.log_dirs.all_offline and "nope-0" in str(broker.log_dirs.dirs[0].reason)
    assert await broker.wait_for_metadata(_moved_away(broker, "nope", range(1)), 5)


async def test_a_long_poll_on_the_failed_directory_is_answered_at_once(served, monkeypatch):
    broker, client = await served(**SLOW_HEARTBEATS)
    await _add_peer(broker)
    await _create(client, "w", [[0, 1], [0, 1]])
    answers = []

    async def long_poll(client: Client) -> None:
        answers.append(await client.call(FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 60_000, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [{
                "topic": "w", "partitions": [{
                    "partition": 1, "current_leader_epoch": -1, "fetch_offset": 0,
                    "last_fetched_epoch": -1, "log_start_offset": -1,
                    "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}))

    poller = await Client.connect(broker.listener.port)
    with trio.fail_after(10):
        async with trio.open_nursery() as n:
            n.start_soon(long_poll, poller)
            await _until(lambda: ("w", 1) in broker._fetch_waiters)  # parked: nothing yet
            assert answers == []
            FaultyDisk(monkeypatch, broker.partition("w", 0).log.directory, "eio")
            assert (await _produce(client, "w", {0: _batch()}, acks=1))[0][0] == 56
    [answer] = answers
    assert answer.responses[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR


async def test_alone_a_full_disk_costs_requests_not_the_directory(served, monkeypatch):
    """No other broker to take over: the directory stays online and writes resume once
    there is room (docs/BROKER.md, "Storage faults"), as before."""
    broker, client = await served()
    await _create(client, "t", [[0]])
    disk = FaultyDisk(monkeypatch, os.path.join(broker.data_dir, "t-0"), "full")
    for _ in range(3):
        assert await _produce(client, "t", {0: _batch()}, acks=1) == {
            0: (ErrorCode.KAFKA_STORAGE_ERROR, -1)}
    assert not broker.log_dirs.all_offline
    assert broker.lifecycle._heartbeat()["offline_log_dirs"] == []
    disk.heal()
    assert await _produce(client, "t", {0: _batch()}, acks=1) == {0: (ErrorCode.NONE, 0)}
    assert not [e for e in read_events(broker.data_dir) if e["type"] == "log_dir_failure"]



async def test_an_offline_directory_gets_no_checkpoint_retention_or_cleaning(served, monkeypatch, autojump_clock):
    broker, _client = await served()
    calls: list[str] = []
    for name in ("write_checkpoints", "apply_retention", "clean_compacted"):
        owner = broker.logs if name == "write_checkpoints" else broker
        monkeypatch.setattr(owner, name,
                            lambda *_args, name=name: calls.append(name))
    await trio.sleep(301)  # past every interval: checkpoint 60 s, retention 300 s
    assert set(calls) == {"write_checkpoints", "apply_retention", "clean_compacted"}
    calls.clear()
    broker.log_dirs.mark_offline(broker.log_dirs.dirs[0], "EIO")
    await trio.sleep(301)
    assert calls == []
