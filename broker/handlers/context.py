"""What a request handler is given and may raise.

Owns: `RequestContext` (the broker, the parsed request, the peer, the listener it came
through, the principal the connection authenticated as), the `Handler` signature,
and `CloseConnection`. The handler modules import these from here rather than from the
package, whose `__init__` imports them back to build the dispatch table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from broker.broker import Broker
from protocol.connection import Request

ANONYMOUS = "User:ANONYMOUS"  # Kafka's KafkaPrincipal.ANONYMOUS


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    request: Request
    peer: str
    # the name of the listener the connection came through: Metadata, FindCoordinator and
    # KIP-951's leader hints answer with each broker's endpoint on that same listener, so a
    # client outside a container network is told the addresses advertised to it
    listener: str | None = None
    # who the connection authenticated as (SASL, or a TLS client certificate), in Kafka's
    # "User:name" form; User:ANONYMOUS on a PLAINTEXT or SSL listener without one
    principal: str = ANONYMOUS
    # the connection the request came on (an opaque token): share sessions belong to the
    # connection that opened them and end when it closes
    connection: object = None
    # client quotas: the throttle time the handler found (the server answers with it in
    # throttle_time_ms and mutes the connection for it), and the time it spent waiting on
    # others (a fetch's long poll, replicas, the controller), which request_percentage
    # does not count as handling (on time.perf_counter, as the server measures handling)
    throttle_ms: int = 0
    waited_s: float = 0.0

    @property
    def user(self) -> str:
        """The principal's name, as a user quota names it (broker.quotas)."""
        return self.principal.partition(":")[2] or self.principal

    @property
    def client_id(self) -> str:
        return self.request.header.client_id or ""

    @property
    def listener_name(self) -> str:
        return self.listener or self.broker.listener_name

    @property
    def client_host(self) -> str:
        """The peer's address without its port: what an ACL's host is matched against."""
        host, sep, _ = self.peer.rpartition(":")
        return host.strip("[]") if sep else self.peer

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
