"""What a cooperative rebalance looks like to a member that keeps partitions, against our
broker in the test's own trio run on virtual time (tests/inproc.py).

A member that keeps partitions keeps consuming them through the rebalance. The test holds
the rebalance open: the joining member's first on_partitions_assigned blocks, so it cannot
rejoin for the follow-up rebalance (KIP-429) that the revoking member starts, and the group
stays in PreparingRebalance. Records produced to the kept partitions meanwhile must reach
the keeping member while it is still JOINING and the broker still says PreparingRebalance,
at the next offsets (its position was not reset), exactly once. The mixed group with
librdkafka's consumers is tests/interop/test_client_group_rebalance.py's.
"""

from __future__ import annotations

import pytest
import trio

from client.admin import AdminClient
from client.consumer.membership import MemberState
from tests.interop.group_helpers import (
    FAST_GROUP, OurMember, Recorder, balanced_cover, partitions_of, wait_for,
)
from tests.util import unique

DEADLINE_S = 30
COOPERATIVE = dict(FAST_GROUP, partition_assignment_strategy="cooperative-sticky")


class HoldFirstAssignment(Recorder):
    """Blocks in its first on_partitions_assigned until `release` is set: meanwhile its
    member cannot rejoin, so the group's next rebalance stays open."""

    def __init__(self) -> None:
        super().__init__(cooperative=True)
        self.held = trio.Event()
        self.release = trio.Event()

    async def on_partitions_assigned(self, partitions):
        await super().on_partitions_assigned(partitions)
        if not self.held.is_set():
            self.held.set()
            await self.release.wait()


@pytest.mark.parametrize("auto_commit", [False, True], ids=["manual-commit", "auto-commit"])
async def test_a_member_keeps_consuming_its_kept_partitions_through_the_rebalance(
        group_broker, autojump_clock, auto_commit):
    broker = group_broker
    # auto-commit: a commit every 100 ms, made inside getmany, must not wait for the
    # rebalance either
    config = dict(COOPERATIVE, enable_auto_commit=auto_commit, auto_commit_interval_ms=100)
    topic, group = unique("coop-keep"), unique("g")
    await broker.create_topic(topic, 6)
    everything = partitions_of(topic, 6)
    await broker.produce(topic, [(p, f"before-{p}-{i}".encode())
                                 for p in range(6) for i in range(10)])

    a = OurMember("a", broker.bootstrap, group, [topic], cooperative=True, **config)
    held = HoldFirstAssignment()
    # b sends no heartbeat while held: a session long enough for a loaded machine
    b = OurMember("b", broker.bootstrap, group, [topic], listener=held,
                  **dict(config, session_timeout_ms=20000))
    with trio.fail_after(DEADLINE_S):
        async with AdminClient(bootstrap_servers=broker.bootstrap) as admin, \
                trio.open_nursery() as nursery:
            await nursery.start(a.run)
            await wait_for(lambda: a.stable() and a.assignment() == everything
                           and len(a.records) == 60, DEADLINE_S, "a alone with all 60 records")

            await nursery.start(b.run)
            # b holds its (empty) first assignment; a revoked what moves and rejoined
            await wait_for(lambda: held.held.is_set() and a.group.state is MemberState.JOINING
                           and a.listener.calls[-1][0] == "assigned"
                           and len(a.assignment()) == 3,
                           DEADLINE_S, "a to revoke what moves and rejoin while b is held")
            kept = a.assignment()
            moved = everything - kept
            assert a.listener.calls == [("assigned", frozenset(everything)),
                                        ("revoked", frozenset(moved)),
                                        ("assigned", frozenset())]

            async def rebalancing() -> bool:  # a's JoinGroup reached the broker
                return (await admin.describe_groups([group]))[group].state == \
                    "PreparingRebalance"
            await wait_for(rebalancing, DEADLINE_S, "the follow-up rebalance to be open")

            during = [(tp.partition, f"during-{tp.partition}-{i}".encode())
                      for tp in sorted(kept) for i in range(10)]
            await broker.produce(topic, during)
            wanted = {v for _, v in during}
            await wait_for(lambda: wanted <= {d.value for d in a.records}, DEADLINE_S,
                           "a to receive the records produced to its kept partitions")
            # ... while the rebalance was still open, on both sides
            assert a.group.state is MemberState.JOINING
            assert (await admin.describe_groups([group]))[group].state == "PreparingRebalance"
            assert {d.state for d in a.records if d.value in wanted} == {MemberState.JOINING}
            # positions went on from 10: each kept partition read once, 0..19, in order
            for tp in kept:
                assert a.offsets(tp) == list(range(20)), tp

            held.release.set()
            await wait_for(lambda: balanced_cover([a, b], everything), DEADLINE_S,
                           "the follow-up rebalance to hand the moved partitions to b")
            assert a.assignment() == kept and b.assignment() == moved
            # the follow-up rebalance revoked nothing more from a
            assert [c for c in a.listener.calls if c[0] == "revoked"] == [
                ("revoked", frozenset(moved))]
            assert not [c for c in held.calls if c[0] != "assigned"]
            await a.leave()
            await b.leave()
