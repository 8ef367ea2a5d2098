"""aiokafka 0.14 against the real broker process (asyncio, run from a plain test)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

pytestmark = pytest.mark.interop


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume(shared_broker, codec):
    name = f"aio-{codec}-{uuid.uuid4().hex[:8]}"

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                                    compression_type=codec, enable_idempotence=True)
        await producer.start()
        try:
            sent = [await producer.send_and_wait(name, value=b"m%d" % i, key=b"k",
                                                 headers=[("n", b"%d" % i)]) for i in range(50)]
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(name, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            while len(got) < 50:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 15)
                got.extend(batch.get(tp, []))
            end = (await consumer.end_offsets([tp]))[tp]
        finally:
            await consumer.stop()
        return sent, got, end

    sent, got, end = asyncio.run(run())
    assert [r.offset for r in sent] == list(range(50))
    assert [m.value for m in got] == [b"m%d" % i for i in range(50)]
    assert [list(m.headers) for m in got] == [[("n", b"%d" % i)] for i in range(50)]
    assert end == 50
