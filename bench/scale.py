"""`minibroker bench scale`: issue 23's figures for a cluster at real partition counts, on
three local nodes (bench.cluster's, the issue's pinned command), one broker of ours and the
peer (Tansu, one node, memory storage), each in turn, in one run:

    minibroker bench scale [--partitions 3000] [--metadata-records 100000] [--rate 1000]
        [--latency-seconds 10] [--idle-seconds 10] [--records 500000] [--quick]
        [--only three,single,peer] [--out DIR] [--json FILE]

Per setup (RF 3 and min.insync.replicas=2 on three nodes; RF 1 on one broker and the peer):

1. throughput without idle partitions: bench.throughput's producer (what `minibroker bench
   produce` runs: confluent-kafka, 100 B values, linger.ms=5) writes --records records with
   acks=all to a fresh 6-partition topic.
2. creating --partitions partitions, one CreateTopics (confluent-kafka's AdminClient): the
   seconds until its answer, until every node's Metadata shows each partition with a
   leader (asked every 100 ms), and the worst round trip of an ApiVersions request sent on
   its own connection to each node every 10 ms meanwhile (from the CreateTopics call until
   one second after every node shows them): a stalled event loop shows there.
3. a consumer group joins once, so `__consumer_offsets` exists (50 partitions, RF 3 on three
   nodes); once every ISR is full (or 60 s have passed: said in a note), each node's CPU over
   --idle-seconds (utime+stime from /proc/PID/stat, in % of one core) and its RSS
   (/proc/PID/status VmRSS).
4. latency beside the idle partitions: a fresh 1-partition topic, --rate records/s for
   --latency-seconds, acks=all, linger.ms=5; each record from its produce() call to its
   delivery callback (served at least every millisecond): p50, p99, and how many of the
   records were acknowledged (a record not acknowledged within 30 s counts as lost here).
5. throughput beside the idle partitions: (1) again on a new 6-partition topic; the ratio
   of the two is printed (the issue's target: >= 80 %).
6. restart: IncrementalAlterConfigs on 100 one-partition topics of its own (ten configs of
   each per request flipped between two values, each change a ConfigRecord) until they
   alone have written --metadata-records records (the figure printed: the log holds the
   topics' and partitions' own records besides; its end offset, one per committed batch,
   is printed in a note); then kill -9 of one node (on three nodes, one that is not the
   active controller) and the seconds from its launch until it answers Metadata with every
   idle partition led ("serving again"). The peer is skipped: its memory storage keeps
   nothing across a restart.

--quick runs a developer's version: 300 partitions, 5,000 metadata records, 3 s of idle and
of latency, 20,000 records per throughput run. Each figure is printed beside its target with
whether it was met; a cell that fails prints why and the run goes on. Nothing is asserted
(docs/BENCHMARKS.md records the figures; tests/cluster/test_scale.py checks correctness).
The machine's load average is printed with the figures: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

from bench.cluster import Cluster, Node, wait_for
from bench.common import (BenchError, confluent_kafka_modules, join_group_once,
                          process_tree_cpu_seconds, table_lines)
from bench.replication import produce, running_peer, send_paced, tansu_binary
from harness.ports import free_port
from harness.cluster import partitions, quorum
from harness.raw import HOST, RawConnection, call
from protocol.messages import (ALL_APIS, API_VERSIONS, INCREMENTAL_ALTER_CONFIGS)

LINGER_MS = 5
PING_INTERVAL_S = 0.010
PING_TIMEOUT_S = 300.0  # a stalled loop's round trip is a figure, not a failure
SETTLE_TIMEOUT_S = 60.0
CREATE_TIMEOUT_S = 120.0
VISIBLE_TIMEOUT_S = 300.0
VISIBLE_POLL_S = 0.1
LATENCY_TIMEOUT_MS = 30_000
TOPIC_RESOURCE = 2
CONFIG_TOPICS = 100  # the restart cell alters ten configs of each: 1,000 records a request

# (key, target text, meets) per figure, in the order printed
TARGETS: dict[str, tuple[str, Callable[[float], bool] | None]] = {
    "create: answer (s)": ("<= 5 s", lambda v: v <= 5),
    "create: visible on every node (s)": ("<= 10 s", lambda v: v <= 10),
    "create: worst ApiVersions round trip meanwhile (ms)": ("<= 100 ms", lambda v: v <= 100),
    "idle: CPU per node, the busiest (% of a core)": ("<= 3 %", lambda v: v <= 3),
    "idle: RSS per node, the largest (MB)": ("<= 300 MB", lambda v: v <= 300),
    "acks=all 1 partition at RATE rec/s: p50 (ms)": ("<= 5 ms", lambda v: v <= 5),
    "acks=all 1 partition at RATE rec/s: p99 (ms)": ("<= 20 ms", lambda v: v <= 20),
    "acks=all 1 partition at RATE rec/s: acknowledged (%)": ("100 %", lambda v: v >= 100),
    "acks=all 6 partitions, no idle partitions (rec/s)": ("", None),
    "acks=all 6 partitions, beside the idle ones (rec/s)": ("", None),
    "throughput beside idle / without (%)": (">= 80 %", lambda v: v >= 80),
    "metadata records written before the restart": ("", None),
    "restart: launch -> serving again (s)": ("<= 10 s", lambda v: v <= 10),
}
# the topic configs the restart cell's IncrementalAlterConfigs flip between v and v - 1
_CONFIG_FLIPS = [("retention.ms", 604800000), ("segment.ms", 604800000),
                 ("max.message.bytes", 1048588), ("flush.messages", 2**63 - 1),
                 ("delete.retention.ms", 86400000), ("file.delete.delay.ms", 60000),
                 ("index.interval.bytes", 4096), ("retention.bytes", 1 << 40),
                 ("segment.bytes", 1 << 30), ("segment.index.bytes", 10485760)]


def _progress(text: str) -> None:
    print(f"[bench scale] {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- figures


@dataclass
class Results:
    """figure -> setup -> value (a float, or the reason the cell gave none)."""

    setups: list[str]
    rate: int
    values: dict[str, dict[str, float | str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def set(self, figure: str, setup: str, value: float | str) -> None:
        self.values.setdefault(figure, {})[setup] = value

    def fail(self, figures: list[str], setup: str, why: str) -> None:
        for figure in figures:
            self.values.setdefault(figure, {}).setdefault(setup, why)

    def _cell(self, figure: str, setup: str) -> str:
        value = self.values.get(figure, {}).get(setup)
        if value is None:
            return "-"
        if isinstance(value, str):
            return "n/a"
        text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.2f}"
        meets = TARGETS[figure][1]
        return text if meets is None else f"{text} {'ok' if meets(value) else 'MISSED'}"

    def lines(self) -> list[str]:
        header = ["figure", "target", *self.setups]
        rows = [[figure.replace("RATE", f"{self.rate:,}"), target,
                 *(self._cell(figure, s) for s in self.setups)]
                for figure, (target, _) in TARGETS.items()]
        lines = table_lines(header, rows, left=(0, 1))
        for figure, by_setup in self.values.items():
            for setup, value in by_setup.items():
                if isinstance(value, str):
                    lines.append(f"n/a: {setup}, {figure.replace('RATE', str(self.rate))}: "
                                 f"{value}")
        return lines

    def as_json(self) -> list[dict[str, Any]]:
        return [{"figure": f.replace("RATE", str(self.rate)), "target": TARGETS[f][0],
                 **self.values.get(f, {})} for f in TARGETS]


# --------------------------------------------------------------------------- probes


class Pinger(threading.Thread):
    """ApiVersions every PING_INTERVAL_S on one connection to 127.0.0.1:port; each round
    trip's seconds. A refused or dropped connection is a failure, counted and retried."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.round_trips: list[float] = []
        self.failures = 0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self._session()
            except OSError:
                self.failures += 1
                self._halt.wait(PING_INTERVAL_S)

    def _session(self) -> None:
        with RawConnection(self.port, HOST, client_id="bench-scale-ping",
                           timeout_s=PING_TIMEOUT_S, apis=ALL_APIS) as connection:
            due = time.perf_counter()
            while not self._halt.is_set():
                sent = time.perf_counter()
                connection.call(API_VERSIONS, 3, {
                    "client_software_name": "bench-scale", "client_software_version": "1"})
                self.round_trips.append(time.perf_counter() - sent)
                due += PING_INTERVAL_S
                self._halt.wait(max(0.0, due - time.perf_counter()))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise BenchError(f"no VmRSS in /proc/{pid}/status")


