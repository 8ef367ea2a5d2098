"""`minibroker bench reassignment`: issue 27's figures for moving partitions onto a new
broker under a replication throttle, on three local nodes and a fourth that joins:

    minibroker bench reassignment [--partitions 300] [--megabytes 1024] [--throttle-mb 20]
        [--rate 1000] [--before-seconds 20] [--record-size 1000] [--quick] [--json FILE]

1. Three combined nodes (bench.cluster's, the issue's pinned command); a consumer group
   joins once so that __consumer_offsets exists (50 partitions, RF 3).
2. A topic of --partitions partitions, RF 3, filled with --megabytes of --record-size values
   (acks=all, confluent-kafka), and a one-partition RF 3 topic for latency; then os.sync(),
   so that the fill's dirty pages are not written back during the measurements.
3. Before: a producer at --rate records/s, acks=all, linger.ms=5, for --before-seconds;
   each record's latency from produce() to its delivery callback: p50, p99.
4. A fourth node joins with `process.roles=broker` (the pinned serve command). Each
   partition's last replica is replaced by it: every partition gains a replica there, the
   whole topic's bytes are copied to it. `minibroker reassign-partitions --execute
   --throttle` starts the moves with --throttle-mb MB/s (KIP-73's rates on every broker, the
   throttled replicas on the topic).
5. During: the same producer runs from the --execute until the moves are done (every
   partition on its new replicas, all in sync: DescribeTopics every 200 ms); p50 and p99
   again. `--verify` then clears the throttles.
6. The move's time against size / throttle, the size being the bytes of the new node's
   segment files once done; and the under-replicated partitions at the end (should be 0).

The targets (issue 27): p99 during <= 2x before; move time within 20 % of size / throttle.
No peer runs: Tansu, the peer of the other benchmarks, has no partition reassignment.
Figures are printed, never asserted (docs/BENCHMARKS.md records them).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, Node, wait_for
from bench.common import BenchError, confluent_kafka_modules, join_group_once, progress
from bench.common import wait_for as common_wait_for
from bench.replication import send_paced
from harness.ports import free_port
from harness.raw import HOST

LINGER_MS = 5
SETTLE_TIMEOUT_S = 120.0
MOVED_POLL_S = 0.2  # the move's time is known to this much


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def _paced(bootstrap: str, topic: str, rate: int, seconds: float | None,
           stop: Any, results: Any) -> None:
    """A producer at `rate` records/s, acks=all, for `seconds` or until `stop` is set: each
    record's (send time, latency) put on `results` at the end. Run in a process of its own,
    so that the bench's polling of the moves (Python work under the GIL) does not delay the
    delivery callbacks it measures."""
    ck, _ = confluent_kafka_modules()
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                            "linger.ms": LINGER_MS})
    producer.list_topics(topic, timeout=30)
    timeline: list[tuple[float, float]] = []
    errors: list[str] = []

    def delivered(sent: float, err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            timeline.append((sent, time.perf_counter() - sent))

    if seconds is not None:
        send_paced(producer, topic, rate, seconds, delivered)
    else:
        while not stop.is_set():
            send_paced(producer, topic, rate, 1.0, delivered)
    producer.flush(60)
    results.put((timeline, errors))


class PacedProducer:
    """`_paced` in a process of its own: a fixed rate for a while, or until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int):
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self._mp = multiprocessing.get_context("spawn")
        self.timeline: list[tuple[float, float]] = []  # (sent, latency) for --json
        self.errors: list[str] = []
        self._stop = self._mp.Event()
        self._results = self._mp.Queue()
        self._process: Any = None

    def _start(self, seconds: float | None) -> None:
        self._stop.clear()
        self._process = self._mp.Process(target=_paced, args=(
            self.bootstrap, self.topic, self.rate, seconds, self._stop, self._results))
        self._process.start()

    def _collect(self) -> list[float]:
        timeline, errors = self._results.get(timeout=180)
        self._process.join(30)
        self.timeline, self.errors = timeline, self.errors + errors
        return [latency for _, latency in timeline]

    def run_for(self, seconds: float) -> list[float]:
        self._start(seconds)
        return self._collect()

    def start(self) -> None:
        self._start(None)

    def stop(self) -> list[float]:
        self._stop.set()
        return self._collect()


def _tool(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", "reassign-partitions", *args,
                           "--bootstrap-server", bootstrap],
                          capture_output=True, text=True, timeout=120)


