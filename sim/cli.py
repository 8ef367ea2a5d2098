"""`minibroker sim`: many seeds of the whole-cluster simulation, a summary, and a replay
line per failing seed.

    minibroker sim [--seeds 1-200] [--nodes 3] [--duration-s 30] [--faults kill,pause,...]
        [--producers 2] [--consumers 2] [--rate 20] [--workload classic|kip848|txn|share]
        [--plant BUG] [--trace SEED]
        [--json FILE] [--stop-at-first] [--jobs N]

Each failing seed prints one line: the violations and the command that replays it. The
summary table counts seeds, simulated time, faults by kind, acknowledged writes and
violations by checker, and the speed (simulated seconds per wall second). `--trace SEED`
runs that one seed and prints its timeline: faults, elections, leadership and ISR changes,
rebalances, client errors. `--plant BUG` switches on one of the planted bugs
(broker.planted) that the checkers must catch. `--jobs N` runs N seeds at a time in N
processes (a seed is one process's work from start to end, so its outcome is the same as
alone); the summary then gives the machine's speed and each process's. Exit status 1 when a
seed failed.

The run sets PYTHONHASHSEED=0 (re-executing itself when it is not): a set of strings
iterates in another order in another process otherwise, and a replay would not replay.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from broker import planted
from sim.faults import KINDS
from sim.run import Options, Outcome, run_seed

TRACE_TYPES = {"leader_change", "isr_change", "isr_shrink", "isr_expand", "quorum_leader",
               "group_state", "rebalance", "log_truncation", "broker_start", "broker_stop",
               "log_recovery", "broker_fenced", "broker_unfenced"}


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        first, sep, last = part.partition("-")
        seeds += range(int(first), int(last) + 1) if sep else [int(first)]
    return seeds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", default="1-200", help="e.g. 1-1000 or 4,9,12 (1-200)")
    parser.add_argument("--nodes", type=int, default=3, choices=[3, 5])
    parser.add_argument("--duration-s", type=float, default=30.0,
                        help="simulated seconds of faults before healing (30)")
    parser.add_argument("--quiet-s", type=float, default=5.0,
                        help="simulated seconds of the workload alone before the first "
                             "fault may start, 0-3 s later (5)")
    parser.add_argument("--faults", default=",".join(KINDS),
                        help=f"fault kinds, comma-separated, or none ({','.join(KINDS)})")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--rate", type=int, default=20, help="sends a second per producer")
    parser.add_argument("--workload", default="classic",
                        choices=["classic", "kip848", "txn", "share"],
                        help="the consumers' group protocol: classic (JoinGroup, "
                             "roundrobin) or kip848 (ConsumerGroupHeartbeat); txn adds two "
                             "transactional copiers (consume-transform-produce, exactly "
                             "once) and Jepsen's transactional checkers; share adds two "
                             "members of a share group (KIP-932) and its checkers")
    parser.add_argument("--plant", choices=sorted(planted.BUGS), default=None,
                        help="switch on a planted bug the checkers must catch")
    parser.add_argument("--trace", type=int, default=None, metavar="SEED",
                        help="run this seed and print its timeline")
    parser.add_argument("--json", default=None, help="also write the summary here")
    parser.add_argument("--stop-at-first", action="store_true",
                        help="stop at the first failing seed")
    parser.add_argument("--jobs", type=int, default=1,
                        help="seeds run at once, each in a process of its own (1)")


def options_of(args: argparse.Namespace) -> Options:
    faults = () if args.faults in ("", "none") else tuple(args.faults.split(","))
    unknown = set(faults) - set(KINDS)
    if unknown:
        raise SystemExit(f"minibroker sim: unknown fault kinds {sorted(unknown)}")
    return Options(nodes=args.nodes, duration_s=args.duration_s, quiet_s=args.quiet_s,
                   faults=faults,
                   producers=args.producers, consumers=args.consumers, rate=args.rate,
                   group_protocol="consumer" if args.workload == "kip848" else "classic",
                   copiers=2 if args.workload == "txn" else 0,
                   share_members=2 if args.workload == "share" else 0)


def replay_command(seed: int, args: argparse.Namespace) -> str:
    parts = ["minibroker sim", f"--seeds {seed}", f"--nodes {args.nodes}",
             f"--duration-s {args.duration_s:g}", f"--faults {args.faults or 'none'}"]
    if args.quiet_s != 5.0:
        parts.append(f"--quiet-s {args.quiet_s:g}")
    if args.workload != "classic":
        parts.append(f"--workload {args.workload}")
    if args.plant:
        parts.append(f"--plant {args.plant}")
    return " ".join(parts)


def failure_line(o: Outcome, args: argparse.Namespace) -> str:
    found = ", ".join(f"{name} ({len(v)})" for name, v in sorted(o.violations.items()))
    return f"seed {o.seed}: FAILED {found}; replay: {replay_command(o.seed, args)}"


def timeline(o: Outcome) -> list[str]:
    """The seed's story in simulated time: faults, the nodes' events, client errors."""
    rows: list[tuple[float, str]] = []
    for op in o.history:
        if op["f"] == "fault":
            v = op["value"]
            rows.append((op["time"], f"fault {v['fault']} node-{v['target']} {v['phase']}"))
        elif op["type"] == "info" and op["f"] in ("send", "commit"):
            rows.append((op["time"], f"{op['process']} {op['f']} uncertain: "
                                     f"{str(op['value'].get('error', ''))[:100]}"))
        elif op["f"] == "assign":
            rows.append((op["time"], f"{op['process']} assigned {op['value']['partitions']}"))
    start_ms = min((e["ts"] for e in o.events), default=0)
    for e in o.events:
        if e["type"] in TRACE_TYPES:
            detail = {k: v for k, v in e.items() if k not in ("node", "type", "ts")}
            rows.append(((e["ts"] - start_ms) / 1000,
                         f"node-{e['node']} {e['type']} {json.dumps(detail, default=str)[:160]}"))
    rows.sort(key=lambda r: r[0])
    return [f"{t:9.3f}  {text}" for t, text in rows]


def summary(outcomes: list[Outcome], wall_s: float, jobs: int = 1) -> list[str]:
    simulated = sum(o.simulated_s for o in outcomes)
    busy = sum(o.wall_s for o in outcomes)
    faults: dict[str, int] = {}
    violations: dict[str, int] = {}
    for o in outcomes:
        for kind, n in o.faults.items():
            faults[kind] = faults.get(kind, 0) + n
        for name in o.violations:
            violations[name] = violations.get(name, 0) + 1
    failed = sum(1 for o in outcomes if not o.ok)
    rows = [
        ("seeds", f"{len(outcomes)} ({failed} failed)"),
        ("simulated time", f"{simulated:,.0f} s in {wall_s:,.1f} s of wall time "
                           f"({simulated / max(wall_s, 1e-9):,.1f} x)"
                           + (f"; {jobs} processes, each at {simulated / max(busy, 1e-9):,.1f} x"
                              if jobs > 1 else "")),
        ("seeds per minute", f"{len(outcomes) / max(wall_s, 1e-9) * 60:,.1f}"),
        ("faults", ", ".join(f"{k} {v}" for k, v in sorted(faults.items())) or "none"),
        ("sends acknowledged", f"{sum(o.acked for o in outcomes):,} of "
                               f"{sum(o.sent for o in outcomes):,}"),
        ("records polled", f"{sum(o.polled for o in outcomes):,}"),
        ("violations (seeds)", ", ".join(f"{k} {v}" for k, v in sorted(violations.items()))
         or "none"),
    ]
    width = max(len(k) for k, _ in rows)
    return [f"{k:<{width}}  {v}" for k, v in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minibroker sim",
                                     description="The whole cluster in one deterministic "
                                                 "simulation (docs/RELIABILITY.md).")
    add_arguments(parser)
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":
        env = dict(os.environ, PYTHONHASHSEED="0")
        os.execve(sys.executable, [sys.executable, "-m", "sim.cli", *(argv or sys.argv[1:])],
                  env)
    logging.basicConfig(level=logging.CRITICAL)
    options = options_of(args)
    if args.plant:
        planted.plant(args.plant)
    if args.trace is not None:
        o = run_seed(args.trace, options)
        print("\n".join(timeline(o)))
        print(failure_line(o, args) if not o.ok else f"seed {o.seed}: ok")
        return 0 if o.ok else 1
    outcomes: list[Outcome] = []
    started = time.perf_counter()
    for o in _outcomes(parse_seeds(args.seeds), options, args):
        outcomes.append(o)
        if not o.ok:
            print(failure_line(o, args), flush=True)
            if args.stop_at_first:
                break
    wall = time.perf_counter() - started
    outcomes.sort(key=lambda o: o.seed)
    print("\n".join(summary(outcomes, wall, max(args.jobs, 1))))
    if args.json:
        report: dict[str, Any] = {
            "seeds": [o.seed for o in outcomes], "wall_s": wall,
            "simulated_s": sum(o.simulated_s for o in outcomes),
            "failed": {o.seed: sorted(o.violations) for o in outcomes if not o.ok},
            "plant": args.plant, "jobs": max(args.jobs, 1),
            "outcomes": [{"seed": o.seed, "simulated_s": o.simulated_s, "wall_s": o.wall_s,
                          "faults": o.faults, "acked": o.acked, "sent": o.sent,
                          "polled": o.polled, "violations": sorted(o.violations),
                          "trace_hash": o.trace_hash} for o in outcomes]}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if all(o.ok for o in outcomes) else 1


def _outcomes(seeds: list[int], options: Options, args: argparse.Namespace
              ) -> Iterator[Outcome]:
    """Each seed's outcome, in this process or in `--jobs` forked ones (in the order they
    end); the history and events stay behind in the worker, which only the trace uses."""
    if args.jobs <= 1:
        for seed in seeds:
            yield run_seed(seed, options)
        return
    # fork: the children inherit PYTHONHASHSEED's hashing, the planted bug and the logging
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        yield from pool.imap_unordered(_slim_run, [(seed, options) for seed in seeds])


def _slim_run(job: tuple[int, Options]) -> Outcome:
    """What goes back to the parent: no history or events, and the violations' findings
    as text, since they may hold exceptions that do not unpickle (an exception class
    whose __init__ takes other arguments than its args; the pool's result thread died of
    one, and the run hung)."""
    seed, options = job
    try:
        o = run_seed(seed, options)
    except Exception as e:  # noqa: BLE001 - a harness error is this seed's failure, not the run's
        return Outcome(seed, options, violations={"harness-error": [repr(e)]})
    return replace(o, history=[], events=[],
                   violations={name: [repr(f) for f in found]
                               for name, found in o.violations.items()})


if __name__ == "__main__":
    sys.exit(main())
