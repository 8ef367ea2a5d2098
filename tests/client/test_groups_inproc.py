"""client.Consumer in subscribe mode (client/consumer/coordinator.py driving the pure
GroupMember) against our broker in the test's own trio run, on virtual time
(tests/inproc.py): consuming and committing in a group, and two of our consumers splitting
partitions under range (eager) and cooperative-sticky with the listener calls asserted.
The mixed group with a librdkafka consumer is tests/interop/test_client_groups.py's."""

from __future__ import annotations

import pytest
import trio

from client import errors
from client.consumer.consumer import Consumer
from client.consumer.membership import MemberState
from client.types import TopicPartition
from tests.inproc import InProcessBroker
from tests.interop.group_helpers import FAST_GROUP, Recorder, partitions_of
from tests.util import unique

DEADLINE_S = 40
# the consumers here auto-commit (the default) unless a test says otherwise
GROUP_CONFIG = {k: v for k, v in FAST_GROUP.items() if k != "enable_auto_commit"}


def _stable(c: Consumer) -> bool:
    g = c._group
    return g is not None and g.state is MemberState.STABLE and not g._queue


def test_subscribe_needs_a_group_id_and_excludes_assign():
    with pytest.raises(errors.InvalidGroupIdError):
        Consumer("orders", bootstrap_servers="127.0.0.1:9092")
    c = Consumer("orders", bootstrap_servers="127.0.0.1:9092", group_id="g")
    assert c.subscription() == {"orders"}
    with pytest.raises(RuntimeError, match="mutually exclusive"):
        c.assign([TopicPartition("orders", 0)])
    c2 = Consumer(bootstrap_servers="127.0.0.1:9092", group_id="g")
    c2.assign([TopicPartition("orders", 0)])
    with pytest.raises(RuntimeError, match="mutually exclusive"):
        c2.subscribe(["orders"])


async def test_consume_commit_and_a_second_consumer_resumes(group_broker, autojump_clock):
    broker = group_broker
    topic, group = unique("grp-consume"), unique("g")
    await broker.create_topic(topic, 3)
    sent = [(i % 3, f"v{i}".encode()) for i in range(300)]
    await broker.produce(topic, sent)
    listener = Recorder()
    got = []
    with trio.fail_after(DEADLINE_S):
        async with Consumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                            enable_auto_commit=False, **GROUP_CONFIG) as c:
            c.subscribe([topic], listener=listener)
            while len(got) < 300:
                for records in (await c.getmany(timeout_ms=1000)).values():
                    got += records
            assert c.assignment() == partitions_of(topic, 3)
            await c.commit()
            assert {tp: await c.committed(tp) for tp in partitions_of(topic, 3)} == {
                tp: 100 for tp in partitions_of(topic, 3)}
    assert sorted(r.value for r in got) == sorted(v for _, v in sent)
    assert listener.calls == [("assigned", frozenset(partitions_of(topic, 3))),
                              ("revoked", frozenset(partitions_of(topic, 3)))]

    # 30 more records; a new consumer in the same group starts at the committed offsets
    more = [(i % 3, f"w{i}".encode()) for i in range(30)]
    await broker.produce(topic, more)
    got2 = []
    with trio.fail_after(DEADLINE_S):
        async with Consumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                            **GROUP_CONFIG) as c2:
            while len(got2) < 30:
                for records in (await c2.getmany(timeout_ms=1000)).values():
                    got2 += records
            assert {r.offset for r in got2} == set(range(100, 110))
        # enable_auto_commit (the default) committed on close
        async with Consumer(bootstrap_servers=broker.bootstrap, group_id=group) as c3:
            assert {tp: await c3.committed(tp) for tp in partitions_of(topic, 3)} == {
                tp: 110 for tp in partitions_of(topic, 3)}
    assert sorted(r.value for r in got2) == sorted(v for _, v in more)


