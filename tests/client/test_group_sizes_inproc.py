"""Groups of 1 to 10 of our consumers against our group_broker, under the eager protocol (range,
roundrobin) and the cooperative one (cooperative-sticky): members join one at a time up to
ten, then leave one at a time (the oldest, the leader, first) down to one.

After every change the group must settle with each partition owned exactly once, sizes
balanced within one, every member's listener view equal to its assignment, and the broker's
DescribeGroups agreeing. The listener's calls of that change are checked as Java makes them:
eager — every member that was in the group has everything it owned revoked, and every
revocation is of everything owned at that moment; cooperative — only the partitions that
moved away are revoked (none when a member leaves: the others keep theirs), and only the
ones that arrived are assigned.

The members are trio tasks of this process, and so is the broker (tests/inproc.py, on
virtual time); small heartbeat intervals and group.initial.rebalance.delay.ms=0 keep a
rebalance short even so.
"""

from __future__ import annotations

import pytest
import trio

from client.admin import AdminClient
from tests.interop.group_helpers import (
    FAST_GROUP, OurMember, balanced_cover, partitions_of, wait_for,
)
from tests.util import unique

PARTITIONS = 12
MAX_MEMBERS = 10
STEP_DEADLINE_S = 20


def _snapshot(members: list[OurMember]) -> dict[str, tuple[int, frozenset]]:
    return {m.name: (len(m.listener.calls), frozenset(m.assignment())) for m in members}


def _check_change(before: dict, members: list[OurMember], cooperative: bool,
                  change: str) -> None:
    for m in members:
        start, owned_before = before.get(m.name, (0, frozenset()))
        calls = m.listener.calls[start:]
        after = frozenset(m.assignment())
        where = f"{m.name} after {change}: {calls}"
        assert not [c for c in calls if c[0] == "lost"], where
        revoked = frozenset().union(*[p for k, p in calls if k == "revoked"])
        assigned = frozenset().union(*[p for k, p in calls if k == "assigned"])
        if cooperative:
            # only what moved away is revoked, only what arrived is assigned
            assert revoked == owned_before - after, where
            assert assigned == after - owned_before, where
            continue
        if m.name in before:  # a rebalance revokes everything first
            assert calls and calls[0] == ("revoked", owned_before), where
        owned = set(owned_before)
        for kind, parts in calls:
            if kind == "revoked":
                assert parts == owned, where  # always everything owned at that moment
                owned = set()
            else:
                owned = set(parts)
        assert owned == after, where


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
async def test_grow_to_ten_members_and_shrink_to_one(group_broker, autojump_clock, strategy):
    cooperative = strategy == "cooperative-sticky"
    topic, group = unique("sizes"), unique("g")
    await group_broker.create_topic(topic, PARTITIONS)
    everything = partitions_of(topic, PARTITIONS)
    members: list[OurMember] = []

    async with AdminClient(bootstrap_servers=group_broker.bootstrap) as admin, \
            trio.open_nursery() as nursery:

        async def settle(change: str) -> None:
            await wait_for(lambda: balanced_cover(members, everything), STEP_DEADLINE_S,
                           f"{len(members)} members to settle after {change}")
            described = (await admin.describe_groups([group]))[group]
            assert described.state == "Stable", change
            assert described.protocol == strategy
            assert {m.member_id: set(m.assignment) for m in described.members} == {
                m.group.member.member_id: m.assignment() for m in members}, change

        for i in range(MAX_MEMBERS):
            before = _snapshot(members)
            member = OurMember(f"m{i}", group_broker.bootstrap, group, [topic],
                               cooperative=cooperative,
                               partition_assignment_strategy=strategy, **FAST_GROUP)
            await nursery.start(member.run)
            members.append(member)
            await settle(f"m{i} joined")
            _check_change(before, members, cooperative, f"m{i} joined")

        while members:
            before = _snapshot(members)
            gone = members.pop(0)
            owned = frozenset(gone.assignment())
            await gone.leave()
            # close() gives up everything it owned, in one revocation
            assert gone.listener.calls[before[gone.name][0]:] == [("revoked", owned)]
            if members:
                await settle(f"{gone.name} left")
                _check_change(before, members, cooperative, f"{gone.name} left")
