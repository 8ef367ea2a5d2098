"""KIP-932 share group MEMBERSHIP with librdkafka's share consumer (confluent-kafka's
ShareConsumer) against one broker. Membership only: ShareFetch is not served yet, so the
consumers receive no records; what is checked is that their ShareGroupHeartbeat (v1, a
member id they chose) puts them in the group with the partitions assigned, as
ShareGroupDescribe (raw) reports it, that one partition is shared by every member, and that
a closed consumer leaves the group. (librdkafka also sends ShareFetch, which this broker
does not serve yet: it closes those connections, and the client reconnects.)

Waits are conditions with deadlines; the consumers are polled from the test's thread."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ShareConsumer

from protocol.messages import LIST_GROUPS, SHARE_GROUP_DESCRIBE
from tests.interop.librdkafka import create_topic
from tests.util import unique, wait_until

pytestmark = pytest.mark.interop

FAST = {"group.share.heartbeat.interval.ms": 1000, "group.share.min.heartbeat.interval.ms": 1000}


def _describe(raw, group: str):
    body = raw.call(SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group],
                                              "include_authorized_operations": False})
    return body.groups[0]


def _members(raw, group: str, topic: str) -> dict[str, set[int]]:
    described = _describe(raw, group)
    if described.error_code != 0:
        return {}
    return {m.member_id: {p for tp in m.assignment.topic_partitions if tp.topic_name == topic
                          for p in tp.partitions}
            for m in described.members}


def _poll_until(consumers, condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        for c in consumers:
            c.poll(0.05)


def test_share_consumers_join_and_share_a_partition(make_broker, connect):
    broker = make_broker(**FAST)
    topic, group = unique("share-t"), unique("share-g")
    create_topic(broker.bootstrap, topic, partitions=1)
    raw = connect(broker)
    consumers = []
    try:
        for _ in range(4):
            c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
            c.subscribe([topic])
            consumers.append(c)
        # every member of the group holds the one partition: a share group shares it
        _poll_until(consumers, lambda: (len(m := _members(raw, group, topic)) == 4
                                        and all(ps == {0} for ps in m.values())))
        # each member reaches the last group epoch at its next heartbeat
        def caught_up() -> bool:
            d = _describe(raw, group)
            return all(m.member_epoch == d.group_epoch for m in d.members)
        _poll_until(consumers, caught_up)
        described = _describe(raw, group)
        assert described.group_state == "Stable" and described.assignor_name == "simple"
        assert described.group_epoch == 4 and len(described.members) == 4
        listed = raw.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
        assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [
            (group, "share", "Stable")]
        # a consumer that closes leaves with epoch -1
        consumers.pop().close()
        _poll_until(consumers, lambda: len(_members(raw, group, topic)) == 3)
    finally:
        for c in consumers:
            c.close()
    wait_until(lambda: _describe(raw, group).group_state == "Empty", 30)


def test_six_partitions_are_all_held_by_four_share_consumers(make_broker, connect):
    broker = make_broker(**FAST)
    topic, group = unique("share-t"), unique("share-g")
    create_topic(broker.bootstrap, topic, partitions=6)
    raw = connect(broker)
    consumers = [ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
                 for _ in range(4)]
    try:
        for c in consumers:
            c.subscribe([topic])

        def settled() -> bool:
            members = _members(raw, group, topic)
            return (len(members) == 4 and all(members.values())
                    and set().union(*members.values()) == set(range(6)))
        _poll_until(consumers, settled)
    finally:
        for c in consumers:
            c.close()
