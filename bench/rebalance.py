"""`minibroker bench rebalance`: the rolling-bounce benchmark of the group protocols: eager,
cooperative (KIP-429) and KIP-848's consumer protocol.

Owns the controller, the CLI, the plain-Python pause arithmetic and the charts:

    minibroker bench rebalance --protocol eager|cooperative|consumer [--static]
        [--instances 10] [--partitions 100]
        [--client minibroker|librdkafka] [--rate 2000] [--work-ms-per-record 1] [--out DIR]
        [--bootstrap H:P [--broker-data-dir DIR]] [--no-spark]
    minibroker bench rebalance --compare EAGER_OUT COOP_OUT [CONSUMER_OUT] [--chart FILE]

A run starts a broker (its own temp data dir, group.initial.rebalance.delay.ms=0) unless
--bootstrap is given, creates a topic of --partitions partitions, starts --instances consumer
processes (bench/rebalance_worker.py) in one group, waits until the group is stable
with every partition owned exactly once, starts a producer at --rate records/s spread
round-robin over the partitions, and after --warmup-s restarts the instances one at a time:
SIGTERM (graceful close: revoke, commit, LeaveGroup), start again, wait until the group is
stable again, next. After --cooldown-s everything stops. "Stable" is checked from both sides:
DescribeGroups says Stable with one member per running instance, and the instances' own
assigned / revoked events (OUT/consumers/<instance>.jsonl) give the same ownership as the
broker, covering every partition once.

OUT holds consumers/*.jsonl, events/ (the broker's event log), logs/, bench.json (the
timeline: window, bounces) and throughput.png (records consumed per second, all instances,
a marker at each bounce). Printed: total partition pause, total member pause, rebalances
and bounce duration, counted over the bounce window (first bounce to the last stable), so
the group's formation and the final shutdown are left out.

Pause definitions (docs/ANALYSIS.md, as spark_jobs/jobs/rebalances.py computes them over the same
events): a partition pauses from the moment its last owner gives it up (its revoked or lost
event, or the instance's stopped event) until an instance's assigned event contains it. A
member pauses from a revoked / lost event that leaves it owning nothing until its next
assigned event that gives it partitions (under eager that is every member on every
rebalance; under cooperative a member keeps its other partitions and does not pause).
The Spark functions are used too when they are importable (and --no-spark is not given);
both results are printed and any disagreement is named.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from bench.common import BenchError, wait_for
from harness.broker import BrokerProcess, BrokerStartError
from spark_jobs.consumer_events import CONSUMER_EVENT_ORDER as _RANK
from broker.events import read_events, read_jsonl



def _now_ms() -> int:
    return int(time.time() * 1000)


# -- events ---------------------------------------------------------------------------------

def load_consumer_events(out_dir: str | os.PathLike) -> list[dict]:
    """Every instance's events, in protocol order (see _RANK) and, within an instance, in
    the order written."""
    events = []
    for path in sorted((Path(out_dir) / "consumers").glob("*.jsonl")):
        for i, e in enumerate(read_jsonl(path)):
            events.append((e["ts"], _RANK.get(e["type"], 9), path.stem, i, e))
    events.sort(key=lambda x: x[:4])
    return [e for *_, e in events]


class Ownership:
    """Who owns which partition, replayed from consumer events. `apply` returns the
    partitions the event's instance gave up and the ones it was given."""

    def __init__(self) -> None:
        self.owned: dict[str, set[str]] = {}
        self.protocol: dict[str, str] = {}
        self.running: set[str] = set()

    def apply(self, e: dict) -> tuple[set[str], set[str]]:
        kind, inst = e["type"], e["instance"]
        owned = self.owned.setdefault(inst, set())
        if kind == "started":
            self.protocol[inst] = e.get("protocol", "")
            self.running.add(inst)
            # an earlier run of the instance that ended without `stopped` (killed) let go now
            released, self.owned[inst] = set(owned), set()
            return released, set()
        if kind == "assigned":
            parts = set(e["partitions"])
            if self.protocol.get(inst) == "eager":
                # eager hands out the whole assignment each time
                released, self.owned[inst] = owned - parts, parts
                return released, parts
            self.owned[inst] = owned | parts
            return set(), parts - owned
        if kind in ("revoked", "lost"):
            released = owned & set(e["partitions"])
            owned -= released
            return released, set()
        if kind == "stopped":
            self.running.discard(inst)
            released, self.owned[inst] = set(owned), set()
            return released, set()
        return set(), set()


