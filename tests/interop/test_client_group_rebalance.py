"""What a cooperative rebalance looks like to the members, against our broker process.

A mixed group of our consumers and confluent-kafka (librdkafka) consumers under
cooperative-sticky converges to each partition owned once, through a join of ours and a
leave of librdkafka's; our members are only ever revoked what moved. A member of ours that
keeps partitions through a rebalance is tests/client/test_group_rebalance_inproc.py's.
"""

from __future__ import annotations

import pytest
import trio

from client.types import TopicPartition
from tests.interop.group_helpers import FAST_GROUP, FAST_GROUP_BROKER
from tests.interop.group_helpers import GroupMember as CKMember
from tests.interop.group_helpers import (
    OurMember, partitions_of, polled_in_a_thread, wait_for,
)
from tests.interop.librdkafka import create_topic
from tests.util import unique

DEADLINE_S = 30
COOPERATIVE = dict(FAST_GROUP, partition_assignment_strategy="cooperative-sticky")


@pytest.fixture
def broker(make_broker):
    return make_broker(**FAST_GROUP_BROKER)


async def test_mixed_group_with_librdkafka_under_cooperative_sticky(broker):
    topic, group = unique("coop-mixed"), unique("g")
    create_topic(broker.bootstrap, topic, 6)
    everything = partitions_of(topic, 6)
    ck = CKMember(broker.bootstrap, group, [topic], "ck",
                  **{"partition.assignment.strategy": "cooperative-sticky"})
    def ck_owned() -> set[TopicPartition]:
        return set() if ck.closed else {TopicPartition(t, p) for t, p in ck.owned}

    def converged(ours: list[OurMember], with_ck: bool) -> bool:
        if not all(m.stable() for m in ours):
            return False
        owned = [m.assignment() for m in ours] + ([ck_owned()] if with_ck else [])
        if any(m.listener.owned != m.assignment() for m in ours):
            return False
        sizes = [len(o) for o in owned]
        return (min(sizes) > 0 and max(sizes) - min(sizes) <= 1 and sum(sizes) == 6
                and set().union(*owned) == everything)

    a = OurMember("a", broker.bootstrap, group, [topic], cooperative=True, **COOPERATIVE)
    b = OurMember("b", broker.bootstrap, group, [topic], cooperative=True, **COOPERATIVE)
    with trio.fail_after(DEADLINE_S):
        async with polled_in_a_thread(ck) as pump, trio.open_nursery() as nursery:
            await nursery.start(a.run)
            await wait_for(lambda: converged([a], with_ck=True), DEADLINE_S,
                           "ours and librdkafka's to split six partitions")
            a_before, mark = a.assignment(), len(a.listener.calls)

            await nursery.start(b.run)  # a join of ours
            await wait_for(lambda: converged([a, b], with_ck=True), DEADLINE_S,
                           "three members to share six partitions")
            a_after_join = a.assignment()
            assert a_after_join < a_before  # sticky: a kept two of its three
            revoked = set().union(*[p for k, p in a.listener.calls[mark:] if k == "revoked"])
            assert revoked == a_before - a_after_join
            assert not [c for c in b.listener.calls if c[0] != "assigned"]

            pump.close_requested.set()  # a leave of librdkafka's
            await wait_for(lambda: ck.closed and converged([a, b], with_ck=False),
                           DEADLINE_S, "ours to take over librdkafka's partitions")
            assert a.assignment() >= a_after_join  # nothing taken from a
            assert not [c for c in a.listener.calls + b.listener.calls
                        if c[0] == "lost"]
            revoked_after = set().union(
                *[p for k, p in a.listener.calls[mark:] if k == "revoked"])
            assert revoked_after == revoked
            await a.leave()
            await b.leave()
