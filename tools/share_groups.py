"""`minibroker share-groups`: list, describe, reset and delete share groups (KIP-932), in the
manner of Kafka's kafka-share-groups.sh, on the client library's AdminClient.

    minibroker share-groups list --bootstrap-server 127.0.0.1:9092
    minibroker share-groups describe GROUP [--offsets | --members | --state] --bootstrap-server ...
    minibroker share-groups reset-offsets --group G --topic T[:P,P] --to-earliest --execute ...
    minibroker share-groups delete-offsets --group G --topic T --bootstrap-server ...
    minibroker share-groups delete --group G [--group G2 ...] --bootstrap-server ...

- `list`: GROUP and STATE of every share group (ListGroups on every broker);
- `describe --offsets` (the default, as Kafka's): GROUP, TOPIC, PARTITION, START-OFFSET and
  LAG, one row per partition the group has state on (DescribeShareGroupOffsets on the
  group's coordinator, ListOffsets latest on the leaders). The start offset is the first
  record the group is not done with; LAG is the log end offset minus it, so records in
  flight past it that are already acknowledged still count (Kafka 4.2's lag leaves them
  out); `-` where the group has no state yet;
- `describe --members`: GROUP, CONSUMER-ID, HOST, CLIENT-ID, #PARTITIONS, ASSIGNMENT
  (topic:p,p;...), one row per member (ShareGroupDescribe); `--state`: GROUP, COORDINATOR
  (ID), STATE, GROUP-EPOCH, ASSIGNMENT-EPOCH, #MEMBERS;
- `reset-offsets`: the scenarios of `minibroker groups reset-offsets` (--to-earliest,
  --to-latest, --to-current, --to-offset, --shift-by, --to-datetime) over the group's
  start offsets, a dry run unless --execute (AlterShareGroupOffsets); the group must have
  no members, as in Kafka;
- `delete-offsets`: forget the group's state on whole topics (DeleteShareGroupOffsets): its
  next member starts where share.auto.offset.reset says; no members either;
- `delete`: deletes empty share groups and their state (NON_EMPTY_GROUP otherwise).

Exit status 0; 1 with one line on stderr when the cluster cannot be reached, the group is
not a share group or has members where it must have none; 2 for bad options.
"""

from __future__ import annotations

import sys
from typing import Mapping, TextIO

import trio

from client.admin import AdminClient, ShareGroupDescription
from client.errors import KafkaError
from client.types import TopicPartition
from tools.admin_session import ToolError, one_line, open_admin
from tools.group_admin import (DRY_RUN_WARNING, delete_groups, parse_topic_partitions,
                               plan_offsets, print_plans)
from tools.groups import add_reset_arguments, log_end_offsets, reset_spec

DEFAULT_TIMEOUT_MS = 30_000


def _columns(out: TextIO, rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write(" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


def print_list(groups: list[tuple[str, str]], out: TextIO) -> None:
    _columns(out, [["GROUP", "STATE"], *[[g, s] for g, s in groups]])


def print_members(desc: ShareGroupDescription, out: TextIO) -> None:
    rows = [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]]
    for m in sorted(desc.members, key=lambda m: m.member_id):
        by_topic: dict[str, list[int]] = {}
        for tp in m.assignment:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        assignment = ";".join(f"{t}:{','.join(map(str, sorted(ps)))}"
                              for t, ps in sorted(by_topic.items()))
        rows.append([desc.group_id, m.member_id, m.client_host, m.client_id,
                     str(len(m.assignment)), assignment or "-"])
    _columns(out, rows)


def print_offsets(group: str, offsets: dict[TopicPartition, int | None],
                  ends: Mapping[tuple[str, int], int], out: TextIO) -> None:
    rows = [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]]
    for tp, start in sorted(offsets.items()):
        end = ends.get(tp)
        lag = "-" if start is None or end is None else str(max(end - start, 0))
        rows.append([group, tp.topic, str(tp.partition), "-" if start is None else str(start),
                     lag])
    _columns(out, rows)


def print_state(desc: ShareGroupDescription, host: str, out: TextIO) -> None:
    _columns(out, [["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH",
                    "#MEMBERS"],
                   [desc.group_id, f"{host} ({desc.coordinator})", desc.state,
                    str(desc.group_epoch), str(desc.assignment_epoch), str(len(desc.members))]])


