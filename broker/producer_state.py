"""Idempotent-producer state of one partition: sequence checks and retry de-duplication.

Owns: `ProducerStateManager`, a pure structure (time is passed in) that remembers, per
producer id, the epoch and the last 5 appended batches (Kafka's ProducerStateEntry keeps
5, because max.in.flight.requests.per.connection <= 5 is what idempotence allows).

The rules (Kafka's ProducerAppendInfo):
- an epoch older than the one we know is fenced: INVALID_PRODUCER_EPOCH;
- a newer epoch must start at sequence 0: OUT_OF_ORDER_SEQUENCE_NUMBER otherwise;
- within an epoch, a batch equal to one of the cached five is a retry: answer with the
  original offsets and append nothing;
- otherwise its first sequence must follow the last one (int32 wraps to 0), or the batch is
  out of order;
- a producer id we know nothing of (new, or expired) may start anywhere (KIP-360).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from protocol.errors import ErrorCode

CACHED_BATCHES = 5
_INT32_MAX = 2**31 - 1


def next_sequence(seq: int, delta: int = 1) -> int:
    """Sequence arithmetic wraps from Integer.MAX_VALUE to 0 (DefaultRecordBatch)."""
    return (seq + delta) % (_INT32_MAX + 1)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_update_ms: int = 0


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    error: ErrorCode
    duplicate: BatchMetadata | None = None


OK = SequenceCheck(ErrorCode.NONE)


class ProducerStateManager:
    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, record_count: int) -> SequenceCheck:
        entry = self.producers.get(producer_id)
        if entry is None:
            return OK
        if epoch < entry.epoch:
            return SequenceCheck(ErrorCode.INVALID_PRODUCER_EPOCH)
        if epoch > entry.epoch:
            return OK if first_seq == 0 else SequenceCheck(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        last_seq = next_sequence(first_seq, record_count - 1)
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return SequenceCheck(ErrorCode.NONE, batch)
        if entry.batches and first_seq != next_sequence(entry.batches[-1].last_seq):
            return SequenceCheck(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        return OK

    def update(self, producer_id: int, epoch: int, first_seq: int, record_count: int,
               first_offset: int, timestamp_ms: int, now_ms: int) -> None:
        entry = self.producers.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        entry.batches.append(BatchMetadata(first_seq, next_sequence(first_seq, record_count - 1),
                                           first_offset, first_offset + record_count - 1,
                                           timestamp_ms))
        entry.last_update_ms = now_ms

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers idle longer than producer.id.expiration.ms; returns their ids."""
        gone = [pid for pid, e in self.producers.items() if now_ms - e.last_update_ms > expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return gone

    def truncate_after(self, offset: int) -> None:
        """Drop cached batches at or beyond `offset` (the log was truncated there)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if not kept:
                del self.producers[pid]
            else:
                entry.batches = deque(kept, maxlen=CACHED_BATCHES)
