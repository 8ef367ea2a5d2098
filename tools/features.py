"""`minibroker features`: the cluster's feature levels, as Kafka's kafka-features.sh shows
and changes them (KIP-584, KIP-778), on the client library's AdminClient.

    minibroker features --bootstrap-server H:P describe
    minibroker features --bootstrap-server H:P upgrade [--metadata 3.9] \\
        [--feature group.version=1 ...] [--dry-run]
    minibroker features --bootstrap-server H:P downgrade [--metadata 3.7-IV2] \\
        [--feature share.version=0 ...] [--unsafe] [--dry-run]
    minibroker features --bootstrap-server H:P disable --feature share.version [--unsafe]

describe prints kafka-features.sh's line per supported feature, tab-separated:
`Feature: metadata.version  SupportedMinVersion: 3.0-IV1  SupportedMaxVersion: 3.9-IV0
FinalizedVersionLevel: 3.9-IV0  Epoch: 42` (metadata.version's levels by release name,
"-" for a level or epoch not finalized). upgrade, downgrade and disable send one
UpdateFeatures (disable is a downgrade to 0) and print `FEATURE was upgraded to N.` per
feature (`can be upgraded to` with --dry-run, which validates only), or `Could not upgrade
FEATURE to N. REASON` and exit 1: the controller applies all of a request or none.
--metadata takes a release ("3.9", its last level) or a level ("3.9-IV0", "21").
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from broker.controller.features import METADATA_VERSION, metadata_version_level, release_of
from client.admin import FeatureUpdate
from client.errors import KafkaError
from tools.admin_session import ToolError, one_line, open_admin, run_admin_tool

DEFAULT_TIMEOUT_MS = 30_000
PROG = "minibroker features"


def add_arguments(parser) -> None:
    parser.description = "Describe and change the cluster's feature levels (kafka-features)."
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS")
    sub = parser.add_subparsers(dest="features_command", required=True)
    sub.add_parser("describe", help="supported ranges and finalized levels")
    for name, what in (("upgrade", "raise feature levels"),
                       ("downgrade", "lower feature levels"),
                       ("disable", "lower features to level 0")):
        p = sub.add_parser(name, help=what)
        if name != "disable":
            p.add_argument("--metadata", default=None, metavar="RELEASE",
                           help="metadata.version as a release (3.9) or level (3.9-IV0, 21)")
        p.add_argument("--feature", action="append", default=[],
                       metavar="NAME" if name == "disable" else "NAME=LEVEL")
        if name != "upgrade":
            p.add_argument("--unsafe", action="store_true",
                           help="an unsafe downgrade, which may lose metadata")
        p.add_argument("--dry-run", action="store_true", help="validate only")


def _level(feature: str, text: str) -> int:
    text = text.strip()
    if feature == METADATA_VERSION and not text.lstrip("-").isdigit():
        level = metadata_version_level(text)
        if level is None:
            raise ToolError(f"unknown metadata.version {text!r}")
        return level
    try:
        return int(text)
    except ValueError:
        raise ToolError(f"--feature {feature}: the level must be a number, got {text!r}") \
            from None


def wanted_levels(args: Any) -> dict[str, int]:
    """The features and levels the command names, in its order."""
    levels: dict[str, int] = {}
    if getattr(args, "metadata", None) is not None:
        levels[METADATA_VERSION] = _level(METADATA_VERSION, args.metadata)
    for item in args.feature:
        if args.features_command == "disable":
            levels[item.strip()] = 0
            continue
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ToolError(f"--feature takes NAME=LEVEL, got {item!r}")
        levels[name.strip()] = _level(name.strip(), value)
    if not levels:
        raise ToolError(f"{args.features_command}: name at least one --feature"
                        + ("" if args.features_command == "disable" else " or --metadata"))
    return levels


def _shown(feature: str, level: int) -> str:
    return release_of(level) if feature == METADATA_VERSION and level > 0 else str(level)


async def _describe(admin: Any, out: TextIO) -> None:
    meta = await admin.describe_features()
    epoch = "-" if meta.finalized_epoch is None else str(meta.finalized_epoch)
    for name in sorted(meta.supported):
        low, high = meta.supported[name]
        level = meta.finalized.get(name)
        out.write(f"Feature: {name}\tSupportedMinVersion: {_shown(name, low)}\t"
                  f"SupportedMaxVersion: {_shown(name, high)}\tFinalizedVersionLevel: "
                  f"{'-' if level is None else _shown(name, level)}\tEpoch: {epoch}\n")


async def _update(admin: Any, args: Any, out: TextIO) -> None:
    command = args.features_command
    op = "upgrade" if command == "upgrade" else "downgrade"
    upgrade_type = ("upgrade" if command == "upgrade"
                    else "unsafe_downgrade" if args.unsafe else "safe_downgrade")
    levels = wanted_levels(args)
    try:
        await admin.update_features(
            {f: FeatureUpdate(level, upgrade_type) for f, level in levels.items()},
            validate_only=args.dry_run, timeout_ms=args.timeout)
    except KafkaError as e:
        for feature, level in levels.items():
            out.write(f"Could not {op} {feature} to {level}. {one_line(e)}\n")
        raise ToolError(f"{len(levels)} out of {len(levels)} operation(s) failed.") from e
    verb = "can be" if args.dry_run else "was"
    for feature, level in levels.items():
        out.write(f"{feature} {verb} {op}d to {level}.\n")


async def _run(args: Any, out: TextIO) -> None:
    if args.features_command != "describe":
        wanted_levels(args)  # a bad option fails before connecting
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-features") as admin:
        if args.features_command == "describe":
            await _describe(admin, out)
        else:
            await _update(admin, args, out)


def run(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run_admin_tool(PROG, _run, args, sys.stdout if out is None else out,
                          sys.stderr if err is None else err)


def main(args: Any) -> int:
    return run(args)
