"""`minibroker bench groups`: how fast groups form, and how many commits a broker absorbs.

Owns the group benchmark, driving real librdkafka consumers (confluent-kafka) against any
broker given with --bootstrap:

- join: for each N in --members (default 1, 10, 50), N consumers subscribe to a topic of
  --partitions partitions (default 100) in a fresh group; the figure is the time from the
  first subscribe to the moment every member holds a non-empty assignment and together they
  own every partition exactly once. The broker should run with
  group.initial.rebalance.delay.ms=0, or its delay is measured too.
- commit: --commit-members consumers (default 100) form one group; each commits its
  partitions' positions every --commit-interval-ms (default 100) for --commit-seconds; the
  figure is acknowledged commits per second, with the broker's CPU seconds.

Figures are printed; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from typing import Any

from bench.common import BenchError, CpuMeter, confluent_kafka_modules


def _create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float) -> None:
    ck, admin = confluent_kafka_modules()
    client = admin.AdminClient({"bootstrap.servers": bootstrap})
    md = client.list_topics(timeout=timeout_s)
    if topic in md.topics and not md.topics[topic].error:
        if len(md.topics[topic].partitions) != partitions:
            raise BenchError(f"{topic} exists with {len(md.topics[topic].partitions)} partitions")
        return
    client.create_topics([admin.NewTopic(topic, partitions, 1)])[topic].result(timeout_s)


class _Member:
    def __init__(self, ck, conf: dict):
        self.assignment: set[tuple[str, int]] = set()
        self.commits_ok = self.commits_failed = 0
        conf = dict(conf, on_commit=self._on_commit)
        self.consumer = ck.Consumer(conf)

    def _on_assign(self, consumer, partitions):
        self.assignment = {(p.topic, p.partition) for p in partitions}

    def _on_revoke(self, consumer, partitions):
        self.assignment -= {(p.topic, p.partition) for p in partitions}

    def _on_commit(self, err, partitions):
        if err is None:
            self.commits_ok += 1
        else:
            self.commits_failed += 1

    def subscribe(self, topic: str) -> None:
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)


def _form_group(ck, args, n: int, topic: str) -> tuple[list[_Member], float]:
    group = f"bench-group-{uuid.uuid4().hex[:10]}"
    conf = {"bootstrap.servers": args.bootstrap, "group.id": group,
            "partition.assignment.strategy": args.strategy, "enable.auto.commit": False,
            "session.timeout.ms": args.session_timeout_ms, "auto.offset.reset": "latest"}
    members = [_Member(ck, conf) for _ in range(n)]
    started = time.perf_counter()
    for m in members:
        m.subscribe(topic)
    deadline = time.monotonic() + args.timeout_s
    want = {(topic, p) for p in range(args.partitions)}
    while True:
        for m in members:
            m.consumer.poll(0)
        owned = [tp for m in members for tp in m.assignment]
        if all(m.assignment for m in members[:args.partitions]) and \
                len(owned) == len(set(owned)) and set(owned) == want:
            return members, time.perf_counter() - started
        if time.monotonic() > deadline:
            raise BenchError(f"{n} members not all assigned after {args.timeout_s:g}s "
                             f"({len(set(owned))} of {len(want)} partitions owned)")
        time.sleep(0.002)


def _close(members: list[_Member]) -> None:
    for m in members:
        m.consumer.close()


def run_join(args, out: list[dict]) -> None:
    ck, _ = confluent_kafka_modules()
    topic = f"bench-groups-p{args.partitions}"
    _create_topic(args.bootstrap, topic, args.partitions, args.timeout_s)
    for n in args.members:
        meter = CpuMeter(args.broker_pid)
        meter.start()
        members, elapsed = _form_group(ck, args, n, topic)
        broker_cpu, _ = meter.stop()
        _close(members)
        result = {"op": "groups-join", "label": args.label, "members": n,
                  "partitions": args.partitions, "seconds": round(elapsed, 3),
                  "broker_cpu": broker_cpu}
        print(f"join     members={n:<3} partitions={args.partitions}  all assigned after "
              f"{elapsed:.3f}s" + (f"  broker_cpu={broker_cpu:.2f}s" if broker_cpu is not None
                                   else ""), flush=True)
        out.append(result)


def run_commit(args, out: list[dict]) -> None:
    ck, _ = confluent_kafka_modules()
    topic = f"bench-groups-p{args.partitions}"
    _create_topic(args.bootstrap, topic, args.partitions, args.timeout_s)
    members, _ = _form_group(ck, args, args.commit_members, topic)
    try:
        interval = args.commit_interval_ms / 1000
        meter = CpuMeter(args.broker_pid)
        meter.start()
        started = time.perf_counter()
        next_commit = [started + i * interval / len(members) for i in range(len(members))]
        offset = 0
        while time.perf_counter() - started < args.commit_seconds:
            now = time.perf_counter()
            for i, m in enumerate(members):
                if now >= next_commit[i] and m.assignment:
                    offset += 1
                    m.consumer.commit(offsets=[ck.TopicPartition(t, p, offset)
                                               for t, p in m.assignment], asynchronous=True)
                    next_commit[i] += interval
                m.consumer.poll(0)
            time.sleep(0.001)
        for m in members:  # collect the last callbacks
            m.consumer.poll(0.05)
        elapsed = time.perf_counter() - started
        broker_cpu, client_cpu = meter.stop()
        ok = sum(m.commits_ok for m in members)
        failed = sum(m.commits_failed for m in members)
    finally:
        _close(members)
    offered = len(members) / interval
    result = {"op": "groups-commit", "label": args.label, "members": len(members),
              "interval_ms": args.commit_interval_ms, "offered_per_s": offered,
              "commits_per_s": round(ok / elapsed, 1), "failed": failed,
              "broker_cpu": broker_cpu, "client_cpu": round(client_cpu, 2)}
    print(f"commit   members={len(members)} every {args.commit_interval_ms}ms  offered "
          f"{offered:,.0f}/s  acknowledged {ok / elapsed:,.0f}/s  failed={failed}"
          + (f"  broker_cpu={broker_cpu:.2f}s" if broker_cpu is not None else "")
          + f"  client_cpu={client_cpu:.2f}s", flush=True)
    out.append(result)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minibroker bench groups",
                                description="Group formation time and commit rate (librdkafka).")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--members", default="1,10,50", help="comma-separated group sizes to form")
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--strategy", default="range")
    p.add_argument("--session-timeout-ms", type=int, default=10000)
    p.add_argument("--commit-members", type=int, default=100)
    p.add_argument("--commit-interval-ms", type=int, default=100)
    p.add_argument("--commit-seconds", type=float, default=10)
    p.add_argument("--skip-commit", action="store_true")
    p.add_argument("--skip-join", action="store_true")
    p.add_argument("--broker-pid", type=int)
    p.add_argument("--timeout-s", type=float, default=120)
    p.add_argument("--label")
    p.add_argument("--json-out", metavar="PATH", help="append JSON lines to PATH")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    args.members = [int(x) for x in args.members.split(",") if x]
    out: list[dict[str, Any]] = []
    try:
        if not args.skip_join:
            run_join(args, out)
        if not args.skip_commit:
            run_commit(args, out)
    except BenchError as e:
        print(f"groups bench failed: {e}", file=sys.stderr)
        return 1
    finally:
        if args.json_out:
            with open(args.json_out, "a") as f:
                for r in out:
                    f.write(json.dumps(r) + "\n")
    return 0
