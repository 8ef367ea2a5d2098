"""The chaos run's clients, each recording what it did in the History (history.py):

  OurProducer       our idempotent acks=all Producer, values sent to explicit partitions
                    in turn, many in flight, each send an invoke and then ok (offset) or
                    info (the error: a send that failed may still be in the log)
  RdkafkaProducer   the same with librdkafka (confluent-kafka, enable.idempotence) in a
                    thread: its delivery reports come from its poll()
  OurGroupConsumer  our Consumer in the group, roundrobin, committing after every poll
  RdkafkaConsumer   librdkafka in the same group (roundrobin, so the two agree on a
                    protocol), in a thread, committing synchronously after every poll
  Observer          the group's committed offsets (OffsetFetch) and every partition's
                    leader and ISR, once a second, and the acknowledgement rate

A consumer records `assign` with its whole assignment whenever a rebalance changes it,
so that the checkers judge each poll against the assignment it was made under.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import trio

from harness.chaos.history import INFO, INVOKE, OK, History
from client import Consumer, ConsumerRebalanceListener, Producer, TopicPartition
from client.errors import KafkaConnectionError

MAX_IN_FLIGHT = 200  # sends awaiting their answer, per producer
POLL_TIMEOUT_MS = 500
BOOTSTRAP_RETRY_S = 1.0  # between starts of a client of ours that no node answered


@dataclass
class Settings:
    """What every client of one run shares."""
    bootstrap: str
    topic: str
    partitions: int
    group: str
    rate: int  # sends per second, per producer
    session_timeout_ms: int = 10000
    heartbeat_interval_ms: int = 1000
    group_protocol: str = "classic"  # our consumers': or "consumer" (KIP-848)


def value_of(producer: str, partition: int, seq: int) -> str:
    return f"{producer}-{partition}-{seq}"


@dataclass
class Counters:
    sent: int = 0
    acked: int = 0
    uncertain: int = 0
    polled: int = 0
    commits: int = 0
    errors: list[str] = field(default_factory=list)

    def note_error(self, text: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(text)


@asynccontextmanager
async def started(make: Callable[[], Any]) -> AsyncIterator[Any]:
    """A client of ours, entered; started again while no node answers its bootstrap.

    Our Producer and Consumer fail fast at start when none of the bootstrap servers
    answers (as aiokafka's start() does), and an application's supervisor starts them
    again. A fault at the workload's start (seed 2453 of `make sim`: a power loss of two
    nodes and the third's connections reset as the consumer started) otherwise ended the
    run with the client's error instead of a verdict."""
    async with AsyncExitStack() as stack:
        while True:
            try:
                client = await stack.enter_async_context(make())
                break
            except KafkaConnectionError:
                await trio.sleep(BOOTSTRAP_RETRY_S)
        yield client


class Pacer:
    """`rate` events a second, by a schedule rather than a sleep per event, so that a
    stall (a fault) is not made up for by a burst larger than the run's MAX_IN_FLIGHT."""

    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = 1.0 / max(1, rate)
        self.clock = clock
        self.next = clock()

    def delay(self) -> float:
        now = self.clock()
        self.next = max(self.next + self.interval, now - 1.0)
        return max(0.0, self.next - now)


# -- producers ----------------------------------------------------------------------------

class OurProducer:
    def __init__(self, name: str, s: Settings, history: History, counters: Counters) -> None:
        self.name, self.s, self.h, self.c = name, s, history, counters

    async def run(self, stop: trio.Event) -> None:
        pacer = Pacer(self.s.rate, self.h.now)
        in_flight = trio.Semaphore(MAX_IN_FLIGHT)
        seqs = [0] * self.s.partitions
        # the answers' nursery outlives the Producer: closing it answers what is left
        async with trio.open_nursery() as nursery:
            async with started(lambda: Producer(
                    bootstrap_servers=self.s.bootstrap, acks="all", enable_idempotence=True,
                    linger_ms=5, request_timeout_ms=10000)) as producer:
                i = 0
                while not stop.is_set():
                    p = i % self.s.partitions
                    i += 1
                    value = value_of(self.name, p, seqs[p])
                    seqs[p] += 1
                    await in_flight.acquire()
                    self.h.record(self.name, INVOKE, "send", {"partition": p, "value": value})
                    self.c.sent += 1
                    try:
                        handle = await producer.send(self.s.topic, value.encode(), partition=p)
                    except Exception as e:  # noqa: BLE001 - refused: recorded as uncertain
                        self._uncertain(p, value, e)
                        in_flight.release()
                        continue
                    nursery.start_soon(self._answer, handle, p, value, in_flight)
                    with trio.move_on_after(pacer.delay()):
                        await stop.wait()
                with trio.move_on_after(60):
                    await producer.flush()

    async def _answer(self, handle: Any, p: int, value: str, in_flight: trio.Semaphore) -> None:
        try:
            meta = await handle
        except Exception as e:  # noqa: BLE001 - every delivery error is recorded
            self._uncertain(p, value, e)
        else:
            self.h.record(self.name, OK, "send",
                          {"partition": p, "value": value, "offset": meta.offset})
            self.c.acked += 1
        finally:
            in_flight.release()

    def _uncertain(self, p: int, value: str, e: BaseException) -> None:
        # an idempotent send that timed out may have been written: never a definite fail
        self.h.record(self.name, INFO, "send",
                      {"partition": p, "value": value, "error": f"{type(e).__name__}: {e}"})
        self.c.uncertain += 1
        self.c.note_error(f"{self.name}: {type(e).__name__}: {e}")


class RdkafkaProducer:
    """librdkafka's idempotent producer, run in a thread by `run_in_thread`."""

    def __init__(self, name: str, s: Settings, history: History, counters: Counters) -> None:
        self.name, self.s, self.h, self.c = name, s, history, counters

    def run(self, stop: threading.Event) -> None:
        from confluent_kafka import KafkaException, Producer as RdProducer

        producer = RdProducer({"bootstrap.servers": self.s.bootstrap, "acks": "all",
                               "enable.idempotence": True, "linger.ms": 5,
                               "message.timeout.ms": 120000, "log_level": 0})
        pacer = Pacer(self.s.rate, self.h.now)
        seqs = [0] * self.s.partitions
        i = 0

        def report(p: int, value: str) -> Callable[[Any, Any], None]:
            def on_delivery(err: Any, msg: Any) -> None:
                if err is None:
                    self.h.record(self.name, OK, "send",
                                  {"partition": p, "value": value, "offset": msg.offset()})
                    self.c.acked += 1
                else:
                    self.h.record(self.name, INFO, "send",
                                  {"partition": p, "value": value, "error": str(err)})
                    self.c.uncertain += 1
                    self.c.note_error(f"{self.name}: {err}")
            return on_delivery

        while not stop.is_set():
            p = i % self.s.partitions
            i += 1
            value = value_of(self.name, p, seqs[p])
            seqs[p] += 1
            self.h.record(self.name, INVOKE, "send", {"partition": p, "value": value})
            self.c.sent += 1
            while True:
                try:
                    producer.produce(self.s.topic, value.encode(), partition=p,
                                     on_delivery=report(p, value))
                    break
                except BufferError:
                    producer.poll(0.1)
                except KafkaException as e:
                    self.h.record(self.name, INFO, "send",
                                  {"partition": p, "value": value, "error": str(e)})
                    break
            producer.poll(pacer.delay())
        producer.flush(30)


# -- consumers ----------------------------------------------------------------------------

class _Recorder(ConsumerRebalanceListener):
    """Records the member's assignment after every change. A revocation is recorded as the
    assignment without the revoked partitions (they are still assigned while the listener
    runs): an eager rebalance that gives a member back the same partitions starts them
    again from the committed offsets, and the checkers must see that it did."""

    def __init__(self, owner: "OurGroupConsumer", consumer: Consumer) -> None:
        self.owner, self.consumer = owner, consumer

    async def on_partitions_revoked(self, partitions: Any) -> None:
        self.owner.record_assignment(self.consumer, without=partitions)

    async def on_partitions_assigned(self, partitions: Any) -> None:
        self.owner.record_assignment(self.consumer)

    async def on_partitions_lost(self, partitions: Any) -> None:
        self.owner.record_assignment(self.consumer, without=partitions)


class OurGroupConsumer:
    def __init__(self, name: str, s: Settings, history: History, counters: Counters) -> None:
        self.name, self.s, self.h, self.c = name, s, history, counters
        self._assigned: list[int] | None = None

    def record_assignment(self, consumer: Consumer, without: Any = ()) -> None:
        partitions = sorted(tp.partition for tp in set(consumer.assignment()) - set(without)
                            if tp.topic == self.s.topic)
        if partitions != self._assigned:
            self._assigned = partitions
            self.h.record(self.name, OK, "assign", {"partitions": partitions})

    async def run(self, stop: trio.Event) -> None:
        # KIP-848 members take the coordinator's assignment and timeouts
        classic: dict[str, Any] = ({
            "partition_assignment_strategy": ["roundrobin"],
            "session_timeout_ms": self.s.session_timeout_ms,
            "heartbeat_interval_ms": self.s.heartbeat_interval_ms}
            if self.s.group_protocol == "classic" else {})
        async with started(lambda: Consumer(
                bootstrap_servers=self.s.bootstrap, group_id=self.s.group,
                enable_auto_commit=False, auto_offset_reset="earliest",
                group_protocol=self.s.group_protocol, request_timeout_ms=10000,
                **classic)) as consumer:
            consumer.subscribe([self.s.topic], listener=_Recorder(self, consumer))
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS)
                # recorded before any await, so no rebalance can come between
                self.record_assignment(consumer)
                rows = [[tp.partition, r.offset, (r.value or b"").decode()]
                        for tp, records in batches.items() for r in records]
                if not rows:
                    continue
                self.h.record(self.name, OK, "poll", {"records": rows})
                self.c.polled += len(rows)
                offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
                await self._commit(consumer, offsets)

    async def _commit(self, consumer: Consumer, offsets: dict[TopicPartition, int]) -> None:
        value = {"offsets": {str(tp.partition): o for tp, o in offsets.items()}}
        self.h.record(self.name, INVOKE, "commit", value)
        try:
            await consumer.commit(offsets)
        except Exception as e:  # noqa: BLE001 - a failed commit is part of the history
            self.h.record(self.name, INFO, "commit", {**value, "error": repr(e)})
            self.c.note_error(f"{self.name} commit: {e!r}")
        else:
            self.h.record(self.name, OK, "commit", value)
            self.c.commits += 1


