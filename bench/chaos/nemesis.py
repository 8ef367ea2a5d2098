"""The nemesis: a seeded schedule of faults, carried out against a Target one at a time.

`schedule(seed, duration_s, kinds, pause_s)` is pure: the same seed gives the same list of
`Fault`s (what, aimed at whom, when, for how long), so a failing run is replayed by its
seed. Whom a fault hits is chosen when it starts, from the cluster as it is then:

  random       any node
  controller   the active controller (the metadata quorum's leader)
  leader       the leader of one of the topic's partitions
  coordinator  the leader of the group's __consumer_offsets partition (its coordinator)

The kinds:

  kill        kill -9, then started again after `hold_s` (unflushed data lost with it)
  pause       SIGSTOP / docker pause for longer than the session timeouts, then resumed
  restart     a rolling restart: SIGTERM to each node in turn, each back before the next
  isolate     the target cut from both others (its own minority) as long as a pause,
              then healed
  ring        every node sees one other: each has a majority, none the same one (Jepsen's
              majorities-ring), then healed; aimed at nobody in particular
  reassign    a partition moved off the target and back onto it (KIP-455) under a low
              replication throttle, with the target or the partition's leader killed -9
              while the moved replica catches up (bench.chaos.reassign); only when named
              in --faults, so that the default schedules of a seed stay what they were

One fault at a time, with quiet gaps between: with three replicas and
min.insync.replicas=2 one fault may make writes wait, never lose an acknowledged one.
Every start and end is recorded in the history (process "nemesis", f "fault").
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

import trio

from harness.chaos.history import INFO, History
from bench.chaos.reassign import Mover
from bench.chaos.targets import Target
from client import AdminClient

KINDS = ("kill", "pause", "restart", "isolate", "ring")
EXTRA_KINDS = ("reassign",)  # named in --faults only
AIMS = ("random", "controller", "leader", "coordinator")
PARTITION_KINDS = ("isolate", "ring")


@dataclass(frozen=True)
class Fault:
    at_s: float  # when it starts, from the workload's start
    kind: str
    aim: str
    hold_s: float  # how long it lasts (a restart: ignored, it takes what it takes)
    pick: float  # in [0, 1): which node among the candidates, so the seed decides it


def schedule(seed: int, duration_s: float, kinds: Sequence[str], pause_s: float,
             gap_s: tuple[float, float] = (3.0, 8.0)) -> list[Fault]:
    """The faults of one run: a quiet gap, a fault, a gap, ... until `duration_s` is left
    with time for the last to heal. A pause or a partition lasts `pause_s` to 1.5x that."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = rng.uniform(*gap_s)
    while True:
        kind = rng.choice(list(kinds))
        aim = "random" if kind == "ring" else rng.choice(AIMS)
        if kind in ("pause",) + PARTITION_KINDS:  # long enough to fence and to shrink
            hold = rng.uniform(pause_s, 1.5 * pause_s)
        elif kind == "restart":
            hold = 0.0
        elif kind == "reassign":  # the kill during the catch-up, and the moves around it
            hold = rng.uniform(2.0, 5.0)
        else:
            hold = rng.uniform(3.0, 10.0)
        if t + hold + 2.0 > duration_s:
            return faults
        faults.append(Fault(round(t, 3), kind, aim, round(hold, 3), rng.random()))
        t += hold + (15.0 if kind in ("restart", "reassign") else 0.0) + rng.uniform(*gap_s)


