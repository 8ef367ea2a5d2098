"""`minibroker users`: SCRAM credentials, as kafka-configs.sh --entity-type users manages
them (KIP-554).

    minibroker users --bootstrap-server H:P alter --entity-name alice \\
        --add-scram 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
    minibroker users --bootstrap-server H:P alter --entity-name alice --delete-scram SCRAM-SHA-256
    minibroker users --bootstrap-server H:P describe [--entity-name alice]

Owns the subcommand's arguments, the `MECHANISM=[iterations=N,password=P]` syntax
(`parse_scram`; iterations default to 4096, as Kafka's) and the output: one line per
credential, `USER  MECHANISM  iterations=N`. The password is salted by the client library
(AdminClient.alter_user_scram_credentials) and never sent. --command-config (cli.main)
gives the connection's security settings.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

from client.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion
from tools.admin_session import ToolError, open_admin, run_admin_tool

DEFAULT_TIMEOUT_MS = 10000
DEFAULT_ITERATIONS = 4096
_SCRAM = re.compile(r"^\s*([A-Za-z0-9-]+)\s*=\s*\[(.*)\]\s*$", re.S)


def parse_scram(text: str) -> tuple[str, int, str]:
    """`SCRAM-SHA-512=[iterations=8192,password=secret]` -> (mechanism, iterations, password).
    The password is last, so it may itself hold commas."""
    match = _SCRAM.match(text)
    if match is None:
        raise ToolError(f"--add-scram: expected MECHANISM=[iterations=N,password=P], got "
                        f"{text.split('=')[0]}=...")
    mechanism, inner = match.group(1).upper(), match.group(2)
    iterations = DEFAULT_ITERATIONS
    rest = inner
    while rest and not rest.startswith("password="):
        item, _, rest = rest.partition(",")
        key, _, value = item.partition("=")
        if key.strip() != "iterations" or not value.strip().isdigit():
            raise ToolError(f"--add-scram {mechanism}: unknown or bad item {key.strip()!r} "
                            "(iterations=N, password=P)")
        iterations = int(value)
    if not rest.startswith("password="):
        raise ToolError(f"--add-scram {mechanism}: no password=")
    return mechanism, iterations, rest[len("password="):]


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="a broker to start from (comma-separated for several)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                        help="how long to wait for each answer (default %(default)s)")
    sub = parser.add_subparsers(dest="users_command", required=True)
    alter = sub.add_parser("alter", help="add, replace or delete a user's SCRAM credentials")
    alter.add_argument("--entity-name", required=True, metavar="USER")
    alter.add_argument("--add-scram", action="append", default=[],
                       metavar="'MECHANISM=[iterations=N,password=P]'",
                       help="SCRAM-SHA-256 or SCRAM-SHA-512; may be repeated")
    alter.add_argument("--delete-scram", action="append", default=[], metavar="MECHANISM")
    describe = sub.add_parser("describe", help="users' SCRAM mechanisms and iterations")
    describe.add_argument("--entity-name", action="append", default=None, metavar="USER",
                          help="only this user (may be repeated); default every user")


async def _run(args: Any, out: TextIO) -> None:
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-users") as admin:
        if args.users_command == "alter":
            alterations: list[Any] = []
            for text in args.add_scram:
                mechanism, iterations, password = parse_scram(text)
                alterations.append(UserScramCredentialUpsertion(
                    args.entity_name, mechanism, password, iterations))
            alterations += [UserScramCredentialDeletion(args.entity_name, m.upper())
                            for m in args.delete_scram]
            if not alterations:
                raise ToolError("alter: give --add-scram or --delete-scram")
            await admin.alter_user_scram_credentials(alterations)
            out.write(f"Completed updating SCRAM credentials of user {args.entity_name}.\n")
            return
        described = await admin.describe_user_scram_credentials(args.entity_name)
        for user, infos in sorted(described.items()):
            for info in infos:
                out.write(f"{user}\t{info.mechanism}\titerations={info.iterations}\n")


def main(args: Any) -> int:
    return run_admin_tool("minibroker users", _run, args, sys.stdout, sys.stderr)
