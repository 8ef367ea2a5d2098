"""`minibroker groups`: list and describe consumer groups, in the manner of Kafka's
kafka-consumer-groups.sh.

    minibroker groups list --bootstrap-server 127.0.0.1:9092
    minibroker groups describe GROUP --bootstrap-server 127.0.0.1:9092 [--members | --state]

`list` asks every broker (ListGroups) and prints GROUP, STATE and PROTOCOL-TYPE. `describe`
finds the group's coordinator (FindCoordinator, then the node's address from Metadata),
asks it for the group (DescribeGroups) and its committed offsets (OffsetFetch), asks the
partition leaders for their log end offsets (ListOffsets, latest) and prints Kafka's
table: one row per partition that is assigned or has a committed offset, with the lag.
`--members` prints one row per member with its decoded assignment, `--state` the
one-line summary. As in Kafka, "has no active members" and "is rebalancing" go to stderr.

Exit status 0; 1, with one line on stderr, when the group does not exist (DescribeGroups
answers Dead or GROUP_ID_NOT_FOUND), the broker cannot be reached or answers an error.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from protocol.consumer_protocol import decode_assignment
from protocol.errors import ErrorCode
from protocol.messages import DESCRIBE_GROUPS, LIST_GROUPS, LIST_OFFSETS, OFFSET_FETCH

from .admin_connection import (
    DEFAULT_TIMEOUT_S, RETRIABLE_COORDINATOR_ERRORS, RETRY_BACKOFF_S, AdminClient, AdminError,
    NodeConnection, error_name,
)

__all__ = ["GroupNotFound", "GroupListing", "GroupDescription", "Member", "PartitionRow",
           "list_groups", "describe_group", "main"]

MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE
LATEST = -1
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


class GroupNotFound(AdminError):
    def __init__(self, group: str):
        super().__init__(f"Consumer group '{group}' does not exist.")
        self.group = group


@dataclass
class GroupListing:
    group_id: str
    state: str
    protocol_type: str


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]] = field(default_factory=dict)

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


# --- list --------------------------------------------------------------------------

def list_groups(admin: AdminClient) -> list[GroupListing]:
    """Every group of every broker, sorted by id."""
    admin.metadata([])
    found: dict[str, GroupListing] = {}
    for node_id in sorted(admin.brokers):
        conn = admin.node(node_id)
        version = conn.version(LIST_GROUPS)
        body = conn.request(LIST_GROUPS, {"states_filter": [], "types_filter": []}).body
        if body.error_code != ErrorCode.NONE:
            raise AdminError(f"ListGroups to {conn.address} failed: "
                             f"{error_name(body.error_code)}")
        listed = [GroupListing(g.group_id, g.get("group_state") or MISSING, g.protocol_type)
                  for g in body.groups]
        if version < 4 and listed:  # no states before v4: ask the group's coordinator
            states = _states(conn, [g.group_id for g in listed])
            for g in listed:
                g.state = states.get(g.group_id, MISSING)
        for g in listed:
            found[g.group_id] = g
    return [found[k] for k in sorted(found)]


def _states(conn: NodeConnection, groups: list[str]) -> dict[str, str]:
    if not conn.supports(DESCRIBE_GROUPS):
        return {}
    body = conn.request(DESCRIBE_GROUPS, {"groups": groups,
                                          "include_authorized_operations": False}).body
    return {g.group_id: g.group_state for g in body.groups if g.error_code == ErrorCode.NONE}


# --- describe ----------------------------------------------------------------------

def describe_group(admin: AdminClient, group: str) -> GroupDescription:
    """DescribeGroups + OffsetFetch on the coordinator, ListOffsets on the leaders.
    Raises GroupNotFound for a Dead or unknown group."""
    deadline = time.monotonic() + admin.timeout
    while True:
        node_id, conn = admin.coordinator(group, deadline)
        try:
            desc = _describe(conn, group)
            committed = _committed_offsets(conn, group, desc)
            break
        except _Retry as e:
            if time.monotonic() >= deadline:
                raise AdminError(f"{e.what} for group '{group}' failed: "
                                 f"{error_name(e.code)}") from None
            admin.drop(conn)
            time.sleep(RETRY_BACKOFF_S)
    state, protocol_type, protocol, members = desc
    coordinator = (node_id, conn.host, conn.port)

    by_partition: dict[tuple[str, int], Member] = {}
    for m in members:
        for tp in m.partitions:
            by_partition[tp] = m
    partitions = sorted(set(by_partition) | set(committed))
    ends = _log_end_offsets(admin, partitions)
    rows = [PartitionRow(t, p, committed.get((t, p)), ends.get((t, p)), by_partition.get((t, p)))
            for t, p in partitions]
    return GroupDescription(group, state, protocol_type, protocol, coordinator, members, rows)


class _Retry(Exception):
    def __init__(self, what: str, code: int):
        super().__init__(what, code)
        self.what, self.code = what, code


def _describe(conn: NodeConnection, group: str):
    body = conn.request(DESCRIBE_GROUPS, {"groups": [group],
                                          "include_authorized_operations": False}).body
    g = next((g for g in body.groups if g.group_id == group), None)
    if g is None:
        raise AdminError(f"DescribeGroups from {conn.address} did not mention group '{group}'")
    if g.error_code in RETRIABLE_COORDINATOR_ERRORS:
        raise _Retry("DescribeGroups", g.error_code)
    if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND or (
            g.error_code == ErrorCode.NONE and g.group_state == "Dead"):
        raise GroupNotFound(group)
    if g.error_code != ErrorCode.NONE:
        raise AdminError(f"DescribeGroups for group '{group}' failed: "
                         f"{error_name(g.error_code)}")
    members = []
    for m in g.members:
        assignment: dict[str, list[int]] = {}
        if g.protocol_type in ("consumer", "") and m.member_assignment:
            try:
                assignment = decode_assignment(m.member_assignment).partitions
            except Exception:  # noqa: BLE001 - a foreign assignment is shown as none
                assignment = {}
        members.append(Member(m.member_id, m.get("group_instance_id"), m.client_id,
                              m.client_host, assignment))
    return g.group_state, g.protocol_type, g.protocol_data, members


def _committed_offsets(conn: NodeConnection, group: str, desc) -> dict[tuple[str, int], int]:
    """OffsetFetch for all of the group's partitions (null topics, v2+); v1 can only ask
    for named partitions, so there it asks for the assigned ones."""
    version = conn.version(OFFSET_FETCH)
    if version >= 8:
        request = {"groups": [{"group_id": group, "topics": None}], "require_stable": False}
    elif version >= 2:
        request = {"group_id": group, "topics": None, "require_stable": False}
    else:
        assigned: dict[str, list[int]] = {}
        for m in desc[3]:
            for t, ps in m.assignment.items():
                assigned.setdefault(t, []).extend(ps)
        request = {"group_id": group, "topics": [
            {"name": t, "partition_indexes": sorted(ps)} for t, ps in sorted(assigned.items())]}
    body = conn.request(OFFSET_FETCH, request).body
    if version >= 8:
        g = next((g for g in body.groups if g.group_id == group), None)
        if g is None:
            raise AdminError(f"OffsetFetch from {conn.address} did not mention group '{group}'")
        code, topics = g.error_code, g.topics
    else:
        code, topics = body.get("error_code", ErrorCode.NONE), body.topics
    if code in RETRIABLE_COORDINATOR_ERRORS:
        raise _Retry("OffsetFetch", code)
    if code == ErrorCode.GROUP_ID_NOT_FOUND:
        return {}
    if code != ErrorCode.NONE:
        raise AdminError(f"OffsetFetch for group '{group}' failed: {error_name(code)}")
    out: dict[tuple[str, int], int] = {}
    for t in topics:
        for p in t.partitions:
            if p.error_code in RETRIABLE_COORDINATOR_ERRORS:
                raise _Retry("OffsetFetch", p.error_code)
            if p.error_code == ErrorCode.NONE and p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def _log_end_offsets(admin: AdminClient, partitions: list[tuple[str, int]]
                     ) -> dict[tuple[str, int], int]:
    """ListOffsets (latest, read_uncommitted) to each partition's leader."""
    if not partitions:
        return {}
    leaders = admin.leaders(t for t, _ in partitions)
    by_leader: dict[int, dict[str, list[int]]] = {}
    for t, p in partitions:
        leader = leaders.get((t, p))
        if leader is not None:
            by_leader.setdefault(leader, {}).setdefault(t, []).append(p)
    out: dict[tuple[str, int], int] = {}
    for leader, topics in sorted(by_leader.items()):
        conn = admin.node(leader)
        version = conn.version(LIST_OFFSETS)
        body = conn.request(LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": t, "partitions": [
                {"partition_index": p, "timestamp": LATEST, "max_num_offsets": 1}
                for p in ps]} for t, ps in sorted(topics.items())]}).body
        for t in body.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.NONE:
                    continue
                if version == 0:
                    offsets = p.old_style_offsets
                    if offsets:
                        out[(t.name, p.partition_index)] = offsets[0]
                elif p.offset >= 0:
                    out[(t.name, p.partition_index)] = p.offset
    return out


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


