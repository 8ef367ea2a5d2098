"""The public Producer: send records, await their delivery.

Owns: `Producer` (config, partitioning, buffer accounting, the records that wait for their
topic's metadata, and the lifetime of the background tasks: Cluster.run, Sender.run and the
metadata watcher).

    async with Producer(bootstrap_servers="127.0.0.1:9092", linger_ms=5) as producer:
        handle = await producer.send("orders", b"v", key=b"k", headers=[("h", b"1")])
        meta = await handle              # RecordMetadata(topic, partition, offset, timestamp)
        await producer.send_and_wait("orders", b"v2")
        await producer.flush()

Partitioning: an explicit `partition` wins; a keyed record goes to
toPositive(murmur2(key)) % partitions (client.partitioner, byte for byte Java's); an unkeyed
record goes to the topic's *sticky* partition (KIP-480, Java 2.4+): one partition, chosen at
random among those with a leader, is used until the record would start a new batch there
(the previous one filled up or was sent), then another is chosen. Unkeyed records thus fill
whole batches instead of one small batch per partition.

A record whose topic is not in the metadata yet waits (bounded by max_block_ms, Java's
max.block.ms) while metadata is refreshed every retry_backoff_ms; with the topic still
unknown at the deadline its handle fails with UnknownTopicOrPartitionError
(KafkaTimeoutError naming the last connection error if the broker never said). An answer
no refresh will change (TopicAuthorizationFailedError, InvalidTopicError) fails the
records of the topic as soon as it comes, as Java's producer throws it from send.
`send` waits only while buffer_memory is full, at most max_block_ms. Entering the
`async with` connects to a bootstrap address first and fails at once with
KafkaConnectionError "unable to bootstrap from [...]" when none answers
(ConnectionPool.bootstrap). key_serializer / value_serializer (config) turn the objects
given to send() into bytes; send(timestamp_ms=) sets a record's CreateTime;
partitions_for(topic) waits for the topic's metadata, at most max_block_ms. Leaving the
`async with` block normally
delivers everything queued first (as Java's close()); leaving it with an exception fails
what is still queued with KafkaError.

Transactions (KIP-98), with `transactional_id=` (which implies idempotence and acks=all):

    async with Producer(bootstrap_servers=..., transactional_id="orders-tx") as producer:
        async with producer.transaction():       # begin; commit, or abort on an exception
            await producer.send("orders", b"v")
            await producer.send_offsets_to_transaction({tp: 42}, consumer.group_metadata())

Entering the `async with` finds the transaction coordinator and gets the producer id and
epoch (InitProducerId with the transactional id), which fences any older producer of the
id. begin_transaction() / commit_transaction() / abort_transaction() are Java's calls;
commit flushes, then ends the transaction (EndTxn) if the coordinator knows of it (a
partition or offsets were added; an empty transaction needs no request). A record that
fails inside a transaction makes it abortable: send and commit then raise
TransactionAbortableError (caused by that failure) until abort_transaction(), which fails
what is still unsent (TransactionAbortedError), waits for what is in flight and ends the
transaction; the producer then goes on. ProducerFencedError and the other
FatalTransactionErrors end the producer: every later call raises them. The states and
rules are client/producer/transaction_manager.py's; the requests transactions.py's.
Leaving the `async with` with a transaction open aborts it.
"""

from __future__ import annotations

import logging
import random
import time
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, AsyncIterator, Iterable, Mapping

import trio

from client.cluster import Cluster
from client.config import ProducerConfig, check_config
from client.connection import ConnectionPool, background_nursery
from client.errors import (
    IllegalStateError, KafkaError, KafkaTimeoutError, TransactionAbortedError, error_class,
    for_code,
)
from client.partitioner import partition_for_key
from client.producer.accumulator import (
    BATCH_OVERHEAD, RECORD_OVERHEAD, RECORD_OVERHEAD_MAX, ProducerBatch, RecordAccumulator,
    record_size,
)
from client.producer.sender import DeliveryHandle, RecordMetadata, Sender
from client.producer.transaction_manager import TransactionManager, TransactionState
from client.producer.transactions import Transactions
from client.types import ConsumerGroupMetadata, TopicPartition
from protocol.errors import ErrorCode

