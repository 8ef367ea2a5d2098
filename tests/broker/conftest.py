"""Fixtures shared by the in-process broker tests."""

from __future__ import annotations

import functools

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.server import serve
from harness.ports import free_port


@pytest.fixture
async def running(tmp_path, nursery):
    """start(**overrides) -> (broker, server, port): a broker served in the test's nursery,
    on a loopback port, with its data under tmp_path/data (or the log.dirs given)."""

    async def start(**overrides):
        port = free_port()
        log_dirs = str(overrides.pop("log.dirs", tmp_path / "data"))  # several: JBOD
        config = BrokerConfig.load({k: str(v) for k, v in overrides.items()},
                                   **{"log.dirs": log_dirs,
                                      "listeners": f"127.0.0.1:{port}"})
        broker = Broker(config)
        broker.open()
        server = await nursery.start(functools.partial(serve, broker,
                                                       install_signal_handlers=False))
        return broker, server, port

    return start
