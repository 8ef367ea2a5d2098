"""The client quick start in docs/CLIENT.md runs as written against a real broker."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interop
DOC = Path(__file__).resolve().parents[2] / "docs" / "CLIENT.md"


def test_the_quick_start_runs(broker, tmp_path):
    code = DOC.read_text().split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "quickstart.py"
    script.write_text(code.replace("127.0.0.1:9092", broker.bootstrap))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    first, offsets, *consumed = done.stdout.splitlines()
    partition, offset = map(int, first.split())
    assert 0 <= partition < 3 and offset == 0  # the first record of a new topic
    assert all(o >= 0 for o in ast.literal_eval(offsets))
    assert len(consumed) >= 11 and all("b'order " in line or "b'first'" in line
                                       for line in consumed)
