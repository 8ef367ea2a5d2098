"""Producer state expires (Kafka's producer.id.expiration.ms, checked every
producer.id.expiration.check.interval.ms): an idle idempotent producer is forgotten, one
with a transaction open is kept, since the partition's LSO depends on it."""

from __future__ import annotations

import trio

from harness.wait import wait_for
from protocol.records import Record, encode_batch, parse_batch_header
from tests.inproc import in_process_broker

SETTINGS = {"producer.id.expiration.ms": "60000",
            "producer.id.expiration.check.interval.ms": "1000"}


def _batch(pid: int, *, transactional: bool) -> bytearray:
    return bytearray(encode_batch([Record(0, 1_000, None, b"v", [])], producer_id=pid,
                                  producer_epoch=0, base_sequence=0,
                                  is_transactional=transactional))


async def test_idle_producers_expire_but_not_an_open_transaction(tmp_path, autojump_clock):
    async with in_process_broker(tmp_path, **SETTINGS) as inproc:
        await inproc.create_topic("t", 1)
        partition = inproc.broker.partition("t", 0)
        now = inproc.broker.now_ms()
        for pid, transactional in ((1, False), (2, True)):
            batch = _batch(pid, transactional=transactional)
            assert partition.append_batch(batch, parse_batch_header(batch), now).error == 0
        started = trio.current_time()
        await wait_for(lambda: 1 not in partition.producers.producers, 120,
                       "producer 1 expired", interval_s=0.5)
        # gone once idle for producer.id.expiration.ms, at the first check after it
        assert 60 <= trio.current_time() - started <= 62
        assert set(partition.producers.producers) == {2}  # its transaction holds the LSO
        assert partition.last_stable_offset == 1  # still held at producer 2's first offset
