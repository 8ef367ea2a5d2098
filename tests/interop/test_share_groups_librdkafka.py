"""Share groups (KIP-932) with librdkafka's share consumer (confluent-kafka's ShareConsumer,
preview in 2.16) against one broker: members of one group split a partition's records,
RELEASE redelivers and REJECT archives, a lock that expires hands the record to another
member, the delivery-count limit archives a record released every time, and what was
acknowledged before a restart (kill -9 too) is not delivered again.

Every share group here starts at the earliest offset (share.auto.offset.reset set on the
group with IncrementalAlterConfigs), so records produced before the members join count.
Waits are conditions with deadlines; consumers are polled from the test's thread."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ResourceType)

from tests.interop.librdkafka import create_topic, produce
from tests.util import unique

pytestmark = pytest.mark.interop

# short locks, so a silent member's records come back within the test's time
FAST = {"group.share.min.record.lock.duration.ms": 1000,
        "group.share.record.lock.duration.ms": 3000,
        "group.share.delivery.count.limit": 3,
        "group.share.heartbeat.interval.ms": 5000}


@pytest.fixture
def share_broker(make_broker):
    return make_broker(**FAST)


def start_earliest(bootstrap: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=10)


def member(bootstrap: str, group: str, topic: str, explicit: bool = False) -> ShareConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    consumer = ShareConsumer(conf)
    consumer.subscribe([topic])
    return consumer


def poll_until(consumers, done, deadline_s: float = 30.0, on_message=None) -> None:
    """Poll every consumer in turn until `done()` or the deadline (then fail)."""
    deadline = time.monotonic() + deadline_s
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        for c in consumers:
            for msg in c.poll(0.2) or []:
                if msg.error():
                    continue
                on_message(c, msg)


def poll_for(consumers, seconds: float, on_message) -> None:
    """Poll every consumer in turn for `seconds`: what comes after the records the test
    waited for (a redelivery that must not happen, acknowledgements going out)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in consumers:
            for msg in c.poll(0.2) or []:
                if not msg.error():
                    on_message(c, msg)


def values(n: int) -> list:
    return [(None, str(i).encode(), None) for i in range(n)]


def test_two_members_split_one_partition_without_duplicates(share_broker):
    topic, group = unique("share"), unique("g")
    create_topic(share_broker.bootstrap, topic, 1)
    start_earliest(share_broker.bootstrap, group)
    produce(share_broker.bootstrap, topic, values(200))
    a, b = member(share_broker.bootstrap, group, topic), member(share_broker.bootstrap, group, topic)
    seen: Counter = Counter()
    by_member: Counter = Counter()
    try:
        def got(c, msg):
            seen[msg.value()] += 1
            by_member[id(c)] += 1
        poll_until([a, b], lambda: len(seen) == 200, on_message=got)
        # the implicit acknowledgements go out with the next polls
        poll_for([a, b], 1.2, got)
    finally:
        a.close()
        b.close()
    assert set(seen) == {str(i).encode() for i in range(200)}
    assert max(seen.values()) == 1, "a record accepted was delivered twice"


def test_release_redelivers_and_reject_never(share_broker):
    topic, group = unique("share"), unique("g")
    create_topic(share_broker.bootstrap, topic, 1)
    start_earliest(share_broker.bootstrap, group)
    produce(share_broker.bootstrap, topic, values(10))
    c = member(share_broker.bootstrap, group, topic, explicit=True)
    deliveries: Counter = Counter()
    try:
        def ack(consumer, msg):
            n = int(msg.value())
            deliveries[n] += 1
            if n == 3 and deliveries[n] == 1:
                consumer.acknowledge(msg, ack_type=2)  # RELEASE: back at once
            elif n == 5:
                consumer.acknowledge(msg, ack_type=3)  # REJECT: never again
            else:
                consumer.acknowledge(msg, ack_type=1)
            consumer.commit_sync()
        poll_until([c], lambda: deliveries[3] >= 2 and len(deliveries) == 10, on_message=ack)
        # nothing more comes: everything is accepted or archived
        poll_for([c], 2, ack)
    finally:
        c.close()
    assert deliveries[3] == 2 and deliveries[5] == 1
    assert all(deliveries[n] == 1 for n in range(10) if n != 3)


