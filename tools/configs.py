"""`minibroker configs`: describe and change the dynamic configs of topics, brokers and
groups, in the manner of Kafka's kafka-configs.sh, on the client library's AdminClient.

    minibroker configs --bootstrap-server H:P --describe --entity-type topics --entity-name orders
    minibroker configs --bootstrap-server H:P --describe --broker 0 [--all]
    minibroker configs --bootstrap-server H:P --alter --topic orders \\
        --add-config retention.ms=1000,cleanup.policy=[compact,delete] --delete-config segment.ms
    minibroker configs --bootstrap-server H:P --alter --entity-type brokers --entity-default \\
        --add-config unclean.leader.election.enable=true

Owns the options (Kafka's `--entity-type topics|brokers|groups` with `--entity-name X` or
`--entity-default`, and the newer shorthands `--topic X`, `--broker N`, `--broker-defaults`,
`--group G`), the `--add-config k=v,k2=[a,b]` syntax (`parse_add_config`) and the output:

- `--describe`: per entity "Dynamic configs for topic orders are:" (brokers' defaults:
  "Dynamic default configs for brokers in the cluster are:"), then one line per config whose
  source is the entity's own dynamic one, sorted, "  name=value sensitive=false
  synonyms={SOURCE:name=value, ...}"; `--all` lists every config ("All configs for ...").
  Without a name, every topic (or every broker) is described.
- `--alter`: IncrementalAlterConfigs, SET for each --add-config and DELETE for each
  --delete-config, then "Completed updating config for topic orders." (brokers' defaults:
  "Completed updating default config for brokers in the cluster."). As in Kafka, deleting
  a config that is not set dynamically is refused before anything is sent ("Invalid
  config(s): k").

Client quotas (`--entity-type users|clients|ips`, two of them for a user's client id) are
tools.quotas'. Users' SCRAM credentials are `minibroker users`.
Exit status 0; 1 with one line on stderr when the broker refuses (INVALID_CONFIG,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST for a resource type it does not serve) or
cannot be reached; 2 on bad options.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from client.admin import AdminClient, AlterConfigOp, ConfigEntry, ConfigResource
from tools import quotas
from tools.admin_session import ToolError, open_admin, run_admin_tool
from tools.quotas import QUOTA_ENTITY_TYPES, quota_entity

__all__ = ["add_arguments", "describe_lines", "main", "parse_add_config", "resolve_entity",
           "run"]

DEFAULT_TIMEOUT_MS = 30000
ENTITY_TYPES = {"topics": "topic", "brokers": "broker", "groups": "group"}
# Kafka's ConfigEntry.ConfigSource, by id
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, GROUP_CONFIG = 1, 2, 3, 8


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's --add-config: k=v pairs separated by commas; a value holding commas goes in
    square brackets (k=[a,b]). ValueError on a pair without '=' or a key."""
    pairs: list[str] = []
    depth, current = 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            pairs.append(current)
            current = ""
        else:
            current += ch
    pairs.append(current)
    out: dict[str, str] = {}
    for pair in pairs:
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--add-config: {pair.strip()!r} is not of the form k=v "
                             f"(a value with commas goes in brackets: k=[a,b])")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def resolve_entity(args: argparse.Namespace) -> tuple[str, list[Any] | None]:
    """(resource type, names) from Kafka's two spellings; names None: every entity of the
    type; the broker name "" is the cluster-wide default. A client quota entity (every
    --entity-type users, clients or ips) is ("quota", tools.quotas.quota_entity's pairs).
    ValueError on a bad mix."""
    types, names = args.entity_type or [], args.entity_name or []
    if types and all(t in QUOTA_ENTITY_TYPES for t in types):
        if any(v is not None for v in (args.topic, args.broker, args.group)) \
                or args.broker_defaults:
            raise ValueError("--topic, --broker, --broker-defaults and --group are not "
                             "quota entities")
        if any(k.upper().startswith("SCRAM-") for text in args.add_config
               for k in parse_add_config(text)):
            raise ValueError("users' SCRAM credentials: use `minibroker users`")
        return "quota", quota_entity(types, names)
    if len(types) > 1:
        raise ValueError("only client quotas (users, clients) take several --entity-type")
    if len(names) > 1:
        raise ValueError("one --entity-name (or --entity-default) for topics, brokers, groups")
    args = argparse.Namespace(**{**vars(args), "entity_type": types[0] if types else None,
                                 "entity_name": names[0] if names else None,
                                 "entity_default": bool(names) and names[0] is None})
    shorthands: list[tuple[str, str]] = [
        (t, v) for t, v in (("topic", args.topic), ("broker", args.broker),
                            ("group", args.group)) if v is not None]
    if args.broker_defaults:
        shorthands.append(("broker", ""))
    if shorthands:
        if args.entity_type or args.entity_name is not None or args.entity_default:
            raise ValueError("give either --entity-type/--entity-name or one of --topic, "
                             "--broker, --broker-defaults, --group")
        if len(shorthands) > 1:
            raise ValueError("only one of --topic, --broker, --broker-defaults, --group")
        return shorthands[0][0], [shorthands[0][1]]
    if args.entity_type is None:
        raise ValueError("--entity-type (topics, brokers or groups) is required")
    if args.entity_type not in ENTITY_TYPES:
        raise ValueError(f"--entity-type must be topics, brokers, groups, users, clients or "
                         f"ips, got {args.entity_type!r}")
    kind = ENTITY_TYPES[args.entity_type]
    if args.entity_default:
        if kind != "broker":
            raise ValueError("--entity-default is for --entity-type brokers only")
        if args.entity_name is not None:
            raise ValueError("--entity-name and --entity-default cannot be given together")
        return kind, [""]
    if args.entity_name is not None:
        if kind == "broker" and not args.entity_name.isdigit():
            raise ValueError(f"--entity-name of a broker is its id, got {args.entity_name!r}")
        return kind, [args.entity_name]
    if args.alter:
        raise ValueError("--alter needs --entity-name (or --entity-default for brokers)")
    if kind == "group":
        raise ValueError("--describe --entity-type groups needs --entity-name")
    return kind, None


