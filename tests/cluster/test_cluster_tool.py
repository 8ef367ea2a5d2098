"""`minibroker cluster describe` and `minibroker metadata-quorum describe` (tools/cluster.py)
against the harness's three nodes, and the AdminClient calls they are built on
(describe_cluster, describe_quorum), cross-checked with confluent-kafka's DescribeCluster and
with each node's own DescribeQuorum on its controller listener."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio

from client.admin import AdminClient
from tests.cluster import confluent
from tests.cluster.harness import FAST, HOST, Cluster
from tests.interop.conftest import REPO_ROOT

pytestmark = pytest.mark.interop

SESSION_TIMEOUT_S = FAST["broker.session.timeout.ms"] / 1000


def tool(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tools.cli", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, ""), done
    return done.stdout


def follower_of(cluster: Cluster) -> int:
    """A node that is not the active controller: its answers are forwarded ones."""
    leader = cluster.wait_controller()
    return next(n.node_id for n in cluster.nodes if n.node_id != leader)


async def test_describe_cluster_and_quorum_with_our_client(cluster):
    leader = cluster.wait_controller()
    node = follower_of(cluster)
    with trio.fail_after(20):
        async with AdminClient(bootstrap_servers=cluster.nodes[node].bootstrap) as admin:
            described = await admin.describe_cluster()
            quorum = await admin.describe_quorum()
    cluster_id, controller, _ = confluent.describe_cluster(cluster.nodes[0].bootstrap)
    assert described.cluster_id == cluster_id
    assert described.controller == controller == leader
    assert [(b.node_id, b.host, b.port, b.rack) for b in described.brokers] == [
        (n.node_id, HOST, n.port, n.rack) for n in cluster.nodes]

    truth = cluster.quorum(leader)
    assert quorum.leader_id == leader == truth.leader_id
    assert quorum.leader_epoch == truth.leader_epoch
    assert quorum.high_watermark > 0
    assert sorted(r.replica_id for r in quorum.voters) == [0, 1, 2]
    assert quorum.nodes == {n.node_id: (HOST, n.controller_port) for n in cluster.nodes}
    assert all(quorum.lag(r) >= 0 for r in quorum.voters)


def test_cluster_describe_prints_the_cluster_and_its_quorum(cluster):
    leader = cluster.wait_controller()
    cluster_id, _, _ = confluent.describe_cluster(cluster.nodes[0].bootstrap)
    out = tool("cluster", "describe", "--bootstrap-server",
               cluster.nodes[follower_of(cluster)].bootstrap).splitlines()
    assert out[0] == f"ClusterId:    {cluster_id}"
    assert out[1] == f"Controller:   {leader}"
    assert out[2] == "Brokers:      3 unfenced"
    rows = {line.split()[0]: line.split(None, 3) for line in out
            if line.startswith("  ") and line.split()[0].isdigit() and ":" in line.split()[1]}
    for n in cluster.nodes:
        row = rows[str(n.node_id)]
        assert row[1:3] == [f"{HOST}:{n.port}", n.rack]
        assert row[3].startswith("unfenced")
        assert row[3].endswith("active controller") == (n.node_id == leader)
    assert f"  LeaderId:               {leader}" in out
    assert "  CurrentVoters:          [0,1,2]" in out


def test_metadata_quorum_status_and_replication(cluster):
    leader = cluster.wait_controller()
    bootstrap = cluster.nodes[follower_of(cluster)].bootstrap
    status = tool("metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--status")
    fields = dict(line.split(":", 1) for line in status.splitlines())
    fields = {k: v.strip() for k, v in fields.items()}
    assert list(fields) == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark",
                            "MaxFollowerLag", "MaxFollowerLagTimeMs", "CurrentVoters",
                            "CurrentObservers"]
    assert fields["LeaderId"] == str(leader)
    assert fields["CurrentVoters"] == "[0,1,2]"
    assert int(fields["LeaderEpoch"]) >= 1 and int(fields["HighWatermark"]) > 0

    # the bootstrap server after the action works too
    replication = tool("metadata-quorum", "describe", "--replication",
                       "--bootstrap-server", bootstrap).splitlines()
    assert replication[0].split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag",
                                      "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    rows = [line.split() for line in replication[1:]]
    assert rows[0][0] == str(leader) and rows[0][-1] == "Leader" and rows[0][3] == "0"
    assert sorted(r[0] for r in rows) == ["0", "1", "2"]
    assert {r[-1] for r in rows[1:]} == {"Follower"}


def test_cluster_describe_shows_a_killed_broker_fenced(cluster):
    victim = follower_of(cluster)
    cluster.kill(victim)
    survivor = next(n for n in cluster.running())

    def fenced() -> list[str] | None:
        out = tool("cluster", "describe", "--bootstrap-server", survivor.bootstrap)
        row = next((line.split() for line in out.splitlines()
                    if line.startswith("  ") and line.split()[:1] == [str(victim)]
                    and line.split()[-1] in ("fenced", "unfenced", "controller")), None)
        return row if row is not None and row[-1] == "fenced" else None
    cluster.wait_for(fenced, SESSION_TIMEOUT_S + 10,
                     f"`cluster describe` to show broker {victim} fenced")


def test_cluster_tool_without_a_broker_is_one_line():
    done = subprocess.run([sys.executable, "-m", "tools.cli", "cluster", "describe",
                           "--bootstrap-server", "127.0.0.1:1", "--timeout", "2000"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("minibroker cluster: ") and done.stderr.count("\n") == 1
