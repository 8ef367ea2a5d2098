"""`minibroker reassign-partitions`: move partitions' replicas between brokers (KIP-455), in
the manner of Kafka's kafka-reassign-partitions.sh and with its JSON files, on the client
library's AdminClient.

    minibroker reassign-partitions --bootstrap-server H:P --generate \\
        --topics-to-move-json-file topics.json --broker-list 3,4
    minibroker reassign-partitions --bootstrap-server H:P --execute \\
        --reassignment-json-file plan.json
    minibroker reassign-partitions --bootstrap-server H:P --verify --reassignment-json-file plan.json
    minibroker reassign-partitions --bootstrap-server H:P --cancel --reassignment-json-file plan.json

- `--generate` reads `{"topics": [{"topic": "t"}], "version": 1}` and prints the current
  assignment and a proposed one that spreads the replicas (each partition keeps its count)
  and the preferred leaders evenly over the brokers of --broker-list, on distinct racks
  where the brokers have racks, moving as few replicas as that needs
  (tools/reassignment_plan.py says the rule; --disable-rack-aware ignores racks, as
  Kafka's tool does). Every broker of the list must be running
  (listed by DescribeCluster), none twice. Nothing is changed.
- `--execute` reads `{"version": 1, "partitions": [{"topic": "t", "partition": 0,
  "replicas": [3, 4], "log_dirs": ["any", "/data/b"]}]}`, prints the current assignment
  (to save for a rollback) and starts the moves (AlterPartitionReassignments). "log_dirs"
  (optional, one absolute path or "any" per replica) moves the replica to that log
  directory of its broker (AlterReplicaLogDirs), as Kafka's tool does: a replica the
  broker does not have yet (it joins with this reassignment) is asked again until it
  has it or --timeout passes. With `--throttle B` (bytes/s) it first sets the replication
  throttles of KIP-73, as Kafka's tool: the rate on every broker a move reads from or
  writes to, and on each topic the replicas read from (leader-throttled) and those added
  (follower-throttled).
- `--verify` says for each partition of the file whether its move is done (its replicas
  are the file's, no move in progress) or still in progress, and for each replica given a
  log directory whether it is there (DescribeLogDirs: in that directory, no future
  replica left); exit 1 while any runs. Once all are done it removes the throttles (every
  broker's rates, the file's topics' throttled replicas) unless `--preserve-throttles`.
- `--cancel` cancels the moves of the file's partitions (back to the replicas before).

Exit status 0; 1 with one line on stderr for a file it cannot use, a partition refused
(INVALID_REPLICA_ASSIGNMENT for an unknown broker or a repeated one, and so on) or a
cluster it cannot reach.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

import trio

from broker.replication.quota import (FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE,
                                      LEADER_REPLICAS)
from client.admin import AdminClient, AlterConfigOp, ConfigResource
from protocol.errors import ErrorCode
from client.types import TopicPartition
from tools.admin_session import ToolError, open_admin, run_admin_tool
from tools.reassignment_plan import PlanError, propose

DEFAULT_TIMEOUT_MS = 30_000
PROG = "minibroker reassign-partitions"


def _load(path: str) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ToolError(f"{path} is not JSON: {e}") from None


def parse_plan(doc: Any) -> dict[TopicPartition, list[int]]:
    """A reassignment file -> {partition: replicas}; ToolError says what is wrong."""
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ToolError('the reassignment file needs a non-empty "partitions" list')
    out: dict[TopicPartition, list[int]] = {}
    for e in entries:
        replicas = e.get("replicas") if isinstance(e, dict) else None
        if (not isinstance(e, dict) or not isinstance(e.get("topic"), str)
                or not isinstance(e.get("partition"), int) or not isinstance(replicas, list)
                or not all(isinstance(r, int) for r in replicas)):
            raise ToolError(f'each partition needs "topic", "partition" and "replicas": {e}')
        dirs = e.get("log_dirs")
        if dirs is not None and (
                not isinstance(dirs, list) or len(dirs) != len(replicas)
                or not all(isinstance(d, str) and (d == "any" or d.startswith("/"))
                           for d in dirs)):
            raise ToolError(f'"log_dirs" needs one absolute path or "any" per replica: {e}')
        tp = TopicPartition(e["topic"], e["partition"])
        if tp in out:
            raise ToolError(f"partition {tp.topic}-{tp.partition} is listed twice")
        out[tp] = replicas
    return out


def parse_log_dirs(doc: Any) -> dict[tuple[TopicPartition, int], str]:
    """The file's log directory moves: {(partition, broker): path}, "any" left out (the
    file is checked by `parse_plan` first)."""
    out = {}
    for e in doc["partitions"]:
        for broker, path in zip(e["replicas"], e.get("log_dirs") or []):
            if path != "any":
                out[(TopicPartition(e["topic"], e["partition"]), broker)] = path
    return out


async def _move_log_dirs(admin: AdminClient, moves: dict[tuple[TopicPartition, int], str],
                         timeout_ms: int, out: TextIO) -> None:
    """AlterReplicaLogDirs for each replica move, asked again while its broker does not
    have the replica yet (REPLICA_NOT_AVAILABLE), as Kafka's tool does."""
    deadline = time.monotonic() + timeout_ms / 1000
    left = dict(moves)
    while left:
        results = await admin.alter_replica_log_dirs(left, timeout_ms=timeout_ms)
        waiting = {k: left[k] for k, e in results.items()
                   if e is not None and e.code == ErrorCode.REPLICA_NOT_AVAILABLE}
        failed = {k: e for k, e in results.items() if e is not None and k not in waiting}
        started = sorted(k for k, e in results.items() if e is None)
        if started:
            out.write("Successfully started log directory move for: " + ",".join(
                f"{tp.topic}-{tp.partition}-{b}" for tp, b in started) + "\n")
        if failed:
            (tp, b), e = sorted(failed.items())[0]
            raise ToolError(f"moving {tp.topic}-{tp.partition} on broker {b} to {moves[(tp, b)]}"
                            f": {type(e).__name__}: {e}")
        left = waiting
        if left:
            if time.monotonic() >= deadline:
                (tp, b), _ = sorted(left.items())[0]
                raise ToolError(f"broker {b} still has no replica of {tp.topic}-{tp.partition} "
                                "to move between its log directories")
            await trio.sleep(0.2)


