"""`minibroker groups list/describe` against the real broker, with confluent-kafka consumers
that join a group and commit: the tables must show the members, committed offsets, log end
offsets and lag, as kafka-consumer-groups.sh would."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer

from tests.interop.conftest import REPO_ROOT, free_port
from tests.interop.librdkafka import create_topic
from tests.util import unique, wait_until

pytestmark = pytest.mark.interop
SHARED_BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
WAIT_S = 30


def groups(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", "groups", *args,
                           "--bootstrap-server", bootstrap],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def table(stdout: str) -> list[dict[str, str]]:
    """The rows of a whitespace-separated table whose cells hold no spaces."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split()
    rows = [dict(zip(header, line.split())) for line in lines[1:]]
    assert all(len(r) == len(header) for r in rows), stdout
    return rows


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, n in per_partition.items():
        for i in range(n):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(15) == 0


def consumer(bootstrap: str, group: str, client_id: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "client.id": client_id, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "enable.partition.eof": False})


def consume(c: Consumer, n: int) -> None:
    got = 0

    def more() -> bool:
        nonlocal got
        m = c.poll(0.2)
        if m is not None:
            assert m.error() is None, m.error()
            got += 1
        return got >= n

    wait_until(more, WAIT_S, interval_s=0.01, message=f"{n} messages")


def describe(bootstrap: str, group: str, *flags: str) -> subprocess.CompletedProcess:
    done = groups(bootstrap, "describe", group, *flags)
    assert done.returncode == 0, done.stderr
    return done


def test_describe_shows_the_member_committed_offsets_and_lag(shared_broker):
    bs = shared_broker.bootstrap
    topic, group, client = unique("gc-orders"), unique("gc-billing"), unique("billing")
    create_topic(bs, topic, 3)
    produce(bs, topic, {0: 10, 1: 10, 2: 10})
    c = consumer(bs, group, client)
    try:
        c.subscribe([topic])
        consume(c, 30)
        c.commit(asynchronous=False)
        produce(bs, topic, {0: 5, 1: 2})  # lag 5, 2, 0 behind the commit at 10

        def shows_lag():
            done = describe(bs, group)
            rows = table(done.stdout)
            member = c.memberid()
            ok = done.stderr == "" and [
                (r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"],
                 r["LAG"], r["CONSUMER-ID"], r["CLIENT-ID"]) for r in rows] == [
                (topic, "0", "10", "15", "5", member, client),
                (topic, "1", "10", "12", "2", member, client),
                (topic, "2", "10", "10", "0", member, client)]
            return ok and rows

        rows = wait_until(shows_lag, WAIT_S, interval_s=0.2,
                          message="groups describe to show the member, offsets and lag")
        assert all(r["GROUP"] == group and r["HOST"] != "-" for r in rows)
        out = describe(bs, group).stdout
        assert out.startswith("\nGROUP ")
        assert out.splitlines()[1].split() == [
            "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
            "CONSUMER-ID", "HOST", "CLIENT-ID"]
    finally:
        c.close()


def test_members_and_state_of_a_group_of_two(shared_broker):
    bs = shared_broker.bootstrap
    topic, group = unique("gc-two"), unique("gc-pair")
    create_topic(bs, topic, 3)
    produce(bs, topic, {0: 3, 1: 3, 2: 3})
    first, second = consumer(bs, group, "first"), consumer(bs, group, "second")
    try:
        first.subscribe([topic])
        second.subscribe([topic])

        def both_assigned():
            first.poll(0.1)
            second.poll(0.1)
            done = describe(bs, group, "--members")
            rows = table(done.stdout)
            got = {r["CLIENT-ID"]: r for r in rows}
            if set(got) != {"first", "second"} or done.stderr:
                return None
            ids = {"first": first.memberid(), "second": second.memberid()}
            if any(got[k]["CONSUMER-ID"] != v for k, v in ids.items()):
                return None
            # range over 3 partitions and 2 members: 2 and 1, together all three.
            if sorted(int(r["#PARTITIONS"]) for r in rows) != [1, 2]:
                return None
            return rows

        rows = wait_until(both_assigned, WAIT_S, interval_s=0.1,
                          message="both consumers in --members with their partitions")
        assigned = sorted(int(p) for r in rows
                          for p in re.fullmatch(rf"{re.escape(topic)}\(([\d,]+)\)",
                                                r["ASSIGNMENT"]).group(1).split(","))
        assert assigned == [0, 1, 2]
        assert all(r["GROUP"] == group and r["GROUP-INSTANCE-ID"] == "-" for r in rows)

        state = describe(bs, group, "--state")
        lines = [line for line in state.stdout.splitlines() if line.strip()]
        assert lines[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY",
                                    "STATE", "#MEMBERS"]
        assert lines[1].split() == [group, bs, "(0)", "range", "Stable", "2"]
    finally:
        first.close()
        second.close()


