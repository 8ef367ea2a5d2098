"""Free TCP ports for brokers, listeners and controllers started by tests and benchmarks."""

from __future__ import annotations

import collections
import socket

__all__ = ["free_port"]

# What this process handed out lately. A port is chosen long before its broker binds it
# (a cluster's client and controller ports, then a test's metrics.port), and the kernel
# may offer a port again as soon as the probe socket closes: one test got its node's
# controller port back as that node's metrics.port, and the node could not start.
_RECENT: collections.deque[int] = collections.deque(maxlen=4096)
_TRIES = 64


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the kernel's choice for port 0) and that
    this process has not handed out lately."""
    for _ in range(_TRIES):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _RECENT:
            _RECENT.append(port)
            return port
    raise RuntimeError(f"no fresh port on {host} after {_TRIES} tries")
