"""The sender: the trio task that moves ready batches from the accumulator to the brokers.

Owns: `RecordMetadata` (what a delivered record's handle gives), `DeliveryHandle` (the
awaitable returned by Producer.send) and `Sender`.

One loop (`Sender.run`) does, each time it is woken (an append filled a batch, a response
came back, metadata changed) or a linger / backoff / delivery timer is due:
1. with idempotence, gets a producer id first (InitProducerId, to the least-loaded broker),
   and a bumped epoch when the accumulator reports a sequence gap (KIP-360, once nothing is
   in flight);
2. fails batches past delivery_timeout_ms (KafkaTimeoutError naming the last error seen);
3. groups the ready partitions by leader (unknown leader: asks for a metadata update) and,
   for every broker with fewer than max_in_flight_requests_per_connection requests out,
   drains one batch per partition into one Produce request, sent in its own task so that
   requests to one broker are pipelined on its connection.

A response is handled per partition: success resolves the handles (offset = base offset +
index); a retriable error (or a lost connection) puts the batch back with retry_backoff_ms,
keeping its sequence, and requests a metadata update when the error says the cache is stale
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...); NOT_ENOUGH_REPLICAS and the
other retriable codes are retried until delivery_timeout_ms. With idempotence, as Java's
producer: OUT_OF_ORDER_SEQUENCE_NUMBER is retried, after an epoch bump when no earlier
batch of the partition is unacknowledged (the broker lost the sequence); UNKNOWN_PRODUCER_ID
and INVALID_PRODUCER_EPOCH bump the epoch and retry, re-sequenced. Anything else, or
`retries` used up, fails the batch's handles with the typed error. acks=0 sends the request
with expect_response=False and resolves the handles with offset -1 once it is queued.

A transactional producer's sender (`txn`, `transactions` set) gets no producer id itself
(the Producer's InitProducerId with the transactional id did), adds a partition to the
transaction (AddPartitionsToTxn, every new partition waiting at that moment in one request)
before the partition's first batch is sent, and flags its batches transactional. While the
transaction can only be aborted, is being aborted, or the producer is fenced, queued
batches fail instead of being sent (TransactionAbortableError caused by the first
failure, the fatal error, or TransactionAbortedError: `TransactionManager.drop_error`),
and an answer that would be retried fails the batch: abort_transaction waits for what is
in flight, not for retries. A fenced answer (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH)
is ProducerFencedError, and like TRANSACTIONAL_ID_AUTHORIZATION_FAILED ends the producer;
any other failure only the transaction (OUT_OF_ORDER_SEQUENCE_NUMBER and
UNKNOWN_PRODUCER_ID included: the epoch is bumped after the abort).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import trio

from client.cluster import Cluster
from client.config import INT32_MAX, ProducerConfig
from client.connection import ConnectionPool
from client.errors import KafkaError, KafkaTimeoutError, for_code
from client.producer.accumulator import ProducerBatch, RecordAccumulator
from client.producer.transaction_manager import TransactionManager, error_for
from client.producer.transactions import Transactions
from protocol.errors import ErrorCode
from protocol.messages import INIT_PRODUCER_ID, PRODUCE
from protocol.records import encode_producer_batch

__all__ = ["DeliveryHandle", "RecordMetadata", "Sender"]


class RecordMetadata(NamedTuple):
    """Where a record landed. offset is -1 with acks=0 (nobody told us); timestamp is the
    record's create time, or the broker's append time for LogAppendTime topics."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class DeliveryHandle:
    """`await handle` -> RecordMetadata once the broker acknowledged the record, or raises
    the delivery error (a client.errors.KafkaError).

    One is made per record sent, so it is kept light: the trio.Event is made only when
    somebody waits on a handle not yet done, and the RecordMetadata only when asked for
    (`_deliver` resolves a whole batch by setting offsets)."""

    __slots__ = ("topic", "partition", "timestamp", "_done", "_event", "_offset",
                 "_append_time", "_result", "_error", "_on_done", "_size")

    def __init__(self, topic: str, timestamp: int, on_done: Callable[["DeliveryHandle"],
                                                                     None] | None = None):
        self.topic = topic
        self.partition: int | None = None
        self.timestamp = timestamp
        self._done = False
        self._event: trio.Event | None = None
        self._offset = -1
        self._append_time = -1
        self._result: RecordMetadata | None = None
        self._error: BaseException | None = None
        self._on_done = on_done
        self._size = 0  # bytes counted against buffer_memory

    def done(self) -> bool:
        return self._done

    def _resolve(self, result: RecordMetadata) -> None:
        if not self._done:
            self._result = result
            self._finish()

    def _fail(self, error: BaseException) -> None:
        if not self._done:
            self._error = error
            self._finish()

    def _finish(self) -> None:
        self._done = True
        if self._event is not None:
            self._event.set()
        if self._on_done is not None:
            self._on_done(self)

    async def _settled(self) -> None:
        """Return once the handle is done, without raising its error."""
        if self._done:
            await trio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()

    async def wait(self) -> RecordMetadata:
        await self._settled()
        if self._error is not None:
            error = self._error
            raise error.clone() if isinstance(error, KafkaError) else error
        return self._metadata()

    def _metadata(self) -> RecordMetadata:
        if self._result is None:
            assert self.partition is not None  # delivered, so placed
            self._result = RecordMetadata(
                self.topic, self.partition, self._offset,
                self._append_time if self._append_time >= 0 else self.timestamp)
        return self._result

    def __await__(self):
        return self.wait().__await__()

    def __repr__(self) -> str:
        state = ("pending" if not self._done else
                 f"failed {self._error!r}" if self._error is not None else
                 repr(self._metadata()))
        return f"<DeliveryHandle {self.topic} {state}>"


