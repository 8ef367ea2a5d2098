"""A raw request on a socket, through our sans-IO codec (protocol.connection): requests
built by hand, for what no client library sends (bad input, exact versions) and for one
node's own answer rather than whichever broker a client library happened to ask.

Owns `RawConnection` (a blocking socket that keeps its connection between requests) and
`call` (one request on a fresh connection; it speaks every declared API, so it reaches a
controller listener as well as a client listener).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from protocol.connection import ClientConnection
from protocol.messages import ALL_APIS, APIS

__all__ = ["HOST", "RawConnection", "call"]

HOST = "127.0.0.1"


class RawConnection:
    """A blocking socket speaking through our sans-IO ClientConnection."""

    def __init__(self, port: int, host: str = HOST, *, client_id: str = "raw",
                 timeout_s: float = 10.0, apis: Mapping[int, Any] = APIS) -> None:
        self.address = f"{host}:{port}"
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.conn = ClientConnection(client_id, apis=apis)

    def call(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and return its response's body; ConnectionError when the peer
        closes the connection first."""
        _, frame = self.conn.send_request(api_key, version, body)
        self.sock.sendall(frame)
        while (response := self.conn.next_response()) is None:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError(f"{self.address} closed the connection")
            self.conn.receive_data(data)
        return response.body

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def call(port: int, api_key: int, version: int, body: Any, timeout_s: float = 5.0, *,
         host: str = HOST, client_id: str = "bench-cluster") -> Any:
    """One request on a fresh connection to host:port; the response body. OSError when the
    node is down or closes the connection."""
    with RawConnection(port, host, client_id=client_id, timeout_s=timeout_s,
                       apis=ALL_APIS) as connection:
        return connection.call(api_key, version, body)