class RdkafkaConsumer:
    """librdkafka in the group, run in a thread by `run_in_thread`."""

    def __init__(self, name: str, s: Settings, history: History, counters: Counters) -> None:
        self.name, self.s, self.h, self.c = name, s, history, counters

    def run(self, stop: threading.Event) -> None:
        from confluent_kafka import Consumer as RdConsumer, KafkaException
        from confluent_kafka import TopicPartition as RdTopicPartition

        consumer = RdConsumer({
            "bootstrap.servers": self.s.bootstrap, "group.id": self.s.group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "roundrobin",
            "session.timeout.ms": self.s.session_timeout_ms,
            "heartbeat.interval.ms": self.s.heartbeat_interval_ms, "log_level": 0})
        assigned: list[int] = []

        def record(partitions: list[int]) -> None:
            nonlocal assigned
            if partitions != assigned:
                assigned = partitions
                self.h.record(self.name, OK, "assign", {"partitions": partitions})

        def on_assign(c: Any, tps: list[Any]) -> None:
            record(sorted(tp.partition for tp in tps))

        def on_revoke(c: Any, tps: list[Any]) -> None:
            record([])

        consumer.subscribe([self.s.topic], on_assign=on_assign, on_revoke=on_revoke,
                           on_lost=on_revoke)
        try:
            while not stop.is_set():
                msgs = consumer.consume(num_messages=500, timeout=POLL_TIMEOUT_MS / 1000)
                rows: list[tuple[Any, Any, str]] = [
                    (m.partition(), m.offset(), (m.value() or b"").decode())
                    for m in msgs if m.error() is None]
                if not rows:
                    continue
                self.h.record(self.name, OK, "poll", {"records": [list(r) for r in rows]})
                self.c.polled += len(rows)
                last: dict[int, int] = {}
                for p, o, _ in rows:
                    last[p] = o + 1
                value = {"offsets": {str(p): o for p, o in last.items()}}
                self.h.record(self.name, INVOKE, "commit", value)
                try:
                    consumer.commit(offsets=[RdTopicPartition(self.s.topic, p, o)
                                             for p, o in last.items()], asynchronous=False)
                except KafkaException as e:
                    self.h.record(self.name, INFO, "commit", {**value, "error": str(e)})
                    self.c.note_error(f"{self.name} commit: {e}")
                else:
                    self.h.record(self.name, OK, "commit", value)
                    self.c.commits += 1
        finally:
            consumer.close()


