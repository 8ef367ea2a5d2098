"""The examples of docs/CLIENT.md (the quick start, then the consumer group one) and the
README's client example run as written against a real broker, each twice and in either
order: a second run meets the topics and committed offsets of the first."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interop
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "CLIENT.md"
README = ROOT / "README.md"


def _blocks(path: Path) -> list[str]:
    return [block.split("```", 1)[0] for block in path.read_text().split("```python\n")[1:]]


def _readme_client_example() -> str:
    # the runnable one (the Docker section's snippet shows addresses, not a program)
    (code,) = [b for b in _blocks(README) if "from client import" in b and "trio.run(" in b]
    return code


def _run(code: str, broker, tmp_path, name: str) -> list[str]:
    """Run one example; its stdout lines."""
    script = tmp_path / f"{name}.py"
    script.write_text(code.replace("127.0.0.1:9092", broker.bootstrap))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _quick_start(broker, tmp_path, first: bool) -> None:
    first_line, offsets, *consumed = _run(_blocks(DOC)[0], broker, tmp_path, "quick_start")
    partition, offset = map(int, first_line.split())
    assert 0 <= partition < 3 and offset >= 0
    if first:
        assert offset == 0  # the first record of a new topic
    assert all(o >= 0 for o in ast.literal_eval(offsets))
    # the first run reads from the earliest offset up to offset 10 of some partition, a
    # later one from billing's committed offsets: at least one record either way
    assert len(consumed) >= (11 if first else 1)
    assert all("b'invoice " in line or "b'first'" in line for line in consumed)


def _group_example(broker, tmp_path) -> None:
    assert _run(_blocks(DOC)[1], broker, tmp_path, "group") == [
        "assigned [0, 1, 2]", "read 101", "revoked [0, 1, 2]"]


def _readme_example(broker, tmp_path) -> None:
    first_line, consumed = _run(_readme_client_example(), broker, tmp_path, "readme")
    assert len(first_line.split()) == 2 and "b'customer-42'" in consumed


def test_the_quick_start_runs_twice(broker, tmp_path):
    _quick_start(broker, tmp_path, first=True)
    _quick_start(broker, tmp_path, first=False)


def test_the_consumer_group_example_runs_twice(broker, tmp_path):
    _quick_start(broker, tmp_path, first=True)  # creates "invoices" with 101 records
    _group_example(broker, tmp_path)
    _group_example(broker, tmp_path)


def test_the_examples_in_any_order(broker, tmp_path):
    _readme_example(broker, tmp_path)
    _readme_example(broker, tmp_path)
    _quick_start(broker, tmp_path, first=True)
    _group_example(broker, tmp_path)
    _readme_example(broker, tmp_path)
    _quick_start(broker, tmp_path, first=False)
    _group_example(broker, tmp_path)
