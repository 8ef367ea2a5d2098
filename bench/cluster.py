"""`minibroker bench cluster`: the control plane of a three-node cluster, timed.

Owns the benchmark's own three processes (`Node`, `Cluster`: the issue's pinned command,
`python -m broker serve --broker-id I --listen 127.0.0.1:PORT_I --data-dir DIR_I -o
process.roles=broker,controller -o controller.quorum.voters=... -o broker.rack=rack-I`, plus
the timeouts below), the five measurements and the table:

    minibroker bench cluster [--runs 10] [--leader-runs 5] [--shutdown-runs 5]
        [--propagation-runs 20] [--partitions 1000] [--election-timeout-ms 1000]
        [--fetch-timeout-ms MS] [--session-timeout-ms 3000] [--heartbeat-interval-ms 500]
        [--only a,b,c,d,e]
        [--out DIR] [--json FILE]

(a) controller failover: kill -9 of the active controller, then the time until a
    CreateTopics (confluent-kafka's AdminClient on the survivors) succeeds; also the time
    until the survivors agree on a new quorum leader. Median of --runs. A follower notices
    the dead leader only after controller.quorum.fetch.timeout.ms without an answer to its
    Fetch, and stands after part of the election timeout: their sum bounds (a) from below.
(b) partition leader failover: kill -9 of a broker (not the controller) leading partitions
    of a fresh 6-partition RF 3 topic, then the time until every survivor's Metadata shows
    every partition led by another broker. Median of --leader-runs.
(c) controlled shutdown: SIGTERM to such a broker, then the time until no survivor's
    Metadata names it as a leader. Median of --shutdown-runs.
(d) propagation: from a CreateTopics answer (confluent-kafka) to every broker's Metadata
    showing the topic with a leader for each partition. Median of --propagation-runs.
(e) creating one topic of --partitions partitions with RF 3: until the CreateTopics answer,
    and until every broker's Metadata shows them all led.

Between runs the killed or stopped node is started again and the cluster waits until every
node lists all three. Each node's Metadata is read on a socket to that node (our sans-IO
protocol codec), since a client library may ask any broker. Killed nodes come back with
their data directories, so later runs see a longer metadata log, as a real cluster would.

The figures are wall-clock times on this machine, printed with the settings; no figure is
an assertion (docs/BENCHMARKS.md records them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any, Callable, TypeVar

from bench.common import BenchError, confluent_kafka_modules, table_lines
from bench.common import wait_for as common_wait_for
from harness.broker import BrokerProcess, BrokerStartError
from harness.cluster import metadata, partitions, quorum
from harness.ports import free_port
from harness.raw import HOST

T = TypeVar("T")

START_TIMEOUT_S = 60.0
POLL_S = 0.005  # how often a condition is checked: the figures' resolution
MEASUREMENTS = ("a", "b", "c", "d", "e")

# The targets, printed beside the figures.
TARGETS = {
    "a": "<= 3 s median",
    "b": "<= session timeout + 1 s",
    "c": "< 1 s",
    "d": "< 200 ms median",
    "e": "< 5 s",
}


# --------------------------------------------------------------------------- the nodes


def wait_for(predicate: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Poll `predicate` every POLL_S until it is truthy (OSError: not yet)."""
    return common_wait_for(predicate, timeout_s, what, interval_s=POLL_S)


