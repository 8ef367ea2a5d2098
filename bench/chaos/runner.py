"""One chaos run, start to finish, and what it found:

  1. a fresh three-node cluster (a Target) and an RF 3, min.insync.replicas=2 topic;
  2. the workload (workload.py) for `duration_s` while the nemesis (nemesis.py) carries out
     the seed's schedule, everything recorded in DIR/history.jsonl;
  3. heal: the network whole, every node running, every partition's ISR full again;
  4. the producers stop (their last sends answered), the group consumers are given
     `settle_s` to commit up to every partition's high watermark;
  5. the final read: every partition from its start to its high watermark;
  6. the cluster stops and each replica's log files are compared offset by offset (the
     topic's and the group's __consumer_offsets partition);
  7. the checkers (checker.py) over the history; DIR/summary.json and a table.

A run whose cluster cannot be healed or read still reaches the checkers with what it has:
the failure to settle is itself a result ("stalled"), never a reason to skip the checks.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trio

from bench.chaos import replicas
from harness.chaos import checker
from harness.chaos.history import OK, History
from bench.chaos.nemesis import PARTITION_KINDS, Nemesis, schedule
from bench.chaos.reassign import Mover
from bench.chaos.targets import ProcessTarget, Target
from harness.chaos.txn_checker import TXN_FAILURES, check_final
from harness.chaos.txn_workload import TxnCopier, final_txn_read, sink_of, txn_group_of
from harness.chaos.workload import (
    Counters, Observer, OurGroupConsumer, OurProducer, RdkafkaConsumer, RdkafkaProducer,
    Settings, run_in_thread,
)
from broker.coordinator.offsets import partition_of
from client import AdminClient, Consumer, NewTopic, TopicPartition
from harness.cluster import metadata
from harness.raw import call
from harness.wait import WaitTimeout, wait_until
from protocol.messages import DESCRIBE_QUORUM

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 50
# records per transaction of the copier: enough to keep up with both producers' rate
COPIER_MAX_RECORDS = 2000
HOST = "127.0.0.1"

# Local processes: faults show within seconds (a broker fenced after 2 s, a lagging
# follower out of the ISR after 5 s), so a 60 s run sees several of them.
PROCESS_OVERRIDES = {
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "2000",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "replica.lag.time.max.ms": "5000",
    "group.initial.rebalance.delay.ms": "0",
}


@dataclass
class RunConfig:
    seed: int
    duration_s: float = 60.0
    target: str = "processes"
    partitions: int = 3
    rate: int = 300  # sends per second, per producer
    kinds: tuple[str, ...] = ("kill", "pause", "restart")
    settle_s: float = 90.0
    out: Path = Path("chaos-out")
    # a pause longer than the broker's and the members' session timeouts
    pause_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.pause_s:
            self.pause_s = 12.0 if self.target == "docker" else 6.0


@dataclass
class RunResult:
    seed: int
    target: str
    faults: int
    acked: int
    uncertain: int
    polled: int
    stalled: list[str] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def failures(self) -> dict[str, int]:
        out = {name: r["count"] for name, r in self.results.items()
               if (name in checker.FAILURES or name in TXN_FAILURES) and r["count"]}
        if self.stalled:
            out["stalled"] = len(self.stalled)
        return out

    @property
    def ok(self) -> bool:
        return not self.failures

    def count(self, name: str) -> int:
        return int(self.results.get(name, {}).get("count", 0))


def make_target(cfg: RunConfig) -> Target:
    if cfg.target == "processes":
        return ProcessTarget(cfg.out / "cluster", dict(PROCESS_OVERRIDES))
    if cfg.target == "docker":
        from bench.chaos.docker_target import DockerTarget
        return DockerTarget()
    raise ValueError(f"unknown target {cfg.target!r} (processes or docker)")


class Run:
    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.out = cfg.out
        shutil.rmtree(self.out, ignore_errors=True)  # a run starts from nothing
        self.out.mkdir(parents=True)
        self.target = make_target(cfg)
        self.topic = f"chaos-{cfg.seed}"
        self.group = f"chaos-group-{cfg.seed}"
        self.history = History(self.out / "history.jsonl")
        self.stalled: list[str] = []
        self.log_lines: list[str] = []

    def log(self, text: str) -> None:
        line = f"[chaos seed {self.cfg.seed} {self.history.now():7.1f}s] {text}"
        self.log_lines.append(line)
        print(line, flush=True)

    # -- one node's view ----------------------------------------------------------------

    def metadata(self, node: int, topics: list[str] | None) -> Any:
        return metadata(self.target.client_port(node), topics, timeout_s=2.0)

    def any_metadata(self, topics: list[str] | None) -> Any:
        for node in self.target.node_ids:
            try:
                return self.metadata(node, topics)
            except OSError:
                continue
        return None

    def quorum_leader(self) -> int | None:
        """The metadata quorum's leader, as a broker answers DescribeQuorum (it asks the
        active controller)."""
        for node in self.target.node_ids:
            try:
                body = call(self.target.client_port(node), DESCRIBE_QUORUM, 2, {
                    "topics": [{"topic_name": "__cluster_metadata",
                                "partitions": [{"partition_index": 0}]}]}, timeout_s=2.0)
            except OSError:
                continue
            if body.error_code == 0 and body.topics and body.topics[0].partitions:
                leader = body.topics[0].partitions[0].leader_id
                return leader if leader >= 0 else None
        return None

    def partition_states(self, topic: str) -> dict[int, dict[str, Any]] | None:
        md = self.any_metadata([topic])
        if md is None:
            return None
        for t in md.topics:
            if t.name == topic and t.error_code == 0:
                return {p.partition_index: {"leader": p.leader_id, "isr": list(p.isr_nodes)}
                        for p in t.partitions}
        return None

    def aimed(self, aim: str) -> list[int]:
        nodes = [n for n in self.target.node_ids if self.target.is_running(n)]
        if aim == "random":
            return nodes
        if aim == "controller":
            # not Metadata's controller_id: under KRaft that names a random broker
            leader = self.quorum_leader()
            return [leader] if leader is not None else []
        topic, only = self.topic, None
        if aim == "coordinator":
            topic, only = OFFSETS_TOPIC, partition_of(self.group, OFFSETS_PARTITIONS)
        states = self.partition_states(topic) or {}
        return sorted({s["leader"] for p, s in states.items()
                       if s["leader"] >= 0 and (only is None or p == only)})

    def serving(self, node: int) -> bool:
        try:
            md = self.metadata(node, [])
        except OSError:
            return False
        return any(b.node_id == node for b in md.brokers)

    def wait_serving(self, node: int, timeout_s: float) -> None:
        try:
            wait_until(lambda: self.serving(node), timeout_s, 0.1)
        except WaitTimeout:
            self.log(f"node {node} not serving {timeout_s:g} s after its fault ended")

    def healthy(self, topics: list[str]) -> bool:
        return self.unhealthy(topics) is None

    def unhealthy(self, topics: list[str]) -> str | None:
        """What keeps the cluster from being whole, or None when every node serves and each
        partition of `topics` has a leader and every node in its ISR, in every node's own
        Metadata."""
        full = set(self.target.node_ids)
        for node in self.target.node_ids:
            try:
                md = self.metadata(node, topics)
            except OSError as e:
                return f"node {node} does not answer Metadata: {e}"
            if {b.node_id for b in md.brokers} != full:
                return f"node {node} lists brokers {sorted(b.node_id for b in md.brokers)}"
            for t in md.topics:
                if t.error_code != 0 or not t.partitions:
                    return f"node {node} answers {t.name} with error {t.error_code}"
                short = [f"{t.name}-{p.partition_index} leader {p.leader_id} isr "
                         f"{sorted(p.isr_nodes)}" for p in t.partitions
                         if p.leader_id < 0 or set(p.isr_nodes) != full]
                if short:
                    more = f" and {len(short) - 3} more" if len(short) > 3 else ""
                    return f"node {node} says " + "; ".join(short[:3]) + more
        return None

    def wait_healthy(self, topics: list[str], timeout_s: float) -> bool:
        try:
            return wait_until(lambda: self.healthy(topics), timeout_s, 0.2)
        except WaitTimeout:
            return False

    # -- the run ------------------------------------------------------------------------

    def execute(self) -> RunResult:
        started = time.monotonic()
        self.log(f"starting a {self.cfg.target} cluster")
        self.target.start()
        try:
            result = trio.run(self._main)
        finally:
            self.history.close()
            try:
                self.target.destroy()
            except Exception as e:  # noqa: BLE001 - the run's findings still count
                self.log(f"tearing the cluster down failed: {e}")
        result.elapsed_s = round(time.monotonic() - started, 1)
        (self.out / "summary.json").write_text(json.dumps(asdict(result), indent=1))
        (self.out / "run.log").write_text("\n".join(self.log_lines) + "\n")
        return result

    async def _main(self) -> RunResult:
        cfg = self.cfg
        s = Settings(bootstrap=self.target.bootstrap, topic=self.topic,
                     partitions=cfg.partitions, group=self.group, rate=cfg.rate,
                     session_timeout_ms=10000 if cfg.target == "docker" else 6000)
        async with AdminClient(bootstrap_servers=s.bootstrap) as admin:
            await admin.create_topics([NewTopic(name, cfg.partitions, 3,
                                                {"min.insync.replicas": "2"})
                                       for name in (self.topic, sink_of(self.topic))])
        if not await trio.to_thread.run_sync(self.wait_healthy,
                                             [self.topic, sink_of(self.topic)], 60.0):
            raise RuntimeError(f"{self.topic}'s ISRs never filled: {self.target!r}")

        kinds = [k for k in cfg.kinds if self.target.can_partition or k not in PARTITION_KINDS]
        faults = schedule(cfg.seed, cfg.duration_s, kinds, cfg.pause_s)
        self.log(f"{len(faults)} faults scheduled: " +
                 ", ".join(f"{f.kind}@{f.at_s:.0f}s" for f in faults))
        producer_counters = [Counters(), Counters()]
        consumer_counters = [Counters(), Counters()]
        copier_counters = Counters()
        producers_stop, consumers_stop, observer_stop = trio.Event(), trio.Event(), trio.Event()
        nemesis = Nemesis(self.target, self.history, self.aimed, self.wait_serving,
                          Mover(s.bootstrap, self.topic, cfg.partitions))
        h = self.history

        async with trio.open_nursery() as nursery:
            producers_done = [trio.Event(), trio.Event()]
            nursery.start_soon(_then_set, producers_done[0],
                               OurProducer("p0", s, h, producer_counters[0]).run, producers_stop)
            nursery.start_soon(_then_set, producers_done[1], run_in_thread,
                               RdkafkaProducer("p1", s, h, producer_counters[1]), producers_stop)
            nursery.start_soon(OurGroupConsumer("c-ours", s, h, consumer_counters[0]).run,
                               consumers_stop)
            nursery.start_soon(run_in_thread,
                               RdkafkaConsumer("c-rdkafka", s, h, consumer_counters[1]),
                               consumers_stop)
            # consume-transform-produce in transactions, judged by Jepsen's checkers
            nursery.start_soon(TxnCopier("copier", s, h, copier_counters,
                                         random.Random(f"copier-{cfg.seed}"),
                                         max_records=COPIER_MAX_RECORDS).run,
                               consumers_stop)
            nursery.start_soon(Observer(s, h, producer_counters,
                                        lambda: self.partition_states(self.topic)).run,
                               observer_stop)

            workload_started = trio.current_time()
            await nemesis.run(faults, workload_started)
            await trio.sleep_until(workload_started + cfg.duration_s)
            self.log(f"{nemesis.injected} faults injected; healing")
            await trio.to_thread.run_sync(nemesis.heal_all)
            # a partition move that never completed is a stall of the cluster's own
            self.stalled += [f"a reassignment did not complete: {m}"
                             for m in nemesis.moves_not_done]
            offsets_partition = partition_of(self.group, OFFSETS_PARTITIONS)
            if not await trio.to_thread.run_sync(self.wait_healthy, [self.topic, OFFSETS_TOPIC],
                                                 cfg.settle_s):
                self.stalled.append(f"the cluster was not whole {cfg.settle_s:g} s after "
                                    f"healing")
                self.log("  not whole: " + str(self.unhealthy([self.topic, OFFSETS_TOPIC])))
            self.log("stopping the producers")
            producers_stop.set()
            await self._wait_producers_done(producers_done)
            self.log("waiting for the group to commit up to every high watermark")
            await self._wait_group_caught_up(s, cfg.settle_s)
            self.log("waiting for the copier to commit up to every high watermark")
            await self._wait_group_caught_up(s, cfg.settle_s, txn_group_of(s.group))
            consumers_stop.set()
            observer_stop.set()

        self.log("final read")
        await self._final_read(s)
        await final_txn_read(s.bootstrap, s.topic, s.partitions, txn_group_of(s.group),
                             self.history, 120.0)
        await trio.to_thread.run_sync(self.target.stop)
        self.log("comparing replicas")
        copied = await trio.to_thread.run_sync(self.target.copy_data, self.out / "data")
        divergence = {}
        for topic, count, only in ((self.topic, cfg.partitions, None),
                                   (OFFSETS_TOPIC, OFFSETS_PARTITIONS, offsets_partition)):
            found = replicas.compare_topic(copied, topic, count)
            for p, problems in found.items():
                if problems and (only is None or p == only):
                    divergence[f"{topic}-{p}"] = problems

        results = {name: asdict(r) for name, r in
                   checker.check(self.history.ops, cfg.partitions).items()}
        txn_found = check_final(self.history.ops)
        if "harness-error" in txn_found:
            self.stalled += txn_found["harness-error"]
        for name in TXN_FAILURES:
            results[name] = {"name": name, "count": len(txn_found.get(name, [])),
                             "examples": txn_found.get(name, []),
                             "description": "the transactional copier (harness.chaos."
                                            "txn_checker)"}
        results["replica-divergence"] = {
            "name": "replica-divergence", "count": sum(len(v) for v in divergence.values()),
            "examples": [f"{k}: {p}" for k, v in divergence.items() for p in v][:10],
            "description": "replicas that differ offset by offset after healing"}
        return RunResult(
            seed=cfg.seed, target=cfg.target, faults=nemesis.injected,
            acked=sum(c.acked for c in producer_counters),
            uncertain=sum(c.uncertain for c in producer_counters),
            polled=sum(c.polled for c in consumer_counters),
            stalled=self.stalled, results=results)

    async def _wait_producers_done(self, done: list[trio.Event]) -> None:
        """Until every producer has stopped, its last sends answered (they flush)."""
        with trio.move_on_after(150):
            for event in done:
                await event.wait()
            return
        self.stalled.append("a producer had not stopped 150 s after it was asked to")

    async def _wait_group_caught_up(self, s: Settings, timeout_s: float,
                                    group: str | None = None) -> None:
        tps = [TopicPartition(s.topic, p) for p in range(s.partitions)]
        async with Consumer(bootstrap_servers=s.bootstrap, group_id=group or s.group,
                            enable_auto_commit=False, request_timeout_ms=5000) as c:
            with trio.move_on_after(timeout_s):
                while True:
                    try:
                        ends = await c.end_offsets(tps)
                        committed = {tp: await c.committed(tp) for tp in tps}
                        if all((committed[tp] or 0) >= ends[tp] for tp in tps):
                            return
                    except Exception:  # noqa: BLE001 - a coordinator moving: ask again
                        pass
                    await trio.sleep(0.5)
        lag = {tp.partition: (committed.get(tp), ends.get(tp)) for tp in tps}
        self.stalled.append(f"the group had not committed up to the high watermarks "
                            f"{timeout_s:g} s after healing: partition -> (committed, "
                            f"high watermark) {lag}")
        self.log(self.stalled[-1])

    async def _final_read(self, s: Settings) -> None:
        async with Consumer(bootstrap_servers=s.bootstrap, enable_auto_commit=False,
                            auto_offset_reset="earliest") as c:
            for p in range(s.partitions):
                tp = TopicPartition(s.topic, p)
                c.assign([tp])
                await c.seek_to_beginning(tp)
                end = (await c.end_offsets([tp]))[tp]
                rows: list[list[Any]] = []
                with trio.move_on_after(60):
                    while not rows or rows[-1][0] < end - 1:
                        if end == 0:
                            break
                        batch = await c.getmany(timeout_ms=1000)
                        rows += [[r.offset, (r.value or b"").decode()] for r in batch.get(tp, [])]
                self.history.record("final", OK, "read",
                                    {"partition": p, "end": end, "records": rows})
                if rows and rows[-1][0] < end - 1 or (not rows and end):
                    self.stalled.append(f"the final read of partition {p} stopped at "
                                        f"{rows[-1][0] + 1 if rows else 0} of {end}")


async def _then_set(done: trio.Event, fn: Any, *args: Any) -> None:
    try:
        await fn(*args)
    finally:
        done.set()