@dataclass(frozen=True)
class PartitionPause:
    partition: str
    old_instance: str
    new_instance: str
    released_ts: int
    acquired_ts: int

    @property
    def pause_ms(self) -> int:
        return self.acquired_ts - self.released_ts


@dataclass(frozen=True)
class MemberPause:
    instance: str
    start_ts: int
    end_ts: int

    @property
    def pause_ms(self) -> int:
        return self.end_ts - self.start_ts


def partition_pauses(events: Iterable[dict]) -> list[PartitionPause]:
    """One row per hand-over: the partition's last owner let go, a new owner got it."""
    ownership = Ownership()
    owners: dict[str, set[str]] = {}
    pending: dict[str, tuple[str, int]] = {}
    out = []
    for e in events:
        released, acquired = ownership.apply(e)
        inst, ts = e["instance"], e["ts"]
        for p in sorted(released):
            holders = owners.setdefault(p, set())
            holders.discard(inst)
            if not holders:
                pending[p] = (inst, ts)
        for p in sorted(acquired):
            if p in pending:
                old, since = pending.pop(p)
                out.append(PartitionPause(p, old, inst, since, ts))
            owners.setdefault(p, set()).add(inst)
    return out


def member_pauses(events: Iterable[dict]) -> list[MemberPause]:
    """One row per stretch a running member owned nothing between a revocation (or loss)
    and the next assignment that gave it partitions; a member that leaves is not paused."""
    ownership = Ownership()
    since: dict[str, int] = {}
    out = []
    for e in events:
        inst, kind = e["instance"], e["type"]
        had = bool(ownership.owned.get(inst))
        ownership.apply(e)
        if kind in ("revoked", "lost") and had and not ownership.owned.get(inst):
            since[inst] = e["ts"]
        elif kind == "assigned" and e["partitions"] and inst in since:
            out.append(MemberPause(inst, since.pop(inst), e["ts"]))
        elif kind in ("started", "stopped"):
            since.pop(inst, None)
    return out


def consumer_throughput(events: Iterable[dict], bucket_ms: int = 1000,
                        start_ts: int | None = None, end_ts: int | None = None
                        ) -> list[tuple[int, int]]:
    """(bucket start ts, records consumed in it), every bucket from the first to the last
    (empty ones as 0: the dips are the point)."""
    counts: dict[int, int] = {}
    for e in events:
        if e["type"] == "consumed":
            b = e["ts"] // bucket_ms * bucket_ms
            counts[b] = counts.get(b, 0) + e["count"]
    if not counts:
        return []
    lo = min(counts) if start_ts is None else start_ts // bucket_ms * bucket_ms
    hi = max(counts) if end_ts is None else end_ts // bucket_ms * bucket_ms
    return [(b, counts.get(b, 0)) for b in range(lo, hi + 1, bucket_ms)]


def generations(events: Iterable[dict], start_ts: int, end_ts: int) -> set[int]:
    """Generations the instances were assigned in within the window (librdkafka reports
    none: -1 is left out)."""
    return {e["generation"] for e in events if e["type"] == "assigned"
            and start_ts <= e["ts"] <= end_ts and e["generation"] >= 0}


def broker_rebalances(broker_events: Iterable[dict], group: str, start_ts: int,
                      end_ts: int) -> int:
    """Rebalances the coordinator completed in the window: its group entering
    CompletingRebalance (a new generation handed to the leader)."""
    return sum(1 for e in broker_events if e.get("type") == "group_state"
               and e.get("group") == group and e.get("new_state") == "CompletingRebalance"
               and start_ts <= e["ts"] <= end_ts)


def pause_totals(events: list[dict], start_ts: int = 0, end_ts: int = 2**62
                 ) -> dict[str, int]:
    """Totals of the pauses that began and ended within [start_ts, end_ts]."""
    pp = [p for p in partition_pauses(events)
          if p.released_ts >= start_ts and p.acquired_ts <= end_ts]
    mp = [m for m in member_pauses(events) if m.start_ts >= start_ts and m.end_ts <= end_ts]
    return {"partition_pause_ms": sum(p.pause_ms for p in pp),
            "partition_pauses": len(pp),
            "member_pause_ms": sum(m.pause_ms for m in mp),
            "member_pauses": len(mp),
            "rebalances": len(generations(events, start_ts, end_ts))}


