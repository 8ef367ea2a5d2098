"""Helpers shared by all tests.

Tests wait for conditions, never for fixed amounts of time: use ``wait_until`` with a
deadline and a message that says what was expected (trio tests await ``wait_for``). Both
are harness.wait's, named here too because tests have always imported them from here.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.wait import WaitTimeout, wait_for, wait_until

__all__ = ["WaitTimeout", "mounted_tmpfs", "unique", "wait_for", "wait_until"]


def unique(prefix: str) -> str:
    """A topic or group name no other test uses (tests share brokers)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def mounted_tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's -o size=) under tmp_path, unmounted at the end: a small
    disk that fills up. Fails the test when it cannot mount (it needs root)."""
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                           str(mountpoint)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"this test needs `mount -t tmpfs` (root): {done.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=True)
