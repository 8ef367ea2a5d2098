"""`minibroker acls`: add, remove and list ACLs, in the manner of Kafka's kafka-acls.sh, on the
client library's AdminClient.

    minibroker acls --bootstrap-server 127.0.0.1:9092 --add --allow-principal User:alice \\
        --operation Read --operation Describe --topic orders --group billing
    minibroker acls --bootstrap-server 127.0.0.1:9092 --add --deny-principal User:bob \\
        --deny-host 10.0.0.9 --operation Write --topic pay --resource-pattern-type prefixed
    minibroker acls --bootstrap-server 127.0.0.1:9092 --list [--topic orders \\
        --resource-pattern-type match] [--principal User:alice]
    minibroker acls --bootstrap-server 127.0.0.1:9092 --remove --allow-principal User:alice \\
        --operation Read --topic orders

`--add` makes one ACL per (resource, principal, host, operation): each --allow-principal with
each --allow-host (default *), each --deny-principal with each --deny-host (default *).
Resources: --topic, --group, --transactional-id (repeatable), --cluster. Pattern type:
literal (default for --add) or prefixed; --list and --remove also take match and any (the
default for --list). `--remove` deletes the ACLs matching those fields (with no principal
given: every principal's, with no operation: every operation's). `--list` prints, per resource
pattern, its ACLs as kafka-acls does. Exit 0; 1 with one line on stderr on a refusal.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from client.admin import AclBinding, AclBindingFilter, AdminClient
from tools.admin_session import ToolError, open_admin, run_admin_tool

__all__ = ["main", "run", "add_arguments"]

DEFAULT_TIMEOUT_MS = 10000
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
RESOURCE_NAMES = {TOPIC: "TOPIC", GROUP: "GROUP", CLUSTER: "CLUSTER",
                  TRANSACTIONAL_ID: "TRANSACTIONAL_ID"}
PATTERNS = {"any": 1, "match": 2, "literal": 3, "prefixed": 4}
PATTERN_NAMES = {v: k.upper() for k, v in PATTERNS.items()}
OPERATIONS = {"all": 2, "read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7,
              "describe": 8, "clusteraction": 9, "describeconfigs": 10, "alterconfigs": 11,
              "idempotentwrite": 12, "createtokens": 13, "describetokens": 14}
OPERATION_NAMES = {v: k.upper() for k, v in OPERATIONS.items()} | {
    9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE",
    13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS"}
DENY, ALLOW = 2, 3


def add_arguments(parser) -> None:
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove matching ACLs")
    action.add_argument("--list", action="store_true", help="list matching ACLs")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="a broker to start from (comma-separated for several)")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    parser.add_argument("--principal", action="append", default=[],
                        help="--list: only this principal's ACLs")
    parser.add_argument("--operation", action="append", default=[],
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                             "DescribeConfigs, AlterConfigs, IdempotentWrite, All")
    parser.add_argument("--topic", action="append", default=[])
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--transactional-id", action="append", default=[])
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--resource-pattern-type", choices=sorted(PATTERNS), default=None)
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS")


def _operation(name: str) -> int:
    key = name.replace("_", "").replace("-", "").lower()
    if key not in OPERATIONS:
        raise ToolError(f"unknown operation {name!r}")
    return OPERATIONS[key]


def _resources(args) -> list[tuple[int, str]]:
    out = [(TOPIC, t) for t in args.topic] + [(GROUP, g) for g in args.group]
    out += [(TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((CLUSTER, "kafka-cluster"))
    return out


def bindings_to_add(args) -> list[AclBinding]:
    pattern = PATTERNS[args.resource_pattern_type or "literal"]
    if pattern not in (PATTERNS["literal"], PATTERNS["prefixed"]):
        raise ToolError("--add takes --resource-pattern-type literal or prefixed")
    resources = _resources(args)
    if not resources:
        raise ToolError("--add needs a resource: --topic, --group, --transactional-id or "
                        "--cluster")
    if not args.operation:
        raise ToolError("--add needs at least one --operation")
    entries = [(p, h, ALLOW) for p in args.allow_principal for h in args.allow_host or ["*"]]
    entries += [(p, h, DENY) for p in args.deny_principal for h in args.deny_host or ["*"]]
    if not entries:
        raise ToolError("--add needs --allow-principal or --deny-principal")
    return [AclBinding(rtype, name, pattern, principal, host, _operation(op), permission)
            for rtype, name in resources for principal, host, permission in entries
            for op in args.operation]


def filters(args, *, default_pattern: str) -> list[AclBindingFilter]:
    pattern = PATTERNS[args.resource_pattern_type or default_pattern]
    resources: list[tuple[int, str | None]] = list(_resources(args)) or [(1, None)]
    operations = [_operation(op) for op in args.operation] or [1]
    entries: list[tuple[str | None, str | None, int]] = [
        (p, h, ALLOW) for p in args.allow_principal for h in args.allow_host or [None]]
    entries += [(p, h, DENY) for p in args.deny_principal for h in args.deny_host or [None]]
    entries += [(p, None, 1) for p in args.principal]
    return [AclBindingFilter(rtype, name, pattern, principal, host, op, permission)
            for rtype, name in resources for principal, host, permission in entries or
            [(None, None, 1)] for op in operations]


def format_acls(bindings: list[AclBinding]) -> str:
    """kafka-acls' listing: each resource pattern, then its ACLs."""
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in sorted(bindings, key=lambda b: (b.resource_type, b.resource_name, b.pattern_type,
                                             b.principal, b.host, b.operation)):
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    lines = []
    for (rtype, name, pattern), acls in grouped.items():
        lines.append(f"Current ACLs for resource `ResourcePattern(resourceType="
                     f"{RESOURCE_NAMES.get(rtype, rtype)}, name={name}, patternType="
                     f"{PATTERN_NAMES.get(pattern, pattern)})`: ")
        for b in acls:
            verdict = "ALLOW" if b.permission_type == ALLOW else "DENY"
            lines.append(f" \t(principal={b.principal}, host={b.host}, operation="
                         f"{OPERATION_NAMES.get(b.operation, b.operation)}, "
                         f"permissionType={verdict})")
        lines.append("")
    return "\n".join(lines) + ("\n" if lines else "")


async def _run(args, out: TextIO) -> None:
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-acls") as admin:
        await run_with(admin, args, out)


async def run_with(admin: AdminClient, args: Any, out: TextIO) -> None:
    if args.add:
        wanted = bindings_to_add(args)
        out.write(f"Adding ACLs for resources:\n{format_acls(wanted)}")
        await admin.create_acls(wanted)
    elif args.remove:
        if not _resources(args):
            raise ToolError("--remove needs a resource: --topic, --group, "
                            "--transactional-id or --cluster")
        deleted = await admin.delete_acls(filters(args, default_pattern="literal"))
        out.write(f"Removed ACLs:\n{format_acls(deleted)}")
    else:
        found: list[AclBinding] = []
        for f in filters(args, default_pattern="any"):
            found += [b for b in await admin.describe_acls(f) if b not in found]
        out.write(format_acls(found))


def run(args, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run_admin_tool("minibroker acls", _run, args, sys.stdout if out is None else out,
                          sys.stderr if err is None else err)


def main(args) -> int:
    return run(args)
