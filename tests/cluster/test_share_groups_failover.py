"""A share group across a kill -9 in a three-node cluster: what members acknowledged before
the share coordinator's broker died is never delivered again, and what they released is
delivered to the group afterwards. The share partition's state lives on __share_group_state
(replication factor 3); the broker that takes over its partition loads it, and the topic
partition's (new) leader reads it from there."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import ShareConsumer

from broker.share_coordinator.state import SharePartitionKey
from tests.cluster.harness import FAST, coordinator_of
from tests.cluster.test_replication import create
from tests.interop.librdkafka import produce
from tests.interop.test_share_groups_librdkafka import start_earliest
from tests.util import unique, wait_until
from harness.raw import call
from protocol import messages as m

pytestmark = pytest.mark.interop

SHARE_KEY = 2


def _topic_id(cluster, topic: str):
    body = call(cluster.running()[0].port, m.METADATA, 12,
                {"topics": [{"name": topic, "topic_id": None}],
                 "allow_auto_topic_creation": False,
                 "include_topic_authorized_operations": False})
    return body.topics[0].topic_id


def kill_share_coordinator(cluster, group: str, topic: str) -> None:
    """kill -9 the broker whose share coordinator holds the group's state of partition 0,
    and wait until another one is named for it."""
    key = SharePartitionKey(group, _topic_id(cluster, topic), 0).coordinator_key()
    coordinator = coordinator_of(cluster, key, SHARE_KEY)
    cluster.kill(coordinator)

    def moved() -> bool:
        body = call(cluster.running()[0].port, m.FIND_COORDINATOR, 3,
                    {"key": key, "key_type": SHARE_KEY})
        return body["error_code"] == 0 and body["node_id"] != coordinator
    wait_until(moved, 30, interval_s=0.1, message="a new share coordinator")


def twenty_records(make_cluster) -> tuple:
    """A three-node cluster with 5 s locks, one partition of records "0".."19", and a share
    group reading it from the start: (cluster, topic, group)."""
    cluster = make_cluster(overrides={**FAST, "group.share.min.record.lock.duration.ms": 1000,
                                      "group.share.record.lock.duration.ms": 5000})
    topic, group = unique("share-failover"), unique("workers")
    create(cluster, topic, 1, min_isr=1)
    start_earliest(cluster.bootstrap, group)
    produce(cluster.bootstrap, topic, [(None, str(i).encode(), None) for i in range(20)])
    return cluster, topic, group


def test_acknowledged_records_survive_the_share_coordinators_kill(make_cluster):
    cluster, topic, group = twenty_records(make_cluster)
    accepted: list = []
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        while len(accepted) < 10:
            assert time.monotonic() < deadline, "the first ten records were not read"
            for msg in c.poll(0.5) or []:
                if msg.error():
                    continue
                if int(msg.value()) < 10:
                    c.acknowledge(msg, ack_type=1)
                    accepted.append(msg.value())
                else:
                    c.acknowledge(msg, ack_type=2)
            c.commit_sync()
    finally:
        c.close()

    kill_share_coordinator(cluster, group, topic)

    again: Counter = Counter()
    c = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 90
        while len(again) < 10:
            assert time.monotonic() < deadline, f"only {sorted(again)} came back"
            for msg in c.poll(0.5) or []:
                if not msg.error():
                    again[msg.value()] += 1
        end = time.monotonic() + 2
        while time.monotonic() < end:
            for msg in c.poll(0.2) or []:
                if not msg.error():
                    again[msg.value()] += 1
    finally:
        c.close()
    assert sorted(accepted) == sorted(str(i).encode() for i in range(10))
    assert set(again) == {str(i).encode() for i in range(10, 20)}, \
        "an accepted record was delivered again, or a released one was lost"


def test_a_reset_reaches_a_leader_on_another_broker_than_the_coordinator(cluster):
    """AlterShareGroupOffsets is served by the group's coordinator; the topic partition's
    leader, elsewhere, still holds the share partition it served. It must find out when the
    next member opens its share session, not deliver from where it stood."""
    from tests.cluster import confluent
    from tests.interop.test_share_group_offsets import consume_all, offsets, until_ok
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.cluster.test_replication import wait_full_isr
    topic, group = unique("share-reset"), unique("workers")
    # the partition's preferred leader is not the group's coordinator, whichever node leads
    # __consumer_offsets after the tests before (their kills move leaderships around)
    coordinator = coordinator_of(cluster, group)
    replicas = [(coordinator + i) % 3 for i in (1, 2, 0)]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas],
                                  config={"min.insync.replicas": "1"})])[topic].result(30)
    wait_full_isr(cluster, topic, 1)
    cluster.wait_for(lambda: confluent.partitions(cluster.bootstrap, topic)[0].leader
                     == replicas[0] or None, 30, "the preferred replica leading")
    start_earliest(cluster.bootstrap, group)
    produce(cluster.bootstrap, topic, [(None, str(i).encode(), None) for i in range(10)])
    assert consume_all(cluster.bootstrap, group, topic, 10) == list(range(10))
    until_ok(cluster.bootstrap, "reset-offsets", "--group", group, "--topic", topic,
             "--to-offset", "6", "--execute")
    assert offsets(cluster.bootstrap, group) == {(topic, 0): ("6", "4")}
    assert consume_all(cluster.bootstrap, group, topic, 4) == [6, 7, 8, 9]
