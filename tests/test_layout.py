"""The import directions of docs/ARCHITECTURE.md §2, held by reading every module's imports.

protocol/ imports nothing of ours; broker/ and client/ import only protocol/; spark_jobs/
imports protocol/ and broker.events (what the broker logs; what the rebalance bench's
consumers log is declared in spark_jobs.consumer_events, which bench/ writes to); harness/
(brokers, clusters, ports, waits, raw requests and certificates for tests and benchmarks)
imports protocol/, broker/ and client/; sim/ (the whole-cluster simulation) those and
harness/; tools/ imports protocol/, broker/, client/ and
spark_jobs/, bench/ those and harness/, and the two never each other; cli/, the command
line, sits on top and may import anything, and nothing imports it; tests/ may import
anything, and nothing but tests imports them. Imports under `if TYPE_CHECKING:` count too: a
cycle that only type checkers see is still two modules that cannot be understood one
without the other.

Two graphs are checked for cycles: modules, and packages (an edge from package A to B when
any module of A imports one of B). A package cycle is two layers that each need the other
even when no two modules do, as tools.cli -> bench.cli -> tools.extras once was.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("protocol", "broker", "client", "spark_jobs", "harness", "sim", "tools", "bench",
            "cli", "tests")

# package -> what it may import of ours (besides itself); None means anything
ALLOWED: dict[str, set[str] | None] = {
    "protocol": set(),
    "broker": {"protocol"},
    "client": {"protocol"},
    "spark_jobs": {"protocol", "broker.events"},
    "harness": {"protocol", "broker", "client"},
    # the whole-cluster simulation: the product's own nodes and clients, judged by the
    # chaos runs' checkers
    "sim": {"protocol", "broker", "client", "harness"},
    "tools": {"protocol", "broker", "client", "spark_jobs"},
    "bench": {"protocol", "broker", "client", "spark_jobs", "harness"},
    "cli": None,
    # the tests may reach anything, and nothing of the product or the harness reaches them
    "tests": None,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imported_names(path: Path, name: str) -> set[str]:
    """Every module of ours that `path` imports, at any depth of its code."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # `from pkg import mod` imports pkg.mod when it is a module
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {n for n in found if n.split(".")[0] in PACKAGES}


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports (a fresh copy: callers may change it)."""
    return {name: set(targets) for name, targets in _import_graph().items()}


@functools.cache  # every test reads the same tree: parse it once
def _import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        for imported in imported_names(path, name):
            # resolve to the longest prefix that is one of our modules
            parts = imported.split(".")
            while parts and ".".join(parts) not in mods:
                parts.pop()
            if parts and ".".join(parts) != name:
                targets.add(".".join(parts))
        graph[name] = targets
    return graph


def allowed(source: str, target: str) -> bool:
    own, their = source.split(".")[0], target.split(".")[0]
    rule = ALLOWED[own]
    if rule is None or own == their:
        return True
    return any(target == a or target.startswith(a + ".") for a in rule)


def test_every_package_has_a_rule():
    assert set(ALLOWED) == set(PACKAGES)
    assert all((ROOT / pkg / "__init__.py").is_file() for pkg in PACKAGES)


@pytest.mark.parametrize("package", [p for p, rule in ALLOWED.items() if rule is not None])
def test_imports_point_down(package):
    graph = import_graph()
    wrong = sorted(f"{src} -> {dst}" for src, targets in graph.items()
                   if src.split(".")[0] == package for dst in targets if not allowed(src, dst))
    assert wrong == []


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that starts and ends at the same module, or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = GREY
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt) == GREY:
                return stack[stack.index(nxt):] + [nxt]
            if colour.get(nxt) == WHITE:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = BLACK
        return None

    for node in sorted(graph):
        if colour[node] == WHITE:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycles():
    graph = import_graph()
    # a package's __init__ re-exporting its own modules is not a cycle of ideas: the
    # modules never import the package back except through it, so leave those edges out
    for name in list(graph):
        if (ROOT / Path(*name.split(".")) / "__init__.py").is_file():
            graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    assert find_cycle(graph) is None


def package_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """package -> {package it imports: the module imports that make the edge}."""
    packages: dict[str, dict[str, list[str]]] = {}
    for src, targets in graph.items():
        edges = packages.setdefault(src.split(".")[0], {})
        for dst in targets:
            if dst.split(".")[0] != src.split(".")[0]:
                edges.setdefault(dst.split(".")[0], []).append(f"{src} -> {dst}")
    return packages


def package_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One package-level cycle, each step named with the module imports that close it:
    ["tools -> bench: tools.cli -> bench.cli", "bench -> tools: bench.cli -> tools.extras"]."""
    packages = package_graph(graph)
    cycle = find_cycle({pkg: set(edges) for pkg, edges in packages.items()})
    if cycle is None:
        return None
    return [f"{a} -> {b}: " + ", ".join(sorted(packages[a][b]))
            for a, b in zip(cycle, cycle[1:])]


def test_no_package_cycles():
    cycle = package_cycle(import_graph())
    assert cycle is None, "a package cycle: " + "; ".join(cycle or ())


def test_the_checker_sees_a_cycle_and_a_wrong_direction():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert not allowed("broker.server", "client.connection")
    assert allowed("spark_jobs.tables", "broker.events")
    assert not allowed("spark_jobs.tables", "bench.events")
    assert not allowed("spark_jobs.tables", "bench.rebalance")
    assert not allowed("spark_jobs.segments", "broker.log.manager")
    assert allowed("tools.analyze", "spark_jobs.report")
    assert not allowed("tools.dump_log", "bench.chaos.replicas")
    assert not allowed("bench.cli", "tools.extras")
    assert not allowed("tools.analyze", "cli.extras")
    assert allowed("cli.main", "bench.cli")
    assert allowed("bench.cluster", "harness.cluster")
    assert not allowed("harness.broker", "tests.util")
    assert not allowed("harness.cluster", "bench.cluster")
    assert not allowed("tools.topics", "harness.wait")


def test_the_checker_sees_a_package_cycle_no_module_cycle_shows():
    """tools.cli -> bench.cli -> tools.extras: no module is reached twice, the packages are."""
    graph = {"tools.cli": {"bench.cli"}, "bench.cli": {"tools.extras"}, "tools.extras": set(),
             "protocol.records": set()}
    assert find_cycle(graph) is None
    assert package_cycle(graph) == ["bench -> tools: bench.cli -> tools.extras",
                                    "tools -> bench: tools.cli -> bench.cli"]
    assert package_cycle({"tools.cli": {"protocol.records"}, "protocol.records": set()}) is None