async def _log_dirs_done(admin: AdminClient, moves: dict[tuple[TopicPartition, int], str]
                         ) -> dict[tuple[TopicPartition, int], str | None]:
    """Each replica move -> None when done, else where the replica is now."""
    brokers = sorted({b for _, b in moves})
    described = await admin.describe_log_dirs(brokers, [tp for tp, _ in moves])
    out: dict[tuple[TopicPartition, int], str | None] = {}
    for (tp, b), path in moves.items():
        where, future = None, False
        for d in described.get(b, []):
            info = d.replicas.get(tp)
            if info is None:
                continue
            if info.is_future:
                future = True
            else:
                where = d.path
        out[(tp, b)] = None if where == path and not future else (where or "nowhere")
    return out


def plan_json(assignment: dict[TopicPartition, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r),
         "log_dirs": ["any"] * len(r)} for tp, r in sorted(assignment.items())]},
        separators=(",", ":"))


async def _current(admin: AdminClient, topics: list[str]) -> dict[TopicPartition, list[int]]:
    described = await admin.describe_topics(topics)
    return {TopicPartition(t, p.partition): list(p.replicas)
            for t, d in described.items() for p in d.partitions}


def throttles(current: dict[TopicPartition, list[int]], plan: dict[TopicPartition, list[int]]
              ) -> tuple[dict[str, list[str]], dict[str, list[str]], set[int]]:
    """What --throttle sets, as Kafka's tool: per topic, the leader-throttled replicas (the
    current replicas of each partition that moves, which it is read from) and the
    follower-throttled ones (the replicas it gains), as partition:broker; and the brokers of
    either side, which get the rate."""
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for tp, target in sorted(plan.items()):
        now = current.get(tp, [])
        if list(now) == list(target):
            continue
        leader.setdefault(tp.topic, []).extend(f"{tp.partition}:{b}" for b in now)
        follower.setdefault(tp.topic, []).extend(
            f"{tp.partition}:{b}" for b in target if b not in now)
        brokers.update(now, target)
    return leader, follower, brokers


