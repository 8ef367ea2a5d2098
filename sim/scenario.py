"""A scripted scenario on the simulated cluster, for tests whose subject is the protocol or
the nodes' state rather than the processes: `run_scenario(nodes, seed, scenario)`.

Owns `run_scenario` and `Scene`, the scenario's view of the world: its nodes (kill,
restart), where a partition's leadership and ISR stand as the serving leader sees them, and
clients that reach the nodes through the simulated network. The run is `minibroker sim`'s
(sim.run): the same `World`, seeded by `seed`, on the same simulated clock, so a scenario that waits
for a condition waits in simulated time and costs what the cluster's work costs, not the
timeouts it meets. The seeded fault schedule of sim.run is not used: the scenario is the
nemesis.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import trio

from broker.coordinator.offsets import partition_of
from broker.coordinator.group_runtime import OFFSETS_TOPIC
from broker.listeners import parse_listeners
from broker.partition import Partition
from client import AdminClient, NewTopic
from client.connection import open_connection
from harness.wait import wait_for
from sim.determinism import seeded, simulated_clock
from sim.world import SimNode, World

Scenario = Callable[["Scene"], Awaitable[Any]]


class ScenarioTimeout(AssertionError):
    """The cluster did not form within its (simulated) deadline."""


class Scene:
    def __init__(self, world: World) -> None:
        self.world = world

    @property
    def bootstrap(self) -> str:
        return self.world.bootstrap

    def node(self, node_id: int) -> SimNode:
        return self.world.nodes[node_id]

    async def client(self, fn: Callable[..., Awaitable[Any]], *args: Any,
                     name: str = "client") -> Any:
        """`fn(*args)` with its connections through the simulated network."""
        return await self.world.as_client(name, fn, *args)

    async def call(self, node_id: int, api_key: int, body: Any,
                   version: int | None = None) -> Any:
        """One request to one node's client listener; the response body."""
        host, port = self.address(node_id)

        async def call() -> Any:
            async with open_connection(host, port) as conn:
                return (await conn.request(api_key, body, version)).body
        return await self.client(call, name="raw")

    def address(self, node_id: int) -> tuple[str, int]:
        endpoint = parse_listeners(self.node(node_id).config.listeners)[0]
        return endpoint.host, endpoint.port

    async def wait_for(self, condition: Callable[[], Any | Awaitable[Any]], timeout_s: float,
                       what: str) -> Any:
        """Until `condition()` (plain or async) is truthy, checked every 50 ms of simulated
        time; harness.wait.WaitTimeout naming `what` after `timeout_s`."""
        return await wait_for(condition, timeout_s, what, interval_s=0.05)

    def leader_partition(self, topic: str, index: int) -> Partition | None:
        """The partition on the node that leads it and serves (registered, unfenced)."""
        for node in self.world.running():
            broker = node.broker
            if broker is None or not broker.lifecycle.unfenced.is_set():
                continue
            p = broker.partitions.get((topic, index))
            if p is not None and p.is_leader:
                return p
        return None

    def leader(self, topic: str, index: int) -> int | None:
        p = self.leader_partition(topic, index)
        return None if p is None else p.leader_id

    def isr(self, topic: str, index: int) -> list[int]:
        p = self.leader_partition(topic, index)
        return [] if p is None else list(p.isr)

    async def wait_full_isr(self, topic: str, partitions: int, timeout_s: float = 60) -> None:
        live = {n.node_id for n in self.world.running()}

        def full() -> bool:
            for i in range(partitions):
                p = self.leader_partition(topic, i)
                if p is None or (set(p.state.replicas) & live) - set(p.isr):
                    return False
            return True
        await self.wait_for(full, timeout_s, f"every partition of {topic} led, ISR full")

    def coordinator(self, group: str) -> int | None:
        """The node coordinating `group`: the leader of its __consumer_offsets partition."""
        nodes = [n.broker for n in self.world.running() if n.broker is not None]
        if not nodes:
            return None
        count = nodes[0].metadata_cache.partition_count(OFFSETS_TOPIC) or 0
        return self.leader(OFFSETS_TOPIC, partition_of(group, count)) if count else None

    async def create_topic(self, topic: str, partitions: int, replication_factor: int = 3,
                           config: dict[str, str] | None = None) -> None:
        async def create() -> None:
            async with AdminClient(bootstrap_servers=self.bootstrap) as admin:
                await admin.create_topics([NewTopic(topic, partitions, replication_factor,
                                                    configs=config or {})])
        await self.client(create, name="admin")
        await self.wait_full_isr(topic, partitions)

    def active_controller(self) -> int | None:
        """The node whose Raft node leads the metadata quorum (the newest epoch's)."""
        leaders = [(n.broker.runtime.node.epoch, n.node_id) for n in self.world.running()
                   if n.broker is not None and n.broker.runtime is not None
                   and n.broker.runtime.node.is_leader]
        return max(leaders)[1] if leaders else None

    def pause(self, node_id: int) -> None:
        """As SIGSTOP: the node's connections hold every byte both ways and its timers
        do not fire."""
        self.node(node_id).pause()

    def resume(self, node_id: int) -> None:
        """As SIGCONT: the timers that came due while it was paused fire at once."""
        self.node(node_id).resume()

    def kill(self, node_id: int) -> None:
        """As kill -9: tasks cancelled, connections broken, unsynced bytes lost."""
        self.node(node_id).kill()

    async def restart(self, node_id: int, timeout_s: float = 60) -> None:
        """Start a killed or stopped node again on what its disk kept; until it serves."""
        node = self.node(node_id)
        await node.stopped.wait()
        await node.start()
        await self.wait_for(lambda: node.broker is not None
                            and node.broker.lifecycle.unfenced.is_set(), timeout_s,
                            f"node {node_id} registered again")


def run_scenario(nodes: int, seed: int, scenario: Scenario,
                 overrides: dict[str, str] | None = None,
                 formed_within_s: float = 120) -> Any:
    """Run `scenario(scene)` once the cluster has formed; return what it returns."""
    result: list[Any] = []

    async def main() -> None:
        world = World(nodes, seed, overrides=overrides)
        async with trio.open_nursery() as nursery:
            await world.start(nursery)
            if not await world.formed(formed_within_s):
                raise ScenarioTimeout(f"the nodes did not register within {formed_within_s} s")
            result.append(await scenario(Scene(world)))
            nursery.cancel_scope.cancel()

    with seeded(seed):
        trio.run(main, clock=simulated_clock())
    return result[0]
