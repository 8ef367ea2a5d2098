"""Our own client (client/) on three processes: a leader killed under an idempotent
producer, and a group's coordinator killed under a consuming member.

Judged by histories, not timings: every acknowledged record is in the log exactly once and
in send order per key (confluent-kafka reads it back); the member reads every record and
the offsets it commits never go backwards; no retriable error reaches the application.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import trio

from harness.raw import call
from client import Consumer, Producer
from client.errors import KafkaTimeoutError
from protocol import messages as m
from tests.cluster.harness import Cluster
from tests.cluster.test_replication import (
    KEYS, History, check_history, create, isr_everywhere, read_all, wait_full_isr,
)
from tests.interop.librdkafka import produce as librdkafka_produce
from tests.util import unique

pytestmark = pytest.mark.interop

DEADLINE_S = 120
RECORDS = 6000


def _coordinator(cluster: Cluster, group: str) -> int:
    """The group's coordinator, as FindCoordinator (v3) on a running node names it."""
    node = cluster.running()[0]
    body = call(node.port, m.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    assert body["error_code"] == 0, body
    return body["node_id"]


async def test_our_idempotent_producer_loses_and_duplicates_nothing_across_a_leader_kill(
        cluster):
    topic = unique("ours-survive")
    create(cluster, topic, 1, min_isr=2)
    leader = isr_everywhere(cluster, topic)[0][0]
    history = History()
    errors: list[BaseException] = []

    async def deliver(handle, key: str, seq: int) -> None:
        try:
            await handle
        except Exception as e:  # the history counts it; the test says which
            errors.append(e)
            history.failed += 1
        else:
            history.acked[key].append(seq)

    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=cluster.bootstrap, acks="all",
                            enable_idempotence=True) as producer:
            assert producer.config.enable_idempotence
            async with trio.open_nursery() as nursery:
                for seq in range(RECORDS):
                    key = f"k{seq % KEYS}"
                    handle = await producer.send(topic, f"{key}-{seq}".encode(),
                                                 key=key.encode())
                    nursery.start_soon(deliver, handle, key, seq)
                    if seq == RECORDS // 2:
                        await producer.flush()
                        await trio.to_thread.run_sync(cluster.kill, leader)
    assert errors == [] and history.count == RECORDS
    cluster.restart(leader)
    wait_full_isr(cluster, topic, 1)
    check_history(history, read_all(cluster.bootstrap, topic, history.count))


async def test_our_group_member_keeps_consuming_and_committing_across_a_coordinator_kill(
        cluster):
    topic, group = unique("ours-coord"), unique("g")
    create(cluster, topic, 3, min_isr=2)
    sent = [(f"k{i % KEYS}".encode(), str(i).encode(), None, i % 3) for i in range(RECORDS)]
    assert len(librdkafka_produce(cluster.bootstrap, topic, sent)) == RECORDS
    seen: set[int] = set()
    committed: dict[int, list[int]] = defaultdict(list)  # partition -> offsets, in order
    killed = None
    with trio.fail_after(DEADLINE_S):
        async with Consumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False,
                            max_poll_records=100) as consumer:
            while len(seen) < RECORDS:
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    seen.update(int(r.value) for r in records)
                if batches:
                    positions = {tp: await consumer.position(tp) for tp in batches}
                    await consumer.commit(positions)  # retried across the move
                    for tp, offset in positions.items():
                        committed[tp.partition].append(offset)
                if killed is None and len(seen) >= RECORDS // 3:
                    killed = _coordinator(cluster, group)
                    await trio.to_thread.run_sync(cluster.kill, killed)
            final = {p: await consumer.committed(tp) for p, tp in
                     ((tp.partition, tp) for tp in consumer.assignment())}
    assert killed is not None and _coordinator(cluster, group) != killed
    assert seen == set(range(RECORDS))
    for partition, offsets in committed.items():
        assert offsets == sorted(offsets), f"commits of partition {partition} went back"
        assert final[partition] == offsets[-1]
    cluster.restart(killed)


async def test_our_producer_retries_not_enough_replicas_until_its_delivery_timeout(cluster):
    topic = unique("ours-strict")
    create(cluster, topic, 1, min_isr=3)
    victim = next(n for n in isr_everywhere(cluster, topic)[0][1]
                  if n != isr_everywhere(cluster, topic)[0][0])
    cluster.kill(victim)
    cluster.wait_for(lambda: victim not in isr_everywhere(cluster, topic)[0][1], 30,
                     f"broker {victim} out of the ISR of {topic}")
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=cluster.bootstrap, acks="all",
                            delivery_timeout_ms=2000, linger_ms=0) as producer:
            # refused until the deadline, then failed naming what it kept meeting
            with pytest.raises(KafkaTimeoutError, match="NOT_ENOUGH_REPLICAS"):
                await producer.send_and_wait(topic, b"early", key=b"k")
        async with Producer(bootstrap_servers=cluster.bootstrap, acks="all",
                            linger_ms=0) as producer:
            # retried while the ISR is short, delivered once the replica is back
            handle = await producer.send(topic, b"late", key=b"k")
            await trio.to_thread.run_sync(cluster.restart, victim)
            meta = await handle
    # the refused record was never appended: the retried one is the log's first
    assert meta.offset == 0
    wait_full_isr(cluster, topic, 1)
