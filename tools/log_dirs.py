"""`minibroker log-dirs describe`: each broker's log directories and the replicas in them,
in the manner of Kafka's kafka-log-dirs.sh --describe, on the client library's AdminClient
(DescribeLogDirs to each broker).

    minibroker log-dirs describe --bootstrap-server 127.0.0.1:9092 [--broker-list 0,1]
        [--topic-list orders,payments]

It prints Kafka's two lines, then kafka-log-dirs.sh's JSON on one line:
`{"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":"/data","error":null,
"partitions":[{"partition":"orders-0","size":1234,"offsetLag":0,"isFuture":false}]}]}]}`.
Exit status 0; 1 with one line on stderr when the cluster cannot be reached.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from client.admin import LogDirDescription
from tools.admin_session import open_admin, run_admin_tool

DEFAULT_TIMEOUT_MS = 30_000
PROG = "minibroker log-dirs"


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--broker-list takes broker ids separated by commas, got {text!r}") \
            from None


def add_arguments(parser) -> None:
    parser.description = "Describe the brokers' log directories (kafka-log-dirs --describe)."
    sub = parser.add_subparsers(dest="log_dirs_command", required=True)
    describe = sub.add_parser("describe", help="each broker's log directories and replicas")
    describe.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    describe.add_argument("--broker-list", default=None, metavar="0,1",
                          help="the brokers to ask (default: every broker)")
    describe.add_argument("--topic-list", default=None, metavar="T1,T2",
                          help="only these topics' replicas (default: every replica)")
    describe.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS")


def as_json(described: dict[int, list[LogDirDescription]], topics: set[str] | None) -> dict:
    """kafka-log-dirs.sh's JSON for DescribeLogDirs' answers."""
    return {"version": 1, "brokers": [{"broker": broker, "logDirs": [{
        "logDir": d.path, "error": None if d.error is None else type(d.error).__name__,
        "partitions": [{"partition": f"{tp.topic}-{tp.partition}", "size": r.size,
                        "offsetLag": r.offset_lag, "isFuture": r.is_future}
                       for tp, r in sorted(d.replicas.items())
                       if topics is None or tp.topic in topics]} for d in dirs]}
        for broker, dirs in sorted(described.items())]}


async def _run(args: Any, out: TextIO) -> None:
    brokers = None if args.broker_list is None else _ints(args.broker_list)
    topics = (None if args.topic_list is None
              else {t.strip() for t in args.topic_list.split(",") if t.strip()})
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-log-dirs") as admin:
        out.write("Querying brokers for log directories information\n")
        described = await admin.describe_log_dirs(brokers, timeout_ms=args.timeout)
        out.write("Received log directory information from brokers "
                  f"{','.join(str(b) for b in sorted(described))}\n")
        out.write(json.dumps(as_json(described, topics), separators=(",", ":")) + "\n")


def run(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run_admin_tool(PROG, _run, args, sys.stdout if out is None else out,
                          sys.stderr if err is None else err)


def main(args: Any) -> int:
    return run(args)
