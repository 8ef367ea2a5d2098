"""Test certificates: a CA, the broker's and a client's (PEM), from scripts/make_certs.sh,
what `make certs` runs, so that tests and benchmarks use the files operators are shown."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["REPO_ROOT", "make_certs"]

REPO_ROOT = Path(__file__).resolve().parents[1]


def make_certs(directory: Path) -> Path:
    """Write the certificates into `directory` (created if missing) and return it;
    CalledProcessError, with the script's output, if it fails."""
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "make_certs.sh"), str(directory)],
                   check=True, capture_output=True, timeout=60)
    return directory
