"""`minibroker topics`: list, describe, create, delete and grow topics, in the manner of
Kafka's kafka-topics.sh, on the client library's AdminClient.

    minibroker topics list --bootstrap-server 127.0.0.1:9092
    minibroker topics describe [TOPIC] [--under-replicated-partitions] \
        [--unavailable-partitions] [--under-min-isr-partitions] [--at-min-isr-partitions] \
        --bootstrap-server ...
    minibroker topics create TOPIC --partitions 3 [--replication-factor 1] \\
        [--config cleanup.policy=compact --config retention.ms=60000] --bootstrap-server ...
    minibroker topics delete TOPIC --bootstrap-server ...
    minibroker topics alter TOPIC --partitions 6 --bootstrap-server ...

What each prints is what Kafka's TopicCommand prints:
- `list`: one topic name a line, sorted, internal topics (__consumer_offsets) included
  unless --exclude-internal;
- `describe`: per topic (every topic when none is named), a line
  "Topic: T<TAB>TopicId: ID<TAB>PartitionCount: N<TAB>ReplicationFactor: R<TAB>Configs: k=v,..."
  (the configs that are not Kafka's defaults: topic overrides and the broker's own settings),
  then one line per partition
  "<TAB>Topic: T<TAB>Partition: P<TAB>Leader: L<TAB>Replicas: 0,1<TAB>Isr: 0,1".
  The reports print no topic lines and only the partition lines that one of those asked
  for picks (`Reports`): --under-replicated-partitions, an ISR smaller than the replica
  set; --unavailable-partitions, no leader, or a leader that is not among the live brokers
  DescribeCluster lists; --under-min-isr-partitions, no leader or an ISR smaller than the
  topic's min.insync.replicas; --at-min-isr-partitions, an ISR exactly that size;
- `create`: "Created topic T."; `delete` and `alter`: nothing.

Exit status 0; 1 with one line on stderr, "minibroker topics: ERROR_NAME: detail", when the
broker answers a Kafka error (TOPIC_ALREADY_EXISTS, INVALID_CONFIG,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, ...) or cannot be
reached; 2 on a bad option (a --config without "=", say).
"""

from __future__ import annotations

import argparse
import base64
import sys
import uuid
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, TextIO

from client.admin import (AdminClient, ConfigEntry, ConfigResource, NewTopic, PartitionInfo,
                          TopicDescription)
from client.errors import KafkaError
from protocol.errors import ErrorCode
from tools.admin_session import open_admin, run_admin_tool

__all__ = ["Reports", "add_arguments", "describe_lines", "main", "parse_configs", "run",
           "topic_id_text"]

DEFAULT_TIMEOUT_MS = 30000


# --- what is printed ----------------------------------------------------------------------

def topic_id_text(topic_id: uuid.UUID | None) -> str | None:
    """Kafka's Uuid.toString: the 16 bytes in URL-safe base64 without padding."""
    if topic_id is None:
        return None
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def _ids(nodes: Iterable[int]) -> str:
    return ",".join(str(n) for n in nodes)


MIN_INSYNC_REPLICAS = "min.insync.replicas"


@dataclass(frozen=True)
class Reports:
    """The partition reports of `topics describe`, as TopicCommand's DescribeOptions: with
    any asked for, a partition is printed when one of them picks it, and no topic line is.
    `live_brokers` (the node ids DescribeCluster lists) is needed by `unavailable` only."""

    under_replicated: bool = False
    unavailable: bool = False
    under_min_isr: bool = False
    at_min_isr: bool = False
    live_brokers: frozenset[int] = frozenset()

    @property
    def asked(self) -> bool:
        return self.under_replicated or self.unavailable or self.under_min_isr or self.at_min_isr

    def picks(self, p: PartitionInfo, min_isr: int) -> bool:
        leaderless = p.leader is None
        return ((self.under_replicated and len(p.replicas) - len(p.isr) > 0)
                or (self.unavailable and (leaderless or p.leader not in self.live_brokers))
                or (self.under_min_isr and (leaderless or len(p.isr) < min_isr))
                or (self.at_min_isr and len(p.isr) == min_isr))


