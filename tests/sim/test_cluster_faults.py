"""An active controller cut off from both followers (both paused, so their connections stay
open and nothing answers) must resign without stopping, and come back as a follower when
they resume.

Moved from tests/cluster (SIGSTOP on two processes, and 2 s of real time per fenced
session): a paused simulated node's connections hold every byte both ways, and none of its
timers fires.
"""

from __future__ import annotations

import trio

from sim.scenario import Scene, run_scenario
from sim.world import NODE_SETTINGS

SESSION_TIMEOUT_S = int(NODE_SETTINGS["broker.session.timeout.ms"]) / 1000


def test_an_isolated_controller_resigns_and_keeps_running():
    async def scenario(scene: Scene) -> None:
        leader = scene.active_controller()
        assert leader is not None
        others = [n.node_id for n in scene.world.nodes if n.node_id != leader]
        for n in others:
            scene.pause(n)
        node = scene.node(leader)
        # the leader stops hearing Fetches: it resigns (check-quorum), and its controller's
        # sessions of the silent brokers expire, which must not make it write as a leader
        end = trio.current_time() + 2 * SESSION_TIMEOUT_S + 1
        while trio.current_time() < end:
            assert node.running, f"the isolated controller {leader} stopped"
            await trio.sleep(0.1)
        assert node.broker is not None and node.broker.runtime is not None
        assert not node.broker.runtime.node.is_leader, "the isolated controller still leads"
        for n in others:
            scene.resume(n)
        await scene.wait_for(lambda: scene.active_controller() is not None, 20,
                             "a controller elected after the resume")
        await scene.wait_for(lambda: all(
            n.broker is not None and n.broker.lifecycle.unfenced.is_set()
            for n in scene.world.nodes), 20, "every node registered and unfenced")
        await scene.create_topic("after-isolation", 3)
        assert all(n.running for n in scene.world.nodes) and not scene.world.halted

    run_scenario(3, 1, scenario)