def split_by_bounced(events: list[dict], bounces: list[dict], start_ts: int, end_ts: int
                     ) -> tuple[list[PartitionPause], list[PartitionPause]]:
    """The window's partition pauses in two: those of partitions the bounced instance gave
    up (both protocols pay these: nobody may fetch them until the group has rebalanced) and
    those of the instances that stayed (eager's stop-the-world, cooperative's moves)."""
    bounced: list[PartitionPause] = []
    staying: list[PartitionPause] = []
    for p in partition_pauses(events):
        if not (p.released_ts >= start_ts and p.acquired_ts <= end_ts):
            continue
        is_bounced = any(b["instance"] == p.old_instance
                         and b["stop_ts"] <= p.released_ts <= b["stable_ts"] for b in bounces)
        (bounced if is_bounced else staying).append(p)
    return bounced, staying


def latency_percentiles(events: Iterable[dict], start_ts: int, end_ts: int) -> dict[str, int]:
    """End-to-end latency (consumed ts - produce time of the batch's first record)."""
    lat = sorted(e["ts"] - e["produced_ts"] for e in events if e["type"] == "consumed"
                 and e["produced_ts"] > 0 and start_ts <= e["ts"] <= end_ts)
    if not lat:
        return {}
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
    return {"p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": lat[-1]}


# -- Spark (spark_jobs/jobs/rebalances.py), when it is there ------------------------------

def spark_totals(out_dir: Path, start_ts: int, end_ts: int) -> dict[str, int] | str:
    """The same totals from spark_jobs' pure functions over the CONSUMER_EVENTS table, or
    a sentence saying why they could not be computed."""
    try:
        from spark_jobs.jobs import rebalances
        from spark_jobs.session import get_spark
        from spark_jobs.tables import consumer_events
    except ImportError as e:
        return f"spark_jobs' rebalance functions are not importable ({e})"
    try:
        spark = get_spark(app_name="minibroker-bench-rebalance")
        df = consumer_events(spark, str(out_dir))
        pp = rebalances.partition_pauses(df).where(
            f"released_ts >= {start_ts} AND acquired_ts <= {end_ts}")
        mp = rebalances.member_pauses(df).where(
            f"start_ts >= {start_ts} AND end_ts <= {end_ts}")
        return {"partition_pause_ms": int(pp.agg({"pause_ms": "sum"}).collect()[0][0] or 0),
                "partition_pauses": pp.count(),
                "member_pause_ms": int(mp.agg({"pause_ms": "sum"}).collect()[0][0] or 0),
                "member_pauses": mp.count()}
    except Exception as e:  # Java missing, a schema mismatch: the plain figures still stand
        return f"Spark computation failed: {type(e).__name__}: {e}"


# -- the analysis of one run -----------------------------------------------------------------

def analyze(out_dir: str | os.PathLike, use_spark: bool = False) -> dict[str, Any]:
    out_dir = Path(out_dir)
    meta = json.loads((out_dir / "bench.json").read_text())
    events = load_consumer_events(out_dir)
    start, end = meta["window_start_ts"], meta["window_end_ts"]
    totals = pause_totals(events, start, end)
    broker_events = read_events(out_dir)
    if broker_events:
        totals["broker_rebalances"] = broker_rebalances(broker_events, meta["group"], start, end)
    bounces = meta["bounces"]
    bounced, staying = split_by_bounced(events, bounces, start, end)
    totals["partition_pause_bounced_ms"] = sum(p.pause_ms for p in bounced)
    totals["partition_pauses_bounced"] = len(bounced)
    totals["partition_pause_staying_ms"] = sum(p.pause_ms for p in staying)
    totals["partition_pauses_staying"] = len(staying)
    result = {
        "out": str(out_dir), "protocol": meta["protocol"], "client": meta["client"],
        "instances": meta["instances"], "partitions": meta["partitions"],
        "rate": meta["rate"], "work_ms_per_record": meta["work_ms_per_record"],
        **totals,
        "bounce_duration_ms": (bounces[-1]["stable_ts"] - bounces[0]["stop_ts"]) if bounces else 0,
        "bounce_ms": [b["stable_ts"] - b["stop_ts"] for b in bounces],
        "latency": latency_percentiles(events, start, end),
        "consumed": sum(e["count"] for e in events if e["type"] == "consumed"),
    }
    if use_spark:
        result["spark"] = spark_totals(out_dir, start, end)
    return result


