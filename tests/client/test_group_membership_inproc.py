"""Membership of one of our consumers in a group, against our broker: static membership
(group_instance_id), unsubscribe(), pause/resume across a rebalance, max.poll.interval.ms,
a Consumer whose task is cancelled, and pattern subscriptions.

The broker runs in the test's own trio run on virtual time (tests/inproc.py): the subject
is the group's protocol and state, not the process, and the session timeouts and
rebalances that took seconds on a broker process pass in milliseconds.

Static members follow Java (AbstractCoordinator.maybeLeaveGroup, Kafka 2.3+): close() sends
no LeaveGroup, so a restart within session.timeout.ms takes the old place back — same
assignment, same generation, no rebalance for anyone.
"""

from __future__ import annotations

import pytest
import trio

from client import errors
from client.admin import AdminClient
from client.consumer.consumer import Consumer
from client.consumer.membership import MemberState
from client.types import TopicPartition
from tests.interop.group_helpers import (
    FAST_GROUP, OurMember, Recorder, balanced_cover, partitions_of, wait_for,
)
from tests.inproc import InProcessBroker
from tests.util import unique

DEADLINE_S = 30
GROUP_CONFIG = FAST_GROUP


def _events(group_broker: InProcessBroker, group: str, kind: str) -> list[dict]:
    return group_broker.events(type=kind, group=group)


async def _produce(group_broker: InProcessBroker, topic: str, partitions, per_partition: int,
                   tag: str) -> set[bytes]:
    sent = [(p, f"{tag}-{p}-{i}".encode()) for p in partitions for i in range(per_partition)]
    await group_broker.produce(topic, sent)
    return {v for _, v in sent}


# -- static membership ---------------------------------------------------------------------

async def test_static_member_restart_keeps_its_assignment_without_a_rebalance(
        group_broker, autojump_clock):
    # the members may form the group in one or two rebalances; the restart must add none
    topic, group = unique("static"), unique("g")
    await group_broker.create_topic(topic, 4)
    everything = partitions_of(topic, 4)
    cfg = dict(GROUP_CONFIG, partition_assignment_strategy="range")

    def member(instance: str) -> OurMember:
        return OurMember(instance, group_broker.bootstrap, group, [topic],
                         group_instance_id=instance, **cfg)

    a, b = member("inst-a"), member("inst-b")
    with trio.fail_after(DEADLINE_S):
        async with AdminClient(bootstrap_servers=group_broker.bootstrap) as admin, \
                trio.open_nursery() as nursery:
            nursery.start_soon(a.run)
            nursery.start_soon(b.run)
            await wait_for(lambda: balanced_cover([a, b], everything), DEADLINE_S,
                           "both static members to share the partitions")
            generation = a.generation
            stable_before = [e["generation"] for e in _events(group_broker, group, "group_state")
                             if e["new_state"] == "Stable"]
            assert stable_before[-1] == generation
            leader, other = (a, b) if a.group.member.is_leader else (b, a)
            old_id, old_assignment = leader.group.member.member_id, leader.assignment()
            other_calls = list(other.listener.calls)

            # close: the listener gives the partitions up, but no LeaveGroup goes out
            await leader.leave()
            assert leader.listener.calls[-1] == ("revoked", frozenset(old_assignment))
            assert _events(group_broker, group, "group_leave") == []
            described = (await admin.describe_groups([group]))[group]
            assert described.state == "Stable"
            assert {m.member_id for m in described.members} == {
                old_id, other.group.member.member_id}

            # restart within the session timeout: same place, same generation
            again = member(leader.name)
            nursery.start_soon(again.run)
            await wait_for(lambda: again.stable() and again.assignment() == old_assignment,
                           DEADLINE_S, "the restarted static member to get its partitions")
            assert again.generation == generation == other.generation
            assert again.group.member.member_id != old_id  # the broker replaced the id
            assert again.listener.calls == [("assigned", frozenset(old_assignment))]
            assert other.listener.calls == other_calls  # the other member saw nothing
            assert other.stable() and other.generation == generation
            assert [e["generation"] for e in _events(group_broker, group, "group_state")
                    if e["new_state"] == "Stable"] == stable_before
            joins = _events(group_broker, group, "group_join")
            assert [j["kind"] for j in joins if j["member"] == again.group.member.member_id
                    ] == ["static rejoin"]
            await again.leave()
            await other.leave()
    assert _events(group_broker, group, "group_leave") == []


