"""Several log directories on one running broker (JBOD, issue 27): a replica moved between
them with AlterReplicaLogDirs while it takes writes, DescribeLogDirs during and after the
move, bad moves answered with Kafka's codes, the directory recorded with the controller
(AssignReplicasToDirs), and one failed directory taken offline alone: its leaderships
move, the other directory's partitions go on."""

from __future__ import annotations

import functools
import os

import pytest
import trio

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.server import serve
from harness.ports import free_port
from broker.replication import alter_log_dirs
from broker.replication.manager import HW_CHECKPOINT_FILE
from protocol.errors import ErrorCode
from broker.log.manager import LOG_START_OFFSET_CHECKPOINT, read_checkpoint
from protocol.messages import ALTER_REPLICA_LOG_DIRS, DELETE_RECORDS, DESCRIBE_LOG_DIRS

from .faults import FaultyDisk
from .test_log_dirs import PEER, SLOW_HEARTBEATS, _add_peer, _create, _moved_away
from .test_server_faults import Client, _batch, _create_topic, _fetch, _produce, _until


@pytest.fixture
def jbod(running, tmp_path):
    """start(**overrides) -> (broker, client, [d0, d1]): a broker on two log directories
    (absolute paths, as DescribeLogDirs names them)."""

    async def start(**overrides):
        dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
        broker, _server, port = await running(**{"log.dirs": ",".join(dirs), **overrides})
        return broker, await Client.connect(port), dirs

    return start


async def _describe(client: Client, topic: str) -> dict[str, tuple[int, dict]]:
    """{log dir: (error, {(partition, is_future): (size, lag)})} for one topic."""
    body = await client.call(DESCRIBE_LOG_DIRS, 4, {"topics": None})
    return {r.log_dir: (r.error_code, {(p.partition_index, p.is_future_key):
                                       (p.partition_size, p.offset_lag)
                                       for t in r.topics if t.name == topic
                                       for p in t.partitions})
            for r in body.results}


async def _alter(client: Client, path: str, topic: str, partitions: list[int]) -> dict[int, int]:
    body = await client.call(ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
        {"path": path, "topics": [{"name": topic, "partitions": partitions}]}]})
    return {p.partition_index: p.error_code for t in body.results for p in t.partitions}


def _exists(directory: str, name: str) -> bool:
    return os.path.exists(os.path.join(directory, name))


def _offsets_served(fetched) -> list[int]:
    from protocol.records import iter_batch_headers
    return [o for _pos, h in iter_batch_headers(bytes(fetched.records))
            for o in range(h.base_offset, h.last_offset + 1)]


async def test_a_replica_moves_while_it_takes_writes_and_loses_nothing(jbod, monkeypatch):
    monkeypatch.setattr(alter_log_dirs, "CHUNK_BYTES", 200)  # one batch a step: a long move
    held = [True]  # the copy waits until the test has seen the future replica
    step = alter_log_dirs.ReplicaAlterLogDirs._step
    monkeypatch.setattr(alter_log_dirs.ReplicaAlterLogDirs, "_step",
                        lambda self, t, i: None if held[0] else step(self, t, i))
    broker, client, (d0, d1) = await jbod()
    assert await _create_topic(client, "m", 1) == ErrorCode.NONE
    await _until(lambda: broker.partition("m", 0) is not None)
    source = broker.logs.dir_of("m", 0)
    target = d1 if source == d0 else d0
    acked = 0
    for i in range(60):
        [(code, _)] = (await _produce(client, "m", {0: _batch(seed=i)})).values()
        assert code == ErrorCode.NONE
        acked += 3
    assert await _alter(client, target, "m", [0]) == {0: ErrorCode.NONE}

    # the future replica is there, behind, in the target directory; the current one serves
    described = await _describe(client, "m")
    assert set(described) == {d0, d1}
    _, in_target = described[target]
    assert in_target == {(0, True): (0, acked)}  # nothing copied yet: the whole log behind
    held[0] = False
    # writes go on during the move, and every one is acknowledged
    while broker.log_dir_moves.moves_done == 0:
        [(code, _)] = (await _produce(client, "m", {0: _batch(seed=7)})).values()
        assert code == ErrorCode.NONE
        acked += 3
    for i in range(5):
        [(code, _)] = (await _produce(client, "m", {0: _batch(seed=i)})).values()
        assert code == ErrorCode.NONE
        acked += 3
    assert broker.logs.dir_of("m", 0) == target
    assert not _exists(source, "m-0")
    described = await _describe(client, "m")
    assert described[target][1] == {
        (0, False): (broker.partition("m", 0).log.size, 0)}
    assert described[source][1] == {}
    offsets: list[int] = []
    while len(offsets) < acked:
        fetched = await _fetch(client, "m", 0, len(offsets))
        assert fetched.error_code == ErrorCode.NONE
        offsets += _offsets_served(fetched)
    assert offsets == list(range(acked))
    # the controller has the new directory (AssignReplicasToDirs)
    target_id = broker.log_dirs.dir_of(target).directory_id
    assert await broker.wait_for_metadata(
        lambda c: c.partition("m", 0).directory_of(0) == target_id, 5)