def print_report(r: dict[str, Any]) -> None:
    print(f"rolling bounce: protocol={r['protocol']} client={r['client']} "
          f"instances={r['instances']} partitions={r['partitions']} rate={r['rate']}/s "
          f"work={r['work_ms_per_record']}ms/record  ({r['out']})")
    print(f"  total partition pause   {r['partition_pause_ms']:>10,} ms  "
          f"({r['partition_pauses']} partition hand-overs)")
    print(f"    of the bounced instance {r['partition_pause_bounced_ms']:>8,} ms  "
          f"({r['partition_pauses_bounced']}), of the instances that stayed "
          f"{r['partition_pause_staying_ms']:,} ms ({r['partition_pauses_staying']})")
    print(f"  total member pause      {r['member_pause_ms']:>10,} ms  "
          f"({r['member_pauses']} member pauses)")
    rebalances = r.get("broker_rebalances")
    print(f"  rebalances              {rebalances if rebalances is not None else '?':>10}"
          f"     (broker: generations completed; {r['rebalances']} generations seen by "
          f"the instances)")
    print(f"  bounce duration         {r['bounce_duration_ms']:>10,} ms  "
          f"(per bounce, stop to stable: {', '.join(f'{b:,}' for b in r['bounce_ms'])})")
    if r["latency"]:
        lat = r["latency"]
        print(f"  end-to-end latency      p50 {lat['p50_ms']:,} ms  p99 {lat['p99_ms']:,} ms  "
              f"max {lat['max_ms']:,} ms")
    spark = r.get("spark")
    if isinstance(spark, str):
        print(f"  spark: {spark}")
    elif spark is not None:
        keys = ("partition_pause_ms", "partition_pauses", "member_pause_ms", "member_pauses")
        differ = [k for k in keys if spark[k] != r[k]]
        print("  spark (spark_jobs.jobs.rebalances): " + ", ".join(f"{k}={spark[k]:,}"
                                                                  for k in keys))
        print("  spark and plain Python " + ("DISAGREE on " + ", ".join(differ) if differ
                                             else "agree"))


# -- charts -----------------------------------------------------------------------------------

def _series(out_dir: Path) -> tuple[list[float], list[int], list[float], dict]:
    meta = json.loads((out_dir / "bench.json").read_text())
    t0 = meta["producer_start_ts"]
    events = load_consumer_events(out_dir)
    series = consumer_throughput(events, 1000, t0, meta["run_end_ts"])
    xs = [(b - t0) / 1000 for b, _ in series]
    ys = [n for _, n in series]
    marks = [(b["stop_ts"] - t0) / 1000 for b in meta["bounces"]]
    return xs, ys, marks, meta


