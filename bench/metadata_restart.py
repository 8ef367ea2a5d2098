"""`minibroker bench metadata-restart`: how long a node takes to serve again after a restart
with a long metadata log, replaying every record or starting from a metadata snapshot.

    minibroker bench metadata-restart [--records 100000] [--topics 300]
        [--partitions 10] [--runs 3] [--out DIR] [--json FILE]

One `minibroker serve` process (a single node, its own quorum) is given --topics topics of
--partitions partitions each (CreateTopics), then IncrementalAlterConfigs requests setting
eight configs of every topic, round after round, until the metadata log holds --records
records (one controller operation, one Raft entry, per request). This first process runs
with snapshots off (`metadata.log.max.record.bytes.between.snapshots` at its maximum).

Then it is stopped (SIGTERM) and restarted, and each restart is timed from the process's
start to serving: the client port accepts and Metadata answers every topic with a leader
for each partition.

- replay: restarted with snapshots off, so it replays the whole log (what a node does
  before its first snapshot, as after < 20 MiB of records at Kafka's default threshold);
- snapshot: restarted once with a 1 MiB threshold (it writes a snapshot after replaying),
  stopped once the snapshot file is on disk, then timed restarting from it.

The median of --runs restarts is printed for each, with the CPU seconds the process had
used by then (the wall time of an idle machine, less the waits on fsync) and what the node
logged about its start (the snapshot loaded, the records replayed, and how long that took). Wall-clock times on this machine; no figure is an
assertion (docs/BENCHMARKS.md records them).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench.cluster import BenchError, Node, wait_for
from bench.common import process_tree_cpu_seconds, table_lines
from broker.controller.metadata_log import METADATA_LOG_DIR, list_snapshots
from harness.ports import free_port
from harness.raw import HOST, call
from protocol.messages import CREATE_TOPICS, INCREMENTAL_ALTER_CONFIGS, METADATA

PROG = "minibroker bench metadata-restart"
TARGET = "< 3 s"
SNAPSHOTS_OFF = str(2**31 - 1)  # the largest the property takes: never reached here
TOPIC_RESOURCE = 2
SET = 0
# topic configs whose values may change freely, set on every topic each round
CONFIGS = ("retention.ms", "retention.bytes", "segment.ms", "segment.bytes",
           "max.message.bytes", "delete.retention.ms", "file.delete.delay.ms",
           "index.interval.bytes")
CREATE_BATCH = 100  # topics per CreateTopics request
START_TIMEOUT_S = 300.0


def _progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def topic_names(count: int) -> list[str]:
    return [f"meta-{i:05d}" for i in range(count)]


def write_metadata(port: int, topics: list[str], partitions: int, records: int) -> int:
    """Create the topics, then alter their configs until `records` records are written;
    the number written."""
    written = 0
    for i in range(0, len(topics), CREATE_BATCH):
        batch = topics[i:i + CREATE_BATCH]
        body = call(port, CREATE_TOPICS, 5, {"topics": [
            {"name": t, "num_partitions": partitions, "replication_factor": 1,
             "assignments": [], "configs": []} for t in batch],
            "timeout_ms": 60_000, "validate_only": False}, timeout_s=120)
        errors = [(t.name, t.error_code) for t in body.topics if t.error_code]
        if errors:
            raise BenchError(f"CreateTopics refused: {errors[:5]}")
        written += len(batch) * (1 + partitions)
    round_ = 0
    while written < records:
        round_ += 1
        body = call(port, INCREMENTAL_ALTER_CONFIGS, 0, {"resources": [
            {"resource_type": TOPIC_RESOURCE, "resource_name": t, "configs": [
                {"name": name, "config_operation": SET, "value": str(1_000_000 + round_)}
                for name in CONFIGS]} for t in topics], "validate_only": False},
            timeout_s=120)
        errors = [(r.resource_name, r.error_code) for r in body.responses if r.error_code]
        if errors:
            raise BenchError(f"IncrementalAlterConfigs refused: {errors[:5]}")
        written += len(topics) * len(CONFIGS)
        if round_ % 10 == 0:
            _progress(f"{written} records written")
    return written


def serving(port: int, topics: int, partitions: int) -> bool:
    """The port accepts and Metadata lists every topic with a leader for each partition."""
    body = call(port, METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False},
                timeout_s=30)
    ours = [t for t in body.topics if t.name.startswith("meta-") and t.error_code == 0]
    return len(ours) == topics and all(
        len(t.partitions) == partitions and all(p.leader_id >= 0 for p in t.partitions)
        for t in ours)


def timed_start(node: Node, topics: int, partitions: int) -> tuple[float, float]:
    """Seconds from the process's launch to serving, and the CPU seconds it used by then
    (what the wall time would be on an idle machine, less its waits on the disk)."""
    started = time.monotonic()
    node.launch()

    def up() -> bool:
        if node.proc is None or node.proc.poll() is not None:
            raise BenchError(f"the node exited:\n{node.tail()}")
        with socket.create_connection((HOST, node.port), timeout=1.0):
            pass
        return serving(node.port, topics, partitions)
    wait_for(up, START_TIMEOUT_S, "the restarted node to serve")
    elapsed = time.monotonic() - started
    assert node.proc is not None
    return elapsed, process_tree_cpu_seconds(node.proc.pid)


def stop(node: Node) -> None:
    node.terminate()
    node.wait_exit(60)


def start_note(node: Node) -> tuple[str, float]:
    """What the latest start logged about the metadata log (the snapshot it loaded, the
    records it replayed), and the milliseconds it says that took."""
    lines = node.log_path.read_text(errors="replace").splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("=== "))
    notes = [re.sub(r"^.*minibroker\.controller: node \d+ ", "", line)
             for line in lines[start:]
             if "loaded the metadata snapshot" in line or "caught up with the metadata" in line]
    took = [float(m[1]) for note in notes if (m := re.search(r"in (\d+) ms", note))]
    return "; ".join(notes[:2]), took[-1] if took else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=10, help="per topic")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--snapshot-bytes", type=int, default=1 << 20,
                        help="metadata.log.max.record.bytes.between.snapshots of the restart "
                             "that writes the snapshot")
    parser.add_argument("--out", type=Path, default=None,
                        help="keep the data directory and log here (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    base = args.out or Path(tempfile.mkdtemp(prefix="bench-metadata-restart-"))
    node = Node(node_id=0, port=free_port(), controller_port=free_port(), base_dir=base,
                overrides={"metadata.log.max.record.bytes.between.snapshots": SNAPSHOTS_OFF,
                           "offsets.topic.num.partitions": "1"})
    topics = topic_names(args.topics)
    results: dict[str, Any] = {"records": 0, "partitions": args.topics * args.partitions}
    try:
        _progress(f"writing {args.records} metadata records ({args.topics} topics x "
                  f"{args.partitions} partitions, then config changes)")
        node.launch()
        node.wait_ready(START_TIMEOUT_S)
        results["records"] = write_metadata(node.port, topics, args.partitions, args.records)
        stop(node)
        rows = []
        for label, threshold in (("replay", SNAPSHOTS_OFF),
                                 ("snapshot", str(args.snapshot_bytes))):
            node.overrides["metadata.log.max.record.bytes.between.snapshots"] = threshold
            if label == "snapshot":
                timed_start(node, args.topics, args.partitions)
                wait_for(partial(list_snapshots, base / "data" / METADATA_LOG_DIR), 120,
                         "a metadata snapshot")
                stop(node)
            samples, loads, cpus = [], [], []
            for run in range(args.runs):
                seconds, cpu = timed_start(node, args.topics, args.partitions)
                samples.append(seconds)
                cpus.append(cpu)
                note, load_ms = start_note(node)
                loads.append(load_ms / 1000)
                _progress(f"{label} run {run + 1}: serving after {seconds:.2f} s, "
                          f"{cpu:.2f} CPU s ({note})")
                stop(node)
            if label == "replay" and (m := re.search(r"\((\d+) records replayed", note)):
                # the log's own count: partition changes (a fencing, leaderships at each
                # start) come on top of what was written
                results["records_in_log"] = int(m[1])
            results[label] = {"median_s": statistics.median(samples), "samples_s": samples,
                              "cpu_s": cpus, "metadata_load_s": loads, "log": note}
            rows.append([label, f"{statistics.median(samples):.2f} s",
                         ", ".join(f"{s:.2f}" for s in samples),
                         f"{statistics.median(cpus):.2f} s",
                         f"{statistics.median(loads):.2f} s", note])
        print(f"\n{results['records']} metadata records written "
              f"({results.get('records_in_log', '?')} in the log), {results['partitions']} "
              f"partitions, one node; target {TARGET}")
        for line in table_lines(["start", "serving (median)", "runs (s)", "CPU by then",
                                 "metadata load", "the node's log (last run)"], rows,
                                left=(0, 5)):
            print(line)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        return 0
    except BenchError as e:
        print(f"{PROG}: {e}")
        return 1
    finally:
        node.kill()
        if args.out is None:
            shutil.rmtree(base, ignore_errors=True)
