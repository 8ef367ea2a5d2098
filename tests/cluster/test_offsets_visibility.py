"""A committed offset becomes visible to OffsetFetch only once it is committed in the
replication sense, below __consumer_offsets' high watermark.

Found by `minibroker chaos` (seed 1, a paused controller): a commit appended by the
coordinator while a paused follower still sat in the ISR was answered by OffsetFetch at
once, then truncated by the next leader, and the group's committed offset went backwards.
Here a follower of the group's __consumer_offsets partition is paused (SIGSTOP) while a
commit waits for it: OffsetFetch keeps answering the previous offset until the ISR shrinks
and the high watermark covers the new one, and then answers the new one.
"""

from __future__ import annotations

import signal

import pytest
import trio

from harness.raw import call
from client import Consumer, TopicPartition
from protocol import messages as m
from tests.cluster.test_replication import create, isr_everywhere
from tests.util import unique

pytestmark = pytest.mark.interop

OFFSETS_TOPIC = "__consumer_offsets"


def _coordinator_partition(cluster, group: str) -> tuple[int, list[int]]:
    """The group's coordinator and the ISR of its __consumer_offsets partition."""
    from broker.coordinator.offsets import partition_of
    node = cluster.running()[0]
    body = call(node.port, m.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    assert body["error_code"] == 0, body
    entry = cluster.partitions(node.node_id, OFFSETS_TOPIC)[partition_of(group, 50)]
    return body["node_id"], list(entry.isr_nodes)


async def test_offset_fetch_never_answers_a_commit_the_high_watermark_does_not_cover(cluster):
    topic, group = unique("visible"), unique("visible-group")
    create(cluster, topic, 1, min_isr=1)
    isr_everywhere(cluster, topic)
    tp = TopicPartition(topic, 0)
    # two clients: a broker answers one connection's requests in order, so reads on the
    # committer's own connection would queue behind its waiting commit. The reader knows
    # only the coordinator, and gives up a request after 3 s: one sent to the paused node
    # (its FindCoordinator, on the least-loaded connection) would otherwise hang 30 s.
    coordinator, _ = _coordinator_partition(cluster, group)
    async with Consumer(bootstrap_servers=cluster.bootstrap, group_id=group,
                        enable_auto_commit=False, request_timeout_ms=20000) as consumer, \
            Consumer(bootstrap_servers=cluster.node(coordinator).bootstrap, group_id=group,
                     enable_auto_commit=False, request_timeout_ms=3000) as reader:
        await consumer.commit({tp: 5})
        assert await consumer.committed(tp) == 5
        coordinator, isr = _coordinator_partition(cluster, group)
        assert len(isr) == 3, isr
        controller = cluster.active_controller()
        follower = next(n for n in isr if n not in (coordinator, controller))
        proc = cluster.node(follower).proc
        proc.send_signal(signal.SIGSTOP)
        try:
            answered: list[object] = []

            async def commit_ten() -> None:
                try:
                    await consumer.commit({tp: 10})
                except Exception as e:  # noqa: BLE001 - a timed-out commit is fine here
                    answered.append(e)
                else:
                    answered.append("ok")

            seen: list[int | None] = []
            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(commit_ten)
                    # until the paused follower leaves the ISR (fenced after 2 s), the
                    # commit is only in the leader's log: every read meanwhile must say 5
                    while not answered:
                        seen.append(await reader.committed(tp))
                        await trio.sleep(0.2)
                assert seen and set(seen[:-1]) <= {5}, seen
                # the ISR shrinks without the paused follower and the HW covers the commit
                while (value := await reader.committed(tp)) != 10:
                    assert value == 5, value
                    await trio.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGCONT)
    # the commit waited ~2 s (until the paused broker was fenced): reads went on meanwhile
    assert seen.count(5) >= 3, seen
