"""ControllerChannel.forward when the controller it asked stops answering: the request goes
to the new leader as soon as the quorum names one, not after the request timeout (a
paused controller otherwise made the new one fence every broker heartbeating to it)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import trio

from broker.controller_channel import ControllerChannel, ControllerUnavailable
from protocol.messages import BROKER_HEARTBEAT


class FakeRuntime:
    """What the channel reads of the quorum: who leads, and the event fired on a change."""

    def __init__(self, leader: int) -> None:
        self.leader_id = leader
        self.active = False
        self.node = SimpleNamespace(node_id=9)
        self.leader_changed = trio.Event()

    def elect(self, leader: int) -> None:
        self.leader_id = leader
        self.leader_changed.set()
        self.leader_changed = trio.Event()


class Peer:
    def __init__(self, node: int, answers: bool) -> None:
        self.node, self.answers, self.asked = node, answers, 0

    async def request(self, api_key: int, api_version: int, body: Any,
                      timeout_s: float) -> dict:
        self.asked += 1
        if not self.answers:  # paused: the request never completes by itself
            await trio.sleep_forever()
        return {"error_code": 0, "answered_by": self.node}


async def test_a_request_to_a_silent_controller_moves_to_the_new_leader(autojump_clock):
    runtime = FakeRuntime(leader=1)
    peers = {1: Peer(1, answers=False), 2: Peer(2, answers=True)}
    channel = ControllerChannel(runtime, peers.__getitem__, request_timeout_s=30.0)
    answer: dict = {}

    async def heartbeat() -> None:
        answer.update(await channel.forward(BROKER_HEARTBEAT, 1, {}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat)
        await trio.sleep(1.0)  # the heartbeat is stuck at node 1
        assert peers[1].asked == 1 and not answer
        started = trio.current_time()
        runtime.elect(2)
    assert answer == {"error_code": 0, "answered_by": 2}
    assert trio.current_time() - started < 1.0  # well inside the 30 s request timeout


async def test_without_a_new_leader_the_request_still_times_out(autojump_clock):
    runtime = FakeRuntime(leader=1)
    channel = ControllerChannel(runtime, {1: Peer(1, answers=False)}.__getitem__,
                                request_timeout_s=5.0)
    started = trio.current_time()
    with pytest.raises(ControllerUnavailable):
        await channel.forward(BROKER_HEARTBEAT, 1, {})
    assert trio.current_time() - started == pytest.approx(5.0, abs=0.6)
