"""KIP-848 consumer groups with librdkafka (`group.protocol=consumer`, confluent-kafka)
against one broker: the group splits partitions, is listed as a CONSUMER group and
described with its members, rebalances incrementally when a member leaves (the others
revoke nothing they keep), fences a killed member after group.consumer.session.timeout.ms,
commits with member epochs, and keeps its protocol against classic members while it has
members of its own.

Waits are conditions with deadlines; the consumers are polled round-robin from the test's
thread (librdkafka's own threads do the heartbeating)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.interop.librdkafka import create_topic, produce
from tests.util import unique, wait_until

pytestmark = pytest.mark.interop

PARTITIONS = 6
# a short session so that a killed member is fenced within the test's time; heartbeats
# every second so that members learn of a new target quickly
FAST = {"group.consumer.session.timeout.ms": 6000,
        "group.consumer.heartbeat.interval.ms": 1000}


class Member:
    """A librdkafka consumer of the new protocol, recording its rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, **conf) -> None:
        self.assigned: list[set[int]] = []
        self.revoked: list[set[int]] = []
        self.records: dict[int, list[int]] = defaultdict(list)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, **conf})
        self.consumer.subscribe(
            [topic],
            on_assign=lambda c, tps: self.assigned.append({tp.partition for tp in tps}),
            on_revoke=lambda c, tps: self.revoked.append({tp.partition for tp in tps}))

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is not None and msg.error() is None:
            self.records[msg.partition()].append(msg.offset())

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def count(self) -> int:
        return sum(len(v) for v in self.records.values())


def poll_until(members, predicate, timeout_s: float, message: str):
    def step():
        for m in members:
            m.poll()
        return predicate()
    return wait_until(step, timeout_s, interval_s=0.001, message=message)


@pytest.fixture
def kip848_broker(make_broker):
    return make_broker(**FAST)


def _setup(broker, records: int = 600) -> tuple[str, str]:
    topic, group = unique("kip848"), unique("kip848-group")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    _produce(broker, topic, records)
    return topic, group


def _produce(broker, topic: str, records: int) -> None:
    produce(broker.bootstrap, topic, [(None, str(i).encode(), None, i % PARTITIONS)
                                      for i in range(records)])


def test_three_members_split_the_partitions_and_read_everything_once(kip848_broker):
    # the records come once the group has formed: they commit nothing, so a partition
    # that moved during the formation would be read again from the start by its new owner
    topic, group = _setup(kip848_broker, records=0)
    members = [Member(kip848_broker.bootstrap, group, topic) for _ in range(3)]
    try:
        poll_until(members, lambda: sorted(len(m.assignment()) for m in members) == [2, 2, 2],
                   60, "a 2/2/2 split")
        _produce(kip848_broker, topic, 600)
        poll_until(members, lambda: sum(m.count() for m in members) >= 600, 60,
                   "600 records read by the three members")
        offsets = [(p, o) for m in members for p, os in m.records.items() for o in os]
        assert len(offsets) == 600 and len(set(offsets)) == 600  # every record, once
        owned = [m.assignment() for m in members]
        assert set().union(*owned) == set(range(PARTITIONS))

        admin = AdminClient({"bootstrap.servers": kip848_broker.bootstrap})
        listed = admin.list_consumer_groups(request_timeout=10).result()
        [listing] = [g for g in listed.valid if g.group_id == group]
        assert listing.type.name == "CONSUMER"
        [described] = admin.describe_consumer_groups([group], request_timeout=10).values()
        description = described.result()
        assert len(description.members) == 3
        assert sorted(len(m.assignment.topic_partitions) for m in description.members) == \
            [2, 2, 2]
    finally:
        for m in members:
            m.consumer.close()


def test_a_member_leaving_moves_only_its_partitions(kip848_broker):
    topic, group = _setup(kip848_broker, records=60)
    members = [Member(kip848_broker.bootstrap, group, topic) for _ in range(3)]
    try:
        poll_until(members, lambda: sorted(len(m.assignment()) for m in members) == [2, 2, 2],
                   60, "a 2/2/2 split")
        leaving, staying = members[0], members[1:]
        kept = {id(m): m.assignment() for m in staying}
        revoked_before = [len(m.revoked) for m in staying]
        started = time.monotonic()
        leaving.consumer.close()
        poll_until(staying, lambda: sorted(len(m.assignment()) for m in staying) == [3, 3],
                   15, "the two others holding 3 partitions each")
        assert time.monotonic() - started < 15
        for m, before in zip(staying, revoked_before):
            assert kept[id(m)] <= m.assignment()  # nothing it had was taken away
            assert all(not r for r in m.revoked[before:]), m.revoked  # incremental
        assert set().union(*(m.assignment() for m in staying)) == set(range(PARTITIONS))
    finally:
        for m in members[1:]:
            m.consumer.close()


