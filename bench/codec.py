"""`minibroker bench codec`: µs to encode and decode one message through the construct tree
(Message.construct_build / construct_parse, the reference) and through the code generated
from the same declarations (Message.build / parse, what the broker and client run).

    minibroker bench codec [--repeat 5] [--min-time 0.2] [--quick]

The messages are the ones a leader serving followers handles per fetch round, and two of
typical size:
- a FetchRequest v12 naming 1,000 partitions (20 topics of 50, a follower's full fetch);
- a FetchResponse v12 for those 1,000 partitions, 10 of them carrying 1 KB of records;
- a ProduceRequest v9 of 6 partitions with a 16 KB batch each;
- a MetadataResponse v12 of 3 brokers and 10 topics of 6 partitions, replication factor 3.

For the two fetch messages a third line, decode+read, adds reading each partition's fields
by attribute, as the broker's handlers do: the generated Containers have their fields as
properties (protocol.codegen.container_class), a plain Container finds them through
__getattr__.

Last, what protocol.framing's FrameDecoder costs to hand out a 1 MB frame received in 64 KB
reads, as a large produce request (or a fetch response in our client) arrives.

Each figure is the best of `--repeat` rounds of at least `--min-time` seconds, the two
codecs taking turns, so other work on the machine shows less. Pure CPU: no broker, no
extra needed.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any, Callable

from protocol import framing
from protocol.messages import APIS, FETCH, METADATA, PRODUCE
from protocol.schema import Message


def fetch_request(partitions: int = 1000, per_topic: int = 50) -> dict:
    return {"replica_id": 2, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 10 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                {"topic": f"orders-{t:03d}", "partitions": [
                    {"partition": p, "current_leader_epoch": 4, "fetch_offset": 120_000 + p,
                     "last_fetched_epoch": 4, "log_start_offset": 0,
                     "partition_max_bytes": 1 << 20} for p in range(per_topic)]}
                for t in range(partitions // per_topic)],
            "forgotten_topics_data": [], "rack_id": ""}


def fetch_response(partitions: int = 1000, per_topic: int = 50, with_records: int = 10) -> dict:
    records = bytes(range(256)) * 4  # 1 KB, opaque to both codecs
    every = partitions // with_records
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": f"orders-{t:03d}", "partitions": [
            {"partition_index": p, "error_code": 0, "high_watermark": 120_000 + p,
             "last_stable_offset": 120_000 + p, "log_start_offset": 0,
             "aborted_transactions": None, "preferred_read_replica": -1,
             "records": records if (t * per_topic + p) % every == 0 else b""}
            for p in range(per_topic)]}
        for t in range(partitions // per_topic)]}


def produce_request() -> dict:
    batch = bytes(16 * 1024)
    return {"transactional_id": None, "acks": -1, "timeout_ms": 30_000, "topic_data": [
        {"name": "orders", "partition_data": [{"index": p, "records": batch}
                                              for p in range(6)]}]}


def metadata_response() -> dict:
    return {"throttle_time_ms": 0, "cluster_id": "q1Sh-9_ISia_zwGINzRvyQ", "controller_id": 1,
            "brokers": [{"node_id": n, "host": f"broker-{n}.example", "port": 9092,
                         "rack": None} for n in range(1, 4)],
            "topics": [{"error_code": 0, "name": f"orders-{t}", "topic_id": uuid.uuid4(),
                        "is_internal": False, "partitions": [
                            {"error_code": 0, "partition_index": p, "leader_id": p % 3 + 1,
                             "leader_epoch": 3, "replica_nodes": [1, 2, 3],
                             "isr_nodes": [1, 2, 3], "offline_replicas": []}
                            for p in range(6)],
                        "topic_authorized_operations": -2147483648} for t in range(10)]}


def read_fetch_request(body: Any) -> int:
    """What a leader's fetch handler reads of each partition, by attribute."""
    n = 0
    for t in body.topics:
        for p in t.partitions:
            n += (p.partition + p.fetch_offset + p.partition_max_bytes
                  + p.current_leader_epoch + p.log_start_offset + len(t.topic))
    return n


