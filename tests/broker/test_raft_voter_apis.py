"""AddRaftVoter and RemoveRaftVoter (KIP-853) on a broker whose quorum is static (kraft.version
0: a single node, or controller.quorum.voters alone): sent by our AdminClient to the client
listener, answered UNSUPPORTED_VERSION as Kafka's leader answers them, and nothing about the
quorum changes. The changes themselves are in tests/broker/controller/test_raft_voters.py and
on real processes in tests/cluster/test_quorum_reconfig.py."""

from __future__ import annotations

import uuid

import pytest

from client.admin import AdminClient
from client.errors import KafkaError
from protocol.errors import ErrorCode


async def test_a_static_quorum_refuses_voter_changes_and_changes_nothing(inproc, autojump_clock):
    node = inproc.broker.runtime.node
    before = node.voters
    async with AdminClient(bootstrap_servers=inproc.bootstrap) as admin:
        with pytest.raises(KafkaError) as added:
            await admin.add_raft_voter(7, uuid.uuid4(), [("CONTROLLER", "127.0.0.1", 9999)],
                                       timeout_ms=2000)
        assert added.value.code is ErrorCode.UNSUPPORTED_VERSION
        with pytest.raises(KafkaError) as removed:
            await admin.remove_raft_voter(node.node_id, uuid.UUID(int=0), timeout_ms=2000)
        assert removed.value.code is ErrorCode.UNSUPPORTED_VERSION
        quorum = await admin.describe_quorum()
    assert [v.replica_id for v in quorum.voters] == [node.node_id]
    # no VotersRecord was written (the log's other entries, the controller's idle NoOps,
    # go on as ever)
    assert node.voters == before and node.log.voters is None
