"""`DockerTarget`: the chaos harness's faults aimed at docker-compose.yml's broker-0..2.

  start / destroy   `make cluster-down VOLUMES=1` then `make cluster` (healthy); `make
                    cluster-down VOLUMES=1` (containers, network and volumes)
  kill / terminate  `docker kill` (SIGKILL) / `docker stop -t 30` (SIGTERM, then the wait)
  pause / resume    `docker pause` / `docker unpause` (the cgroup freezer: sockets stay open)
  partition         iptables rules dropping the peers' packets in each container's network
                    namespace, laid from the host (`nsenter -t PID -n iptables-restore`): the
                    image has no iptables, so the host's binary (iptables-nft here) and kernel
                    do the work
  copy_data         docker/copy-data.sh (`make cluster-data`), renamed to DEST/node-N

Containers are found by the labels compose puts on them (as docker/wait-healthy.sh finds
them): `docker ps` answers in milliseconds, docker-compose 1.29 in about a second.

Partitions. Every node's rules live in one chain, CHAOS, that INPUT and OUTPUT jump to; it
holds `-s IP -j DROP` and `-d IP -j DROP` for each peer the node is cut from, so one chain
serves both directions and healing is emptying it. Only the peers' addresses on the compose
network are dropped: the host's clients reach the published ports through docker's proxy or
NAT from the bridge's gateway address, which no rule names, so the runner still sees every
node's own Metadata while it is cut off. A paused container keeps its namespace (nsenter
works on it); a stopped one has none and is skipped. `docker start` gives a container a new
namespace (no rules) and a new pid, perhaps a new address: so pids and addresses are looked
up at every call, and start_node() lays the current partition again, on every node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bench.common import BenchError
from bench.compose import COMPOSE_BOOTSTRAP, ROOT, SERVICES

CHAIN = "CHAOS"
CLIENT_PORT = 19092  # node N's EXTERNAL listener is published on 127.0.0.1:19092+N
MAKE_TIMEOUT_S = 600


def compose_project(root: Path = ROOT) -> str:
    """The compose project name, as docker/copy-data.sh and wait-healthy.sh find it:
    COMPOSE_PROJECT_NAME from the environment, else from root/.env, else the directory."""
    name = os.environ.get("COMPOSE_PROJECT_NAME", "")
    env = root / ".env"
    if not name and env.exists():
        for line in env.read_text().splitlines():
            if line.startswith("COMPOSE_PROJECT_NAME="):
                name = line.partition("=")[2].strip()
    return name or root.name


@dataclass
class ContainerState:
    running: bool  # paused counts as running, as docker says
    paused: bool
    pid: int  # 0 unless running
    ips: list[str]  # on the container's networks (the compose network); [] unless running


def _run(cmd: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60,
         cwd: Path | None = None) -> str:
    """Run cmd; its stdout, or BenchError with the command and the tail of its output."""
    try:
        done = subprocess.run(list(cmd), input=stdin, capture_output=True, text=True,
                              timeout=timeout_s, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"`{' '.join(cmd)}` did not finish within {timeout_s:g} s") from e
    if done.returncode != 0:
        raise BenchError(f"`{' '.join(cmd)}` exited {done.returncode}:\n"
                         f"{done.stdout[-3000:]}{done.stderr[-3000:]}".rstrip())
    return done.stdout


class DockerTarget:
    """docker-compose.yml's three brokers, reached from the host on 127.0.0.1:19092-19094."""

    name = "docker"
    can_partition = True

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.project = compose_project(root)
        self.services = list(SERVICES)
        self.node_ids = list(range(len(self.services)))
        self._ids: dict[int, str] = {}  # node -> container id, until start/destroy
        self._groups: list[list[int]] | None = None  # the partition in force, if any

    # -- the cluster -------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return COMPOSE_BOOTSTRAP

    def client_port(self, node: int) -> int:
        self._check_node(node)
        return CLIENT_PORT + node

    def _make(self, *args: str) -> None:
        _run(["make", *args], cwd=self.root, timeout_s=MAKE_TIMEOUT_S)

    def start(self) -> None:
        self._forget()
        self._make("cluster-down", "VOLUMES=1")
        self._make("cluster")

    def stop(self) -> None:
        running = [self._id(n) for n, s in self._states().items() if s.running]
        if running:  # SIGKILL works on a paused container too
            _run(["docker", "kill", *running])

    def destroy(self) -> None:
        self._forget()
        self._make("cluster-down", "VOLUMES=1")

    def copy_data(self, dest: Path) -> dict[int, Path]:
        dest = Path(dest).resolve()
        dest.mkdir(parents=True, exist_ok=True)
        _run(["docker/copy-data.sh", str(dest), *self.services], cwd=self.root,
             timeout_s=MAKE_TIMEOUT_S)  # -> dest/broker-N
        out = {}
        for node, service in zip(self.node_ids, self.services):
            target = dest / f"node-{node}"
            shutil.rmtree(target, ignore_errors=True)
            (dest / service).rename(target)
            out[node] = target
        return out

    # -- one node ----------------------------------------------------------------------------

    def _check_node(self, node: int) -> None:
        if node not in self.node_ids:
            raise ValueError(f"no node {node}: the nodes are {self.node_ids}")

    def _forget(self) -> None:
        self._ids.clear()
        self._groups = None

    def _id(self, node: int) -> str:
        """broker-N's container id: by compose's labels, once (until start or destroy)."""
        self._check_node(node)
        if node not in self._ids:
            service = self.services[node]
            found = _run(["docker", "ps", "-aq",
                          "--filter", f"label=com.docker.compose.project={self.project}",
                          "--filter", f"label=com.docker.compose.service={service}",
                          "--filter", "label=com.docker.compose.oneoff=False"]).split()
            if len(found) != 1:
                raise BenchError(f"{len(found)} containers for {service} of project "
                                 f"{self.project} (is the cluster up: `make cluster`?)")
            self._ids[node] = found[0]
        return self._ids[node]

    def _states(self) -> dict[int, ContainerState]:
        """Every node's container state, pid and addresses: one `docker inspect` (looking
        the containers up again once, should the cached ones be gone)."""
        fmt = ("{{.State.Running}} {{.State.Paused}} {{.State.Pid}}"
               "{{range .NetworkSettings.Networks}} {{.IPAddress}}{{end}}")
        try:
            lines = _run(["docker", "inspect", "-f", fmt,
                          *(self._id(n) for n in self.node_ids)]).splitlines()
        except BenchError:
            self._ids.clear()  # recreated behind our back (`make cluster` by hand)?
            lines = _run(["docker", "inspect", "-f", fmt,
                          *(self._id(n) for n in self.node_ids)]).splitlines()
        states = {}
        for node, line in zip(self.node_ids, lines):
            running, paused, pid, *ips = line.split()
            up = running == "true"
            states[node] = ContainerState(up, paused == "true", int(pid) if up else 0,
                                          [ip for ip in ips if ip] if up else [])
        return states

    def _state(self, node: int) -> ContainerState:
        return self._states()[node]

    def kill(self, node: int) -> None:
        if self._state(node).running:
            _run(["docker", "kill", self._id(node)])

    def start_node(self, node: int) -> None:
        if self._state(node).running:
            return
        _run(["docker", "start", self._id(node)])
        if self._groups is not None:  # a new namespace, perhaps a new address: lay it again
            self._lay(self._groups)

    def terminate(self, node: int) -> None:
        self.resume(node)
        if self._state(node).running:  # docker stop returns once the container has exited
            _run(["docker", "stop", "-t", "30", self._id(node)], timeout_s=90)

    def pause(self, node: int) -> None:
        state = self._state(node)
        if state.running and not state.paused:
            _run(["docker", "pause", self._id(node)])

    def resume(self, node: int) -> None:
        if self._state(node).paused:
            _run(["docker", "unpause", self._id(node)])

    def is_running(self, node: int) -> bool:
        return self._state(node).running

    # -- the network -------------------------------------------------------------------------

    def partition(self, groups: Sequence[Sequence[int]]) -> None:
        for group in groups:
            for node in group:
                self._check_node(node)
        laid = [list(g) for g in groups]
        self._lay(laid)
        self._groups = laid

    def heal_network(self) -> None:
        self._groups = None
        self._lay(None)

    def _lay(self, groups: list[list[int]] | None) -> None:
        """Replace every running node's CHAOS chain with DROPs of the peers it shares no
        group with (none when groups is None): a node in no group is cut from all, one in
        two groups bridges them (a ring)."""
        together = [set(g) for g in (groups or [self.node_ids])]
        states = self._states()
        for node, state in states.items():
            if not state.running:
                continue
            cut = [ip for peer, other in states.items() if peer != node and
                   not any(node in g and peer in g for g in together) for ip in other.ips]
            try:
                self._set_chain(state.pid, cut)
            except BenchError:
                if self._state(node).running:
                    raise  # else it died meanwhile: no namespace, nothing to cut

    @staticmethod
    def _set_chain(pid: int, cut: list[str]) -> None:
        """In pid's network namespace: CHAOS holds exactly the DROPs for cut (a chain
        declared to iptables-restore --noflush is created or emptied, atomically), and
        INPUT and OUTPUT jump to it once."""
        rules = "".join(f"-A {CHAIN} -s {ip} -j DROP\n-A {CHAIN} -d {ip} -j DROP\n"
                        for ip in cut)
        ns = ["nsenter", "-t", str(pid), "-n"]
        _run([*ns, "iptables-restore", "--noflush"],
             stdin=f"*filter\n:{CHAIN} - [0:0]\n{rules}COMMIT\n")
        for hook in ("INPUT", "OUTPUT"):
            present = subprocess.run([*ns, "iptables", "-C", hook, "-j", CHAIN],
                                     capture_output=True).returncode == 0
            if not present:
                _run([*ns, "iptables", "-I", hook, "1", "-j", CHAIN])
