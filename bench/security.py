"""`minibroker bench security`: produce and consume throughput over TLS and SASL_SSL beside
PLAINTEXT, on one broker, in one run; then over SASL_SSL again with the authorizer on and
10,000 ACLs in the metadata log:

    minibroker bench security [--records 1000000] [--runs 3] [--acls 10000] [--json FILE]

One broker (a combined node, its own quorum) listens on three listeners side by side:
PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), with a test CA from scripts/make_certs.sh. For
each run and listener, bench.throughput's librdkafka producer (100 B values, linger.ms=5,
acks=all) writes --records records to a fresh one-partition topic, and its consumer
(assigned partition, from the start) reads them back; the broker's CPU seconds come from
/proc. The listeners take turns within a run, so a change in the machine's load falls on
all three alike.

A second broker then runs with `authorizer.class.name` set: the benchmark's user holds a
prefixed ALLOW for its topics and --acls other ACLs (literal and prefixed, on topics and
groups, for other principals) fill the index, so every Produce and Fetch is authorized
against them. Its row is the SASL_SSL figure with the authorizer's per-request cost in it.

The table prints medians with min and max, and the ratio of each listener's median to
PLAINTEXT's (the goal: SASL_SSL at 70% or more with librdkafka). Nothing here asserts a
figure; docs/BENCHMARKS.md records them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.cluster import Node, wait_for
from bench.common import BenchError, confluent_kafka_modules
from bench.replication import LINGER_MS, Table, _version, consume, produce
from harness.certs import make_certs
from harness.ports import free_port
from harness.raw import HOST

ROOT = Path(__file__).resolve().parents[1]
USER, PASSWORD = "bench", "bench-secret"
MECHANISM = "SCRAM-SHA-512"
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC_PREFIX = "bench-security-"
ACL_BATCH = 1000


def _progress(text: str) -> None:
    print(f"[bench security] {text}", file=sys.stderr, flush=True)


class SecureNode(Node):
    """A single broker with a PLAINTEXT, an SSL and a SASL_SSL listener."""

    def __init__(self, base_dir: Path, certs: Path, overrides: dict[str, str]):
        self.ports = {name: free_port() for name in LISTENERS}
        self.certs = certs
        listeners = ",".join(f"{n}://{HOST}:{p}" for n, p in self.ports.items())
        security = {
            "listeners": listeners,
            "listener.security.protocol.map": ",".join(f"{n}:{n}" for n in LISTENERS),
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.location": str(certs / "broker.pem"),
            "ssl.truststore.location": str(certs / "ca.pem"),
            "sasl.enabled.mechanisms": MECHANISM,
        }
        super().__init__(0, self.ports["PLAINTEXT"], 0, base_dir,
                         overrides={**security, **overrides})

    def command(self) -> list[str]:
        # `--listen` would name one PLAINTEXT listener: the three come from -o listeners
        cmd = [sys.executable, "-m", "broker", "serve", "--broker-id", "0",
               "--data-dir", str(self.base_dir / "data")]
        for key, value in (self.overrides or {}).items():
            cmd += ["-o", f"{key}={value}"]
        return cmd

    def bootstrap_of(self, listener: str) -> str:
        return f"{HOST}:{self.ports[listener]}"

    def client(self, listener: str) -> dict[str, str]:
        """librdkafka's properties for this listener."""
        if listener == "PLAINTEXT":
            return {}
        tls = {"ssl.ca.location": str(self.certs / "ca.pem")}
        if listener == "SSL":
            return {"security.protocol": "ssl", **tls}
        return {"security.protocol": "sasl_ssl", "sasl.mechanism": MECHANISM,
                "sasl.username": USER, "sasl.password": PASSWORD, **tls}


def _admin(node: SecureNode, listener: str = "PLAINTEXT") -> Any:
    _, admin = confluent_kafka_modules()
    return admin.AdminClient({"bootstrap.servers": node.bootstrap_of(listener),
                              "socket.timeout.ms": 10000, **node.client(listener)})


def add_user(node: SecureNode) -> None:
    """The benchmark's SCRAM user, made over PLAINTEXT (nobody is authorized there yet)."""
    _, admin_mod = confluent_kafka_modules()
    upsert = admin_mod.UserScramCredentialUpsertion(
        USER, admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_512, 8192),
        PASSWORD.encode())
    admin = _admin(node)  # held until the futures resolve: a destroyed handle fails them
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)


def add_acls(node: SecureNode, count: int, listener: str) -> None:
    """The benchmark user's prefixed ALLOW on its topics and groups, and `count` more ACLs
    for other principals, spread over literal and prefixed topic and group patterns."""
    _, a = confluent_kafka_modules()
    principal = f"User:{USER}"
    mine = [a.AclBinding(a.ResourceType.TOPIC, TOPIC_PREFIX, a.ResourcePatternType.PREFIXED,
                         principal, "*", a.AclOperation.ALL, a.AclPermissionType.ALLOW),
            a.AclBinding(a.ResourceType.GROUP, "bench-", a.ResourcePatternType.PREFIXED,
                         principal, "*", a.AclOperation.ALL, a.AclPermissionType.ALLOW)]
    others = []
    for i in range(count):
        kind = a.ResourceType.TOPIC if i % 2 == 0 else a.ResourceType.GROUP
        pattern = (a.ResourcePatternType.LITERAL if i % 3 else
                   a.ResourcePatternType.PREFIXED)
        # names that share the benchmark topics' first letters, so the prefixed lookup
        # walks real candidates rather than an empty branch
        others.append(a.AclBinding(kind, f"bench-other-{i}", pattern, f"User:u{i % 500}",
                                   "*", a.AclOperation.READ, a.AclPermissionType.ALLOW))
    admin = _admin(node, listener)
    bindings = mine + others
    for start in range(0, len(bindings), ACL_BATCH):
        for future in admin.create_acls(bindings[start:start + ACL_BATCH],
                                        request_timeout=60).values():
            future.result(90)


