"""One client.AdminClient for a command-line tool: opened on --bootstrap-server, failing at
once, in one line, when no bootstrap address answers.

Owns: `ToolError` (a failure worth one line on stderr), `reach_bootstrap` (connect to the
first bootstrap address that answers, or say why none did), `open_admin` and
`run_admin_tool` (run a tool's async body, each failure as one line and exit 1), shared by
`minibroker groups`, `minibroker topics` and `minibroker cluster`; `produce` and `consume`
use reach_bootstrap.

Also owns `--command-config FILE`, as Kafka's tools have it: a properties file of client
settings (security.protocol, sasl.mechanism, sasl.jaas.config or sasl.username and
sasl.password, ssl.truststore.location, ...) that every client a tool makes is given
(`client_settings`, bound by cli.main before the tool runs), so each tool reaches a
secured listener the same way.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, TextIO

import trio

from client.admin import AdminClient
from client.errors import KafkaError

__all__ = ["ToolError", "open_admin", "run_admin_tool", "one_line", "client_settings",
           "load_command_config"]

# the --command-config settings as ClientConfig keywords; trio.run copies the context,
# so what cli.main binds before a tool runs is what its clients see
client_settings: ContextVar[Mapping[str, Any]] = ContextVar("client_settings",
                                                          default=MappingProxyType({}))


def load_command_config(path: str) -> dict[str, Any]:
    """A Kafka client properties file -> ClientConfig keywords; ToolError names a line,
    file or property that cannot be used."""
    from broker.config import ConfigError, parse_properties
    from client.config import check_config

    try:
        with open(path, encoding="utf-8") as f:
            properties = parse_properties(f.read())
    except OSError as e:
        raise ToolError(f"--command-config: cannot read {path}: {e.strerror or e}") from e
    except ConfigError as e:
        raise ToolError(f"--command-config {path}: {e}") from e
    settings = {key.replace(".", "_"): value for key, value in properties.items()}
    try:
        check_config("common", **settings)
    except (TypeError, ValueError) as e:
        raise ToolError(f"--command-config {path}: {e}") from e
    return settings


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
                           default_api_timeout_ms=timeout_ms, **client_settings.get()) as admin:
        await reach_bootstrap(admin.pool, admin.config)
        yield admin


async def reach_bootstrap(pool: Any, config: Any) -> None:
    """Connect the pool to the first bootstrap address that answers; ToolError naming the
    address and the reason when none does ("cannot connect to H:P: Connection refused"),
    where a client would retry it quietly until a timeout and then blame something else
    (a topic missing from metadata)."""
    first: KafkaError | None = None
    for host, port in config.bootstrap_addresses:
        try:
            await pool.connect(host, port)
            return
        except KafkaError as e:
            first = first or e
    if first is None:
        raise ToolError("no bootstrap server given")
    raise ToolError(first.message or str(first))


def one_line(e: BaseException) -> str:
    """ERROR_NAME: detail, the detail on one line."""
    return " ".join(str(e).split())


def run_admin_tool(prog: str, body: Callable[[Any, TextIO], Awaitable[None]], args: Any,
                   out: TextIO, err: TextIO,
                   check: Callable[[Any], None] | None = None) -> int:
    """trio.run(body, args, out); 0, or 1 after one line on `err` naming the failure.
    `check`, run first, reads what the options name (files) into `args`."""
    try:
        if check is not None:
            check(args)
        trio.run(body, args, out)
    except (ToolError, ValueError, TypeError) as e:  # the last two: a bad address
        err.write(f"{prog}: {e}\n")
        return 1
    except KafkaError as e:
        err.write(f"{prog}: {one_line(e)}\n")
        return 1
    return 0
