"""Fixtures for the client tests: the real broker processes of tests/interop, and
`group_broker`, an in-process broker on virtual time set for fast group tests.

`group_broker` is tests/inproc.py's broker with group.initial.rebalance.delay.ms=0 (as
tests/interop's group tests ran theirs); a test that asks for it asks for pytest-trio's
`autojump_clock` too (pytest-trio takes the run's clock only from the test's arguments).
"""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest

# Imported rather than listed in `pytest_plugins`: pytest refuses to register
# tests/interop/conftest.py a second time when tests/interop is collected in the same run
# ("Plugin already registered under a different name"). A fixture imported into a conftest
# serves every test below it, so the names are used although nothing here reads them.
from tests.interop.conftest import broker, make_broker, shared_broker  # noqa: F401
from tests.inproc import InProcessBroker, in_process_broker
from tests.interop.group_helpers import FAST_GROUP_BROKER


@pytest.fixture
async def group_broker(tmp_path: Path, autojump_clock) -> AsyncIterator[InProcessBroker]:
    async with in_process_broker(tmp_path / "broker", **FAST_GROUP_BROKER) as b:
        yield b
