"""One consumer instance of `minibroker bench rebalance`, run as its own process.

Owns the consumer side of the rolling-bounce benchmark: `ConsumerEventLog` (the JSON-lines
writer of spark_jobs/consumer_events.py CONSUMER_EVENT_TYPES, checked against that declaration as the
broker's EventLog is) and the two consumer loops:

- `minibroker`: our client.Consumer subscribed with partition_assignment_strategy ["range"]
  (eager) or ["cooperative-sticky"] (cooperative), or group_protocol="consumer" (KIP-848),
  and a ConsumerRebalanceListener;
- `librdkafka`: a confluent-kafka Consumer with partition.assignment.strategy range or
  cooperative-sticky and on_assign / on_revoke / on_lost callbacks (incremental_assign /
  incremental_unassign under the cooperative protocol, as librdkafka requires).

Each poll batch is "processed" by sleeping --work-ms-per-record per record (a sleep, not CPU
burn: the benchmark's ten instances share the machine's cores with the broker). One
`consumed` event is written per (poll batch, partition) when the poll returns it, with the
produce time carried in the first record's value (see `encode_value`). SIGTERM (or SIGINT)
closes the consumer gracefully — revoke, commit, LeaveGroup — and then writes `stopped`.

    python -m bench.rebalance_worker --client minibroker --protocol cooperative \
        --bootstrap 127.0.0.1:9092 --topic t --group g --instance c3 --events OUT/consumers/c3.jsonl

A restarted instance appends to the same file. librdkafka does not expose the group
generation, so its assigned / revoked / lost events carry generation -1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from spark_jobs.consumer_events import CONSUMER_EVENT_TYPES

STRATEGIES = {"eager": "range", "cooperative": "cooperative-sticky"}
AUTO_COMMIT_INTERVAL_S = 5.0  # Kafka's auto.commit.interval.ms


def encode_value(produced_ms: int, seq: int) -> bytes:
    """The benchmark's record value: the produce time in epoch ms, then a sequence number."""
    return b"%d:%d" % (produced_ms, seq)


def produced_ts(value: bytes | None) -> int:
    """The produce time carried by `encode_value`, -1 for a value it did not write."""
    try:
        return int((value or b"").split(b":", 1)[0])
    except ValueError:
        return -1


def partition_names(partitions: Iterable) -> list[str]:
    """Sorted "topic-partition" names of topic partitions (ours and confluent-kafka's both
    have .topic and .partition)."""
    return sorted(f"{tp.topic}-{tp.partition}" for tp in partitions)


class ConsumerEventLog:
    """Appends CONSUMER_EVENT_TYPES events, one JSON object a line, each flushed at once (the
    controller reads the file while it grows). An undeclared type or field raises."""

    def __init__(self, path: str | os.PathLike, instance: str):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.instance = instance
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()  # librdkafka callbacks and the poll loop share it

    def emit(self, type: str, **fields: Any) -> None:
        declared = CONSUMER_EVENT_TYPES.get(type)
        if declared is None:
            raise ValueError(f"undeclared consumer event type {type!r}")
        fields.setdefault("instance", self.instance)
        if fields.keys() != declared.keys():
            raise ValueError(f"consumer event {type!r} needs fields {sorted(declared)}, "
                             f"got {sorted(fields)}")
        record = {"ts": int(time.time() * 1000), "type": type, **fields}
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def _consumed(log: ConsumerEventLog, topic: str, partition: int,
              offsets_and_values: list[tuple[int, bytes | None]]) -> None:
    log.emit("consumed", topic=topic, partition=partition,
             first_offset=offsets_and_values[0][0], last_offset=offsets_and_values[-1][0],
             count=len(offsets_and_values), produced_ts=produced_ts(offsets_and_values[0][1]))


# -- our client -----------------------------------------------------------------------------

