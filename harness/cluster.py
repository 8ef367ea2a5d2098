"""A cluster of broker processes for tests and benchmarks: N combined nodes (broker and controller) started
with the command the issue pins, and the means to watch, kill and restart them.

Owns: `ClusterNode` (one node: harness.broker.BrokerProcess, which already logs, stops and
reports log tails, with the cluster command instead of a single broker's) and `Cluster` (N
nodes on free ports, their quorum, and per-node observations).

Each node runs exactly

    python -m broker serve --broker-id I --listen 127.0.0.1:PORT_I --data-dir DIR_I \\
      -o process.roles=broker,controller \\
      -o controller.quorum.voters=0@127.0.0.1:C0,1@127.0.0.1:C1,2@127.0.0.1:C2 \\
      -o broker.rack=rack-I

followed by one `-o key=value` per override (none for `Cluster(..., overrides={})`, so
one test can run the command as the issue pins it, with every default).

The nodes are launched together and only then waited for: a node opens its client listener
once the controller has unfenced it, which needs a quorum, which needs the others.

Observations go to one node at a time over a raw socket (harness.raw.call), so that
"every broker's Metadata" means every broker's own answer, not whichever broker a client
library happened to ask:
- `metadata(i)`: node i's Metadata (v12) for every topic or the named ones;
- `describe_cluster(i)`: node i's DescribeCluster (v1) on its client listener;
- `quorum(i)`: DescribeQuorum (v2) on node i's controller listener, the Raft state it has;
- `active_controller()`: the quorum leader that every running voter agrees on.

Waiting is `wait_for(predicate, timeout_s, message)`, a deadline and a message, never a
fixed sleep. Teardown kills the nodes (SIGKILL): what a graceful stop does is tested on its
own, and three nodes each waiting out a controlled shutdown would cost seconds per test.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

from harness.broker import BrokerProcess, config_value
from harness.ports import free_port
from harness.raw import HOST, call
from harness.wait import wait_until
from protocol.messages import DESCRIBE_CLUSTER, DESCRIBE_QUORUM, METADATA

__all__ = ["Cluster", "ClusterNode", "FORM_TIMEOUT_S", "HOST", "START_TIMEOUT_S", "metadata",
           "partitions", "quorum"]

T = TypeVar("T")

METADATA_VERSION = 12
DESCRIBE_QUORUM_VERSION = 2
METADATA_TOPIC = "__cluster_metadata"
FORM_TIMEOUT_S = 15.0  # the bound for three brokers to see each other
START_TIMEOUT_S = 30.0


# -- one node's own answers, by port (a Cluster's methods, and the benchmarks', ask these) --

def metadata(port: int, topics: Iterable[str] | None = None, *, timeout_s: float = 5.0) -> Any:
    """The Metadata answer (v12) of the broker on `port`, every topic unless named."""
    body = {"topics": None if topics is None else [{"topic_id": None, "name": t}
                                                    for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}
    return call(port, METADATA, METADATA_VERSION, body, timeout_s)


def partitions(port: int, topic: str, *, timeout_s: float = 5.0) -> dict[int, Any]:
    """partition index -> the Metadata entry of the broker on `port` for it (leader_id,
    isr_nodes, replica_nodes, ...; {} if it has none)."""
    for t in metadata(port, [topic], timeout_s=timeout_s).topics:
        if t.name == topic and t.error_code == 0:
            return {p.partition_index: p for p in t.partitions}
    return {}


def quorum(controller_port: int, *, timeout_s: float = 5.0) -> Any:
    """DescribeQuorum v2 (on a controller listener, or a broker's, which asks the active
    controller): the metadata partition's entry (leader_id, leader_epoch, high_watermark,
    current_voters, ...)."""
    body = call(controller_port, DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION,
                {"topics": [{"topic_name": METADATA_TOPIC,
                             "partitions": [{"partition_index": 0}]}]}, timeout_s)
    return body.topics[0].partitions[0]


class ClusterNode(BrokerProcess):
    """One combined node of a Cluster; `start`, `launch`, `stop(kill=...)`, `restart`,
    `tail` and the rest are BrokerProcess's."""

    def __init__(self, base_dir: Path, node_id: int, *, port: int, controller_port: int,
                 voters: str, rack: str | None, overrides: Mapping[str, Any] | None = None,
                 roles: str = "broker,controller", start_timeout_s: float = START_TIMEOUT_S):
        super().__init__(base_dir, overrides, port=port, broker_id=node_id,
                         start_timeout_s=start_timeout_s)
        self.node_id = node_id
        self.controller_port = controller_port
        self.voters = voters
        self.rack = rack
        self.roles = roles

    def command(self) -> list[str]:
        """The pinned command; a node given `listeners` (Kafka's form, a CONTROLLER listener
        of its own) takes them instead of --listen, which would override them."""
        cmd = [sys.executable, "-m", "broker", "serve",
               "--broker-id", str(self.node_id)]
        if "listeners" not in self.overrides:
            cmd += ["--listen", self.bootstrap]
        cmd += ["--data-dir", str(self.data_dir), *self.args,  # args: e.g. a --data-dir a,b
                "-o", f"process.roles={self.roles}",
                "-o", f"controller.quorum.voters={self.voters}"]
        if self.rack is not None:
            cmd += ["-o", f"broker.rack={self.rack}"]
        for key, value in self.overrides.items():
            cmd += ["-o", f"{key}={value}"]
        return cmd

    def wait_exit(self, timeout_s: float) -> int:
        """The exit status, once the process has ended by itself (a refused start)."""
        proc = self.proc
        assert proc is not None, "never started"
        wait_until(lambda: proc.poll() is not None, timeout_s,
                   message=f"node {self.node_id} (pid {self.pid}) to exit")
        self._stopped_on_purpose = True
        return proc.returncode

    def __repr__(self) -> str:
        return f"<ClusterNode {self.node_id} {super().__repr__()[1:-1]}>"


