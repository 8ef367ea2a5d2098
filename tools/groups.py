"""`minibroker groups`: list, describe, reset and delete consumer groups, in the manner of
Kafka's kafka-consumer-groups.sh, on the client library's AdminClient.

    minibroker groups list --bootstrap-server 127.0.0.1:9092
    minibroker groups describe GROUP --bootstrap-server 127.0.0.1:9092 [--members | --state]
    minibroker groups reset-offsets --group G --topic T --to-earliest --execute ...
    minibroker groups delete --group G ...
    minibroker groups delete-offsets --group G --topic T ...

Kafka's spelling is accepted as well (`subcommand_first`): `--list`, `--describe --group
G`, `--reset-offsets`, `--delete`, `--delete-offsets` anywhere among the options. The
changes are tools.group_admin's; listing and describing are here.

`list` asks every broker (ListGroups) and prints GROUP, TYPE (Classic, or Consumer for a
KIP-848 group), STATE and PROTOCOL-TYPE. `describe`
asks the group's coordinator for the group (DescribeGroups) and its committed offsets
(OffsetFetch), asks the partition leaders for their log end offsets (ListOffsets, latest)
and prints Kafka's table: one row per partition that is assigned or has a committed offset,
with the lag. `--members` prints one row per member with its decoded assignment, `--state`
the one-line summary. A KIP-848 consumer group (DescribeGroups answers GROUP_ID_NOT_FOUND
for it, as in Kafka 4.0) is described with ConsumerGroupDescribe: `--members` adds each
member's CURRENT-EPOCH and CURRENT-ASSIGNMENT beside the TARGET-EPOCH and TARGET-ASSIGNMENT
the coordinator computed, `--state` the GROUP-EPOCH and TARGET-ASSIGNMENT-EPOCH, and the
ASSIGNMENT-STRATEGY is the server-side assignor. As in Kafka, "has no active members" and
"is rebalancing" go to stderr.

Exit status 0; 1, with one line on stderr, when the group does not exist (DescribeGroups
answers Dead or GROUP_ID_NOT_FOUND), the broker cannot be reached or answers an error.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

import trio

from client.admin import AdminClient
from client.errors import KafkaError
from client.types import TopicPartition
from protocol.errors import ErrorCode
from tools.admin_session import ToolError, one_line, open_admin
from tools.group_admin import (DRY_RUN_WARNING, GroupActive, ResetSpec, delete_groups,
                               delete_offsets, parse_datetime, parse_topic_partitions,
                               reset_offsets)

__all__ = ["GroupNotFound", "GroupListing", "GroupDescription", "Member", "PartitionRow",
           "list_groups", "describe_group", "log_end_offsets", "add_reset_arguments",
           "reset_spec", "main", "run", "subcommand_first"]

MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE
DEFAULT_TIMEOUT_MS = 5000
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


class GroupNotFound(ToolError):
    def __init__(self, group: str):
        super().__init__(f"Consumer group '{group}' does not exist.")
        self.group = group


@dataclass
class GroupListing:
    group_id: str
    state: str
    protocol_type: str
    group_type: str = "Classic"  # Kafka's GroupType: "Classic" or "Consumer" (KIP-848)


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]] = field(default_factory=dict)
    # a KIP-848 member: its epoch and what the coordinator's target gives it
    member_epoch: int | None = None
    target: dict[str, list[int]] | None = None

    @property
    def partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, ps in sorted(self.assignment.items()) for p in sorted(ps)]


@dataclass
class PartitionRow:
    topic: str
    partition: int
    current_offset: int | None  # committed; None when nothing is committed
    log_end_offset: int | None  # None when the leader could not tell
    member: Member | None

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.current_offset


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignment strategy ("range", ...); "" when Empty
    coordinator: tuple[int, str, int]  # node id, host, port
    members: list[Member]
    rows: list[PartitionRow]
    # KIP-848 consumer groups: "Consumer", the group epoch and the target assignment's
    group_type: str = "Classic"
    group_epoch: int | None = None
    assignment_epoch: int | None = None


# --- talking to the cluster ----------------------------------------------------------

async def list_groups(admin: AdminClient) -> list[GroupListing]:
    """Every group of every broker, sorted by id."""
    listed = await admin.list_groups()
    # ListGroups before v4 gives no state: ask the groups' coordinators
    unknown = [g.group_id for g in listed if g.state is None]
    states = ({gid: d.state for gid, d in (await admin.describe_groups(unknown)).items()}
              if unknown else {})
    return [GroupListing(g.group_id, g.state or states.get(g.group_id, MISSING),
                         g.protocol_type, (g.group_type or "classic").capitalize())
            for g in listed]


async def describe_group(admin: AdminClient, group: str) -> GroupDescription:
    """DescribeGroups + OffsetFetch on the coordinator, ListOffsets on the leaders.
    Raises GroupNotFound for a Dead or unknown group."""
    try:
        g = (await admin.describe_groups([group]))[group]
    except KafkaError as e:
        if e.code is ErrorCode.GROUP_ID_NOT_FOUND:
            # Kafka 4.0 describes classic groups only with DescribeGroups
            return await _describe_consumer_group(admin, group)
        raise
    if g.state == "Dead":
        raise GroupNotFound(group)
    members = []
    for described in g.members:
        members.append(Member(described.member_id, described.group_instance_id,
                              described.client_id, described.client_host,
                              _by_topic(described.assignment)))
    return await _with_offsets(admin, group, g.state, g.protocol_type, g.protocol,
                               g.coordinator, members)


def _by_topic(partitions) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in partitions:
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


async def _describe_consumer_group(admin: AdminClient, group: str) -> GroupDescription:
    """A KIP-848 group, from ConsumerGroupDescribe: its members with their epochs and
    their current and target assignments."""
    try:
        g = (await admin.describe_consumer_groups([group]))[group]
    except KafkaError as e:
        if e.code is ErrorCode.GROUP_ID_NOT_FOUND:
            raise GroupNotFound(group) from None
        raise
    members = [Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                      _by_topic(m.assignment), m.member_epoch, _by_topic(m.target_assignment))
               for m in g.members]
    desc = await _with_offsets(admin, group, g.state, "consumer", g.assignor, g.coordinator,
                               members)
    desc.group_type, desc.group_epoch, desc.assignment_epoch = \
        "Consumer", g.group_epoch, g.assignment_epoch
    return desc


async def _with_offsets(admin: AdminClient, group: str, state: str, protocol_type: str,
                        protocol: str, coordinator: int, members: list[Member]
                        ) -> GroupDescription:
    committed = await admin.list_consumer_group_offsets(group)
    node = admin.cluster.metadata.node(coordinator)
    # FindCoordinator's own answer stands in for a node Metadata has not listed yet
    host, port = (node.host, node.port) if node else admin.pool.nodes.get(coordinator, ("", -1))

    by_partition: dict[tuple[str, int], Member] = {}
    for m in members:
        for topic_partition in m.partitions:
            by_partition[topic_partition] = m
    partitions = sorted(set(by_partition) | {(tp.topic, tp.partition) for tp in committed})
    ends = await log_end_offsets(admin, partitions)
    rows = [PartitionRow(t, p, committed.get(TopicPartition(t, p)), ends.get((t, p)),
                         by_partition.get((t, p))) for t, p in partitions]
    return GroupDescription(group, state, protocol_type, protocol, (coordinator, host, port),
                            members, rows)


async def log_end_offsets(admin: AdminClient, partitions: list[tuple[str, int]]
                           ) -> dict[tuple[str, int], int]:
    """The latest offsets of the partitions that exist and have a leader; the others
    (a topic deleted since the commit, say) are left out and print as "-"."""
    if not partitions:
        return {}
    metadata = await admin.cluster.refresh(sorted({t for t, _ in partitions}))
    known = [TopicPartition(t, p) for t, p in partitions
             if metadata.leader_for(t, p) is not None]
    if not known:
        return {}
    ends = await admin.list_offsets(dict.fromkeys(known, "latest"))
    return {(tp.topic, tp.partition): offset for tp, offset in ends.items() if offset >= 0}


# --- printing ----------------------------------------------------------------------

def _cell(value: Any) -> str:
    return MISSING if value is None or value == "" else str(value)


def _table(out: TextIO, header: list[str], rows: list[list[str]], widths: list[int | None]
           ) -> None:
    """Left-aligned columns, each at least its minimum width (None: the last, unpadded);
    a blank line first, as Kafka prints it."""
    cols: list[int | None] = []
    for i, minimum in enumerate(widths):
        if minimum is None:
            cols.append(None)
        else:
            cols.append(max([minimum, len(header[i])] + [len(r[i]) for r in rows]))
    out.write("\n")
    for r in [header, *rows]:
        cells = [c if w is None else c.ljust(w) for c, w in zip(r, cols)]
        out.write(" ".join(cells).rstrip() + "\n")


def _assignment_text(m: Member, assignment: dict[str, list[int]] | None = None) -> str:
    """Kafka's --members --verbose ASSIGNMENT: topic(0,1), other(2)."""
    assignment = m.assignment if assignment is None else assignment
    if not assignment:
        return MISSING
    return ", ".join(f"{t}({','.join(str(p) for p in sorted(ps))})"
                     for t, ps in sorted(assignment.items()))


