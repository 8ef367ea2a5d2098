"""A share group's offsets (KIP-932's admin APIs 90-92) through `minibroker share-groups`,
with librdkafka's share consumer as the group's members, against one broker: the start
offset a group reached, moved back with reset-offsets so the records from there are
delivered again, forgotten with delete-offsets so the next member starts where
share.auto.offset.reset says, and deleted with the group. A group with members refuses
both changes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.interop.librdkafka import create_topic, produce
from tests.interop.test_share_groups_librdkafka import (member, poll_for, poll_until,
                                                        share_broker, start_earliest, values)
from tests.util import unique

pytestmark = pytest.mark.interop
__all__ = ["share_broker"]  # the fixture, imported for this module's tests


def tool(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", "share-groups", *args,
                           "--bootstrap-server", bootstrap],
                          capture_output=True, text=True, timeout=60)


def offsets(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[str, str]]:
    """describe's default view: (topic, partition) -> (START-OFFSET, LAG)."""
    done = tool(bootstrap, "describe", group)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    return {(r[1], int(r[2])): (r[3], r[4]) for r in (line.split() for line in lines[1:])}


def consume_all(bootstrap: str, group: str, topic: str, want: int) -> list[int]:
    """The offsets one member is handed until it has `want` records; it accepts them all
    (implicitly) and leaves."""
    c = member(bootstrap, group, topic)
    got: list[int] = []
    try:
        poll_until([c], lambda: len(got) >= want, on_message=lambda _c, m: got.append(m.offset()))
        poll_for([c], 1.2, lambda _c, m: got.append(m.offset()))  # acknowledgements go out
    finally:
        c.close()
    return sorted(got)


def until_ok(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    """Run the tool until it succeeds: the last member's leave may land after its close."""
    deadline = time.monotonic() + 30
    while (done := tool(bootstrap, *args)).returncode != 0:
        assert time.monotonic() < deadline, done.stderr
    return done


def test_reset_delete_offsets_and_delete_the_group(share_broker):
    bootstrap = share_broker.bootstrap
    topic, group = unique("share"), unique("g")
    create_topic(bootstrap, topic, 1)
    start_earliest(bootstrap, group)
    produce(bootstrap, topic, values(10))
    assert consume_all(bootstrap, group, topic, 10) == list(range(10))
    assert offsets(bootstrap, group) == {(topic, 0): ("10", "0")}

    plan = until_ok(bootstrap, "reset-offsets", "--group", group, "--topic", topic,
                    "--to-offset", "4", "--dry-run")
    assert [line.split() for line in plan.stdout.splitlines() if line.startswith(group)] == \
        [[group, topic, "0", "4"]]
    assert offsets(bootstrap, group) == {(topic, 0): ("10", "0")}  # a dry run changes nothing
    tool(bootstrap, "reset-offsets", "--group", group, "--topic", topic, "--to-offset", "4",
         "--execute").check_returncode()
    assert offsets(bootstrap, group) == {(topic, 0): ("4", "6")}
    assert consume_all(bootstrap, group, topic, 6) == list(range(4, 10))

    until_ok(bootstrap, "delete-offsets", "--group", group, "--topic", topic)
    assert offsets(bootstrap, group) == {}
    assert consume_all(bootstrap, group, topic, 10) == list(range(10))  # earliest again

    until_ok(bootstrap, "delete", "--group", group)
    gone = tool(bootstrap, "describe", group)
    assert gone.returncode == 1 and "not found" in gone.stderr.lower(), gone.stderr


def test_a_group_with_members_keeps_its_offsets(share_broker):
    bootstrap = share_broker.bootstrap
    topic, group = unique("share"), unique("g")
    create_topic(bootstrap, topic, 1)
    start_earliest(bootstrap, group)
    produce(bootstrap, topic, values(3))
    c = member(bootstrap, group, topic)
    try:
        got: list[int] = []
        poll_until([c], lambda: len(got) == 3, on_message=lambda _c, m: got.append(m.offset()))
        for change in (["reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                        "--execute"],
                       ["delete-offsets", "--group", group, "--topic", topic]):
            refused = tool(bootstrap, *change)
            assert refused.returncode == 1 and "not empty" in refused.stderr.lower(), \
                refused.stderr
    finally:
        c.close()
    assert tool(bootstrap, "describe", unique("nope")).returncode == 1
    unknown = tool(bootstrap, "reset-offsets", "--group", group, "--topic", unique("none"),
                   "--to-earliest", "--execute")
    assert unknown.returncode == 1, unknown.stdout
