"""kcat (or Debian's older name, kafkacat) run as a subprocess by interop tests."""

from __future__ import annotations

import shutil
import subprocess

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def kcat(*args: str, stdin: bytes | None = None) -> str:
    assert KCAT, "kcat is missing: make test installs it (make sysdeps)"
    done = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()