__all__ = ["Producer", "RecordMetadata", "DeliveryHandle"]

log = logging.getLogger("minibroker.client.producer")

# the states in which leaving the producer aborts the transaction
_OPEN = (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR,
         TransactionState.ABORTING_TRANSACTION)

Headers = Iterable[tuple[str, bytes | None]]


def _check_timestamp(timestamp_ms: Any) -> int:
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < 0:
        raise ValueError(f"timestamp_ms must be an int >= 0 (ms since the epoch), "
                         f"got {timestamp_ms!r}")
    return timestamp_ms


def _as_bytes(name: str, data: Any) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes or None, got {type(data).__name__}")
    return bytes(data)


class _Waiting:
    __slots__ = ("value", "key", "headers", "partition", "handle", "size", "created_ms",
                 "generation")

    def __init__(self, value, key, headers, partition, handle, size, created_ms, generation):
        self.value, self.key, self.headers, self.partition = value, key, headers, partition
        self.handle, self.size, self.created_ms = handle, size, created_ms
        self.generation = generation  # the metadata refreshes done when it began to wait


class Producer:
    def __init__(self, bootstrap_servers: str | list[str] = "localhost:9092", **config: Any):
        self.config: ProducerConfig = check_config(  # type: ignore[assignment]
            "producer", bootstrap_servers=bootstrap_servers, **config)
        self._pool: ConnectionPool | None = None
        self._cluster: Cluster | None = None
        self._sender: Sender | None = None
        self._exit_stack: AsyncExitStack | None = None
        self._acc = RecordAccumulator(
            batch_size=self.config.batch_size, linger_ms=self.config.linger_ms,
            delivery_timeout_ms=self.config.delivery_timeout_ms,
            retry_backoff_ms=self.config.retry_backoff_ms)
        self._sticky: dict[str, int] = {}
        # topic -> (its TopicMetadata, partition numbers, TopicPartition per number): the
        # per-record lookups, kept while the metadata cache holds the same TopicMetadata
        self._routes: dict[str, tuple[Any, list[int], dict[int, TopicPartition]]] = {}
        self._topics: set[str] = set()  # handed to the Cluster to track
        self._waiting: dict[str, list[_Waiting]] = {}
        self._waiting_changed = trio.Event()
        # a dict for its order (a set of handles iterates by address): closing fails them,
        # and flush awaits them, in the order they were sent
        self._pending: dict[DeliveryHandle, None] = {}
        self._buffered = 0
        self._buffer_freed: trio.Event | None = None  # made when a send waits for room
        self._closed = False
        self._serializing = (self.config.key_serializer is not None
                             or self.config.value_serializer is not None)
        self._txn: TransactionManager | None = (
            None if self.config.transactional_id is None
            else TransactionManager(self.config.transactional_id))
        self._transactions: Transactions | None = None

    # -- lifetime ----------------------------------------------------------------------

    async def __aenter__(self) -> "Producer":
        # Whatever was entered is exited, in reverse order, if a later step raises (a
        # nursery left open corrupts trio's nursery stack); on success the stack is kept
        # for __aexit__, which unwinds it: stop (flush), background tasks, pending
        # handles, connections.
        async with AsyncExitStack() as stack:
            pool = await stack.enter_async_context(ConnectionPool(self.config))
            self._pool = pool
            await pool.bootstrap()  # fail fast, as aiokafka's start(), when none answers
            stack.callback(self._fail_pending)
            self._cluster = Cluster(pool, self.config, topics=(),
                                    allow_auto_topic_creation=self.config.allow_auto_create_topics)
            self._sender = Sender(self.config, pool, self._cluster, self._acc)
            self._sender.on_delivered = self._on_delivered
            nursery = await stack.enter_async_context(background_nursery())
            stack.push_async_exit(self._stop)
            await nursery.start(self._cluster.run)
            await nursery.start(self._sender.run)
            nursery.start_soon(self._watch_metadata)
            if self._txn is not None:
                self._transactions = Transactions(self.config, pool, self._txn, self._acc)
                self._sender.txn, self._sender.transactions = self._txn, self._transactions
                await self._transactions.init()
            self._exit_stack = stack.pop_all()
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    async def _stop(self, exc_type, exc, tb) -> bool:
        """The first step of closing: flush (unless leaving on an exception), then fail
        what is still queued. A transaction left open is aborted first."""
        try:
            # as Java's close: bounded by request_timeout_ms
            await self._abort_quietly(self.config.request_timeout_ms, "on close")
            if exc_type is None:
                await self.flush()
        finally:
            self._closed = True
            error = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer was closed")
            if self._sender is not None:
                self._sender.fail_all(error)
            for topic in list(self._waiting):
                for w in self._waiting.pop(topic):
                    w.handle._fail(error.clone())
        return False

    def _fail_pending(self) -> None:
        """Once the background tasks are gone: fail every handle still waiting."""
        error = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer was closed")
        for handle in list(self._pending):
            handle._fail(error.clone())
        self._pool = None

    # -- sending -----------------------------------------------------------------------

    async def send(self, topic: str, value: Any, key: Any = None,
                   headers: Headers | None = None,
                   partition: int | None = None,
                   timestamp_ms: int | None = None) -> DeliveryHandle:
        """Queue a record; returns its delivery handle (`await handle` -> RecordMetadata).
        Waits only while buffer_memory is full. `key` and `value` are bytes, or what
        key_serializer / value_serializer take; `timestamp_ms` is the record's CreateTime
        (default: now)."""
        if self._sender is None or self._closed:
            raise RuntimeError("the Producer is not open (use `async with`)")
        if self._txn is not None:
            self._txn.check_send()  # inside a transaction that may still commit
        if not isinstance(topic, str) or not topic:
            raise TypeError("topic must be a non-empty str")
        if self._serializing:
            key, value = self._serialize(key, value)
        # bytes (the common case) passes as it is; send() runs once per record
        if value is not None and type(value) is not bytes:
            value = _as_bytes("value", value)
        if key is not None and type(key) is not bytes:
            key = _as_bytes("key", key)
        if headers:
            hdrs = [(k, None if v is None else bytes(v)) for k, v in headers]
            size = record_size(key, value, hdrs)
        else:  # record_size's sum, inline: this runs once per record
            hdrs = []
            size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
        timestamp = int(time.time() * 1000) if timestamp_ms is None else \
            _check_timestamp(timestamp_ms)
        handle = DeliveryHandle(topic, timestamp, self._on_done)
        config = self.config
        # the estimate may fall short of the real framing by up to the difference: a
        # record near max_request_size is measured at its longest
        if size + BATCH_OVERHEAD + RECORD_OVERHEAD_MAX - RECORD_OVERHEAD > \
                config.max_request_size or size > config.buffer_memory:
            handle._fail(for_code(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"the record is {size} bytes, more than max_request_size "
                f"{self.config.max_request_size} or buffer_memory {self.config.buffer_memory}"))
            return handle
        if self._buffered and self._buffered + size > config.buffer_memory:
            await self._wait_for_buffer(size)
        self._buffered += size
        handle._size = size
        self._pending[handle] = None
        if topic not in self._topics:  # send() is per record: skip the set work after once
            self._topics.add(topic)
            self.cluster.add_topics([topic])
        batch = self._place(topic, value, key, hdrs, partition, handle, size)
        if batch is None or batch.full or len(batch.handles) == 1:
            # a checkpoint per batch (one filled up, or one was started, which closes the
            # previous one): the sender sends it while the next one fills, and a loop of
            # sends can be cancelled; and per record while they wait for metadata, so
            # that the metadata can come
            await trio.lowlevel.checkpoint()
        return handle

    async def _wait_for_buffer(self, size: int) -> None:
        """Wait until `size` more bytes fit in buffer_memory, at most max_block_ms."""
        with trio.move_on_after(self.config.max_block_ms / 1000):
            while self._buffered and self._buffered + size > self.config.buffer_memory:
                if self._buffer_freed is None:
                    self._buffer_freed = trio.Event()
                await self._buffer_freed.wait()
                if self._closed:
                    raise RuntimeError("the Producer was closed")
            return
        raise KafkaTimeoutError(f"failed to allocate {size} bytes within max_block_ms="
                                f"{self.config.max_block_ms}: buffer_memory "
                                f"{self.config.buffer_memory} is full of undelivered records")

    async def send_and_wait(self, topic: str, value: Any, key: Any = None,
                            headers: Headers | None = None,
                            partition: int | None = None,
                            timestamp_ms: int | None = None) -> RecordMetadata:
        handle = await self.send(topic, value, key=key, headers=headers, partition=partition,
                                 timestamp_ms=timestamp_ms)
        return await handle

    async def flush(self) -> None:
        """Send everything queued now (linger_ms is skipped) and wait for every handle."""
        handles = list(self._pending)
        if not handles:
            return
        self._acc.flushing += 1
        try:
            if self._sender is not None:
                self._sender.wakeup()
            for handle in handles:
                # awaiting a done handle is still a trip through the scheduler: skip those
                if not handle.done():
                    await handle._settled()
        finally:
            self._acc.flushing -= 1

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            raise RuntimeError("the Producer is not open (use `async with`)")
        return self._cluster

    # -- internals ---------------------------------------------------------------------

    def _now_ms(self) -> float:
        return trio.current_time() * 1000

    def _on_done(self, handle: DeliveryHandle) -> None:
        if self._txn is not None and handle._error is not None:
            self._txn.record_failed(handle._error)  # the transaction can only abort now
        if handle in self._pending:
            del self._pending[handle]
            self._buffered -= handle._size
            freed, self._buffer_freed = self._buffer_freed, None
            if freed is not None:
                freed.set()

    def _on_delivered(self, handles: list[DeliveryHandle]) -> None:
        """_on_done for the handles of a delivered batch, in one call (the sender's hook)."""
        pending = self._pending
        size = 0
        for handle in handles:
            if handle in pending:
                del pending[handle]
                size += handle._size
        self._buffered -= size
        freed, self._buffer_freed = self._buffer_freed, None
        if freed is not None:
            freed.set()

    def _route(self, topic: str, w: _Waiting) -> None:
        """Partition and append a record that waited for its topic's metadata."""
        self._place(topic, w.value, w.key, w.headers, w.partition, w.handle, w.size,
                    w.created_ms)

    def _topic_route(self, topic: str
                     ) -> tuple[Any, list[int], dict[int, TopicPartition]] | None:
        """The topic's partitions and TopicPartitions from the metadata cache (None: not
        known), rebuilt only when the cache holds a new TopicMetadata for it."""
        known = self.cluster.metadata.topics.get(topic)
        route = self._routes.get(topic)
        if route is not None and route[0] is known:
            return route
        if known is None:
            self._routes.pop(topic, None)
            return None
        partitions = sorted(known.partitions)
        route = (known, partitions, {p: TopicPartition(topic, p) for p in partitions})
        self._routes[topic] = route
        self._sticky.pop(topic, None)  # partitions and leaders may have changed
        return route

    def _place(self, topic: str, value: bytes | None, key: bytes | None, headers: list,
               partition: int | None, handle: DeliveryHandle, size: int,
               created_ms: float | None = None) -> ProducerBatch | None:
        """Partition and append the record, or hold it until the topic's metadata comes;
        returns the batch it went to (None: waiting, or failed)."""
        route = self._routes.get(topic)
        if route is None or route[0] is not self.cluster.metadata.topics.get(topic):
            route = self._topic_route(topic)
        if route is None or self._waiting.get(topic):
            self._waiting.setdefault(topic, []).append(_Waiting(
                value, key, headers, partition, handle, size,
                self._now_ms() if created_ms is None else created_ms, self.cluster.generation))
            self.cluster.request_update()
            self._waiting_changed.set()
            return None
        _, partitions, tps = route
        timestamp = handle.timestamp
        acc = self._acc
        if partition is not None:
            if not 0 <= partition < len(partitions):
                handle._fail(for_code(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"partition {partition} of {topic} does not exist "
                    f"({len(partitions)} partitions)"))
                return None
        elif key is not None:
            partition = partition_for_key(key, len(partitions))
        else:
            current = self._sticky.get(topic)
            if current is not None:  # the common case: the sticky partition's open batch
                batch = acc.try_append(tps[current], timestamp, key, value, headers, handle,
                                       size)
                if batch is not None:
                    handle.partition = current
                    if batch.full:
                        self._wakeup()
                    return batch
            partition = self._next_sticky(topic, partitions, current)
        handle.partition = partition
        batch = acc.append(tps[partition], timestamp, key, value, headers, handle,
                           self._now_ms() if created_ms is None else created_ms, size)
        if batch.record_count == 1 and self._txn is not None:
            self._txn.maybe_add_partition(tps[partition])  # before its first batch goes
        if batch.full or batch.record_count == 1:
            self._wakeup()
        return batch

    def _wakeup(self) -> None:
        assert self._sender is not None  # records are placed only while open
        self._sender.wakeup()

    def _next_sticky(self, topic: str, partitions: list[int], current: int | None) -> int:
        """A new sticky partition (KIP-480): at random among those with a leader, other
        than the current one, which would start a new batch."""
        md = self.cluster.metadata
        available = [p for p in partitions if md.leader_for(topic, p) is not None] or partitions
        choices = [p for p in available if p != current] or available
        chosen = random.choice(choices)
        self._sticky[topic] = chosen
        return chosen

    async def _watch_metadata(self) -> None:
        """Place the records that wait for their topic after every metadata refresh; ask
        for another refresh every retry_backoff_ms while any wait; fail them at their
        delivery timeout."""
        cluster = self.cluster
        while True:
            generation = cluster.generation
            self._waiting_changed = trio.Event()
            deadline = None
            if self._waiting:
                oldest = min(w.created_ms for ws in self._waiting.values() for w in ws)
                deadline = (oldest + self.config.max_block_ms) / 1000
                deadline = min(deadline, trio.current_time() +
                               self.config.retry_backoff_ms / 1000)
            with trio.move_on_at(deadline if deadline is not None else float("inf")):
                async with trio.open_nursery() as nursery:
                    async def refreshed(generation: int) -> None:
                        await cluster.wait_for_refresh(generation)
                        nursery.cancel_scope.cancel()

                    async def changed():
                        await self._waiting_changed.wait()
                        nursery.cancel_scope.cancel()
                    nursery.start_soon(refreshed, generation)
                    nursery.start_soon(changed)
            self._place_waiting()
            if self._waiting:
                cluster.request_update()
            assert self._sender is not None  # this task runs only while open
            self._sender.wakeup()

    def _place_waiting(self) -> None:
        now = self._now_ms()
        md = self.cluster.metadata
        generation = self.cluster.generation
        for topic in list(self._waiting):
            waiting = self._waiting[topic]
            if md.partitions_for(topic) is not None:
                del self._waiting[topic]
                for w in waiting:
                    self._route(topic, w)
                continue
            code = md.topic_errors.get(topic)
            if code is not None and not code.retriable:
                # TOPIC_AUTHORIZATION_FAILED, INVALID_TOPIC_EXCEPTION: retrying will not change
                # the answer, so a record fails on the first one given since it began to
                # wait (not an older one: an ACL may have been added since), as Java's
                # Metadata.maybeThrowExceptionForTopic fails send
                refused = [w for w in waiting if w.generation < generation]
                for w in refused:
                    w.handle._fail(for_code(code, f"metadata for topic {topic}"))
                waiting = [w for w in waiting if w.generation >= generation]
                if not waiting:
                    del self._waiting[topic]
                    continue
                self._waiting[topic] = waiting
            expired = [w for w in waiting if now >= w.created_ms + self.config.max_block_ms]
            if not expired:
                continue
            self._waiting[topic] = [w for w in waiting if w not in expired]
            if not self._waiting[topic]:
                del self._waiting[topic]
            last = self.cluster.last_error
            for w in expired:
                text = (f"topic {topic} not present in metadata after "
                        f"{self.config.max_block_ms} ms (max_block_ms)")
                if code is not None:
                    w.handle._fail(for_code(code, text))
                elif last is not None:  # the real cause: no broker answered
                    w.handle._fail(KafkaTimeoutError(f"{text}: {last}"))
                else:
                    w.handle._fail(KafkaTimeoutError(text))

    # -- what an aiokafka or Java user reaches for: serializers, partitions_for ----------

    def _serialize(self, key: Any, value: Any) -> tuple[Any, Any]:
        """key_serializer / value_serializer on a key / value that is not None."""
        ks, vs = self.config.key_serializer, self.config.value_serializer
        if ks is not None and key is not None:
            key = ks(key)
        if vs is not None and value is not None:
            value = vs(value)
        return key, value

    async def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of `topic`, waiting for its metadata (the topic is
        tracked from now on and auto-created where the broker allows it) up to
        max_block_ms (Java's max.block.ms); then KafkaTimeoutError, or the
        broker's error for the topic (UnknownTopicOrPartitionError, ...)."""
        cluster = self.cluster
        if topic not in self._topics:
            self._topics.add(topic)
            cluster.add_topics([topic])
        generation = None
        with trio.move_on_after(self.config.max_block_ms / 1000):
            while (partitions := cluster.metadata.partitions_for(topic)) is None:
                code = cluster.metadata.topic_errors.get(topic)
                # INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED, ... once answered
                # after the call began (an older refusal may no longer hold)
                if generation is not None and code is not None and not code.retriable:
                    raise for_code(code, f"metadata for topic {topic}")
                generation = cluster.generation
                cluster.request_update()
                await cluster.wait_for_refresh(generation)
            return set(partitions)
        code = cluster.metadata.topic_errors.get(topic)
        text = (f"topic {topic} not present in metadata after {self.config.max_block_ms} ms "
                "(max_block_ms)")
        raise for_code(code, text) if code is not None else KafkaTimeoutError(text)

    # -- transactions (KIP-98) --------------------------------------------------------------

    def _transactional(self) -> tuple[TransactionManager, Transactions]:
        if self._txn is None:
            raise IllegalStateError("a transactional call on a producer without a "
                                    "transactional_id: Producer(..., transactional_id=...)")
        if self._transactions is None or self._closed:
            raise RuntimeError("the Producer is not open (use `async with`)")
        return self._txn, self._transactions

    def begin_transaction(self) -> None:
        """Open a transaction: records sent from now on are committed or aborted together.
        IllegalStateError if one is open already."""
        txn, _ = self._transactional()
        txn.begin()

    async def commit_transaction(self) -> None:
        """Deliver every record of the transaction, then commit it (EndTxn). Raises
        TransactionAbortableError when a record of it failed (abort_transaction() then),
        a FatalTransactionError when the producer was fenced; KafkaTimeoutError when the
        coordinator did not answer within max_block_ms, and calling it again goes on."""
        txn, transactions = self._transactional()
        txn.begin_commit()
        await self.flush()
        await transactions.wait_for_adds()
        txn.maybe_fail()  # a record failed while flushing: abortable now
        if txn.started:
            await transactions.end(commit=True)
        txn.complete()

    async def abort_transaction(self) -> None:
        """Abort the transaction: records not sent yet fail with TransactionAbortedError,
        those in flight are waited for, and the coordinator is told (EndTxn) if it knows
        of the transaction. Allowed after an abortable error; a FatalTransactionError is
        raised again."""
        txn, transactions = self._transactional()
        if txn.state is TransactionState.INITIALIZING and txn.epoch_bump_required:
            await transactions.bump_epoch()  # what the last abort did not finish
            return
        txn.begin_abort()
        self._fail_waiting(TransactionAbortedError())
        await self.flush()  # the sender fails what is queued; in-flight requests come back
        await transactions.wait_for_adds()
        if txn.started:
            await transactions.end(commit=False)
        # a batch that carried a sequence and was never acknowledged left a gap: a new
        # epoch restarts the sequences (KIP-360), before the next transaction
        txn.epoch_bump_required = self._acc.needs_reset
        txn.complete()
        if txn.state is TransactionState.INITIALIZING:
            await transactions.bump_epoch()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator["Producer"]:
        """`async with producer.transaction():` begins a transaction, commits it when the
        block ends normally and aborts it when the block raises, or when the commit
        raises TransactionAbortableError: no transaction is left open but a fenced one.
        The block's (or the commit's) exception is what propagates; a failed abort is
        logged."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            await self._abort_quietly(self.config.max_block_ms, "after an error")
            raise
        try:
            await self.commit_transaction()
        except error_class(ErrorCode.TRANSACTION_ABORTABLE):
            await self._abort_quietly(self.config.max_block_ms, "after a failed commit")
            raise

    async def send_offsets_to_transaction(
            self, offsets: Mapping[TopicPartition, Any],
            group_id_or_metadata: str | ConsumerGroupMetadata | Any) -> None:
        """Commit a consumer group's offsets as part of the transaction (consume, process,
        produce exactly once): `offsets` maps each TopicPartition to the offset of the next
        record to consume (an int, an (offset, metadata) pair, or an object with .offset and
        .metadata); the group is `consumer.group_metadata()` (its generation and member id
        let the coordinator refuse a zombie member) or a group id. The offsets count when
        the transaction commits and are dropped if it aborts."""
        txn, transactions = self._transactional()
        txn.maybe_fail()
        if txn.state is not TransactionState.IN_TRANSACTION:
            raise IllegalStateError(
                f"transactional id {txn.transactional_id!r}: offsets go into an open "
                f"transaction (call begin_transaction() first; now {txn.state.value})")
        group = _group_metadata(group_id_or_metadata)
        entries: dict[TopicPartition, tuple[int, str | None]] = {}
        for tp, value in offsets.items():
            if isinstance(value, int) and not isinstance(value, bool):
                offset, metadata = value, ""
            elif isinstance(value, tuple):
                offset, metadata = value
            else:
                offset, metadata = value.offset, getattr(value, "metadata", "")
            if offset < 0:
                raise ValueError(f"offset must be >= 0, got {offset} for {tp}")
            entries[TopicPartition(tp[0], tp[1])] = (offset, metadata)
        if entries:
            await transactions.send_offsets(entries, group)

    async def _abort_quietly(self, budget_ms: int, why: str) -> None:
        """Abort an open transaction shielded from a cancellation and bounded by
        `budget_ms`; a failure is only logged (the coordinator aborts the transaction after
        transaction_timeout_ms anyway)."""
        txn = self._txn
        if txn is None or txn.state not in _OPEN:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_after(budget_ms / 1000) as scope:
                try:
                    await self.abort_transaction()
                except KafkaError as e:
                    log.warning("aborting the transaction of %r %s failed: %s",
                                self.config.transactional_id, why, e)
            if scope.cancelled_caught:
                log.warning("aborting the transaction of %r %s took longer than %d ms: left "
                            "to the coordinator's transaction timeout",
                            self.config.transactional_id, why, budget_ms)

    def _fail_waiting(self, error: KafkaError) -> None:
        """Fail the records that wait for their topic's metadata."""
        for topic in list(self._waiting):
            for w in self._waiting.pop(topic):
                w.handle._fail(error.clone())


def _group_metadata(value: Any) -> ConsumerGroupMetadata:
    """A group id, or what Consumer.group_metadata() returns (or any object with its
    fields, as aiokafka's and Java's), as the ConsumerGroupMetadata TxnOffsetCommit sends."""
    if isinstance(value, str):
        if not value:
            raise ValueError("group id must not be empty")
        return ConsumerGroupMetadata(value, -1, "", None)
    try:
        return ConsumerGroupMetadata(value.group_id, value.generation_id, value.member_id,
                                     getattr(value, "group_instance_id", None))
    except AttributeError:
        raise TypeError(f"expected a group id or a ConsumerGroupMetadata, got "
                        f"{type(value).__name__}") from None
