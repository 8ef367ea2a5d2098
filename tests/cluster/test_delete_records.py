"""DeleteRecords on three nodes: the answer's low watermark is the least log start offset
of the in-sync replicas, so it comes once the followers took the leader's; and a follower
that becomes leader after the leader's kill -9 starts its log where the deletion left it."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from tests.cluster import confluent
from tests.cluster.test_replication import create
from tests.interop.librdkafka import produce
from tests.interop.test_delete_records import earliest
from tests.util import unique

pytestmark = pytest.mark.interop


def test_followers_take_the_deletion_and_keep_it_as_leaders(cluster):
    topic = unique("delete-records")
    create(cluster, topic, 1, min_isr=2)
    produce(cluster.bootstrap, topic, [(None, str(i).encode(), None) for i in range(10)],
            acks="all")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    [future] = admin.delete_records([TopicPartition(topic, 0, 6)]).values()
    assert future.result(timeout=30).low_watermark == 6
    leader = confluent.partitions(cluster.bootstrap, topic)[0].leader
    cluster.kill(leader)
    cluster.wait_for(lambda: confluent.partitions(cluster.bootstrap, topic)[0].leader
                     not in (-1, leader) or None, 30, "no new leader")
    assert earliest(cluster.bootstrap, topic) == 6
