"""The transactional workload: consume-transform-produce, exactly once, under faults.

Owns: `TxnCopier`, our read_committed Consumer in the copiers' group and our
transactional Producer, which copies each record of the source topic to the same
partition of the sink topic (`sink_of`) inside a transaction that also commits the
consumed offsets (send_offsets_to_transaction), a few records at a time; and
`output_value` / `parse_output`, the sink record's value, which names the transaction and
the input it came from, so the checkers (harness.chaos.txn_checker) can judge the final
reads alone.

Each transaction is recorded in the History (f "txn"): an invoke with its tag and outputs,
then ok (committed), fail (aborted: deliberately, a fraction `abort_ratio` of them, or
after an abortable error) or info (the outcome is unknown: the commit raised something
else, or the copier was stopped mid-commit). After a deliberate or abortable abort the
copier seeks back and copies the same records again; after anything else it starts
again with a new consumer and producer, as an application's supervisor would: the new
producer (same transactional id) fences the old one and the new consumer resumes from the
group's committed offsets, which are exactly those of the committed outputs.
"""

from __future__ import annotations

import random
from typing import Any

import trio

from client import Consumer, Producer, TopicPartition
from client.errors import error_class
from harness.chaos.history import FAIL, INFO, INVOKE, OK, History
from harness.chaos.workload import POLL_TIMEOUT_MS, Counters, Settings, started

from protocol.errors import ErrorCode

MAX_RECORDS = 10  # per transaction, by default: the simulation's producers send 40 a second
TransactionAbortableError = error_class(ErrorCode.TRANSACTION_ABORTABLE)


def sink_of(topic: str) -> str:
    return f"{topic}-out"


def txn_group_of(group: str) -> str:
    return f"{group}-txn"


def output_value(tag: str, partition: int, offset: int, value: str) -> str:
    return f"{tag}|{partition}:{offset}:{value}"


def parse_output(text: str) -> tuple[str, int, int, str]:
    """(transaction tag, source partition, source offset, source value)."""
    tag, _, rest = text.partition("|")
    partition, offset, value = rest.split(":", 2)
    return tag, int(partition), int(offset), value


