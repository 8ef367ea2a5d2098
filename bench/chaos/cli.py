"""`minibroker chaos`: seeded fault runs against a three-node cluster, checked.

    minibroker chaos [--target processes|docker] [--seeds 1-20 | --seed N]
        [--duration-s 60] [--faults kill,pause,restart,isolate,ring,reassign] [--partitions 3]
        [--rate 300] [--out chaos-out] [--json FILE]

Each seed is one run (runner.py) in OUT/seed-N/: history.jsonl, summary.json, run.log and
the replicas' data. The table has one row per run and a total; the exit status is 1 when
any run found anything (a lost write, a duplicate, a regression, a stall), else 0.
`minibroker analyze --chaos OUT/seed-N/history.jsonl` charts a run.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import traceback
from dataclasses import asdict
from pathlib import Path

from bench.chaos.nemesis import EXTRA_KINDS, KINDS, PARTITION_KINDS
from bench.chaos.runner import RunConfig, RunResult, Run
from bench.common import table_lines

# What the summary counts, beside each run's own failure list.
HEADLINE = ("lost", "duplicate", "inconsistent-offsets", "order", "commit-regression",
            "poll-skip", "nonmonotonic-poll", "replica-divergence")


def parse_seeds(text: str) -> list[int]:
    """"7", "1-20" or "1,4,9"."""
    seeds: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            seeds += range(int(lo), int(hi) + 1)
        else:
            seeds.append(int(part))
    return seeds


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minibroker chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=("processes", "docker"), default="processes")
    p.add_argument("--seeds", default=None, help="e.g. 1-20 or 3,7 (default: --seed)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--faults", default=None,
                   help=f"comma-separated, of {','.join(KINDS + EXTRA_KINDS)} (default: all the target "
                        f"can do)")
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--rate", type=int, default=300, help="sends a second, per producer")
    p.add_argument("--settle-s", type=float, default=90.0,
                   help="how long the cluster and the group get to recover after healing")
    p.add_argument("--out", type=Path, default=Path("chaos-out"))
    p.add_argument("--keep-data", action="store_true",
                   help="keep each run's copied replica data (large)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    return p


def row(r: RunResult) -> list[str]:
    return ([str(r.seed), r.target, str(r.faults), str(r.acked), str(r.uncertain)]
            + [str(r.count(name)) for name in HEADLINE]
            + ["yes" if r.stalled else "no", "ok" if r.ok else "FAIL"])


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # the history records every client error; the library's connect warnings would
    # repeat them on the terminal, once per address per 10 s, during every fault
    logging.getLogger("minibroker.client").setLevel(logging.ERROR)
    seeds = parse_seeds(args.seeds) if args.seeds else [args.seed]
    if args.faults:
        kinds = tuple(k.strip() for k in args.faults.split(","))
        unknown = [k for k in kinds if k not in KINDS + EXTRA_KINDS]
        if unknown:
            print(f"minibroker chaos: unknown fault(s) {unknown}; choose from {KINDS + EXTRA_KINDS}",
                  file=sys.stderr)
            return 2
        if args.target == "processes" and set(kinds) & set(PARTITION_KINDS):
            print("minibroker chaos: local processes cannot be partitioned "
                  "(use --target docker)", file=sys.stderr)
            return 2
    else:
        kinds = KINDS if args.target == "docker" else tuple(
            k for k in KINDS if k not in PARTITION_KINDS)
    results: list[RunResult] = []
    for seed in seeds:
        cfg = RunConfig(seed=seed, duration_s=args.duration_s, target=args.target,
                        partitions=args.partitions, rate=args.rate, kinds=kinds,
                        settle_s=args.settle_s, out=args.out / f"seed-{seed}")
        try:
            result = Run(cfg).execute()
        except Exception as e:  # noqa: BLE001 - one broken run must not hide the others
            traceback.print_exc()
            result = RunResult(seed=seed, target=args.target, faults=0, acked=0,
                               uncertain=0, polled=0,
                               stalled=[f"the run itself failed: {type(e).__name__}: {e}"])
        results.append(result)
        if not args.keep_data:
            shutil.rmtree(cfg.out / "data", ignore_errors=True)
            shutil.rmtree(cfg.out / "cluster", ignore_errors=True)
        for name, res in result.results.items():
            if res["count"] and res["examples"]:
                print(f"  {name}: {res['count']}; e.g. {res['examples'][:3]}")
        for text in result.stalled:
            print(f"  stalled: {text}")

    header = (["seed", "target", "faults", "acked", "uncertain"] + list(HEADLINE)
              + ["stalled", "result"])
    rows = [row(r) for r in results]
    total = RunResult(seed=0, target="", faults=sum(r.faults for r in results),
                      acked=sum(r.acked for r in results),
                      uncertain=sum(r.uncertain for r in results), polled=0)
    totals = (["total", f"{len(results)} runs", str(total.faults), str(total.acked),
               str(total.uncertain)]
              + [str(sum(r.count(name) for r in results)) for name in HEADLINE]
              + [str(sum(1 for r in results if r.stalled)),
                 f"{sum(1 for r in results if r.ok)}/{len(results)} ok"])
    print()
    for line in table_lines(header, rows + [totals]):
        print(line)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
