"""The record accumulator: per-partition batching, pure (time is passed in, no trio).

Owns: `ProducerBatch` (records for one partition, the delivery handles waiting on them,
and their retry state) and `RecordAccumulator` (a FIFO of batches per partition, which of
them are ready to send, draining them, re-queueing retries in sequence order, expiring
them at the delivery timeout, and the idempotent producer's per-partition sequences).

The rules, as Java's RecordAccumulator:
- `append` adds a record to the last batch of its partition, or starts a new batch when
  there is none or the record does not fit in batch_size bytes (estimated; a record larger
  than batch_size gets a batch of its own).
- A partition is *ready* when its first batch is full (or another batch is queued behind
  it), when linger_ms has passed since that batch was created, or while a flush or close is
  in progress. A batch being retried is ready once retry_backoff_ms has passed, and, when it
  carries a sequence number, only while nothing else of its partition is in flight, so that
  retries reach the broker in sequence order.
- `drain` takes the first batch of each given partition (one per partition, as one Produce
  request holds) until max_request_size; the sender sends them and reports back with
  `complete`, `reenqueue` (retriable failure) or `fail`.
- With a producer id (idempotence), a batch gets its base sequence when first drained and
  keeps it across retries; `reset_producer` (a new id or epoch) starts every partition's
  sequence at 0 again and re-sequences batches that have not been acknowledged.
- `expire(now)` removes queued batches older than delivery_timeout_ms.

    acc = RecordAccumulator(batch_size=16384, linger_ms=5)
    acc.append(TopicPartition("t", 0), 1700000000000, b"k", b"v", [], handle, now=0.0)
    acc.ready(now=1.0)       # -> ([], 5.0): not full, lingering until t=5 ms
    acc.ready(now=5.0)       # -> ([TopicPartition("t", 0)], None)
    [batch] = acc.drain([TopicPartition("t", 0)], now=5.0)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from client.types import TopicPartition
from protocol.records import BATCH_OVERHEAD  # the RecordBatch v2 header

__all__ = ["ProducerBatch", "RecordAccumulator", "BATCH_OVERHEAD", "RECORD_OVERHEAD",
           "RECORD_OVERHEAD_MAX", "record_size"]

RECORD_OVERHEAD = 11  # length, attributes, deltas and counts as varints, as they usually are
RECORD_OVERHEAD_MAX = 36  # ... and at their longest: for a record at the size limits
_INT32_RANGE = 2**31


def record_size(key: bytes | None, value: bytes | None,
                headers: Iterable[tuple[str, bytes | None]]) -> int:
    """An upper estimate of one record's uncompressed bytes inside a batch."""
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for hkey, hvalue in headers:
        size += 10 + len(hkey.encode() if isinstance(hkey, str) else hkey) + (
            len(hvalue) if hvalue else 0)
    return size


@dataclass(eq=False)
class ProducerBatch:
    """Records for one partition: (timestamp, key, value, headers) with their handles."""

    tp: TopicPartition
    created_ms: float
    records: list[tuple[int, bytes | None, bytes | None, list]] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    size: int = BATCH_OVERHEAD
    full: bool = False  # no more appends
    attempts: int = 0  # times drained
    retry_at_ms: float = 0.0
    last_error: Any = None  # the error of the last failed attempt, for the timeout message
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1  # -1: none (not idempotent, or not drained yet)
    encoded: bytes | None = None  # cached by the sender; dropped when re-sequenced
    sent_to: int = -1  # the node of its last attempt (the sender's; -1: never sent)

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def sequenced(self) -> bool:
        return self.base_sequence >= 0


