"""Our client's retries against a broker that answers badly once, in-process on virtual
time (tests/inproc.py): a Metadata request that is never answered, an OffsetCommit answered
with a retriable error (which forgets the coordinator). On broker processes these paths ran
only when the timing made them.
"""

from __future__ import annotations

import trio

from broker.handlers import HANDLERS
from client import Consumer
from client.admin import AdminClient
from client.errors import KafkaError
from client.types import TopicPartition
from protocol import messages as m
from protocol.errors import ErrorCode


async def test_a_metadata_request_never_answered_is_sent_again_after_the_backoff(
        inproc, autojump_clock, monkeypatch):
    await inproc.create_topic("orders", 2)
    real = HANDLERS[m.METADATA]
    calls: list[float] = []

    async def silent_once(ctx):
        calls.append(trio.current_time())
        if len(calls) == 1:
            await trio.sleep_forever()
        return await real(ctx)

    monkeypatch.setitem(HANDLERS, m.METADATA, silent_once)
    async with AdminClient(bootstrap_servers=inproc.bootstrap, request_timeout_ms=5_000,
                           retry_backoff_ms=200) as admin:
        with trio.fail_after(60):
            assert [t.name for t in await admin.list_topics()] == ["orders"]
    # the first went unanswered for request_timeout_ms; the next came after the backoff
    assert len(calls) >= 2 and calls[1] - calls[0] >= 5.0


async def test_a_commit_answered_with_a_retriable_error_raises_it_when_not_retrying(
        inproc, autojump_clock, monkeypatch):
    await inproc.create_topic("orders", 1)
    tp = TopicPartition("orders", 0)
    real = HANDLERS[m.OFFSET_COMMIT]
    answered: list[int] = []

    async def loading_once(ctx):
        body = await real(ctx)
        if not answered:
            for topic in body["topics"]:
                for p in topic["partitions"]:
                    p["error_code"] = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS.value
        answered.append(1)
        return body

    real_find = HANDLERS[m.FIND_COORDINATOR]
    lookups: list[int] = []

    async def find(ctx):
        lookups.append(1)
        return await real_find(ctx)

    monkeypatch.setitem(HANDLERS, m.OFFSET_COMMIT, loading_once)
    monkeypatch.setitem(HANDLERS, m.FIND_COORDINATOR, find)
    async with Consumer(bootstrap_servers=inproc.bootstrap, group_id="billing",
                        enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        with trio.fail_after(60):
            try:
                await consumer._offsets().commit_offsets({tp: 5}, (-1, "", None),
                                                         retry=False)
            except KafkaError as e:
                assert e.retriable and e.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            else:
                raise AssertionError("the retriable error was not raised")
            looked_up = len(lookups)
            await consumer.commit({tp: 7})
            # the error said the coordinator is not ready: it is looked up again
            assert len(lookups) == looked_up + 1
            assert await consumer.committed(tp) == 7
    assert len(answered) == 2