async def test_a_second_instance_with_the_same_id_fences_the_first(group_broker, autojump_clock):
    topic, group = unique("fenced"), unique("g")
    await group_broker.create_topic(topic, 2)
    cfg = dict(GROUP_CONFIG, group_instance_id="only-one")
    first = Consumer(topic, bootstrap_servers=group_broker.bootstrap, group_id=group, **cfg)
    second = OurMember("second", group_broker.bootstrap, group, [topic], **cfg)
    with trio.fail_after(DEADLINE_S):
        async with first, trio.open_nursery() as nursery:
            while not (first._group is not None and first._group.state is MemberState.STABLE
                       and first.assignment() == partitions_of(topic, 2)):
                await first.getmany(timeout_ms=50)
            await nursery.start(second.run)
            await wait_for(lambda: second.stable()
                           and second.assignment() == partitions_of(topic, 2),
                           DEADLINE_S, "the second instance to take the place over")
            with pytest.raises(errors.FencedInstanceIdError):
                while True:  # the first learns it on its next heartbeat
                    await first.getmany(timeout_ms=50)
            await second.leave()


# -- unsubscribe ---------------------------------------------------------------------------

class CommitOnRevoke(Recorder):
    """Commits the positions of what is revoked, as Java applications do."""

    def __init__(self) -> None:
        super().__init__()
        self.consumer = None

    async def on_partitions_revoked(self, partitions):
        await super().on_partitions_revoked(partitions)
        if partitions:
            await self.consumer.commit()


async def test_unsubscribe_leaves_the_group_and_subscribe_joins_again(group_broker, autojump_clock):
    topic, group = unique("unsub"), unique("g")
    await group_broker.create_topic(topic, 2)
    everything = partitions_of(topic, 2)
    first = await _produce(group_broker, topic, range(2), 5, "first")
    listener = CommitOnRevoke()
    m = OurMember("m", group_broker.bootstrap, group, [topic], listener=listener, **GROUP_CONFIG)
    listener.consumer = m.consumer
    with trio.fail_after(DEADLINE_S):
        async with AdminClient(bootstrap_servers=group_broker.bootstrap) as admin, \
                trio.open_nursery() as nursery:
            await nursery.start(m.run)
            await wait_for(lambda: {d.value for d in m.records} == first, DEADLINE_S,
                           "the first records")
            member_id = m.group.member.member_id

            await m.consumer.unsubscribe()
            assert listener.calls[-1] == ("revoked", frozenset(everything))
            assert m.consumer.assignment() == set() and m.consumer.subscription() == set()
            assert m.consumer._group is None
            assert [e["member"] for e in _events(group_broker, group, "group_leave")] == [member_id]
            assert (await admin.describe_groups([group]))[group].state == "Empty"
            # the revoked listener committed with the member's identity before it left
            assert {tp: await m.consumer.committed(tp) for tp in everything} == {
                tp: 5 for tp in everything}

            second = await _produce(group_broker, topic, range(2), 3, "second")
            m.consumer.subscribe([topic])
            await wait_for(lambda: {d.value for d in m.records} == first | second,
                           DEADLINE_S, "the records produced after the unsubscribe")
            assert m.assignment() == everything
            assert listener.calls[-1] == ("assigned", frozenset(everything))
            assert m.group.member.member_id != member_id  # a new member
            assert len(m.records) == 16  # from the committed offsets: nothing twice

            # unsubscribe and subscribe at once: the old member leaves first, then the new
            # one joins
            calls = len(listener.calls)
            leaving = m.consumer.unsubscribe()
            m.consumer.subscribe([topic])
            await leaving
            await wait_for(lambda: m.stable() and m.assignment() == everything, DEADLINE_S,
                           "the member to join again")
            assert listener.calls[calls:] == [("revoked", frozenset(everything)),
                                              ("assigned", frozenset(everything))]
            await m.leave()