def fresh_topic(node: SecureNode, listener: str) -> str:
    _, admin_mod = confluent_kafka_modules()
    name = f"{TOPIC_PREFIX}{uuid.uuid4().hex[:8]}"
    admin = _admin(node, listener)
    admin.create_topics([admin_mod.NewTopic(name, 1, 1)],
                        operation_timeout=30)[name].result(35)
    wait_for(lambda: name in admin.list_topics(name, timeout=5).topics, 30,
             f"topic {name} in the metadata")
    return name


Rates = dict[str, dict[str, list]]  # label -> produce/consume -> rec/s of each run


def measure(node: SecureNode, listener: str, label: str, records: int, table: Table,
            rates: Rates, run_no: int) -> None:
    """One run's produce and consume through `listener`, into the table and `rates`."""
    assert node.proc is not None
    client = node.client(listener)
    bootstrap = node.bootstrap_of(listener)
    topic = fresh_topic(node, listener)
    pid = [node.proc.pid]
    wrote = produce(bootstrap, topic, 1, "all", records, pid, client)
    read = consume(bootstrap, topic, 1, records, pid, client)
    for what, result, n in (("produce acks=all", wrote, 1), ("consume", read, 2)):
        table.add(f"({n}) {what}: {label}", "rec/s", result["rec_per_s"])
        cpu = sum(result["broker_cpu_s_by_pid"].values()) * 1e6 / records
        table.add(f"(3) {what}, broker CPU: {label}", "cpu", cpu)
    mine = rates.setdefault(label, {"produce": [], "consume": []})
    mine["produce"].append(wrote["rec_per_s"])
    mine["consume"].append(read["rec_per_s"])
    _progress(f"run {run_no + 1} {label}: produce {wrote['rec_per_s']:,.0f} rec/s, "
              f"consume {read['rec_per_s']:,.0f} rec/s")


def _start(base: Path, certs: Path, name: str, overrides: dict[str, str]) -> SecureNode:
    node = SecureNode(base / name, certs, overrides)
    node.launch()
    node.wait_ready()
    return node


def _stop(node: SecureNode) -> None:
    node.terminate()
    node.wait_exit()


def run(args: argparse.Namespace, base: Path, table: Table) -> Rates:
    certs = base / "certs"
    make_certs(certs)
    rates: Rates = {}
    node = _start(base, certs, "plain-broker", {})
    try:
        add_user(node)
        for run_no in range(args.runs):
            for listener in LISTENERS:
                measure(node, listener, listener, args.records, table, rates, run_no)
    finally:
        _stop(node)
    if args.acls <= 0:
        return rates
    label = f"SASL_SSL, {args.acls:,} ACLs"
    node = _start(base, certs, "acl-broker", {"authorizer.class.name": AUTHORIZER,
                                              "super.users": "User:ANONYMOUS"})
    try:
        add_user(node)
        started = time.monotonic()
        add_acls(node, args.acls, "PLAINTEXT")  # ANONYMOUS on PLAINTEXT is the super user
        _progress(f"{args.acls + 2:,} ACLs created in {time.monotonic() - started:.1f} s")
        for run_no in range(args.runs):
            measure(node, "SASL_SSL", label, args.records, table, rates, run_no)
    finally:
        _stop(node)
    return rates


def ratios(rates: Rates) -> list[str]:
    base = rates["PLAINTEXT"]
    out = []
    for label, r in rates.items():
        if label == "PLAINTEXT":
            continue
        parts = [f"{what} {statistics.median(r[what]) / statistics.median(base[what]):.0%}"
                 for what in ("produce", "consume")]
        out.append(f"{label} / PLAINTEXT (medians): {', '.join(parts)} (goal for SASL_SSL: "
                   f">= 70%)")
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibroker bench security",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records (of 100 B) per run (default 1000000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument("--acls", type=int, default=10_000,
                        help="ACLs in the authorizer's run (default 10000; 0 skips that run)")
    parser.add_argument("--json", default=None, help="also write the rows as JSON lines here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.records < 1 or args.runs < 1 or args.acls < 0:
        parser.error("--records and --runs must be > 0, --acls >= 0")
    if shutil.which("openssl") is None:
        print("minibroker bench security: openssl is not installed (apt-get install openssl)",
              file=sys.stderr)
        return 2
    table = Table()
    base = Path(tempfile.mkdtemp(prefix="bench-security-"))
    try:
        rates = run(args, base, table)
    except (BenchError, subprocess.CalledProcessError, Exception) as e:  # noqa: BLE001
        print(f"minibroker bench security: {e}", file=sys.stderr)
        for log in sorted(base.glob("*/node.log")):
            tail = log.read_text(errors="replace").splitlines()[-20:]
            print(f"--- {log}:\n" + "\n".join(tail), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ck, _ = confluent_kafka_modules()
    print(f"{args.records:,} records x 100 B per run, acks=all, linger.ms={LINGER_MS}, one "
          f"partition, one broker; confluent-kafka {_version(ck.version())} / librdkafka "
          f"{ck.libversion()[0]}; SASL_SSL with {MECHANISM}")
    print("\n".join(table.lines()))
    print("CPU-s/M: the broker's CPU seconds (utime+stime) per million records")
    print("\n".join(ratios(rates)))
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r.as_json()) + "\n"
                                           for r in table.rows.values()))
    return 0