async def run_in_thread(client: Any, stop: trio.Event) -> None:
    """A thread-run client (librdkafka's) stopped by a trio Event."""
    flag = threading.Event()

    async def relay() -> None:
        try:
            await stop.wait()
        finally:  # a cancelled run too: the thread cannot be abandoned, it must end
            flag.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay)
        await trio.to_thread.run_sync(client.run, flag, abandon_on_cancel=False)
        nursery.cancel_scope.cancel()


# -- the observer -------------------------------------------------------------------------

class Observer:
    """Once a second: the group's committed offsets, every partition's leader and ISR as
    the first node that answers sees them, and how many sends were acknowledged."""

    def __init__(self, s: Settings, history: History, counters: list[Counters],
                 isr_of: Callable[[], dict[int, dict[str, Any]] | None],
                 isr_blocks: bool = True) -> None:
        """`isr_of` is run in a thread when it blocks (it asks a real cluster), in the
        task otherwise (the simulation reads its nodes' state)."""
        self.s, self.h, self.counters, self.isr_of = s, history, counters, isr_of
        self.isr_blocks = isr_blocks

    async def run(self, stop: trio.Event) -> None:
        tps = [TopicPartition(self.s.topic, p) for p in range(self.s.partitions)]
        last_acked = 0
        async with started(lambda: Consumer(
                bootstrap_servers=self.s.bootstrap, group_id=self.s.group,
                enable_auto_commit=False, request_timeout_ms=5000)) as consumer:
            while not stop.is_set():
                with trio.move_on_after(1.0):
                    await stop.wait()
                acked = sum(c.acked for c in self.counters)
                self.h.record("observer", OK, "rate", {"acked": acked - last_acked})
                last_acked = acked
                isr = (await trio.to_thread.run_sync(self.isr_of) if self.isr_blocks
                       else self.isr_of())
                if isr is not None:
                    self.h.record("observer", OK, "isr",
                                  {"partitions": {str(p): v for p, v in isr.items()}})
                with trio.move_on_after(3.0):
                    try:
                        offsets = {}
                        for tp in tps:
                            committed = await consumer.committed(tp)
                            if committed is not None:
                                offsets[str(tp.partition)] = committed
                    except Exception:  # noqa: BLE001 - no coordinator now: ask again later
                        continue
                    self.h.record("observer", OK, "offsets", {"offsets": offsets})
