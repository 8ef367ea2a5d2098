"""Our own client (client/) on the simulated three-node cluster: a leader killed under an
idempotent producer, a group's coordinator killed under a consuming member, a producer
refused NOT_ENOUGH_REPLICAS until its delivery timeout and then served.

Moved from tests/cluster (three processes, about 40 s): the subject is the client's
retries and the nodes' failover, which the simulation runs with the product's own code in
simulated time (sim.scenario), the kill losing what the node had not fsynced. Judged by
histories: every acknowledged record in the log exactly once and in send order per key;
the member reads every record and its commits never go backwards; no retriable error
reaches the application.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import trio

from client import Consumer, Producer, TopicPartition
from client.errors import KafkaTimeoutError
from sim.scenario import Scene, run_scenario

KEYS = 10
RECORDS = 2000


async def read_all(scene: Scene, topic: str, partitions: int) -> dict[str, list[int]]:
    """Every record of `topic`, as key -> sequence numbers in log order."""
    seen: dict[str, list[int]] = defaultdict(list)

    async def read() -> None:
        async with Consumer(bootstrap_servers=scene.bootstrap,
                            enable_auto_commit=False) as consumer:
            tps = [TopicPartition(topic, i) for i in range(partitions)]
            consumer.assign(tps)
            for tp in tps:
                await consumer.seek_to_beginning(tp)
            ends = await consumer.end_offsets(tps)
            positions = dict.fromkeys(tps, 0)
            while any(positions[tp] < ends[tp] for tp in tps):
                for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                    for r in records:
                        key, seq = r.value.decode().split("-")
                        seen[key].append(int(seq))
                        positions[tp] = r.offset + 1
    await scene.client(read, name="reader")
    return seen


def check_history(acked: dict[str, list[int]], seen: dict[str, list[int]]) -> None:
    """Nothing acknowledged lost, nothing read twice, each key in send order."""
    for key, sent in acked.items():
        missing = set(sent) - set(seen.get(key, []))
        assert not missing, f"{len(missing)} acknowledged records of {key} lost"
    for key, got in seen.items():
        assert len(got) == len(set(got)), f"duplicates of {key}"
        assert got == sorted(got), f"{key} out of send order"


@pytest.mark.parametrize("seed", [1, 2])
def test_our_idempotent_producer_loses_and_duplicates_nothing_across_a_leader_kill(seed):
    async def scenario(scene: Scene) -> None:
        topic = "survive"
        await scene.create_topic(topic, 1, config={"min.insync.replicas": "2"})
        leader = scene.leader(topic, 0)
        assert leader is not None
        acked: dict[str, list[int]] = defaultdict(list)
        errors: list[BaseException] = []

        async def deliver(handle, key: str, seq: int) -> None:
            try:
                await handle
            except Exception as e:  # the history counts it; the test says which
                errors.append(e)
            else:
                acked[key].append(seq)

        async def produce() -> None:
            async with Producer(bootstrap_servers=scene.bootstrap, acks="all",
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
                            scene.kill(leader)
        with trio.fail_after(120):
            await scene.client(produce, name="producer")
        assert errors == [] and sum(map(len, acked.values())) == RECORDS
        assert scene.leader(topic, 0) not in (None, leader)
        await scene.restart(leader)
        await scene.wait_full_isr(topic, 1)
        check_history(acked, await read_all(scene, topic, 1))

    run_scenario(3, seed, scenario)


def test_our_group_member_keeps_consuming_and_committing_across_a_coordinator_kill():
    async def scenario(scene: Scene) -> None:
        topic, group = "coord", "the-group"
        await scene.create_topic(topic, 3, config={"min.insync.replicas": "2"})

        async def produce() -> None:
            async with Producer(bootstrap_servers=scene.bootstrap, acks="all") as producer:
                for i in range(RECORDS):
                    await producer.send(topic, str(i).encode(), partition=i % 3)
                await producer.flush()
        await scene.client(produce, name="producer")
        seen: set[int] = set()
        committed: dict[int, list[int]] = defaultdict(list)  # partition -> offsets, in order
        killed: list[int] = []
        final: dict[int, int | None] = {}

        async def consume() -> None:
            async with Consumer(topic, bootstrap_servers=scene.bootstrap, group_id=group,
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
                    if not killed and len(seen) >= RECORDS // 3:
                        coordinator = scene.coordinator(group)
                        assert coordinator is not None
                        killed.append(coordinator)
                        scene.kill(coordinator)
                for tp in consumer.assignment():
                    final[tp.partition] = await consumer.committed(tp)
        with trio.fail_after(120):
            await scene.client(consume, name="member")
        assert killed and scene.coordinator(group) not in (None, killed[0])
        assert seen == set(range(RECORDS))
        assert set(committed) == {0, 1, 2}
        for partition, offsets in committed.items():
            assert offsets == sorted(offsets), f"commits of partition {partition} went back"
            assert final[partition] == offsets[-1]

    run_scenario(3, 3, scenario)


def test_our_producer_retries_not_enough_replicas_until_its_delivery_timeout():
    async def scenario(scene: Scene) -> None:
        topic = "strict"
        await scene.create_topic(topic, 1, config={"min.insync.replicas": "3"})
        leader = scene.leader(topic, 0)
        victim = next(n for n in scene.isr(topic, 0) if n != leader)
        scene.kill(victim)
        await scene.wait_for(lambda: victim not in scene.isr(topic, 0), 30,
                             f"node {victim} out of the ISR of {topic}")

        async def refused() -> None:
            async with Producer(bootstrap_servers=scene.bootstrap, acks="all",
                                delivery_timeout_ms=2000, linger_ms=0) as producer:
                # refused until the deadline, then failed naming what it kept meeting
                with pytest.raises(KafkaTimeoutError, match="NOT_ENOUGH_REPLICAS"):
                    await producer.send_and_wait(topic, b"early", key=b"k")

        async def served_once_back() -> int:
            async with Producer(bootstrap_servers=scene.bootstrap, acks="all",
                                linger_ms=0) as producer:
                # retried while the ISR is short, delivered once the replica is back
                handle = await producer.send(topic, b"late", key=b"k")
                await scene.restart(victim)
                return (await handle).offset
        with trio.fail_after(120):
            await scene.client(refused, name="refused")
            # the refused record was never appended: the retried one is the log's first
            assert await scene.client(served_once_back, name="retried") == 0
        await scene.wait_full_isr(topic, 1)

    run_scenario(3, 4, scenario)