_VICTIM = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.protocol": "consumer", "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
    if c.assignment():
        print("assigned", flush=True)
"""


def test_a_killed_member_is_fenced_after_the_session_timeout(kip848_broker):
    topic, group = _setup(kip848_broker, records=60)
    victim = subprocess.Popen([sys.executable, "-c", _VICTIM, kip848_broker.bootstrap, group,
                               topic], stdout=subprocess.PIPE, text=True)
    survivor = None
    try:
        assert victim.stdout is not None and victim.stdout.readline().startswith("assigned")
        survivor = Member(kip848_broker.bootstrap, group, topic)
        poll_until([survivor], lambda: 0 < len(survivor.assignment()) < PARTITIONS, 30,
                   "the survivor sharing the partitions with the victim")
        victim.kill()  # kill -9: no leave, no revocation
        victim.wait()
        killed_at = time.monotonic()
        poll_until([survivor], lambda: len(survivor.assignment()) == PARTITIONS, 30,
                   "the survivor holding every partition once the victim was fenced")
        waited = time.monotonic() - killed_at
        # not before the session timeout (6 s) less a heartbeat interval, not long after it
        assert 4.5 < waited < 20, waited
    finally:
        victim.kill()
        if survivor is not None:
            survivor.consumer.close()


def test_commits_carry_the_member_epoch_and_survive_a_new_member(kip848_broker):
    topic, group = _setup(kip848_broker, records=60)
    first = Member(kip848_broker.bootstrap, group, topic)
    poll_until([first], lambda: first.count() >= 60, 60, "60 records read")
    first.consumer.commit(asynchronous=False)
    committed = first.consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                         timeout=10)
    assert sum(tp.offset for tp in committed) == 60
    first.consumer.close()
    second = Member(kip848_broker.bootstrap, group, topic)
    try:
        poll_until([second], lambda: len(second.assignment()) == PARTITIONS, 30,
                   "the second member assigned everything")
        for _ in range(40):
            second.poll()
        assert second.count() == 0  # it starts from the committed offsets
    finally:
        second.consumer.close()


def test_a_classic_member_cannot_join_a_consumer_group_with_members(kip848_broker):
    topic, group = _setup(kip848_broker, records=6)
    member = Member(kip848_broker.bootstrap, group, topic)
    classic = Consumer({"bootstrap.servers": kip848_broker.bootstrap, "group.id": group,
                        "group.protocol": "classic"})
    errors: list = []
    try:
        poll_until([member], lambda: len(member.assignment()) == PARTITIONS, 30,
                   "the consumer-protocol member assigned")
        classic.subscribe([topic])

        def refused():
            try:
                msg = classic.poll(0.1)
            except KafkaException as e:
                errors.append(e.args[0])
                return True
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
                return True
            member.poll()
            return False
        wait_until(refused, 30, interval_s=0.001, message="the classic member refused")
        assert errors[0].name() == "INCONSISTENT_GROUP_PROTOCOL", errors
        assert member.assignment() == set(range(PARTITIONS))
    finally:
        classic.close()
        member.consumer.close()


def test_the_groups_tool_shows_type_epochs_and_targets(kip848_broker):
    from tests.interop.test_groups_cli import groups, table
    topic, group = _setup(kip848_broker, records=6)
    members = [Member(kip848_broker.bootstrap, group, topic) for _ in range(2)]
    try:
        poll_until(members, lambda: sorted(len(m.assignment()) for m in members) == [3, 3],
                   60, "a 3/3 split")
        listed = groups(kip848_broker.bootstrap, "list")
        assert listed.returncode == 0, listed.stderr
        [row] = [r for r in table(listed.stdout) if r["GROUP"] == group]
        assert (row["TYPE"], row["STATE"]) == ("Consumer", "Stable")

        described = groups(kip848_broker.bootstrap, "describe", group, "--members")
        assert described.returncode == 0, described.stderr
        rows = table(described.stdout)
        assert len(rows) == 2
        for r in rows:
            assert r["#PARTITIONS"] == "3" and int(r["CURRENT-EPOCH"]) > 0
            assert r["CURRENT-ASSIGNMENT"] == r["TARGET-ASSIGNMENT"]  # reconciled
            assert r["CURRENT-EPOCH"] == r["TARGET-EPOCH"]
        state = groups(kip848_broker.bootstrap, "describe", group, "--state")
        header, values = [line for line in state.stdout.splitlines() if line.strip()]
        assert "GROUP-EPOCH" in header and "uniform" in values and "Stable" in values

        offsets = groups(kip848_broker.bootstrap, "describe", group)
        assert offsets.returncode == 0 and len(table(offsets.stdout)) == PARTITIONS
    finally:
        for m in members:
            m.consumer.close()
