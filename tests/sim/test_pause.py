"""A pause is a stopped process's (SIGSTOP, then SIGCONT): the node's network held both ways
and none of its timers firing, then everything resumed.

With the network alone held, a paused leader's own ISR expiration still ran: it saw its
followers silent past replica.lag.time.max.ms and proposed to shrink the ISR, which a
stopped process cannot do.
"""

from __future__ import annotations

import trio

from sim.scenario import Scene, run_scenario
from sim.world import NODE_SETTINGS

LAG_S = int(NODE_SETTINGS["replica.lag.time.max.ms"]) / 1000


def test_a_paused_leader_keeps_its_isr_until_it_resumes():
    async def scenario(scene: Scene) -> None:
        await scene.create_topic("paused", 1)
        leader = scene.leader("paused", 0)
        partition = scene.leader_partition("paused", 0)
        assert leader is not None and partition is not None
        full = set(partition.isr)
        assert len(full) == 3
        scene.pause(leader)
        assert scene.node(leader).paused
        end = trio.current_time() + 3 * LAG_S
        while trio.current_time() < end:
            # its followers are silent to it, and it cannot tell: no shrink proposed
            assert partition.state.pending is None, \
                f"the paused leader proposed {partition.state.pending}"
            assert set(partition.isr) == full
            await trio.sleep(0.1)
        scene.resume(leader)
        assert not scene.node(leader).paused
        await scene.wait_full_isr("paused", 1)
        assert all(n.running for n in scene.world.nodes) and not scene.world.halted

    run_scenario(3, 1, scenario)


def test_a_node_killed_while_paused_starts_again_unpaused():
    async def scenario(scene: Scene) -> None:
        await scene.create_topic("killed", 3)
        scene.pause(1)
        await trio.sleep(2)
        scene.kill(1)
        # SIGKILL ends a stopped process: the next one runs, its network flows
        await scene.restart(1)
        assert not scene.node(1).paused
        await scene.wait_full_isr("killed", 3)

    run_scenario(3, 1, scenario)


def test_healing_resumes_every_paused_node():
    async def scenario(scene: Scene) -> None:
        await scene.create_topic("healed", 3)
        scene.pause(0)
        scene.pause(2)
        await trio.sleep(3)
        scene.world.heal()
        assert not any(n.paused for n in scene.world.nodes)
        await scene.wait_full_isr("healed", 3)
        await scene.create_topic("after", 3)

    run_scenario(3, 1, scenario)
