"""harness.ports.free_port never hands the same port out twice in a row of calls, even
when the kernel offers it again."""

from __future__ import annotations

import socket

import harness.ports as ports


def test_a_port_the_kernel_offers_again_is_not_handed_out_twice(monkeypatch):
    offered = iter([41000, 41000, 41000, 41001])

    class Probe:
        def __init__(self, *args):
            self.port = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, address):
            self.port = next(offered)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(ports, "_RECENT", ports.collections.deque(maxlen=8))
    monkeypatch.setattr(socket, "socket", Probe)
    assert [ports.free_port(), ports.free_port()] == [41000, 41001]


def test_real_ports_are_distinct():
    handed = [ports.free_port() for _ in range(200)]
    assert len(set(handed)) == len(handed)
