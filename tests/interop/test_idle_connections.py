"""connections.max.idle.ms against a broker subprocess: 2,000 idle sockets are closed by
the broker, while a connection that keeps sending requests stays open."""

from __future__ import annotations

import selectors
import socket
import time

from tests.interop.raw import Raw
from protocol.messages import API_VERSIONS

IDLE_MS = 1500
CONNECTIONS = 2000


def test_two_thousand_idle_connections_are_closed(make_broker):
    broker = make_broker(**{"connections.max.idle.ms": IDLE_MS})
    opened = time.monotonic()
    idle = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(CONNECTIONS)]
    busy = Raw(broker)
    selector = selectors.DefaultSelector()
    for sock in idle:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    open_ = set(idle)
    first_close = None
    last_request = time.monotonic()
    deadline = opened + 60
    try:
        while open_:
            assert time.monotonic() < deadline, f"{len(open_)} idle connections still open"
            for key, _ in selector.select(timeout=0.1):
                sock = key.fileobj
                try:
                    data = sock.recv(1)
                except ConnectionResetError:
                    data = b""
                assert data == b"", "the broker sent bytes nobody asked for"
                selector.unregister(sock)
                open_.discard(sock)
                first_close = first_close or time.monotonic()
            if time.monotonic() - last_request > IDLE_MS / 3000:  # well inside the limit
                assert busy.call(API_VERSIONS, 3, {"client_software_name": "t",
                                                   "client_software_version": "1"}
                                 ).error_code == 0
                last_request = time.monotonic()
        # none before the limit: each was accepted after `opened`
        assert first_close - opened >= IDLE_MS / 1000
        assert busy.call(API_VERSIONS, 3, {"client_software_name": "t",
                                           "client_software_version": "1"}).error_code == 0
    finally:
        selector.close()
        for sock in idle:
            sock.close()
        busy.close()