# -- pause / resume ------------------------------------------------------------------------

async def test_paused_partitions_stay_paused_through_a_cooperative_rebalance(
        group_broker, autojump_clock):
    topic, group = unique("pause"), unique("g")
    await group_broker.create_topic(topic, 4)
    everything = partitions_of(topic, 4)
    first = await _produce(group_broker, topic, range(4), 5, "first")
    cfg = dict(GROUP_CONFIG, partition_assignment_strategy="cooperative-sticky")
    a = OurMember("a", group_broker.bootstrap, group, [topic], cooperative=True, **cfg)
    b = OurMember("b", group_broker.bootstrap, group, [topic], cooperative=True, **cfg)
    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)
            await wait_for(lambda: {d.value for d in a.records} == first, DEADLINE_S,
                           "a to read the first records")
            a.consumer.pause(TopicPartition(topic, 0))
            assert a.consumer.paused() == {TopicPartition(topic, 0)}
            second = await _produce(group_broker, topic, range(4), 5, "second")
            others = {v for v in second if not v.startswith(b"second-0-")}
            await wait_for(lambda: others <= {d.value for d in a.records}, DEADLINE_S,
                           "the records of the partitions not paused")
            assert a.offsets(TopicPartition(topic, 0)) == list(range(5))

            a.consumer.pause(*everything)
            await nursery.start(b.run)
            await wait_for(lambda: balanced_cover([a, b], everything), DEADLINE_S,
                           "b to join")
            kept = a.assignment()
            assert a.consumer.paused() == kept  # Java keeps a kept partition's pause
            assert not [c for c in a.listener.calls if c[0] == "revoked" and c[1] & kept]
            held = [d for d in a.records if d.tp in kept]
            a.consumer.resume(*kept)
            assert a.consumer.paused() == set()
            wanted = {v for v in second if int(v.split(b"-")[1]) in
                      {tp.partition for tp in kept}}
            await wait_for(lambda: wanted <= {d.value for d in a.records}, DEADLINE_S,
                           "the kept partitions' records once resumed")
            for tp in kept:  # resumed from the position it was paused at, nothing twice
                assert a.offsets(tp) == list(range(10)), (tp, held)
            await a.leave()
            await b.leave()


# -- max.poll.interval.ms ------------------------------------------------------------------

async def test_a_member_that_stops_polling_leaves_and_the_others_take_over(
        group_broker, autojump_clock):
    topic, group = unique("maxpoll"), unique("g")
    await group_broker.create_topic(topic, 4)
    everything = partitions_of(topic, 4)
    cfg = dict(GROUP_CONFIG, partition_assignment_strategy="range")
    slow = OurMember("slow", group_broker.bootstrap, group, [topic],
                     **dict(cfg, max_poll_interval_ms=1500))
    steady = OurMember("steady", group_broker.bootstrap, group, [topic], **cfg)
    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(slow.run)
            await nursery.start(steady.run)
            await wait_for(lambda: balanced_cover([slow, steady], everything), DEADLINE_S,
                           "two members")
            slow_id, slow_owned = slow.group.member.member_id, slow.assignment()
            calls = len(slow.listener.calls)

            slow.polling = False
            await wait_for(lambda: balanced_cover([steady], everything), DEADLINE_S,
                           "steady to take every partition")
            leaves = _events(group_broker, group, "group_leave")
            assert [(e["member"], e["reason"]) for e in leaves] == [
                (slow_id, "left the group")]  # the broker records its own reason
            assert slow.group.state is MemberState.UNJOINED
            # the loss is told at once, and the member commits nothing for partitions
            # that are the other member's now (Java's CommitFailedException)
            assert slow.listener.calls[calls:] == [("lost", frozenset(slow_owned))]
            assert slow.consumer.assignment() == set()
            with pytest.raises(errors.CommitFailedError) as failed:
                await slow.consumer.commit({tp: 0 for tp in slow_owned})
            assert not failed.value.retriable

            slow.resume_polling()
            await wait_for(lambda: balanced_cover([slow, steady], everything), DEADLINE_S,
                           "slow to come back")
            assert slow.listener.calls[calls + 1:] == [
                ("assigned", frozenset(slow.assignment()))]
            await slow.leave()
            await steady.leave()


