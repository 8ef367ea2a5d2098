"""A committed offset becomes visible to OffsetFetch only once it is committed in the
replication sense, below __consumer_offsets' high watermark.

Found by `minibroker chaos` (seed 1, a paused controller): a commit appended by the
coordinator while a paused follower still sat in the ISR was answered by OffsetFetch at
once, then truncated by the next leader, and the group's committed offset went backwards.
Here a follower of the group's __consumer_offsets partition is paused while a commit waits
for it: OffsetFetch keeps answering the previous offset until the ISR shrinks and the high
watermark covers the new one, and then answers the new one.

Moved from tests/cluster (SIGSTOP on a process): a paused simulated node's connections hold
every byte both ways and none of its timers fires, as a stopped process's.
"""

from __future__ import annotations

import trio

from broker.coordinator.offsets import partition_of
from broker.coordinator.group_runtime import OFFSETS_TOPIC
from client import Consumer, TopicPartition
from sim.scenario import Scene, run_scenario


def test_offset_fetch_never_answers_a_commit_the_high_watermark_does_not_cover():
    async def scenario(scene: Scene) -> list[int | None]:
        topic, group = "visible", "visible-group"
        await scene.create_topic(topic, 1, config={"min.insync.replicas": "1"})
        tp = TopicPartition(topic, 0)
        seen: list[int | None] = []

        async def run() -> None:
            # two clients: a broker answers one connection's requests in order, so reads
            # on the committer's own connection would queue behind its waiting commit. The
            # reader knows only the coordinator, and gives up a request after 3 s.
            async with Consumer(bootstrap_servers=scene.bootstrap, group_id=group,
                                enable_auto_commit=False,
                                request_timeout_ms=20000) as consumer:
                await consumer.commit({tp: 5})
                assert await consumer.committed(tp) == 5
                coordinator = scene.coordinator(group)
                assert coordinator is not None
                host, port = scene.address(coordinator)
                count = scene.world.nodes[0].config.offsets_topic_num_partitions
                offsets_partition = partition_of(group, count)
                await scene.wait_full_isr(OFFSETS_TOPIC, count)
                isr = scene.isr(OFFSETS_TOPIC, offsets_partition)
                assert len(isr) == 3, isr
                controller = scene.active_controller()
                follower = next(n for n in isr if n not in (coordinator, controller))
                async with Consumer(bootstrap_servers=f"{host}:{port}", group_id=group,
                                    enable_auto_commit=False,
                                    request_timeout_ms=3000) as reader:
                    assert await reader.committed(tp) == 5
                    scene.pause(follower)
                    answered: list[object] = []

                    async def commit_ten() -> None:
                        try:
                            await consumer.commit({tp: 10})
                        except Exception as e:  # noqa: BLE001 - a timed-out commit is fine
                            answered.append(e)
                        else:
                            answered.append("ok")

                    with trio.fail_after(60):
                        async with trio.open_nursery() as nursery:
                            nursery.start_soon(commit_ten)
                            # until the paused follower leaves the ISR, the commit is only
                            # in the leader's log: every read meanwhile must say 5
                            while not answered:
                                seen.append(await reader.committed(tp))
                                await trio.sleep(0.2)
                        assert seen and set(seen[:-1]) <= {5}, seen
                        # the ISR shrinks without the paused follower, the HW covers it
                        while (value := await reader.committed(tp)) != 10:
                            assert value == 5, value
                            await trio.sleep(0.2)
                    scene.resume(follower)
        await scene.client(run, name="committer")
        return seen

    seen = run_scenario(3, 1, scenario)
    # the commit waited until the paused broker left the ISR: reads went on meanwhile
    assert seen.count(5) >= 3, seen
