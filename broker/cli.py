"""The `minibroker` command line.

Owns: argument parsing and the subcommands `serve` (run one broker in the foreground),
`bench` (throughput benchmarks driving real clients, broker.bench), `dump-log` (print
segment files, broker.tools.dump_log), `groups` (list and describe consumer groups,
broker.tools.groups), `produce` and `consume` (console producer and consumer on the client
library, broker.tools.produce and broker.tools.consume). Configuration errors end the
process with one line naming the key and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from functools import partial

import trio


def _serve(args: argparse.Namespace) -> int:
    from broker.broker import Broker, parse_listener
    from broker.config import BrokerConfig, ConfigError
    from broker.server import serve

    try:
        overrides = {}
        for item in args.override:
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"-o expects key=value, got {item!r}")
            overrides[key.strip()] = value
        file_text = None
        if args.config:
            with open(args.config, encoding="utf-8") as f:
                file_text = f.read()
        cli = {"broker.id": args.broker_id, "log.dirs": args.data_dir}
        if args.listen:
            parse_listener(args.listen)
            cli["listeners"] = args.listen
        config = BrokerConfig.load(overrides, file_text, **cli)
    except (ConfigError, ValueError, OSError) as e:
        print(f"minibroker: config error: {e}", file=sys.stderr)
        return 2

    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    broker = Broker(config)
    broker.open()
    try:
        trio.run(partial(serve, broker))
    except OSError as e:  # e.g. the port is taken
        print(f"minibroker: cannot listen on {config['listeners']}: {e}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibroker",
                                     description="A small Kafka-compatible broker.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run one broker in the foreground")
    serve.add_argument("--broker-id", type=int, default=None, help="broker.id (default 0)")
    serve.add_argument("--listen", default=None, metavar="HOST:PORT",
                       help="listener address (default 127.0.0.1:9092)")
    serve.add_argument("--data-dir", default=None, help="log.dirs (default ./data)")
    serve.add_argument("--config", default=None, metavar="FILE",
                       help="a server.properties-style file")
    serve.add_argument("-o", dest="override", action="append", default=[],
                       metavar="KEY=VALUE", help="set one property (repeatable)")
    serve.add_argument("--log-level", default="info",
                       choices=["debug", "info", "warning", "error"])
    serve.set_defaults(func=_serve)

    bench = sub.add_parser("bench", help="benchmarks (see docs/BENCHMARKS.md)",
                           add_help=False)
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(func=lambda a: __import__("broker.bench", fromlist=["main"]).main(a.rest))

    analyze = sub.add_parser("analyze", help="Spark analysis of a data directory "
                                             "(docs/ANALYSIS.md)", add_help=False)
    analyze.add_argument("rest", nargs=argparse.REMAINDER)
    # imported only when used: the broker itself never needs pyspark
    analyze.set_defaults(
        func=lambda a: __import__("spark_jobs.cli", fromlist=["main"]).main(a.rest))

    from broker.tools import consume, dump_log, groups, produce
    dump = sub.add_parser("dump-log", help="print the batches and records of log segments")
    dump_log.add_arguments(dump)
    dump.set_defaults(func=dump_log.main)
    grp = sub.add_parser("groups", help="list and describe consumer groups")
    groups.add_arguments(grp)
    grp.set_defaults(func=groups.main)
    prod = sub.add_parser("produce", help="send one record per stdin line "
                                          "(kafka-console-producer)")
    produce.add_arguments(prod)
    prod.set_defaults(func=produce.main)
    cons = sub.add_parser("consume", help="print a topic's records, one per line "
                                          "(kafka-console-consumer)")
    consume.add_arguments(cons)
    cons.set_defaults(func=consume.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["analyze"]:
        # argparse's REMAINDER refuses a rest that starts with an option (--data-dir), so
        # the analysis's own parser gets its arguments directly
        from spark_jobs.cli import main as analyze
        return analyze(argv[1:]) or 0
    args = build_parser().parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