class TxnCopier:
    def __init__(self, name: str, s: Settings, history: History, counters: Counters,
                 rng: random.Random, abort_ratio: float = 0.2,
                 max_records: int = MAX_RECORDS) -> None:
        self.name, self.s, self.h, self.c = name, s, history, counters
        self.rng = rng
        self.max_records = max_records
        self.abort_ratio = abort_ratio
        self._txns = 0

    async def run(self, stop: trio.Event) -> None:
        while not stop.is_set():
            try:
                await self._copy(stop)
            except Exception as e:  # noqa: BLE001  a client that failed: start again
                self.c.note_error(f"{self.name}: {type(e).__name__}: {e}")
                with trio.move_on_after(1):
                    await stop.wait()

    async def _copy(self, stop: trio.Event) -> None:
        s = self.s
        async with started(lambda: Consumer(
                bootstrap_servers=s.bootstrap, group_id=txn_group_of(s.group),
                isolation_level="read_committed", enable_auto_commit=False,
                auto_offset_reset="earliest", request_timeout_ms=10000,
                partition_assignment_strategy=["roundrobin"],
                session_timeout_ms=s.session_timeout_ms,
                heartbeat_interval_ms=s.heartbeat_interval_ms)) as consumer, \
                started(lambda: Producer(bootstrap_servers=s.bootstrap,
                                         transactional_id=self.name,
                                         request_timeout_ms=10000,
                                         transaction_timeout_ms=30000)) as producer:
            consumer.subscribe([s.topic])
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS,
                                                 max_records=self.max_records)
                if not batches:
                    continue
                if not await self._transaction(consumer, producer, batches):
                    return  # outcome unknown: start again from the committed offsets

    async def _transaction(self, consumer: Consumer, producer: Producer,
                           batches: dict[TopicPartition, list[Any]]) -> bool:
        """One transaction of the polled records; False when its outcome is unknown."""
        tag = f"{self.name}.{self._txns}"
        self._txns += 1
        outputs: list[tuple[int, str]] = [
            (tp.partition, output_value(tag, tp.partition, r.offset, (r.value or b"").decode()))
            for tp, records in batches.items() for r in records]
        offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
        value = {"tag": tag, "outputs": [o for _p, o in outputs],
                 "offsets": {str(tp.partition): o for tp, o in offsets.items()}}
        abort = self.rng.random() < self.abort_ratio
        self.h.record(self.name, INVOKE, "txn", value)
        self.c.sent += len(outputs)
        try:
            producer.begin_transaction()
            for partition, text in outputs:
                await producer.send(sink_of(self.s.topic), text.encode(), partition=partition)
            await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            if abort:
                await producer.abort_transaction()
        except TransactionAbortableError as e:
            self.c.note_error(f"{self.name}: {e!r}")
            try:
                await producer.abort_transaction()
            except Exception as e2:  # noqa: BLE001  not even the abort: outcome unknown
                self.h.record(self.name, INFO, "txn", {**value, "error": repr(e2)})
                return False
            abort = True
        except Exception as e:  # noqa: BLE001  fenced, timed out, ...: outcome unknown
            self.h.record(self.name, INFO, "txn", {**value, "error": repr(e)})
            return False
        if abort:
            self.h.record(self.name, FAIL, "txn", value)
            for tp, records in batches.items():
                consumer.seek(tp, records[0].offset)
            return True
        try:
            await producer.commit_transaction()
        except TransactionAbortableError as e:
            self.c.note_error(f"{self.name}: {e!r}")
            try:
                await producer.abort_transaction()
            except Exception as e2:  # noqa: BLE001
                self.h.record(self.name, INFO, "txn", {**value, "error": repr(e2)})
                return False
            self.h.record(self.name, FAIL, "txn", value)
            for tp, records in batches.items():
                consumer.seek(tp, records[0].offset)
            return True
        except BaseException as e:
            # a commit cut short (an error, or the run stopping) may have committed
            self.h.record(self.name, INFO, "txn", {**value, "error": repr(e)})
            if isinstance(e, Exception):
                return False
            raise
        self.h.record(self.name, OK, "txn", value)
        self.c.acked += len(outputs)
        self.c.commits += 1
        return True


async def _read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[str]:
    """Every value of `topic` a reader with `isolation` gets, partition by partition, up
    to the end that isolation level sees (the LSO for read_committed)."""
    values: list[str] = []
    async with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                        isolation_level=isolation, request_timeout_ms=10000) as consumer:
        for p in range(partitions):
            tp = TopicPartition(topic, p)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(timeout_ms=1000)
                values += [(r.value or b"").decode() for r in batch.get(tp, [])]
    return values


async def final_txn_read(bootstrap: str, topic: str, partitions: int, group: str,
                         history: History, timeout_s: float) -> None:
    """Record (process "final", f "txn-read") the sink as a read_committed and a
    read_uncommitted reader see it, and the copiers' group's committed offsets of the
    source, for harness.chaos.txn_checker.check_final."""
    with trio.move_on_after(timeout_s):
        committed = await _read_all(bootstrap, sink_of(topic), partitions, "read_committed")
        everything = await _read_all(bootstrap, sink_of(topic), partitions, "read_uncommitted")
        offsets: dict[str, int] = {}
        async with Consumer(bootstrap_servers=bootstrap, group_id=group,
                            enable_auto_commit=False, request_timeout_ms=10000) as reader:
            for p in range(partitions):
                offset = await reader.committed(TopicPartition(topic, p))
                offsets[str(p)] = -1 if offset is None else offset
        history.record("final", OK, "txn-read", {"committed": committed,
                                                 "everything": everything,
                                                 "offsets": offsets})