def test_an_empty_group_keeps_its_offsets_and_says_so(shared_broker):
    bs = shared_broker.bootstrap
    topic, group = unique("gc-empty"), unique("gc-left")
    create_topic(bs, topic, 2)
    produce(bs, topic, {0: 4, 1: 6})
    c = consumer(bs, group, "leaver")
    c.subscribe([topic])
    try:
        consume(c, 10)
        c.commit(asynchronous=False)
    finally:
        c.close()  # LeaveGroup: the group is Empty at once
    produce(bs, topic, {1: 3})

    def empty_with_offsets():
        done = describe(bs, group)
        rows = [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"],
                 r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"]) for r in table(done.stdout)]
        return (done.stderr == f"\nConsumer group '{group}' has no active members.\n"
                and rows == [("0", "4", "4", "0", "-", "-", "-"),
                             ("1", "6", "9", "3", "-", "-", "-")])

    wait_until(empty_with_offsets, WAIT_S, interval_s=0.2,
               message="an Empty group with its committed offsets")
    members = describe(bs, group, "--members")
    assert members.stdout == ""
    assert members.stderr == f"\nConsumer group '{group}' has no active members.\n"
    state = describe(bs, group, "--state")
    assert [line.split() for line in state.stdout.splitlines() if line.strip()][1] == [
        group, bs, "(0)", "Empty", "0"]


def test_list_shows_state_and_protocol_type(shared_broker):
    bs = shared_broker.bootstrap
    topic, active, left = unique("gc-list"), unique("gc-active"), unique("gc-gone")
    create_topic(bs, topic, 1)
    produce(bs, topic, {0: 2})
    gone = consumer(bs, left, "gone")
    gone.subscribe([topic])
    consume(gone, 2)
    gone.commit(asynchronous=False)
    gone.close()
    c = consumer(bs, active, "active")
    try:
        c.subscribe([topic])
        consume(c, 2)

        def listed():
            done = groups(bs, "list")
            assert done.returncode == 0, done.stderr
            rows = {r["GROUP"]: (r["TYPE"], r["STATE"], r["PROTOCOL-TYPE"])
                    for r in table(done.stdout)}
            return (rows.get(active) == ("Classic", "Stable", "consumer")
                    and rows.get(left) == ("Classic", "Empty", "consumer")) and done.stdout

        out = wait_until(listed, WAIT_S, interval_s=0.2, message="both groups in the list")
        assert out.splitlines()[0].split() == ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]
    finally:
        c.close()


def test_an_unknown_group_exits_1(shared_broker):
    group = unique("gc-never")
    done = groups(shared_broker.bootstrap, "describe", group)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"Error: Consumer group '{group}' does not exist.\n"


def test_an_unreachable_broker_exits_1():
    port = free_port()
    done = groups(f"127.0.0.1:{port}", "describe", "any")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"minibroker groups: cannot connect to 127.0.0.1:{port}: "
                           "Connection refused\n")
    done = groups(f"127.0.0.1:{port}", "list")
    assert done.returncode == 1 and done.stderr.count("\n") == 1
