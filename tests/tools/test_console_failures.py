"""The console tools when the address is wrong or nobody answers: a malformed
--bootstrap-server is refused before anything connects (one line, exit status 2, as
argparse does for a bad option); an unreachable broker is named as such (exit 1), and
`consume --timeout-ms` bounds the whole command, the lookup of the topic included."""

from __future__ import annotations

import contextlib
import io
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.ports import free_port
from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
# well past any bound the tools set themselves (--timeout-ms, a refused connection): a
# command still running then is hung, which is the failure these tests look for
HUNG_S = 60

BAD_ADDRESSES = ["127.0.0.1:19504:1", "127.0.0.1:", "::1", "host:port", "h:70000",
                 "[::1", "bad host:9092"]


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=HUNG_S)


@pytest.mark.parametrize("address", BAD_ADDRESSES)
@pytest.mark.parametrize("command", [["consume", "t", "--timeout-ms", "3000"],
                                     ["produce", "t"], ["topics", "list"], ["groups", "list"],
                                     ["cluster", "describe"],
                                     ["metadata-quorum", "describe", "--status"]])
def test_a_malformed_bootstrap_address_is_refused_in_one_line_with_status_2(command, address):
    # in-process: nothing may connect, so nothing needs a subprocess's isolation
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main([*command, "--bootstrap-server", address])
    lines = err.getvalue().splitlines()
    assert status == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"minibroker {command[0]}: --bootstrap-server: "
                               f"bad broker address {address!r}"), lines


def test_consume_from_a_refused_address_names_it():
    port = free_port()
    done = cli("consume", "t", "--bootstrap-server", f"127.0.0.1:{port}",
               "--timeout-ms", "3000")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"minibroker consume: cannot connect to 127.0.0.1:{port}: Connection refused"]


def test_consume_timeout_bounds_a_broker_that_never_answers():
    with socket.socket() as silent:  # accepts connections (the kernel does), answers nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        for extra in ([], ["--group", "g"]):
            done = cli("consume", "t", "--bootstrap-server", f"127.0.0.1:{port}",
                       "--timeout-ms", "1000", *extra)
            assert done.returncode == 1
            assert done.stderr.splitlines() == [
                f"minibroker consume: no answer from 127.0.0.1:{port} within --timeout-ms "
                f"1000 ms"]


def test_produce_to_a_refused_address_names_it_not_the_topic():
    port = free_port()
    done = cli("produce", "t", "--bootstrap-server", f"127.0.0.1:{port}", stdin="a\nb\n")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"minibroker produce: unable to bootstrap from ['127.0.0.1:{port}']: "
        f"cannot connect to 127.0.0.1:{port}: Connection refused"]


def test_a_reader_that_stops_early_ends_the_tool_quietly(tmp_path):
    """`minibroker ... | head -1`: every tool stops quietly and successfully (cli/main.py
    catches the broken pipe for all of them), without a BrokenPipeError traceback."""
    from broker.log.log import PartitionLog
    from broker.log.config import LogConfig
    from protocol.records import Record, encode_batch

    log = PartitionLog.open(str(tmp_path / "t-0"), "t", 0, LogConfig())
    for i in range(2000):
        log.append(bytearray(encode_batch([Record(0, 1000, b"k", b"v%d" % i, [])])),
                   now_ms=1000)
    log.close()
    segment = next((tmp_path / "t-0").glob("*.log"))
    proc = subprocess.run(
        f"set -o pipefail; {sys.executable} -m tools.cli dump-log {segment} | head -1",
        shell=True, executable="/bin/bash", cwd=ROOT, capture_output=True, text=True,
        timeout=HUNG_S)
    assert proc.stdout.count("\n") == 1
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.returncode == 0