def led_partitions(port: int, topic: str, full_isr: bool = False) -> int:
    """How many partitions of `topic` the node's Metadata shows with a leader (and, with
    `full_isr`, with every replica in the ISR)."""
    return sum(1 for p in partitions(port, topic, timeout_s=30).values()
               if p.leader_id >= 0 and (
                   not full_isr or sorted(p.isr_nodes) == sorted(p.replica_nodes)))


def metadata_log_end(port: int) -> int:
    return quorum(port).high_watermark


def paced_latencies(bootstrap: str, topic: str, rate: int, seconds: float
                    ) -> tuple[list[float], int]:
    """bench.replication's paced producer, bounded: (the acknowledged records' seconds from
    produce() to their delivery callback, how many records were sent). A record not
    acknowledged within LATENCY_TIMEOUT_MS is left out rather than failing the run.

    One record is produced and acknowledged before the clock starts, beside the connections
    and metadata: a follower takes a new partition into its fetch session only when its
    fetch in flight returns (replica.fetch.wait.max.ms, 500 ms, as in Kafka), so on a fresh
    topic the first records wait up to that long once, and they alone made the p99 (every
    record slower than 50 ms fell in the first 0.6 s of the 10 s)."""
    ck, _ = confluent_kafka_modules()
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                            "linger.ms": LINGER_MS, "message.timeout.ms": LATENCY_TIMEOUT_MS})
    producer.list_topics(topic, timeout=30)
    warm: list[Any] = []
    producer.produce(topic, b"warm-up", on_delivery=lambda err, _msg: warm.append(err))
    producer.flush(LATENCY_TIMEOUT_MS / 1000 + 5)
    if warm != [None]:
        raise BenchError(f"the warm-up record was not acknowledged: {warm}")
    latencies: list[float] = []

    def delivered(sent: float, err: Any, _msg: Any) -> None:
        if err is None:
            latencies.append(time.perf_counter() - sent)

    total = send_paced(producer, topic, rate, seconds, delivered)
    producer.flush(LATENCY_TIMEOUT_MS / 1000 + 5)
    return latencies, total