def test_a_silent_members_locks_expire_and_another_member_gets_the_records(share_broker):
    topic, group = unique("share"), unique("g")
    create_topic(share_broker.bootstrap, topic, 1)
    start_earliest(share_broker.bootstrap, group)
    produce(share_broker.bootstrap, topic, values(5))
    silent = member(share_broker.bootstrap, group, topic, explicit=True)
    taken: list = []
    poll_until([silent], lambda: len(taken) == 5, on_message=lambda c, m: taken.append(m.value()))
    # the silent member acknowledges nothing and stops polling but keeps its connection
    other = member(share_broker.bootstrap, group, topic)
    got: set = set()
    try:
        poll_until([other], lambda: len(got) == 5, deadline_s=30,
                   on_message=lambda c, m: got.add(m.value()))
    finally:
        other.close()
        silent.close()
    assert got == set(taken)


def test_the_delivery_count_limit_archives_a_record_released_every_time(share_broker):
    topic, group = unique("share"), unique("g")
    create_topic(share_broker.bootstrap, topic, 1)
    start_earliest(share_broker.bootstrap, group)
    produce(share_broker.bootstrap, topic, values(1))
    c = member(share_broker.bootstrap, group, topic, explicit=True)
    counts: list[int] = []
    try:
        def release(consumer, msg):
            counts.append(msg.delivery_count() if hasattr(msg, "delivery_count") else len(counts) + 1)
            consumer.acknowledge(msg, ack_type=2)
            consumer.commit_sync()
        poll_until([c], lambda: len(counts) >= 3, on_message=release)
        poll_for([c], 2, release)  # the limit (3) reached: archived, not delivered again
    finally:
        c.close()
    assert len(counts) == 3


@pytest.mark.parametrize("kill", [False, True])
def test_acknowledged_records_are_not_delivered_again_after_a_restart(share_broker, kill):
    topic, group = unique("share"), unique("g")
    create_topic(share_broker.bootstrap, topic, 1)
    start_earliest(share_broker.bootstrap, group)
    produce(share_broker.bootstrap, topic, values(20))
    c = member(share_broker.bootstrap, group, topic, explicit=True)
    first: list = []
    try:
        def ack_half(consumer, msg):
            if int(msg.value()) < 10:
                consumer.acknowledge(msg, ack_type=1)
                first.append(msg.value())
            else:
                consumer.acknowledge(msg, ack_type=2)  # released: delivered again later
            consumer.commit_sync()
        poll_until([c], lambda: len(first) == 10, on_message=ack_half)
    finally:
        c.close()
    share_broker.restart(kill=kill)
    again: Counter = Counter()
    c = member(share_broker.bootstrap, group, topic)
    try:
        poll_until([c], lambda: len(again) == 10, deadline_s=60,
                   on_message=lambda consumer, msg: again.update([msg.value()]))
        poll_for([c], 2, lambda _c, msg: again.update([msg.value()]))
    finally:
        c.close()
    assert set(again) == {str(i).encode() for i in range(10, 20)}


# -- bad input, on the wire ------------------------------------------------------------------

def _fetch(raw, group, epoch, topic_id, acks=(), max_records=10, wait_ms=0, forget=()):
    return raw.call(78, 1, {
        "group_id": group, "member_id": "m1", "share_session_epoch": epoch,
        "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
        "max_records": max_records, "batch_size": max_records,
        "topics": [{"topic_id": topic_id, "partitions": [{
            "partition_index": 0, "acknowledgement_batches": [
                {"first_offset": f, "last_offset": last, "acknowledge_types": types}
                for f, last, types in acks]}]}],
        "forgotten_topics_data": [{"topic_id": topic_id, "partitions": list(forget)}]
        if forget else []})


