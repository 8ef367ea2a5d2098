"""Fixtures that run the real broker as a subprocess for integration tests.

    def test_roundtrip(broker):                       # fresh broker per test
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

    def test_no_autocreate(make_broker):              # broker with config overrides
        b = make_broker(**{"auto.create.topics.enable": "false"})

    def test_fast(shared_broker):                     # one broker per test module
        ...

A module can configure its ``shared_broker`` with a module-level
``SHARED_BROKER_OVERRIDES = {"key": "value"}``.

Each broker runs ``python -m tools.cli serve --broker-id 0 --listen 127.0.0.1:PORT
--data-dir DIR [-o key=value ...]`` on a free port, with stdout and stderr in
``<tmp>/broker.log``; it is ready once a TCP connect succeeds (deadline 20 s; if the
process exits first, the start fails at once with the log's tail). Teardown sends
SIGTERM, waits 10 s, then SIGKILL. When a test using a broker fails, the last 50 lines
of each broker's log are added to the failure report.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.util import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 50


class BrokerStartError(RuntimeError):
    """The broker process exited, or did not accept connections, before the deadline."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the kernel's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _config_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class BrokerProcess:
    """One broker subprocess; survives restarts on the same port and data dir."""

    host = "127.0.0.1"

    def __init__(
        self,
        base_dir: Path,
        overrides: dict[str, Any] | None = None,
        *,
        port: int | None = None,
        broker_id: int = 0,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.data_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "broker.log"
        self.overrides = {k: _config_value(v) for k, v in (overrides or {}).items()}
        self.port = port if port is not None else free_port(self.host)
        self.broker_id = broker_id
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.forced_kills = 0  # SIGTERM did not stop it within STOP_TIMEOUT_S
        self._stopped_on_purpose = True

    # -- what to run ---------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "tools.cli", "serve",
            "--broker-id", str(self.broker_id),
            "--listen", self.bootstrap,
            "--data-dir", str(self.data_dir),
        ]
        for key, value in self.overrides.items():
            cmd += ["-o", f"{key}={value}"]
        return cmd

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> "BrokerProcess":
        """Launch the process and return once it accepts connections."""
        self.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.stop(kill=True)
            raise
        return self

    def launch(self) -> "BrokerProcess":
        """Start the process without waiting for it: nodes of a cluster are launched
        together, since none of them opens its listener before a quorum has formed."""
        if self.running:
            raise RuntimeError(f"broker on {self.bootstrap} is already running (pid {self.proc.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        cmd = self.command()
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
        with open(self.log_path, "ab") as log:
            stamp = time.strftime("%H:%M:%S")
            log.write(f"=== [{stamp}] start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            # The child keeps its own copy of the descriptor.
            self.proc = subprocess.Popen(
                cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        self._stopped_on_purpose = False
        return self

    def _accepts_connection(self) -> bool:
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            raise BrokerStartError(
                f"broker exited with status {code} before accepting connections on {self.bootstrap}\n"
                f"--- last {LOG_TAIL_LINES} lines of {self.log_path} ---\n{self.tail()}"
            )
        with socket.create_connection((self.host, self.port), timeout=1.0):
            return True

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Poll a TCP connect until it succeeds; fail early if the process exits."""
        timeout_s = self.start_timeout_s if timeout_s is None else timeout_s
        try:
            wait_until(
                self._accepts_connection,
                timeout_s,
                interval_s=0.05,
                message=f"broker (pid {self.proc.pid}) to accept connections on {self.bootstrap}",
                ignore_exceptions=(OSError,),
            )
        except AssertionError as e:
            raise BrokerStartError(
                f"{e}\n--- last {LOG_TAIL_LINES} lines of {self.log_path} ---\n{self.tail()}"
            ) from None

    def stop(self, kill: bool = False, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Stop the broker: SIGKILL if ``kill``, else SIGTERM and, after ``timeout_s``,
        SIGKILL. Returns the exit status (None if it was never started). Idempotent."""
        self._stopped_on_purpose = True
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            if kill:
                proc.kill()
                proc.wait()
            else:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self.forced_kills += 1
                    self._log_note(f"did not exit within {timeout_s:g}s of SIGTERM; sending SIGKILL")
                    proc.kill()
                    proc.wait()
        return proc.returncode

    def restart(self, kill: bool = False) -> "BrokerProcess":
        """Stop (SIGKILL if ``kill``, else SIGTERM) and start again on the same port and
        data dir; returns once the broker accepts connections again."""
        self._log_note(f"restart ({'SIGKILL' if kill else 'SIGTERM'})")
        self.stop(kill=kill)
        return self.start()

    # -- inspection ------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def died_unexpectedly(self) -> bool:
        """True if the process has exited although nobody asked it to stop."""
        return self.proc is not None and not self._stopped_on_purpose and self.proc.poll() is not None

    def tail(self, n: int = LOG_TAIL_LINES) -> str:
        try:
            with open(self.log_path, "rb") as f:
                lines = deque(f, maxlen=n)
        except FileNotFoundError:
            return "(no log file)"
        return b"".join(lines).decode("utf-8", "replace")

    def _log_note(self, text: str) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"=== [{time.strftime('%H:%M:%S')}] {text}\n".encode())

    def __repr__(self) -> str:
        state = "running" if self.running else f"exited({self.proc.returncode})" if self.proc else "not started"
        return f"<BrokerProcess {self.bootstrap} pid={self.pid} {state} data_dir={self.data_dir}>"


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