# --------------------------------------------------------------------------- one setup


@dataclass
class Setup:
    """What the cells need of one setup: its name, nodes (port, pid) and replication."""

    name: str
    rf: int
    topic_config: dict[str, str]
    ports: Callable[[], list[int]]
    pids: Callable[[], list[int]]
    restart: Callable[[], int] | None  # kill -9 and launch one node: its client port
    restart_skipped: str = ""

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{p}" for p in self.ports())


class Cells:
    def __init__(self, setup: Setup, args: argparse.Namespace, results: Results) -> None:
        self.s = setup
        self.args = args
        self.results = results
        self.ck, self.admin_mod = confluent_kafka_modules()
        self.idle_topic = f"scale-idle-{uuid.uuid4().hex[:6]}"

    def admin(self, timeout_s: float = 30) -> Any:
        return self.admin_mod.AdminClient({"bootstrap.servers": self.s.bootstrap,
                                           "socket.timeout.ms": int(timeout_s * 1000)})

    def create(self, name: str, partitions: int, timeout_s: float = 60) -> None:
        new = self.admin_mod.NewTopic(name, partitions, self.s.rf, config=self.s.topic_config)
        admin = self.admin(timeout_s)  # held until the answer: a destroyed client fails it
        admin.create_topics([new], operation_timeout=timeout_s,
                            request_timeout=timeout_s)[name].result(timeout_s + 5)

    def fresh(self, partitions: int) -> str:
        name = f"scale-{uuid.uuid4().hex[:8]}"
        self.create(name, partitions)
        wait_for(lambda: all(led_partitions(p, name, full_isr=True) == partitions
                             for p in self.s.ports()), 60, f"{name} led, ISRs full")
        return name

    def run(self, figures: list[str], cell: Callable[[], None]) -> bool:
        try:
            cell()
            return True
        except Exception as e:  # noqa: BLE001  one failed cell: say why, go on
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
            _progress(f"{self.s.name}: {figures[0]}: failed ({why})")
            self.results.fail(figures, self.s.name, why)
            return False

    def throughput(self, figure: str) -> None:
        topic = self.fresh(6)
        result = produce(self.s.bootstrap, topic, 6, "all", self.args.records, self.s.pids())
        self.results.set(figure, self.s.name, result["rec_per_s"])
        _progress(f"{self.s.name}: {figure}: {result['rec_per_s']:,.0f}")

    def create_partitions(self) -> None:
        pingers = [Pinger(p) for p in self.s.ports()]
        for p in pingers:
            p.start()
        try:
            started = time.monotonic()
            try:
                self.create(self.idle_topic, self.args.partitions, timeout_s=CREATE_TIMEOUT_S)
                answered: float | str = time.monotonic() - started
            except self.ck.KafkaException as e:  # the topic may be made all the same
                answered = f"no answer ({e.args[0].str() if e.args else e})"
            visible = self.wait_visible(started)
            time.sleep(1.0)  # the tail of the work: logs still being made on a follower
        finally:
            for p in pingers:
                p.stop()
        worst = max((max(p.round_trips, default=0.0) for p in pingers), default=0.0) * 1000
        failures = sum(p.failures for p in pingers)
        self.results.set("create: answer (s)", self.s.name, answered)
        self.results.set("create: visible on every node (s)", self.s.name, visible)
        self.results.set("create: worst ApiVersions round trip meanwhile (ms)", self.s.name,
                         worst)
        if failures:
            self.results.notes.append(f"{self.s.name}: {failures} ApiVersions connections "
                                      f"failed while creating")
        _progress(f"{self.s.name}: {self.args.partitions} partitions: answer "
                  f"{answered if isinstance(answered, str) else round(answered, 2)} s, "
                  f"visible {visible:.2f} s, worst ApiVersions {worst:.1f} ms "
                  f"({sum(len(p.round_trips) for p in pingers)} sent)")

    def wait_visible(self, started: float) -> float:
        """Seconds from `started` until every node's Metadata shows every idle partition
        led. Asked every VISIBLE_POLL_S, not bench.cluster's 5 ms: a Metadata answer naming
        thousands of partitions takes the broker tens of ms to build, and asking without a
        pause would itself hold up the ApiVersions round trips measured meanwhile."""
        pending = list(self.s.ports())
        deadline = started + VISIBLE_TIMEOUT_S
        while pending:
            pending = [p for p in pending if led_partitions(p, self.idle_topic)
                       != self.args.partitions]
            if not pending:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"{self.args.partitions} partitions not led on every node "
                                 f"after {VISIBLE_TIMEOUT_S:g} s")
            time.sleep(VISIBLE_POLL_S)
        return time.monotonic() - started

    def offsets_topic(self) -> None:
        """A consumer group joins once: the coordinator creates __consumer_offsets."""
        join_group_once(self.ck, self.s.bootstrap, self.fresh(1),
                        f"scale-{uuid.uuid4().hex[:6]}")

    def idle(self) -> None:
        """Every ISR full (or SETTLE_TIMEOUT_S), then CPU and RSS per node."""
        try:
            wait_for(lambda: all(led_partitions(p, self.idle_topic, full_isr=True)
                                 == self.args.partitions for p in self.s.ports()),
                     SETTLE_TIMEOUT_S, "every ISR full")
        except BenchError:
            full = [led_partitions(p, self.idle_topic, full_isr=True) for p in self.s.ports()]
            self.results.notes.append(f"{self.s.name}: ISRs still not full after "
                                      f"{SETTLE_TIMEOUT_S:g} s (full per node: {full}); idle "
                                      f"figures measured anyway")
        pids = self.s.pids()
        cpu0 = {pid: process_tree_cpu_seconds(pid) for pid in pids}
        t0 = time.monotonic()
        time.sleep(self.args.idle_seconds)
        elapsed = time.monotonic() - t0
        cpu = {pid: (process_tree_cpu_seconds(pid) - cpu0[pid]) / elapsed * 100
               for pid in pids}
        rss = {pid: rss_mb(pid) for pid in pids}
        self.results.set("idle: CPU per node, the busiest (% of a core)", self.s.name,
                         max(cpu.values()))
        self.results.set("idle: RSS per node, the largest (MB)", self.s.name, max(rss.values()))
        _progress(f"{self.s.name}: idle CPU % per node {[round(c, 1) for c in cpu.values()]}, "
                  f"RSS MB {[round(r) for r in rss.values()]}")
        if len(pids) > 1:
            self.results.notes.append(
                f"{self.s.name}: idle CPU % per node {[round(c, 1) for c in cpu.values()]}, "
                f"RSS MB per node {[round(r) for r in rss.values()]}")

    def latency(self) -> None:
        topic = self.fresh(1)
        latencies, sent = paced_latencies(self.s.bootstrap, topic, self.args.rate,
                                          self.args.latency_seconds)
        prefix = "acks=all 1 partition at RATE rec/s:"
        self.results.set(f"{prefix} acknowledged (%)", self.s.name, len(latencies) / sent * 100)
        if not latencies:
            raise BenchError(f"none of {sent} records acknowledged")
        latencies.sort()
        p50, p99 = (latencies[int(q * (len(latencies) - 1))] * 1000 for q in (0.50, 0.99))
        self.results.set(f"{prefix} p50 (ms)", self.s.name, p50)
        self.results.set(f"{prefix} p99 (ms)", self.s.name, p99)
        _progress(f"{self.s.name}: latency p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
                  f"{len(latencies):,} of {sent:,} acknowledged")

    def metadata_records(self) -> tuple[int, int]:
        """IncrementalAlterConfigs on topics of its own until they alone have written
        --metadata-records records (the log holds the topics' own besides); the records
        written, and the metadata log's end offset (one offset per committed batch)."""
        prefix = f"scale-configs-{uuid.uuid4().hex[:6]}"
        topics = [f"{prefix}-{i}" for i in range(CONFIG_TOPICS)]
        admin = self.admin(60)
        for future in admin.create_topics(
                [self.admin_mod.NewTopic(t, 1, self.s.rf) for t in topics],
                operation_timeout=60, request_timeout=60).values():
            future.result(65)
        port = self.s.ports()[0]
        written = flip = 0
        while written < self.args.metadata_records:
            flip ^= 1
            configs = [{"name": k, "config_operation": 0, "value": str(v - flip)}
                       for k, v in _CONFIG_FLIPS]
            body = call(port, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
                {"resource_type": TOPIC_RESOURCE, "resource_name": t, "configs": configs}
                for t in topics], "validate_only": False}, timeout_s=60)
            for r in body.responses:
                if r.error_code:
                    raise BenchError(f"IncrementalAlterConfigs answered error {r.error_code} "
                                     f"({r.error_message}) after {written:,} records")
            written += len(topics) * len(configs)
        return written, metadata_log_end(port)

    def restart_cell(self) -> None:
        assert self.s.restart is not None
        records, end = self.metadata_records()
        self.results.set("metadata records written before the restart", self.s.name, records)
        self.results.notes.append(f"{self.s.name}: the metadata log ended at offset {end:,} "
                                  f"(one offset per committed batch) before the restart")
        _progress(f"{self.s.name}: {records:,} metadata records written by the bench, log end "
                  f"offset {end:,}; restarting a node")
        started = time.monotonic()
        port = self.s.restart()
        wait_for(lambda: led_partitions(port, self.idle_topic) == self.args.partitions, 300,
                 "the restarted node serving every idle partition")
        took = time.monotonic() - started
        self.results.set("restart: launch -> serving again (s)", self.s.name, took)
        _progress(f"{self.s.name}: restart -> serving again in {took:.2f} s")

    def all(self) -> None:
        r = self.results
        self.run(["acks=all 6 partitions, no idle partitions (rec/s)"],
                 partial(self.throughput, "acks=all 6 partitions, no idle partitions (rec/s)"))
        created = self.run([f for f in TARGETS if f.startswith("create")] +
                           [f for f in TARGETS if not f.startswith("acks=all 6 partitions, no")],
                           self.create_partitions)
        if not created:
            return
        self.run(["idle: CPU per node, the busiest (% of a core)",
                  "idle: RSS per node, the largest (MB)"], self.offsets_topic)
        self.run(["idle: CPU per node, the busiest (% of a core)",
                  "idle: RSS per node, the largest (MB)"], self.idle)
        self.run([f for f in TARGETS if f.startswith("acks=all 1 partition")], self.latency)
        with_idle = "acks=all 6 partitions, beside the idle ones (rec/s)"
        if self.run([with_idle, "throughput beside idle / without (%)"],
                    partial(self.throughput, with_idle)):
            before = r.values.get("acks=all 6 partitions, no idle partitions (rec/s)", {}).get(
                self.s.name)
            after = r.values[with_idle][self.s.name]
            if isinstance(before, float) and isinstance(after, float):
                r.set("throughput beside idle / without (%)", self.s.name, after / before * 100)
        restart_figures = ["metadata records written before the restart",
                           "restart: launch -> serving again (s)"]
        if self.s.restart is None:
            r.fail(restart_figures, self.s.name, self.s.restart_skipped)
        else:
            self.run(restart_figures, self.restart_cell)