def _assignment_text(m: Member) -> str:
    """Kafka's --members --verbose ASSIGNMENT: topic(0,1), other(2)."""
    if not m.assignment:
        return MISSING
    return ", ".join(f"{t}({','.join(str(p) for p in sorted(ps))})"
                     for t, ps in sorted(m.assignment.items()))


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
    rows = [[desc.group_id, _cell(m.member_id), _cell(m.group_instance_id), _cell(m.host),
             _cell(m.client_id), str(len(m.partitions)), _assignment_text(m)]
            for m in desc.members]
    _table(out, ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                 "#PARTITIONS", "ASSIGNMENT"], rows, [15, 15, 17, 15, 15, 11, None])


def print_state(desc: GroupDescription, out: TextIO, err: TextIO) -> None:
    _state_notice(desc, err)
    node_id, host, port = desc.coordinator
    _table(out, ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
           [[desc.group_id, f"{host}:{port}  ({node_id})", desc.protocol, desc.state,
             str(len(desc.members))]], [15, 25, 20, 15, None])


def print_list(groups: list[GroupListing], out: TextIO) -> None:
    rows = [[g.group_id, g.state, _cell(g.protocol_type)] for g in groups]
    cols = [max([15, len("GROUP")] + [len(r[0]) for r in rows]),
            max([15] + [len(r[1]) for r in rows])]
    for r in [["GROUP", "STATE", "PROTOCOL-TYPE"], *rows]:
        out.write(f"{r[0].ljust(cols[0])} {r[1].ljust(cols[1])} {r[2]}\n")