class RecordAccumulator:
    def __init__(self, *, batch_size: int = 16384, linger_ms: float = 5,
                 delivery_timeout_ms: float = 120000, retry_backoff_ms: float = 100):
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        self.flushing = 0  # flushes (or a close) in progress: linger is ignored
        # idempotence: the current producer id and epoch, and the next sequence per partition
        self.producer_id = -1
        self.producer_epoch = -1
        self.needs_reset = False  # a sequence gap was left: get a new epoch before going on
        self._next_sequence: dict[TopicPartition, int] = {}

    # -- appending ---------------------------------------------------------------------

    def would_start_batch(self, tp: TopicPartition, size: int) -> bool:
        """Whether a record of `size` bytes would start a new batch of `tp` (the sticky
        partitioner moves on when it would, KIP-480)."""
        queue = self.queues.get(tp)
        if not queue:
            return True
        last = queue[-1]
        return last.full or last.sequenced or last.attempts > 0 or (
            last.size + size > self.batch_size)

    def try_append(self, tp: TopicPartition, timestamp: int, key: bytes | None,
                   value: bytes | None, headers: list, handle: Any,
                   size: int) -> ProducerBatch | None:
        """Add a record to the open last batch of `tp` if it fits there; None when it
        would start a new batch (`would_start_batch`), and nothing was added. The
        producer's per-record path: one check, three appends."""
        queue = self.queues.get(tp)
        if not queue:
            return None
        batch = queue[-1]
        if batch.full or batch.base_sequence >= 0 or batch.attempts or \
                batch.size + size > self.batch_size:
            return None
        batch.records.append((timestamp, key, value, headers))
        batch.handles.append(handle)
        batch.size += size
        if batch.size >= self.batch_size:
            batch.full = True
        return batch

    def append(self, tp: TopicPartition, timestamp: int, key: bytes | None,
               value: bytes | None, headers: list, handle: Any, now: float,
               size: int | None = None) -> ProducerBatch:
        """Add a record; returns its batch (`batch.full` says the sender should look now)."""
        if size is None:
            size = record_size(key, value, headers)
        batch = self.try_append(tp, timestamp, key, value, headers, handle, size)
        if batch is not None:
            return batch
        queue = self.queues.get(tp)
        if queue is None:
            queue = self.queues[tp] = deque()
        elif queue:
            queue[-1].full = True
        batch = ProducerBatch(tp, now)
        queue.append(batch)
        batch.records.append((timestamp, key, value, headers))
        batch.handles.append(handle)
        batch.size += size
        if batch.size >= self.batch_size:
            batch.full = True
        return batch

    # -- what to send ------------------------------------------------------------------

    def ready(self, now: float) -> tuple[list[TopicPartition], float | None]:
        """Partitions whose first batch should be sent now, and the earliest later time
        (ms) at which another becomes ready by linger or backoff (None: no timer needed)."""
        ready: list[TopicPartition] = []
        next_at: float | None = None
        for tp, queue in self.queues.items():
            if not queue:
                continue
            head = queue[0]
            if head.attempts:  # a retry
                if head.retry_at_ms > now:
                    next_at = _min(next_at, head.retry_at_ms)
                    continue
                if self._is_current(head) and self.in_flight.get(tp):
                    continue  # woken when the in-flight batches come back
                ready.append(tp)
                continue
            if head.full or len(queue) > 1 or self.flushing:
                ready.append(tp)
                continue
            due = head.created_ms + self.linger_ms
            if due <= now:
                ready.append(tp)
            else:
                next_at = _min(next_at, due)
        return ready, next_at

    def next_expiry(self) -> float | None:
        """When the oldest queued batch reaches the delivery timeout (ms)."""
        oldest = min((t for q in self.queues.values() if (t := _oldest(q)) is not None),
                     default=None)
        return None if oldest is None else oldest + self.delivery_timeout_ms

    def drain(self, tps: Iterable[TopicPartition], now: float,
              max_size: int) -> list[ProducerBatch]:
        """Take the first batch of each partition for one request of at most `max_size`
        bytes (the first batch always goes, whatever its size)."""
        out: list[ProducerBatch] = []
        total = 0
        for tp in tps:
            queue = self.queues.get(tp)
            if not queue:
                continue
            batch = queue[0]
            if out and total + batch.size > max_size:
                continue
            queue.popleft()
            batch.full = True
            batch.attempts += 1
            total += batch.size
            if self.producer_id >= 0 and not self._is_current(batch):
                batch.producer_id, batch.producer_epoch = self.producer_id, self.producer_epoch
                seq = self._next_sequence.get(tp, 0)
                batch.base_sequence = seq
                batch.encoded = None
                self._next_sequence[tp] = (seq + batch.record_count) % _INT32_RANGE
            self.in_flight.setdefault(tp, []).append(batch)
            out.append(batch)
        return out

    # -- outcomes ----------------------------------------------------------------------

    def _done_in_flight(self, batch: ProducerBatch) -> None:
        flying = self.in_flight.get(batch.tp)
        if flying and batch in flying:
            flying.remove(batch)

    def complete(self, batch: ProducerBatch) -> None:
        """The broker acknowledged the batch."""
        self._done_in_flight(batch)

    def fail(self, batch: ProducerBatch) -> None:
        """The batch failed for good. If it carried a sequence the broker never saw, the
        partition's sequence now has a gap: a new epoch is needed (needs_reset)."""
        self._done_in_flight(batch)
        if self._is_current(batch):
            self.needs_reset = True

    def reenqueue(self, batch: ProducerBatch, now: float, error: Any = None) -> None:
        """A retriable failure: back at the front of its partition after retry_backoff_ms,
        in base-sequence order among the other retries."""
        self._done_in_flight(batch)
        batch.retry_at_ms = now + self.retry_backoff_ms
        batch.last_error = error
        queue = self.queues.setdefault(batch.tp, deque())
        index = 0
        if batch.sequenced:
            while index < len(queue) and queue[index].sequenced and \
                    queue[index].base_sequence < batch.base_sequence:
                index += 1
        queue.insert(index, batch)

    def in_flight_elsewhere(self, tp: TopicPartition, node: int) -> bool:
        """Whether a batch of `tp` is in flight to a node other than `node`: the leader
        moved while it was out. Nothing more of the partition may go to the new leader
        until it is answered, or a later batch could land first (a new leader knows no
        sequence of this producer, so it accepts any) and the earlier one, refused there
        as out of order, would be written after it under a new epoch."""
        return any(b.sent_to != node for b in self.in_flight.get(tp, ()))

    def has_unacked_before(self, batch: ProducerBatch) -> bool:
        """Whether a batch of the same partition and epoch with a lower sequence is still
        unacknowledged (queued or in flight): an OUT_OF_ORDER_SEQUENCE_NUMBER answer to
        `batch` then only means that one has not landed yet."""
        others = [*self.in_flight.get(batch.tp, ()), *self.queues.get(batch.tp, ())]
        return any(b is not batch and b.sequenced and b.producer_epoch == batch.producer_epoch
                   and b.producer_id == batch.producer_id
                   and b.base_sequence < batch.base_sequence for b in others)

    def expire(self, now: float) -> list[ProducerBatch]:
        """Remove and return the queued batches past delivery_timeout_ms."""
        expired: list[ProducerBatch] = []
        for queue in self.queues.values():
            oldest = _oldest(queue)
            if oldest is not None and now >= oldest + self.delivery_timeout_ms:
                keep = [b for b in queue if now < b.created_ms + self.delivery_timeout_ms]
                expired += [b for b in queue if b not in keep]
                queue.clear()
                queue.extend(keep)
        for batch in expired:
            if self._is_current(batch):
                self.needs_reset = True
        return expired

    def abort_all(self) -> list[ProducerBatch]:
        """Remove and return every queued batch (closing without delivering, a transaction
        aborted). A retry among them that carried a sequence leaves a gap: needs_reset."""
        out = [b for q in self.queues.values() for b in q]
        self.queues.clear()
        if any(self._is_current(b) for b in out):
            self.needs_reset = True
        return out

    # -- idempotence -------------------------------------------------------------------

    def _is_current(self, batch: ProducerBatch) -> bool:
        return batch.sequenced and batch.producer_id == self.producer_id and \
            batch.producer_epoch == self.producer_epoch

    def reset_producer(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch: sequences start at 0 again; unacknowledged batches
        get new sequences when next drained."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._next_sequence.clear()
        self.needs_reset = False

    # -- totals ------------------------------------------------------------------------

    @property
    def queued_batches(self) -> int:
        return sum(len(q) for q in self.queues.values())

    @property
    def in_flight_batches(self) -> int:
        return sum(len(f) for f in self.in_flight.values())


def _oldest(queue: deque[ProducerBatch]) -> float | None:
    """The creation time of the oldest batch of a partition's queue, looking only at its
    head: retries (attempts > 0) are put back in front of the batches never sent, and
    those are in creation order. The sender asks once per wake-up, with many batches
    queued when the application outruns it, so this must not walk the whole queue."""
    oldest = None
    for batch in queue:
        if oldest is None or batch.created_ms < oldest:
            oldest = batch.created_ms
        if not batch.attempts:
            break
    return oldest


def _min(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)