# --------------------------------------------------------------------------- setups


def three_nodes(base: Path, args: argparse.Namespace, results: Results) -> None:
    cluster = Cluster(base / "three", {})
    try:
        cluster.start()
        _progress(f"three nodes formed ({base / 'three'})")

        def restart() -> int:
            controller = cluster.wait_controller()
            victim = next(n for n in cluster.nodes if n.node_id != controller)
            victim.kill()
            victim.launch()
            return victim.port
        setup = Setup("three nodes", 3, {"min.insync.replicas": "2"},
                      lambda: [n.port for n in cluster.nodes],
                      lambda: [n.proc.pid for n in cluster.nodes if n.proc is not None],
                      restart)
        Cells(setup, args, results).all()
    finally:
        cluster.stop()


def single_broker(base: Path, args: argparse.Namespace, results: Results) -> None:
    node = Node(0, free_port(), 0, base / "single")
    node.launch()
    try:
        node.wait_ready()

        def restart() -> int:
            node.kill()
            node.launch()
            return node.port
        setup = Setup("one broker", 1, {}, lambda: [node.port],
                      lambda: [node.proc.pid] if node.proc is not None else [], restart)
        Cells(setup, args, results).all()
    finally:
        node.kill()


def peer(base: Path, args: argparse.Namespace, results: Results) -> None:
    binary = tansu_binary()
    if isinstance(binary, str):
        results.fail(list(TARGETS), "peer", f"skipped: {binary}")
        return
    with running_peer(base, binary) as (port, pid):
        setup = Setup("peer", 1, {}, lambda: [port], lambda: [pid], None,
                      "skipped: the peer's memory storage keeps nothing across a restart")
        Cells(setup, args, results).all()