# -- cancellation --------------------------------------------------------------------------

async def test_cancelling_the_task_of_a_grouped_consumer_closes_it_cleanly(
        group_broker, autojump_clock):
    # The caller's cancellation stops the Consumer's background tasks, but not its ready
    # connections: the final commit and the LeaveGroup get cancelled_close_timeout_ms,
    # shielded, so the group hears of the member's going at once. The Consumer closes and
    # leaves trio's nursery stack intact (it once left its connection pool open).
    topic, group = unique("cancel"), unique("g")
    await group_broker.create_topic(topic, 2)
    m = OurMember("m", group_broker.bootstrap, group, [topic], **GROUP_CONFIG)
    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(m.run)
            await wait_for(m.stable, DEADLINE_S, "the member to join")
            member_id = m.group.member.member_id
            nursery.cancel_scope.cancel()
        assert m.closed.is_set()
        assert [e["member"] for e in _events(group_broker, group, "group_leave")] == [member_id]
        assert m.consumer._pool is None and m.consumer._nursery is None
        # the task's nursery stack is intact: more nurseries open and close normally
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep, 0)


# -- pattern subscription ------------------------------------------------------------------

async def test_pattern_subscription_follows_matching_topics_as_they_appear(
        group_broker, autojump_clock):
    prefix, group = unique("pat"), unique("g")
    await group_broker.create_topic(f"{prefix}-a", 2)
    await group_broker.create_topic(f"other-{prefix}", 1)  # does not match
    listener = Recorder()
    consumer = Consumer(bootstrap_servers=group_broker.bootstrap, group_id=group,
                        metadata_max_age_ms=300, **GROUP_CONFIG)
    with trio.fail_after(DEADLINE_S):
        async with consumer as c:
            c.subscribe(pattern=rf"{prefix}-.*", listener=listener)
            first = await _produce(group_broker, f"{prefix}-a", range(2), 2, "a")
            got: set[bytes] = set()

            async def consume_until(wanted: set[bytes]) -> None:
                while not wanted <= got:
                    for records in (await c.getmany(timeout_ms=100)).values():
                        got.update(r.value for r in records)

            await consume_until(first)
            assert c.subscription() == {f"{prefix}-a"}
            assert c.assignment() == partitions_of(f"{prefix}-a", 2)

            await group_broker.create_topic(f"{prefix}-b", 1)
            second = await _produce(group_broker, f"{prefix}-b", range(1), 3, "b")
            await consume_until(second)
            assert c.subscription() == {f"{prefix}-a", f"{prefix}-b"}
            assert c.assignment() == partitions_of(f"{prefix}-a", 2) | partitions_of(f"{prefix}-b", 1)
            # eager (the default range first): everything revoked, then both topics assigned
            assert listener.calls[-2:] == [
                ("revoked", frozenset(partitions_of(f"{prefix}-a", 2))),
                ("assigned", frozenset(partitions_of(f"{prefix}-a", 2) | partitions_of(f"{prefix}-b", 1)))]
    assert got == first | second


# -- partition count change ----------------------------------------------------------------

