"""`minibroker groups reset-offsets | delete | delete-offsets` (tools/group_admin.py) and the
AdminClient calls under them (alter_consumer_group_offsets, delete_consumer_group_offsets,
delete_groups): the pure parts (Kafka's --topic and --to-datetime syntax, the plan and its
clamping, Kafka's option spelling) directly, the rest against a broker in the test's trio
run (tests/inproc.py), with a member of the group made by `minibroker consume --group`
itself (tools.consume.consume, in process)."""

from __future__ import annotations

import argparse
import io
import signal
from datetime import datetime, timezone

import pytest
import trio

from client import Consumer, Producer
from client.errors import KafkaError
from client.types import TopicPartition
from protocol.errors import ErrorCode
from tests.interop.group_helpers import wait_for
from tools import consume, groups
from tools.admin_session import ToolError, open_admin
from tools.group_admin import (GroupActive, ResetSpec, delete_groups, delete_offsets,
                               parse_datetime, parse_topic_partitions, plan_reset,
                               reset_offsets)

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


# --- the pure parts --------------------------------------------------------------------

def test_topic_partitions_syntax():
    assert parse_topic_partitions(["a", "b:0,2", "b:1", "c:3", "c"]) == {
        "a": None, "b": [0, 1, 2], "c": None}
    assert parse_topic_partitions(["a", "a:1"]) == {"a": None}
    for bad in (":0", "a:x", "a:-1", "a:"):
        with pytest.raises(ValueError):
            parse_topic_partitions([bad])


def test_datetime_formats():
    utc = datetime(2024, 3, 1, 12, 30, 5, 250000, tzinfo=timezone.utc)
    ms = int(utc.timestamp() * 1000)
    assert parse_datetime("2024-03-01T12:30:05.250Z") == ms
    assert parse_datetime("2024-03-01T13:30:05.250+01:00") == ms
    assert parse_datetime("2024-03-01T07:30:05.250-0500") == ms
    assert parse_datetime("2024-03-01T12:30:05Z") == ms - 250
    local = datetime(2024, 3, 1, 12, 30, 5, 250000).astimezone()
    assert parse_datetime("2024-03-01T12:30:05.250") == int(local.timestamp() * 1000)
    for bad in ("2024-03-01", "yesterday", "2024-13-01T00:00:00.000"):
        with pytest.raises(ValueError):
            parse_datetime(bad)


def test_plan_clamps_to_the_log_as_kafka_does():
    committed = {T0: 5}
    earliest, latest = {T0: 2, T1: 0}, {T0: 10, T1: 4}
    parts = [T0, T1]

    def plan(kind: str, value: int = 0, by_time=None):
        return plan_reset(ResetSpec(kind, value), parts, committed, earliest, latest, by_time)

    assert plan("earliest") == {T0: 2, T1: 0}
    assert plan("latest") == {T0: 10, T1: 4}
    assert plan("current") == {T0: 5, T1: 4}  # no commit: the log end, as Kafka
    assert plan("offset", 7) == {T0: 7, T1: 4}
    assert plan("offset", 0) == {T0: 2, T1: 0}
    assert plan_reset(ResetSpec("shift", -10), [T0], committed, earliest, latest) == {T0: 2}
    assert plan_reset(ResetSpec("shift", 3), [T0], committed, earliest, latest) == {T0: 8}
    assert plan_reset(ResetSpec("shift", 30), [T0], committed, earliest, latest) == {T0: 10}
    with pytest.raises(ToolError, match="no current committed offset"):
        plan("shift", 1)
    # no record at or after the time: the log end
    assert plan("datetime", 1, by_time={T0: 6, T1: -1}) == {T0: 6, T1: 4}


def test_kafka_spelling_becomes_the_subcommand():
    assert groups.subcommand_first(["--bootstrap-server", "b", "--reset-offsets", "--group",
                                    "g"]) == ["reset-offsets", "--bootstrap-server", "b",
                                              "--group", "g"]
    assert groups.subcommand_first(["--delete-offsets", "--group", "g"])[0] == "delete-offsets"
    assert groups.subcommand_first(["--delete", "--group", "g"])[0] == "delete"
    assert groups.subcommand_first(["--describe", "--group", "g"]) == ["describe", "--group",
                                                                      "g"]
    assert groups.subcommand_first(["describe", "g"]) == ["describe", "g"]


