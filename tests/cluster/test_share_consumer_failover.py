"""Our client's ShareConsumer across a kill -9 of the share coordinator's broker in a
three-node cluster, as tests/cluster/test_share_groups_failover.py does it with librdkafka's:
what was accepted before is never delivered again, what was released is delivered to the
group afterwards."""

from __future__ import annotations

from collections import Counter

import trio

from client import AcknowledgeType, ShareConsumer
from tests.cluster.test_share_groups_failover import kill_share_coordinator, twenty_records


async def test_accepted_records_survive_the_share_coordinators_kill(make_cluster):
    cluster, topic, group = twenty_records(make_cluster)
    accepted: list = []
    async with ShareConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                             share_acknowledgement_mode="explicit") as c:
        with trio.fail_after(60):
            while len(accepted) < 10:
                for r in await c.poll(timeout_ms=500):
                    if int(r.value) < 10:
                        c.acknowledge(r, AcknowledgeType.ACCEPT)
                        accepted.append(r.value)
                    else:
                        c.acknowledge(r, AcknowledgeType.RELEASE)
                results = await c.commit()
                assert all(e is None for e in results.values()), results

    kill_share_coordinator(cluster, group, topic)

    again: Counter = Counter()
    bootstrap = ",".join(n.bootstrap for n in cluster.running())
    async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group) as c:
        with trio.fail_after(90):
            while len(again) < 10:
                again.update(r.value for r in await c.poll(timeout_ms=500))
        with trio.move_on_after(1.5):
            while True:
                again.update(r.value for r in await c.poll(timeout_ms=200))
    assert sorted(accepted) == sorted(str(i).encode() for i in range(10))
    assert set(again) == {str(i).encode() for i in range(10, 20)}, \
        "an accepted record was delivered again, or a released one was lost"