def _state_notice(desc: GroupDescription, err: TextIO) -> None:
    if desc.state == "Empty":
        err.write(f"\nConsumer group '{desc.group_id}' has no active members.\n")
    elif desc.state in REBALANCING:
        err.write(f"\nWarning: Consumer group '{desc.group_id}' is rebalancing.\n")


def print_offsets(desc: GroupDescription, out: TextIO, err: TextIO) -> None:
    _state_notice(desc, err)
    rows = [[desc.group_id, r.topic, str(r.partition), _cell(r.current_offset),
             _cell(r.log_end_offset), _cell(r.lag),
             _cell(r.member.member_id if r.member else None),
             _cell(r.member.host if r.member else None),
             _cell(r.member.client_id if r.member else None)] for r in desc.rows]
    # Members without partitions still get a row, as in Kafka.
    rows += [[desc.group_id, MISSING, MISSING, MISSING, MISSING, MISSING, _cell(m.member_id),
              _cell(m.host), _cell(m.client_id)] for m in desc.members if not m.assignment]
    if not rows:
        return
    _table(out, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "CONSUMER-ID", "HOST", "CLIENT-ID"], rows, [15, 15, 10, 15, 15, 15, 15, 15, None])


def print_members(desc: GroupDescription, out: TextIO, err: TextIO) -> None:
    _state_notice(desc, err)
    if not desc.members:
        return
    if desc.group_type == "Consumer":  # Kafka 4.0's --members --verbose for these
        rows = [[desc.group_id, _cell(m.member_id), _cell(m.group_instance_id), _cell(m.host),
                 _cell(m.client_id), str(len(m.partitions)), _cell(m.member_epoch),
                 _assignment_text(m), _cell(desc.assignment_epoch),
                 _assignment_text(m, m.target or {})] for m in desc.members]
        _table(out, ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                     "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                     "TARGET-ASSIGNMENT"], rows, [15, 15, 17, 15, 15, 11, 13, 18, 12, None])
        return
    rows = [[desc.group_id, _cell(m.member_id), _cell(m.group_instance_id), _cell(m.host),
             _cell(m.client_id), str(len(m.partitions)), _assignment_text(m)]
            for m in desc.members]
    _table(out, ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                 "#PARTITIONS", "ASSIGNMENT"], rows, [15, 15, 17, 15, 15, 11, None])