def _fill(ck: Any, bootstrap: str, topic: str, partitions: int, total_bytes: int,
          record_size: int) -> int:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                            "batch.size": 1_000_000, "queue.buffering.max.kbytes": 262144})
    value = os.urandom(record_size)
    records = total_bytes // record_size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise BenchError(f"{len(producer)} fill records not acknowledged")
    return records


def _segment_bytes(data_dir: Path, topic: str) -> int:
    total = 0
    for d in data_dir.iterdir():
        if d.is_dir() and d.name.startswith(f"{topic}-") and d.name[len(topic) + 1:].isdigit():
            total += sum(f.stat().st_size for f in d.iterdir() if f.name.endswith(".log"))
    return total


def _moved(ck: Any, admin: Any, topic: str, target: dict[int, list[int]]) -> bool:
    """Every partition on its target replicas, all in sync: the moves are done (asked with
    one DescribeTopics, lighter than a --verify process every poll on a 2-core machine)."""
    described = admin.describe_topics(ck.TopicCollection([topic]))[topic].result(30)
    return all([r.id for r in p.replicas] == target[p.id] and len(p.isr) == len(p.replicas)
               for p in described.partitions)


def _under_replicated(admin: Any, topics: list[str]) -> int:
    described = admin.describe_topics(
        confluent_kafka_modules()[0].TopicCollection(topics))
    count = 0
    for future in described.values():
        for p in future.result(timeout=30).partitions:
            count += len(p.isr) < len(p.replicas)
    return count


