"""The simulated cluster: N real nodes in one trio run, on the simulated network.

Owns `World` and `SimNode`. Each node is the product's own: a `Broker` (with its
controller runtime, replica manager and fetchers, group coordinator) run by
`broker.server.serve`, the wiring `minibroker serve` uses, given the network's `listen`
and `dial` and the run's clock instead of sockets and the wall clock. A node can be
stopped cleanly (as by SIGTERM: controlled shutdown, then close), killed (as by kill -9:
its tasks cancelled where they stand, nothing flushed or closed by it, and its disk
crashed: what it had not fsynced is lost, the last write maybe torn), started again on
what its disk kept, and paused (as by SIGSTOP: its network held both ways and none of its
timers firing, through the node's `broker.timeouts.TimeGate`) and resumed (SIGCONT: the
timers that came due meanwhile fire at once). Each node's disk is a
`broker.storage.SimulatedFileSystem`. A node whose serving ends in an error of its own
halts, as its process would: it goes down, the error is kept in `World.halted`, and the
run goes on.

Clients (sim.workload) run in the same run and reach the nodes through the same network:
`World.client_context(name)` binds `client.connection.stream_opener` for the tasks
started under it.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.timeouts import TimeGate, install
from broker.server import serve
from broker.storage.simulated import SimulatedFileSystem
from client.connection import stream_opener
from sim.determinism import simulated_time
from sim.network import Network

HOST = "127.0.0.1"
BASE_PORT = 19092

# Settings for a simulated cluster: Kafka's defaults, with the test suite's shorter
# session and election timeouts so that a few simulated minutes see many faults healed.
NODE_SETTINGS = {
    "process.roles": "broker,controller",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.replication.factor": "3",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "replica.lag.time.max.ms": "5000",
    "group.initial.rebalance.delay.ms": "0",
    "events.metrics.interval.ms": "0",
    # every request sampled into the event log cost a JSON encoding: a tenth of the
    # simulation's time, for events no checker reads
    "events.request.sample.per.second": "0",
}

log = logging.getLogger("minibroker.sim")


@dataclass
class SimNode:
    node_id: int
    world: World
    config: BrokerConfig
    disk: SimulatedFileSystem
    broker: Broker | None = None
    scope: trio.CancelScope | None = None
    stopped: trio.Event = field(default_factory=trio.Event)
    _stop: trio.Event = field(default_factory=trio.Event)
    # the node's timeouts, held while it is paused; installed in the task its serving
    # starts from, so every task of the node (and no other) waits on it
    gate: TimeGate = field(default_factory=TimeGate)

    @property
    def name(self) -> str:
        return f"node-{self.node_id}"

    @property
    def running(self) -> bool:
        return self.scope is not None

    @property
    def paused(self) -> bool:
        return self.gate.paused

    async def _run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        world = self.world
        install(self.gate)
        self.stopped = trio.Event()
        self._stop = trio.Event()
        broker = Broker(self.config, clock=world.clock, dial=world.net.dialer(self.name),
                        fs=self.disk)
        self.broker = broker
        world.on_broker(self, broker)
        try:
            with trio.CancelScope() as scope:
                self.scope = scope
                broker.open()
                task_status.started()
                try:
                    await serve(broker, install_signal_handlers=False,
                                listen=world.net.listener(self.name), stop=self._wait_stop)
                except Exception as e:  # noqa: BLE001  the node halts, the run goes on
                    # a node that stops on a broken promise of its own (a Raft follower
                    # told to truncate below its high watermark halts, as Kafka's
                    # fault handler does) is one dead process, not the end of the run
                    world.halted.append({"node": self.node_id,
                                         "time": round(trio.current_time(), 3),
                                         "error": _innermost(e)})
                    log.warning("%s halted: %s", self.name, _innermost(e))
                    world.net.down(self.name)
        finally:
            self.scope = None
            self.stopped.set()

    async def _wait_stop(self) -> str:
        await self._stop.wait()
        return "SIGTERM"

    async def start(self) -> None:
        await self.world.nursery.start(self._run)

    async def stop(self) -> None:
        """As SIGTERM: controlled shutdown, then a clean close."""
        if self.scope is not None:
            self._stop.set()
            await self.stopped.wait()

    def pause(self) -> None:
        """As SIGSTOP: the node's connections hold every byte both ways and none of its
        timers fires, until `resume`."""
        self.world.net.pause(self.name)
        self.gate.pause()

    def resume(self) -> None:
        """As SIGCONT: the bytes held flow, and the timers that came due fire at once."""
        self.world.net.resume(self.name)
        self.gate.resume()

    def kill(self) -> None:
        """As kill -9: the node's tasks are cancelled where they stand, its connections
        break, and its disk crashes (what was not fsynced is lost). A paused node dies
        too, and the process started after it is not paused."""
        if self.scope is None:
            return
        self.world.net.down(self.name)
        if self.paused:
            self.world.net.resume(self.name)
            self.gate = TimeGate()  # the dying tasks leave the old one
        self.disk.crash(self.world.rng)
        assert self.broker is not None
        self.broker.close = _abandoned  # type: ignore[method-assign]  # a dead process closes nothing
        self.scope.cancel()


def _innermost(e: BaseException) -> str:
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"


def _abandoned(reason: str = "") -> None:
    return None


class World:
    def __init__(self, nodes: int, seed: int, base_dir: Path = Path("/sim"),
                 overrides: dict[str, str] | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.net = Network(random.Random(self.rng.getrandbits(64)))
        self.base_dir = base_dir
        self.overrides = dict(overrides or {})
        self.nursery: trio.Nursery = None  # type: ignore[assignment]  # set by run()
        ports = [BASE_PORT + 10 * i for i in range(nodes)]
        voters = ",".join(f"{i}@{HOST}:{p + 1}" for i, p in enumerate(ports))
        self.bootstrap = ",".join(f"{HOST}:{p}" for p in ports)
        self.nodes = [SimNode(i, self, self._config(i, ports[i], voters),
                              SimulatedFileSystem(clock=self.clock)) for i in range(nodes)]
        self.broker_listeners: list[Callable[[SimNode, Broker], None]] = []
        self.halted: list[dict[str, Any]] = []  # nodes that stopped on an error of their own

    def _config(self, node_id: int, port: int, voters: str) -> BrokerConfig:
        data = self.base_dir / f"node-{node_id}"
        overrides = {**NODE_SETTINGS, "controller.quorum.voters": voters,
                     "broker.rack": f"rack-{node_id}", **self.overrides}
        return BrokerConfig.load(overrides, None, **{"broker.id": node_id,
                                                    "log.dirs": str(data),
                                                    "listeners": f"{HOST}:{port}"})

    @staticmethod
    def clock() -> float:
        """The nodes' wall clock: the run's clock, from a fixed instant, so that no
        timestamp depends on when the simulation ran."""
        return simulated_time()

    def on_broker(self, node: SimNode, broker: Broker) -> None:
        for listener in self.broker_listeners:
            listener(node, broker)

    async def start(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        for node in self.nodes:
            await node.start()

    async def as_client(self, name: str, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run `fn(*args)` with its client connections (and its child tasks') going
        through the network as `name`: a trio task's context is its own copy."""
        stream_opener.set(self.net.dialer(name))
        return await fn(*args)

    def heal(self) -> None:
        """Every cut healed and every paused node resumed."""
        self.net.heal()
        for node in self.nodes:
            if node.paused:
                node.gate.resume()

    def running(self) -> list[SimNode]:
        return [n for n in self.nodes if n.running]

    async def formed(self, timeout_s: float = 60.0) -> bool:
        """Until every running node is registered and unfenced."""
        with trio.move_on_after(timeout_s):
            for node in self.running():
                assert node.broker is not None
                await node.broker.lifecycle.unfenced.wait()
            return True
        return False