def _deliver(handles: list[DeliveryHandle], base_offset: int, append_time: int,
             on_delivered: Callable[[list[DeliveryHandle]], None] | None = None) -> None:
    """Resolve the handles of a batch the broker acknowledged: record i is at base_offset
    + i (-1 throughout when the offset is unknown, acks=0), without a RecordMetadata or an
    Event per record. Then `on_delivered` gets the handles resolved now, or, without it,
    each one's on_done callback runs, as _finish would."""
    offset = base_offset
    step = 1 if base_offset >= 0 else 0
    finished = []
    for handle in handles:
        if not handle._done:
            handle._done = True
            handle._offset = offset
            handle._append_time = append_time
            if handle._event is not None:
                handle._event.set()
            finished.append(handle)
        offset += step
    if on_delivered is not None:
        on_delivered(finished)
        return
    for handle in finished:
        if handle._on_done is not None:
            handle._on_done(handle)


def _now_ms() -> float:
    return trio.current_time() * 1000


class _NodeTurns:
    """Turns for the Produce requests to one node, taken in drain order.

    Two requests drained one after the other are sent by two tasks, and trio runs newly
    started tasks in no fixed order: the later one could reach the connection first (at
    start-up both wait for the first connection to the node, and wake together). A new
    leader accepts any first sequence from a producer it knows nothing of, so the later
    batch was written first and the earlier one, refused as out of order, after it under
    a new epoch (chaos seed 6: a producer's records 0-43 after its record 44). Java's
    sender writes to a node's single connection from its one thread, in drain order."""

    def __init__(self) -> None:
        self._next = 0  # the next turn to hand out
        self._current = 0  # the turn that may send now
        self._finished: set[int] = set()
        self._changed = trio.Event()

    def take(self) -> int:
        self._next += 1
        return self._next - 1

    async def wait(self, turn: int) -> None:
        while self._current < turn:
            await self._changed.wait()

    def done(self, turn: int) -> None:
        """`turn` has sent its request, or never will (it failed first); idempotent."""
        if turn < self._current or turn in self._finished:
            return
        self._finished.add(turn)
        while self._current in self._finished:
            self._finished.discard(self._current)
            self._current += 1
        self._changed.set()
        self._changed = trio.Event()


