"""One simulated run, and many: `run_seed(seed, options)` and its `Outcome`.

A run, all of it in one trio run on a MockClock (simulated time jumps whenever every task
waits), every random choice drawn from the seed (sim.determinism):

1. N nodes form a cluster (sim.world), each with its own simulated disk and addresses on
   the simulated network (sim.network);
2. the workload: a topic of PARTITIONS partitions (RF 3, min.insync.replicas=2), our
   idempotent acks=all producers and our consumers in a group committing after every poll,
   and the observer of committed offsets: harness.chaos.workload's clients, recording the
   chaos runs' history (harness.chaos.history) in simulated time;
3. the faults of the seed's schedule (sim.faults) until the healing time, while
   sim.invariants looks inside the nodes every 50 ms of simulated time;
4. healing: the network whole, every node running; the cluster must be whole (every node
   registered again, every partition led, every ISR full) within SETTLE_S; the producers
   stop (every send answered), and the group must commit up to every partition's high
   watermark within CATCH_UP_S; the consumers stop; every partition is read whole (the
   history's final reads);
5. the verdict: the chaos checkers over the history, the invariants at the end,
   liveness, every acknowledged offset commit found in the group's __consumer_offsets
   log (lost-commit), and no node halted on an error of its own (node-halted); plus a
   hash of the whole trace (history and the nodes' events), which two runs of one seed
   must share.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import trio

from broker.coordinator.offsets import partition_of
from broker.coordinator.group_runtime import OFFSETS_TOPIC
from client import AdminClient, Consumer, NewTopic, TopicPartition
from client.admin import AlterConfigOp, ConfigResource
from harness.chaos import checker
from harness.chaos.history import OK, History
from harness.chaos.share_workload import (Progress, ShareMember, check_share, share_group_of,
                                          unfinished)
from harness.chaos.txn_checker import check_final
from harness.chaos.txn_workload import TxnCopier, final_txn_read, sink_of, txn_group_of
from harness.chaos.workload import Counters, Observer, OurGroupConsumer, OurProducer, Settings
from protocol.messages import offsets_topic
from protocol.messages.offsets_topic import OffsetKey
from protocol.records import decode_batches
from sim.determinism import clock_shortcut, quiet_io, seeded, simulated_clock
from sim.faults import KINDS, Nemesis, schedule
from sim.invariants import OBSERVE_S, Invariants, batches_below
from sim.world import World

TOPIC = "sim"
PARTITIONS = 3
GROUP = "sim-group"
SETTLE_S = 90.0  # after healing: the cluster whole within this
CATCH_UP_S = 60.0  # then, the producers stopped: the group committed up to every HW
FINAL_READ_S = 60.0
SHARE_DELIVERY_LIMIT = 5  # group.share.delivery.count.limit, the nodes' default


@dataclass
class Options:
    nodes: int = 3
    duration_s: float = 60.0  # of simulated time with faults, before healing
    quiet_s: float = 5.0  # of the workload alone before the faults may start (plus 0-3 s)
    faults: tuple[str, ...] = KINDS
    producers: int = 2
    consumers: int = 2
    rate: int = 20  # sends a second, per producer
    group_protocol: str = "classic"  # the consumers': or "consumer" (KIP-848)
    copiers: int = 0  # consume-transform-produce copiers, exactly once (transactions)
    share_members: int = 0  # members of a share group reading the topic too (KIP-932)


@dataclass
class Outcome:
    seed: int
    options: Options
    simulated_s: float = 0.0
    wall_s: float = 0.0
    faults: dict[str, int] = field(default_factory=dict)
    acked: int = 0
    sent: int = 0
    polled: int = 0
    violations: dict[str, list[Any]] = field(default_factory=dict)
    trace_hash: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def run_seed(seed: int, options: Options | None = None) -> Outcome:
    options = options or Options()
    outcome = Outcome(seed, options)
    started = time.perf_counter()
    with seeded(seed) as rng:
        clock = simulated_clock()
        trio.run(_run, seed, options, outcome, rng, clock=clock)
    outcome.wall_s = time.perf_counter() - started
    return outcome


async def _run(seed: int, options: Options, outcome: Outcome, rng: Any) -> None:
    quiet_io()
    with clock_shortcut():
        await _workload(seed, options, outcome, rng)


async def _workload(seed: int, options: Options, outcome: Outcome, rng: Any) -> None:
    world = World(options.nodes, seed, overrides=node_overrides(seed, options))
    history = History(None, clock=trio.current_time)
    invariants = Invariants(world)
    events: list[dict[str, Any]] = []

    def capture(node: Any, broker: Any) -> None:
        emit = broker.events.emit

        def emitted(type: str, **fields: Any) -> None:
            events.append({"node": node.node_id, "type": type, "ts": broker.now_ms(),
                           **{k: v for k, v in fields.items() if k != "duration_ms"}})
            emit(type, **fields)
        broker.events.emit = emitted
    world.broker_listeners.append(capture)

    async with trio.open_nursery() as nursery:
        await world.start(nursery)
        nursery.start_soon(_observe, invariants)
        if not await world.formed(120):
            outcome.violations["not-formed"] = ["the nodes did not register within 120 s"]
            nursery.cancel_scope.cancel()
            return
        settings = Settings(world.bootstrap, TOPIC, PARTITIONS, GROUP, options.rate,
                            session_timeout_ms=10000, heartbeat_interval_ms=1000,
                            group_protocol=options.group_protocol)
        await world.as_client("admin", _create_topic, world, TOPIC)
        if options.copiers:
            await world.as_client("admin", _create_topic, world, sink_of(TOPIC))
        if options.share_members:
            await world.as_client("admin", _share_from_earliest, world, share_group_of(GROUP))
        heal_at = trio.current_time() + options.duration_s
        faults = schedule(fault_rng(seed), options.nodes, options.faults,
                          trio.current_time() + options.quiet_s, heal_at)
        counters = [Counters() for _ in range(options.producers + options.consumers
                                              + options.copiers + options.share_members)]
        producers_stop, consumers_stop = trio.Event(), trio.Event()
        nemesis = Nemesis(world, history)
        behind: dict[int, tuple[int, int]] = {}
        share_progress = Progress()
        async with trio.open_nursery() as clients:
            async with trio.open_nursery() as producing:
                for i in range(options.producers):
                    producer = OurProducer(f"producer-{i}", settings, history, counters[i])
                    producing.start_soon(world.as_client, producer.name, producer.run,
                                         producers_stop)
                for i in range(options.consumers):
                    consumer = OurGroupConsumer(f"consumer-{i}", settings, history,
                                                counters[options.producers + i])
                    clients.start_soon(world.as_client, consumer.name, consumer.run,
                                       consumers_stop)
                for i in range(options.copiers):
                    copier = TxnCopier(f"copier-{i}", settings, history,
                                       counters[options.producers + options.consumers + i],
                                       random.Random(f"copier-{seed}-{i}"))
                    clients.start_soon(world.as_client, copier.name, copier.run,
                                       consumers_stop)
                for i in range(options.share_members):
                    member = ShareMember(f"share-{i}", settings, history, counters[
                        options.producers + options.consumers + options.copiers + i],
                        share_progress)
                    clients.start_soon(world.as_client, member.name, member.run,
                                       consumers_stop)
                observer = Observer(settings, history, counters, lambda: None,
                                    isr_blocks=False)
                clients.start_soon(world.as_client, "observer", observer.run, consumers_stop)
                await nemesis.run(faults)
                await trio.sleep_until(heal_at)
                world.heal()
                for node in world.nodes:
                    if not node.running:
                        await node.start()
                whole = await _settle(world, trio.current_time() + SETTLE_S)
                producers_stop.set()  # and every send gets its answer
            if whole:
                behind = await world.as_client("checker", _caught_up, world,
                                               trio.current_time() + CATCH_UP_S)
                if options.copiers and not behind:
                    behind = await world.as_client("checker", _caught_up, world,
                                                   trio.current_time() + CATCH_UP_S,
                                                   txn_group_of(GROUP))
                if options.share_members:
                    await world.as_client("checker", _share_caught_up, world, history,
                                          events, share_progress,
                                          trio.current_time() + CATCH_UP_S)
            consumers_stop.set()
        if not whole:
            outcome.violations["not-whole"] = [f"{SETTLE_S:g} s after healing: "
                                               f"{_unwhole(world)}"]
        if behind:
            outcome.violations["group-behind"] = [
                f"{CATCH_UP_S:g} s after the producers stopped, partition {p}: committed "
                f"{c}, high watermark {hw}" for p, (c, hw) in sorted(behind.items())]
        await world.as_client("final", _final_reads, world, history)
        if options.copiers:
            await world.as_client("final", final_txn_read, world.bootstrap, TOPIC, PARTITIONS,
                                  txn_group_of(GROUP), history, FINAL_READ_S)
        invariants.observe()
        invariants.at_end()
        if world.halted:
            outcome.violations["node-halted"] = world.halted[:5]
        lost = _lost_commits(world, history.ops)
        if lost:
            outcome.violations["lost-commit"] = lost
        outcome.simulated_s = trio.current_time()
        nursery.cancel_scope.cancel()

    outcome.faults = nemesis.counts
    outcome.sent = sum(c.sent for c in counters)
    outcome.acked = sum(c.acked for c in counters)
    outcome.polled = sum(c.polled for c in counters)
    for name, result in checker.check(history.ops, PARTITIONS).items():
        if name in checker.FAILURES and result.count:
            outcome.violations[name] = result.examples
    if options.copiers:
        for name, found in check_final(history.ops).items():
            outcome.violations[name] = found
    if options.share_members:
        for name, found in check_share(history.ops, _archived(events),
                                       SHARE_DELIVERY_LIMIT).items():
            outcome.violations[name] = found
    for name, found in invariants.violations.items():
        outcome.violations.setdefault(name, []).extend(found)
    outcome.history = history.ops
    outcome.events = events
    digest = hashlib.sha256()
    for item in (*history.ops, *events):
        digest.update(json.dumps(item, sort_keys=True, default=str).encode())
    outcome.trace_hash = digest.hexdigest()


async def _share_from_earliest(world: World, group: str) -> None:
    """The share group reads the topic from its start (share.auto.offset.reset), so that
    every acknowledged send is the group's to accept."""
    await _until_done(world, lambda admin: admin.incremental_alter_configs({
        ConfigResource("group", group): [AlterConfigOp("share.auto.offset.reset",
                                                       "earliest")]}))


