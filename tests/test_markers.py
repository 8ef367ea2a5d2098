"""The `interop` marker's promise: `-m 'not interop'` starts no broker process.

tests/conftest.py marks the tests that start brokers through fixtures or live in the
process directories, and fails any other test where it runs a broker's command line; these
check which command lines count.
"""

from __future__ import annotations

import sys

import pytest

from tests.conftest import _starts_a_broker


@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "broker", "serve", "--broker-id", "0"],
    [sys.executable, "-m", "tools.cli", "serve", "--data-dir", "d"],
    ["/repo/.venv/bin/minibroker", "serve", "--listen", "127.0.0.1:9092"],
    ["minibroker", "chaos", "--target", "processes"],
    "docker compose up -d broker-0",
    ["docker-compose", "up", "-d"],
    ["make", "cluster"],
    ["make", "run", "LISTEN=127.0.0.1:1"],
])
def test_a_broker_command_line_counts(argv):
    assert _starts_a_broker(argv)


@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "tools.cli", "dump-log", "x"],
    ["minibroker", "topics", "list"],
    ["make", "-n", "run"],
    "docker compose ps",
    ["kcat", "-b", "127.0.0.1:9092", "-L"],
    [sys.executable, "-c", "print('serve')"],
])
def test_other_command_lines_do_not(argv):
    assert not _starts_a_broker(argv)

