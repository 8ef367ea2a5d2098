"""The quorum runtime around the pure pieces: commits reach listeners once, a controller
operation answers only when its entry commits, and a leader that resigned stops acting as
the active controller instead of failing on its next append."""

import random
import uuid

import pytest
import trio

from broker.controller import raft
from broker.controller.metadata_log import MetadataLogStore
from broker.controller.quorum_controller import ControllerSettings, QuorumController
from broker.controller.runtime import NotController, QuorumRuntime
from protocol.errors import ErrorCode
from protocol.messages import BROKER_REGISTRATION, request_body
from protocol.metadata_records import MetadataRecordType as T


REGISTRATION = request_body(BROKER_REGISTRATION, 0, {
    "broker_id": 0, "cluster_id": "c", "incarnation_id": uuid.uuid4(),
    "listeners": [{"name": "PLAINTEXT", "host": "h", "port": 1, "security_protocol": 0}],
    "features": [], "rack": None})


def runtime_of(tmp_path, voters=(0,)) -> QuorumRuntime:
    store = MetadataLogStore.open(tmp_path / "__cluster_metadata-0")
    node = raft.RaftNode(0, raft.QuorumConfig(voters=voters), random.Random(1),
                         election=store.election, log=store.raft_log)
    controller = QuorumController(ControllerSettings(node_id=0, voters=voters),
                                  random.Random(2))
    return QuorumRuntime(node, store, controller, None)


def elect_three(runtime: QuorumRuntime) -> None:
    """Make node 0 of voters (0, 1, 2) leader with one granted vote, no network."""
    node = runtime.node
    runtime._apply(node.start(0))
    runtime._apply(node.tick(node.next_deadline()))
    runtime._apply(node.receive(1, 0, raft.VoteResponse(ErrorCode.NONE, -1, node.epoch, True),
                                node.next_deadline()))
    assert node.is_leader and runtime.active


async def test_a_single_voter_commits_and_answers_with_each_entry_once(tmp_path):
    runtime = runtime_of(tmp_path)
    seen = []
    runtime.listeners.append(lambda offset, records, image: seen.append(
        (offset, [t for t, _, _ in records])))
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        assert runtime.active
        response = await runtime.submit(
            lambda c, now, offset: c.register_broker(REGISTRATION, now, offset))
        assert response["error_code"] == 0
        # answered only once committed, and so already applied by the listeners
        assert runtime.committed_image.brokers[0].epoch == response["broker_epoch"]
        nursery.cancel_scope.cancel()
    types = [t for _, ts in seen for t in ts]
    assert types.count(T.REGISTER_BROKER_RECORD) == 1
    assert [o for o, _ in seen] == sorted({o for o, _ in seen})


async def test_a_leader_that_resigned_refuses_operations_as_not_controller(tmp_path):
    runtime = runtime_of(tmp_path, voters=(0, 1, 2))
    elect_three(runtime)
    runtime.resign()  # EndQuorumEpoch: no other leader is known yet
    assert not runtime.node.is_leader and not runtime.active
    with pytest.raises(NotController):
        await runtime.submit(lambda c, now, offset: c.allocate_producer_ids(0, 1))