class Node(BrokerProcess):
    """One node: the issue's pinned command; without voters, a single broker as `minibroker
    serve` starts one (a combined node that is its own quorum). The process itself (launch,
    wait until it answers, stop, its log) is harness.broker's."""

    def __init__(self, node_id: int, port: int, controller_port: int, base_dir: Path,
                 voters: str = "", overrides: dict[str, str] | None = None):
        cluster = ([] if not voters else
                   ["-o", "process.roles=broker,controller",
                    "-o", f"controller.quorum.voters={voters}",
                    "-o", f"broker.rack=rack-{node_id}"])
        super().__init__(base_dir, overrides, port=port, broker_id=node_id,
                         start_timeout_s=START_TIMEOUT_S, log_path=Path(base_dir) / "node.log",
                         args=cluster)
        self.node_id = node_id
        self.controller_port = controller_port
        self.voters = voters

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Until the client listener accepts a connection (it opens once unfenced)."""
        try:
            super().wait_ready(timeout_s)
        except BrokerStartError as e:
            raise BenchError(f"node {self.node_id}: {e}") from None

    def kill(self) -> None:
        self.stop(kill=True)

    def terminate(self) -> None:
        """SIGTERM, without waiting (wait_exit waits)."""
        if self.proc is not None and self.proc.poll() is None:
            self._stopped_on_purpose = True
            self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise BenchError(f"node {self.node_id} did not exit within {timeout_s:g} s "
                             f"of SIGTERM:\n{self.tail()}") from None


class Cluster:
    def __init__(self, base_dir: Path, overrides: dict[str, str]):
        ports = [free_port() for _ in range(3)]
        controller_ports = [free_port() for _ in range(3)]
        voters = ",".join(f"{i}@{HOST}:{p}" for i, p in enumerate(controller_ports))
        self.nodes = [Node(i, ports[i], controller_ports[i], base_dir / f"node-{i}", voters,
                           overrides) for i in range(3)]

    def start(self) -> None:
        for n in self.nodes:
            n.launch()
        for n in self.nodes:
            n.wait_ready()
        self.wait_formed()

    def stop(self) -> None:
        for n in self.nodes:
            n.kill()

    def running(self) -> list[Node]:
        return [n for n in self.nodes if n.running]

    def bootstrap(self, nodes: list[Node] | None = None) -> str:
        return ",".join(n.bootstrap for n in (self.nodes if nodes is None else nodes))

    # -- one node's view -----------------------------------------------------------------

    def metadata(self, node: Node, topics: list[str] | None = None) -> Any:
        return metadata(node.port, topics)

    def partitions(self, node: Node, topic: str) -> dict[int, Any]:
        """partition index -> `node`'s Metadata entry for it (leader_id, isr_nodes, ...)."""
        return partitions(node.port, topic)

    def leaders(self, node: Node, topic: str) -> dict[int, int]:
        return {i: p.leader_id for i, p in self.partitions(node, topic).items()}

    def quorum_leader(self, node: Node) -> int:
        return quorum(node.controller_port).leader_id

    # -- conditions ----------------------------------------------------------------------

    def active_controller(self, other_than: int | None = None) -> int | None:
        seen = {self.quorum_leader(n) for n in self.running()}
        if len(seen) == 1 and (leader := seen.pop()) >= 0 and leader != other_than:
            return leader
        return None

    def wait_controller(self, other_than: int | None = None, timeout_s: float = 30) -> int:
        def agreed() -> tuple[int] | None:  # a tuple: node 0 is a controller too
            leader = self.active_controller(other_than)
            return None if leader is None else (leader,)
        return wait_for(agreed, timeout_s, "the running voters to agree on a controller")[0]

    def wait_formed(self, timeout_s: float = START_TIMEOUT_S) -> None:
        def formed() -> bool:
            ids = sorted(n.node_id for n in self.running())
            return all(sorted(b.node_id for b in self.metadata(n).brokers) == ids
                       for n in self.running())
        wait_for(formed, timeout_s, "every running node to list every running node")

    def shown_everywhere(self, topic: str, partitions: int, nodes: list[Node] | None = None,
                         without: int | None = None) -> bool:
        for n in self.running() if nodes is None else nodes:
            leaders = self.leaders(n, topic)
            if len(leaders) != partitions or any(
                    leader < 0 or leader == without for leader in leaders.values()):
                return False
        return True

    def restart(self, node: Node) -> None:
        node.kill()
        node.launch()
        node.wait_ready()
        self.wait_formed()


# --------------------------------------------------------------------------- measurements


