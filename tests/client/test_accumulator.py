"""The pure RecordAccumulator driven with a fake clock (milliseconds passed in)."""

from __future__ import annotations

from client.producer.accumulator import BATCH_OVERHEAD, RecordAccumulator, record_size
from client.types import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def _acc(**kw) -> RecordAccumulator:
    kw.setdefault("batch_size", 1000)
    kw.setdefault("linger_ms", 5)
    kw.setdefault("delivery_timeout_ms", 1000)
    kw.setdefault("retry_backoff_ms", 100)
    return RecordAccumulator(**kw)


def _add(acc, tp, value: bytes, now: float, handle=None):
    return acc.append(tp, 0, None, value, [], handle if handle is not None else value, now)


def test_linger_makes_a_partition_ready():
    acc = _acc()
    _add(acc, A0, b"v", now=10.0)
    assert acc.ready(10.0) == ([], 15.0)
    assert acc.ready(14.9) == ([], 15.0)
    assert acc.ready(15.0) == ([A0], None)


def test_a_full_batch_is_ready_at_once_and_the_next_record_starts_another():
    acc = _acc()
    per = record_size(None, b"x" * 100, [])
    n = (1000 - BATCH_OVERHEAD) // per
    batches = {id(_add(acc, A0, b"x" * 100, now=0.0)) for _ in range(n)}
    assert len(batches) == 1 and acc.ready(0.0) == ([], 5.0)
    second = _add(acc, A0, b"x" * 100, now=1.0)
    assert id(second) not in batches
    assert acc.ready(1.0) == ([A0], None)  # the first is full (another is queued behind)
    [first] = acc.drain([A0], now=1.0, max_size=1 << 20)
    assert first.record_count == n and acc.ready(1.0) == ([], 6.0)  # second lingers


def test_record_larger_than_batch_size_gets_its_own_batch():
    acc = _acc(batch_size=100)
    big = _add(acc, A0, b"x" * 500, now=0.0)
    assert big.full and acc.ready(0.0) == ([A0], None)
    small = _add(acc, A0, b"y", now=0.0)
    assert small is not big


def test_partitions_have_their_own_queues_and_order_is_kept():
    acc = _acc(batch_size=1000)
    for i in range(6):
        _add(acc, [A0, A1, B0][i % 3], b"%d" % i + b"." * 30, now=float(i))
    assert acc.ready(4.9) == ([], 5.0)  # nothing full; the first batch lingers until 5
    assert acc.ready(5.0) == ([A0], 6.0)
    ready, _ = acc.ready(6.0)
    assert ready == [A0, A1]  # A1's batch was created at 1, B0's at 2: due at 7
    drained = acc.drain(ready, now=6.0, max_size=1 << 20)
    assert [b.tp for b in drained] == [A0, A1]
    assert [r[2] for r in drained[0].records] == [b"0" + b"." * 30, b"3" + b"." * 30]
    assert drained[0].handles == [b"0" + b"." * 30, b"3" + b"." * 30]


def test_drain_takes_one_batch_per_partition_within_max_size():
    acc = _acc(batch_size=200)
    for tp in (A0, A1, B0):
        _add(acc, tp, b"x" * 150, now=0.0)
    size = BATCH_OVERHEAD + record_size(None, b"x" * 150, [])
    first = acc.drain([A0, A1, B0], now=10.0, max_size=2 * size + 10)
    assert [b.tp for b in first] == [A0, A1]  # the third would not fit
    assert acc.drain([B0], now=10.0, max_size=10)[0].tp == B0  # the first always goes


def test_flush_ignores_linger():
    acc = _acc(linger_ms=10_000)
    _add(acc, A0, b"v", now=0.0)
    assert acc.ready(1.0)[0] == []
    acc.flushing += 1
    assert acc.ready(1.0)[0] == [A0]