def print_state(desc: GroupDescription, out: TextIO, err: TextIO) -> None:
    _state_notice(desc, err)
    node_id, host, port = desc.coordinator
    if desc.group_type == "Consumer":
        _table(out, ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                     "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"],
               [[desc.group_id, f"{host}:{port}  ({node_id})", desc.protocol, desc.state,
                 _cell(desc.group_epoch), _cell(desc.assignment_epoch),
                 str(len(desc.members))]], [15, 25, 20, 15, 12, 24, None])
        return
    _table(out, ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
           [[desc.group_id, f"{host}:{port}  ({node_id})", desc.protocol, desc.state,
             str(len(desc.members))]], [15, 25, 20, 15, None])


def print_list(groups: list[GroupListing], out: TextIO) -> None:
    rows = [[g.group_id, g.group_type, g.state, _cell(g.protocol_type)] for g in groups]
    cols = [max([15, len("GROUP")] + [len(r[0]) for r in rows]), 8,
            max([15] + [len(r[2]) for r in rows])]
    for r in [["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"], *rows]:
        out.write(f"{r[0].ljust(cols[0])} {r[1].ljust(cols[1])} {r[2].ljust(cols[2])} "
                  f"{r[3]}\n")


# --- command line ------------------------------------------------------------------

SUBCOMMANDS = ("list", "describe", "reset-offsets", "delete", "delete-offsets")
# kafka-consumer-groups.sh names the action with an option; each is one of our subcommands
KAFKA_ACTIONS = {"--list": "list", "--describe": "describe", "--reset-offsets": "reset-offsets",
                 "--delete": "delete", "--delete-offsets": "delete-offsets"}
