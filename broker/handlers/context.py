"""What a request handler is given and may raise.

Owns: `RequestContext` (the broker, the parsed request, the peer, the listener it came
through), the `Handler` signature,
and `CloseConnection`. The handler modules import these from here rather than from the
package, whose `__init__` imports them back to build the dispatch table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from broker.broker import Broker
from protocol.connection import Request


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    request: Request
    peer: str
    # the name of the listener the connection came through: Metadata, FindCoordinator and
    # KIP-951's leader hints answer with each broker's endpoint on that same listener, so a
    # client outside a container network is told the addresses advertised to it
    listener: str | None = None

    @property
    def listener_name(self) -> str:
        return self.listener or self.broker.listener_name

    @property
    def version(self) -> int:
        return self.request.api_version

    @property
    def body(self) -> Any:
        return self.request.body


Handler = Callable[[RequestContext], Awaitable[Any]]


class CloseConnection(Exception):
    """Answer nothing and close this connection: the only way an acks=0 producer learns that
    its batch was refused (Kafka's KafkaApis.handleProduceRequest does the same)."""
