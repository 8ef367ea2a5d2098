"""`minibroker bench client`: our client library beside kafka-python and confluent-kafka.

Owns the client benchmark: each client produces --records records of --record-size bytes
(acks=1, linger 5 ms, no compression) to its own fresh topic on the broker given with
--bootstrap, one client after the other in the same run, and the records/s are printed side
by side. The consumer half follows once client.Consumer can subscribe. Figures are
printed; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import time
import uuid

import trio


def _ours(args, topic: str) -> float:
    from client import Producer

    async def run() -> float:
        value = b"x" * args.record_size
        async with Producer(bootstrap_servers=args.bootstrap, acks=1, linger_ms=5) as producer:
            await producer.send_and_wait(topic, value)  # metadata and connection up first
            started = time.perf_counter()
            for _ in range(args.records):
                await producer.send(topic, value)
            await producer.flush()
            return time.perf_counter() - started
    return trio.run(run)


def _kafka_python(args, topic: str) -> float:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=args.bootstrap, acks=1, linger_ms=5)
    value = b"x" * args.record_size
    producer.send(topic, value).get(timeout=30)
    started = time.perf_counter()
    for _ in range(args.records):
        producer.send(topic, value)
    producer.flush()
    elapsed = time.perf_counter() - started
    producer.close()
    return elapsed


def _confluent(args, topic: str) -> float:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": 1, "linger.ms": 5})
    value = b"x" * args.record_size
    producer.produce(topic, value)
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(args.records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return time.perf_counter() - started


CLIENTS = {"minibroker": _ours, "kafka-python": _kafka_python, "confluent-kafka": _confluent}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="minibroker bench client")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--record-size", type=int, default=100)
    p.add_argument("--clients", default=",".join(CLIENTS))
    args = p.parse_args(argv)
    for name in args.clients.split(","):
        topic = f"bench-client-{name}-{uuid.uuid4().hex[:6]}"
        elapsed = CLIENTS[name](args, topic)
        print(f"produce  {name:<16} {args.records:,} records  {args.records / elapsed:>10,.0f} rec/s"
              f"  {args.records * args.record_size / elapsed / 1e6:6.1f} MB/s", flush=True)
    return 0