SCENARIOS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime")


def subcommand_first(argv: list[str]) -> list[str]:
    """`groups --reset-offsets --group G ...` (Kafka's spelling, the action anywhere) as
    `groups reset-offsets --group G ...`; our own spelling is left as it is."""
    if argv[:1] and argv[0] in SUBCOMMANDS:
        return argv
    for i, item in enumerate(argv):
        if item in KAFKA_ACTIONS:
            return [KAFKA_ACTIONS[item], *argv[:i], *argv[i + 1:]]
    return argv


def add_arguments(parser) -> None:
    parser.description = (
        "List, describe, reset and delete consumer groups (kafka-consumer-groups). Kafka's "
        "spelling works too: --list, --describe --group G, --reset-offsets, --delete, "
        "--delete-offsets.")
    sub = parser.add_subparsers(dest="groups_command", required=True)

    def common(p) -> None:
        p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                       help="a broker to start from (comma-separated for several)")
        p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS,
                       metavar="MS", help="how long to wait for each answer and for the "
                                          "coordinator (default %(default)s)")

    def groups_option(p, required: bool = True) -> None:
        which = p.add_mutually_exclusive_group(required=required)
        which.add_argument("--group", dest="groups", action="append", metavar="G",
                           help="the group (repeatable)")
        which.add_argument("--all-groups", action="store_true", help="every group")

    lst = sub.add_parser("list", help="every group: GROUP, TYPE, STATE, PROTOCOL-TYPE")
    common(lst)
    desc = sub.add_parser("describe", help="a group's partitions, offsets and lag")
    desc.add_argument("group", nargs="?", default=None, metavar="GROUP")
    desc.add_argument("--group", dest="group_option", default=None, metavar="G",
                      help="the group, as kafka-consumer-groups names it")
    common(desc)
    which = desc.add_mutually_exclusive_group()
    which.add_argument("--members", action="store_true",
                       help="one row per member, with its assignment")
    which.add_argument("--state", action="store_true",
                       help="coordinator, assignment strategy, state and member count")
    which.add_argument("--offsets", action="store_true",
                       help="one row per partition with offsets and lag (the default)")

    reset = sub.add_parser("reset-offsets", help="move an inactive group's committed "
                                                 "offsets (a dry run without --execute)")
    common(reset)
    groups_option(reset)
    topics = reset.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topic", dest="topics", action="append", metavar="T[:P,P]",
                        help="a topic, or some of its partitions (repeatable)")
    topics.add_argument("--all-topics", action="store_true",
                        help="every topic the group has committed offsets for")
    add_reset_arguments(reset, "committed offset")

    delete = sub.add_parser("delete", help="delete empty groups and their offsets")
    common(delete)
    groups_option(delete)

    delete_offsets = sub.add_parser("delete-offsets",
                                    help="delete a group's committed offsets of topics")
    common(delete_offsets)
    delete_offsets.add_argument("--group", required=True, metavar="G")
    delete_offsets.add_argument("--topic", dest="topics", action="append", required=True,
                                metavar="T[:P,P]",
                                help="a topic, or some of its partitions (repeatable)")


