"""client.Consumer's background prefetch against our broker: once getmany has returned what
a Fetch brought, the next Fetch for a partition that ran low is already on its way, and
its records are buffered while the application is elsewhere; a seek discards what was
prefetched; and a consumer reads every record exactly once, in order, across prefetches.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import trio
import trio.lowlevel

from client.consumer.consumer import Consumer
from client.types import TopicPartition
from tests.interop.group_helpers import wait_for
from tests.interop.librdkafka import create_topic, produce
from tests.util import unique

SHARED_BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
DEADLINE_S = 30
BATCH = 40  # records per batch as produced; one batch per Fetch (max_partition_fetch_bytes=1)


def _produce(broker, topic: str, count: int, partition: int = 0) -> list[bytes]:
    values = [f"v{i}".encode() for i in range(count)]
    produce(broker.bootstrap, topic, [(None, v, None, partition) for v in values],
            **{"batch.num.messages": BATCH, "linger.ms": 50})
    return values


def _buffered(consumer: Consumer, tp: TopicPartition) -> int:
    return consumer._state.buffered(tp)


@asynccontextmanager
async def _one_partition_consumer(broker, name: str, batches: int
                                  ) -> AsyncIterator[tuple[Consumer, TopicPartition,
                                                           list[bytes], list]]:
    """A consumer of a new one-partition topic holding `batches` produced batches, one batch
    per Fetch, after its first getmany: (consumer, partition, values sent, first records)."""
    topic = unique(name)
    create_topic(broker.bootstrap, topic, 1)
    values = _produce(broker, topic, batches * BATCH)
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=broker.bootstrap,
                        auto_offset_reset="earliest", max_partition_fetch_bytes=1,
                        max_poll_records=BATCH + 10) as c:
        c.assign([tp])
        with trio.fail_after(DEADLINE_S):
            first: list = []
            while not first:
                first = (await c.getmany(timeout_ms=1000)).get(tp, [])
            yield c, tp, values, first


async def test_the_next_fetch_is_in_flight_while_the_application_works(shared_broker):
    async with _one_partition_consumer(shared_broker, "prefetch", 10) as (c, tp, values, got):
        # the whole first batch was returned: the partition is below max_poll_records
        # and behind the high watermark, so a Fetch went out before getmany returned
        assert _buffered(c, tp) == 0
        await wait_for(lambda: _buffered(c, tp) > 0, DEADLINE_S,
                       "the next batch prefetched without another getmany")
        prefetched = _buffered(c, tp)
        following = (await c.getmany(timeout_ms=0))[tp]
        assert len(following) == prefetched
        assert following[0].offset == got[-1].offset + 1
        rest = got + following
        while len(rest) < len(values):
            for records in (await c.getmany(timeout_ms=1000)).values():
                rest += records
    assert [r.value for r in rest] == values
    assert [r.offset for r in rest] == list(range(len(values)))


async def test_a_seek_discards_what_was_prefetched(shared_broker):
    async with _one_partition_consumer(shared_broker, "prefetch-seek", 6) as (c, tp, values,
                                                                               _):
        await wait_for(lambda: _buffered(c, tp) > 0, DEADLINE_S, "a batch prefetched")
        c.seek(tp, 5)
        assert _buffered(c, tp) == 0
        again: list = []
        while not again:
            again = (await c.getmany(timeout_ms=1000)).get(tp, [])
        assert again[0].offset == 5 and again[0].value == values[5]


async def test_prefetching_several_partitions_delivers_each_record_once_in_order(
        shared_broker):
    topic = unique("prefetch-many")
    create_topic(shared_broker.bootstrap, topic, 3)
    sent = {p: _produce(shared_broker, topic, 5 * BATCH, p) for p in range(3)}
    async with Consumer(bootstrap_servers=shared_broker.bootstrap,
                        auto_offset_reset="earliest", max_partition_fetch_bytes=1,
                        max_poll_records=25) as c:
        c.assign([TopicPartition(topic, p) for p in range(3)])
        got: dict[int, list] = {p: [] for p in range(3)}
        with trio.fail_after(DEADLINE_S):
            while sum(map(len, got.values())) < 15 * BATCH:
                batch = await c.getmany(timeout_ms=1000)
                assert sum(map(len, batch.values())) <= 25
                for tp, records in batch.items():
                    got[tp.partition] += records
                await trio.lowlevel.checkpoint()  # the application's work
    for p in range(3):
        assert [r.offset for r in got[p]] == list(range(5 * BATCH))
        assert [r.value for r in got[p]] == sent[p]