async def _set_throttles(admin: AdminClient, current: dict[TopicPartition, list[int]],
                         plan: dict[TopicPartition, list[int]], rate: int, out: TextIO) -> None:
    leader, follower, brokers = throttles(current, plan)
    changes: dict[ConfigResource, list[AlterConfigOp]] = {}
    for topic in sorted(set(leader) | set(follower)):
        changes[ConfigResource("topic", topic)] = [
            AlterConfigOp(LEADER_REPLICAS, ",".join(leader.get(topic, []))),
            AlterConfigOp(FOLLOWER_REPLICAS, ",".join(follower.get(topic, [])))]
    for b in sorted(brokers):
        changes[ConfigResource("broker", str(b))] = [
            AlterConfigOp(LEADER_RATE, str(rate)), AlterConfigOp(FOLLOWER_RATE, str(rate))]
    if changes:
        await admin.incremental_alter_configs(changes)
    out.write("Warning: You must run --verify periodically, until the reassignment "
              "completes, to ensure the throttle is removed.\n"
              f"The inter-broker throttle limit was set to {rate} B/s\n")


async def _clear_throttles(admin: AdminClient, topics: list[str], out: TextIO) -> None:
    """Once every move of the file is done: the throttles off again (Kafka's --verify
    clears them on every broker of the cluster and the file's topics)."""
    brokers = [b.node_id for b in (await admin.describe_cluster()).brokers]
    changes: dict[ConfigResource, list[AlterConfigOp]] = {
        ConfigResource("broker", str(b)): [AlterConfigOp(LEADER_RATE, op="delete"),
                                           AlterConfigOp(FOLLOWER_RATE, op="delete")]
        for b in sorted(brokers)}
    for topic in topics:
        changes[ConfigResource("topic", topic)] = [
            AlterConfigOp(LEADER_REPLICAS, op="delete"),
            AlterConfigOp(FOLLOWER_REPLICAS, op="delete")]
    await admin.incremental_alter_configs(changes)
    out.write(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}\n"
              f"Clearing topic-level throttles on topics {','.join(topics)}\n")


def add_arguments(parser) -> None:
    parser.description = "Move partitions' replicas between brokers (kafka-reassign-partitions)."
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("generate", "execute", "verify", "cancel"):
        action.add_argument(f"--{name}", action="store_true")
    parser.add_argument("--topics-to-move-json-file", metavar="FILE")
    parser.add_argument("--broker-list", metavar="0,1,2")
    parser.add_argument("--disable-rack-aware", action="store_true",
                        help="--generate ignores the brokers' racks")
    parser.add_argument("--reassignment-json-file", metavar="FILE")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS")
    parser.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                        help="with --execute: the replication throttle of the moves")
    parser.add_argument("--preserve-throttles", action="store_true",
                        help="with --verify: leave the throttles set once the moves are done")


