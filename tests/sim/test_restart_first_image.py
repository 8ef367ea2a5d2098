"""A node killed and started again before its broker session expires: its metadata log
still names its old registration, unfenced and leading, so the replicas it holds take no
leadership until the broker has registered again and applied its metadata past that
registration (Kafka's initialCatchUpFuture), by when the controller has fenced the old
incarnation and moved or re-elected its leaderships. Taking them from its own log at the
restart's catch-up, it led at the old leader epochs with the HW of its checkpoint
(docs/RELIABILITY.md, "Found by the simulation", 3).

Judged twice: the replica manager is never told to lead before the registration is
applied, nor at a leader epoch the killed process led at; and sim.invariants, which looks
at every node that believes it leads, serving or not, finds nothing through the kill and
the restart.
"""

from __future__ import annotations

from typing import Any

import trio

from broker.broker import Broker
from client import Producer
from sim.invariants import OBSERVE_S, Invariants
from sim.scenario import Scene, run_scenario
from sim.world import SimNode

TOPIC = "restarts"
PARTITIONS = 3
RECORDS = 300


def watch_leaderships(scene: Scene, node_id: int) -> list[dict[str, Any]]:
    """Every leadership the replica manager of `node_id`'s next processes takes, with
    whether the broker had applied its registration by then."""
    taken: list[dict[str, Any]] = []

    def on_broker(node: SimNode, broker: Broker) -> None:
        if node.node_id != node_id:
            return
        replicas = broker.replicas
        apply_registration = replicas.apply_registration

        def applied(partition: Any, registration: Any, now_ms: int) -> None:
            apply_registration(partition, registration, now_ms)
            if partition.is_leader:
                epoch = broker.lifecycle.broker_epoch
                taken.append({"partition": (partition.topic, partition.index),
                              "leader_epoch": partition.leader_epoch,
                              "registered": epoch >= 0
                              and broker.metadata_cache.offset > epoch})
        replicas.apply_registration = applied  # type: ignore[method-assign]
    scene.world.broker_listeners.append(on_broker)
    return taken


def test_a_node_restarted_within_its_session_leads_nothing_before_its_registration():
    async def scenario(scene: Scene) -> list[str]:
        invariants = Invariants(scene.world)
        async with trio.open_nursery() as nursery:
            async def observe() -> None:
                while True:
                    invariants.observe()
                    await trio.sleep(OBSERVE_S)
            nursery.start_soon(observe)
            await scene.create_topic(TOPIC, PARTITIONS)
            # the node leading the most partitions (not the active controller, whose
            # restart would also move the quorum: the subject is the broker)
            controller = scene.active_controller()
            led: dict[int, list[tuple[str, int, int]]] = {}
            for node in scene.world.running():
                assert node.broker is not None
                for (topic, index), p in node.broker.partitions.items():
                    if p.is_leader:
                        led.setdefault(node.node_id, []).append((topic, index,
                                                                 p.leader_epoch))
            victim = max((n for n in led if n != controller), key=lambda n: len(led[n]))

            async def produce() -> None:
                async with Producer(bootstrap_servers=scene.bootstrap, acks="all") as p:
                    for i in range(RECORDS):
                        await p.send(TOPIC, f"r{i}".encode(), partition=i % PARTITIONS)
                    await p.flush()
            await scene.client(produce, name="producer")
            taken = watch_leaderships(scene, victim)
            invariants.observe()  # the HWs the produce reached, as the kill finds them
            scene.kill(victim)  # and back at once: its session is still valid
            await scene.restart(victim)
            await scene.wait_full_isr(TOPIC, PARTITIONS)
            for topic in (TOPIC, "__consumer_offsets"):
                count = scene.node(0).broker.metadata_cache.partition_count(topic)
                await scene.wait_for(lambda t=topic, c=count: all(
                    scene.leader(t, i) is not None for i in range(c)), 30,
                    f"every partition of {topic} led")
            nursery.cancel_scope.cancel()
        early = [t for t in taken if not t["registered"]]
        assert not early, f"node {victim} led before its registration was applied: {early}"
        old = {(t, i, e) for t, i, e in led[victim]}
        again = [t for t in taken if (*t["partition"], t["leader_epoch"]) in old]
        assert not again, f"node {victim} led again at its old leader epochs: {again}"
        return [f"{name}: {found}" for name, found in invariants.violations.items()]

    violations = run_scenario(3, 1, scenario)
    assert not violations, violations
