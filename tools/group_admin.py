"""`minibroker groups reset-offsets | delete | delete-offsets`: the changes
kafka-consumer-groups.sh makes to groups, on the client library's AdminClient.

    minibroker groups --reset-offsets --group G --topic T[:P,P] --to-earliest --execute ...
    minibroker groups --delete --group G ...
    minibroker groups --delete-offsets --group G --topic T[:P] ...

Owns: `parse_topic_partitions` (Kafka's "T" or "T:0,2"), `parse_datetime` (Kafka's
--to-datetime formats), `plan_reset` (the new offsets a reset scenario gives, from the
committed and the log's earliest and latest offsets, clamped as Kafka clamps), and the three
commands with their output.

reset-offsets, as ResetOffsets in Kafka's ConsumerGroupCommand:
- the partitions: each --topic T (every partition of T) or T:P,P, or --all-topics (the
  partitions the group has committed offsets for);
- the scenario: --to-earliest, --to-latest, --to-current, --to-offset N, --shift-by N
  (from the committed offset; a partition without one is an error), --to-datetime DT (the
  first offset whose timestamp is at or after DT, the log end offset when none is); every
  new offset is clamped to [earliest, latest], as Kafka's checkOffsetRange;
- the group must be inactive (Empty, or unknown: Kafka's Dead), else "Error: Assignments
  can only be reset if the group 'G' is inactive, but the current state is Stable." on
  stderr and exit 1 (Kafka prints the same and exits 0; a script wants to know); of
  several groups (--group G --group G2, --all-groups) the inactive ones are reset and each
  active one is refused so;
- without --execute it is a dry run (with a warning when --dry-run was not said either, as
  Kafka's); both print the plan "GROUP TOPIC PARTITION NEW-OFFSET"; --execute commits it
  (OffsetCommit without a member, which the coordinator accepts only while the group is
  empty).

delete: DeleteGroups, "Deletion of requested consumer groups ('G') was successful." or, per
group refused (NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND), a line under
"Deletion of some consumer groups failed:" and exit 1.

delete-offsets: OffsetDelete, then Kafka's "TOPIC PARTITION STATUS" table, a partition's
status "Successful" or "Error: ..." (GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to
the topic); exit 1 when any partition or the group was refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Mapping, TextIO

from client.admin import AdminClient
from client.errors import KafkaError
from client.types import TopicPartition
from protocol.errors import ErrorCode
from tools.admin_session import ToolError, one_line

__all__ = ["GroupActive", "ResetSpec", "parse_topic_partitions", "parse_datetime",
           "plan_reset", "plan_offsets", "resolve_partitions", "print_plans", "reset_offsets",
           "delete_groups", "delete_offsets"]

INACTIVE = ("Empty", "Dead")
DRY_RUN_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. In a future "
    "major release, the default behavior of this command will be to prompt the user before "
    "executing the reset rather than doing a dry run. You should add --dry-run explicitly "
    "if you are scripting this command and want to keep the current default behavior "
    "without prompting.")


class GroupActive(ToolError):
    def __init__(self, group: str, state: str):
        super().__init__(f"Assignments can only be reset if the group '{group}' is inactive, "
                         f"but the current state is {state}.")


@dataclass(frozen=True)
class ResetSpec:
    """One reset scenario: `kind` is earliest, latest, current, offset, shift or datetime;
    `value` the offset, the shift or the timestamp in ms."""

    kind: str
    value: int = 0


def parse_topic_partitions(items: list[str]) -> dict[str, list[int] | None]:
    """--topic items: "T" (None: every partition) or "T:0,2"; ValueError when malformed."""
    out: dict[str, list[int] | None] = {}
    for item in items:
        topic, sep, rest = item.partition(":")
        if not topic:
            raise ValueError(f"invalid --topic {item!r}: expected TOPIC or TOPIC:P,P")
        if not sep:
            out[topic] = None
            continue
        try:
            partitions = [int(p) for p in rest.split(",")]
        except ValueError:
            raise ValueError(f"invalid --topic {item!r}: partitions must be numbers, "
                             f"as in {topic}:0,1") from None
        if any(p < 0 for p in partitions):
            raise ValueError(f"invalid --topic {item!r}: partitions must be >= 0")
        if topic in out and out[topic] is None:
            continue  # every partition was asked for already
        out[topic] = sorted(set(out.get(topic) or []) | set(partitions))
    return out


_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,3})?(Z|[+-]\d{2}:?\d{2})?")


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime: 'YYYY-MM-DDTHH:mm:SS.sss' with an optional zone ('Z',
    '+01:00', '-0500'); without one, this machine's local time, as Kafka's. -> ms since the
    epoch; ValueError otherwise."""
    m = _DATETIME.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss, "
                         f"optionally with a zone (Z, +01:00)")
    base, fraction, zone = m.groups()
    iso = base + (fraction or ".").ljust(4, "0")
    if zone:
        iso += "+00:00" if zone == "Z" else (zone if ":" in zone else zone[:3] + ":" + zone[3:])
    try:
        when = datetime.fromisoformat(iso)
    except ValueError as e:
        raise ValueError(f"--to-datetime {text!r}: {e}") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as Kafka's tool reads it
    return int(when.timestamp() * 1000)


