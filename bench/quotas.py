"""`minibroker bench quotas`: issue 27's figure, a quota-throttled client's measured rate
against its quota, on one broker of ours with librdkafka's clients (confluent-kafka):

    minibroker bench quotas [--quota 1000000] [--seconds 30] [--value-bytes 10000]
        [--no-consumer] [--json FILE]

1. producers: a producer whose client id has producer_byte_rate=--quota produces as fast as
   it can for --seconds, beside one with no quota offered twice the quota's rate (paced
   here), both at once on one topic. The figure is each one's acknowledged value bytes
   over the --seconds, against the quota.
2. consumers: a topic is filled with 1.5 times what --seconds at the quota can read; a
   consumer whose client id has consumer_byte_rate=--quota reads it for --seconds, beside
   one with no quota reading the same topic at once, whose figure is its rate until it
   has read everything (or the --seconds end).

The clock of each client starts at its first byte, so the figure includes the burst a new
client's first window lets through (Kafka's quota.window.num - 1 samples of
quota.window.size.seconds: ten seconds of quota): over 30 s the measured rate should be
within 10% of the quota. The quotas are set with our AdminClient (AlterClientQuotas).
Nothing asserts a figure (docs/BENCHMARKS.md records them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import trio

from bench.cluster import Node
from bench.common import BenchError, confluent_kafka_modules, progress, table_lines
from client.admin import AdminClient, ClientQuotaAlteration
from harness.ports import free_port

THROTTLED, FREE = "bench-quota-throttled", "bench-quota-free"


def set_quota(bootstrap: str, client_id: str, key: str, value: float) -> None:
    async def alter() -> None:
        async with AdminClient(bootstrap) as admin:
            await admin.alter_client_quotas([ClientQuotaAlteration({"client-id": client_id},
                                                                   {key: value})])
    trio.run(alter)


def new_topic(admin_mod, bootstrap: str) -> str:
    name = f"bench-quota-{uuid.uuid4().hex[:8]}"
    admin = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([admin_mod.NewTopic(name, 1, 1)])[name].result(30)
    return name


def _rates(events: list[tuple[float, int]], started: float, warmup: float,
           seconds: float) -> tuple[float, float]:
    """(bytes a second over the `seconds` after `warmup`, over the first `seconds`)."""
    steady = sum(n for t, n in events if started + warmup <= t < started + warmup + seconds)
    cold = sum(n for t, n in events if started <= t < started + seconds)
    return steady / seconds, cold / seconds


def produce_for(ck, bootstrap: str, topic: str, client_id: str, value: bytes,
                warmup: float, seconds: float, pace_bytes_s: float | None,
                batch_bytes: int) -> tuple[float, float, list[int]]:
    """Produce for `warmup` + `seconds` (paced to `pace_bytes_s` when given); the
    acknowledged value bytes a second (after the warm-up, and from the start) and the
    throttle times librdkafka was told."""
    throttles: list[int] = []
    acked: list[tuple[float, int]] = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                     "batch.size": batch_bytes, "queue.buffering.max.kbytes": 4096,
                     "throttle_cb": lambda e: throttles.append(e.throttle_time)})

    def delivered(err, msg) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))
    started = time.monotonic()
    end = started + warmup + seconds
    offered = 0
    while time.monotonic() < end:
        if pace_bytes_s is not None and offered > (time.monotonic() - started) * pace_bytes_s:
            p.poll(0.005)
            continue
        try:
            p.produce(topic, value, on_delivery=delivered)
            offered += len(value)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(30)
    return (*_rates(acked, started, warmup, seconds), throttles)


def consume_for(ck, bootstrap: str, topic: str, client_id: str, warmup: float,
                seconds: float, fetch_bytes: int, total: int,
                reads_all: bool) -> tuple[float, float]:
    """Read the topic from the start for `warmup` + `seconds` (or, `reads_all`, until its
    `total` bytes are read); bytes a second (after the warm-up, and from the first
    record; for `reads_all` from the first record to the last)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "client.id": client_id,
                     "group.id": f"bench-quota-{uuid.uuid4().hex[:6]}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "max.partition.fetch.bytes": fetch_bytes})
    c.subscribe([topic])
    got: list[tuple[float, int]] = []
    started: float | None = None
    deadline = time.monotonic() + warmup + seconds + 30
    read = 0
    while not (reads_all and read >= total):
        now = time.monotonic()
        if (started is not None and now - started >= warmup + seconds) or now > deadline:
            break
        for m in c.consume(100, 0.2):
            if m.error() is None:
                if started is None:
                    started = time.monotonic()
                got.append((time.monotonic(), len(m.value())))
                read += len(m.value())
    c.close()
    if started is None:
        raise BenchError(f"{client_id} read nothing")
    if reads_all:  # as fast as it goes: its rate until it has read everything
        rate = sum(n for _, n in got) / max(got[-1][0] - started, 1e-3)
        return rate, rate
    return _rates(got, started, warmup, seconds)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minibroker bench quotas", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quota", type=float, default=1_000_000, help="bytes a second")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--warmup", type=float, default=11,
                   help="seconds before the measured ones (a whole quota window)")
    p.add_argument("--value-bytes", type=int, default=1000)
    p.add_argument("--batch-bytes", type=int, default=16384,
                   help="the producers' batch.size (Kafka's Java default)")
    p.add_argument("--fetch-bytes", type=int, default=65536,
                   help="the consumers' max.partition.fetch.bytes")
    p.add_argument("--no-consumer", action="store_true", help="the producers only")
    p.add_argument("--json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ck, admin_mod = confluent_kafka_modules()
    base = Path(tempfile.mkdtemp(prefix="bench-quotas-"))
    node = Node(0, free_port(), 0, base / "single")
    value = b"q" * args.value_bytes
    figures: dict[str, float] = {"quota": args.quota}
    try:
        node.launch()
        node.wait_ready()
        bs = node.bootstrap
        set_quota(bs, THROTTLED, "producer_byte_rate", args.quota)
        topic = new_topic(admin_mod, bs)
        progress(f"producers: one at producer_byte_rate={args.quota:,.0f}, one without "
                 f"offering {2 * args.quota:,.0f} B/s, {args.seconds:g} s")
        results: dict[str, tuple[float, float, list[int]]] = {}

        def run(client_id: str, pace: float | None) -> None:
            results[client_id] = produce_for(ck, bs, topic, client_id, value, args.warmup,
                                             args.seconds, pace, args.batch_bytes)
        threads = [threading.Thread(target=run, args=(THROTTLED, None)),
                   threading.Thread(target=run, args=(FREE, 2 * args.quota))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if set(results) != {THROTTLED, FREE}:
            raise BenchError("a producer failed")
        figures["producer_throttled"], figures["producer_throttled_cold"] = \
            results[THROTTLED][:2]
        figures["producer_free"], figures["producer_free_cold"] = results[FREE][:2]
        figures["producer_throttle_events"] = len([t for t in results[THROTTLED][2] if t])
        figures["producer_free_throttle_events"] = len([t for t in results[FREE][2] if t])
        if not args.no_consumer:
            set_quota(bs, THROTTLED, "consumer_byte_rate", args.quota)
            filled = new_topic(admin_mod, bs)
            total = int(args.quota * (args.warmup + args.seconds) * 1.5)
            progress(f"consumers: filling {total:,} bytes, then one at consumer_byte_rate="
                     f"{args.quota:,.0f} beside one without, {args.seconds:g} s")
            _fill(ck, bs, filled, value, total)
            rates: dict[str, tuple[float, float]] = {}

            def read(client_id: str) -> None:
                rates[client_id] = consume_for(ck, bs, filled, client_id, args.warmup,
                                               args.seconds, args.fetch_bytes, total,
                                               client_id == FREE)
            threads = [threading.Thread(target=read, args=(c,)) for c in (THROTTLED, FREE)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if set(rates) != {THROTTLED, FREE}:
                raise BenchError("a consumer failed")
            figures["consumer_throttled"], figures["consumer_throttled_cold"] = \
                rates[THROTTLED]
            figures["consumer_free"], figures["consumer_free_cold"] = rates[FREE]
    except BenchError as e:
        print(f"minibroker bench quotas: {e}\n--- {node.log_path} ---\n{node.tail()}",
              file=sys.stderr)
        return 1
    finally:
        node.kill()
    shutil.rmtree(base, ignore_errors=True)
    q = args.quota

    def row(label: str, key: str, events: str) -> list[str]:
        return [label, f"{figures[key]:,.0f}", f"{figures[key] / q:.3f}",
                f"{figures[key + '_cold'] / q:.3f}", events]
    rows = [row("producer, producer_byte_rate quota", "producer_throttled",
                f"{figures['producer_throttle_events']:.0f}"),
            row("producer, no quota (offers 2x quota)", "producer_free",
                f"{figures['producer_free_throttle_events']:.0f}")]
    if "consumer_throttled" in figures:
        rows += [row("consumer, consumer_byte_rate quota", "consumer_throttled", ""),
                 row("consumer, no quota (the topic, as fast as it goes)", "consumer_free", "")]
    print(f"client quotas: quota {q:,.0f} B/s; bytes a second over {args.seconds:g} s after "
          f"a {args.warmup:g} s warm-up, and over the first {args.seconds:g} s (cold); "
          f"librdkafka {ck.libversion()[0]}")
    print("\n".join(table_lines(["client", "bytes/s", "of quota", "cold", "throttled answers"],
                                rows)))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


def _fill(ck, bootstrap: str, topic: str, value: bytes, total: int) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = 0
    while sent < total:
        try:
            p.produce(topic, value)
            sent += len(value)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    if p.flush(60) != 0:
        raise BenchError("the fill producer did not deliver every record")


if __name__ == "__main__":
    sys.exit(main())