class Nemesis:
    """Carries a schedule out. `aimed(aim)` names the nodes a fault may hit (the runner
    asks the cluster); `wait_serving(node)` returns once a node answers again."""

    def __init__(self, target: Target, history: History,
                 aimed: Callable[[str], list[int]],
                 wait_serving: Callable[[int, float], None],
                 mover: Mover | None = None) -> None:
        self.target, self.h, self.aimed, self.wait_serving = target, history, aimed, wait_serving
        self.mover = mover
        self.injected = 0
        self.moves_not_done: list[str] = []

    async def run(self, faults: list[Fault], started: float) -> None:
        for fault in faults:
            await trio.sleep_until(started + fault.at_s)
            await self.inject(fault)

    async def inject(self, fault: Fault) -> None:
        candidates = await trio.to_thread.run_sync(self.aimed, fault.aim)
        if not candidates:  # nobody holds that role now (an election under way)
            candidates = list(self.target.node_ids)
        node = candidates[int(fault.pick * len(candidates))]
        detail = {"fault": fault.kind, "aim": fault.aim, "target": node,
                  "hold_s": fault.hold_s}
        self.injected += 1
        if fault.kind == "restart":
            await self._rolling_restart(detail)
            return
        if fault.kind == "reassign":
            await self._reassign(fault, node, detail)
            return
        self.h.record("nemesis", INFO, "fault", {**detail, "phase": "start"})
        await trio.to_thread.run_sync(self._start, fault.kind, node)
        await trio.sleep(fault.hold_s)
        await trio.to_thread.run_sync(self._end, fault.kind, node)
        self.h.record("nemesis", INFO, "fault", {**detail, "phase": "end"})
        await trio.to_thread.run_sync(self.wait_serving, node, 120.0)

    def _start(self, kind: str, node: int) -> None:
        t = self.target
        if kind == "kill":
            t.kill(node)
        elif kind == "pause":
            t.pause(node)
        elif kind == "isolate":
            t.partition([[n for n in t.node_ids if n != node]])
        elif kind == "ring":
            ids = list(t.node_ids)
            # a and b lose each other; the rest bridge them, so each side is a majority
            a, b = ids[node % len(ids)], ids[(node + 1) % len(ids)]
            t.partition([[a] + [n for n in ids if n not in (a, b)],
                         [b] + [n for n in ids if n not in (a, b)]])
        else:
            raise ValueError(f"unknown fault {kind!r}")

    def _end(self, kind: str, node: int) -> None:
        t = self.target
        if kind == "kill":
            t.start_node(node)
        elif kind == "pause":
            t.resume(node)
        else:
            t.heal_network()

    async def _rolling_restart(self, detail: dict) -> None:
        self.h.record("nemesis", INFO, "fault", {**detail, "phase": "start"})
        for node in self.target.node_ids:
            await trio.to_thread.run_sync(self.target.terminate, node)
            await trio.to_thread.run_sync(self.target.start_node, node)
            await trio.to_thread.run_sync(self.wait_serving, node, 120.0)
        self.h.record("nemesis", INFO, "fault", {**detail, "phase": "end"})

    async def _reassign(self, fault: Fault, node: int, detail: dict) -> None:
        mover = self.mover
        if mover is None:
            raise ValueError("a reassign fault needs the nemesis's mover")
        partition = mover.partition_of(fault.pick)
        detail = {**detail, "partition": partition}
        async with AdminClient(bootstrap_servers=mover.bootstrap) as admin:
            before = await mover.replicas(admin, partition)
            if node not in before or len(before) < 2:
                self.h.record("nemesis", INFO, "fault", {**detail, "phase": "skipped",
                                                         "replicas": before})
                return
            self.h.record("nemesis", INFO, "fault", {**detail, "phase": "start",
                                                     "replicas": before})
            others = [r for r in before if r != node]
            await mover.start(admin, partition, others)
            shrunk = await mover.wait_done(admin, partition, others)
            await mover.throttle(admin, partition, node, on=True)
            await mover.start(admin, partition, before)
            leader = await mover.leader(admin, partition)
            victim = node if fault.pick < 0.5 or leader is None else leader
            self.h.record("nemesis", INFO, "fault", {**detail, "phase": "moving",
                                                     "shrunk": shrunk, "killed": victim})
            await trio.to_thread.run_sync(self.target.kill, victim)
            await trio.sleep(fault.hold_s)
            await trio.to_thread.run_sync(self.target.start_node, victim)
            await trio.to_thread.run_sync(self.wait_serving, victim, 120.0)
            await mover.throttle(admin, partition, node, on=False)
            done = await mover.wait_done(admin, partition, before)
        if not (shrunk and done):
            self.moves_not_done.append(f"{mover.topic}-{partition} to {before}: shrunk "
                                       f"{shrunk}, moved back {done}")
        self.h.record("nemesis", INFO, "fault", {**detail, "phase": "end", "done": done})

    def heal_all(self) -> None:
        """Whatever a cut-short fault left behind: the network whole, every node running."""
        t = self.target
        if t.can_partition:
            t.heal_network()
        for node in t.node_ids:
            t.resume(node)
            if not t.is_running(node):
                t.start_node(node)
