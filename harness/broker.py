"""One broker process, started with the pinned serve command and waited for until it
accepts connections; stopped, restarted and read (its log's tail) by tests and benchmarks.

Owns `BrokerProcess`. It runs

    python -m broker serve --broker-id ID --listen 127.0.0.1:PORT --data-dir DIR \\
        [more serve flags] [-o key=value ...]

on a free port (harness.ports), with stdout and stderr appended to its log file (each start
and restart noted there). It is ready once a TCP connect succeeds (default deadline 20 s);
if the process exits first, the start fails at once with `BrokerStartError` carrying the
log's tail. `stop()` sends SIGTERM, waits, then SIGKILL; `stop(kill=True)` is kill -9.
Subclasses change `command()` (a cluster's node, a broker with several listeners).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Mapping, Self, Sequence

from harness.ports import free_port
from harness.wait import wait_until

__all__ = ["BrokerProcess", "BrokerStartError", "REPO_ROOT", "START_TIMEOUT_S",
           "STOP_TIMEOUT_S", "LOG_TAIL_LINES", "config_value"]

REPO_ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 50


class BrokerStartError(RuntimeError):
    """The broker process exited, or did not accept connections, before the deadline."""


def config_value(value: Any) -> str:
    """A config value as `-o key=value` spells it: booleans as Kafka's true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class BrokerProcess:
    """One broker subprocess; survives restarts on the same port and data dir."""

    host = "127.0.0.1"

    def __init__(
        self,
        base_dir: Path,
        overrides: Mapping[str, Any] | None = None,
        *,
        port: int | None = None,
        broker_id: int = 0,
        start_timeout_s: float = START_TIMEOUT_S,
        data_dir: Path | None = None,
        log_path: Path | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.base_dir = Path(base_dir)
        self.data_dir = self.base_dir / "data" if data_dir is None else Path(data_dir)
        self.log_path = self.base_dir / "broker.log" if log_path is None else Path(log_path)
        self.args = list(args)  # more serve flags, after --data-dir (--log-level warning)
        self.overrides = {k: config_value(v) for k, v in (overrides or {}).items()}
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
            sys.executable, "-m", "broker", "serve",
            "--broker-id", str(self.broker_id),
            "--listen", self.bootstrap,
            "--data-dir", str(self.data_dir),
            *self.args,
        ]
        for key, value in self.overrides.items():
            cmd += ["-o", f"{key}={value}"]
        return cmd

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Self:
        """Launch the process and return once it accepts connections."""
        self.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.stop(kill=True)
            raise
        return self

    def launch(self) -> Self:
        """Start the process without waiting for it: nodes of a cluster are launched
        together, since none of them opens its listener before a quorum has formed."""
        if self.running:
            raise RuntimeError(f"broker on {self.bootstrap} is already running (pid {self.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
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
                message=f"broker (pid {self.pid}) to accept connections on {self.bootstrap}",
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

    def restart(self, kill: bool = False) -> Self:
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