def add_arguments(parser) -> None:
    parser.description = ("List, describe, reset and delete share groups "
                          "(kafka-share-groups).")
    sub = parser.add_subparsers(dest="share_groups_command", required=True)

    def common(p) -> None:
        p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
        p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS")

    common(sub.add_parser("list", help="every share group: GROUP, STATE"))
    desc = sub.add_parser("describe", help="a share group's members or state")
    desc.add_argument("group", metavar="GROUP")
    common(desc)
    which = desc.add_mutually_exclusive_group()
    which.add_argument("--offsets", action="store_true",
                       help="one row per partition with its start offset and lag (the default)")
    which.add_argument("--members", action="store_true",
                       help="one row per member with its assignment")
    which.add_argument("--state", action="store_true",
                       help="coordinator, state, epochs and member count")
    reset = sub.add_parser("reset-offsets", help="move an empty share group's start offsets "
                                                 "(a dry run without --execute)")
    common(reset)
    reset.add_argument("--group", required=True, metavar="G")
    topics = reset.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topic", dest="topics", action="append", metavar="T[:P,P]",
                        help="a topic, or some of its partitions (repeatable)")
    topics.add_argument("--all-topics", action="store_true",
                        help="every partition the group has state on")
    add_reset_arguments(reset, "start offset")
    forget = sub.add_parser("delete-offsets", help="delete an empty share group's state on "
                                                   "whole topics")
    common(forget)
    forget.add_argument("--group", required=True, metavar="G")
    forget.add_argument("--topic", dest="topics", action="append", required=True, metavar="T")
    delete = sub.add_parser("delete", help="delete empty share groups")
    common(delete)
    delete.add_argument("--group", dest="groups", action="append", required=True,
                        metavar="G")


async def _run(args, out: TextIO, err: TextIO) -> int:
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-share-groups") as admin:
        command = args.share_groups_command
        if command == "list":
            listed = await admin.list_groups()
            print_list([(g.group_id, g.state or "Unknown") for g in listed
                        if (g.group_type or "").lower() == "share"], out)
            return 0
        if command == "describe":
            if not (args.state or args.members):
                offsets = await admin.list_share_group_offsets(args.group)
                print_offsets(args.group, offsets,
                              await log_end_offsets(admin, list(offsets)), out)
                return 0
            desc = (await admin.describe_share_groups([args.group]))[args.group]
            if args.state:
                print_state(desc, _host(admin, desc.coordinator), out)
            else:
                print_members(desc, out)
            return 0
        if command == "reset-offsets":
            return await _reset_offsets(admin, args, out, err)
        if command == "delete-offsets":
            await admin.delete_share_group_offsets(args.group, args.topics)
            out.write(f"Deletion of the share group offsets of {', '.join(args.topics)} for "
                      f"group '{args.group}' was successful.\n")
            return 0
        return await delete_groups(admin, list(dict.fromkeys(args.groups)), out, err)


async def _reset_offsets(admin: AdminClient, args, out: TextIO, err: TextIO) -> int:
    """Plan each partition's new start offset from the group's current ones and the log's
    offsets, print the plan, and with --execute write it."""
    topics = None if args.all_topics else parse_topic_partitions(args.topics)
    current = {tp: o for tp, o in (await admin.list_share_group_offsets(args.group)).items()
               if o is not None}
    plan = await plan_offsets(admin, reset_spec(args), topics, current)
    if not (args.execute or args.dry_run):
        err.write(DRY_RUN_WARNING + "\n")
    if args.execute and plan:
        await admin.alter_share_group_offsets(args.group, plan)
    print_plans({args.group: plan}, out)
    return 0


def _host(admin: AdminClient, node_id: int) -> str:
    node = admin.cluster.metadata.node(node_id)
    return f"{node.host}:{node.port}" if node is not None else "?"


def run(args, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        return trio.run(_run, args, out, err)
    except (ToolError, KafkaError, ValueError, TypeError) as e:
        err.write(f"minibroker share-groups: {one_line(e) if isinstance(e, KafkaError) else e}\n")
        return 1


def main(args) -> int:
    return run(args)
