"""The clusters a chaos run aims its faults at, behind one interface (`Target`):

  ProcessTarget  three local processes on 127.0.0.1 (bench.cluster's nodes): kill -9,
                 SIGSTOP/SIGCONT, SIGTERM restarts. Loopback has no network between the
                 nodes, so it cannot partition them.
  DockerTarget   docker-compose.yml's broker-0..2 (bench/chaos/docker_target.py): docker
                 kill, docker pause, and network partitions made with iptables inside each
                 container's network namespace, as Jepsen and Kafka's Trogdor make them.

Every node is reachable from the host at 127.0.0.1:`client_port(node)`, so the runner
observes each node's own Metadata the same way for both.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Protocol, Sequence

from bench.cluster import Cluster, Node


class Target(Protocol):
    name: str
    node_ids: list[int]
    can_partition: bool

    @property
    def bootstrap(self) -> str: ...

    def client_port(self, node: int) -> int: ...

    def start(self) -> None:
        """Bring the cluster up from nothing, every node accepting clients."""

    def stop(self) -> None:
        """Stop every node (graceful or not: data is only read afterwards)."""

    def destroy(self) -> None:
        """Remove what start made (containers, networks); data dirs were copied out."""

    def kill(self, node: int) -> None:
        """kill -9 / docker kill: the node's process dies at once, unflushed data too."""

    def start_node(self, node: int) -> None:
        """Start a killed or stopped node again with its data; return once launched (the
        runner waits for it to serve)."""

    def terminate(self, node: int) -> None:
        """SIGTERM (a controlled shutdown) and wait until the process has exited."""

    def pause(self, node: int) -> None:
        """SIGSTOP / docker pause: the process stops, its sockets stay open."""

    def resume(self, node: int) -> None: ...

    def partition(self, groups: Sequence[Sequence[int]]) -> None:
        """Two nodes keep talking if some group holds both; every other pair is cut (both
        directions), so a node in no group is cut from everyone and a node in two groups
        bridges them. Replaces any earlier partition."""

    def heal_network(self) -> None:
        """Undo every partition."""

    def is_running(self, node: int) -> bool:
        """Its process exists (paused counts as running)."""

    def copy_data(self, dest: Path) -> dict[int, Path]:
        """Each node's data directory, copied under dest (after stop): node -> path."""


class ProcessTarget:
    """bench.cluster's three nodes: the cluster tests' pinned command plus `overrides`."""

    name = "processes"
    can_partition = False

    def __init__(self, base_dir: Path, overrides: dict[str, str]) -> None:
        self.cluster = Cluster(base_dir, overrides)
        self.node_ids = [n.node_id for n in self.cluster.nodes]
        self._paused: set[int] = set()

    def _node(self, node: int) -> Node:
        return self.cluster.nodes[node]

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap()

    def client_port(self, node: int) -> int:
        return self._node(node).port

    def start(self) -> None:
        self.cluster.start()

    def stop(self) -> None:
        for n in self.node_ids:
            self.resume(n)
        self.cluster.stop()

    def destroy(self) -> None:
        self.stop()

    def kill(self, node: int) -> None:
        self._paused.discard(node)
        self._node(node).kill()

    def start_node(self, node: int) -> None:
        if not self._node(node).running:
            self._node(node).launch()

    def terminate(self, node: int) -> None:
        self.resume(node)
        n = self._node(node)
        n.terminate()
        if n.proc is not None:
            n.wait_exit()

    def pause(self, node: int) -> None:
        n = self._node(node)
        if n.running and n.proc is not None:
            n.proc.send_signal(signal.SIGSTOP)
            self._paused.add(node)

    def resume(self, node: int) -> None:
        n = self._node(node)
        if node in self._paused and n.running and n.proc is not None:
            n.proc.send_signal(signal.SIGCONT)
        self._paused.discard(node)

    def partition(self, groups: Sequence[Sequence[int]]) -> None:
        raise NotImplementedError("local processes share loopback: no partitions")

    def heal_network(self) -> None:
        pass

    def is_running(self, node: int) -> bool:
        return self._node(node).running

    def copy_data(self, dest: Path) -> dict[int, Path]:
        out = {}
        for n in self.cluster.nodes:
            target = dest / f"node-{n.node_id}"
            shutil.copytree(n.base_dir / "data", target, dirs_exist_ok=True)
            out[n.node_id] = target
        return out