def _archived(events: list[dict[str, Any]]) -> set[tuple[int, int]]:
    """The records the delivery limit archived, as the leaders' events said."""
    return {(e["partition"], o) for e in events if e["type"] == "share_records_archived"
            for o in range(e["first_offset"], e["last_offset"] + 1)}


async def _share_caught_up(world: World, history: History, events: list[dict[str, Any]],
                           progress: Progress, deadline: float) -> None:
    """Give the share members until `deadline` to be done with every acknowledged send,
    then record the group's start offsets (a `share_offsets` op, which check_share reads).
    The start offsets are asked after each accept and each second of simulated time (a
    record archived, or an accept written whose answer was lost, ends no accept)."""
    starts: dict[int, int] = {}
    async with AdminClient(bootstrap_servers=world.bootstrap) as admin:
        while trio.current_time() < deadline:
            try:
                found = await admin.list_share_group_offsets(share_group_of(GROUP),
                                                              timeout_ms=5000)
                starts = {tp.partition: o for tp, o in found.items() if o is not None}
            except Exception:  # noqa: BLE001  a coordinator moving: ask again
                pass
            if not unfinished(history.ops, _archived(events), starts):
                break
            with trio.move_on_after(1.0):
                await progress.wait()
    history.record("checker", OK, "share_offsets",
                   {"offsets": {str(p): o for p, o in sorted(starts.items())}})