def _draw(ax, out_dir: Path, title: str) -> None:
    xs, ys, marks, meta = _series(out_dir)
    ax.plot(xs, ys, lw=1.2, color="tab:blue", label="records consumed / s (all instances)")
    for i, m in enumerate(marks):
        ax.axvline(m, color="tab:red", lw=0.8, ls="--", label="bounce" if i == 0 else None)
    ax.axhline(meta["rate"], color="grey", lw=0.6, ls=":", label="produce rate")
    ax.set_title(title)
    ax.set_xlabel("seconds since the producer started")
    ax.set_ylabel("records / s")
    ax.legend(loc="lower right", fontsize=8)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def draw_throughput(out_dir: Path, r: dict[str, Any]) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 4))
    _draw(ax, out_dir, f"{r['protocol']} ({r['client']}): partition pause "
                       f"{r['partition_pause_ms']:,} ms, member pause {r['member_pause_ms']:,} ms")
    fig.tight_layout()
    path = out_dir / "throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def compare(outs: list[Path], chart: Path | None, use_spark: bool) -> int:
    """Two or three runs side by side: each one's report, the ratios of each later run's
    pauses to each earlier one's, and the issues' goals (cooperative partition pause <=
    eager / 10; KIP-848's consumer protocol <= cooperative / 3 and <= eager / 10)."""
    results = [analyze(out, use_spark) for out in outs]
    for r in results:
        print_report(r)
    by_protocol = {r["protocol"]: r for r in results}
    for i, later in enumerate(results):
        for earlier in results[:i]:
            for key in ("partition_pause_ms", "member_pause_ms"):
                if earlier[key]:
                    ratio = later[key] / earlier[key]
                    print(f"{later['protocol']} / {earlier['protocol']} {key}: "
                          f"{later[key]:,} / {earlier[key]:,} = {ratio:.3f}"
                          + (f" (1/{1 / ratio:.1f})" if 0 < ratio < 1 else ""))
    for faster, slower, factor in (("cooperative", "eager", 10),
                                   ("consumer", "cooperative", 3), ("consumer", "eager", 10)):
        if faster in by_protocol and slower in by_protocol:
            a = by_protocol[faster]["partition_pause_ms"]
            b = by_protocol[slower]["partition_pause_ms"]
            met = bool(b) and a * factor <= b
            print(f"goal ({faster} partition pause <= {slower} / {factor}): "
                  f"{'met' if met else 'NOT met'}")
    plt = _pyplot()
    fig, axes = plt.subplots(len(outs), 1, figsize=(11, 3.5 * len(outs)), sharex=True,
                             sharey=True)
    for ax, out, r in zip(axes, outs, results):
        _draw(ax, out, f"{r['protocol']} ({r['client']}, {r['instances']} instances, "
                       f"{r['partitions']} partitions): partition pause "
                       f"{r['partition_pause_ms']:,} ms")
    for ax in axes[:-1]:
        ax.set_xlabel("")
    fig.tight_layout()
    chart = chart or outs[-1].parent / "rebalance-compare.png"
    fig.savefig(chart, dpi=110)
    plt.close(fig)
    print(f"chart: {chart}")
    return 0


# -- processes --------------------------------------------------------------------------------

def start_broker(data_dir: Path, log_path: Path, overrides: dict[str, Any]) -> BrokerProcess:
    """Our broker in a subprocess (harness.broker), on a free port, with its own data dir;
    returned once it accepts connections."""
    broker = BrokerProcess(data_dir.parent, {"group.initial.rebalance.delay.ms": 0, **overrides},
                           data_dir=data_dir, log_path=log_path,
                           args=["--log-level", "warning"], start_timeout_s=30)
    try:
        return broker.start()
    except BrokerStartError as e:
        raise BenchError(f"the broker did not start (see {log_path}): {e}") from None


@dataclass
class Instance:
    """One consumer process (restarted in place) and an incremental reader of its events."""
    name: str
    cmd: list[str]
    events_path: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    signalled: bool = False
    _offset: int = 0
    _partial: str = ""
    new_events: deque = field(default_factory=deque)

    def start(self) -> None:
        self.signalled = False
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM, once per process: the graceful close (revoke, commit, LeaveGroup) it
        starts must not be cut short by a second signal."""
        if self.proc is not None and self.proc.poll() is None and not self.signalled:
            self.signalled = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = 60) -> None:
        """terminate() and wait; SIGKILL after timeout_s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def read_new(self) -> list[dict]:
        """Events appended since the last call (complete lines only)."""
        if not self.events_path.exists():
            return []
        with open(self.events_path, encoding="utf-8") as f:
            f.seek(self._offset)
            chunk = f.read()
            self._offset = f.tell()
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        return [json.loads(line) for line in lines if line.strip()]