async def run_minibroker(args: argparse.Namespace, log: ConsumerEventLog) -> str:
    import trio

    from client import Consumer, ConsumerRebalanceListener
    from client.errors import KafkaError

    consumer: Consumer | None = None

    def identity() -> tuple[str, int]:
        # The Consumer has no public group-metadata accessor yet (Java's groupMetadata()):
        # read the member's id and generation from its group driver.
        if consumer is None:
            return "", -1
        group = consumer._group or consumer._closing_group
        if group is None:
            return "", -1
        # during close the member has already left: commit_identity() still names the
        # generation it had
        generation, member_id, _ = group.commit_identity()
        return member_id, generation

    async def commit(offsets=None) -> None:
        assert consumer is not None  # the listener runs inside the consumer's block
        try:
            await consumer.commit(offsets)
        except KafkaError as e:  # a rebalance moved the generation on: the next one will do
            print(f"commit failed: {e}", file=sys.stderr, flush=True)

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_assigned(self, partitions):
            member, generation = identity()
            log.emit("assigned", member=member, generation=generation,
                     partitions=partition_names(partitions))

        async def on_partitions_revoked(self, partitions):
            # what auto-commit does on revocation (it is off: see below); the revoked
            # partitions are still assigned while the listener runs
            await commit()
            member, generation = identity()
            log.emit("revoked", member=member, generation=generation,
                     partitions=partition_names(partitions))

        async def on_partitions_lost(self, partitions):
            member, generation = identity()
            log.emit("lost", member=member, generation=generation,
                     partitions=partition_names(partitions))

    reason = "signal"
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        protocol: dict[str, Any] = (
            {"group_protocol": "consumer"} if args.protocol == "consumer" else
            {"partition_assignment_strategy": [STRATEGIES[args.protocol]]})
        async with Consumer(
                bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.instance,
                group_instance_id=args.group_instance_id, **protocol,
                # Auto-commit is awaited inside getmany() and goes over the coordinator's
                # connection, where the broker parks the member's JoinGroup until the
                # rebalance completes: a member whose timer fired then got no records for the
                # rest of the rebalance. The same commits, from a task of their own:
                auto_offset_reset="earliest", enable_auto_commit=False,
                session_timeout_ms=args.session_timeout_ms,
                heartbeat_interval_ms=args.heartbeat_interval_ms,
                fetch_max_wait_ms=args.fetch_max_wait_ms, fetch_min_bytes=args.fetch_min_bytes,
                max_poll_records=args.max_poll_records) as consumer:
            consumer.subscribe([args.topic], listener=Listener())
            log.emit("started", client="minibroker", protocol=args.protocol)
            async with trio.open_nursery() as nursery:
                async def stop_on_signal() -> None:
                    async for _ in signals:
                        nursery.cancel_scope.cancel()
                        return
                nursery.start_soon(stop_on_signal)

                async def commit_periodically() -> None:
                    while True:
                        await trio.sleep(AUTO_COMMIT_INTERVAL_S)
                        await commit()
                nursery.start_soon(commit_periodically)
                while True:
                    batches = await consumer.getmany(timeout_ms=200)
                    count = 0
                    for tp, records in batches.items():
                        _consumed(log, tp.topic, tp.partition,
                                  [(r.offset, r.value) for r in records])
                        count += len(records)
                    if count:
                        await trio.sleep(count * args.work_ms_per_record / 1000)
        # leaving `async with` closed the consumer: revoke (listener), commit, LeaveGroup
    return reason


# -- librdkafka -----------------------------------------------------------------------------

def run_librdkafka(args: argparse.Namespace, log: ConsumerEventLog) -> str:
    from confluent_kafka import Consumer

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # KIP-848's protocol is incremental too; its timeouts are the coordinator's
    cooperative = args.protocol in ("cooperative", "consumer")
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "client.id": args.instance,
        "auto.offset.reset": "earliest", "enable.auto.commit": True,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": args.fetch_max_wait_ms, "fetch.min.bytes": args.fetch_min_bytes,
    }
    if args.protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"partition.assignment.strategy": STRATEGIES[args.protocol],
                     "session.timeout.ms": args.session_timeout_ms,
                     "heartbeat.interval.ms": args.heartbeat_interval_ms})
    if args.group_instance_id:
        conf["group.instance.id"] = args.group_instance_id
    consumer = Consumer(conf)

    def emit(kind: str, c, partitions) -> None:
        log.emit(kind, member=c.memberid() or "", generation=-1,
                 partitions=partition_names(partitions))

    def on_assign(c, partitions):
        c.incremental_assign(partitions) if cooperative else c.assign(partitions)
        emit("assigned", c, partitions)

    def on_revoke(c, partitions):
        c.incremental_unassign(partitions) if cooperative else c.unassign()
        emit("revoked", c, partitions)

    def on_lost(c, partitions):
        c.incremental_unassign(partitions) if cooperative else c.unassign()
        emit("lost", c, partitions)

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    log.emit("started", client="librdkafka", protocol=args.protocol)
    try:
        while not stop.is_set():
            messages = consumer.consume(num_messages=args.max_poll_records, timeout=0.2)
            by_partition: dict[tuple[str, int], list[tuple[int, bytes | None]]] = {}
            for m in messages:
                # a message without an error has its topic, partition and offset
                topic, partition, offset = m.topic(), m.partition(), m.offset()
                if (m.error() is None and topic is not None and partition is not None
                        and offset is not None):
                    by_partition.setdefault((topic, partition), []).append((offset, m.value()))
            count = 0
            for (topic, partition), items in by_partition.items():
                _consumed(log, topic, partition, items)
                count += len(items)
            if count:
                stop.wait(count * args.work_ms_per_record / 1000)
    finally:
        consumer.close()  # serves the revoke callback, commits, LeaveGroup
    return "signal"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.rebalance_worker",
                                description="One consumer instance of the rolling-bounce bench.")
    p.add_argument("--client", choices=["minibroker", "librdkafka"], default="minibroker")
    p.add_argument("--protocol", choices=sorted([*STRATEGIES, "consumer"]), required=True)
    p.add_argument("--group-instance-id", default=None, help="a static member's id")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--instance", required=True, help="the bench's name for this process (c0..)")
    p.add_argument("--events", required=True, help="JSON-lines file to append events to")
    p.add_argument("--work-ms-per-record", type=float, default=1.0)
    p.add_argument("--session-timeout-ms", type=int, default=45000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=3000)
    p.add_argument("--fetch-max-wait-ms", type=int, default=500)
    p.add_argument("--fetch-min-bytes", type=int, default=1)
    p.add_argument("--max-poll-records", type=int, default=500)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log = ConsumerEventLog(args.events, args.instance)
    reason = "error"
    try:
        if args.client == "minibroker":
            import trio
            reason = trio.run(run_minibroker, args, log)
        else:
            reason = run_librdkafka(args, log)
    except BaseException as e:
        reason = f"error: {type(e).__name__}: {e}"
        raise
    finally:
        # the close is done: a late signal must not cut off the last line
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # written last in every case: the analysis ends the instance's ownership here
        log.emit("stopped", reason=reason)
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