def node_overrides(seed: int, options: Options) -> dict[str, str]:
    """The nodes' settings the seed's faults need. Under a power loss, an acknowledged
    write survives only on a disk that fsynced it: Kafka's default (no fsync but at a
    segment roll) leans on replicas failing apart, and loses acks=all writes when every
    replica loses power together, as documented. A seed whose schedule cuts the power of
    several nodes at once asks for the setting under which Kafka promises more, an fsync
    of every append (log.flush.interval.messages=1) on each replica before it counts
    toward the HW. The other seeds keep Kafka's default, so that a kill still loses a
    node's unsynced tail and its recovery from the other replicas is exercised.

    Which kinds a seed brings is known before the run: the schedule's stream is its own
    (fault_rng), and the kinds it draws do not depend on when the faults start."""
    planned = schedule(fault_rng(seed), options.nodes, options.faults, options.quiet_s,
                       options.duration_s)
    if any(f.kind == "power-loss" for f in planned):
        return {"log.flush.interval.messages": "1"}
    return {}


def fault_rng(seed: int) -> random.Random:
    """The schedule's own stream: which faults a seed brings depends on nothing else."""
    return random.Random(f"faults-{seed}")


def _lost_commits(world: World, ops: list[dict[str, Any]]) -> list[Any]:
    """Acknowledged offset commits missing from the group's __consumer_offsets partition
    below its high watermark, as its leader holds it after healing: an OffsetCommit
    answered must be as durable as an acks=all write. (The chaos checkers cannot see such
    a loss once the consumers commit past it again; the simulation can read the log.)"""
    index = partition_of(GROUP, int(world.nodes[0].config["offsets.topic.num.partitions"]))
    leader = next((p for n in world.running() if n.broker is not None
                   if (p := n.broker.partitions.get((OFFSETS_TOPIC, index))) is not None
                   and p.is_leader), None)
    if leader is None:
        return [f"{OFFSETS_TOPIC}-{index} has no leader to read"]
    held: set[tuple[int, int]] = set()
    batches = batches_below(leader, leader.log.log_start_offset, leader.high_watermark)
    for _header, records in decode_batches(b"".join(data for _base, data in batches)):
        for r in records:
            if r.key is None or r.value is None:
                continue
            key = offsets_topic.decode_key(r.key)
            if isinstance(key, OffsetKey) and key.group == GROUP and key.topic == TOPIC:
                held.add((key.partition, offsets_topic.decode_value(key, r.value).offset))
    lost = []
    for op in ops:
        if op["f"] == "commit" and op["type"] == OK:
            for p, o in op["value"]["offsets"].items():
                if (int(p), o) not in held:
                    lost.append({"process": op["process"], "partition": int(p), "offset": o,
                                 "time": op["time"]})
    return lost[:5]


