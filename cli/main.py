"""The `minibroker` command line.

Owns argument parsing and dispatch to the subcommands: `serve` (one broker in the
foreground, broker.main), `bench` (benchmarks, bench.cli), `analyze` (the Spark analysis,
tools.analyze), `chaos` (the fault harness, bench.chaos.cli), `sim` (the whole-cluster
simulation, sim.cli), `dump-log` (tools.dump_log), `delete-records` (tools.delete_records),
`log-dirs` (tools.log_dirs), `reassign-partitions` (tools.reassign_partitions),
`features` (tools.features), `delegation-tokens` (tools.delegation_tokens),
`acls` (tools.acls), `groups` (tools.groups), `share-groups` (tools.share_groups), `topics`
(tools.topics), `configs` (tools.configs), `transactions` (tools.transactions), `cluster` and `metadata-quorum`
(tools.cluster), `produce` and `consume` (console producer and consumer on the client
library), and the one-line failure when an optional dependency is missing (cli.extras). It is the top of the import graph: it may
import every package, and none imports it, so tools/ and bench/ never need each other for
the command line's sake. Like Kafka's `tools` module, it is a client of the broker and
lives apart from it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from broker import main as broker_main
from cli.extras import EXIT_MISSING, MissingExtra, missing_extra, require


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibroker",
                                     description="A small Kafka-compatible broker.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run one broker in the foreground")
    broker_main.add_arguments(serve)
    serve.set_defaults(func=broker_main.serve)

    # these parse their own arguments (main() hands them over before argparse sees an
    # option it does not know); each imports what it needs only when used: the broker
    # itself never needs pyspark or librdkafka
    for name, help_text, run in (
            ("bench", "benchmarks (see docs/BENCHMARKS.md)", _bench),
            ("chaos", "seeded fault runs against a three-node cluster, checked "
                      "(docs/RELIABILITY.md)", _chaos),
            ("sim", "the whole cluster in one deterministic simulation, many seeds, "
                    "checked (docs/RELIABILITY.md)", _sim),
            ("analyze", "Spark analysis of a data directory (docs/ANALYSIS.md)", _analyze)):
        passthrough = sub.add_parser(name, help=help_text, add_help=False)
        passthrough.add_argument("rest", nargs=argparse.REMAINDER)
        passthrough.set_defaults(func=lambda a, run=run: run(a.rest))

    from tools import (acls, cluster, configs, consume, delegation_tokens, delete_records,
                       dump_log, features, groups, log_dirs, produce, reassign_partitions,
                       share_groups, topics, transactions, users)
    for name, tool, description in (
            ("acls", acls, "add, remove and list ACLs (kafka-acls)"),
            ("delete-records", delete_records, "delete records below given offsets "
                                               "(kafka-delete-records)"),
            ("dump-log", dump_log, "print the batches and records of log segments"),
            ("delegation-tokens", delegation_tokens, "create, renew, expire and describe "
                                                     "delegation tokens "
                                                     "(kafka-delegation-tokens)"),
            ("features", features, "describe, upgrade and downgrade the cluster's feature "
                                   "levels (kafka-features)"),
            ("log-dirs", log_dirs, "describe the brokers' log directories (kafka-log-dirs)"),
            ("reassign-partitions", reassign_partitions, "move partitions' replicas between "
                                                         "brokers (kafka-reassign-partitions)"),
            ("groups", groups, "list, describe, reset and delete consumer groups "
                               "(kafka-consumer-groups)"),
            ("share-groups", share_groups, "list, describe, reset and delete share groups "
                                           "(kafka-share-groups)"),
            ("topics", topics, "list, describe, create, delete and grow topics (kafka-topics)"),
            ("configs", configs, "describe and change the configs of topics, brokers and "
                                 "groups (kafka-configs)"),
            ("produce", produce, "send one record per stdin line (kafka-console-producer)"),
            ("consume", consume, "print a topic's records, one per line "
                                 "(kafka-console-consumer)"),
            ("users", users, "add, delete and describe users' SCRAM credentials "
                             "(kafka-configs --entity-type users)"),
            ("transactions", transactions, "list and describe transactions and producers, "
                                           "find and abort hanging transactions "
                                           "(kafka-transactions)")):
        command = sub.add_parser(name, help=description)
        tool.add_arguments(command)
        command.set_defaults(func=tool.main)
    command = sub.add_parser("cluster", help="the cluster: controller, brokers with racks and "
                                             "fenced state, the metadata quorum and its lag; "
                                             "unregister a decommissioned broker")
    cluster.add_arguments(command)
    command.set_defaults(func=cluster.main)
    command = sub.add_parser("metadata-quorum", help="the metadata quorum's status or "
                                                     "replication (kafka-metadata-quorum)")
    cluster.add_quorum_arguments(command)
    command.set_defaults(func=cluster.quorum_main)
    return parser


def _analyze(argv: list[str]) -> int:
    """`minibroker analyze`, which needs the spark extra: checked before Spark starts, so
    that a missing module is one line (cli.extras) rather than a traceback minutes in."""
    prog = "minibroker analyze"
    try:
        if not {"-h", "--help"} & set(argv):
            require(prog, "spark")
        from tools.analyze import main as analyze
        return analyze(argv) or 0
    except MissingExtra as e:
        print(e, file=sys.stderr)
        return EXIT_MISSING
    except ModuleNotFoundError as e:
        missing = missing_extra(prog, e, ["spark"])
        if missing is None:
            raise
        print(missing, file=sys.stderr)
        return EXIT_MISSING


def _bench(argv: list[str]) -> int:
    """`minibroker bench`: bench.cli names what the chosen benchmark imports, checked here
    before it starts (the bench extra), and runs it."""
    from bench.cli import requirements, run

    prog = "minibroker bench"
    try:
        require(prog, "bench", requirements(argv))
        return run(argv) or 0
    except MissingExtra as e:
        print(e, file=sys.stderr)
        return EXIT_MISSING
    except ModuleNotFoundError as e:
        missing = missing_extra(prog, e, ["bench", "spark"])
        if missing is None:
            raise
        print(missing, file=sys.stderr)
        return EXIT_MISSING


def _chaos(argv: list[str]) -> int:
    """`minibroker chaos`: its workload drives librdkafka too (the bench extra)."""
    prog = "minibroker chaos"
    try:
        if not {"-h", "--help"} & set(argv):
            require(prog, "bench", ["confluent_kafka"])
        from bench.chaos.cli import main as chaos
        return chaos(argv)
    except MissingExtra as e:
        print(e, file=sys.stderr)
        return EXIT_MISSING


def _sim(argv: list[str]) -> int:
    from sim.cli import main as sim
    return sim(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # argparse's REMAINDER refuses a rest that starts with an option (--data-dir, --help),
    # so these two get their arguments directly and parse them with their own parsers
    if argv[:1] == ["analyze"]:
        return _analyze(argv[1:])
    if argv[:1] == ["bench"]:
        return _bench(argv[1:])
    if argv[:1] == ["chaos"]:
        return _chaos(argv[1:])
    if argv[:1] == ["sim"]:
        return _sim(argv[1:])
    argv, command_config = _take_command_config(argv)
    if argv[:1] == ["groups"]:  # kafka-consumer-groups names its action with an option
        from tools.groups import subcommand_first
        argv = ["groups", *subcommand_first(argv[1:])]
    args = build_parser().parse_args(argv)
    if getattr(args, "cluster_command", None) == "add-controller":
        # kafka-metadata-quorum's add-controller reads the new controller's own properties
        # (node.id, log.dirs, listeners) from --command-config
        args.controller_config, command_config = command_config, None
    if command_config is not None:
        from tools.admin_session import ToolError, client_settings, load_command_config
        try:
            client_settings.set(load_command_config(command_config))
        except ToolError as e:
            print(f"minibroker {args.command}: {e}", file=sys.stderr)
            return 2
    # a console tool names a connection failure itself, on one line: the client library's
    # own warnings about it (meant for applications' logs) would say it a second time
    logging.getLogger("minibroker.client").setLevel(logging.ERROR)
    bad = _bad_bootstrap(args)
    if bad is not None:  # at once, as argparse refuses a bad option: exit status 2
        print(f"minibroker {args.command}: --bootstrap-server: {bad}", file=sys.stderr)
        return 2
    try:
        status = args.func(args) or 0
        sys.stdout.flush()  # inside the try: a pipe closed early fails here, not at exit
        return status
    except BrokenPipeError:
        # the reader of our output went away (`| head`, `| grep -m1`): it has what it
        # wanted, so stop quietly and successfully, and let the final flush go nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _take_command_config(argv: list[str]) -> tuple[list[str], str | None]:
    """`--command-config FILE` (or `=FILE`), anywhere among a client tool's arguments, as
    Kafka's tools take it: the client settings (security.protocol, sasl.*, ssl.*) every
    client of the tool is made with (tools.admin_session.load_command_config)."""
    rest: list[str] = []
    path = None
    items = iter(argv)
    for item in items:
        if item == "--command-config":
            path = next(items, "")
        elif item.startswith("--command-config="):
            path = item.partition("=")[2]
        else:
            rest.append(item)
    return rest, path


def _bad_bootstrap(args: argparse.Namespace) -> str | None:
    """Why a client tool's --bootstrap-server is malformed (`h:9092:1`, `h:`, a bad port),
    None when it is fine or not given: checked before anything connects, rather than
    retried as a host name that can never resolve."""
    from client.config import check_config

    for name in ("bootstrap_server", "bootstrap_before"):
        value = getattr(args, name, None)
        if isinstance(value, str):
            try:
                check_config("common", bootstrap_servers=value)
            except (ValueError, TypeError) as e:
                return str(e)
    return None


if __name__ == "__main__":
    sys.exit(main())