class Sender:
    def __init__(self, config: ProducerConfig, pool: ConnectionPool, cluster: Cluster,
                 accumulator: RecordAccumulator, clock_ms: Callable[[], float] = _now_ms):
        self.config = config
        self.pool = pool
        self.cluster = cluster
        self.acc = accumulator
        self.clock_ms = clock_ms
        self.fatal: KafkaError | None = None  # producer-wide failure (InitProducerId refused)
        self._wake = trio.Event()
        self._in_flight: dict[int, int] = {}  # node id -> requests out
        # Produce requests leave for a node in the order they were drained (_NodeTurns):
        # trio runs newly started tasks in no fixed order
        self._turns: dict[int, _NodeTurns] = {}
        # the producer's accounting for a delivered batch's handles, in one call
        self.on_delivered: Callable[[list[DeliveryHandle]], None] | None = None
        self._pid_failures = 0
        # a transactional producer's: its state and its requests to the coordinators
        self.txn: TransactionManager | None = None
        self.transactions: Transactions | None = None
        self._adding = False  # an AddPartitionsToTxn is under way

    def wakeup(self) -> None:
        self._wake.set()

    # -- the loop ----------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                self._wake = trio.Event()
                now = self.clock_ms()
                for batch in self.acc.expire(now):
                    self._fail_batch(batch, self._timeout_error(batch, now), counted=False)
                txn = self.txn
                if txn is not None and txn.dropping:
                    error = txn.drop_error()
                    for batch in self.acc.abort_all():
                        self._fail_batch(batch, error.clone(), counted=False)
                if self.fatal is not None:
                    for batch in self.acc.abort_all():
                        self._fail_batch(batch, self.fatal.clone(), counted=False)
                if txn is not None:
                    self._maybe_add_partitions(nursery)
                elif self.config.enable_idempotence and self.fatal is None and (
                        self.acc.producer_id < 0 or (self.acc.needs_reset
                                                     and self.acc.in_flight_batches == 0
                                                     and self.acc.queued_batches > 0)):
                    await self._init_producer_id()  # sleeps its backoff when it fails
                    continue
                wait_until = self._send_ready(nursery, now)
                expiry = self.acc.next_expiry()
                if expiry is not None:
                    wait_until = expiry if wait_until is None else min(wait_until, expiry)
                timeout = math.inf if wait_until is None else max(0.0, wait_until - now) / 1000
                with trio.move_on_after(timeout):
                    await self._wake.wait()

    def _send_ready(self, nursery: trio.Nursery, now: float) -> float | None:
        if self.config.enable_idempotence and (self.acc.producer_id < 0 or
                                               self.acc.needs_reset):
            _, next_at = self.acc.ready(now)  # wait for the in-flight ones before a bump
            return next_at
        tps, next_at = self.acc.ready(now)
        if self.txn is not None:  # a partition's batches wait for it to join the transaction
            tps = [tp for tp in tps if self.txn.is_send_allowed(tp)]
        by_node: dict[int, list] = {}
        for tp in tps:
            leader = self.cluster.metadata.leader_for(tp.topic, tp.partition)
            if leader is None or self.cluster.metadata.node(leader) is None:
                self.cluster.request_update()
                continue
            if self.acc.in_flight_elsewhere(tp, leader):
                continue  # woken when those come back
            by_node.setdefault(leader, []).append(tp)
        limit = self.config.max_in_flight_requests_per_connection
        for node, node_tps in by_node.items():
            if self._in_flight.get(node, 0) >= limit:
                continue
            batches = self.acc.drain(node_tps, now, self.config.max_request_size)
            for batch in batches:
                batch.sent_to = node
            if batches:
                self._in_flight[node] = self._in_flight.get(node, 0) + 1
                turn = self._turns.setdefault(node, _NodeTurns()).take()
                nursery.start_soon(self._send, node, batches, turn)
        return next_at

    # -- idempotence -------------------------------------------------------------------

    async def _init_producer_id(self) -> None:
        """Get a producer id, or a bumped epoch of ours (KIP-360) after a sequence gap."""
        body = {"transactional_id": None, "transaction_timeout_ms": INT32_MAX,
                "producer_id": self.acc.producer_id, "producer_epoch": self.acc.producer_epoch}
        try:
            conn = await self.pool.least_loaded()
            if self.acc.producer_id >= 0 and conn.version_for(INIT_PRODUCER_ID) < 3:
                body["producer_id"] = body["producer_epoch"] = -1  # no bump: a new id
            resp = await conn.request(INIT_PRODUCER_ID, body)
            code = ErrorCode.of(resp.body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, "InitProducerId")
        except KafkaError as e:
            if not e.retriable:
                self.fatal = e
                return
            await trio.sleep(self.config.retry_backoff_s(self._pid_failures))
            self._pid_failures += 1
            return
        self._pid_failures = 0
        self.acc.reset_producer(resp.body.producer_id, resp.body.producer_epoch)

    # -- transactions ------------------------------------------------------------------

    def _maybe_add_partitions(self, nursery: trio.Nursery) -> None:
        """AddPartitionsToTxn for the partitions that wait to join the transaction, one
        request at a time (those that come meanwhile go in the next one)."""
        txn = self.txn
        assert txn is not None and self.transactions is not None
        if self._adding or not txn.may_add or not txn.has_partitions_to_add:
            return
        self._adding = True
        nursery.start_soon(self._add_partitions, txn.take_partitions_to_add())

    async def _add_partitions(self, tps: list) -> None:
        assert self.transactions is not None
        try:
            await self.transactions.add_partitions(tps)
        except KafkaError:
            pass  # the TransactionManager has it: the batches fail on the next turn
        finally:
            self._adding = False
            self.wakeup()

    # -- one request -------------------------------------------------------------------

    def _encode(self, batch: ProducerBatch) -> bytes:
        if batch.encoded is None:
            batch.encoded = encode_producer_batch(
                batch.records, compression=self.config.codec, producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                is_transactional=self.txn is not None)
        return batch.encoded

    async def _send(self, node: int, batches: list[ProducerBatch], turn: int = -1) -> None:
        acks = self.config.acks
        turns = self._turns.get(node)
        try:
            topics: dict[str, list] = {}
            for b in batches:
                topics.setdefault(b.tp.topic, []).append(
                    {"index": b.tp.partition, "records": self._encode(b)})
            body = {"transactional_id": self.config.transactional_id, "acks": acks,
                    "timeout_ms": self.config.request_timeout_ms,
                    "topic_data": [{"name": t, "partition_data": p}
                                   for t, p in topics.items()]}
            try:
                conn = await self.pool.get(node)
                if turns is not None:
                    await turns.wait(turn)
                    # request() queues the frame before its first checkpoint, so the next
                    # turn's frame cannot overtake it
                    turns.done(turn)
                resp = await conn.request(PRODUCE, body, expect_response=acks != 0)
            except KafkaError as e:
                if e.retriable:
                    self.cluster.request_update()  # the leader may have moved
                for b in batches:
                    self._on_error(b, e.code, e)
                return
            if resp is None:  # acks=0
                for b in batches:
                    self._complete(b, -1, -1)
                return
            answers = {(t.name, p.index): p for t in resp.body.responses
                       for p in t.partition_responses}
            for b in batches:
                p = answers.get((b.tp.topic, b.tp.partition))
                if p is None:
                    self._on_error(b, ErrorCode.UNKNOWN_SERVER_ERROR, KafkaError(
                        ErrorCode.UNKNOWN_SERVER_ERROR, "no answer for the partition"))
                    continue
                code = ErrorCode.of(p.error_code)
                if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                    self._complete(b, p.base_offset, p.get("log_append_time_ms", -1))
                else:
                    self._on_error(b, code, for_code(code, p.get("error_message")))
        finally:
            if turns is not None:
                turns.done(turn)  # failed before its turn: the later ones need not wait
            self._in_flight[node] -= 1
            self.wakeup()

    def _complete(self, batch: ProducerBatch, base_offset: int, append_time: int) -> None:
        self.acc.complete(batch)
        _deliver(batch.handles, base_offset, append_time, self.on_delivered)

    def _on_error(self, batch: ProducerBatch, code: ErrorCode, error: KafkaError) -> None:
        now = self.clock_ms()
        self.cluster.note_error(code)
        retriable = code.retriable
        if self.txn is not None:
            self._on_transactional_error(batch, code, error, now)
            return
        if code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self.config.enable_idempotence:
            # Java's idempotent producer retries every OUT_OF_ORDER_SEQUENCE_NUMBER: with an
            # earlier batch of the partition still unacknowledged it only has not landed
            # yet; with none (or from an older epoch) the broker lost the sequence (a new
            # leader without the producer's state): bump the epoch and re-sequence
            if not self.acc.has_unacked_before(batch) and \
                    batch.producer_epoch == self.acc.producer_epoch:
                self.acc.needs_reset = True
            retriable = True
        elif code in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_EPOCH) \
                and self.config.enable_idempotence:
            self.acc.needs_reset = True  # a new epoch, then the batch is re-sequenced
            retriable = True
        if retriable and batch.attempts <= self.config.retries and \
                now < batch.created_ms + self.config.delivery_timeout_ms:
            self.acc.reenqueue(batch, now, error)
        elif retriable and batch.attempts <= self.config.retries:
            batch.last_error = error
            self._fail_batch(batch, self._timeout_error(batch, now))
        else:
            self._fail_batch(batch, error)

    def _on_transactional_error(self, batch: ProducerBatch, code: ErrorCode,
                                error: KafkaError, now: float) -> None:
        """A transactional batch's failed attempt: fenced is fatal, a retriable error is
        retried while the transaction is open and the delivery timeout allows (an
        OUT_OF_ORDER_SEQUENCE_NUMBER only while an earlier batch of the partition is
        unacknowledged), anything else fails the batch and so the transaction."""
        assert self.txn is not None
        if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
            self._fail_batch(batch, error_for("Produce", code, f"{batch.tp.topic}-"
                                                              f"{batch.tp.partition}"))
            return
        retriable = code.retriable or (code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                                       and self.acc.has_unacked_before(batch))
        if retriable and not self.txn.dropping and batch.attempts <= self.config.retries \
                and now < batch.created_ms + self.config.delivery_timeout_ms:
            self.acc.reenqueue(batch, now, error)
        elif retriable and not self.txn.dropping:
            batch.last_error = error
            self._fail_batch(batch, self._timeout_error(batch, now))
        else:
            self._fail_batch(batch, error)

    def _fail_batch(self, batch: ProducerBatch, error: KafkaError, counted: bool = True) -> None:
        if counted:
            self.acc.fail(batch)
        for handle in batch.handles:
            handle._fail(error.clone())

    def _timeout_error(self, batch: ProducerBatch, now: float) -> KafkaTimeoutError:
        last = f"; last error: {batch.last_error}" if batch.last_error is not None else ""
        return KafkaTimeoutError(
            f"expiring {batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition}:"
            f" {now - batch.created_ms:.0f} ms has passed since batch creation "
            f"(delivery_timeout_ms={self.config.delivery_timeout_ms}){last}")

    def fail_all(self, error: KafkaError) -> None:
        """Fail every queued batch (closing the producer without delivering)."""
        for batch in self.acc.abort_all():
            self._fail_batch(batch, error, counted=False)