async def _observe(invariants: Invariants) -> None:
    while True:
        await trio.sleep(OBSERVE_S)
        invariants.observe()


async def _create_topic(world: World, name: str) -> None:
    await _until_done(world, lambda admin: admin.create_topics([NewTopic(name, PARTITIONS, 3)]))


async def _until_done(world: World, operation: Callable[[AdminClient], Awaitable[Any]]) -> None:
    """An admin operation, asked again each second until it is done."""
    while True:
        try:
            async with AdminClient(bootstrap_servers=world.bootstrap) as admin:
                await operation(admin)
            return
        except Exception:  # noqa: BLE001  a controller still being elected: ask again
            await trio.sleep(1)


def _unwhole(world: World) -> list[str]:
    """The partitions that keep the cluster from being whole, as each leader sees them."""
    out = [f"{n.name} not registered again yet" for n in world.running()
           if n.broker is None or not n.broker.lifecycle.unfenced.is_set()]
    live = {n.node_id for n in world.running()}
    for node in world.running():
        assert node.broker is not None
        for (topic, index), p in node.broker.partitions.items():
            if p.is_leader and (set(p.state.replicas) & live) - set(p.isr):
                out.append(f"{topic}-{index} isr {list(p.isr)}")
    led = {key for n in world.running() if n.broker is not None
           for key, p in n.broker.partitions.items() if p.is_leader}
    brokers = [n.broker for n in world.running() if n.broker is not None]
    if brokers:
        image = brokers[0].metadata_cache
        for topic in (TOPIC, OFFSETS_TOPIC):
            count = image.partition_count(topic) or 0
            out += [f"{topic}-{i} unled" for i in range(count) if (topic, i) not in led]
    return out


async def _settle(world: World, deadline: float) -> bool:
    while trio.current_time() < deadline:
        if not _unwhole(world):
            return True
        await trio.sleep(0.5)
    return not _unwhole(world)


async def _caught_up(world: World, deadline: float,
                     group: str = GROUP) -> dict[int, tuple[int, int]]:
    """Until the group has committed up to every partition's high watermark: what is
    still behind at the deadline (partition -> (committed, HW)), empty when none."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    behind: dict[int, tuple[int, int]] = {p: (-1, -1) for p in range(PARTITIONS)}
    async with Consumer(bootstrap_servers=world.bootstrap, group_id=group,
                        enable_auto_commit=False, request_timeout_ms=5000) as reader:
        while trio.current_time() < deadline:
            with trio.move_on_after(5):
                try:
                    ends = await reader.end_offsets(tps)
                    for tp in tps:
                        committed = await reader.committed(tp)
                        if committed is not None and committed >= ends[tp]:
                            behind.pop(tp.partition, None)
                        else:
                            behind[tp.partition] = (-1 if committed is None else committed,
                                                    ends[tp])
                except Exception:  # noqa: BLE001  no coordinator now: ask again
                    pass
            if not behind:
                return {}
            await trio.sleep(0.5)
    return behind


async def _final_reads(world: World, history: History) -> None:
    """Every partition read whole, as the chaos runs' final reads."""
    with trio.move_on_after(FINAL_READ_S):
        async with Consumer(bootstrap_servers=world.bootstrap, enable_auto_commit=False,
                            request_timeout_ms=10000) as consumer:
            for p in range(PARTITIONS):
                tp = TopicPartition(TOPIC, p)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                end = (await consumer.end_offsets([tp]))[tp]
                records: list[list[Any]] = []
                while (records[-1][0] + 1 if records else 0) < end:
                    batch = await consumer.getmany(timeout_ms=1000)
                    for r in batch.get(tp, []):
                        records.append([r.offset, (r.value or b"").decode()])
                history.record("final", OK, "read", {"partition": p, "records": records})