def _min_isr(configs: Mapping[str, ConfigEntry]) -> int:
    entry = configs.get(MIN_INSYNC_REPLICAS)
    try:
        return int(entry.value) if entry is not None and entry.value is not None else 1
    except ValueError:
        return 1  # Kafka's default; a broker never answers a value that is not a number


def describe_lines(description: TopicDescription, configs: Mapping[str, ConfigEntry],
                   reports: Reports = Reports()) -> list[str]:
    """TopicCommand's lines for one topic (without line ends)."""
    partitions = sorted(description.partitions, key=lambda p: p.partition)
    lines = []
    min_isr = _min_isr(configs)
    if not reports.asked:
        replication_factor = len(partitions[0].replicas) if partitions else 0
        overrides = ",".join(f"{e.name}={e.value}" for e in configs.values()
                             if not e.is_default)
        head = f"Topic: {description.name}"
        topic_id = topic_id_text(description.topic_id)
        if topic_id is not None:
            head += f"\tTopicId: {topic_id}"
        lines.append(f"{head}\tPartitionCount: {len(partitions)}"
                     f"\tReplicationFactor: {replication_factor}\tConfigs: {overrides}")
    for p in partitions:
        if reports.asked and not reports.picks(p, min_isr):
            continue
        leader = "none" if p.leader is None else str(p.leader)
        lines.append(f"\tTopic: {description.name}\tPartition: {p.partition}"
                     f"\tLeader: {leader}\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
    return lines


def parse_configs(items: list[str]) -> dict[str, str]:
    """--config k=v items as a dict; ValueError on an item without "=" or a key."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f'invalid topic config {item!r}: all configs must be in the '
                             f'format "key=val"')
        out[key.strip()] = value.strip()
    return out


# --- the commands -------------------------------------------------------------------------

async def _topic_names(admin: AdminClient, exclude_internal: bool) -> list[str]:
    return [t.name for t in await admin.list_topics(include_internal=not exclude_internal)]


async def list_topics(admin: AdminClient, args, out: TextIO) -> None:
    for name in await _topic_names(admin, args.exclude_internal):
        out.write(f"{name}\n")


async def describe(admin: AdminClient, args, out: TextIO) -> None:
    if args.topic is not None:
        names = [args.topic]
    else:
        names = await _topic_names(admin, args.exclude_internal)
    if not names:
        return
    descriptions = await admin.describe_topics(names)
    configs = await admin.describe_configs(ConfigResource("topic", n) for n in names)
    reports = Reports(under_replicated=args.under_replicated_partitions,
                      unavailable=args.unavailable_partitions,
                      under_min_isr=args.under_min_isr_partitions,
                      at_min_isr=args.at_min_isr_partitions)
    if reports.unavailable:
        cluster = await admin.describe_cluster()
        reports = replace(reports, live_brokers=frozenset(b.node_id for b in cluster.brokers))
    for name in names:
        for line in describe_lines(descriptions[name], configs[ConfigResource("topic", name)],
                                   reports):
            out.write(line + "\n")


async def create(admin: AdminClient, args, out: TextIO) -> None:
    configs = parse_configs(args.configs)
    topic = NewTopic(args.topic, -1 if args.partitions is None else args.partitions,
                     -1 if args.replication_factor is None else args.replication_factor,
                     configs)
    try:
        await admin.create_topics([topic])
    except KafkaError as e:
        if not (args.if_not_exists and e.code is ErrorCode.TOPIC_ALREADY_EXISTS):
            raise
        return
    out.write(f"Created topic {args.topic}.\n")


async def delete(admin: AdminClient, args, out: TextIO) -> None:
    try:
        await admin.delete_topics([args.topic])
    except KafkaError as e:
        if not (args.if_exists and e.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            raise


async def alter(admin: AdminClient, args, out: TextIO) -> None:
    try:
        await admin.create_partitions({args.topic: args.partitions})
    except KafkaError as e:
        if not (args.if_exists and e.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            raise


COMMANDS = {"list": list_topics, "describe": describe, "create": create, "delete": delete,
            "alter": alter}


# --- command line -------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    # kafka-topics takes --bootstrap-server before the action too: accepted on both sides
    parser.add_argument("--bootstrap-server", dest="bootstrap_before", default=None,
                        metavar="HOST:PORT", help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="topics_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT",
                       help="a broker to start from (comma-separated for several; required)")
        p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                       help="how long to wait for each answer (default %(default)s)")

    lst = sub.add_parser("list", help="every topic's name, one a line")
    common(lst)
    lst.add_argument("--exclude-internal", action="store_true",
                     help="leave out internal topics such as __consumer_offsets")

    desc = sub.add_parser("describe", help="partitions, leaders, replicas, ISR and the "
                                           "configs that are not defaults")
    desc.add_argument("topic", nargs="?", default=None, metavar="TOPIC",
                      help="the topic (default: every topic)")
    common(desc)
    desc.add_argument("--under-replicated-partitions", action="store_true",
                      help="only partitions whose ISR is smaller than their replica set")
    desc.add_argument("--unavailable-partitions", action="store_true",
                      help="only partitions with no leader, or a leader that is not a live "
                           "broker")
    desc.add_argument("--under-min-isr-partitions", action="store_true",
                      help="only partitions with no leader or an ISR smaller than the "
                           "topic's min.insync.replicas")
    desc.add_argument("--at-min-isr-partitions", action="store_true",
                      help="only partitions whose ISR is exactly min.insync.replicas")
    desc.add_argument("--exclude-internal", action="store_true",
                      help="leave out internal topics when no TOPIC is named")

    new = sub.add_parser("create", help="create a topic")
    new.add_argument("topic", metavar="TOPIC")
    common(new)
    new.add_argument("--partitions", type=int, default=None, metavar="N",
                     help="partition count (default: the broker's num.partitions)")
    new.add_argument("--replication-factor", type=int, default=None, metavar="R",
                     help="replicas per partition (default: the broker's "
                          "default.replication.factor)")
    new.add_argument("--config", dest="configs", action="extend", nargs="+", default=[],
                     metavar="KEY=VALUE", help="a topic config (repeatable)")
    new.add_argument("--if-not-exists", action="store_true",
                     help="succeed quietly when the topic already exists")

    rm = sub.add_parser("delete", help="delete a topic")
    rm.add_argument("topic", metavar="TOPIC")
    common(rm)
    rm.add_argument("--if-exists", action="store_true",
                    help="succeed quietly when the topic does not exist")

    grow = sub.add_parser("alter", help="raise a topic's partition count")
    grow.add_argument("topic", metavar="TOPIC")
    common(grow)
    grow.add_argument("--partitions", type=int, required=True, metavar="N",
                      help="the new total partition count (only ever more)")
    grow.add_argument("--if-exists", action="store_true",
                      help="succeed quietly when the topic does not exist")


async def _run(args, out: TextIO) -> None:
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-topics") as admin:
        await COMMANDS[args.topics_command](admin, args, out)


def run(args, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    args.bootstrap_server = args.bootstrap_server or getattr(args, "bootstrap_before", None)
    if not args.bootstrap_server:
        err.write(f"minibroker topics {args.topics_command}: the following arguments are "
                  f"required: --bootstrap-server\n")
        return 2
    if args.topics_command == "create":
        try:
            parse_configs(args.configs)
        except ValueError as e:
            err.write(f"minibroker topics: {e}\n")
            return 2
    return run_admin_tool("minibroker topics", _run, args, out, err)


def main(args) -> int:
    return run(args)
