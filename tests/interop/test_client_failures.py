"""Our client under failure, against a real broker process: a restart while an `async for`
loop consumes, and a cancelled consumer whose broker no longer answers.

What must hold: retriable conditions never reach the application (the loop reads every
record across the restart), and a cancelled close spends at most its shielded budget
(cancelled_close_timeout_ms) on the final commit and LeaveGroup, then gives up with a
warning instead of hanging on a broker that does not answer.
"""

from __future__ import annotations

import logging
import signal

import pytest
import trio

from broker.events import read_events
from client import Consumer, Producer
from tests.interop.group_helpers import wait_for
from tests.util import unique

DEADLINE_S = 60
RECORDS = 3000


async def _produce(bootstrap: str, topic: str, count: int) -> None:
    # small batches, so that the consumer's small fetches take many round trips
    async with Producer(bootstrap_servers=bootstrap, batch_size=512) as producer:
        for i in range(count):
            await producer.send(topic, str(i).encode())
        await producer.flush()


async def test_async_for_reads_every_record_across_a_broker_restart(broker, caplog):
    topic, group = unique("restart"), unique("g")
    await _produce(broker.bootstrap, topic, RECORDS)
    seen: list[int] = []
    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            async with Consumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                auto_offset_reset="earliest", max_poll_records=20,
                                max_partition_fetch_bytes=1024) as consumer:
                async for record in consumer:
                    seen.append(int(record.value))
                    if len(seen) == RECORDS // 3:
                        # SIGTERM, then start again on the same data dir while the loop
                        # goes on: it meets the broker gone, then the broker back
                        await trio.to_thread.run_sync(broker.stop)
                        nursery.start_soon(trio.to_thread.run_sync, broker.start)
                    if len(seen) == RECORDS:
                        break
    assert broker.starts == 2
    assert sorted(seen) == list(range(RECORDS))
    # the outage was met, and said so, naming the address
    assert any(r.levelname == "WARNING" and broker.bootstrap in r.getMessage()
               for r in caplog.records)


async def test_a_cancelled_consumer_gives_up_its_close_after_the_shielded_budget(
        broker, caplog):
    topic, group = unique("cancel"), unique("g")
    await _produce(broker.bootstrap, topic, 10)
    caplog.set_level(logging.WARNING)
    stopped = False
    try:
        with trio.fail_after(DEADLINE_S):
            with trio.CancelScope() as scope:
                async with Consumer(topic, bootstrap_servers=broker.bootstrap,
                                    group_id=group, auto_offset_reset="earliest",
                                    cancelled_close_timeout_ms=500) as consumer:
                    got = 0
                    while got < 10:
                        batches = await consumer.getmany(timeout_ms=1000)
                        got += sum(len(rs) for rs in batches.values())
                    # the broker stops answering (its connections stay open), then the
                    # caller cancels: the final commit cannot complete
                    broker.proc.send_signal(signal.SIGSTOP)
                    stopped = True
                    scope.cancel()
                    await trio.sleep_forever()
    finally:
        if stopped:
            broker.proc.send_signal(signal.SIGCONT)
    assert scope.cancelled_caught
    assert any("did not finish within 500 ms; abandoned" in r.getMessage()
               for r in caplog.records)


async def test_a_cancelled_consumer_commits_and_leaves(broker):
    topic, group = unique("cancel"), unique("g")
    await _produce(broker.bootstrap, topic, 10)
    with trio.fail_after(DEADLINE_S):
        with trio.CancelScope() as scope:
            async with Consumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                auto_offset_reset="earliest") as consumer:
                got = 0
                while got < 10:
                    batches = await consumer.getmany(timeout_ms=1000)
                    got += sum(len(rs) for rs in batches.values())
                member = consumer._group.member.member_id
                scope.cancel()
                await trio.sleep_forever()
    assert scope.cancelled_caught

    def events(kind: str) -> list[dict]:
        return [e for e in read_events(broker.data_dir)
                if e.get("type") == kind and e.get("group") == group]

    # the auto-commit on close and the LeaveGroup, sent in the shielded budget
    await wait_for(lambda: events("group_leave"), 10, "the LeaveGroup event")
    assert [e["member"] for e in events("group_leave")] == [member]
    assert any(e["offsets"] == [f"{topic}-0=10"] for e in events("offset_commit"))


@pytest.fixture(autouse=True)
def _client_logs(caplog):
    caplog.set_level(logging.WARNING, logger="minibroker.client")
