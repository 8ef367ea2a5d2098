"""`minibroker bench compose`: produce and consume throughput against the Docker Compose
cluster from the host, beside the same three nodes run as local processes, in one run:

    minibroker bench compose [--records 1000000] [--runs 3] [--no-up] [--no-processes]
        [--json FILE]

For each target, and for topics of 1 and of 6 partitions (RF 3, min.insync.replicas=2,
every replica in every ISR before the clock starts), bench.throughput's producer
(confluent-kafka, 100 B values, linger.ms=5, acks=all) writes --records records, then its
consumer (assigned partitions, from the start) reads them back. Each broker's CPU seconds
are read from /proc: a container's broker is a process of this host too (`docker inspect`
gives its pid), so both targets are measured the same way. Each topic is deleted once
measured.

  compose    docker-compose.yml's broker-0..2 through the published EXTERNAL listeners
             127.0.0.1:19092-19094; `make cluster` brings it up first unless --no-up
  processes  bench.cluster's three local processes (the cluster tests' pinned command)

What differs between the two is the path a byte takes: docker's userland proxy or NAT for
the published ports and a bridge network between the brokers, against loopback. The table
prints medians with min and max; nothing here asserts a figure (docs/BENCHMARKS.md records
them). The compose cluster is left running (`make cluster-down` removes it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from bench.cluster import Cluster, report_failure, wait_for
from bench.common import BenchError, confluent_kafka_modules
from bench.replication import (LINGER_MS, MIN_ISR, PARTITION_COUNTS, Table, _version, consume,
                               produce)

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_BOOTSTRAP = "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
SERVICES = ("broker-0", "broker-1", "broker-2")


def _progress(text: str) -> None:
    print(f"[bench compose] {text}", file=sys.stderr, flush=True)


def compose_command() -> list[str]:
    """`docker compose` (v2) where it is installed, else docker-compose (1.29), as the
    Makefile chooses."""
    v2 = subprocess.run(["docker", "compose", "version"], capture_output=True)
    return ["docker", "compose"] if v2.returncode == 0 else ["docker-compose"]


def container_pids() -> list[int]:
    """The host pids of the compose cluster's three broker processes."""
    pids = []
    for service in SERVICES:
        cid = subprocess.run([*compose_command(), "ps", "-q", service], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.strip()
        if not cid:
            raise BenchError(f"no container for {service}: is the cluster up (`make cluster`)?")
        pid = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", cid], check=True,
                             capture_output=True, text=True).stdout.strip()
        if not pid.isdigit() or int(pid) == 0:
            raise BenchError(f"{service}'s container is not running")
        pids.append(int(pid))
    return pids


class Target:
    """A cluster to measure: its bootstrap list and its brokers' pids."""

    def __init__(self, name: str, bootstrap: str, pids: Callable[[], list[int]]):
        self.name = name
        self.bootstrap = bootstrap
        self.pids = pids
        self.ck, self.admin_mod = confluent_kafka_modules()

    def admin(self) -> Any:
        return self.admin_mod.AdminClient({"bootstrap.servers": self.bootstrap,
                                           "socket.timeout.ms": 5000})

    def fresh_topic(self, partitions: int) -> str:
        """A new RF 3 topic, min.insync.replicas=2, once every replica is in every ISR."""
        name = f"bench-compose-{uuid.uuid4().hex[:8]}"
        admin = self.admin()
        admin.create_topics([self.admin_mod.NewTopic(name, partitions, 3, config=MIN_ISR)],
                            operation_timeout=30, request_timeout=30)[name].result(35)

        def full() -> bool:
            topic = admin.list_topics(name, timeout=5).topics.get(name)
            return (topic is not None and topic.error is None
                    and len(topic.partitions) == partitions
                    and all(p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas)
                            and len(p.replicas) == 3 for p in topic.partitions.values()))
        wait_for(full, 60, f"every replica of {name} in its ISR")
        return name

    def delete(self, topic: str) -> None:
        admin = self.admin()
        admin.delete_topics([topic], operation_timeout=30)[topic].result(35)


def measure(target: Target, args: argparse.Namespace, table: Table) -> None:
    for run in range(args.runs):
        for partitions in PARTITION_COUNTS:
            topic = target.fresh_topic(partitions)
            pids = target.pids()
            s = "s" if partitions > 1 else ""
            wrote = produce(target.bootstrap, topic, partitions, "all", args.records, pids)
            read = consume(target.bootstrap, topic, partitions, args.records, pids)
            for what, result, n in (("produce acks=all", wrote, 1), ("consume", read, 2)):
                table.add(f"({n}) {what}, {partitions} partition{s}: {target.name}", "rec/s",
                          result["rec_per_s"])
                cpu = sum(result["broker_cpu_s_by_pid"].values()) * 1e6 / args.records
                table.add(f"(3) {what}, {partitions}p, three brokers: {target.name}", "cpu",
                          cpu)
            _progress(f"{target.name} run {run + 1}, {partitions}p: produce "
                      f"{wrote['rec_per_s']:,.0f} rec/s, consume {read['rec_per_s']:,.0f} rec/s")
            target.delete(topic)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibroker bench compose",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records (of 100 B) per run (default 1000000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument("--no-up", action="store_true",
                        help="the compose cluster is already up: do not run `make cluster`")
    parser.add_argument("--no-processes", action="store_true",
                        help="leave out the local processes' cluster")
    parser.add_argument("--json", default=None, help="also write the rows as JSON lines here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.records < 1 or args.runs < 1:
        parser.error("--records and --runs must be > 0")
    if shutil.which("docker") is None:
        print("minibroker bench compose: docker is not installed", file=sys.stderr)
        return 2
    table = Table()
    if not args.no_up:
        started = time.monotonic()
        subprocess.run(["make", "cluster"], cwd=ROOT, check=True, stdout=sys.stderr)
        _progress(f"`make cluster`: healthy in {time.monotonic() - started:.1f} s")
    try:
        measure(Target("compose", COMPOSE_BOOTSTRAP, container_pids), args, table)
    except Exception as e:  # noqa: BLE001  one line: the cluster's own logs are `docker logs`
        print(f"minibroker bench compose: against the compose cluster: {e}", file=sys.stderr)
        return 1
    if args.no_processes:
        table.notes.append("local processes skipped: --no-processes")
    else:
        base = Path(tempfile.mkdtemp(prefix="bench-compose-"))
        cluster = Cluster(base / "cluster", {})
        try:
            cluster.start()
            measure(Target("processes", cluster.bootstrap(),
                           lambda: [n.proc.pid for n in cluster.nodes if n.proc is not None]),
                    args, table)
        except Exception as e:  # noqa: BLE001  a failed run: say why, with the nodes' logs
            return report_failure("minibroker bench compose", e, cluster)
        finally:
            cluster.stop()
            shutil.rmtree(base, ignore_errors=True)
    ck, _ = confluent_kafka_modules()
    print(f"{args.records:,} records x 100 B per run, acks=all, linger.ms={LINGER_MS}, RF 3, "
          f"min.insync.replicas=2; confluent-kafka {_version(ck.version())} / librdkafka "
          f"{ck.libversion()[0]}; both clusters on this machine")
    print("\n".join(table.lines()))
    print("CPU-s/M: the three brokers' CPU seconds (utime+stime) per million records")
    for note in table.notes:
        print(note)
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r.as_json()) + "\n"
                                           for r in table.rows.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
