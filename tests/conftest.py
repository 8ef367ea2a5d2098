"""Fixtures shared by every test directory.

`inproc`: a broker in the test's own trio run, reached by our client library through memory
streams (tests/inproc.py). The test must also ask for pytest-trio's `autojump_clock`
(pytest-trio takes the run's clock only from the test's own arguments), which puts it on
virtual time: timeouts of minutes pass in milliseconds of real time.

    async def test_session_expiry(inproc, autojump_clock): ...

Tests marked `soak` run only when asked for by marker (`make soak`, `pytest -m soak`): a
plain `pytest` or `make test` leaves them out.

`-m 'not interop'` starts no broker process. A test that asks for a fixture that starts one
(`broker`, `shared_broker`, `cluster`, Spark's `broker_data`, ...) is marked `interop` here
at collection; one that starts a broker some other way (`minibroker serve` or
`python -m broker serve` in a subprocess, the compose cluster) without the `interop` marker
fails, in its setup or its call, where it tries.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from typing import Any, AsyncIterator

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
async def inproc(request, tmp_path) -> AsyncIterator[InProcessBroker]:
    """A module may configure it with ``INPROC_OVERRIDES = {"key": "value"}``."""
    if not isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
        pytest.fail("the inproc fixture runs on virtual time: ask for autojump_clock as well")
    overrides = getattr(request.module, "INPROC_OVERRIDES", {})
    async with in_process_broker(tmp_path / "broker", **overrides) as broker:
        yield broker


# Fixtures that start broker processes, by the module that defines them: a test that asks
# for one (directly or through another fixture) is an interop test.
_PROCESS_FIXTURES = {
    "tests.interop.conftest": {"broker", "make_broker", "shared_broker"},
    "tests.cluster.conftest": {"cluster", "make_cluster", "_package_cluster"},
    "tests.spark.conftest": {"broker_data"},
    "tests.spark.test_jobs_cli": {"group_run"},
}


# the directories of tests that drive broker processes (tests/docker: the compose cluster's)
_PROCESS_DIRS = ("interop", "cluster", "docker")


def _starts_brokers(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        module = getattr(defs[-1].func, "__module__", "")
        if name in _PROCESS_FIXTURES.get(module, ()):
            return True
    return False


# Under pytest-xdist (`make test` runs four workers) a module's tests stay on one worker (its
# module-scoped brokers, its tests that run in order), and so does each of these
# directories, which share one costly thing: docker's compose project and host ports (and
# the README's `make run`, which builds in build/ as the image's wheel does), cluster's
# package-scoped three nodes, spark's JVM. They go out first, the longest first, so that
# neither worker is left with one of them at the end.
_SHARED_WORKER = ("docker", "cluster", "spark")


# The simulation's short-seed sweep (tests/sim/test_sweep_*.py) is minutes of pure CPU in
# seeds that share nothing: handed out in chunks of this many, the last chunks fill the
# workers' ends instead of one module holding one worker long after the others are done.
_SWEEP_CHUNK = 25
_SWEEP_SEED = re.compile(r"test_sweep_\w+\.py::\w+\[(\d+)\]$")


def _work_unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")[1:]  # below tests/
    if parts == ["test_readme.py"]:
        return "docker"
    sweep = _SWEEP_SEED.search(nodeid)
    if sweep:
        return f"{path}#{int(sweep.group(1)) // _SWEEP_CHUNK}"
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


@pytest.hookimpl(tryfirst=True)  # mark before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        below_tests = item.nodeid.split("::", 1)[0].split("/")[1:]
        if below_tests[:1] and below_tests[0] in _PROCESS_DIRS or _starts_brokers(item):
            item.add_marker(pytest.mark.interop)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: see _SHARED_WORKER
        items.sort(key=lambda item: _first_rank(item.nodeid))
    if "soak" in (config.getoption("markexpr") or ""):
        return
    soak = [item for item in items if item.get_closest_marker("soak")]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]


def _starts_a_broker(args: Any) -> bool:
    """Whether a command line is `minibroker serve`, `python -m broker serve`, the compose
    cluster or one of the Makefile's targets that runs a broker."""
    if isinstance(args, (str, bytes)):
        argv = shlex.split(args.decode() if isinstance(args, bytes) else args)
    else:
        argv = [str(a) for a in args]
    words = [a.rsplit("/", 1)[-1] for a in argv]
    entry = {"minibroker", "broker", "tools.cli", "cli.main"}  # the command, or python -m X
    if entry & set(words) and {"serve", "chaos"} & set(words):  # chaos starts clusters
        return True
    if "docker-compose" in words or ("docker" in words and "compose" in words):
        return "up" in words or "run" in words
    dry_run = {"-n", "--dry-run", "--just-print"} & set(words)  # make prints, runs nothing
    return "make" in words and not dry_run and bool({"run", "cluster", "chaos"} & set(words))


_current_item: list[pytest.Item] = []


def _unmarked_spawn(args: Any) -> None:
    if not _current_item or not _starts_a_broker(args):
        return
    item = _current_item[-1]
    if not item.get_closest_marker("interop"):
        pytest.fail(f"{item.nodeid} starts a broker process ({args!r}) but is not marked "
                    "interop: `-m 'not interop'` must start none", pytrace=False)


def pytest_configure(config):
    original = subprocess.Popen.__init__

    def guarded(self, args, *rest, **kwargs):
        _unmarked_spawn(args)
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = guarded  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current_item.append(item)
    try:
        return (yield)
    finally:
        _current_item.pop()