def test_reset_options_are_checked_before_connecting():
    from cli.main import build_parser

    def run(*argv: str) -> tuple[int, str]:
        args = build_parser().parse_args(["groups", *groups.subcommand_first(list(argv))])
        err = io.StringIO()
        return groups.run(args, io.StringIO(), err), err.getvalue()

    code, err = run("--reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest",
                    "--bootstrap-server", "127.0.0.1:1")
    assert code == 2 and "partitions must be numbers" in err
    code, err = run("--reset-offsets", "--group", "g", "--all-topics", "--to-datetime",
                    "soon", "--bootstrap-server", "127.0.0.1:1")
    assert code == 2 and "--to-datetime 'soon'" in err
    code, err = run("--describe", "--bootstrap-server", "127.0.0.1:1")
    assert code == 2 and "describe needs the group" in err
    with pytest.raises(SystemExit):  # a scenario is required, as in Kafka
        build_parser().parse_args(["groups", "reset-offsets", "--group", "g", "--all-topics",
                                   "--bootstrap-server", "b"])


# --- against a broker -----------------------------------------------------------------

async def _produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for partition, n in per_partition.items():
            for i in range(n):
                await producer.send(topic, f"{partition}-{i}".encode(), partition=partition)
        await producer.flush()


def _consume_args(bootstrap: str, topic: str, group: str, **extra) -> argparse.Namespace:
    args = dict(topic=topic, bootstrap_server=bootstrap, group=group, from_beginning=True,
                max_messages=None, timeout_ms=None, print_key=False, key_separator="\t",
                partition=None, offset=None)
    args.update(extra)
    return argparse.Namespace(**args)


async def test_reset_dry_run_execute_and_refusal_while_active(inproc, autojump_clock):
    bs = inproc.bootstrap
    await inproc.create_topic("t", 2)
    await _produce(bs, "t", {0: 6, 1: 4})
    out, err = io.BytesIO(), io.StringIO()
    # the console consumer as a member of g: reads everything, commits on exit, leaves
    assert await consume.consume(_consume_args(bs, "t", "g", max_messages=10), out, err) == 0
    assert len(out.getvalue().splitlines()) == 10

    async with open_admin(bs, timeout_ms=10_000, client_id="reset-test") as admin:
        assert await admin.list_consumer_group_offsets("g") == {T0: 6, T1: 4}
        plan_out = io.StringIO()
        plans = await reset_offsets(admin, ["g"], None, ResetSpec("earliest"), False,
                                    plan_out)
        assert plans == {"g": {T0: 0, T1: 0}}
        lines = plan_out.getvalue().splitlines()
        assert lines[0] == "" and lines[1].split() == ["GROUP", "TOPIC", "PARTITION",
                                                       "NEW-OFFSET"]
        assert [x.split() for x in lines[2:]] == [["g", "t", "0", "0"], ["g", "t", "1", "0"]]
        assert await admin.list_consumer_group_offsets("g") == {T0: 6, T1: 4}  # dry run

        with pytest.raises(ToolError, match=r"topic t has no partition 7 \(2 partitions\)"):
            await reset_offsets(admin, ["g"], {"t": [0, 7]}, ResetSpec("earliest"), True,
                                io.StringIO())
        await reset_offsets(admin, ["g"], {"t": [1]}, ResetSpec("shift", -3), True,
                            io.StringIO())
        assert await admin.list_consumer_group_offsets("g") == {T0: 6, T1: 1}
        await reset_offsets(admin, ["g"], {"t": None}, ResetSpec("earliest"), True,
                            io.StringIO())
        assert await admin.list_consumer_group_offsets("g") == {T0: 0, T1: 0}

        got: list[int] = []

        async def poll(member: Consumer) -> None:
            batches = await member.getmany(timeout_ms=100)
            got.extend(r.offset for rs in batches.values() for r in rs)

        async with Consumer("t", bootstrap_servers=bs, group_id="g",
                            auto_offset_reset="latest") as member:
            async def in_group() -> bool:
                await poll(member)
                return (await admin.describe_groups(["g"]))["g"].state == "Stable"
            await wait_for(in_group, 30, "the member to join g")
            refusal = ("Assignments can only be reset if the group 'g' is inactive, but the "
                       "current state is Stable.")
            with pytest.raises(GroupActive, match=refusal):
                await reset_offsets(admin, ["g"], None, ResetSpec("latest"), True,
                                    io.StringIO())
            # of several groups, the inactive ones are reset and the active one refused
            err = io.StringIO()
            plans = await reset_offsets(admin, ["g", "idle"], {"t": None},
                                        ResetSpec("latest"), True, io.StringIO(), err)
            assert plans == {"idle": {T0: 6, T1: 4}}
            assert err.getvalue() == f"Error: {refusal}\n"
            assert await admin.list_consumer_group_offsets("idle") == {T0: 6, T1: 4}

            async def everything() -> bool:
                await poll(member)
                return len(got) >= 10
            # the member starts at the reset offsets (0), not at the end
            await wait_for(everything, 30, "the member to read both partitions from 0")
            assert sorted(got) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 5]