async def _serving(nursery, dirs: list[str]) -> tuple[Broker, Client]:
    port = free_port()
    broker = Broker(BrokerConfig.load(**{"log.dirs": ",".join(dirs),
                                         "listeners": f"127.0.0.1:{port}"}))
    broker.open()
    await nursery.start(functools.partial(serve, broker, install_signal_handlers=False))
    return broker, await Client.connect(port)


async def test_a_move_resumes_after_a_restart(tmp_path, monkeypatch):
    """A clean stop in the middle of a move keeps the future replica; the next start
    loads it and the copy goes on to the swap (as Kafka resumes its future logs)."""
    held = [True]
    step = alter_log_dirs.ReplicaAlterLogDirs._step
    monkeypatch.setattr(alter_log_dirs.ReplicaAlterLogDirs, "_step",
                        lambda self, t, i: None if held[0] else step(self, t, i))
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    async with trio.open_nursery() as nursery:
        broker, client = await _serving(nursery, dirs)
        assert await _create_topic(client, "r", 1) == ErrorCode.NONE
        await _until(lambda: broker.partition("r", 0) is not None)
        source = broker.logs.dir_of("r", 0)
        target = dirs[1] if source == dirs[0] else dirs[0]
        for i in range(10):
            await _produce(client, "r", {0: _batch(seed=i)})
        assert await _alter(client, target, "r", [0]) == {0: ErrorCode.NONE}
        nursery.cancel_scope.cancel()  # serve closes the broker: a clean stop
    async with trio.open_nursery() as nursery:
        broker, client = await _serving(nursery, dirs)
        assert list(broker.logs.futures) == [("r", 0)] and broker.logs.dir_of("r", 0) == source
        assert broker.partition("r", 0).future_log is broker.logs.futures[("r", 0)]
        held[0] = False
        await _until(lambda: broker.log_dir_moves.moves_done == 1)
        assert broker.logs.dir_of("r", 0) == target and not broker.logs.futures
        fetched = await _fetch(client, "r", 0)
        assert _offsets_served(fetched) == list(range(30))
        nursery.cancel_scope.cancel()