def run(args: argparse.Namespace) -> dict[str, Any]:
    ck, admin_mod = confluent_kafka_modules()
    base = Path(tempfile.mkdtemp(prefix="bench-reassign-"))
    overrides = {"controller.quorum.election.timeout.ms": "1000"}
    cluster = Cluster(base, overrides)
    new_node: Node | None = None
    out: dict[str, Any] = {"partitions": args.partitions, "throttle_bytes_per_s":
                           args.throttle_mb * 1_000_000, "rate": args.rate}
    try:
        progress("three nodes")
        cluster.start()
        bootstrap = cluster.bootstrap()
        admin = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
        moving, latency = f"moving-{uuid.uuid4().hex[:6]}", f"latency-{uuid.uuid4().hex[:6]}"
        for name, count in ((moving, args.partitions), (latency, 1)):
            admin.create_topics([admin_mod.NewTopic(name, count, 3)])[name].result(60)
            wait_for(partial(cluster.shown_everywhere, name, count), 60,
                     f"{name} led everywhere")
        join_group_once(ck, bootstrap, latency, "bench-reassignment")
        progress(f"filling {moving} with {args.megabytes} MB")
        started = time.monotonic()
        out["records"] = _fill(ck, bootstrap, moving, args.partitions,
                               args.megabytes * 1_000_000, args.record_size)
        out["fill_s"] = time.monotonic() - started
        topics = [moving, latency, "__consumer_offsets"]
        wait_for(lambda: _under_replicated(admin, topics) == 0 or None, SETTLE_TIMEOUT_S,
                 "every ISR full before the move")
        # the fill leaves gigabytes of dirty pages whose writeback stalls every write (the
        # brokers' appends too) for seconds: written out before anything is measured
        progress("sync")
        os.sync()
        producer = PacedProducer(bootstrap, latency, args.rate)
        progress(f"latency before, {args.before_seconds} s")
        before = producer.run_for(args.before_seconds)
        out["timeline_before"] = producer.timeline

        progress("a fourth node joins (process.roles=broker)")
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in cluster.nodes)
        new_node = Node(3, free_port(), 0, base / "node-3", overrides={
            **overrides, "process.roles": "broker", "controller.quorum.voters": voters,
            "broker.rack": "rack-3"})
        new_node.launch()
        new_node.wait_ready()
        wait_for(lambda: 3 in {b.node_id for b in cluster.metadata(cluster.nodes[0]).brokers}
                 or None, 60, "node 3 registered")
        described = admin.describe_topics(ck.TopicCollection([moving]))[moving].result(30)
        plan: dict[str, Any] = {"version": 1, "partitions": [
            {"topic": moving, "partition": p.id, "replicas": [r.id for r in p.replicas[:-1]] + [3]}
            for p in described.partitions]}
        plan_file = base / "plan.json"
        plan_file.write_text(json.dumps(plan))
        progress(f"moving {args.partitions} partitions onto node 3 at {args.throttle_mb} MB/s")
        producer.start()
        started = time.monotonic()
        executed = _tool(bootstrap, "--execute", "--reassignment-json-file", str(plan_file),
                         "--throttle", str(args.throttle_mb * 1_000_000))
        if executed.returncode != 0:
            raise BenchError(f"--execute: {executed.stderr.strip()}")
        target = {e["partition"]: e["replicas"] for e in plan["partitions"]}
        common_wait_for(lambda: _moved(ck, admin, moving, target), args.timeout_s,
                        "the moves to complete", interval_s=MOVED_POLL_S)
        moved_s = time.monotonic() - started
        during = producer.stop()
        out["timeline"] = producer.timeline
        verified = _tool(bootstrap, "--verify", "--reassignment-json-file", str(plan_file))
        if verified.returncode != 0:  # it clears the throttles too
            raise BenchError(f"--verify after the moves: {verified.stderr.strip()}")
        moved_bytes = _segment_bytes(new_node.data_dir, moving)
        out.update({
            "moved_bytes": moved_bytes, "move_s": moved_s,
            "expected_s": moved_bytes / (args.throttle_mb * 1_000_000),
            "p50_before_ms": _percentile(before, 0.5) * 1000,
            "p99_before_ms": _percentile(before, 0.99) * 1000,
            "p50_during_ms": _percentile(during, 0.5) * 1000,
            "p99_during_ms": _percentile(during, 0.99) * 1000,
            "records_during": len(during), "errors": len(producer.errors),
        })
        out["under_replicated_after"] = wait_for(
            lambda: (n := _under_replicated(admin, topics)) == 0 and [n] or None,
            SETTLE_TIMEOUT_S, "no under-replicated partition after the move")[0]
        out["load_average"] = os.getloadavg()
        return out
    finally:
        if new_node is not None:
            new_node.kill()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def report(out: dict[str, Any]) -> list[str]:
    ratio_p99 = out["p99_during_ms"] / out["p99_before_ms"]
    ratio_time = out["move_s"] / out["expected_s"]
    return [
        f"reassignment of {out['partitions']} partitions onto a new broker, throttle "
        f"{out['throttle_bytes_per_s'] / 1e6:g} MB/s, __consumer_offsets at RF 3",
        f"  moved {out['moved_bytes'] / 1e6:.0f} MB in {out['move_s']:.1f} s; size / throttle "
        f"{out['expected_s']:.1f} s; ratio {ratio_time:.2f} (target 0.80-1.20: "
        f"{'met' if 0.8 <= ratio_time <= 1.2 else 'NOT met'})",
        f"  acks=all at {out['rate']} rec/s: p50 {out['p50_before_ms']:.1f} ms -> "
        f"{out['p50_during_ms']:.1f} ms; p99 {out['p99_before_ms']:.1f} ms -> "
        f"{out['p99_during_ms']:.1f} ms; ratio {ratio_p99:.2f} (target <= 2: "
        f"{'met' if ratio_p99 <= 2 else 'NOT met'}); {out['errors']} delivery errors",
        f"  under-replicated partitions after: {out['under_replicated_after']}; "
        f"fill {out['records']} records in {out['fill_s']:.0f} s; load average "
        f"{' '.join(f'{x:.1f}' for x in out['load_average'])}",
    ]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minibroker bench reassignment")
    p.add_argument("--partitions", type=int, default=300)
    p.add_argument("--megabytes", type=int, default=1024, help="the topic's size, MB")
    p.add_argument("--throttle-mb", type=int, default=20, help="MB/s")
    p.add_argument("--rate", type=int, default=1000, help="latency producer, records/s")
    p.add_argument("--before-seconds", type=float, default=20.0)
    p.add_argument("--record-size", type=int, default=1000)
    p.add_argument("--timeout-s", type=float, default=900.0)
    p.add_argument("--quick", action="store_true",
                   help="a developer's run: 60 partitions, 100 MB at 10 MB/s, 5 s before")
    p.add_argument("--json", metavar="FILE")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.partitions, args.megabytes, args.throttle_mb, args.before_seconds = 60, 100, 10, 5
    try:
        out = run(args)
    except BenchError as e:
        print(f"bench reassignment: {e}", file=sys.stderr)
        return 1
    print("\n".join(report(out)))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