def plan_reset(spec: ResetSpec, partitions: list[TopicPartition],
               committed: Mapping[TopicPartition, int], earliest: Mapping[TopicPartition, int],
               latest: Mapping[TopicPartition, int],
               by_time: Mapping[TopicPartition, int] | None = None
               ) -> dict[TopicPartition, int]:
    """The new offset of each partition (pure: the offsets it needs are given)."""
    def clamp(tp: TopicPartition, offset: int) -> int:
        return max(earliest[tp], min(latest[tp], offset))

    out = {}
    for tp in partitions:
        if spec.kind == "earliest":
            out[tp] = earliest[tp]
        elif spec.kind == "latest":
            out[tp] = latest[tp]
        elif spec.kind == "current":
            out[tp] = committed.get(tp, latest[tp])
        elif spec.kind == "offset":
            out[tp] = clamp(tp, spec.value)
        elif spec.kind == "shift":
            if tp not in committed:
                raise ToolError(f"Cannot shift offset for partition {tp.topic}-{tp.partition} "
                                f"since there is no current committed offset")
            out[tp] = clamp(tp, committed[tp] + spec.value)
        elif spec.kind == "datetime":
            found = (by_time or {}).get(tp, -1)
            out[tp] = latest[tp] if found < 0 else clamp(tp, found)
        else:
            raise ValueError(f"unknown reset scenario {spec.kind!r}")
    return out


async def group_state(admin: AdminClient, group: str) -> str:
    """The group's state: DescribeGroups, or ConsumerGroupDescribe for a KIP-848 group;
    "Dead" when neither knows it."""
    try:
        return (await admin.describe_groups([group]))[group].state
    except KafkaError as e:
        if e.code is not ErrorCode.GROUP_ID_NOT_FOUND:
            raise
    try:
        return (await admin.describe_consumer_groups([group]))[group].state
    except KafkaError as e:
        if e.code is ErrorCode.GROUP_ID_NOT_FOUND:
            return "Dead"
        raise


async def resolve_partitions(admin: AdminClient,
                             topics: dict[str, list[int] | None] | None,
                             committed: Mapping[TopicPartition, int]) -> list[TopicPartition]:
    """The partitions named (None: the ones the group has committed offsets for); a topic
    or partition that does not exist is an error at once, not a wait for its leader."""
    if topics is None:
        return sorted(committed)
    out: list[TopicPartition] = []
    described = await admin.describe_topics(list(topics))
    for topic, partitions in topics.items():
        existing = [p.partition for p in described[topic].partitions]
        missing = sorted(set(partitions or ()) - set(existing))
        if missing:
            raise ToolError(f"topic {topic} has no partition {missing[0]} "
                            f"({len(existing)} partitions)")
        out += [TopicPartition(topic, p) for p in (existing if partitions is None
                                                   else partitions)]
    return sorted(set(out))


