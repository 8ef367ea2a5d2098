"""The fault schedule of one simulated run, drawn from its seed, and carrying it out.

Owns `KINDS`, `schedule(rng, ...)` and `Nemesis`. A schedule is a list of faults, each
with a start, a duration and a target, one at a time with a quiet gap between them, all
before the run's healing time:

    kill        kill -9 of a node: its tasks cancelled, its disk crashed (unsynced bytes
                lost, the last write maybe torn); started again when the fault ends
    restart     a clean stop (controlled shutdown) and start of a node
    partition   a node cut off from the other nodes both ways (clients still reach it)
    one-way     the links from one node to the others cut, the way back kept
    isolate     a node cut off from everyone, clients included
    pause       as SIGSTOP then SIGCONT: the node's connections hold every byte both ways
                and none of its timers fires; at the end the bytes flow and the timers
                that came due fire at once
    reset       every connection of a node reset at once (no duration)
    partition-kill  a node cut off from the other nodes both ways; halfway through, at one
                instant, the cut heals and another node is killed (as `kill`) until the
                fault ends. The only kind that leaves a voter that missed committed
                metadata facing a quorum whose leader may be gone, standing at once with
                the others, which is when a vote's log comparison decides who leads
    power-loss  a correlated power loss: every node, or a majority of them, crashed at one
                instant (each disk losing what it had not fsynced, its last write maybe
                torn), all started again when the fault ends. A kill loses one node's
                unsynced tail, which the others repair; only a loss of several disks at
                once shows whether what the quorum acknowledged was on them

Each start and end is recorded in the history as chaos runs record theirs (`fault`
operations of the `nemesis` process), so the same tools read both.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import trio

from harness.chaos.history import INFO, History
from sim.world import World

KINDS = ("kill", "restart", "partition", "one-way", "isolate", "pause", "reset",
         "partition-kill", "power-loss")


@dataclass(frozen=True)
class Fault:
    kind: str
    target: int  # a node id
    start_s: float
    duration_s: float
    # the other nodes a power loss takes down with `target`; the node a partition-kill
    # kills
    others: tuple[int, ...] = ()


def schedule(rng: random.Random, nodes: int, kinds: tuple[str, ...], start_s: float,
             heal_s: float) -> list[Fault]:
    faults: list[Fault] = []
    t = start_s + rng.uniform(0, 3)
    while kinds and t < heal_s:
        kind = rng.choice(kinds)
        duration = 0.0 if kind == "reset" else rng.uniform(1, 12)
        duration = min(duration, heal_s - t)
        target = rng.randrange(nodes)
        others: tuple[int, ...] = ()
        if kind == "power-loss":
            # all of them, or a majority: a quorum that lost power together
            count = rng.choice((nodes, nodes // 2 + 1))
            others = tuple(sorted(rng.sample([n for n in range(nodes) if n != target],
                                             count - 1)))
        elif kind == "partition-kill":
            others = (rng.choice([n for n in range(nodes) if n != target]),)
        faults.append(Fault(kind, target, round(t, 3), round(duration, 3), others))
        t += duration + rng.uniform(1, 8)
    return faults


class Nemesis:
    def __init__(self, world: World, history: History) -> None:
        self.world, self.h = world, history
        self.counts: dict[str, int] = {}

    def _record(self, fault: Fault, phase: str) -> None:
        value = {"fault": fault.kind, "target": fault.target, "why": "seeded", "phase": phase}
        if fault.others:
            value["others"] = list(fault.others)
        self.h.record("nemesis", INFO, "fault", value)

    async def run(self, faults: list[Fault]) -> None:
        for fault in faults:
            await trio.sleep_until(fault.start_s)
            self.counts[fault.kind] = self.counts.get(fault.kind, 0) + 1
            self._record(fault, "start")
            await self._start(fault)
            if fault.kind == "partition-kill":
                await trio.sleep(fault.duration_s / 2)
                self.world.net.heal()  # and, with nothing run in between, the kill
                killed = self.world.nodes[fault.others[0]]
                killed.kill()
                self._record(fault, "kill")
                await killed.stopped.wait()
                await trio.sleep(fault.duration_s / 2)
            else:
                await trio.sleep(fault.duration_s)
            await self._end(fault)
            self._record(fault, "end")

    async def _start(self, f: Fault) -> None:
        world, net = self.world, self.world.net
        node = world.nodes[f.target]
        others = [n.name for n in world.nodes if n is not node]
        if f.kind == "kill":
            node.kill()
            await node.stopped.wait()
        elif f.kind == "power-loss":
            down = [node, *(world.nodes[n] for n in f.others)]
            for each in down:  # at one instant: nothing runs between these kills
                each.kill()
            for each in down:
                await each.stopped.wait()
        elif f.kind == "restart":
            await node.stop()
        elif f.kind in ("partition", "partition-kill"):
            for other in others:
                net.cut(node.name, other)
        elif f.kind == "one-way":
            for other in others:
                net.cut(node.name, other, both_ways=False)
        elif f.kind == "isolate":
            net.isolate(node.name)
        elif f.kind == "pause":
            node.pause()
        elif f.kind == "reset":
            net.reset(node.name)

    async def _end(self, f: Fault) -> None:
        node = self.world.nodes[f.target]
        if f.kind in ("kill", "restart", "power-loss", "partition-kill"):
            for each in (node, *(self.world.nodes[n] for n in f.others)):
                if not each.running:
                    await each.start()
        else:
            self.world.heal()