def _check(args) -> None:
    """Options argparse cannot check; ValueError says what is wrong (exit 2)."""
    if args.groups_command == "describe":
        option = getattr(args, "group_option", None)  # absent when a caller builds args
        if (args.group is None) == (option is None):
            raise ValueError("describe needs the group: GROUP or --group G (one of them)")
        args.group = args.group or option
    if args.groups_command in ("reset-offsets", "delete-offsets"):
        args.topic_partitions = (None if getattr(args, "all_topics", False)
                                 else parse_topic_partitions(args.topics))
    if args.groups_command == "reset-offsets":
        args.spec = reset_spec(args)


def add_reset_arguments(reset, current: str) -> None:
    """The reset scenarios and --dry-run/--execute, for this tool's reset-offsets and
    tools.share_groups' (`current`: what the group's offset is called)."""
    scenario = reset.add_mutually_exclusive_group(required=True)
    scenario.add_argument("--to-earliest", action="store_true", help="the log start offset")
    scenario.add_argument("--to-latest", action="store_true", help="the log end offset")
    scenario.add_argument("--to-current", action="store_true",
                          help=f"the {current} (the log end where there is none)")
    scenario.add_argument("--to-offset", type=int, metavar="N",
                          help="offset N, within [earliest, latest]")
    scenario.add_argument("--shift-by", type=int, metavar="N",
                          help=f"the {current} plus N (may be negative), within "
                               "[earliest, latest]")
    scenario.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                          help="the first offset at or after that time (local time unless "
                               "a zone such as Z or +01:00 follows)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="write the new offsets")


def reset_spec(args) -> ResetSpec:
    if args.to_earliest:
        return ResetSpec("earliest")
    if args.to_latest:
        return ResetSpec("latest")
    if args.to_current:
        return ResetSpec("current")
    if args.to_offset is not None:
        return ResetSpec("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetSpec("shift", args.shift_by)
    return ResetSpec("datetime", parse_datetime(args.to_datetime))


def run(args, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        _check(args)
    except ValueError as e:
        err.write(f"minibroker groups {args.groups_command}: {e}\n")
        return 2
    try:
        return trio.run(_run, args, out, err)
    except (GroupNotFound, GroupActive) as e:
        err.write(f"Error: {e}\n")
        return 1
    except ToolError as e:
        err.write(f"minibroker groups: {e}\n")
        return 1
    except KafkaError as e:
        err.write(f"minibroker groups: {one_line(e)}\n")
        return 1
    except (ValueError, TypeError) as e:  # a bad address
        err.write(f"minibroker groups: {e}\n")
        return 1


async def _run(args, out: TextIO, err: TextIO) -> int:
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-groups") as admin:
        command = args.groups_command
        if command == "list":
            print_list(await list_groups(admin), out)
            return 0
        if command == "describe":
            desc = await describe_group(admin, args.group)
            if args.members:
                print_members(desc, out, err)
            elif args.state:
                print_state(desc, out, err)
            else:
                print_offsets(desc, out, err)
            return 0
        if command == "delete-offsets":
            return await delete_offsets(admin, args.group, args.topic_partitions, out, err)
        groups = (sorted(g.group_id for g in await admin.list_groups()) if args.all_groups
                  else list(dict.fromkeys(args.groups)))
        if command == "delete":
            return await delete_groups(admin, groups, out, err)
        if not (args.execute or args.dry_run):
            err.write(DRY_RUN_WARNING + "\n")
        plans = await reset_offsets(admin, groups, args.topic_partitions, args.spec,
                                    args.execute, out, err)
        return 0 if len(plans) == len(groups) else 1


def main(args) -> int:
    return run(args)
