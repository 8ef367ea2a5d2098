"""One client.AdminClient for a command-line tool: opened on --bootstrap-server, failing at
once, in one line, when no bootstrap address answers.

Owns: `ToolError` (a failure worth one line on stderr), `open_admin` and `run_admin_tool`
(run a tool's async body, each failure as one line and exit 1), shared by
`minibroker groups`, `minibroker topics` and `minibroker cluster`.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, TextIO

import trio

from client.admin import AdminClient
from client.errors import KafkaError

__all__ = ["ToolError", "open_admin", "run_admin_tool", "one_line"]


class ToolError(Exception):
    """A failure worth one line on stderr."""


@asynccontextmanager
async def open_admin(bootstrap: str, *, timeout_ms: int, client_id: str
                     ) -> AsyncIterator[AdminClient]:
    """An open AdminClient whose requests and calls each wait at most `timeout_ms`.

    The first bootstrap address that answers is connected before anything else: the
    AdminClient would retry an unreachable cluster until its api timeout, and a person at
    a terminal wants "cannot connect to H:P: Connection refused" at once."""
    async with AdminClient(bootstrap_servers=bootstrap, client_id=client_id,
                           request_timeout_ms=timeout_ms,
                           default_api_timeout_ms=timeout_ms) as admin:
        first: KafkaError | None = None
        for host, port in admin.config.bootstrap_addresses:
            try:
                await admin.pool.connect(host, port)
                break
            except KafkaError as e:
                first = first or e
        else:
            if first is None:
                raise ToolError("no bootstrap server given")
            raise ToolError(first.message or str(first))
        yield admin


def one_line(e: BaseException) -> str:
    """ERROR_NAME: detail, the detail on one line."""
    return " ".join(str(e).split())


def run_admin_tool(prog: str, body: Callable[[Any, TextIO], Awaitable[None]], args: Any,
                   out: TextIO, err: TextIO) -> int:
    """trio.run(body, args, out); 0, or 1 after one line on `err` naming the failure."""
    try:
        trio.run(body, args, out)
    except (ToolError, ValueError, TypeError) as e:  # the last two: a bad address
        err.write(f"{prog}: {e}\n")
        return 1
    except KafkaError as e:
        err.write(f"{prog}: {one_line(e)}\n")
        return 1
    return 0
