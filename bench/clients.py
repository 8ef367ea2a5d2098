"""`minibroker bench client`: our client library beside aiokafka, kafka-python and
confluent-kafka.

Owns the client benchmark, in two halves run one after the other in the same process:

- produce: each client produces --records records of --record-size bytes (acks=1, linger
  5 ms, no compression) to its own fresh topic on the broker given with --bootstrap;
- consume: the records are written once (by confluent-kafka, the fastest, so the setup is
  short) to one fresh topic of --partitions partitions, then each client reads all of them
  from the beginning: `--consume-mode assign` (default: every partition assigned, offsets
  from the earliest) or `group` (a fresh group per client, auto_offset_reset earliest, so
  the figure includes the join). Each client reads the topic once per `--consume-api`:
  `getmany` (a batch per call: getmany / poll / consume(num_messages)) and `iter` (one
  record per step: `async for`, kafka-python's iterator, confluent-kafka's poll()). Timing
  starts just before the first poll and stops when the last record arrived. In assign
  mode every client has the topic's metadata and a connection to each partition's leader
  before that (it asks each leader for the earliest offsets, untimed), so that the figure
  is the rate of reading, not of starting up: librdkafka, whose consumer does that work in
  the background after assign(), otherwise spent 500 ms of every timed read waiting (an
  offset asked for before its partition's leader is known is asked again 500 ms later).
  One untimed read (confluent-kafka) warms the broker first, so that the order of the
  clients does not favour the later ones.

Every client runs with its own defaults but for the settings named here. The records/s
are printed as each run ends, and side by side in a table at the end. Figures are
printed; nothing here asserts a time. `--half produce|consume|both` picks what runs.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Callable

import trio

from bench.common import warm_up_consumer

POLL_TIMEOUT_S = 1.0
CONSUME_DEADLINE_S = 300.0


class BenchClientError(RuntimeError):
    """A client did not read back every record before the deadline."""


# -- produce ---------------------------------------------------------------------------------

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


def _aiokafka(args, topic: str) -> float:
    from aiokafka import AIOKafkaProducer

    async def run() -> float:
        value = b"x" * args.record_size
        producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, acks=1, linger_ms=5)
        await producer.start()
        try:
            await producer.send_and_wait(topic, value)
            started = time.perf_counter()
            for _ in range(args.records):
                await producer.send(topic, value)
            await producer.flush()
            return time.perf_counter() - started
        finally:
            await producer.stop()
    return asyncio.run(run())


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


def _confluent_produce(bootstrap: str, topic: str, records: int, record_size: int) -> float:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5})
    value = b"x" * record_size
    producer.produce(topic, value)
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise BenchClientError(f"confluent-kafka could not deliver every record to {topic}")
    return time.perf_counter() - started


def _confluent(args, topic: str) -> float:
    return _confluent_produce(args.bootstrap, topic, args.records, args.record_size)


PRODUCERS = {"minibroker": _ours, "aiokafka": _aiokafka, "kafka-python": _kafka_python,
             "confluent-kafka": _confluent}


# -- consume ---------------------------------------------------------------------------------

def _prepare_topic(args) -> tuple[str, int]:
    """A fresh topic holding exactly the records every consumer reads; returns (name,
    records in it). The topic is created with --partitions first, so that unkeyed records
    spread over all of them."""
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = f"bench-client-consume-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
    # _confluent_produce sends one warm-up record before the timed ones
    _confluent_produce(args.bootstrap, topic, args.records - 1, args.record_size)
    # one untimed read first, so that the first client timed does not pay for a cold read
    # of the segments on the broker side alone
    _consume_confluent(args, topic, args.records, "getmany")
    return topic, args.records


def _consumer_config(args) -> dict:
    """The settings our Consumer and kafka-python's KafkaConsumer share by name: from the
    beginning, nothing committed, a fresh group in group mode."""
    config = dict(bootstrap_servers=args.bootstrap, auto_offset_reset="earliest",
                  enable_auto_commit=False)
    if args.consume_mode == "group":
        config["group_id"] = f"bench-{uuid.uuid4().hex[:6]}"
    return config


async def _read_async(consumer, expected: int, api: str) -> float:
    """Seconds until an async consumer (ours or aiokafka's, already started and assigned)
    has returned `expected` records through `api`."""
    count = 0
    started = time.perf_counter()
    if api == "getmany":
        while count < expected:
            batch = await consumer.getmany(timeout_ms=int(POLL_TIMEOUT_S * 1000))
            for records in batch.values():
                count += len(records)
    else:
        async for _ in consumer:
            count += 1
            if count >= expected:
                break
    return time.perf_counter() - started


def _consume_ours(args, topic: str, expected: int, api: str) -> float:
    from client import Consumer, TopicPartition

    async def run() -> float:
        config = _consumer_config(args)
        consumer = Consumer(topic, **config) if "group_id" in config else Consumer(**config)
        async with consumer:
            if args.consume_mode == "assign":
                tps = [TopicPartition(topic, p) for p in range(args.partitions)]
                consumer.assign(tps)
                await consumer.beginning_offsets(tps)  # metadata, leaders' connections
            with trio.fail_after(CONSUME_DEADLINE_S):
                return await _read_async(consumer, expected, api)
    return trio.run(run)


def _consume_aiokafka(args, topic: str, expected: int, api: str) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> float:
        config = _consumer_config(args)
        topics = (topic,) if "group_id" in config else ()
        consumer = AIOKafkaConsumer(*topics, **config)
        await consumer.start()
        try:
            if args.consume_mode == "assign":
                tps = [TopicPartition(topic, p) for p in range(args.partitions)]
                consumer.assign(tps)
                await consumer.beginning_offsets(tps)  # metadata, leaders' connections
            return await asyncio.wait_for(_read_async(consumer, expected, api),
                                          CONSUME_DEADLINE_S)
        finally:
            await consumer.stop()
    return asyncio.run(run())


def _timed_count(client: str, expected: int, poll: Callable[[int], int]) -> float:
    """Seconds until `poll` (one poll of a blocking client, given how many records are
    still to come; it returns how many it got) has returned `expected` records in all."""
    count = 0
    started = time.perf_counter()
    deadline = started + CONSUME_DEADLINE_S
    while count < expected and time.perf_counter() < deadline:
        count += poll(expected - count)
    elapsed = time.perf_counter() - started
    if count < expected:
        raise BenchClientError(f"{client} read {count} of {expected} records")
    return elapsed


def _consume_kafka_python(args, topic: str, expected: int, api: str) -> float:
    from kafka import KafkaConsumer, TopicPartition
    config = _consumer_config(args)
    if api == "iter":  # the iterator stops after this long without a record
        config["consumer_timeout_ms"] = int(POLL_TIMEOUT_S * 1000)
    if "group_id" in config:
        consumer = KafkaConsumer(topic, **config)
    else:
        consumer = KafkaConsumer(**config)
        tps = [TopicPartition(topic, p) for p in range(args.partitions)]
        consumer.assign(tps)
        consumer.beginning_offsets(tps)  # metadata, leaders' connections

    def iterate() -> int:
        count = 0
        for _ in consumer:
            count += 1
            if count >= expected:
                break
        return count
    try:
        if api == "iter":
            return _timed_count("kafka-python", expected, lambda _left: iterate())
        return _timed_count("kafka-python", expected, lambda _left: sum(
            len(records) for records in
            consumer.poll(timeout_ms=int(POLL_TIMEOUT_S * 1000)).values()))
    finally:
        consumer.close()


def _consume_confluent(args, topic: str, expected: int, api: str) -> float:
    import confluent_kafka
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": args.bootstrap,
                         "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": False})
    def poll_one(_left: int) -> int:
        message = consumer.poll(POLL_TIMEOUT_S)
        return message is not None and message.error() is None
    try:
        if args.consume_mode == "group":
            consumer.subscribe([topic])
        else:
            warm_up_consumer(confluent_kafka, consumer, topic, args.partitions, 30)
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                             for p in range(args.partitions)])
        if api == "iter":
            return _timed_count("confluent-kafka", expected, poll_one)
        # never more than are left: consume() waits for all num_messages, or the timeout
        return _timed_count("confluent-kafka", expected, lambda left: sum(
            message.error() is None for message in
            consumer.consume(num_messages=min(10_000, left), timeout=POLL_TIMEOUT_S)))
    finally:
        consumer.close()


CONSUMERS = {"minibroker": _consume_ours, "aiokafka": _consume_aiokafka,
             "kafka-python": _consume_kafka_python, "confluent-kafka": _consume_confluent}
CONSUME_APIS = ("getmany", "iter")


def _line(half: str, name: str, records: int, record_size: int, elapsed: float) -> str:
    return (f"{half:<16} {name:<16} {records:,} records  {records / elapsed:>10,.0f} rec/s"
            f"  {records * record_size / elapsed / 1e6:6.1f} MB/s")


def _table(rates: dict[str, dict[str, float]], names: list[str]) -> str:
    """rows (produce, consume getmany, consume iter) x clients, in records/s."""
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for row, by_client in rates.items():
        cells = [f"{by_client[n]:,.0f}" if n in by_client else "" for n in names]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="minibroker bench client")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--record-size", type=int, default=100)
    p.add_argument("--clients", default=",".join(PRODUCERS))
    p.add_argument("--half", choices=("produce", "consume", "both"), default="both")
    p.add_argument("--partitions", type=int, default=3,
                   help="partitions of the topic the consumers read (default 3)")
    p.add_argument("--consume-mode", choices=("assign", "group"), default="assign")
    p.add_argument("--consume-api", choices=(*CONSUME_APIS, "both"), default="both",
                   help="getmany: a batch per call; iter: `async for` / one record per "
                        "poll (default both)")
    args = p.parse_args(argv)
    names = args.clients.split(",")
    unknown = [n for n in names if n not in PRODUCERS]
    if unknown:
        p.error(f"unknown clients {unknown}; choose from {sorted(PRODUCERS)}")
    if args.records < 1:
        p.error("--records must be >= 1")
    rates: dict[str, dict[str, float]] = {}
    if args.half in ("produce", "both"):
        for name in names:
            topic = f"bench-client-{name}-{uuid.uuid4().hex[:6]}"
            elapsed = PRODUCERS[name](args, topic)
            rates.setdefault("produce", {})[name] = args.records / elapsed
            print(_line("produce", name, args.records, args.record_size, elapsed), flush=True)
    if args.half in ("consume", "both"):
        topic, expected = _prepare_topic(args)
        apis = CONSUME_APIS if args.consume_api == "both" else (args.consume_api,)
        for api in apis:
            for name in names:
                elapsed = CONSUMERS[name](args, topic, expected, api)
                rates.setdefault(f"consume {api}", {})[name] = expected / elapsed
                print(_line(f"consume {api}", name, expected, args.record_size, elapsed),
                      flush=True)
    print(f"\nrecords/s, {args.records:,} x {args.record_size} B, "
          f"{args.partitions} partitions:\n" + _table(rates, names))
    return 0
