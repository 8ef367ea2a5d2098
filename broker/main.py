"""The broker process's entry point: `minibroker serve` and `python -m broker`.

Owns the serve flags (--broker-id, --listen, --data-dir, --config, -o, --log-level), turning
them into a BrokerConfig, and running the server until SIGTERM or Ctrl-C. It lives in the
broker package, not tools/, so that the broker can start without anything but protocol/:
cli.main only forwards to it. Configuration errors end the process with one line naming
the key and exit status 2; any other reason to stop (the port is taken, the data directory
cannot be opened, an error nothing handled) with one last line naming it and status 1.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from functools import partial

import trio

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker-id", type=int, default=None, help="broker.id (default 0)")
    parser.add_argument("--listen", default=None, metavar="HOST:PORT",
                        help="listener address (default 127.0.0.1:9092)")
    parser.add_argument("--data-dir", default=None,
                        help="log.dirs: a directory, or several separated by commas "
                             "(default ./data)")
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="a server.properties-style file")
    parser.add_argument("-o", dest="override", action="append", default=[],
                        metavar="KEY=VALUE", help="set one property (repeatable)")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"])


def serve(args: argparse.Namespace) -> int:
    from broker.broker import Broker
    from broker.config import BrokerConfig, ConfigError
    from broker.controller.runtime import QuorumMismatch
    from broker.security.authorize import route_denials
    from broker.server import ListenError, serve as run_server

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
        # --listen is checked with the other listeners when the broker resolves them
        cli = {"broker.id": args.broker_id, "log.dirs": args.data_dir,
               "listeners": args.listen}
        config = BrokerConfig.load(overrides, file_text, **cli)
    except (ConfigError, ValueError, OSError) as e:
        print(f"minibroker: config error: {e}", file=sys.stderr)
        return 2

    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format=LOG_FORMAT)
    # The interpreter's and the broker's modules, classes and codecs live as long as the
    # process: frozen, they are left out of every later full collection, which otherwise
    # scans them each time and holds the event loop for it (a full collection while 3,000
    # partitions were created took 45-60 ms, half that with these frozen). Collected first,
    # so that no garbage is frozen with them.
    gc.collect()
    gc.freeze()
    try:
        broker = Broker(config)
        broker.open()
        if broker.authorizer is not None:
            path = route_denials(broker.data_dir, LOG_FORMAT)
            logging.getLogger("minibroker").info("authorization denials are logged to %s",
                                                 path)
    except ConfigError as e:  # e.g. voters that differ from the data directory's quorum
        print(f"minibroker: config error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # unreadable, unwritable or full data directory
        print(f"minibroker: cannot open the data directory {config['log.dirs']}: {e}",
              file=sys.stderr)
        return 1
    try:
        trio.run(partial(run_server, broker))
    except ListenError as e:  # the port is taken, the address is not ours
        print(f"minibroker: {e}", file=sys.stderr)
        return 1
    except QuorumMismatch as e:  # the other voters were started with other voters
        print(f"minibroker: config error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  a bug of ours, or a fault nothing handled
        # the traceback for whoever debugs it; the last line names the cause
        logging.getLogger("minibroker").exception("the broker stopped")
        print(f"minibroker: stopped: {describe_failure(e)}", file=sys.stderr)
        return 1
    return 0


def describe_failure(error: BaseException) -> str:
    """One line naming what ended the broker: the innermost errors of an exception group
    (trio's nurseries wrap what their tasks raise), as 'Type: message'."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe_failure(e) for e in error.exceptions)
    return f"{type(error).__name__}: {error}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker",
                                     description="Run one broker in the foreground.")
    add_arguments(parser)
    return serve(parser.parse_args(sys.argv[1:] if argv is None else argv))
