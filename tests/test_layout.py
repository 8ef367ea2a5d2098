"""The import directions of docs/ARCHITECTURE.md, held by reading every module's imports.

protocol/ imports nothing of ours; broker/ and client/ import only protocol/; spark_jobs/
imports protocol/ and broker.events (what the broker logs; what the rebalance bench's
consumers log is declared in spark_jobs.consumer_events, which bench/ writes to); tools/ and
bench/ may import anything. Imports under `if TYPE_CHECKING:` count too: a cycle that only type checkers
see is still two modules that cannot be understood one without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("protocol", "broker", "client", "spark_jobs", "tools", "bench")

# package -> what it may import of ours (besides itself); None means anything
ALLOWED: dict[str, set[str] | None] = {
    "protocol": set(),
    "broker": {"protocol"},
    "client": {"protocol"},
    "spark_jobs": {"protocol", "broker.events"},
    "tools": None,
    "bench": None,
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


def test_the_checker_sees_a_cycle_and_a_wrong_direction():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert not allowed("broker.server", "client.connection")
    assert allowed("spark_jobs.tables", "broker.events")
    assert not allowed("spark_jobs.tables", "bench.events")
    assert not allowed("spark_jobs.tables", "bench.rebalance")
    assert not allowed("spark_jobs.segments", "broker.log.manager")
    assert allowed("tools.cli", "spark_jobs.report")