# --- command line ------------------------------------------------------------------

def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="groups_command", required=True)

    def common(p) -> None:
        p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                       help="a broker to start from (comma-separated for several)")
        p.add_argument("--timeout", type=int, default=int(DEFAULT_TIMEOUT_S * 1000),
                       metavar="MS", help="how long to wait for each answer and for the "
                                          "coordinator (default %(default)s)")

    lst = sub.add_parser("list", help="every group: GROUP, STATE, PROTOCOL-TYPE")
    common(lst)
    desc = sub.add_parser("describe", help="a group's partitions, offsets and lag")
    desc.add_argument("group", metavar="GROUP")
    common(desc)
    which = desc.add_mutually_exclusive_group()
    which.add_argument("--members", action="store_true",
                       help="one row per member, with its assignment")
    which.add_argument("--state", action="store_true",
                       help="coordinator, assignment strategy, state and member count")
    which.add_argument("--offsets", action="store_true",
                       help="one row per partition with offsets and lag (the default)")


def run(args, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        with AdminClient(args.bootstrap_server, timeout=args.timeout / 1000) as admin:
            if args.groups_command == "list":
                print_list(list_groups(admin), out)
                return 0
            desc = describe_group(admin, args.group)
            if args.members:
                print_members(desc, out, err)
            elif args.state:
                print_state(desc, out, err)
            else:
                print_offsets(desc, out, err)
            return 0
    except GroupNotFound as e:
        err.write(f"Error: {e}\n")
        return 1
    except AdminError as e:
        err.write(f"minibroker groups: {e}\n")
        return 1


def main(args) -> int:
    return run(args)