class Bench:
    def __init__(self, cluster: Cluster, args: argparse.Namespace):
        self.cluster = cluster
        self.args = args
        self.ck, self.admin_mod = confluent_kafka_modules()

    def admin(self, nodes: list[Node] | None = None):
        return self.admin_mod.AdminClient({"bootstrap.servers": self.cluster.bootstrap(nodes),
                                           "socket.timeout.ms": 5000})

    def create(self, admin, name: str, partitions: int, rf: int, timeout_s: float = 30,
               config: dict[str, str] | None = None) -> None:
        fut = admin.create_topics([self.admin_mod.NewTopic(name, partitions, rf,
                                                           config=config or {})],
                                  operation_timeout=timeout_s, request_timeout=timeout_s)[name]
        fut.result(timeout_s + 5)

    def fresh_topic(self, partitions: int = 6, config: dict[str, str] | None = None) -> str:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        self.create(self.admin(), name, partitions, 3, config=config)
        wait_for(lambda: self.cluster.shown_everywhere(name, partitions), 30,
                 f"{name} in every broker's Metadata")
        return name

    def leading_victim(self, topic: str) -> Node:
        """A running broker that is not the active controller and leads a partition."""
        controller = self.cluster.wait_controller()
        leaders = self.cluster.leaders(self.cluster.nodes[0], topic)
        for n in self.cluster.nodes:
            if n.node_id != controller and n.node_id in leaders.values():
                return n
        raise BenchError(f"no broker but the controller leads a partition of {topic}: "
                         f"{leaders}")

    # (a)
    def controller_failover(self) -> tuple[list[float], list[float]]:
        created, elected = [], []
        for run in range(self.args.runs):
            old = self.cluster.nodes[self.cluster.wait_controller()]
            survivors = [n for n in self.cluster.nodes if n is not old]
            admin = self.admin(survivors)
            old.kill()
            started = time.monotonic()
            new = self.cluster.wait_controller(other_than=old.node_id)
            elected.append(time.monotonic() - started)
            name = f"bench-failover-{uuid.uuid4().hex[:8]}"
            deadline = started + 60
            while True:
                try:
                    self.create(admin, name, 1, 1, timeout_s=5)
                    break
                except Exception as e:  # noqa: BLE001  KafkaException, or the future's timeout
                    if time.monotonic() > deadline:
                        raise BenchError(f"CreateTopics still failing 60 s after the "
                                         f"controller was killed: {e}") from e
                    time.sleep(POLL_S)
            created.append(time.monotonic() - started)
            _progress(f"(a) run {run + 1}: controller {old.node_id} -> {new}: elected "
                      f"{elected[-1] * 1000:.0f} ms, CreateTopics {created[-1] * 1000:.0f} ms")
            self.cluster.restart(old)
        return created, elected

    # (b), (c)
    def leader_failover(self, graceful: bool) -> list[float]:
        runs = self.args.shutdown_runs if graceful else self.args.leader_runs
        times = []
        for run in range(runs):
            topic = self.fresh_topic()
            victim = self.leading_victim(topic)
            survivors = [n for n in self.cluster.nodes if n is not victim]
            if graceful:
                victim.terminate()
            else:
                victim.kill()
            started = time.monotonic()
            wait_for(partial(self.cluster.shown_everywhere, topic, 6, survivors,
                             without=victim.node_id), 60, f"{topic}'s leaderships off broker {victim.node_id}")
            times.append(time.monotonic() - started)
            status = victim.wait_exit() if graceful else -9
            _progress(f"({'c' if graceful else 'b'}) run {run + 1}: broker {victim.node_id} "
                      f"{'SIGTERM' if graceful else 'kill -9'}: leaders moved in "
                      f"{times[-1] * 1000:.0f} ms (exit status {status})")
            self.cluster.restart(victim)
        return times

    # (d)
    def propagation(self) -> list[float]:
        admin = self.admin()
        times = []
        for _ in range(self.args.propagation_runs):
            name = f"bench-prop-{uuid.uuid4().hex[:8]}"
            self.create(admin, name, 3, 3)
            answered = time.monotonic()
            wait_for(partial(self.cluster.shown_everywhere, name, 3), 30,
                     f"{name} in every broker's Metadata")
            times.append(time.monotonic() - answered)
        return times

    # (e)
    def big_create(self) -> tuple[float, float]:
        name = f"bench-big-{uuid.uuid4().hex[:8]}"
        admin = self.admin()
        started = time.monotonic()
        self.create(admin, name, self.args.partitions, 3, timeout_s=120)
        answered = time.monotonic() - started
        wait_for(lambda: self.cluster.shown_everywhere(name, self.args.partitions), 120,
                 f"{name}'s {self.args.partitions} partitions in every broker's Metadata")
        return answered, time.monotonic() - started


# --------------------------------------------------------------------------- output


def report_failure(prog: str, error: Exception, cluster: Any) -> int:
    """Say why a run failed, with the tail of every node's log; the exit status (1)."""
    print(f"{prog}: {type(error).__name__}: {error}", file=sys.stderr)
    for n in cluster.nodes:
        print(f"--- node {n.node_id} ({n.log_path}) ---\n{n.tail()}", file=sys.stderr)
    return 1