async def test_delete_offsets_and_delete_group(inproc, autojump_clock):
    bs = inproc.bootstrap
    await inproc.create_topic("t", 2)
    await inproc.create_topic("u", 1)
    await _produce(bs, "t", {0: 2, 1: 2})
    await _produce(bs, "u", {0: 3})
    async with open_admin(bs, timeout_ms=10_000, client_id="delete-test") as admin:
        u0 = TopicPartition("u", 0)
        await admin.alter_consumer_group_offsets("g", {T0: 2, T1: 1, u0: 3})
        async with Consumer("t", bootstrap_servers=bs, group_id="g") as member:
            async def in_group() -> bool:
                await member.getmany(timeout_ms=100)
                return (await admin.describe_groups(["g"]))["g"].state == "Stable"
            await wait_for(in_group, 30, "the member to join g")

            out, err = io.StringIO(), io.StringIO()
            assert await delete_offsets(admin, "g", {"t": [0], "u": None}, out, err) == 1
            assert err.getvalue() == ("\nError: Encounter some partition level error, see "
                                      "the follow-up details:\n")
            rows = [line.split() for line in out.getvalue().splitlines() if line.strip()]
            assert rows == [["TOPIC", "PARTITION", "STATUS"],
                            ["t", "0", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"],
                            ["u", "0", "Successful"]]
            committed = await admin.list_consumer_group_offsets("g")
            assert u0 not in committed and committed[T0] == 2

            out, err = io.StringIO(), io.StringIO()
            assert await delete_groups(admin, ["g"], out, err) == 1
            assert out.getvalue() == ""
            assert err.getvalue().splitlines() == [
                "Deletion of some consumer groups failed:",
                "* Group 'g' could not be deleted due to: NON_EMPTY_GROUP: group 'g'"]

        out, err = io.StringIO(), io.StringIO()
        assert await delete_offsets(admin, "g", {"t": [1]}, out, err) == 0
        assert out.getvalue().startswith("Request succeed for deleting offsets from group g.")
        assert TopicPartition("t", 1) not in await admin.list_consumer_group_offsets("g")

        out, err = io.StringIO(), io.StringIO()
        assert await delete_groups(admin, ["g"], out, err) == 0
        assert out.getvalue() == "Deletion of requested consumer groups ('g') was successful.\n"
        assert await admin.list_consumer_group_offsets("g") == {}
        with pytest.raises(KafkaError) as refused:
            await admin.delete_groups(["g"])
        assert refused.value.code is ErrorCode.GROUP_ID_NOT_FOUND
        out, err = io.StringIO(), io.StringIO()
        assert await delete_offsets(admin, "g", {"t": [0]}, out, err) == 1
        assert err.getvalue() == "\nError: 'g' does not exist.\n"


async def test_console_consumer_with_a_group_is_a_member_and_commits(inproc, autojump_clock):
    bs = inproc.bootstrap
    await inproc.create_topic("t", 2)
    await _produce(bs, "t", {0: 3, 1: 3})
    out, err = io.BytesIO(), io.StringIO()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume.consume, _consume_args(bs, "t", "g", timeout_ms=60_000),
                           out, err)
        async with open_admin(bs, timeout_ms=10_000, client_id="member-test") as admin:
            async def member_with_both() -> bool:
                g = (await admin.describe_groups(["g"]))["g"]
                return (g.state == "Stable" and len(g.members) == 1
                        and set(g.members[0].assignment) == {T0, T1}
                        and g.members[0].client_id == "console-consumer")
            await wait_for(member_with_both, 30, "consume --group to be g's one member")

            async def committed_all() -> bool:  # auto-commit, while it runs
                return await admin.list_consumer_group_offsets("g") == {T0: 3, T1: 3}
            await wait_for(committed_all, 30, "consume --group to commit its positions")

            # a second member joins: the partitions are shared (a rebalance)
            async with Consumer("t", bootstrap_servers=bs, group_id="g") as other:
                async def shared() -> bool:
                    await other.getmany(timeout_ms=100)
                    g = (await admin.describe_groups(["g"]))["g"]
                    return (g.state == "Stable" and len(g.members) == 2
                            and all(len(m.assignment) == 1 for m in g.members))
                await wait_for(shared, 60, "the partitions shared by two members")
        nursery.cancel_scope.cancel()
    assert sorted(out.getvalue().decode().splitlines()) == [
        "0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]


async def test_an_interrupt_after_a_rebalance_ends_the_console_consumer_cleanly(
        inproc, autojump_clock):
    # what the first SIGINT or SIGTERM does (main() wires them to an Interrupt): right after
    # a second member came and went, the reading stops, the positions are committed, the
    # member leaves and consume() returns 0
    bs = inproc.bootstrap
    await inproc.create_topic("t", 2)
    await _produce(bs, "t", {0: 3, 1: 2})
    out, err = io.BytesIO(), io.StringIO()
    interrupt = consume.Interrupt()
    status: list[int] = []

    async def console_consumer() -> None:
        status.append(await consume.consume(_consume_args(bs, "t", "g"), out, err, interrupt))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(console_consumer)
        async with open_admin(bs, timeout_ms=10_000, client_id="interrupt-test") as admin:
            async def members() -> list:
                return (await admin.describe_groups(["g"]))["g"].members
            await wait_for(lambda: len(out.getvalue().splitlines()) == 5, 30,
                           "consume --group to print all five records")
            async with Consumer("t", bootstrap_servers=bs, group_id="g") as other:
                async def shared() -> bool:
                    await other.getmany(timeout_ms=100)
                    return len(await members()) == 2 and len(other.assignment()) == 1
                await wait_for(shared, 60, "a second member to take a partition")
            interrupt.interrupt(signal.SIGINT)  # the group rebalances after the leave now
            await wait_for(lambda: status, 60, "consume() to return after the interrupt")
            assert status == [0]
            assert err.getvalue().splitlines()[-1] == "Processed a total of 5 messages"
            assert await admin.list_consumer_group_offsets("g") == {T0: 3, T1: 2}
            assert len(await members()) == 0  # it left: the group is empty at once


async def test_an_interrupt_before_the_topic_is_found_ends_the_console_consumer(
        inproc, autojump_clock):
    interrupt = consume.Interrupt()
    interrupt.interrupt(signal.SIGTERM)
    out, err = io.BytesIO(), io.StringIO()
    assert await consume.consume(_consume_args(inproc.bootstrap, "t", "g"), out, err,
                                 interrupt) == 0
    assert (out.getvalue(), err.getvalue()) == (b"", "Processed a total of 0 messages\n")


async def test_reset_to_datetime_finds_the_first_record_at_or_after_it(inproc, autojump_clock):
    bs = inproc.bootstrap
    await inproc.create_topic("t", 1)
    async with Producer(bootstrap_servers=bs) as producer:
        for i in range(5):  # CreateTime 1000, 2000, ... 5000 ms after 2024-03-01T00:00Z
            await producer.send("t", b"v", partition=0,
                                timestamp_ms=parse_datetime("2024-03-01T00:00:00.000Z")
                                + 1000 * (i + 1))
        await producer.flush()
    async with open_admin(bs, timeout_ms=10_000, client_id="datetime-test") as admin:
        async def reset_to(when: str) -> dict:
            spec = ResetSpec("datetime", parse_datetime(when))
            return (await reset_offsets(admin, ["g"], {"t": None}, spec, True,
                                        io.StringIO()))["g"]

        assert await reset_to("2024-03-01T00:00:02.500Z") == {T0: 2}
        assert await admin.list_consumer_group_offsets("g") == {T0: 2}
        assert await reset_to("2024-03-01T01:00:02+01:00") == {T0: 1}
        assert await reset_to("2024-03-01T00:00:00.000Z") == {T0: 0}
        assert await reset_to("2024-03-02T00:00:00.000Z") == {T0: 5}  # none after: the end
