"""The Consumer's timing in a group, against an in-process broker on virtual time.

Heartbeats every heartbeat.interval.ms keep a member in its group for as long as the
application polls, over any number of session timeouts; an application that stops polling
for max.poll.interval.ms is taken out of the group by its own consumer (Java's heartbeat
thread does the same: a LeaveGroup, then a rejoin on the next poll). Minutes of group life
pass here in a fraction of a second (tests/inproc.py).
"""

from __future__ import annotations

import pytest
import trio

from broker.events import read_events
from client import Consumer
from tests.inproc import InProcessBroker

TOPIC, GROUP = "orders", "billing"
SESSION_MS, HEARTBEAT_MS, MAX_POLL_MS = 10_000, 3_000, 60_000


def _consumer(inproc: InProcessBroker) -> Consumer:
    return Consumer(TOPIC, bootstrap_servers=inproc.bootstrap, group_id=GROUP,
                    session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                    max_poll_interval_ms=MAX_POLL_MS, auto_offset_reset="earliest",
                    enable_auto_commit=False,
                    # long polls of an empty topic: fewer fetches to simulate per virtual minute
                    fetch_max_wait_ms=5_000)


def _requests(inproc: InProcessBroker, api: str, since_ms: int) -> list[dict]:
    inproc.broker.events.flush()
    return [e for e in read_events(inproc.broker.data_dir)
            if e.get("type") == "request" and e.get("api") == api and e["ts"] >= since_ms]


async def _joined(inproc: InProcessBroker, consumer: Consumer) -> str:
    """Poll until the group is stable with this one member; its member id."""
    with trio.fail_after(120):  # virtual seconds: the initial rebalance delay is 3
        while not (consumer.assignment()
                   and inproc.describe_group(GROUP)["group_state"] == "Stable"):
            await consumer.getmany(timeout_ms=100)
    (member,) = inproc.member_ids(GROUP)
    return member


async def test_heartbeats_keep_a_polling_member_in_its_group_over_many_session_timeouts(
        inproc, autojump_clock):
    await inproc.create_topic(TOPIC, 2)
    async with _consumer(inproc) as consumer:
        member = await _joined(inproc, consumer)
        generation = inproc.broker.groups.coordinator.groups[GROUP].generation
        started, since_ms = trio.current_time(), inproc.broker.now_ms()
        duration_s = 30 * SESSION_MS / 1000
        while trio.current_time() < started + duration_s:
            await consumer.getmany(timeout_ms=5_000)  # polls well within max.poll.interval
        assert inproc.member_ids(GROUP) == {member}
        assert inproc.broker.groups.coordinator.groups[GROUP].generation == generation
        heartbeats = _requests(inproc, "Heartbeat", since_ms)
        expected = duration_s * 1000 / HEARTBEAT_MS
        assert expected - 2 <= len(heartbeats) <= expected + 2
        assert all(e["error"] == "" for e in heartbeats)


async def test_a_member_that_stops_polling_leaves_after_max_poll_interval(
        inproc, autojump_clock):
    await inproc.create_topic(TOPIC, 2)
    async with _consumer(inproc) as consumer:
        await _joined(inproc, consumer)
        last_poll = trio.current_time()
        # the application is busy elsewhere; the consumer's own task keeps heartbeating
        await trio.sleep(MAX_POLL_MS / 1000 - 0.5)
        assert len(inproc.member_ids(GROUP)) == 1
        await trio.sleep(1)
        assert inproc.member_ids(GROUP) == set()
        assert _requests(inproc, "LeaveGroup", 0)
        left_after = trio.current_time() - last_poll
        assert left_after == pytest.approx(MAX_POLL_MS / 1000, abs=1)
        await _joined(inproc, consumer)  # the next poll rejoins