async def test_added_partitions_are_handed_out_by_a_rebalance_the_leader_starts(
        group_broker, autojump_clock):
    """Adding partitions to a subscribed topic triggers a rebalance. As in Java,
    the leader notices at a metadata refresh that the counts its assignment used changed;
    under cooperative-sticky the two members keep what they had and split the new ones."""
    topic, group = unique("grow"), unique("g")
    await group_broker.create_topic(topic, 2)
    members = [OurMember(f"m{i}", group_broker.bootstrap, group, [topic], cooperative=True,
                         partition_assignment_strategy=["cooperative-sticky"],
                         metadata_max_age_ms=300, **GROUP_CONFIG) for i in range(2)]
    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            for m in members:
                await nursery.start(m.run)
            await wait_for(lambda: balanced_cover(members, partitions_of(topic, 2)),
                           DEADLINE_S, "two members with one partition each")
            before = {m.name: m.assignment() for m in members}
            calls_before = {m.name: len(m.listener.calls) for m in members}
            async with AdminClient(bootstrap_servers=group_broker.bootstrap) as admin:
                await admin.create_partitions({topic: 4})
            await wait_for(lambda: balanced_cover(members, partitions_of(topic, 4)),
                           DEADLINE_S, "the four partitions split two and two")
            for m in members:
                assert before[m.name] <= m.assignment()  # sticky: nothing moved
                later = m.listener.calls[calls_before[m.name]:]
                assert [kind for kind, _ in later] == ["assigned"]
            fresh = await _produce(group_broker, topic, [2, 3], 2, "new")
            await wait_for(lambda: fresh <= {d.value for m in members for d in m.records},
                           DEADLINE_S, "records on the added partitions consumed")
            for m in members:
                await m.leave()
    reasons = [e["reason"] for e in _events(group_broker, group, "group_join")]
    assert any("partition count" in (r or "") for r in reasons), reasons


def test_subscribe_takes_topics_or_a_pattern():
    c = Consumer(bootstrap_servers="127.0.0.1:9", group_id="g")
    with pytest.raises(ValueError, match="not both"):
        c.subscribe(["t"], pattern="t.*")
    with pytest.raises(ValueError, match="at least one topic"):
        c.subscribe([])
    c.subscribe(pattern="t.*")
    assert c.subscription() == set()  # nothing matched yet: the Consumer is not open


# -- auto-commit -----------------------------------------------------------------------------

async def test_a_stuck_auto_commit_does_not_hold_up_getmany(
        group_broker, monkeypatch, autojump_clock):
    # A commit can wait long in a group: behind the member's own JoinGroup on the
    # coordinator's connection, or refused while the group completes a rebalance. Java's
    # auto-commit is asynchronous; ours must not stop getmany either.
    topic, group = unique("autocommit"), unique("g")
    await group_broker.create_topic(topic, 1)
    tp = TopicPartition(topic, 0)
    release = trio.Event()
    held: list[dict] = []
    real_commit = Consumer._commit

    async def stuck_auto_commit(self, offsets, retry):
        if not retry:  # the background auto-commit
            held.append(dict(offsets))
            await release.wait()
        await real_commit(self, offsets, retry)

    monkeypatch.setattr(Consumer, "_commit", stuck_auto_commit)
    first = await _produce(group_broker, topic, [0], 5, "first")
    cfg = dict(GROUP_CONFIG, enable_auto_commit=True, auto_commit_interval_ms=50)
    got: set[bytes] = set()
    with trio.fail_after(DEADLINE_S):
        async with Consumer(topic, bootstrap_servers=group_broker.bootstrap, group_id=group,
                            **cfg) as c:
            while not (first <= got and held):
                for records in (await c.getmany(timeout_ms=50)).values():
                    got.update(r.value for r in records)
            second = await _produce(group_broker, topic, [0], 5, "second")
            while not second <= got:  # delivered while the auto-commit is stuck
                for records in (await c.getmany(timeout_ms=50)).values():
                    got.update(r.value for r in records)
            # one at a time: none started behind the stuck one
            assert len(held) == 1 and set(held[0]) == {tp} and held[0][tp] <= 5
            release.set()
        # close committed after the released one, never before it
        async with Consumer(bootstrap_servers=group_broker.bootstrap, group_id=group) as check:
            assert await check.committed(tp) == 10
