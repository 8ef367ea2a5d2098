"""A KIP-848 consumer group across its coordinator's kill -9, in a three-node cluster: the
leader of the group's __consumer_offsets partition moves, the new coordinator rebuilds the
group from the records the old one replicated (ConsumerGroup* records, replayed on load),
and the members go on with the same epoch and partitions: nobody is fenced, nothing is
revoked, and records written after the kill are read."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer

from harness.raw import call
from protocol import messages as m
from tests.cluster.harness import FAST, coordinator_of
from tests.cluster.test_replication import create
from tests.interop.librdkafka import produce
from tests.util import unique, wait_until

pytestmark = pytest.mark.interop

PARTITIONS = 6


def _describe(cluster, node_id: int, group: str):
    body = call(cluster.node(node_id).port, m.CONSUMER_GROUP_DESCRIBE, 0,
                {"group_ids": [group], "include_authorized_operations": False})
    return body.groups[0]


def test_the_group_survives_its_coordinators_kill(make_cluster):
    cluster = make_cluster(overrides={**FAST, "group.consumer.heartbeat.interval.ms": 500,
                                      "group.consumer.session.timeout.ms": 10000})
    topic, group = unique("k848-failover"), unique("k848-failover-group")
    create(cluster, topic, PARTITIONS, min_isr=1)
    produce(cluster.bootstrap, topic, [(None, b"before", None, p) for p in range(PARTITIONS)])
    revoked: list = []
    read: dict[int, list] = defaultdict(list)

    def member() -> Consumer:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                      "group.protocol": "consumer", "auto.offset.reset": "earliest"})
        c.subscribe([topic], on_revoke=lambda _c, tps: revoked.extend(tps))
        return c

    members = [member(), member()]

    def poll_all() -> None:
        for i, c in enumerate(members):
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                read[i].append(msg.value())

    try:
        def split() -> bool:
            poll_all()
            return sorted(len(c.assignment()) for c in members) == [3, 3]
        wait_until(split, 60, interval_s=0.001, message="a 3/3 split")
        coordinator = coordinator_of(cluster, group)
        before = _describe(cluster, coordinator, group)
        assert before.error_code == 0 and len(before.members) == 2
        assignments = [set(c.assignment()) for c in members]
        revoked.clear()

        cluster.kill(coordinator)
        survivor = next(n.node_id for n in cluster.running())
        wait_until(lambda: coordinator_of(cluster, group) != coordinator, 30,
                   message="a new coordinator for the group")
        new = coordinator_of(cluster, group)
        after = wait_until(lambda: (d := _describe(cluster, new, group)).error_code == 0
                           and len(d.members) == 2 and d, 30, interval_s=0.1,
                           message="the group loaded by the new coordinator")
        assert after.group_epoch == before.group_epoch  # rebuilt, not re-formed
        assert sorted(m.member_epoch for m in after.members) == \
            sorted(m.member_epoch for m in before.members)

        # the killed node's partitions wait for new leaders (its fencing, then librdkafka's
        # metadata refresh): on a loaded machine that has taken longer than 15 s
        produce(f"{cluster.node(survivor).bootstrap}", topic,
                [(None, b"after", None, p) for p in range(PARTITIONS)], flush_s=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and \
                sum(v.count(b"after") for v in read.values()) < PARTITIONS:
            poll_all()
        assert sum(v.count(b"after") for v in read.values()) == PARTITIONS
        assert [set(c.assignment()) for c in members] == assignments
        assert revoked == []
    finally:
        for c in members:
            c.close()