def _own_source(kind: str, name: str) -> int:
    """The config source of an entity's own dynamic configs (what --describe lists)."""
    if kind == "topic":
        return DYNAMIC_TOPIC
    if kind == "group":
        return GROUP_CONFIG
    return DYNAMIC_DEFAULT_BROKER if name == "" else DYNAMIC_BROKER


def _title(kind: str, name: str, describe_all: bool) -> str:
    which = "All" if describe_all else "Dynamic"
    if kind == "broker" and name == "":
        return f"{which} default configs for brokers in the cluster are:"
    return f"{which} configs for {kind} {name} are:"


def describe_lines(kind: str, name: str, entries: dict[str, ConfigEntry],
                   describe_all: bool = False) -> list[str]:
    """ConfigCommand's lines for one entity (without line ends)."""
    own = _own_source(kind, name)
    lines = [_title(kind, name, describe_all)]
    for entry in sorted(entries.values(), key=lambda e: e.name):
        if not describe_all and entry.source != own:
            continue
        value = "null" if entry.is_sensitive or entry.value is None else entry.value
        synonyms = ", ".join(f"{SOURCES.get(source, source)}:{n}={'null' if v is None else v}"
                             for n, v, source in entry.synonyms)
        lines.append(f"  {entry.name}={value} sensitive={str(entry.is_sensitive).lower()} "
                     f"synonyms={{{synonyms}}}")
    return lines


def _completed(kind: str, name: str) -> str:
    if kind == "broker" and name == "":
        return "Completed updating default config for brokers in the cluster."
    return f"Completed updating config for {kind} {name}."


async def _names(admin: AdminClient, kind: str) -> list[str]:
    if kind == "topic":
        return [t.name for t in await admin.list_topics(include_internal=True)]
    return [str(b.node_id) for b in (await admin.describe_cluster()).brokers]