def _progress(text: str) -> None:
    print(f"[bench cluster] {text}", file=sys.stderr, flush=True)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def _row(what: str, key: str, samples: list[float]) -> dict[str, Any]:
    return {"measurement": what, "key": key, "runs": len(samples),
            "median_s": statistics.median(samples), "min_s": min(samples),
            "max_s": max(samples), "target": TARGETS.get(key, "")}


def print_table(rows: list[dict[str, Any]], settings: str) -> None:
    print(settings)
    header = ["measurement", "runs", "median", "min", "max", "target"]
    cells = [[r["measurement"], str(r["runs"]), _ms(r["median_s"]), _ms(r["min_s"]),
              _ms(r["max_s"]), r["target"]] for r in rows]
    print("\n".join(table_lines(header, cells, left=(0, 5))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minibroker bench cluster",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="(a) runs (default 10)")
    parser.add_argument("--leader-runs", type=int, default=5, help="(b) runs (default 5)")
    parser.add_argument("--shutdown-runs", type=int, default=5, help="(c) runs (default 5)")
    parser.add_argument("--propagation-runs", type=int, default=20, help="(d) runs (default 20)")
    parser.add_argument("--partitions", type=int, default=1000, help="(e) partitions")
    parser.add_argument("--election-timeout-ms", type=int, default=1000)
    parser.add_argument("--fetch-timeout-ms", type=int, default=None,
                        help="controller.quorum.fetch.timeout.ms (default: the broker's, 2000)")
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--only", default=",".join(MEASUREMENTS),
                        help="which measurements, of a,b,c,d,e (default all)")
    parser.add_argument("--out", default=None,
                        help="keep the nodes' data and logs here (default: a temp dir, removed)")
    parser.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    if only - set(MEASUREMENTS):
        parser.error(f"--only takes a,b,c,d,e, got {args.only}")

    overrides = {"controller.quorum.election.timeout.ms": str(args.election_timeout_ms),
                 "broker.session.timeout.ms": str(args.session_timeout_ms),
                 "broker.heartbeat.interval.ms": str(args.heartbeat_interval_ms)}
    if args.fetch_timeout_ms is not None:
        overrides["controller.quorum.fetch.timeout.ms"] = str(args.fetch_timeout_ms)
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    cluster = Cluster(base, overrides)
    rows: list[dict[str, Any]] = []
    try:
        started = time.monotonic()
        cluster.start()
        _progress(f"3 nodes formed in {_ms(time.monotonic() - started)} ({base})")
        bench = Bench(cluster, args)
        if "a" in only:
            created, elected = bench.controller_failover()
            rows.append(_row("(a) controller failover: kill -9 -> CreateTopics ok", "a",
                             created))
            rows.append(_row("    of which: new quorum leader agreed", "", elected))
        if "b" in only:
            rows.append(_row("(b) partition leader failover: kill -9 -> new leaders", "b",
                             bench.leader_failover(graceful=False)))
        if "c" in only:
            rows.append(_row("(c) controlled shutdown: SIGTERM -> leaders moved", "c",
                             bench.leader_failover(graceful=True)))
        if "d" in only:
            rows.append(_row("(d) CreateTopics answer -> every broker's Metadata", "d",
                             bench.propagation()))
        if "e" in only:
            answered, shown = bench.big_create()
            rows.append(_row(f"(e) create {args.partitions:,} partitions RF 3: answer", "e",
                             [answered]))
            rows.append(_row("    until every broker's Metadata shows them", "", [shown]))
    except Exception as e:  # noqa: BLE001  a failed run: say why, with the nodes' logs
        return report_failure("minibroker bench cluster", e, cluster)
    finally:
        cluster.stop()
        if not args.out:
            shutil.rmtree(base, ignore_errors=True)
    ck, _ = confluent_kafka_modules()
    print_table(rows, f"3 combined nodes on {HOST}, "
                      f"controller.quorum.election.timeout.ms={args.election_timeout_ms}, "
                      f"controller.quorum.fetch.timeout.ms={args.fetch_timeout_ms or 2000}, "
                      f"broker.session.timeout.ms={args.session_timeout_ms}, "
                      f"broker.heartbeat.interval.ms={args.heartbeat_interval_ms}, "
                      f"confluent-kafka {ck.version()} / librdkafka {ck.libversion()[0]}")
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