class GroupWatch:
    """The ownership the instances report, kept current from their event files, compared
    with what the coordinator says (DescribeGroups through our AdminClient)."""

    def __init__(self, instances: list[Instance], group: str, everything: set[str],
                 bootstrap: str, consumer_protocol: bool = False):
        self.consumer_protocol = consumer_protocol  # KIP-848: ConsumerGroupDescribe
        self.instances = instances
        self.group = group
        self.everything = everything
        self.bootstrap = bootstrap
        self.ownership = Ownership()
        self.last_state = ""

    def _refresh(self) -> None:
        new = [e for inst in self.instances for e in inst.read_new()]
        new.sort(key=lambda e: (e["ts"], _RANK.get(e["type"], 9)))
        for e in new:
            self.ownership.apply(e)

    def consumers_agree(self) -> dict[str, set[str]] | None:
        self._refresh()
        live = {i.name for i in self.instances if i.running()}
        if live != self.ownership.running:
            return None  # a started instance has not said so yet, or a stopped one has not
        owned = {name: self.ownership.owned.get(name, set()) for name in live}
        flat = [p for parts in owned.values() for p in parts]
        if len(flat) != len(self.everything) or set(flat) != self.everything:
            return None
        if len(live) <= len(self.everything) and not all(owned.values()):
            return None
        return owned

    def broker_view(self) -> tuple[str, dict[str, set[str]]]:
        import trio

        from client import AdminClient

        async def describe():
            async with AdminClient(bootstrap_servers=self.bootstrap) as admin:
                if self.consumer_protocol:
                    cg = (await admin.describe_consumer_groups([self.group]))[self.group]
                    # Stable there also means every member reached its target
                    return cg.state, {m.client_id: {f"{tp.topic}-{tp.partition}"
                                                    for tp in m.assignment}
                                      for m in cg.members if m.member_epoch >= 0}
                g = (await admin.describe_groups([self.group]))[self.group]
                return g.state, {m.client_id: {f"{tp.topic}-{tp.partition}"
                                               for tp in m.assignment} for m in g.members}
        return trio.run(describe)

    def stable(self) -> bool:
        owned = self.consumers_agree()
        if owned is None:
            return False
        state, view = self.broker_view()
        self.last_state = state
        return state == "Stable" and view == owned

    def wait_stable(self, timeout_s: float) -> int:
        wait_for(self.stable, timeout_s,
                 f"group {self.group} to be stable with all {len(self.everything)} "
                 f"partitions owned once (broker state {self.last_state or '?'}, owned "
                 f"{sum(len(s) for s in self.ownership.owned.values())})", interval_s=0.1,
                 ignore=())
        return _now_ms()


def _producer_cmd(args, bootstrap: str, topic: str, stop_file: Path) -> list[str]:
    return [sys.executable, "-m", "bench.rebalance", "--produce", "--bootstrap", bootstrap,
            "--topic", topic, "--partitions", str(args.partitions), "--rate", str(args.rate),
            "--stop-file", str(stop_file)]


def run_producer(bootstrap: str, topic: str, partitions: int, rate: float,
                 stop_file: Path) -> int:
    """Produce at `rate` records/s, round-robin over the partitions, until stop_file
    exists; values carry the produce time (bench_rebalance_worker.encode_value)."""
    import trio

    from bench.rebalance_worker import encode_value
    from client import Producer

    async def produce() -> tuple[int, int]:
        sent = failed = 0
        handles: deque = deque()
        stop = trio.Path(stop_file)
        async with Producer(bootstrap_servers=bootstrap, linger_ms=20, acks=1) as producer:
            started = trio.current_time()
            while not await stop.exists():
                due = int((trio.current_time() - started) * rate)
                while sent < due:
                    handles.append(await producer.send(
                        topic, encode_value(_now_ms(), sent), partition=sent % partitions))
                    sent += 1
                while handles and handles[0].done():
                    try:
                        await handles.popleft()
                    except Exception:
                        failed += 1
                await trio.sleep(0.01)
            await producer.flush()
            for h in handles:
                try:
                    await h
                except Exception:
                    failed += 1
        return sent, failed

    sent, failed = trio.run(produce)
    print(json.dumps({"sent": sent, "failed": failed}), flush=True)
    return 1 if failed else 0


