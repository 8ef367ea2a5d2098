"""Where a Spark run's time went, from its event log: one line per stage, then totals.

    PYSPARK_SUBMIT_ARGS="--conf spark.eventLog.enabled=true --conf spark.eventLog.compress=false \
        --conf spark.eventLog.dir=file:///tmp/ev pyspark-shell" minibroker analyze ...
    python scripts/spark_stages.py /tmp/ev/*/events_* [--min-wall SECONDS]

Per stage: when it started (seconds after the application), its wall time, tasks, the
summed task time (JVM plus the Python workers it waits for), the JVM's CPU time, shuffle
bytes written, input rows, and the call site that ran it. Totals count the queries (SQL
executions), jobs, stages and tasks: on small data each costs more than its rows, so the
counts are the figure to compare. A zstd-compressed log is read through the `zstd` tool.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path


def _lines(path: str):
    if path.endswith(".zstd"):
        out = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout
        return out.decode().splitlines()
    return Path(path).read_text().splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("event_log")
    parser.add_argument("--min-wall", type=float, default=0.0,
                        help="print only stages that took at least this long (s)")
    args = parser.parse_args()
    t0 = None
    stages: dict[int, dict] = {}
    jobs = sqls = 0
    for line in _lines(args.event_log):
        e = json.loads(line)
        kind = e["Event"]
        if kind == "SparkListenerApplicationStart":
            t0 = e["Timestamp"]
        elif kind == "SparkListenerJobStart":
            jobs += 1
        elif kind.endswith("SparkListenerSQLExecutionStart"):
            sqls += 1
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            acc = {a["Name"]: a.get("Value") for a in info.get("Accumulables", [])}

            def metric(name: str, acc: dict = acc) -> int:
                return int(acc.get(f"internal.metrics.{name}") or 0)
            submitted = info.get("Submission Time") or 0
            stages[info["Stage ID"]] = {
                "start": submitted, "name": info["Stage Name"],
                "tasks": info["Number of Tasks"],
                "wall": ((info.get("Completion Time") or submitted) - submitted) / 1000,
                "task": metric("executorRunTime") / 1000,
                "cpu": metric("executorCpuTime") / 1e9,
                "shuffle": metric("shuffle.write.bytesWritten"),
                "rows": metric("input.recordsRead"),
            }
    t0 = t0 or min((s["start"] for s in stages.values()), default=0)
    for sid, s in sorted(stages.items(), key=lambda kv: kv[1]["start"]):
        if s["wall"] >= args.min_wall:
            print(f"stage {sid:4d} t={(s['start'] - t0) / 1000:6.1f}s wall {s['wall']:6.2f}s "
                  f"tasks {s['tasks']:3d} task-time {s['task']:7.2f}s jvm-cpu {s['cpu']:6.2f}s "
                  f"shuffle {s['shuffle'] / 1e6:6.1f} MB rows {s['rows']:9d}  {s['name'][:70]}")
    print(f"{sqls} queries, {jobs} jobs, {len(stages)} stages, "
          f"{sum(s['tasks'] for s in stages.values())} tasks; "
          f"stage wall {sum(s['wall'] for s in stages.values()):.1f}s, "
          f"task time {sum(s['task'] for s in stages.values()):.1f}s, "
          f"JVM CPU {sum(s['cpu'] for s in stages.values()):.1f}s")


if __name__ == "__main__":
    main()