def test_sequences_are_assigned_at_drain_and_kept_across_retries():
    acc = _acc(batch_size=100)
    acc.reset_producer(7, 0)
    for _ in range(3):
        _add(acc, A0, b"x" * 60, now=0.0)  # one record per batch
    b0, = acc.drain([A0], now=10.0, max_size=1 << 20)
    b1, = acc.drain([A0], now=10.0, max_size=1 << 20)
    assert (b0.producer_id, b0.producer_epoch, b0.base_sequence) == (7, 0, 0)
    assert b1.base_sequence == 1
    # both fail (connection lost): back in front, in sequence order, after the backoff
    acc.reenqueue(b1, now=20.0)
    assert acc.has_unacked_before(b1)  # b0 is still in flight
    acc.reenqueue(b0, now=20.0)
    assert [b.base_sequence for b in acc.queues[A0]] == [0, 1, -1]
    assert acc.ready(50.0) == ([], 120.0)
    assert acc.ready(120.0) == ([A0], None)
    again, = acc.drain([A0], now=120.0, max_size=1 << 20)
    assert again is b0 and again.base_sequence == 0 and again.attempts == 2
    assert acc.ready(120.0) == ([], None)  # b1 waits until b0 is answered
    acc.complete(b0)
    assert acc.ready(120.0) == ([A0], None)
    assert acc.drain([A0], now=120.0, max_size=1 << 20)[0].base_sequence == 1
    third, = acc.drain([A0], now=120.0, max_size=1 << 20)
    assert third.base_sequence == 2


def test_a_failed_sequenced_batch_asks_for_a_new_epoch_and_resequences():
    acc = _acc(batch_size=100)
    acc.reset_producer(7, 0)
    _add(acc, A0, b"x" * 60, now=0.0)
    _add(acc, A0, b"y" * 60, now=0.0)
    first, = acc.drain([A0], now=10.0, max_size=1 << 20)
    second, = acc.drain([A0], now=10.0, max_size=1 << 20)
    acc.fail(first)
    assert acc.needs_reset
    acc.reenqueue(second, now=10.0)  # OUT_OF_ORDER after the gap: retried under the new epoch
    acc.reset_producer(7, 1)
    assert not acc.needs_reset
    again, = acc.drain([A0], now=200.0, max_size=1 << 20)
    assert again is second and (again.producer_epoch, again.base_sequence) == (1, 0)


def test_expire_removes_batches_past_the_delivery_timeout():
    acc = _acc(delivery_timeout_ms=1000)
    _add(acc, A0, b"old", now=0.0)
    _add(acc, B0, b"new", now=500.0)
    assert acc.next_expiry() == 1000.0
    assert acc.expire(999.0) == []
    expired = acc.expire(1000.0)
    assert [b.tp for b in expired] == [A0] and expired[0].handles == [b"old"]
    assert acc.queued_batches == 1 and acc.next_expiry() == 1500.0


def test_would_start_batch_for_the_sticky_partitioner():
    acc = _acc()
    assert acc.would_start_batch(A0, 10)
    _add(acc, A0, b"v", now=0.0)
    assert not acc.would_start_batch(A0, 10)
    assert acc.would_start_batch(A0, 2000)  # would not fit
    acc.drain([A0], now=10.0, max_size=1 << 20)
    assert acc.would_start_batch(A0, 10)  # the batch was sent


def test_try_append_adds_only_to_an_open_batch():
    acc = _acc()
    assert acc.try_append(A0, 0, None, b"v", [], "h0", 10) is None  # no batch yet
    assert acc.queued_batches == 0
    first = _add(acc, A0, b"v", now=0.0)
    assert acc.try_append(A0, 0, None, b"w", [], "h1", 10) is first
    assert first.handles == [b"v", "h1"] and first.size == BATCH_OVERHEAD + 10 + \
        record_size(None, b"v", [])
    assert acc.try_append(A0, 0, None, b"x", [], "h2", 2000) is None  # would not fit
    assert first.handles == [b"v", "h1"]
    acc.drain([A0], now=10.0, max_size=1 << 20)
    assert acc.try_append(A0, 0, None, b"x", [], "h3", 10) is None  # the batch was sent


def test_expiry_sees_a_retry_older_than_the_batches_never_sent():
    """Retries go back in front of a partition's queue; the oldest batch is found among
    them even when a later retry was put in front of an older one."""
    acc = _acc(delivery_timeout_ms=1000, batch_size=BATCH_OVERHEAD + 30)
    older = _add(acc, A0, b"a" * 10, now=0.0)
    newer = _add(acc, A0, b"b" * 10, now=100.0)
    assert acc.drain([A0], now=100.0, max_size=1 << 20) == [older]
    assert acc.drain([A0], now=100.0, max_size=1 << 20) == [newer]
    _add(acc, A0, b"c" * 10, now=300.0)
    acc.reenqueue(older, now=400.0)
    acc.reenqueue(newer, now=400.0)  # now in front of `older`
    assert [b.created_ms for b in acc.queues[A0]] == [100.0, 0.0, 300.0]
    assert acc.next_expiry() == 1000.0
    assert acc.expire(1000.0) == [older]