def test_bad_share_requests_answer_kafkas_codes_and_change_nothing(share_broker):
    from tests.interop.raw import Raw
    topic, group = unique("share"), unique("g")
    create_topic(share_broker.bootstrap, topic, 1)
    start_earliest(share_broker.bootstrap, group)
    produce(share_broker.bootstrap, topic, values(5))
    with Raw(share_broker) as raw:
        meta = raw.call(3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
        topic_id = meta.topics[0].topic_id
        # no session yet: epoch 1 and the final epoch are SHARE_SESSION_NOT_FOUND
        assert _fetch(raw, group, 1, topic_id).error_code == 122
        # opening a session may not acknowledge
        assert _fetch(raw, group, 0, topic_id, acks=[(0, 0, [1])]).error_code == 42
        opened = _fetch(raw, group, 0, topic_id, max_records=3, wait_ms=5000)
        [p] = opened.responses[0].partitions
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in p.acquired_records] == [(0, 2, 1)]
        # acknowledging what it does not hold, or a malformed range: per-partition codes,
        # nothing changed
        bad = _fetch(raw, group, 1, topic_id, acks=[(3, 4, [1])], max_records=0)
        assert bad.error_code == 0
        assert bad.responses[0].partitions[0].acknowledge_error_code == 121
        assert bad.responses[0].partitions[0].records == b""  # empty, never null
        bad = _fetch(raw, group, 2, topic_id, acks=[(0, 2, [1, 1])], max_records=0)
        assert bad.responses[0].partitions[0].acknowledge_error_code == 42
        # a stale epoch ends the session: its records go back, the next open gets them
        assert _fetch(raw, group, 9, topic_id).error_code == 123
        again = _fetch(raw, group, 0, topic_id, max_records=10, wait_ms=5000)
        [p] = again.responses[0].partitions
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in p.acquired_records] == [(0, 2, 2), (3, 4, 1)]
        done = _fetch(raw, group, 1, topic_id, acks=[(0, 4, [1])], max_records=0)
        assert done.responses[0].partitions[0].acknowledge_error_code == 0


def test_the_share_groups_tool_lists_describes_and_deletes(share_broker):
    import subprocess
    import sys
    topic, group = unique("share"), unique("g")
    create_topic(share_broker.bootstrap, topic, 2)
    start_earliest(share_broker.bootstrap, group)
    produce(share_broker.bootstrap, topic, values(1))
    c = member(share_broker.bootstrap, group, topic)

    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cli", "share-groups", *args,
                               "--bootstrap-server", share_broker.bootstrap],
                              capture_output=True, text=True, timeout=60)
    try:
        poll_until([c], lambda: True)
        got: list = []
        poll_until([c], lambda: bool(got), on_message=lambda _c, m: got.append(m))
        listed = tool("list")
        assert listed.returncode == 0, listed.stderr
        assert [line.split() for line in listed.stdout.splitlines()
                if line.startswith(group)] == [[group, "Stable"]]
        members = tool("describe", group, "--members")
        assert members.returncode == 0, members.stderr
        [row] = [line.split() for line in members.stdout.splitlines()[1:]]
        assert row[0] == group and row[4] == "2" and row[5] == f"{topic}:0,1"
        state = tool("describe", group, "--state")
        assert state.returncode == 0, state.stderr
        described = state.stdout.splitlines()[1].split()
        assert (described[0], described[-4], described[-1]) == (group, "Stable", "1"), \
            state.stdout
        busy = tool("delete", "--group", group)
        assert busy.returncode == 1 and "empty" in busy.stderr.lower(), busy.stderr
    finally:
        c.close()
    deadline = time.monotonic() + 30
    while (gone := tool("delete", "--group", group)).returncode != 0:
        assert time.monotonic() < deadline, gone.stderr  # the member's leave lands first
    assert tool("describe", group).returncode == 1
