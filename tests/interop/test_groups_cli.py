"""`minibroker groups` against the real broker, with confluent-kafka consumers that join a
group and commit: the tables must show the members, committed offsets, log end offsets and
lag, as kafka-consumer-groups.sh would; `minibroker consume --group` is such a member; the
reset-offsets, delete-offsets and delete changes are seen by librdkafka and by describe."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

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


# --- consume --group as a member; reset-offsets, delete-offsets, delete -----------------

def console_member(bootstrap: str, topic: str, group: str) -> subprocess.Popen:
    """`minibroker consume --group` running as kafka-console-consumer would, until SIGINT."""
    return subprocess.Popen([sys.executable, "-m", "tools.cli", "consume", topic,
                             "--bootstrap-server", bootstrap, "--group", group,
                             "--from-beginning"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stop(member: subprocess.Popen) -> tuple[str, str]:
    """Ctrl-C, as a person would; its output once it has committed and left."""
    member.send_signal(signal.SIGINT)
    out, err = member.communicate(timeout=60)
    assert member.returncode == 0, err
    return out, err


def committed(bs: str, group: str) -> dict[str, str]:
    """PARTITION -> CURRENT-OFFSET from `groups describe` ({} while there is no group)."""
    done = groups(bs, "describe", group)
    return ({r["PARTITION"]: r["CURRENT-OFFSET"] for r in table(done.stdout)}
            if done.returncode == 0 else {})


def test_console_consumer_group_member_commits_and_reset_to_earliest(shared_broker):
    bs = shared_broker.bootstrap
    topic, group = unique("gc-reset"), unique("gc-console")
    create_topic(bs, topic, 2)
    produce(bs, topic, {0: 4, 1: 3})
    member = console_member(bs, topic, group)
    try:
        def member_listed():
            done = groups(bs, "describe", group, "--members")  # exit 1 until it exists
            rows = table(done.stdout) if done.returncode == 0 else []
            return (len(rows) == 1 and rows[0]["CLIENT-ID"] == "console-consumer"
                    and rows[0]["#PARTITIONS"] == "2" and rows)

        wait_until(member_listed, WAIT_S, interval_s=0.2,
                   message="consume --group as the group's one member, with both partitions")
        # auto-commit while it runs (auto.commit.interval.ms), as kafka-console-consumer
        wait_until(lambda: committed(bs, group) == {"0": "4", "1": "3"}, WAIT_S,
                   interval_s=0.2, message="consume --group to commit what it read")

        active = groups(bs, "--reset-offsets", "--group", group, "--topic", topic,
                        "--to-earliest", "--execute")
        assert (active.returncode, active.stdout) == (1, "")
        assert active.stderr == (f"Error: Assignments can only be reset if the group "
                                 f"'{group}' is inactive, but the current state is Stable.\n")

        # a librdkafka member joins: the group rebalances, one partition each
        other = consumer(bs, group, "joiner")
        try:
            other.subscribe([topic])

            def shared():
                other.poll(0.1)
                rows = table(describe(bs, group, "--members").stdout)
                return (sorted((r["CLIENT-ID"], r["#PARTITIONS"]) for r in rows)
                        == [("console-consumer", "1"), ("joiner", "1")])

            wait_until(shared, WAIT_S, interval_s=0.1,
                       message="consume --group and a librdkafka member sharing the topic")
        finally:
            other.close()
    except BaseException:
        member.kill()
        member.communicate()
        raise
    out, err = stop(member)
    assert sorted(out.splitlines()) == ["0-0", "0-1", "0-2", "0-3", "1-0", "1-1", "1-2"]
    assert "Processed a total of 7 messages" in err

    dry = groups(bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                 "--dry-run")
    assert dry.returncode == 0 and dry.stderr == "", dry.stderr
    assert [r.split() for r in dry.stdout.splitlines() if r.strip()] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "0", "0"],
        [group, topic, "1", "0"]]
    assert committed(bs, group) == {"0": "4", "1": "3"}  # a dry run changes nothing

    done = groups(bs, "--reset-offsets", "--group", group, "--topic", f"{topic}:0",
                  "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    assert committed(bs, group) == {"0": "0", "1": "3"}

    # librdkafka starts where the reset put the group (auto.offset.reset=latest would skip all)
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "latest",
                  "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        c.subscribe([topic])
        seen: list[tuple[int, int]] = []

        def read_partition_0() -> bool:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                seen.append((m.partition(), m.offset()))
            return len(seen) >= 4

        wait_until(read_partition_0, WAIT_S, interval_s=0.01,
                   message="the librdkafka consumer to read partition 0 from offset 0")
        assert sorted(seen) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    finally:
        c.close()


def console_member_to_files(bootstrap: str, topic: str, group: str, directory: Path
                            ) -> tuple[subprocess.Popen, Path, Path]:
    """console_member with its stdout and stderr in files, to be read while it runs."""
    out, err = directory / f"{group}.out", directory / f"{group}.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        member = subprocess.Popen(
            [sys.executable, "-m", "tools.cli", "consume", topic, "--bootstrap-server",
             bootstrap, "--group", group, "--from-beginning"],
            cwd=REPO_ROOT, stdout=stdout, stderr=stderr, text=True)
    return member, out, err


def lines_in(path: Path) -> list[str]:
    return path.read_text().splitlines()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM],
                         ids=["SIGINT", "SIGTERM"])
def test_console_consumer_commits_and_leaves_on_sigint_and_sigterm(shared_broker, tmp_path,
                                                                  signum):
    # kafka-console-consumer's shutdown hook runs on either: the last positions are
    # committed and the member leaves the group at once (not after session.timeout.ms)
    bs = shared_broker.bootstrap
    topic, group = unique("gc-signal"), unique("gc-signalled")
    create_topic(bs, topic, 2)
    produce(bs, topic, {0: 2, 1: 3})
    member, out, err = console_member_to_files(bs, topic, group, tmp_path)
    try:
        wait_until(lambda: len(lines_in(out)) == 5, WAIT_S, interval_s=0.1,
                   message="consume --group to print all five records")
        member.send_signal(signum)
        assert member.wait(timeout=60) == 0, err.read_text()
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()
    assert sorted(lines_in(out)) == ["0-0", "0-1", "1-0", "1-1", "1-2"]
    assert lines_in(err) == ["Processed a total of 5 messages"]
    assert committed(bs, group) == {"0": "2", "1": "3"}
    left = groups(bs, "describe", group, "--members")
    assert (left.returncode, left.stdout) == (0, "")
    assert left.stderr == f"\nConsumer group '{group}' has no active members.\n"


def test_a_second_signal_exits_at_once_without_the_final_commit(make_broker, tmp_path):
    broker = make_broker(**SHARED_BROKER_OVERRIDES)
    bs = broker.bootstrap
    topic, group = unique("gc-twice"), unique("gc-impatient")
    create_topic(bs, topic, 1)
    produce(bs, topic, {0: 2})
    member, out, err = console_member_to_files(bs, topic, group, tmp_path)
    try:
        wait_until(lambda: len(lines_in(out)) == 2, WAIT_S, interval_s=0.1,
                   message="consume --group to print both records")
        broker.proc.send_signal(signal.SIGSTOP)  # the final commit gets no answer now
        try:
            member.send_signal(signal.SIGINT)
            wait_until(lambda: "Processed a total of 2 messages" in lines_in(err), WAIT_S,
                       interval_s=0.1, message="the first SIGINT to stop the reading")
            member.send_signal(signal.SIGINT)
            # well within the final commit's own bound (60 s), which it does not wait for
            assert member.wait(timeout=WAIT_S) == 128 + signal.SIGINT, err.read_text()
        finally:
            broker.proc.send_signal(signal.SIGCONT)
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()
    assert lines_in(err) == ["Processed a total of 2 messages",
                             "minibroker consume: SIGINT again: exiting without waiting for "
                             "the final commit"]


def test_delete_offsets_and_delete_group(shared_broker):
    bs = shared_broker.bootstrap
    topic, other, group = unique("gc-del"), unique("gc-del-other"), unique("gc-deleted")
    create_topic(bs, topic, 1)
    create_topic(bs, other, 1)
    produce(bs, topic, {0: 2})
    produce(bs, other, {0: 2})
    first = consumer(bs, group, "reader")
    try:
        first.subscribe([topic, other])
        consume(first, 4)
        first.commit(asynchronous=False)
    finally:
        first.close()
    c = consumer(bs, group, "deleter")
    try:
        c.subscribe([topic])  # the group subscribes to `topic` now, no longer to `other`
        consume(c, 0)

        def refused_for_topic():
            done = groups(bs, "--delete-offsets", "--group", group, "--topic", topic)
            return done.returncode == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in done.stdout and done

        refused = wait_until(refused_for_topic, WAIT_S, interval_s=0.2,
                             message="delete-offsets refused while subscribed")
        assert refused.stderr == ("\nError: Encounter some partition level error, see the "
                                  "follow-up details:\n")

        def other_deleted():
            done = groups(bs, "--delete-offsets", "--group", group, "--topic", other)
            return done.returncode == 0 and done

        done = wait_until(other_deleted, WAIT_S, interval_s=0.2,
                          message="delete-offsets of the topic no longer subscribed")
        assert [r.split() for r in done.stdout.splitlines() if r.strip()] == [
            ["Request", "succeed", "for", "deleting", "offsets", "from", "group", f"{group}."],
            ["TOPIC", "PARTITION", "STATUS"], [other, "0", "Successful"]]

        busy = groups(bs, "--delete", "--group", group)
        assert busy.returncode == 1
        assert busy.stderr == ("Deletion of some consumer groups failed:\n"
                               f"* Group '{group}' could not be deleted due to: "
                               f"NON_EMPTY_GROUP: group '{group}'\n")
    finally:
        c.close()
    assert set(committed(bs, group)) == {"0"}  # only `topic`'s offset is left
    gone = groups(bs, "delete", "--group", group)
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    missing = groups(bs, "describe", group)
    assert (missing.returncode, missing.stderr) == (
        1, f"Error: Consumer group '{group}' does not exist.\n")