async def plan_offsets(admin: AdminClient, spec: ResetSpec,
                       topics: dict[str, list[int] | None] | None,
                       current: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """The new offsets of the partitions named (None: those with a `current` offset): the
    log's offsets the scenario needs, asked of the leaders, then `plan_reset`. Also
    tools.share_groups' reset-offsets, over a share group's start offsets."""
    partitions = await resolve_partitions(admin, topics, current)
    if not partitions:
        return {}
    earliest = await admin.list_offsets(dict.fromkeys(partitions, "earliest"))
    latest = await admin.list_offsets(dict.fromkeys(partitions, "latest"))
    by_time = (await admin.list_offsets(dict.fromkeys(partitions, spec.value))
               if spec.kind == "datetime" else None)
    return plan_reset(spec, partitions, current, earliest, latest, by_time)


async def reset_offsets(admin: AdminClient, groups: list[str],
                        topics: dict[str, list[int] | None] | None, spec: ResetSpec,
                        execute: bool, out: TextIO, err: TextIO | None = None
                        ) -> dict[str, dict[TopicPartition, int]]:
    """Plan (and with `execute` commit) each inactive group's new offsets; print the plan.
    A group with members is left alone, as Kafka does: GroupActive is raised when that is
    every group named, else its refusal is written to `err` and it is missing from the
    plans returned."""
    plans: dict[str, dict[TopicPartition, int]] = {}
    refused: list[GroupActive] = []
    for group in groups:
        state = await group_state(admin, group)
        if state not in INACTIVE:
            refused.append(GroupActive(group, state))
            continue
        committed = await admin.list_consumer_group_offsets(group)
        plans[group] = await plan_offsets(admin, spec, topics, committed)
    if refused and not plans:
        raise refused[0]
    for refusal in refused:
        if err is not None:
            err.write(f"Error: {refusal}\n")
    if execute:
        for group, plan in plans.items():
            if plan:
                await admin.alter_consumer_group_offsets(group, plan)
    print_plans(plans, out)
    return plans


def print_plans(plans: Mapping[str, Mapping[TopicPartition, int]], out: TextIO) -> None:
    """Kafka's printOffsetsToReset: a blank line, then GROUP TOPIC PARTITION NEW-OFFSET."""
    rows = [(g, tp.topic, str(tp.partition), str(offset))
            for g, plan in plans.items() for tp, offset in sorted(plan.items())]
    widths = [max([30] + [len(r[0]) for r in rows]), max([30] + [len(r[1]) for r in rows]), 10]
    out.write("\n")
    for r in [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), *rows]:
        out.write(f"{r[0].ljust(widths[0])} {r[1].ljust(widths[1])} "
                  f"{r[2].ljust(widths[2])} {r[3]}\n")


async def delete_groups(admin: AdminClient, groups: list[str], out: TextIO,
                        err: TextIO) -> int:
    failed: dict[str, KafkaError] = {}
    for group in groups:
        try:
            await admin.delete_groups([group])
        except KafkaError as e:
            if e.retriable:  # the cluster, not the group: say it as any other failure
                raise
            failed[group] = e
    deleted = [g for g in groups if g not in failed]
    if deleted:
        names = ", ".join(f"'{g}'" for g in deleted)
        out.write(f"Deletion of requested consumer groups ({names}) was successful.\n")
    if failed:
        err.write("Deletion of some consumer groups failed:\n")
        for group, error in failed.items():
            err.write(f"* Group '{group}' could not be deleted due to: {one_line(error)}\n")
        return 1
    return 0


async def delete_offsets(admin: AdminClient, group: str, topics: dict[str, list[int] | None],
                         out: TextIO, err: TextIO) -> int:
    partitions = await resolve_partitions(admin, topics, {})
    try:
        results = await admin.delete_consumer_group_offsets(group, partitions)
    except KafkaError as e:
        messages = {ErrorCode.GROUP_ID_NOT_FOUND: f"'{group}' does not exist.",
                    ErrorCode.INVALID_GROUP_ID: f"'{group}' is not valid.",
                    ErrorCode.GROUP_AUTHORIZATION_FAILED: f"Access to '{group}' is not "
                                                          f"authorized.",
                    ErrorCode.NON_EMPTY_GROUP: f"Deleting offsets of a consumer group "
                                               f"'{group}' is forbidden if the group is not "
                                               f"empty."}
        if e.code not in messages:
            raise
        err.write(f"\nError: {messages[e.code]}\n")
        return 1
    failed = {tp: error for tp, error in results.items() if error is not None}
    if failed:
        err.write("\nError: Encounter some partition level error, see the follow-up "
                  "details:\n")
    else:
        out.write(f"Request succeed for deleting offsets from group {group}.\n")
    out.write(f"\n{'TOPIC'.ljust(30)} {'PARTITION'.ljust(15)} STATUS\n")
    for tp, error in sorted(results.items()):
        status = "Successful" if error is None else f"Error: {error.code.name}"
        out.write(f"{tp.topic.ljust(30)} {str(tp.partition).ljust(15)} {status}\n")
    return 1 if failed else 0
