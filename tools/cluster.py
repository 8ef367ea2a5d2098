"""`minibroker cluster describe|unregister` and `minibroker metadata-quorum describe`: the
cluster and its metadata quorum, on the client library's AdminClient (DescribeCluster,
DescribeQuorum, UnregisterBroker).

    minibroker cluster describe --bootstrap-server 127.0.0.1:9092
    minibroker cluster unregister --bootstrap-server 127.0.0.1:9092 --id 3
    minibroker metadata-quorum --bootstrap-server 127.0.0.1:9092 describe --status
    minibroker metadata-quorum --bootstrap-server 127.0.0.1:9092 describe --replication

(`metadata-quorum add-controller` and `remove-controller` are tools.quorum_change's.)

`metadata-quorum` prints what Kafka's kafka-metadata-quorum.sh prints:
- `--status`: "Key:<spaces>value" lines, ClusterId, LeaderId, LeaderEpoch, HighWatermark,
  MaxFollowerLag (entries the furthest voter is behind the leader), MaxFollowerLagTimeMs
  (how much earlier that voter was last caught up than the leader; -1 unknown),
  CurrentVoters and CurrentObservers as [id,...];
- `--replication`: a table, one row per voter then per observer, leader first: NodeId,
  DirectoryId (Kafka's base64 form; AAAAAAAAAAAAAAAAAAAAAA where none is known), LogEndOffset, Lag (entries behind the leader's log end), LastFetchTimestamp,
  LastCaughtUpTimestamp (ms since the epoch, -1 unknown) and Status (Leader, Follower,
  Observer).

`cluster describe` prints both halves at once: the cluster id and active controller, a
table of brokers (Id, Host:Port, Rack, State) and the quorum's status and replication
table. A broker DescribeCluster lists is unfenced (Kafka lists only those); a node the
quorum names (a voter or an observer) that it does not list is shown as fenced, which for
a voter can also mean a controller-only node: DescribeCluster v0-1 does not say which.

`cluster unregister --id N` removes broker N's registration, as kafka-cluster.sh unregister
does, and prints "Broker N is no longer registered.": the last step of decommissioning a
broker (docs/BROKER.md, "Adding and removing brokers"), once its replicas were moved away
and the node stopped. An id the controller does not know is BROKER_ID_NOT_REGISTERED.

Exit status 0; 1 with one line on stderr, "minibroker cluster: ERROR_NAME: detail", when no
bootstrap server answers or the broker answers a Kafka error; 2 on a bad option.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import TextIO


from client.admin import AdminClient, ClusterDescription, QuorumInfo, ReplicaState
from tools.admin_session import open_admin, run_admin_tool
from tools.quorum_change import (add_change_arguments, format_directory_id, new_controller,
                                 run_change)

__all__ = ["add_arguments", "add_quorum_arguments", "broker_rows", "describe_lines", "main",
           "quorum_main", "replication_rows", "run", "status_lines"]

DEFAULT_TIMEOUT_MS = 10000
ZERO_DIRECTORY = uuid.UUID(int=0)  # a voter of a static quorum, or one it started with
NO_RACK = "-"


# --- what is printed ----------------------------------------------------------------------

def _ids(ids) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


def _ms(value: int | None) -> str:
    return "-1" if value is None else str(value)


def status_lines(cluster_id: str | None, quorum: QuorumInfo) -> list[str]:
    """kafka-metadata-quorum's --status lines."""
    leader = next((r for r in quorum.voters if r.replica_id == quorum.leader_id), None)
    max_lag, max_lag_ms = 0, 0
    if leader is not None and quorum.voters:
        furthest = min(quorum.voters, key=lambda r: r.log_end_offset)
        max_lag = quorum.lag(furthest)
        if furthest is not leader and max_lag > 0:
            if leader.last_caught_up_timestamp is None or furthest.last_caught_up_timestamp is None:
                max_lag_ms = -1
            else:
                max_lag_ms = leader.last_caught_up_timestamp - furthest.last_caught_up_timestamp
    rows = [("ClusterId", cluster_id or "-"),
            ("LeaderId", "-1" if quorum.leader_id is None else str(quorum.leader_id)),
            ("LeaderEpoch", str(quorum.leader_epoch)),
            ("HighWatermark", str(quorum.high_watermark)),
            ("MaxFollowerLag", str(max_lag)),
            ("MaxFollowerLagTimeMs", str(max_lag_ms)),
            ("CurrentVoters", _ids(r.replica_id for r in quorum.voters)),
            ("CurrentObservers", _ids(r.replica_id for r in quorum.observers))]
    return [f"{(key + ':').ljust(24)}{value}" for key, value in rows]


def replication_rows(quorum: QuorumInfo) -> list[list[str]]:
    """kafka-metadata-quorum's --replication table, the header first: the leader, the other
    voters by id, then the observers by id."""
    def row(r: ReplicaState, status: str) -> list[str]:
        return [str(r.replica_id), format_directory_id(r.directory_id or ZERO_DIRECTORY),
                str(r.log_end_offset), str(quorum.lag(r)),
                _ms(r.last_fetch_timestamp), _ms(r.last_caught_up_timestamp), status]

    voters = sorted(quorum.voters, key=lambda r: (r.replica_id != quorum.leader_id, r.replica_id))
    rows = [["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
             "LastCaughtUpTimestamp", "Status"]]
    rows += [row(r, "Leader" if r.replica_id == quorum.leader_id else "Follower") for r in voters]
    rows += [row(r, "Observer") for r in sorted(quorum.observers, key=lambda r: r.replica_id)]
    return rows


