"""Fixtures for the cluster tests: three combined nodes as separate processes
(tests/cluster/harness.py).

    def test_spread(cluster):          # one fast cluster for the package, whole at each test
        ...
    def test_exact(make_cluster):      # a cluster of a test's own
        c = make_cluster(overrides={})  # the issue's command, every default

`cluster`, one for the package, runs with harness.FAST (a fenced broker after 2 s, not 9)
and is made whole before each test that asks for it: a node a previous test killed or
stopped is started again and every node's Metadata lists all three. When a test fails, the
last lines of every node's log are added to its report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.cluster.harness import FAST, Cluster


class ClusterFactory:
    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.clusters: list[Cluster] = []

    def __call__(self, size: int = 3, overrides: dict[str, Any] | None = None,
                 **kwargs: Any) -> Cluster:
        c = Cluster(self.base_dir / f"cluster-{len(self.clusters)}", size,
                    FAST if overrides is None else overrides, **kwargs)
        self.clusters.append(c)
        return c.start()

    def stop_all(self) -> None:
        for c in self.clusters:
            c.stop_all()


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    factory = ClusterFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="package")
def _package_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    factory = ClusterFactory(tmp_path_factory.mktemp("cluster"))
    try:
        yield factory()
    finally:
        factory.stop_all()


@pytest.fixture
def cluster(_package_cluster: Cluster) -> Cluster:
    """The package's fast cluster, every node running and listed by every node."""
    c = _package_cluster
    down = [n for n in c.nodes if not n.running]
    for n in down:
        n.launch()
    c.wait_ready(down)
    c.wait_formed()
    return c


def _clusters_used_by(item: pytest.Item) -> list[Cluster]:
    found: list[Cluster] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, Cluster):
            found.append(value)
        elif isinstance(value, ClusterFactory):
            found += value.clusters
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed:
        for c in _clusters_used_by(item):
            for n in c.all_nodes():
                status = (f", exited unexpectedly with status {n.proc.returncode}"
                          if n.died_unexpectedly else "")
                report.sections.append(
                    (f"node {n.node_id} {n.bootstrap} (pid {n.pid}{status}): "
                     f"last lines of {n.log_path}", n.tail()))
    return report
