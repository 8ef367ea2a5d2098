"""`minibroker share-groups`: list, describe and delete share groups (KIP-932), in the
manner of Kafka's kafka-share-groups.sh, on the client library's AdminClient.

    minibroker share-groups list --bootstrap-server 127.0.0.1:9092
    minibroker share-groups describe GROUP [--members | --state] --bootstrap-server ...
    minibroker share-groups delete --group G [--group G2 ...] --bootstrap-server ...

- `list`: GROUP and STATE of every share group (ListGroups on every broker);
- `describe --members` (the default): GROUP, CONSUMER-ID, HOST, CLIENT-ID, #PARTITIONS,
  ASSIGNMENT (topic:p,p;...), one row per member (ShareGroupDescribe on the group's
  coordinator); `--state`: GROUP, COORDINATOR (ID), STATE, GROUP-EPOCH, ASSIGNMENT-EPOCH,
  #MEMBERS;
- `delete`: deletes empty share groups (NON_EMPTY_GROUP otherwise).

Exit status 0; 1 with one line on stderr when the cluster cannot be reached or the group
is not a share group. Kafka's `--offsets` view and the offset commands (reset-offsets,
delete-offsets) need the Kafka 4.1 share-group offset APIs, not served yet.
"""

from __future__ import annotations

import sys
from typing import TextIO

import trio

from client.admin import AdminClient, ShareGroupDescription
from client.errors import KafkaError
from tools.admin_session import ToolError, one_line, open_admin
from tools.group_admin import delete_groups

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


def print_state(desc: ShareGroupDescription, host: str, out: TextIO) -> None:
    _columns(out, [["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH",
                    "#MEMBERS"],
                   [desc.group_id, f"{host} ({desc.coordinator})", desc.state,
                    str(desc.group_epoch), str(desc.assignment_epoch), str(len(desc.members))]])


def add_arguments(parser) -> None:
    parser.description = "List, describe and delete share groups (kafka-share-groups)."
    sub = parser.add_subparsers(dest="share_groups_command", required=True)

    def common(p) -> None:
        p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
        p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS")

    common(sub.add_parser("list", help="every share group: GROUP, STATE"))
    desc = sub.add_parser("describe", help="a share group's members or state")
    desc.add_argument("group", metavar="GROUP")
    common(desc)
    which = desc.add_mutually_exclusive_group()
    which.add_argument("--members", action="store_true",
                       help="one row per member with its assignment (the default)")
    which.add_argument("--state", action="store_true",
                       help="coordinator, state, epochs and member count")
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
            desc = (await admin.describe_share_groups([args.group]))[args.group]
            if args.state:
                print_state(desc, _host(admin, desc.coordinator), out)
            else:
                print_members(desc, out)
            return 0
        return await delete_groups(admin, list(dict.fromkeys(args.groups)), out, err)


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