class Cluster:
    """N combined nodes on free ports, racks rack-0..rack-N-1 (or none with racks=False).

        cluster = Cluster(tmp_path, 3, overrides=FAST).start()
        cluster.wait_formed()                   # every broker lists every running broker
        leader = cluster.active_controller()
        cluster.kill(leader); cluster.restart(leader)
        cluster.stop_all()
    """

    def __init__(self, base_dir: Path, size: int = 3, overrides: Mapping[str, Any] | None = None,
                 *, racks: bool = True, start_timeout_s: float = START_TIMEOUT_S):
        self.base_dir = Path(base_dir)
        self.overrides = {k: config_value(v) for k, v in (overrides or {}).items()}
        ports = [free_port(HOST) for _ in range(size)]
        controller_ports = [free_port(HOST) for _ in range(size)]
        self.voters = ",".join(f"{i}@{HOST}:{c}" for i, c in enumerate(controller_ports))
        self.nodes = [
            ClusterNode(self.base_dir / f"node-{i}", i, port=ports[i],
                        controller_port=controller_ports[i], voters=self.voters,
                        rack=f"rack-{i}" if racks else None, overrides=self.overrides,
                        start_timeout_s=start_timeout_s)
            for i in range(size)]
        self.extra: list[ClusterNode] = []  # nodes a test added (a duplicate id, bad voters)

    # -- what it is ----------------------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def node(self, node_id: int) -> ClusterNode:
        return self.nodes[node_id]

    def running(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.running]

    def all_nodes(self) -> list[ClusterNode]:
        return self.nodes + self.extra

    # -- life cycle ----------------------------------------------------------------------

    def start(self, form_timeout_s: float | None = None) -> "Cluster":
        """Launch every node, then wait until each accepts connections."""
        for n in self.nodes:
            n.launch()
        self.wait_ready(self.nodes, form_timeout_s)
        return self

    def wait_ready(self, nodes: Iterable[ClusterNode], timeout_s: float | None = None) -> None:
        try:
            for n in nodes:
                n.wait_ready(timeout_s)
        except BaseException:
            self.stop_all()
            raise

    def kill(self, node_id: int) -> None:
        """kill -9."""
        self.nodes[node_id].stop(kill=True)

    def terminate(self, node_id: int, timeout_s: float = 15.0) -> int | None:
        """SIGTERM (a controlled shutdown) and wait for the exit; SIGKILL after timeout_s."""
        return self.nodes[node_id].stop(timeout_s=timeout_s)

    def restart(self, node_id: int, *, kill: bool = True) -> ClusterNode:
        """Stop (kill -9 unless kill=False) if running, start again on the same ports and
        data directory, and return once it accepts connections (it is unfenced)."""
        node = self.nodes[node_id]
        if node.running:
            node._log_note(f"restart ({'SIGKILL' if kill else 'SIGTERM'})")
            node.stop(kill=kill)
        return node.start()

    def add_node(self, node_id: int, *, voters: str | None = None, roles: str = "broker,controller",
                 port: int | None = None, controller_port: int | None = None,
                 rack: str | None = None, overrides: Mapping[str, Any] | None = None
                 ) -> ClusterNode:
        """A node outside the cluster's own (its own ports and data directory), not started:
        a duplicate node.id, or one started with other voters."""
        node = ClusterNode(self.base_dir / f"extra-{len(self.extra)}-node-{node_id}", node_id,
                           port=port or free_port(HOST),
                           controller_port=controller_port or free_port(HOST),
                           voters=self.voters if voters is None else voters, rack=rack,
                           overrides={**self.overrides, **(overrides or {})}, roles=roles)
        self.extra.append(node)
        return node

    def stop_all(self, kill: bool = True) -> None:
        for n in self.all_nodes():
            if n.proc is not None:
                n.stop(kill=kill)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop_all()

    # -- observations (each of one node) -------------------------------------------------

    def metadata(self, node_id: int, topics: Iterable[str] | None = None) -> Any:
        """Node `node_id`'s own Metadata answer (v12), every topic unless named."""
        return metadata(self.nodes[node_id].port, topics)

    def brokers_seen(self, node_id: int) -> dict[int, tuple[str, int, str | None]]:
        """The brokers node `node_id`'s Metadata lists: id -> (host, port, rack)."""
        return {b.node_id: (b.host, b.port, b.rack) for b in self.metadata(node_id).brokers}

    def partitions(self, node_id: int, topic: str) -> dict[int, Any]:
        """partition index -> node `node_id`'s Metadata entry for it ({} if it has none)."""
        return partitions(self.nodes[node_id].port, topic)

    def leaders(self, node_id: int, topic: str) -> dict[int, int]:
        """partition -> leader id (-1: none) as node `node_id` sees it."""
        return {i: p.leader_id for i, p in self.partitions(node_id, topic).items()}

    def describe_cluster(self, node_id: int) -> Any:
        """Node `node_id`'s own DescribeCluster answer (v1, broker endpoints)."""
        return call(self.nodes[node_id].port, DESCRIBE_CLUSTER, 1,
                    {"include_cluster_authorized_operations": False, "endpoint_type": 1})

    def quorum(self, node_id: int) -> Any:
        """DescribeQuorum v2 on node `node_id`'s controller listener: the metadata
        partition's entry (leader_id, leader_epoch, high_watermark, current_voters, ...)."""
        return quorum(self.nodes[node_id].controller_port)

    def active_controller(self) -> int | None:
        """The quorum leader if every running voter names the same one, else None."""
        seen = set()
        for n in self.running():
            try:
                seen.add(self.quorum(n.node_id).leader_id)
            except OSError:
                return None
        if len(seen) == 1 and (leader := seen.pop()) >= 0:
            return leader
        return None

    # -- waiting -------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], T | None], timeout_s: float, message: str
                 ) -> T:
        """`predicate()` until truthy (OSError counts as not yet: a node restarting)."""
        return wait_until(predicate, timeout_s, interval_s=0.05, message=message,
                          ignore_exceptions=(OSError,))

    def wait_formed(self, timeout_s: float = FORM_TIMEOUT_S) -> None:
        """Until every running node's Metadata lists exactly the running nodes, each at
        its own address and rack."""
        def formed() -> bool:
            expected = {n.node_id: (HOST, n.port, n.rack) for n in self.running()}
            return all(self.brokers_seen(n.node_id) == expected for n in self.running())

        self.wait_for(formed, timeout_s,
                      f"every running node's Metadata to list exactly the running nodes "
                      f"{[n.node_id for n in self.running()]}")

    def wait_controller(self, timeout_s: float = 15.0, *, other_than: int | None = None) -> int:
        """The active controller, once the running voters agree on one (not `other_than`)."""
        def agreed() -> tuple[int] | None:  # a tuple: node 0 is a leader too
            leader = self.active_controller()
            return None if leader is None or leader == other_than else (leader,)

        return self.wait_for(agreed, timeout_s, "the running voters to agree on an active "
                             "controller" + (f" other than {other_than}"
                                             if other_than is not None else ""))[0]

    def wait_leaders_off(self, topic: str, broker_id: int, timeout_s: float) -> dict[int, int]:
        """Until no running node's Metadata names `broker_id` as a leader of `topic`, and
        every partition has a leader; the leaders as the first running node sees them."""
        def moved() -> dict[int, int] | None:
            views = [self.leaders(n.node_id, topic) for n in self.running()]
            for view in views:
                if not view or any(leader in (broker_id, -1) for leader in view.values()):
                    return None
            return views[0]

        return self.wait_for(moved, timeout_s,
                             f"every partition of {topic} led by a broker other than "
                             f"{broker_id}, in every running node's Metadata")

    def tails(self) -> str:
        return "\n".join(f"--- node {n.node_id} ({n!r}) ---\n{n.tail()}"
                         for n in self.all_nodes())
