"""`minibroker bench transactions`: issue 25's performance figures, on one broker of ours
and on a local three-node cluster (bench.cluster's, the issue's pinned command, with
__consumer_offsets and __transaction_state at RF 3), in one run:

    minibroker bench transactions [--records 200000] [--txn-records 1000]
        [--commit-samples 300] [--producers 3] [--runs 3] [--no-cluster] [--json FILE]

1. produce: librdkafka (confluent-kafka, 100 B values, linger.ms=5) writes --records
   records to a fresh topic of 3 partitions (RF 3 and min.insync.replicas=2 on the
   cluster), first as an idempotent acks=all producer, then as a transactional one that
   commits every --txn-records records. The issue asks the transactional rate to be at
   least 70% of the idempotent one on one broker, 50% on the cluster. Then the same with
   --producers producers at once (each its share of the records, the transactional ones
   each with its own transactional.id, as an application's instances or Kafka Streams'
   threads run): one transactional producer waits out its transaction's round trips with
   the machine idle, several fill that time.
2. commit latency, EndTxn to every marker written: --commit-samples small transactions
   (one record in each partition), one after another; for each, the time from the
   coordinator's PrepareCommit record to its CompleteCommit record, which it writes once
   every partition has its marker (both are `txn_state` events of the coordinator's event
   log, stamped in milliseconds), p50 and p99 (targets: p99 < 25 ms on one broker, < 50 ms
   on the cluster). Beside it, what the producer waits in commit_transaction() (EndTxn is
   answered once PrepareCommit is replicated, before the markers, as in Kafka).
3. consume: the topic of (1)'s transactional run read whole by librdkafka, with
   isolation.level read_committed and read_uncommitted (target: >= 90%), each clock
   started once the consumer has the topic's metadata and each leader's connection.

Every topic measured holds one record in each partition, written and acknowledged before
it is used (Setup.topic()): on the cluster, a partition made moments before would make
the first records measured wait for a follower to start fetching it.

Every figure is the median of --runs runs with their min and max; the targets are printed
beside them with whether this run met them; nothing asserts a figure (docs/BENCHMARKS.md
records them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.cluster import Bench, Cluster, Node, report_failure, wait_for
from bench.common import (BenchError, confluent_kafka_modules, join_group_once, progress,
                          table_lines, warm_up_consumer, warm_up_producer)
from broker.events import read_events
from harness.ports import free_port

PARTITIONS = 3
WARM_RECORDS = PARTITIONS  # Setup.topic()'s, in every topic
VALUE = b"x" * 100
LINGER_MS = 5
MIN_ISR = "2"
TARGETS = {  # (figure, where) -> (text, test)
    ("txn/idempotent", "one broker"): (">= 70%", lambda v: v >= 70),
    ("txn/idempotent", "three nodes"): (">= 50%", lambda v: v >= 50),
    ("commit p99", "one broker"): ("< 25 ms", lambda v: v < 25),
    ("commit p99", "three nodes"): ("< 50 ms", lambda v: v < 50),
    ("read_committed/uncommitted", "one broker"): (">= 90%", lambda v: v >= 90),
    ("read_committed/uncommitted", "three nodes"): (">= 90%", lambda v: v >= 90),
}


class Setup:
    """One broker or the cluster: where to connect, how to make a topic, the event logs."""

    def __init__(self, where: str, bootstrap: str, data_dirs: list[Path], rf: int,
                 bench: Bench | None):
        self.where, self.bootstrap, self.data_dirs, self.rf = where, bootstrap, data_dirs, rf
        self.ck, self.admin_mod = confluent_kafka_modules()
        self.bench = bench
        self.warm_topic = ""  # internal_topics() makes it

    def topic(self) -> str:
        """A fresh topic of PARTITIONS partitions holding one acknowledged record in each
        (WARM_RECORDS): on the cluster, the first acks=all records to a partition made less
        than about 500 ms before wait for a follower's parked fetch to return before its
        next one names the partition (440-490 ms measured), a start-up that no clock should
        count, and a topic made just before its run (--producers) would."""
        name = f"bench-txn-{uuid.uuid4().hex[:8]}"
        config = {"min.insync.replicas": MIN_ISR} if self.rf > 1 else {}
        if self.bench is not None:
            name = self.bench.fresh_topic(PARTITIONS, config)
        else:
            admin = self.admin_mod.AdminClient({"bootstrap.servers": self.bootstrap})
            admin.create_topics([self.admin_mod.NewTopic(name, PARTITIONS, 1)])[name].result(30)
        plain = self.ck.Producer({"bootstrap.servers": self.bootstrap, "acks": "all"})
        warm_up_producer(plain, name, PARTITIONS, VALUE, 60)
        return name

    def producer(self, **extra: Any):
        return self.ck.Producer({"bootstrap.servers": self.bootstrap, "linger.ms": LINGER_MS,
                                 "acks": "all", "enable.idempotence": True, **extra})

    def internal_topics(self) -> None:
        """__consumer_offsets (a group joins) and __transaction_state (a transactional
        producer starts), before any clock: every figure is taken beside both."""
        topic = self.warm_topic = self.topic()
        join_group_once(self.ck, self.bootstrap, topic, f"bench-{uuid.uuid4().hex[:6]}")
        producer = self.producer(**{"transactional.id": f"warm-{uuid.uuid4().hex[:6]}"})
        producer.init_transactions(120)
        producer.begin_transaction()
        producer.produce(topic, VALUE, partition=0)
        producer.commit_transaction(60)


def produce_rate(setup: Setup, topic: str, records: int, txn_records: int | None,
                 producers: int = 1) -> float:
    """Records a second written by `producers` producers at once (threads: librdkafka
    releases the GIL while it waits), each writing its share of `records` to every
    partition; transactional ones commit every `txn_records`. The clock starts once every
    producer is made (and, transactional, has its producer id)."""
    share = records // producers
    ready = threading.Barrier(producers + 1)
    errors: list[BaseException] = []

    def one() -> None:
        try:
            extra = ({} if txn_records is None
                     else {"transactional.id": f"bench-{uuid.uuid4().hex}"})
            producer = setup.producer(**extra)
            if txn_records is not None:
                producer.init_transactions(60)
            else:
                # an idempotent producer's id, as init_transactions() has it for a
                # transactional one: one acknowledged record elsewhere (warm_up_producer
                # says why), so that the measured topic holds only what is measured
                warm_up_producer(producer, setup.warm_topic, 1, VALUE, 60)
            producer.list_topics(topic, timeout=30)  # the topic's leaders, before the clock
        except BaseException as e:  # noqa: BLE001  re-raised in the caller's thread
            errors.append(e)
            ready.abort()
            return
        try:
            ready.wait()
            _produce(setup, producer, topic, share, txn_records)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(producers)]
    for t in threads:
        t.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        pass
    started = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return share * producers / (time.perf_counter() - started)


def _produce(setup: Setup, producer, topic: str, records: int,
             txn_records: int | None) -> None:
    sent = 0
    while sent < records:
        if txn_records is not None:
            producer.begin_transaction()
        n = min(txn_records or records, records - sent)
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, VALUE, partition=(sent + i) % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.001)
        sent += n
        if txn_records is not None:
            producer.commit_transaction(60)
    if producer.flush(120):
        raise BenchError(f"{setup.where}: records of {topic} unacknowledged after 120 s")


def consume_rate(setup: Setup, topic: str, isolation: str, expected: int
                 ) -> tuple[float, int]:
    """(records/s, records read) reading the topic whole from the start: until `expected`
    records are read, or every partition's end is reached with fewer (the caller then
    fails the run)."""
    consumer = setup.ck.Consumer({"bootstrap.servers": setup.bootstrap,
                                  "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                                  "isolation.level": isolation, "enable.auto.commit": False,
                                  "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    read, ends = 0, set[int]()
    try:
        warm_up_consumer(setup.ck, consumer, topic, PARTITIONS, 30)
        consumer.assign([setup.ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        started = time.perf_counter()
        deadline = time.monotonic() + 300
        while read < expected and len(ends) < PARTITIONS and time.monotonic() < deadline:
            # never more than are left: consume() returns once it has num_messages, or at
            # its timeout, so a last short batch waited out the whole 0.5 s in the clock
            for msg in consumer.consume(min(10000, expected - read), 0.5):
                if msg.error():
                    ends.add(msg.partition())
                else:
                    read += 1
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    return read / elapsed, read


def commit_latencies(setup: Setup, topic: str, samples: int) -> tuple[list[float], list[float]]:
    """(broker: PrepareCommit to CompleteCommit in ms, client: commit_transaction() in ms)
    for `samples` transactions of one record per partition."""
    transactional_id = f"bench-commit-{uuid.uuid4().hex[:8]}"
    producer = setup.producer(**{"transactional.id": transactional_id})
    producer.init_transactions(60)
    client: list[float] = []
    for _ in range(samples):
        producer.begin_transaction()
        for p in range(PARTITIONS):
            producer.produce(topic, VALUE, partition=p)
        producer.flush(30)
        started = time.perf_counter()
        producer.commit_transaction(60)
        client.append((time.perf_counter() - started) * 1000)
    # the CompleteCommit of the last one is written after its answer: wait for it
    def broker_side() -> list[float] | None:
        # one producer's transactions follow one another: each CompleteCommit closes the
        # PrepareCommit before it (the coordinator's events are in its log's order)
        prepared: float | None = None
        done: list[float] = []
        for data_dir in setup.data_dirs:
            for e in read_events(data_dir):
                if e.get("type") != "txn_state" or e.get("transactional_id") != transactional_id:
                    continue
                if e["state"] == "PrepareCommit":
                    prepared = e["ts"]
                elif e["state"] == "CompleteCommit" and prepared is not None:
                    done.append(float(e["ts"] - prepared))
                    prepared = None
        return done if len(done) >= samples else None

    return wait_for(broker_side, 30, f"{samples} CompleteCommit events"), client


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Table:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], list[float]] = {}

    def add(self, figure: str, where: str, unit: str, value: float) -> None:
        self.rows.setdefault((figure, where, unit), []).append(value)

    def lines(self) -> list[str]:
        out = []
        for (figure, where, unit), values in self.rows.items():
            target = TARGETS.get((figure, where))
            median = statistics.median(values)
            out.append([figure, where, f"{median:,.1f} {unit}",
                        f"{min(values):,.1f}-{max(values):,.1f}",
                        "" if target is None else target[0],
                        "" if target is None else ("met" if target[1](median) else "NOT met")])
        return table_lines(["figure", "where", "median", "min-max", "target", ""], out)

    def as_json(self) -> list[dict[str, Any]]:
        return [{"figure": f, "where": w, "unit": u, "median": statistics.median(v),
                 "values": v} for (f, w, u), v in self.rows.items()]


def measure(setup: Setup, args: argparse.Namespace, table: Table) -> None:
    setup.internal_topics()
    for run in range(args.runs):
        idem_topic, txn_topic, commit_topic = setup.topic(), setup.topic(), setup.topic()
        idem = produce_rate(setup, idem_topic, args.records, None)
        txn = produce_rate(setup, txn_topic, args.records, args.txn_records)
        table.add("idempotent acks=all", setup.where, "rec/s", idem)
        table.add(f"transactional, {args.txn_records} per txn", setup.where, "rec/s", txn)
        table.add("txn/idempotent", setup.where, "%", 100 * txn / idem)
        if args.producers > 1:
            n = args.producers
            idem_n = produce_rate(setup, setup.topic(), args.records, None, n)
            txn_n = produce_rate(setup, setup.topic(), args.records, args.txn_records, n)
            table.add(f"idempotent acks=all, {n} producers", setup.where, "rec/s", idem_n)
            table.add(f"transactional, {n} producers", setup.where, "rec/s", txn_n)
            table.add(f"txn/idempotent, {n} producers", setup.where, "%", 100 * txn_n / idem_n)
        broker, client = commit_latencies(setup, commit_topic, args.commit_samples)
        table.add("commit p50", setup.where, "ms", _pct(broker, 0.5))
        table.add("commit p99", setup.where, "ms", _pct(broker, 0.99))
        table.add("commit_transaction() p50", setup.where, "ms", _pct(client, 0.5))
        table.add("commit_transaction() p99", setup.where, "ms", _pct(client, 0.99))
        expected = args.records + WARM_RECORDS
        committed, n_committed = consume_rate(setup, txn_topic, "read_committed", expected)
        uncommitted, n_all = consume_rate(setup, txn_topic, "read_uncommitted", expected)
        if n_committed != expected or n_all != expected:
            raise BenchError(f"{setup.where}: read {n_committed} committed and {n_all} in "
                             f"all of {args.records} records and {WARM_RECORDS} warm-up ones")
        table.add("read_committed", setup.where, "rec/s", committed)
        table.add("read_uncommitted", setup.where, "rec/s", uncommitted)
        table.add("read_committed/uncommitted", setup.where, "%", 100 * committed / uncommitted)
        progress(f"{setup.where} run {run + 1}: idempotent {idem:,.0f} rec/s, transactional "
                  f"{txn:,.0f} rec/s ({100 * txn / idem:.0f}%), commit p99 "
                  f"{_pct(broker, 0.99):.0f} ms, read_committed {committed:,.0f} rec/s "
                  f"({100 * committed / uncommitted:.0f}% of read_uncommitted)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibroker bench transactions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--txn-records", type=int, default=1000)
    parser.add_argument("--commit-samples", type=int, default=300)
    parser.add_argument("--producers", type=int, default=3,
                        help="also measure this many producers at once (1: skip)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-cluster", action="store_true", help="one broker only")
    parser.add_argument("--json", default=None, help="also write the figures here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    table = Table()
    base = Path(tempfile.mkdtemp(prefix="bench-txn-"))
    single = Node(0, free_port(), 0, base / "single")
    cluster = None
    try:
        single.launch()
        single.wait_ready()
        measure(Setup("one broker", single.bootstrap, [single.data_dir], 1, None), args,
                table)
        single.kill()
        if not args.no_cluster:
            cluster = Cluster(base / "cluster", {})
            cluster.start()
            measure(Setup("three nodes", cluster.bootstrap(), [n.data_dir for n in cluster.nodes],
                          3, Bench(cluster, args)), args, table)
    except BenchError as e:
        return report_failure("minibroker bench transactions", e, cluster)
    finally:
        single.kill()
        if cluster is not None:
            cluster.stop()
    shutil.rmtree(base, ignore_errors=True)  # kept only when a run failed, for its logs
    print(f"transactions: {args.records:,} records of 100 B, {args.txn_records} per "
          f"transaction, {PARTITIONS} partitions; median of {args.runs} runs")
    print("\n".join(table.lines()))
    if args.json:
        Path(args.json).write_text(json.dumps(table.as_json(), indent=1))
    return 0
