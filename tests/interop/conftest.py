"""Fixtures that run the real broker as a subprocess for integration tests.

    def test_roundtrip(broker):                       # fresh broker per test
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

    def test_no_autocreate(make_broker):              # broker with config overrides
        b = make_broker(**{"auto.create.topics.enable": "false"})

    def test_fast(shared_broker):                     # one broker per test module
        ...

A module can configure its ``shared_broker`` with a module-level
``SHARED_BROKER_OVERRIDES = {"key": "value"}``.

Each broker is a harness.broker.BrokerProcess: ``python -m broker serve --broker-id 0
--listen 127.0.0.1:PORT --data-dir DIR [-o key=value ...]`` on a free port, with stdout
and stderr in ``<tmp>/broker.log``; it is ready once a TCP connect succeeds (deadline
20 s; if the process exits first, the start fails at once with the log's tail). Teardown
sends SIGTERM, waits 10 s, then SIGKILL. When a test using a broker fails, the last 50
lines of each broker's log are added to the failure report.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

# BrokerProcess and the rest are harness.broker's; named here too, where tests import them
from harness.broker import (  # noqa: F401
    LOG_TAIL_LINES, REPO_ROOT, START_TIMEOUT_S, STOP_TIMEOUT_S, BrokerProcess, BrokerStartError,
)
from harness.ports import free_port  # noqa: F401


class BrokerFactory:
    """``make_broker(**overrides)``: start a broker with ``-o key=value`` for each
    override (use ``**{"dotted.key": "v"}`` for dotted keys); all are stopped at teardown."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir)
        self.brokers: list[BrokerProcess] = []
        self._ids = itertools.count()

    def __call__(self, **overrides: Any) -> BrokerProcess:
        b = BrokerProcess(self.base_dir / f"broker-{next(self._ids)}", overrides)
        self.brokers.append(b)
        return b.start()

    def stop_all(self) -> None:
        errors = []
        for b in reversed(self.brokers):
            try:
                b.stop()
            except Exception as e:  # keep stopping the others
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture
def broker(make_broker: BrokerFactory) -> BrokerProcess:
    """A fresh broker (default config) for one test."""
    return make_broker()


@pytest.fixture(scope="module")
def shared_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for all tests of a module (``SHARED_BROKER_OVERRIDES`` configures it)."""
    overrides = getattr(request.module, "SHARED_BROKER_OVERRIDES", {})
    factory = BrokerFactory(tmp_path_factory.mktemp("shared-broker"))
    try:
        yield factory(**overrides)
    finally:
        factory.stop_all()


def _brokers_used_by(item: pytest.Item) -> list[BrokerProcess]:
    found: list[BrokerProcess] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, BrokerProcess):
            candidates = [value]
        elif isinstance(value, BrokerFactory):
            candidates = value.brokers
        else:
            continue
        found += [b for b in candidates if b not in found]
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    start_failed = call.excinfo is not None and call.excinfo.errisinstance(BrokerStartError)
    if report.failed and not start_failed:  # a start failure already carries the log tail
        for b in _brokers_used_by(item):
            status = ""
            if b.died_unexpectedly:
                status = f", process exited unexpectedly with status {b.proc.returncode}"
            report.sections.append(
                (f"broker {b.bootstrap} (pid {b.pid}{status}): last {LOG_TAIL_LINES} lines of {b.log_path}",
                 b.tail()),
            )
    return report


@pytest.fixture
def connect():
    """``connect(broker)``: a raw-socket connection to that broker, closed afterwards."""
    from tests.interop.raw import Raw
    opened = []

    def make(broker: BrokerProcess):
        opened.append(Raw(broker))
        return opened[-1]
    yield make
    for r in opened:
        r.close()


@pytest.fixture
def raw(connect, shared_broker):
    """A factory of raw-socket connections to the module's broker, closed afterwards."""
    return lambda: connect(shared_broker)
