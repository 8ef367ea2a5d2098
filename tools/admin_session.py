"""One client.AdminClient for a command-line tool: opened on --bootstrap-server, failing at
once, in one line, when no bootstrap address answers.

Owns: `ToolError` (a failure worth one line on stderr) and `open_admin`, shared by
`minibroker groups` and `minibroker topics`.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from client.admin import AdminClient
from client.errors import KafkaError

__all__ = ["ToolError", "open_admin"]


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
