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


# Under pytest-xdist (`make test` runs two workers) a module's tests stay on one worker (its
# module-scoped brokers, its tests that run in order), and so does each of these
# directories, which share one costly thing: docker's compose project and host ports (and
# the README's `make run`, which builds in build/ as the image's wheel does), cluster's
# package-scoped three nodes, spark's JVM. They go out first, the longest first, so that
# neither worker is left with one of them at the end.
_SHARED_WORKER = ("docker", "cluster", "spark")


def _work_unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")[1:]  # below tests/
    if parts == ["test_readme.py"]:
        return "docker"
    return parts[0] if parts and parts[0] in _SHARED_WORKER else path


def _first_rank(nodeid: str) -> int:
    unit = _work_unit(nodeid)
    return _SHARED_WORKER.index(unit) if unit in _SHARED_WORKER else len(_SHARED_WORKER)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        """pytest-xdist's loadscope, with `_work_unit` as the scope, in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    config.option.loadscopereorder = False
    return WorkUnits(config, log)


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: see _SHARED_WORKER
        items.sort(key=lambda item: _first_rank(item.nodeid))
    if "soak" in (config.getoption("markexpr") or ""):
        return
    soak = [item for item in items if item.get_closest_marker("soak")]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]