async def _run(args: Any, out: TextIO) -> None:
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-reassign-partitions") as admin:
        if args.generate:
            current = await _current(admin, args.topics)
            live = {b.node_id: b.rack for b in (await admin.describe_cluster()).brokers}
            unknown = sorted(set(args.brokers) - set(live))
            if unknown:
                raise ToolError(f"--broker-list names brokers that are not running: {unknown}")
            try:
                proposed = propose(current, args.brokers,
                                   None if args.disable_rack_aware else live)
            except PlanError as refused:
                raise ToolError(str(refused)) from None
            out.write(f"Current partition replica assignment\n{plan_json(current)}\n\n"
                      f"Proposed partition reassignment configuration\n{plan_json(proposed)}\n")
            return
        plan: dict[TopicPartition, list[int]] = args.plan
        if args.verify:
            ongoing = await admin.list_partition_reassignments(list(plan))
            current = await _current(admin, sorted({tp.topic for tp in plan}))
            out.write("Status of partition reassignment:\n")
            running = False
            for tp, replicas in sorted(plan.items()):
                done = tp not in ongoing and current.get(tp) == replicas
                running = running or not done
                out.write(f"Reassignment of partition {tp.topic}-{tp.partition} is "
                          f"{'completed' if done else 'still in progress'}.\n")
            if args.log_dirs:
                for (tp, b), where in sorted((await _log_dirs_done(admin, args.log_dirs)).items()):
                    running = running or where is not None
                    out.write(f"Reassignment of replica {tp.topic}-{tp.partition}-{b} is "
                              + ("completed.\n" if where is None else
                                 f"still in progress (current log directory {where}).\n"))
            if running:
                raise ToolError("some reassignments are still in progress")
            if not args.preserve_throttles:
                await _clear_throttles(admin, sorted({tp.topic for tp in plan}), out)
            return
        if args.execute:
            current = await _current(admin, sorted({tp.topic for tp in plan}))
            out.write("Current partition replica assignment\n\n"
                      f"{plan_json({tp: current.get(tp, []) for tp in plan})}\n\n"
                      "Save this to use as the --reassignment-json-file option during "
                      "rollback\n")
            if args.throttle >= 0:
                await _set_throttles(admin, current, plan, args.throttle, out)
            results = await admin.alter_partition_reassignments(plan)
            _report(results, "started", out)
            if args.log_dirs:
                await _move_log_dirs(admin, args.log_dirs, args.timeout, out)
            return
        else:
            results = await admin.alter_partition_reassignments(dict.fromkeys(plan))
        _report(results, "cancelled", out)


def _report(results: dict[TopicPartition, Any], verb: str, out: TextIO) -> None:
    failed = {tp: e for tp, e in results.items() if e is not None}
    for tp in sorted(set(results) - set(failed)):
        out.write(f"Successfully {verb} partition reassignment for "
                  f"{tp.topic}-{tp.partition}\n")
    if failed:
        tp, e = sorted(failed.items())[0]
        raise ToolError(f"{tp.topic}-{tp.partition}: {type(e).__name__}: {e}")


def _check(args: Any) -> None:
    if args.generate:
        if not args.topics_to_move_json_file or not args.broker_list:
            raise ToolError("--generate needs --topics-to-move-json-file and --broker-list")
        doc = _load(args.topics_to_move_json_file)
        topics = doc.get("topics") if isinstance(doc, dict) else None
        if not isinstance(topics, list) or not all(
                isinstance(t, dict) and isinstance(t.get("topic"), str) for t in topics):
            raise ToolError('the topics file needs "topics": [{"topic": "t"}, ...]')
        args.topics = [t["topic"] for t in topics]
        try:
            args.brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
        except ValueError:
            raise ToolError(f"--broker-list takes broker ids: {args.broker_list!r}") from None
        if not args.brokers:
            raise ToolError("--broker-list names no broker")
        if len(set(args.brokers)) != len(args.brokers):
            raise ToolError(f"--broker-list repeats a broker: {args.broker_list}")
    else:
        if not args.reassignment_json_file:
            raise ToolError("--execute, --verify and --cancel need --reassignment-json-file")
        doc = _load(args.reassignment_json_file)
        args.plan = parse_plan(doc)
        args.log_dirs = parse_log_dirs(doc)


def run(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run_admin_tool(PROG, _run, args, sys.stdout if out is None else out,
                          sys.stderr if err is None else err, check=_check)


def main(args: Any) -> int:
    return run(args)