async def describe(admin: AdminClient, args: Any, out: TextIO) -> None:
    kind, names = args.resolved
    if kind == "quota":
        await quotas.describe(admin, names, out)
        return
    if names is None:
        names = await _names(admin, kind)
    resources = [ConfigResource(kind, n) for n in names]
    described = await admin.describe_configs(resources, include_synonyms=True)
    for r in resources:
        for line in describe_lines(kind, r.name, described[r], args.all):
            out.write(line + "\n")


async def alter(admin: AdminClient, args: Any, out: TextIO) -> None:
    kind, names = args.resolved
    assert names is not None
    to_set: dict[str, str] = {}
    for text in args.add_config:
        to_set.update(parse_add_config(text))
    to_delete = [k.strip() for text in args.delete_config for k in text.split(",")
                 if k.strip()]
    if not to_set and not to_delete:
        raise ToolError("--alter needs --add-config or --delete-config")
    if kind == "quota":
        await quotas.alter(admin, args.entity_type, names, to_set, to_delete, out)
        return
    assert len(names) == 1
    resource = ConfigResource(kind, names[0])
    if to_delete:
        current = (await admin.describe_configs([resource]))[resource]
        own = _own_source(kind, resource.name)
        missing = [k for k in to_delete if k not in current or current[k].source != own]
        if missing:
            raise ToolError(f"Invalid config(s): {','.join(missing)}")
    ops = [AlterConfigOp(k, v) for k, v in to_set.items()]
    ops += [AlterConfigOp(k, op="delete") for k in to_delete]
    await admin.incremental_alter_configs({resource: ops})
    out.write(_completed(kind, resource.name) + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Describe and change the dynamic configs of topics, brokers and "
                          "groups, and client quotas of users and client ids (kafka-configs). "
                          "Users' SCRAM credentials: minibroker users.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="a broker to start from (comma-separated for several)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                        help="how long to wait for each answer (default %(default)s)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list the configs")
    action.add_argument("--alter", action="store_true", help="change the configs")
    # a client quota names a user and a client id: two --entity-type, each paired in order
    # with an --entity-name or --entity-default, as kafka-configs.sh pairs them
    parser.add_argument("--entity-type", choices=[*ENTITY_TYPES, *QUOTA_ENTITY_TYPES],
                        action="append", default=None)
    parser.add_argument("--entity-name", action="append", default=None, metavar="NAME",
                        help="the topic, the broker id, the group, the user, the client id")
    parser.add_argument("--entity-default", action="append_const", const=None,
                        dest="entity_name",
                        help="the cluster-wide default of brokers, or the default user or "
                             "client id of a quota")
    parser.add_argument("--topic", default=None, metavar="T",
                        help="= --entity-type topics --entity-name T")
    parser.add_argument("--broker", default=None, metavar="ID",
                        help="= --entity-type brokers --entity-name ID")
    parser.add_argument("--broker-defaults", action="store_true",
                        help="= --entity-type brokers --entity-default")
    parser.add_argument("--group", default=None, metavar="G",
                        help="= --entity-type groups --entity-name G")
    parser.add_argument("--all", action="store_true",
                        help="with --describe: every config, not only the dynamic ones")
    parser.add_argument("--add-config", action="append", default=[], metavar="k=v[,k2=v2]",
                        help="configs to set (a value with commas in brackets: k=[a,b])")
    parser.add_argument("--delete-config", action="append", default=[], metavar="k[,k2]",
                        help="configs to remove")


async def _run(args: Any, out: TextIO) -> None:
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-configs") as admin:
        await (alter if args.alter else describe)(admin, args, out)


def run(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        args.resolved = resolve_entity(args)
        for text in args.add_config:
            parse_add_config(text)
        if args.describe and (args.add_config or args.delete_config):
            raise ValueError("--add-config and --delete-config go with --alter")
    except ValueError as e:
        err.write(f"minibroker configs: {e}\n")
        return 2
    return run_admin_tool("minibroker configs", _run, args, out, err)


def main(args: Any) -> int:
    return run(args)
