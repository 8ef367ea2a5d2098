"""A subscribed or assigned topic deleted under our consumer, against our broker (topic
auto-creation off, or the consumer's own Metadata requests would create it again).

In a group the leader notices at a metadata refresh that the snapshot its assignment was
computed on changed (the topic is gone) and rejoins, as Java's ConsumerCoordinator does;
the next assignment holds only what exists, and the members go on consuming. In assign
mode the deleted partition stays assigned (the application chose it) and the fetcher asks
for metadata at most once per retry_backoff_ms instead of once per fetch.
"""

from __future__ import annotations

import time

import pytest
import trio

from broker.events import read_events
from client.admin import AdminClient
from client.consumer.consumer import Consumer
from client.types import TopicPartition
from tests.interop.group_helpers import (
    FAST_GROUP, FAST_GROUP_BROKER, OurMember, balanced_cover, partitions_of, wait_for,
)
from tests.interop.librdkafka import create_topic, produce
from tests.util import unique

DEADLINE_S = 40


@pytest.fixture
def broker(make_broker):
    return make_broker(**FAST_GROUP_BROKER, **{"auto.create.topics.enable": "false"})


def _produce(broker, topic: str, partitions, per_partition: int, tag: str,
             **config) -> set[bytes]:
    sent = [(b"k", f"{tag}-{p}-{i}".encode(), None, p)
            for p in partitions for i in range(per_partition)]
    assert len(produce(broker.bootstrap, topic, sent, **config)) == len(sent)
    return {v for _, v, _, _ in sent}


async def _delete(broker, topic: str) -> None:
    async with AdminClient(bootstrap_servers=broker.bootstrap) as admin:
        await admin.delete_topics([topic])


async def test_members_rejoin_without_a_deleted_topic(broker):
    keep, gone, group = unique("keep"), unique("gone"), unique("g")
    create_topic(broker.bootstrap, keep, 2)
    create_topic(broker.bootstrap, gone, 2)
    members = [OurMember(f"m{i}", broker.bootstrap, group, [keep, gone], **FAST_GROUP)
               for i in range(2)]
    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            for m in members:
                await nursery.start(m.run)
            everything = partitions_of(keep, 2) | partitions_of(gone, 2)
            await wait_for(lambda: balanced_cover(members, everything), DEADLINE_S,
                           "both topics split between the two members")
            first = _produce(broker, keep, range(2), 3, "a") | _produce(
                broker, gone, range(2), 3, "b")
            await wait_for(lambda: first <= {d.value for m in members for d in m.records},
                           DEADLINE_S, "the records of both topics consumed")
            generation = members[0].generation
            calls_before = {m.name: len(m.listener.calls) for m in members}

            await _delete(broker, gone)
            await wait_for(lambda: balanced_cover(members, partitions_of(keep, 2)),
                           DEADLINE_S, "the surviving topic split, the deleted one gone")
            for m in members:
                assert m.generation > generation
                assert m.consumer.subscription() == {keep, gone}  # still subscribed, as Java
                # eager (range): all revoked, then only what exists assigned
                later = m.listener.calls[calls_before[m.name]:]
                assert [kind for kind, _ in later[-2:]] == ["revoked", "assigned"]
                assert all(tp.topic == keep for tp in later[-1][1])

            second = _produce(broker, keep, range(2), 3, "c")
            await wait_for(lambda: second <= {d.value for m in members for d in m.records},
                           DEADLINE_S, "the surviving topic consumed after the rebalance")
            for m in members:
                await m.leave()
    reasons = [e.get("reason") or "" for e in read_events(broker.data_dir)
               if e.get("type") == "group_join" and e.get("group") == group]
    assert any(f"topic {gone} was deleted" in r for r in reasons), reasons


async def test_a_deleted_topic_created_again_is_assigned_again(broker):
    """The subscription keeps the deleted topic: once it exists again, the leader's
    snapshot changes again and the next assignment hands it out."""
    keep, gone, group = unique("keep"), unique("again"), unique("g")
    create_topic(broker.bootstrap, keep, 1)
    create_topic(broker.bootstrap, gone, 1)
    member = OurMember("m0", broker.bootstrap, group, [keep, gone], metadata_max_age_ms=300,
                       **FAST_GROUP)
    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(member.run)
            await wait_for(lambda: balanced_cover([member], {TopicPartition(keep, 0),
                                                              TopicPartition(gone, 0)}),
                           DEADLINE_S, "both topics assigned")
            await _delete(broker, gone)
            await wait_for(lambda: balanced_cover([member], {TopicPartition(keep, 0)}),
                           DEADLINE_S, "the deleted topic no longer assigned")
            create_topic(broker.bootstrap, gone, 2)
            await wait_for(lambda: balanced_cover([member], partitions_of(gone, 2)
                                                  | {TopicPartition(keep, 0)}),
                           DEADLINE_S, "the topic created again assigned again")
            fresh = _produce(broker, gone, range(2), 2, "new")
            await wait_for(lambda: fresh <= {d.value for d in member.records},
                           DEADLINE_S, "the new topic's records consumed")
            await member.leave()


async def test_an_assigned_deleted_partition_asks_for_metadata_once_per_backoff(broker):
    """Every fetch round finds no leader for the deleted partition and asks for a metadata
    update; the updates are served at most once per retry_backoff_ms (Java's
    Metadata.timeToNextUpdate), while the live partition is fetched round after round."""
    keep, gone = unique("keep"), unique("gone")
    create_topic(broker.bootstrap, keep, 1)
    create_topic(broker.bootstrap, gone, 1)
    backoff_s = 1.0
    async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                        retry_backoff_ms=int(backoff_s * 1000),
                        max_partition_fetch_bytes=1) as c:
        c.assign([TopicPartition(keep, 0), TopicPartition(gone, 0)])
        with trio.fail_after(DEADLINE_S):
            assert await c.position(TopicPartition(gone, 0)) == 0
            await _delete(broker, gone)
            # one record per batch, and one batch per fetch (max_partition_fetch_bytes=1):
            # one fetch round per record
            wanted = _produce(broker, keep, [0], 60, "k",
                              **{"linger.ms": 0, "batch.num.messages": 1})
            cluster = c._cluster
            refreshes_before = cluster.generation
            started = time.monotonic()
            got: set[bytes] = set()
            rounds = 0
            while not wanted <= got:
                batch = await c.getmany(timeout_ms=1000)
                rounds += bool(batch)
                for records in batch.values():
                    got.update(r.value for r in records)
            elapsed = time.monotonic() - started
            refreshes = cluster.generation - refreshes_before
    assert rounds >= 30  # enough rounds that one Metadata per round would show
    assert refreshes <= elapsed / backoff_s + 2, (refreshes, rounds, elapsed)