# -- the run ----------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    if (out / "consumers").exists() and any((out / "consumers").iterdir()):
        raise BenchError(f"{out}/consumers already holds a run: pass another --out")
    for sub in ("consumers", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    topic = f"rebalance-{args.protocol}-{tag}"
    group = f"rebalance-{args.protocol}-{args.client}-{tag}"
    everything = {f"{topic}-{p}" for p in range(args.partitions)}
    meta: dict[str, Any] = {
        "protocol": args.protocol, "client": args.client, "instances": args.instances,
        "partitions": args.partitions, "rate": args.rate,
        "work_ms_per_record": args.work_ms_per_record, "topic": topic, "group": group,
        "heartbeat_interval_ms": args.heartbeat_interval_ms,
        "session_timeout_ms": args.session_timeout_ms, "static": args.static, "bounces": [],
        "command": " ".join(["minibroker", "bench", "rebalance", *args.argv])}

    temp_dir = None
    broker = None
    data_dir = Path(args.broker_data_dir) if args.broker_data_dir else None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        temp_dir = Path(tempfile.mkdtemp(prefix="bench-rebalance-"))
        data_dir = temp_dir / "data"
        # KIP-848's members heartbeat at the coordinator's interval and are fenced after
        # its session timeout: the bench's settings go to the broker for them, so that the
        # three protocols are timed with the same numbers
        broker = start_broker(data_dir, out / "logs" / "broker.log", overrides={
            "group.consumer.heartbeat.interval.ms": args.heartbeat_interval_ms,
            "group.consumer.session.timeout.ms": args.session_timeout_ms})
        bootstrap = broker.bootstrap
    meta["bootstrap"] = bootstrap
    stop_file = out / "logs" / "producer.stop"
    producer = None
    instances: list[Instance] = []
    try:
        _create_topic(bootstrap, topic, args.partitions)
        for i in range(args.instances):
            name = f"c{i}"
            cmd = [sys.executable, "-m", "bench.rebalance_worker",
                   "--client", args.client, "--protocol", args.protocol,
                   "--bootstrap", bootstrap, "--topic", topic, "--group", group,
                   "--instance", name, "--events", str(out / "consumers" / f"{name}.jsonl"),
                   "--work-ms-per-record", str(args.work_ms_per_record),
                   "--heartbeat-interval-ms", str(args.heartbeat_interval_ms),
                   "--session-timeout-ms", str(args.session_timeout_ms),
                   "--fetch-max-wait-ms", str(args.fetch_max_wait_ms),
                   "--fetch-min-bytes", str(args.fetch_min_bytes)]
            if args.static:
                cmd += ["--group-instance-id", f"{group}-{name}"]
            instances.append(Instance(name, cmd, out / "consumers" / f"{name}.jsonl",
                                      out / "logs" / f"{name}.log"))
        watch = GroupWatch(instances, group, everything, bootstrap,
                           consumer_protocol=args.protocol == "consumer")
        for inst in instances:
            inst.start()
        meta["formed_ts"] = watch.wait_stable(args.stable_timeout_s)
        print(f"group {group}: {args.instances} instances stable over {args.partitions} "
              f"partitions", flush=True)

        stop_file.unlink(missing_ok=True)
        with open(out / "logs" / "producer.log", "ab") as log:
            producer = subprocess.Popen(
                _producer_cmd(args, bootstrap, topic, stop_file),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        meta["producer_start_ts"] = _now_ms()
        _observe(args.warmup_s, producer, instances)

        for n, inst in enumerate(instances[:args.bounces]):
            bounce: dict[str, Any] = {"instance": inst.name, "stop_ts": _now_ms()}
            inst.stop()
            bounce["stopped_ts"] = _now_ms()
            inst.start()
            bounce["start_ts"] = _now_ms()
            bounce["stable_ts"] = watch.wait_stable(args.stable_timeout_s)
            meta["bounces"].append(bounce)
            print(f"bounce {n + 1}/{args.bounces}: {inst.name} stable again after "
                  f"{bounce['stable_ts'] - bounce['stop_ts']:,} ms", flush=True)
        meta["window_start_ts"] = (meta["bounces"][0]["stop_ts"] if meta["bounces"]
                                   else meta["producer_start_ts"])
        meta["window_end_ts"] = (meta["bounces"][-1]["stable_ts"] if meta["bounces"]
                                 else _now_ms())
        _observe(args.cooldown_s, producer, instances)
        meta["run_end_ts"] = _now_ms()
    finally:
        stop_file.touch()
        if producer is not None:
            try:
                producer.wait(30)
            except subprocess.TimeoutExpired:
                producer.kill()
        for inst in instances:  # all at once: the shutdown is outside the measured window
            inst.terminate()
        for inst in instances:
            inst.stop()
        if broker is not None:
            broker.stop(timeout_s=20)
        if data_dir is not None and (data_dir / "events").is_dir():
            shutil.copytree(data_dir / "events", out / "events", dirs_exist_ok=True)
        if temp_dir is not None and not args.keep_data:
            shutil.rmtree(temp_dir, ignore_errors=True)
        elif temp_dir is not None:
            meta["broker_data_dir"] = str(data_dir)
        (out / "bench.json").write_text(json.dumps(meta, indent=1))
    return meta


def _observe(seconds: float, producer: subprocess.Popen, instances: list[Instance]) -> None:
    """An observation window of the steady state; fails early if a process died."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if producer.poll() is not None:
            raise BenchError(f"the producer exited with {producer.returncode}")
        dead = [i.name for i in instances if not i.running()]
        if dead:
            raise BenchError(f"consumer instances exited: {', '.join(dead)}")
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    import trio

    from client import AdminClient, NewTopic

    async def create():
        async with AdminClient(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, num_partitions=partitions)])
    trio.run(create)


# -- CLI ----------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minibroker bench rebalance",
                                description="Eager vs cooperative rolling-bounce benchmark.")
    p.add_argument("--protocol", choices=["eager", "cooperative", "consumer"],
                   help="classic eager (range), classic cooperative (cooperative-sticky), "
                        "or KIP-848's consumer protocol (the broker assigns)")
    p.add_argument("--static", action="store_true",
                   help="static members (group.instance.id per instance)")
    p.add_argument("--instances", type=int, default=10)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--client", choices=["minibroker", "librdkafka"], default="minibroker")
    p.add_argument("--rate", type=float, default=2000, help="records/s produced (default 2000)")
    p.add_argument("--work-ms-per-record", type=float, default=1.0,
                   help="simulated processing time per record (a sleep per poll batch)")
    p.add_argument("--bounces", type=int, default=None,
                   help="instances to restart, in order (default: all of them)")
    p.add_argument("--warmup-s", type=float, default=10)
    p.add_argument("--cooldown-s", type=float, default=10)
    p.add_argument("--heartbeat-interval-ms", type=int, default=3000, help="Kafka's default")
    p.add_argument("--session-timeout-ms", type=int, default=45000, help="Kafka's default")
    p.add_argument("--fetch-max-wait-ms", type=int, default=100)
    p.add_argument("--fetch-min-bytes", type=int, default=1)
    p.add_argument("--stable-timeout-s", type=float, default=120)
    p.add_argument("--out", default=None, help="default: bench-rebalance-<protocol>-<client>")
    p.add_argument("--bootstrap", help="use this broker instead of starting one")
    p.add_argument("--broker-data-dir", help="with --bootstrap: its data dir, to copy its "
                                             "event log into OUT/events")
    p.add_argument("--keep-data", action="store_true", help="keep the started broker's data dir")
    p.add_argument("--no-spark", action="store_true",
                   help="only the plain-Python pause totals (default: Spark's too when available)")
    p.add_argument("--compare", nargs="+", metavar="OUT",
                   help="two or three runs' OUT directories (eager, cooperative, consumer): "
                        "one figure, the ratios and the goals")
    p.add_argument("--chart", help="with --compare: the PNG to write")
    # the producer process the controller starts
    p.add_argument("--produce", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--topic", help=argparse.SUPPRESS)
    p.add_argument("--stop-file", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        if args.produce:
            return run_producer(args.bootstrap, args.topic, args.partitions, args.rate,
                                Path(args.stop_file))
        if args.compare:
            if not 2 <= len(args.compare) <= 3:
                parser.error("--compare takes two or three OUT directories")
            return compare([Path(o) for o in args.compare],
                           Path(args.chart) if args.chart else None, not args.no_spark)
        if args.protocol is None:
            parser.error("--protocol is required (or --compare OUT OUT [OUT])")
        if args.instances < 1 or args.partitions < 1 or args.rate <= 0:
            parser.error("--instances, --partitions and --rate must be > 0")
        args.bounces = args.instances if args.bounces is None else min(args.bounces,
                                                                         args.instances)
        args.out = args.out or f"bench-rebalance-{args.protocol}-{args.client}"
        run(args)
        result = analyze(args.out, use_spark=not args.no_spark)
        print_report(result)
        print(f"  chart: {draw_throughput(Path(args.out), result)}")
        Path(args.out, "result.json").write_text(json.dumps(result, indent=1, default=str))
        return 0
    except BenchError as e:
        print(f"rebalance bench failed: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
