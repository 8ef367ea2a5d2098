"""The examples of docs/CLIENT.md (the quick start, then the consumer group one) run as
written against a real broker."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interop
DOC = Path(__file__).resolve().parents[2] / "docs" / "CLIENT.md"


def _run_example(index: int, broker, tmp_path) -> list[str]:
    """Run the doc's `index`-th python block; its stdout lines."""
    code = DOC.read_text().split("```python\n")[index + 1].split("```", 1)[0]
    script = tmp_path / f"example{index}.py"
    script.write_text(code.replace("127.0.0.1:9092", broker.bootstrap))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_quick_start_runs(broker, tmp_path):
    first, offsets, *consumed = _run_example(0, broker, tmp_path)
    partition, offset = map(int, first.split())
    assert 0 <= partition < 3 and offset == 0  # the first record of a new topic
    assert all(o >= 0 for o in ast.literal_eval(offsets))
    assert len(consumed) >= 11 and all("b'order " in line or "b'first'" in line
                                       for line in consumed)


def test_the_consumer_group_example_runs(broker, tmp_path):
    _run_example(0, broker, tmp_path)  # creates "orders" with 101 records
    assert _run_example(1, broker, tmp_path) == [
        "assigned [0, 1, 2]", "read 101", "revoked [0, 1, 2]"]
