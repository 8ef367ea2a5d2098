"""docker/healthcheck.py, the containers' healthcheck, against a broker on the host: healthy
(exit 0) only when the broker answers Metadata listing the given node as live; a port with
no broker behind it, or a node id the broker does not list, is unhealthy (exit 1).

Not marked `docker`: the probe is a plain script and needs no Docker engine."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import trio

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.server import serve
from harness.ports import free_port

PROBE = Path(__file__).resolve().parents[2] / "docker" / "healthcheck.py"


async def _probe(*args: str) -> tuple[int, str]:
    done = await trio.run_process([sys.executable, str(PROBE), *args], capture_stdout=True,
                                  capture_stderr=True, check=False)
    return done.returncode, (done.stdout + done.stderr).decode()


async def test_the_probe_says_healthy_only_for_a_live_broker(tmp_path, nursery):
    closed = free_port()
    code, said = await _probe("0", f"127.0.0.1:{closed}")
    assert code == 1 and "not serving clients yet" in said

    port = free_port()
    broker = Broker(BrokerConfig.load({"log.dirs": str(tmp_path / "data"), "broker.rack": "r0",
                                       "listeners": f"127.0.0.1:{port}"}))
    broker.open()
    await nursery.start(functools.partial(serve, broker, install_signal_handlers=False))

    code, said = await _probe("0", f"127.0.0.1:{port}")
    assert code == 0 and "broker 0 registered and unfenced; live brokers [0]" in said
    code, said = await _probe("5", f"127.0.0.1:{port}")
    assert code == 1 and "broker 5 is not among the live brokers [0]" in said