def read_fetch_response(body: Any) -> int:
    """What a follower's fetcher reads of each partition, by attribute."""
    n = 0
    for t in body.responses:
        for p in t.partitions:
            n += (p.partition_index + p.error_code + p.high_watermark + p.log_start_offset
                  + len(p.records or b"") + len(t.topic))
    return n


CASES: list[tuple[str, Message, int, Callable[[], dict]]] = [
    ("FetchRequest v12, 1,000 partitions", APIS[FETCH].request, 12, fetch_request),
    ("FetchResponse v12, 1,000 partitions, 10 with 1 KB",
     APIS[FETCH].response, 12, fetch_response),
    ("ProduceRequest v9, 6 x 16 KB", APIS[PRODUCE].request, 9, produce_request),
    ("MetadataResponse v12, 10 topics x 6", APIS[METADATA].response, 12, metadata_response),
]


READERS = {"FetchRequest": read_fetch_request, "FetchResponse": read_fetch_response}


def _per_call(fn: Callable[[], Any], min_time: float) -> float:
    """Seconds per call of `fn`, over at least `min_time` seconds."""
    calls, started = 0, time.process_time()
    while True:
        fn()
        calls += 1
        elapsed = time.process_time() - started
        if elapsed >= min_time:
            return elapsed / calls


def measure(message: Message, version: int, body: dict, repeat: int,
            min_time: float) -> dict[str, float]:
    """Best µs per call of each codec's encode and decode of `body`."""
    data = message.build(body, version)
    if message.construct_build(body, version) != data:
        raise AssertionError(f"{message.name} v{version}: the codecs disagree")
    runs: dict[str, Callable[[], Any]] = {
        "construct encode": lambda: message.construct_build(body, version),
        "generated encode": lambda: message.build(body, version),
        "construct decode": lambda: message.construct_parse(data, version),
        "generated decode": lambda: message.parse(data, version),
    }
    reader = READERS.get(message.name)
    if reader is not None:
        # the Containers' fields read by attribute, as the broker's handlers read them
        runs["construct decode+read"] = lambda: reader(message.construct_parse(data, version))
        runs["generated decode+read"] = lambda: reader(message.parse(data, version))
    best = {name: float("inf") for name in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            best[name] = min(best[name], _per_call(fn, min_time) * 1e6)
    best["bytes"] = len(data)
    return best


def measure_framing(repeat: int, min_time: float, size: int = 1 << 20,
                    read: int = 64 * 1024) -> float:
    """Best µs for FrameDecoder to hand out one `size` frame received in `read` chunks."""
    stream = framing.frame(bytes(size))
    chunks = [stream[i:i + read] for i in range(0, len(stream), read)]
    decoder = framing.FrameDecoder()

    def receive() -> None:
        for chunk in chunks:  # as the server reads: a frame asked for after every read
            decoder.receive_data(chunk)
            decoder.next_frame()

    return min(_per_call(receive, min_time) for _ in range(repeat)) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minibroker bench codec")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--quick", action="store_true", help="one short round (a smoke test)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    repeat, min_time = (1, 0.01) if args.quick else (args.repeat, args.min_time)
    print(f"{'message':<52} {'bytes':>7} {'':>11} {'construct µs':>13} {'generated µs':>13} "
          f"{'speed-up':>9}")
    for label, message, version, make in CASES:
        r = measure(message, version, make(), repeat, min_time)
        ops = [op for op in ("encode", "decode", "decode+read") if f"construct {op}" in r]
        for i, op in enumerate(ops):
            ref, gen = r[f"construct {op}"], r[f"generated {op}"]
            print(f"{label if i == 0 else '':<52} {int(r['bytes']) if i == 0 else '':>7} "
                  f"{op:>11} {ref:>13,.1f} {gen:>13,.1f} {ref / gen:>8.1f}x")
    print(f"framing: a 1 MB frame received in 64 KB reads, "
          f"{measure_framing(repeat, min_time):,.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
