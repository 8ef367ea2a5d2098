"""`minibroker delegation-tokens`: create, renew, expire and describe delegation tokens
(KIP-48), as Kafka's kafka-delegation-tokens.sh does, on the client library's AdminClient.

    minibroker delegation-tokens --bootstrap-server H:P --command-config admin.properties \\
        --create [--max-life-time-period MS] [--renewer-principal User:bob ...] \\
        [--owner-principal User:carol]
    ... --renew --hmac HMAC [--renew-time-period MS]
    ... --expire --hmac HMAC [--expiry-time-period MS]
    ... --describe [--owner-principal User:alice ...]

The broker serves these only to an authenticated connection (SASL, or TLS with a client
certificate), so --command-config names the login (cli.main reads it). --create and
--describe print kafka-delegation-tokens.sh's table: TOKENID, HMAC (base64, the password
to log in with), OWNER, REQUESTER, RENEWERS, ISSUEDATE, EXPIRYDATE and MAXDATE
(yyyy-MM-ddTHH:mm, UTC); --renew and --expire the new expiry date. -1 periods take the
broker's defaults; --expire with -1 expires the token at once. A refusal is one line
(DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, _AUTH_DISABLED, _NOT_FOUND, ...), exit 1.
"""

from __future__ import annotations

import base64
import binascii
import sys
import time
from typing import Any, TextIO

from client.admin import DelegationToken
from tools.admin_session import ToolError, open_admin, run_admin_tool

DEFAULT_TIMEOUT_MS = 30_000
PROG = "minibroker delegation-tokens"
_ROW = "%-15s %-30s %-15s %-15s %-25s %-15s %-15s %-15s"


def add_arguments(parser) -> None:
    parser.description = ("Create, renew, expire and describe delegation tokens "
                          "(kafka-delegation-tokens).")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS")
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("create", "renew", "expire", "describe"):
        action.add_argument(f"--{name}", action="store_true")
    parser.add_argument("--max-life-time-period", type=int, default=-1, metavar="MS")
    parser.add_argument("--renewer-principal", action="append", default=[],
                        metavar="User:NAME")
    parser.add_argument("--owner-principal", action="append", default=[],
                        metavar="User:NAME")
    parser.add_argument("--hmac", default=None, metavar="BASE64")
    parser.add_argument("--renew-time-period", type=int, default=-1, metavar="MS")
    parser.add_argument("--expiry-time-period", type=int, default=-1, metavar="MS")


def _date(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M", time.gmtime(ms / 1000))


def token_table(tokens: list[DelegationToken]) -> str:
    lines = [_ROW % ("TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE",
                     "EXPIRYDATE", "MAXDATE")]
    for t in tokens:
        lines.append(_ROW % (t.token_id, base64.b64encode(t.hmac).decode(), t.owner,
                             t.requester, "[" + ", ".join(t.renewers) + "]",
                             _date(t.issue_timestamp_ms), _date(t.expiry_timestamp_ms),
                             _date(t.max_timestamp_ms)))
    return "\n".join(lines) + "\n"


def _hmac(args: Any) -> bytes:
    if not args.hmac:
        raise ToolError("--hmac is required with --renew and --expire")
    try:
        return base64.b64decode(args.hmac, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError("--hmac must be the token's HMAC in base64") from None


async def _run(args: Any, out: TextIO) -> None:
    mac = _hmac(args) if args.renew or args.expire else b""
    if args.create and len(args.owner_principal) > 1:
        raise ToolError("--create takes one --owner-principal")
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-delegation-tokens") as admin:
        if args.create:
            out.write(f"Calling create token operation with renewers :"
                      f"[{', '.join(args.renewer_principal)}] , max-life-time-period :"
                      f"{args.max_life_time_period}\n")
            token = await admin.create_delegation_token(
                renewers=args.renewer_principal, max_lifetime_ms=args.max_life_time_period,
                owner=args.owner_principal[0] if args.owner_principal else None)
            out.write(f"Created delegation token with tokenId : {token.token_id}\n")
            out.write(token_table([token]))
        elif args.renew:
            expiry = await admin.renew_delegation_token(
                mac, renew_period_ms=args.renew_time_period)
            out.write(f"Completed renew operation. New expiry date : {_date(expiry)}\n")
        elif args.expire:
            expiry = await admin.expire_delegation_token(
                mac, expiry_time_period_ms=args.expiry_time_period)
            out.write(f"Completed expire operation. New expiry date : {_date(expiry)}\n")
        else:
            owners = args.owner_principal or None
            out.write("Calling describe token operation for "
                      + ("current user.\n" if owners is None
                         else f"owners :[{', '.join(owners)}]\n"))
            tokens = await admin.describe_delegation_token(owners)
            out.write(f"Total number of tokens : {len(tokens)}\n")
            out.write(token_table(tokens))


def run(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run_admin_tool(PROG, _run, args, sys.stdout if out is None else out,
                          sys.stderr if err is None else err)


def main(args: Any) -> int:
    return run(args)
