"""Throughput benchmark driver: ``minibroker bench produce|consume``.

Drives a broker with confluent-kafka (librdkafka), the fastest of the supported
clients, so that the broker rather than the Python client loop is what is being
measured as far as possible.  Also runnable on its own (scripts/bench.sh does so)::

    python -m bench.throughput produce --bootstrap 127.0.0.1:19092 --partitions 6 --acks 1
    python -m bench.throughput consume --bootstrap 127.0.0.1:19092 --partitions 6 --acks 1

``consume`` reads the topic that ``produce`` with the same parameters wrote (the
default topic name is derived from --partitions and --acks), so run them in that
order.

Each clock starts once the client is done starting, so that the figures are the steady
rate: before it, the producer has written one record to each partition and had it
acknowledged (the topic then holds --records records plus one a partition), and the
consumer has the topic's metadata and a connection to each partition's leader. The
consumer's ``first_record_s`` alone counts from its creation, start-up included.

Reported: records/s and MB/s (value bytes only, 1 MB = 10**6 bytes), the elapsed
wall time of the timed section, the client's CPU seconds (getrusage, includes
librdkafka's threads) and, with --broker-pid, the broker's CPU seconds over the
timed section read from /proc (--broker-pid repeated, for a cluster: their sum, and each
one's in broker_cpu_s_by_pid).

Exit status: 0 on success, 1 when the run failed (timeout, delivery errors,
unknown topic), 2 on bad usage.  With --json / --json-out a JSON line is written
in every case, with ``"ok": false`` and ``"error"`` when the run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import uuid
from typing import Any

from bench.common import (BenchError, CpuMeter, confluent_kafka_modules, warm_up_consumer,
                          warm_up_producer)
from protocol.codecs import CODEC_NAMES

__all__ = ["main", "build_parser"]

def default_topic(args: argparse.Namespace) -> str:
    return f"bench-p{args.partitions}-acks{args.acks}"


def _client_conf(args: argparse.Namespace) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap}
    for kv in args.X:
        key, sep, value = kv.partition("=")
        if not sep:
            raise BenchError(f"-X expects key=value, got {kv!r}")
        # confluent-kafka insists on bool for the properties it handles itself.
        conf[key] = {"true": True, "false": False}.get(value.lower(), value)
    return conf


def _ensure_topic(args: argparse.Namespace, create: bool) -> int:
    """Make sure the topic exists (creating it if allowed); return its partition count."""
    ck, admin = confluent_kafka_modules()
    # Only connection-level -X properties: producer/consumer ones would draw CONFWARNs.
    conf = {
        k: v
        for k, v in _client_conf(args).items()
        if k in ("bootstrap.servers", "client.id", "debug") or k.startswith(("security.", "ssl.", "sasl.", "socket.", "broker."))
    }
    client = admin.AdminClient(conf)
    deadline = time.monotonic() + args.setup_timeout_s

    def partitions_now() -> int | None:
        md = client.list_topics(timeout=max(0.1, deadline - time.monotonic()))
        t = md.topics.get(args.topic)
        if t is None or t.error is not None or not t.partitions:
            return None
        # Every partition must have a leader before we start the clock.
        if any(p.leader < 0 for p in t.partitions.values()):
            return None
        return len(t.partitions)

    n = partitions_now()
    if n is None and create:
        from confluent_kafka import KafkaError, KafkaException

        futures = client.create_topics(
            [admin.NewTopic(args.topic, num_partitions=args.partitions, replication_factor=1)],
            request_timeout=args.setup_timeout_s,
        )
        try:
            futures[args.topic].result(timeout=args.setup_timeout_s)
        except KafkaException as e:
            err = e.args[0]
            if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BenchError(f"creating topic {args.topic!r}: {err}") from e
    while n is None:
        if time.monotonic() >= deadline:
            what = "created" if create else "found"
            raise BenchError(
                f"topic {args.topic!r} not {what} with leaders for all partitions "
                f"within {args.setup_timeout_s:g}s on {args.bootstrap}"
                + ("" if create else " (run `bench produce` with the same parameters first)")
            )
        time.sleep(0.05)
        n = partitions_now()
    if n != args.partitions:
        raise BenchError(
            f"topic {args.topic!r} has {n} partitions, --partitions is {args.partitions} "
            "(pass another --topic)"
        )
    return n


def _fmt_int(n: float) -> str:
    return f"{int(round(n)):,}"


def _summary(r: dict[str, Any]) -> str:
    parts = [
        f"{r['op']:<8}",
        f"partitions={r['partitions']} acks={r['acks']}",
        f" {_fmt_int(r['records'])} records",
    ]
    if r.get("label"):
        parts.insert(0, f"[{r['label']}]")
    if r["ok"]:
        parts += [
            f" {_fmt_int(r['rec_per_s'])} rec/s",
            f" {r['mb_per_s']:.1f} MB/s",
            f" elapsed={r['elapsed_s']:.2f}s",
        ]
        if r.get("broker_cpu_s") is not None:
            parts.append(f" broker_cpu={r['broker_cpu_s']:.2f}s")
        parts.append(f" client_cpu={r['client_cpu_s']:.2f}s")
        if r["op"] == "consume":
            parts.append(f" first_record={r['first_record_s']:.2f}s")
            if r.get("steady_rec_per_s"):
                parts.append(f" (after first: {_fmt_int(r['steady_rec_per_s'])} rec/s)")
    else:
        parts.append(f" FAILED: {r['error']}")
    return " ".join(parts)


# ------------------------------------------------------------------------ runs


def run_produce(args: argparse.Namespace, result: dict[str, Any]) -> None:
    ck, _ = confluent_kafka_modules()
    nparts = _ensure_topic(args, create=True)

    errors = 0
    first_error: list[str] = []

    def on_delivery(err, msg) -> None:  # called only for failures (delivery.report.only.error)
        nonlocal errors
        if err is not None:
            errors += 1
            if not first_error:
                first_error.append(str(err))

    conf = _client_conf(args)
    conf.setdefault("acks", args.acks)
    conf.setdefault("linger.ms", args.linger_ms)
    conf.setdefault("compression.type", args.compression)
    conf.setdefault("delivery.report.only.error", True)
    conf["on_delivery"] = on_delivery
    producer = ck.Producer(conf)
    value = os.urandom(args.record_size)
    topic = args.topic
    warm_up_producer(producer, topic, nparts, value, args.setup_timeout_s)
    if errors:
        raise BenchError(f"the warm-up records to {topic} failed: {first_error[0]}")

    produce = producer.produce
    poll = producer.poll
    n = args.records
    meter = CpuMeter(args.broker_pid)

    meter.start()
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.1)  # local queue full: serve delivery reports, wait for room
    deadline = time.monotonic() + args.timeout_s
    remaining = producer.flush(args.timeout_s)
    while remaining and time.monotonic() < deadline:
        remaining = producer.flush(max(0.1, deadline - time.monotonic()))
    elapsed = time.perf_counter() - t0
    broker_cpu, client_cpu = meter.stop()

    result.update(_rates(n, args.record_size * n, elapsed, broker_cpu, client_cpu))
    result["broker_cpu_s_by_pid"] = _by_pid(meter)
    result["delivery_errors"] = errors
    result["undelivered"] = remaining
    if remaining:
        raise BenchError(f"{remaining} records still undelivered after --timeout-s {args.timeout_s:g}s")
    if errors:
        raise BenchError(f"{errors} delivery errors (first: {first_error[0]})")


def run_consume(args: argparse.Namespace, result: dict[str, Any]) -> None:
    ck, _ = confluent_kafka_modules()
    nparts = _ensure_topic(args, create=False)
    conf = _client_conf(args)
    conf.setdefault("group.id", f"bench-{uuid.uuid4().hex[:12]}")
    conf.setdefault("auto.offset.reset", "earliest")
    conf.setdefault("enable.auto.commit", False)
    # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1000 ms) whenever its
    # local queue holds more than queued.min.messages (100k); this Python loop falls behind
    # often enough that those 1 s pauses, not the broker, would set the rate (measured
    # against Tansu: ~210k rec/s with the default, ~1M rec/s with 10 ms).
    conf.setdefault("fetch.queue.backoff.ms", 10)
    result["group_id"] = conf["group.id"]
    meter = CpuMeter(args.broker_pid)

    want = args.records
    got = nbytes = errors = 0
    first: float | None = None
    first_error = ""
    created = time.perf_counter()
    consumer = ck.Consumer(conf)
    try:
        warm_up_consumer(ck, consumer, args.topic, nparts, args.setup_timeout_s)
        meter.start()
        t0 = time.perf_counter()
        if args.group_mode == "subscribe":
            # Goes through JoinGroup/SyncGroup, whose rebalance delay is counted.
            consumer.subscribe([args.topic])
        else:
            # No group join and no committed-offset lookup: partitions are assigned
            # directly from the beginning, so only fetch throughput is measured.
            consumer.assign([ck.TopicPartition(args.topic, p, ck.OFFSET_BEGINNING)
                             for p in range(nparts)])
        consume = consumer.consume
        deadline = time.monotonic() + args.timeout_s
        while got < want:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(
                    f"timed out after --timeout-s {args.timeout_s:g}s: consumed {got:,} of "
                    f"{want:,} records from {args.topic!r}"
                    + (f"; {errors} consumer errors, first: {first_error}" if errors else "")
                )
            batch = consume(num_messages=min(10000, want - got), timeout=min(1.0, left))
            for m in batch:
                err = m.error()
                if err is None:
                    got += 1
                    nbytes += len(m.value() or b"")
                elif err.code() != ck.KafkaError._PARTITION_EOF:
                    if err.fatal():
                        raise BenchError(f"fatal consumer error: {err}")
                    errors += 1
                    first_error = first_error or str(err)
            if first is None and got:
                first = time.perf_counter()
        elapsed = time.perf_counter() - t0
        broker_cpu, client_cpu = meter.stop()
    finally:
        result["consumed"] = got
        result["consumer_errors"] = errors
        if first_error:
            result["first_consumer_error"] = first_error
        consumer.close()
    result.update(_rates(got, nbytes, elapsed, broker_cpu, client_cpu))
    result["broker_cpu_s_by_pid"] = _by_pid(meter)
    # From the consumer's creation: its start-up (connection, metadata) is counted here on
    # purpose, the one figure that shows it.
    result["first_record_s"] = round(0.0 if first is None else first - created, 4)
    # Rate once data flows, excluding ListOffsets (or the group join) and the first fetch.
    if first is not None and elapsed > first - t0 and got > 1:
        result["steady_rec_per_s"] = round((got - 1) / (elapsed - (first - t0)), 1)


def _by_pid(meter: CpuMeter) -> dict[str, float]:
    return {str(pid): round(cpu, 3) for pid, cpu in meter.per_broker.items()}


def _rates(n: int, nbytes: int, elapsed: float, broker_cpu, client_cpu) -> dict[str, Any]:
    return {
        "elapsed_s": round(elapsed, 4),
        "rec_per_s": round(n / elapsed, 1) if elapsed > 0 else None,
        "mb_per_s": round(nbytes / elapsed / 1e6, 3) if elapsed > 0 else None,
        "bytes": nbytes,
        "broker_cpu_s": None if broker_cpu is None else round(broker_cpu, 3),
        "broker_cpu_s_per_million": None if broker_cpu is None else round(broker_cpu * 1e6 / n, 3),
        "client_cpu_s": round(client_cpu, 3),
    }


# -------------------------------------------------------------------------- CLI


def build_parser(prog: str = "minibroker bench") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Produce/consume throughput benchmark (confluent-kafka).")
    sub = parser.add_subparsers(dest="op", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap", default="127.0.0.1:9092", help="HOST:PORT (default %(default)s)")
    common.add_argument("--topic", help="default: bench-p<partitions>-acks<acks>")
    common.add_argument("--records", type=int, default=1_000_000)
    common.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    common.add_argument("--partitions", type=int, default=1, help="partitions of the topic (1 or 6 in the matrix)")
    common.add_argument("--acks", choices=["0", "1", "all"], default="1")
    common.add_argument("--linger-ms", type=float, default=5)
    common.add_argument("--compression", default="none", choices=CODEC_NAMES)
    common.add_argument("--broker-pid", type=int, action="append",
                        help="measure this process's CPU seconds via /proc (repeatable: a "
                             "cluster's brokers, added up and also reported per pid)")
    common.add_argument("--timeout-s", type=float, default=120.0, help="deadline for flush / for reading --records")
    common.add_argument("--setup-timeout-s", type=float, default=30.0, help="deadline for topic creation/metadata")
    common.add_argument("--label", help="free-form tag (e.g. peer, ours) put in the output")
    common.add_argument("--json", action="store_true", help="also print one JSON line")
    common.add_argument("--json-out", metavar="PATH", help="append the JSON line to PATH")
    common.add_argument("-X", action="append", default=[], metavar="KEY=VALUE",
                        help="extra librdkafka property (repeatable)")
    sub.add_parser("produce", parents=[common], help="produce --records records, flush, report")
    c = sub.add_parser("consume", parents=[common], help="read exactly --records records from the start")
    c.add_argument("--group-mode", choices=["assign", "subscribe"], default="assign",
                   help="assign partitions directly (default) or subscribe through a group join")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.records <= 0 or args.record_size < 0 or args.partitions <= 0:
        parser.error("--records and --partitions must be > 0, --record-size >= 0")
    if args.topic is None:
        args.topic = default_topic(args)

    result: dict[str, Any] = {
        "op": args.op,
        "label": args.label,
        "bootstrap": args.bootstrap,
        "topic": args.topic,
        "partitions": args.partitions,
        "acks": args.acks,
        "records": args.records,
        "record_size": args.record_size,
        "linger_ms": args.linger_ms,
        "compression": args.compression,
        "broker_pid": args.broker_pid,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "ok": False,
    }
    rc = 0
    try:
        ck, _ = confluent_kafka_modules()
        v = ck.version()
        result["client"] = f"confluent-kafka {v[0] if isinstance(v, tuple) else v} / librdkafka {ck.libversion()[0]}"
        (run_produce if args.op == "produce" else run_consume)(args, result)
        result["ok"] = True
    except BenchError as e:
        result["error"] = str(e)
        rc = 1
    except KeyboardInterrupt:
        result["error"] = "interrupted"
        rc = 130
    print(_summary(result), flush=True)
    line = json.dumps(result, sort_keys=False)
    if args.json:
        print(line, flush=True)
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "a") as f:
            f.write(line + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