async def _two_members(broker: InProcessBroker, strategy: str, cooperative: bool):
    topic, group = unique("grp-split"), unique("g")
    await broker.create_topic(topic, 6)
    everything = partitions_of(topic, 6)
    l1, l2 = Recorder(cooperative), Recorder(cooperative)
    cfg = dict(GROUP_CONFIG, partition_assignment_strategy=strategy)
    first_alone = trio.Event()
    done = trio.Event()
    consumers: list[Consumer] = []
    recorded: list[Recorder] = []
    both_recorded = trio.Event()

    async def run(listener: Recorder, wait_for: trio.Event | None) -> None:
        if wait_for is not None:
            await wait_for.wait()
        async with Consumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                            **cfg) as c:
            c.subscribe([topic], listener=listener)
            consumers.append(c)
            while not done.is_set():
                await c.getmany(timeout_ms=100)
                if wait_for is None and not first_alone.is_set() and _stable(c) \
                        and c.assignment() == everything:
                    first_alone.set()
                if len(consumers) == 2 and all(_stable(x) for x in consumers):
                    a, b = (x.assignment() for x in consumers)
                    if a | b == everything and not a & b and len(a) == len(b) == 3:
                        done.set()
            # both still in the group: record the final ownership before either leaves
            listener.final = c.assignment()
            listener.final_owned = set(listener.owned)
            listener.final_calls = list(listener.calls)
            recorded.append(listener)
            if len(recorded) == 2:
                both_recorded.set()
            await both_recorded.wait()  # else the first to leave rebalances the other

    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, l1, None)
            nursery.start_soon(run, l2, first_alone)
    assert l1.final | l2.final == everything and not l1.final & l2.final
    assert l1.final_owned == l1.final and l2.final_owned == l2.final
    assert not l1.owned and not l2.owned  # close revoked everything
    return everything, l1, l2


def _before_close(listener: Recorder) -> list:
    """The calls up to the moment both members were stable with the final split. Close
    then gave up the final partitions: revoked, or lost when it came mid-rebalance (the
    other member's leave had started one), as Java's onLeavePrepare does."""
    after = listener.calls[len(listener.final_calls):]
    assert after in ([("revoked", frozenset(listener.final))],
                     [("lost", frozenset(listener.final))])
    return listener.final_calls


async def test_two_members_range_revokes_everything(group_broker, autojump_clock):
    broker = group_broker
    everything, l1, l2 = await _two_members(broker, "range", cooperative=False)
    calls1 = _before_close(l1)
    # alone: all six; when the second joins: all six revoked, then its share assigned
    assert calls1[0] == ("assigned", frozenset(everything))
    assert ("revoked", frozenset(everything)) in calls1
    i = calls1.index(("revoked", frozenset(everything)))
    assert calls1[i + 1] == ("assigned", frozenset(l1.final))
    # eager: every revocation gives up everything owned
    for calls in (calls1, _before_close(l2)):
        owned = set()
        for kind, parts in calls:
            if kind == "revoked":
                assert parts == frozenset(owned)
                owned = set()
            elif kind == "assigned":
                owned = set(parts)
    assert _before_close(l2)[-1] == ("assigned", frozenset(l2.final))


async def test_two_members_cooperative_sticky_revokes_only_moved(group_broker, autojump_clock):
    broker = group_broker
    everything, l1, l2 = await _two_members(broker, "cooperative-sticky", cooperative=True)
    calls1, calls2 = _before_close(l1), _before_close(l2)
    assert calls1[0] == ("assigned", frozenset(everything))
    revoked1 = set().union(*[p for k, p in calls1 if k == "revoked"])
    # only the partitions that moved to the second member were revoked, never a kept one
    assert revoked1 == set(l2.final)
    assert not revoked1 & set(l1.final)
    assert not [c for c in calls1 + calls2 if c[0] == "lost"]
    # the second member never had anything revoked, and got exactly what moved
    assert not [c for c in calls2 if c[0] == "revoked"]
    assert set().union(*[p for k, p in calls2 if k == "assigned"]) == set(l2.final)