async def test_bad_moves_answer_kafkas_codes_and_change_nothing(jbod):
    broker, client, (d0, d1) = await jbod()
    assert await _create_topic(client, "b", 1) == ErrorCode.NONE
    await _until(lambda: broker.partition("b", 0) is not None)
    here = broker.logs.dir_of("b", 0)
    assert await _alter(client, "/no/such/dir", "b", [0]) == {0: ErrorCode.LOG_DIR_NOT_FOUND}
    assert await _alter(client, d1, "nope", [0]) == {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert await _alter(client, d1, "b", [5]) == {5: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert await _alter(client, here, "b", [0]) == {0: ErrorCode.NONE}  # already there
    assert broker.logs.futures == {} and broker.logs.dir_of("b", 0) == here
    assert sorted(n for d in (d0, d1) for n in os.listdir(d) if n.startswith("b-")) == ["b-0"]


async def test_a_failed_directory_goes_offline_alone(jbod, monkeypatch):
    broker, client, (d0, d1) = await jbod(**SLOW_HEARTBEATS)
    await _add_peer(broker)
    await _create(client, "t", [[0, PEER], [0, PEER]])
    await _until(lambda: broker.partition("t", 0) is not None
                 and broker.partition("t", 1) is not None)
    dirs = {i: broker.logs.dir_of("t", i) for i in (0, 1)}
    assert set(dirs.values()) == {d0, d1}  # one partition in each: fewest partitions first
    ids = {i: broker.log_dirs.dir_of(dirs[i]).directory_id for i in (0, 1)}
    assert await broker.wait_for_metadata(  # each replica's directory is recorded
        lambda c: all(c.partition("t", i).directory_of(0) == ids[i] for i in (0, 1)), 5)

    FaultyDisk(monkeypatch, broker.partition("t", 0).log.directory, "eio")
    assert await _produce(client, "t", {0: _batch(seed=1)}, acks=1) == {
        0: (ErrorCode.KAFKA_STORAGE_ERROR, -1)}
    assert broker.lifecycle._heartbeat()["offline_log_dirs"] == [ids[0]]
    # t-0's leadership moves to the peer at once and this broker leaves its ISR; t-1 stays
    assert await broker.wait_for_metadata(_moved_away(broker, "t", range(1)), 5)
    me = broker.metadata_cache.broker(0)
    assert me.log_dirs == (ids[1],) and not me.fenced
    p1 = broker.metadata_cache.partition("t", 1)
    assert p1.leader == 0 and 0 in p1.isr
    # Metadata names the replica in the failed directory offline, not the other one
    cache = broker.metadata_cache
    assert cache.offline_replicas(cache.partition("t", 0)) == [0]
    assert cache.offline_replicas(p1) == []
    assert await _produce(client, "t", {1: _batch(seed=2)}, acks=1) == {1: (ErrorCode.NONE, 0)}
    assert (await _fetch(client, "t", 0)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert (await _fetch(client, "t", 1)).error_code == ErrorCode.NONE
    described = await _describe(client, "t")
    assert described[dirs[0]] == (ErrorCode.KAFKA_STORAGE_ERROR, {})
    assert described[dirs[1]][0] == ErrorCode.NONE
    # a move into the failed directory is refused, as is one of the offline replica
    assert await _alter(client, dirs[0], "t", [1]) == {1: ErrorCode.KAFKA_STORAGE_ERROR}
    assert await _alter(client, dirs[1], "t", [0]) == {0: ErrorCode.KAFKA_STORAGE_ERROR}
    # new partitions go to the directory still online
    await _create(client, "u", [[0], [0]])
    await _until(lambda: broker.partition("u", 1) is not None)
    assert {broker.logs.dir_of("u", i) for i in (0, 1)} == {dirs[1]}


async def test_a_target_directory_that_fails_mid_move_drops_the_move(jbod, monkeypatch):
    """The copy's writes fail: the move is dropped, the target directory goes offline (a
    peer can take over what it held: nothing), and the replica serves on where it was."""
    monkeypatch.setattr(alter_log_dirs, "CHUNK_BYTES", 200)
    broker, client, (d0, d1) = await jbod(**SLOW_HEARTBEATS)
    await _add_peer(broker)
    await _create(client, "f", [[0]])
    await _until(lambda: broker.partition("f", 0) is not None)
    source = broker.logs.dir_of("f", 0)
    target = d1 if source == d0 else d0
    for i in range(30):
        await _produce(client, "f", {0: _batch(seed=i)}, acks=1)
    assert await _alter(client, target, "f", [0]) == {0: ErrorCode.NONE}
    FaultyDisk(monkeypatch, target, "eio")
    await _until(lambda: broker.log_dirs.is_offline(target))
    await _until(lambda: not broker.logs.futures)
    assert broker.logs.dir_of("f", 0) == source and broker.log_dir_moves.moves_done == 0
    assert await _produce(client, "f", {0: _batch(seed=99)}, acks=1) == {0: (ErrorCode.NONE, 90)}
    assert broker.lifecycle._heartbeat()["offline_log_dirs"] == [
        broker.log_dirs.dir_of(target).directory_id]


async def test_checkpoints_are_kept_per_directory(jbod):
    """DeleteRecords makes the new log start durable before answering: in the checkpoint
    file of the directory that holds each partition; the HW checkpoint is per directory
    too."""
    broker, client, (d0, d1) = await jbod()
    assert await _create_topic(client, "dr", 2) == ErrorCode.NONE
    await _until(lambda: all(broker.partition("dr", i) is not None for i in (0, 1)))
    assert {broker.logs.dir_of("dr", i) for i in (0, 1)} == {d0, d1}
    for i in (0, 1):
        for seed in range(3):
            await _produce(client, "dr", {i: _batch(seed=seed)})
    body = await client.call(DELETE_RECORDS, 2, {"topics": [{"name": "dr", "partitions": [
        {"partition_index": 0, "offset": 3}, {"partition_index": 1, "offset": 6}]}],
        "timeout_ms": 5000})
    assert [(p.partition_index, p.error_code, p.low_watermark)
            for p in body.topics[0].partitions] == [(0, 0, 3), (1, 0, 6)]
    for i, start in ((0, 3), (1, 6)):
        written = read_checkpoint(os.path.join(broker.logs.dir_of("dr", i),
                                               LOG_START_OFFSET_CHECKPOINT))
        assert written[("dr", i)] == start
    # the high watermarks too go to the directory of each partition, as Kafka keeps them
    broker.replicas.write_checkpoint()
    for i in (0, 1):
        written = read_checkpoint(os.path.join(broker.logs.dir_of("dr", i),
                                               HW_CHECKPOINT_FILE))
        assert written == {("dr", i): 9}
    assert broker.replicas.read_checkpoint() == {("dr", 0): 9, ("dr", 1): 9}


async def test_log_dir_and_data_dir_name_one_directory(tmp_path):
    from broker.config import BrokerConfig, ConfigError
    assert BrokerConfig.load({"log.dir": "/a"}).data_dirs == ("/a",)
    assert BrokerConfig.load({"log.dir": "/a", "log.dirs": "/b, /c"}).data_dirs == ("/b", "/c")
    with pytest.raises(ConfigError, match="twice"):
        BrokerConfig.load({"log.dirs": "/b,/b/"})
    with pytest.raises(ConfigError, match="no directory"):
        BrokerConfig.load({"log.dirs": " , "})
    config = BrokerConfig.load(**{"log.dirs": f"{tmp_path}/x,{tmp_path}/y",
                                  "listeners": "127.0.0.1:1"})
    broker = Broker(config)
    ids = broker.log_dirs.dir_ids()
    assert len(set(ids)) == 2
    for d in ("x", "y"):
        props = dict(line.split("=", 1) for line in
                     (tmp_path / d / "meta.properties").read_text().splitlines())
        assert props["cluster.id"] == broker.cluster_id and props["node.id"] == "0"