SETUPS = {"three": ("three nodes", three_nodes), "single": ("one broker", single_broker),
          "peer": ("peer", peer)}


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibroker bench scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=None,
                        help="idle partitions to create (default 3000; --quick: 300)")
    parser.add_argument("--metadata-records", type=int, default=None,
                        help="metadata log records before the restart (default 100000; "
                             "--quick: 5000)")
    parser.add_argument("--rate", type=int, default=1000, help="records/s of the latency run")
    parser.add_argument("--latency-seconds", type=float, default=None,
                        help="default 10 (--quick: 3)")
    parser.add_argument("--idle-seconds", type=float, default=None,
                        help="the idle CPU window (default 10; --quick: 3)")
    parser.add_argument("--records", type=int, default=None,
                        help="records per throughput run (default 500000; --quick: 20000)")
    parser.add_argument("--quick", action="store_true", help="a developer's small version")
    parser.add_argument("--only", default="three,single,peer",
                        help="which setups, comma-separated: three, single, peer")
    parser.add_argument("--out", default=None,
                        help="keep the nodes' data and logs here (default: a temp dir, removed)")
    parser.add_argument("--json", default=None, help="also write the figures as JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    quick = args.quick
    for name, full, small in (("partitions", 3000, 300), ("metadata_records", 100_000, 5000),
                              ("latency_seconds", 10.0, 3.0), ("idle_seconds", 10.0, 3.0),
                              ("records", 500_000, 20_000)):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    if not only or any(w not in SETUPS for w in only):
        parser.error(f"--only takes some of {', '.join(SETUPS)}")
    if min(args.partitions, args.rate, args.records) < 1 or args.latency_seconds <= 0 \
            or args.idle_seconds <= 0:
        parser.error("--partitions, --rate, --records and the seconds must be > 0")
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-scale-"))
    results = Results([SETUPS[w][0] for w in only], args.rate)
    load_before = os.getloadavg()
    started = time.monotonic()
    try:
        for w in only:
            _progress(f"{SETUPS[w][0]}: starting")
            SETUPS[w][1](base, args, results)
    finally:
        if not args.out:
            shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()
    ck, _ = confluent_kafka_modules()
    version = ck.version()
    print(f"{args.partitions:,} idle partitions (RF 3 and min.insync.replicas=2 on three "
          f"nodes, RF 1 alone) plus __consumer_offsets; {args.metadata_records:,} metadata "
          f"records before the restart; {args.records:,} records x 100 B per throughput run, "
          f"linger.ms={LINGER_MS}; on {HOST} ({os.cpu_count()} cores), confluent-kafka "
          f"{version[0] if isinstance(version, tuple) else version} / librdkafka "
          f"{ck.libversion()[0]}; {time.monotonic() - started:.0f} s in all")
    print("\n".join(results.lines()))
    for note in results.notes:
        print(note)
    print(f"load average (1, 5, 15 min) at the start {', '.join(f'{x:.2f}' for x in load_before)}"
          f"; at the end {', '.join(f'{x:.2f}' for x in load_after)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"figures": results.as_json(),
                                               "notes": results.notes,
                                               "load": [load_before, load_after]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
