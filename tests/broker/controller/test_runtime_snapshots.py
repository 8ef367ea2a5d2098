"""Metadata snapshots in the quorum runtime: written at the byte and time thresholds on
every node, loaded at start and published as the catch-up delta, and installed with
FetchSnapshot by a node that fell behind the leader's log start (at start, or while it was
cut off and the others deleted a topic)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
import trio

from broker.controller import raft
from broker.controller.image import MetadataImage
from broker.controller.metadata_log import MetadataLogStore, list_snapshots
from broker.controller.controller_result import ControllerResult
from broker.controller.quorum_controller import ControllerSettings, QuorumController
from broker.controller.runtime import QuorumRuntime
from broker.controller.snapshot import load_snapshot
from broker.net.peer import PeerUnavailable
from protocol.metadata_records import MetadataRecordType as T
from tests.interop import group_helpers
from tests.util import WaitTimeout

VOTERS = (0, 1, 2)


def make_runtime(directory, node_id: int = 0, voters=(0,), **snapshots: Any) -> QuorumRuntime:
    store = MetadataLogStore.open(directory / "__cluster_metadata-0")
    node = raft.RaftNode(node_id, raft.QuorumConfig(voters=voters), random.Random(node_id),
                         election=store.election, log=store.raft_log)
    controller = QuorumController(ControllerSettings(node_id=node_id, voters=voters),
                                  random.Random(10 + node_id))
    return QuorumRuntime(node, store, controller, None, **snapshots)


def create_topic(name: str, partitions: int = 1):
    topic_id = uuid.uuid4()

    def operation(c, now, offset) -> ControllerResult:
        records = [(T.TOPIC_RECORD, 0, {"name": name, "topic_id": topic_id})]
        records += [(T.PARTITION_RECORD, 0, {"partition_id": p, "topic_id": topic_id,
                                             "replicas": [0], "isr": [0], "leader": 0,
                                             "leader_epoch": 0, "partition_epoch": 0})
                    for p in range(partitions)]
        return ControllerResult(tuple(records), None)
    return operation


def delete_topic(topic_id: uuid.UUID):
    return lambda c, now, offset: ControllerResult(
        ((T.REMOVE_TOPIC_RECORD, 0, {"topic_id": topic_id}),), None)


def set_config(name: str, value: str):
    return lambda c, now, offset: ControllerResult(
        ((T.CONFIG_RECORD, 0, {"resource_type": 4, "resource_name": "", "name": name,
                               "value": value}),), None)


async def wait_for(condition, timeout_s: float = 30.0) -> None:
    await group_helpers.wait_for(condition, timeout_s)


class Recorder:
    """A commit listener that keeps what it was handed."""

    def __init__(self, runtime: QuorumRuntime):
        self.runtime = runtime
        self.calls: list[tuple[bool, int, list, MetadataImage]] = []
        runtime.listeners.append(self)

    def __call__(self, offset: int, records: list, image: MetadataImage) -> None:
        self.calls.append((self.runtime.catching_up, offset, list(records), image))


# -- one node ------------------------------------------------------------------------------

async def test_a_node_snapshots_past_the_byte_threshold_and_restarts_from_the_snapshot(
        tmp_path):
    runtime = make_runtime(tmp_path, snapshot_max_bytes=2000)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        await runtime.submit(create_topic("small"))
        assert runtime.snapshots_taken == 0  # a few dozen bytes: below the threshold
        for i in range(30):
            await runtime.submit(create_topic(f"t{i}", partitions=4))
        await wait_for(lambda: runtime.snapshots_taken >= 1)
        await runtime.submit(set_config("after.snapshot", "1"))
        nursery.cancel_scope.cancel()
    runtime.store.close()
    image = runtime.committed_image
    snapshot = runtime.node.log.snapshot
    assert snapshot is not None
    # the log behind it is gone, from memory and from disk
    assert runtime.node.log.start_offset == snapshot.snapshot_id.end_offset > 1
    assert list_snapshots(tmp_path / "__cluster_metadata-0")
    assert len(load_snapshot(snapshot.data)[0].topics_by_id) >= 2

    restarted = make_runtime(tmp_path, snapshot_max_bytes=2000)
    # loaded before it runs: the snapshot, then the entries after it once committed
    assert restarted.applied_offset == snapshot.snapshot_id.end_offset
    recorder = Recorder(restarted)
    async with trio.open_nursery() as nursery:
        await nursery.start(restarted.run)
        await wait_for(lambda: recorder.calls)
        nursery.cancel_scope.cancel()
    restarted.store.close()
    catching_up, _offset, records, published = recorder.calls[0]
    assert catching_up
    assert published.topics_by_id == image.topics_by_id
    assert published.broker_configs("") == {"after.snapshot": "1"}
    # the records handed over describe the image from the empty one
    assert MetadataImage.EMPTY.replay(records).topics_by_id == image.topics_by_id


async def test_a_node_snapshots_records_older_than_the_interval(tmp_path, autojump_clock):
    runtime = make_runtime(tmp_path, snapshot_interval_ms=60_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        await runtime.submit(set_config("a", "1"))
        committed = trio.current_time()
        await wait_for(lambda: runtime.snapshots_taken >= 1, timeout_s=600)
        waited = trio.current_time() - committed
        # not before the interval, and soon after it (the encoding runs inline on the
        # autojump clock: a worker thread would let virtual time jump while it works)
        assert 60 <= waited < 90
        # nothing new since: no other snapshot, however long it waits
        await runtime.submit(lambda c, now, offset: ControllerResult((), None))
        with pytest.raises(WaitTimeout):
            await wait_for(lambda: runtime.snapshots_taken >= 2, timeout_s=300)
        nursery.cancel_scope.cancel()
    runtime.store.close()
    assert runtime.node.log.snapshot is not None
    assert load_snapshot(runtime.node.log.snapshot.data)[0].broker_configs("") == {"a": "1"}


# -- three voters, one behind ----------------------------------------------------------------

class Network:
    """In-process Raft transport between runtimes; a node in `cut` reaches nobody."""

    def __init__(self):
        self.runtimes: dict[int, QuorumRuntime] = {}
        self.cut: set[int] = set()

    def transport(self, node_id: int) -> Any:
        network = self

        class Transport:
            async def send(self, destination: int, message: Any) -> Any:
                target = network.runtimes.get(destination)
                if target is None or {node_id, destination} & network.cut:
                    raise PeerUnavailable(f"{node_id} cannot reach {destination}")
                return await target.handle_raft_request(node_id, message, 2.0)

            async def describe_leader(self, voter: int) -> tuple[int, int]:
                raise PeerUnavailable("voters only")

        return Transport()

    async def start(self, nursery: trio.Nursery, runtime: QuorumRuntime) -> None:
        node_id = runtime.node.node_id
        runtime.transport = self.transport(node_id)
        self.runtimes[node_id] = runtime
        await nursery.start(runtime.run)

    def leader(self) -> QuorumRuntime | None:
        return next((r for i, r in self.runtimes.items() if r.active and i not in self.cut),
                    None)

    async def submit(self, operation) -> None:
        while True:
            await wait_for(lambda: self.leader() is not None)
            leader = self.leader()
            assert leader is not None
            try:
                await leader.submit(operation)
                return
            except Exception:  # noqa: BLE001  leadership moved: ask the next one
                await trio.sleep(0.1)


async def test_a_node_that_missed_the_log_behind_a_snapshot_installs_it_at_start(
        tmp_path, autojump_clock):
    network = Network()
    runtimes = {i: make_runtime(tmp_path / str(i), i, VOTERS, snapshot_max_bytes=500)
                for i in VOTERS}
    async with trio.open_nursery() as nursery:
        for i in (0, 1):
            await network.start(nursery, runtimes[i])
        for i in range(20):
            await network.submit(create_topic(f"t{i}", partitions=3))
        await wait_for(lambda: all(runtimes[i].node.log.start_offset > 0 for i in (0, 1)))
        late = runtimes[2]
        recorder = Recorder(late)
        await network.start(nursery, late)
        await wait_for(lambda: recorder.calls)
        leader = network.leader()
        assert leader is not None
        await wait_for(lambda: late.applied_offset >= leader.applied_offset)
        nursery.cancel_scope.cancel()
    for runtime in runtimes.values():
        runtime.store.close()
    # it installed the leader's snapshot: its log starts there, on disk too
    assert late.node.log.snapshot is not None and late.node.log.start_offset > 0
    assert list_snapshots(tmp_path / "2" / "__cluster_metadata-0")
    catching_up, _offset, records, image = recorder.calls[0]
    assert catching_up  # one delta from the empty image, as any start publishes
    names = {t.name for t in image.topics_by_id.values()}
    assert len(names) > 1 and names <= {f"t{i}" for i in range(20)}
    assert MetadataImage.EMPTY.replay(records).topics_by_id == image.topics_by_id
    # then the entries after the snapshot, up to the leader's
    assert late.committed_image.topics_by_id == runtimes[0].committed_image.topics_by_id
    assert len(late.committed_image.topics_by_id) == 20


async def test_a_running_node_cut_off_while_a_topic_was_deleted_installs_the_snapshot(
        tmp_path, autojump_clock):
    network = Network()
    runtimes = {i: make_runtime(tmp_path / str(i), i, VOTERS, snapshot_max_bytes=500)
                for i in VOTERS}
    gone = uuid.uuid4()
    async with trio.open_nursery() as nursery:
        for i in VOTERS:
            await network.start(nursery, runtimes[i])
        node = runtimes[2]
        await network.submit(lambda c, now, offset: ControllerResult((
            (T.TOPIC_RECORD, 0, {"name": "gone", "topic_id": gone}),), None))
        await wait_for(lambda: node.committed_image.topic("gone") is not None
                       and not node.catching_up)
        while network.leader() is node:  # node 2 must be a follower to fall behind
            node.resign()
            await wait_for(lambda: network.leader() not in (None, node))
        network.cut.add(2)
        await network.submit(delete_topic(gone))
        for i in range(20):
            await network.submit(create_topic(f"t{i}", partitions=3))
        end = node.node.log.end_offset
        await wait_for(lambda: all(runtimes[i].node.log.start_offset > end for i in (0, 1)))
        recorder = Recorder(node)
        network.cut.clear()
        await wait_for(lambda: node.committed_image.topic("t19") is not None)
        nursery.cancel_scope.cancel()
    for runtime in runtimes.values():
        runtime.store.close()
    assert node.node.log.start_offset > end  # a snapshot, not entries, brought it back
    installed = [(records, image) for catching_up, _, records, image in recorder.calls
                 if not catching_up and len(records) > 20]
    assert installed, "the install was not published"
    records, image = installed[0]
    assert image.topic("gone") is None and image.topic("t0") is not None
    # the records are the snapshot's: they describe the new image, and do not mention the
    # topic that vanished (the listener diffs the images for that)
    assert not any(t == T.REMOVE_TOPIC_RECORD for t, _, _ in records)
    assert MetadataImage.EMPTY.replay(records).topics_by_id == image.topics_by_id


async def test_a_snapshot_that_cannot_be_encoded_leaves_the_log_whole(tmp_path, monkeypatch,
                                                                      caplog):
    import broker.controller.runtime as runtime_module

    def broken(image):
        raise RuntimeError("a bug in the writer")

    monkeypatch.setattr(runtime_module, "encode_snapshot", broken)
    runtime = make_runtime(tmp_path, snapshot_max_bytes=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        await runtime.submit(create_topic("a"))
        await wait_for(lambda: "could not encode a metadata snapshot" in caplog.text)
        await runtime.submit(create_topic("b"))  # the node goes on committing
        nursery.cancel_scope.cancel()
    runtime.store.close()
    assert runtime.snapshots_taken == 0 and runtime.node.log.start_offset == 0
    assert runtime.committed_image.topic("b") is not None
