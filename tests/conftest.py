"""Fixtures shared by every test directory.

`inproc`: a broker in the test's own trio run, reached by our client library through memory
streams (tests/inproc.py). The test must also ask for pytest-trio's `autojump_clock`
(pytest-trio takes the run's clock only from the test's own arguments), which puts it on
virtual time: timeouts of minutes pass in milliseconds of real time.

    async def test_session_expiry(inproc, autojump_clock): ...

Tests marked `soak` run only when asked for by marker (`make soak`, `pytest -m soak`): a
plain `pytest` or `make test` leaves them out.
"""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest
import trio
import trio.testing

from broker import blocking
from tests.inproc import InProcessBroker, in_process_broker


@pytest.fixture(autouse=True)
def inline_disk_work(request, monkeypatch):
    """On trio's autojump clock, run the broker's off-loop disk work inline: while a worker
    thread works the clock would jump ahead, and a test's "two intervals later" would race
    the housekeeping it waits for."""
    if "autojump_clock" not in request.fixturenames:
        return

    async def inline(fn, *args):
        return fn(*args)

    monkeypatch.setattr(blocking, "run_sync", inline)


@pytest.fixture
async def inproc(tmp_path) -> AsyncIterator[InProcessBroker]:
    if not isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
        pytest.fail("the inproc fixture runs on virtual time: ask for autojump_clock as well")
    async with in_process_broker(tmp_path / "broker") as broker:
        yield broker


# Directories whose tests share one costly thing and must share a pytest-xdist worker:
# docker's compose project and host ports, cluster's package-scoped three nodes, spark's JVM.
_SHARED_WORKER = {"docker", "cluster", "spark"}
_TESTS = Path(__file__).parent


def _xdist_group(item: pytest.Item) -> str:
    """`make test` runs two pytest-xdist workers with --dist loadgroup: a module's tests stay
    together (their module-scoped brokers and in-order tests), and so does each directory of
    `_SHARED_WORKER`."""
    parts = Path(item.path).relative_to(_TESTS).parts
    if parts == ("test_readme.py",):
        # `make run` installs the package from this tree, as the image's wheel build does:
        # both write setuptools' build/ directory here
        return "docker"
    return parts[0] if parts[0] in _SHARED_WORKER else "/".join(parts)


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_xdist_group(item)))
    if "soak" in (config.getoption("markexpr") or ""):
        return
    soak = [item for item in items if item.get_closest_marker("soak")]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]