def broker_rows(cluster: ClusterDescription, quorum: QuorumInfo | None) -> list[list[str]]:
    """The brokers table, the header first: every broker DescribeCluster lists (unfenced),
    then every quorum member it does not list (fenced), by id."""
    rows = [["Id", "Host:Port", "Rack", "State"]]
    listed = {b.node_id: b for b in cluster.brokers}
    known = set(listed)
    if quorum is not None:
        known |= {r.replica_id for r in quorum.voters + quorum.observers}
    for node_id in sorted(known):
        b = listed.get(node_id)
        if b is not None:
            state = "unfenced" + (", active controller" if node_id == cluster.controller
                                  else "")
            rows.append([str(node_id), f"{b.host}:{b.port}", b.rack or NO_RACK, state])
        else:
            rows.append([str(node_id), "-", "-", "fenced"])
    return rows


def table(rows: list[list[str]]) -> list[str]:
    """Left-aligned columns two spaces apart, the last one unpadded."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1]
            if len(r) > 1 else r[0] for r in rows]


def describe_lines(cluster: ClusterDescription, quorum: QuorumInfo) -> list[str]:
    """`cluster describe`: the cluster, its brokers, the quorum status and replication."""
    controller = "-1 (none)" if cluster.controller is None else str(cluster.controller)
    lines = [f"ClusterId:    {cluster.cluster_id}", f"Controller:   {controller}",
             f"Brokers:      {len(cluster.brokers)} unfenced", ""]
    lines += ["  " + line for line in table(broker_rows(cluster, quorum))]
    lines += ["", "Quorum:"]
    lines += ["  " + line for line in status_lines(cluster.cluster_id, quorum)[1:]]
    lines.append("")
    lines += ["  " + line for line in table(replication_rows(quorum))]
    return lines


# --- the commands -------------------------------------------------------------------------

async def _describe(admin: AdminClient, args, out: TextIO) -> None:
    cluster = await admin.describe_cluster()
    quorum = await admin.describe_quorum()
    for line in describe_lines(cluster, quorum):
        out.write(line.rstrip() + "\n")


async def _unregister(admin: AdminClient, args, out: TextIO) -> None:
    await admin.unregister_broker(args.id)
    out.write(f"Broker {args.id} is no longer registered.\n")


async def _quorum(admin: AdminClient, args, out: TextIO) -> None:
    quorum = await admin.describe_quorum()
    if args.replication:
        lines = table(replication_rows(quorum))
    else:
        cluster = await admin.describe_cluster()
        lines = status_lines(cluster.cluster_id, quorum)
    for line in lines:
        out.write(line + "\n")


# --- command line -------------------------------------------------------------------------

def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT",
                   help="a broker to start from (comma-separated for several; required)")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help="how long to wait for each answer (default %(default)s)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`minibroker cluster describe`."""
    parser.add_argument("--bootstrap-server", dest="bootstrap_before", default=None,
                        metavar="HOST:PORT", help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="cluster_command", required=True)
    desc = sub.add_parser("describe", help="cluster id, controller, brokers with racks and "
                                           "fenced state, the quorum and its lag")
    _common(desc)
    unregister = sub.add_parser("unregister", help="remove a decommissioned broker's "
                                                   "registration (kafka-cluster unregister)")
    _common(unregister)
    unregister.add_argument("--id", type=int, required=True, metavar="N",
                            help="the broker id to unregister")


def add_quorum_arguments(parser: argparse.ArgumentParser) -> None:
    """`minibroker metadata-quorum [--bootstrap-server H:P] describe --status|--replication`,
    the bootstrap server before the action as kafka-metadata-quorum.sh takes it (after it
    works too)."""
    parser.add_argument("--bootstrap-server", dest="bootstrap_before", default=None,
                        metavar="HOST:PORT", help="a broker to start from (required)")
    sub = parser.add_subparsers(dest="cluster_command", required=True)
    desc = sub.add_parser("describe", help="the metadata quorum's status or replication")
    _common(desc)
    which = desc.add_mutually_exclusive_group(required=True)
    which.add_argument("--status", action="store_true",
                       help="leader, epoch, high watermark, voters, observers, max lag")
    which.add_argument("--replication", action="store_true",
                       help="each voter's and observer's log end offset, lag and status")
    add_change_arguments(sub, _common)


async def _run(args, out: TextIO) -> None:
    if args.cluster_command == "add-controller":
        args.new_controller = new_controller(args)  # a bad file or option before connecting
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-cluster") as admin:
        if args.cluster_command in ("add-controller", "remove-controller"):
            await run_change(admin, args, out)
        elif getattr(args, "status", False) or getattr(args, "replication", False):
            await _quorum(admin, args, out)
        elif args.cluster_command == "unregister":
            await _unregister(admin, args, out)
        else:
            await _describe(admin, args, out)


def run(args, out: TextIO | None = None, err: TextIO | None = None,
        prog: str = "minibroker cluster") -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    args.bootstrap_server = args.bootstrap_server or getattr(args, "bootstrap_before", None)
    if not args.bootstrap_server:
        err.write(f"{prog} {args.cluster_command}: the following arguments are required: "
                  f"--bootstrap-server\n")
        return 2
    return run_admin_tool(prog, _run, args, out, err)


def main(args) -> int:
    return run(args)


def quorum_main(args) -> int:
    return run(args, prog="minibroker metadata-quorum")
