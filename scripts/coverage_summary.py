"""Per-package totals of a `coverage json` report: branch coverage (branches taken of all
branches) and line coverage for broker/, client/ and protocol/, then all three together.

    coverage json -o coverage.json && python scripts/coverage_summary.py coverage.json

coverage.py's own report gives files, and its single total mixes lines with branches; the
figures docs/TESTING.md records are these.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PACKAGES = ("broker", "client", "protocol")


def main() -> None:
    files = json.loads(Path(sys.argv[1]).read_text())["files"]
    rows: dict[str, list[int]] = {p: [0, 0, 0, 0] for p in (*PACKAGES, "total")}
    for name, data in files.items():
        package = Path(name).parts[0]
        if package not in PACKAGES:
            continue
        s = data["summary"]
        for key in (package, "total"):
            row = rows[key]
            row[0] += s["covered_branches"]
            row[1] += s["num_branches"]
            row[2] += s["covered_lines"]
            row[3] += s["num_statements"]
    print(f"{'package':<10} {'branches':>17} {'lines':>19}")
    for key, (cb, nb, cl, ns) in rows.items():
        print(f"{key:<10} {cb:>6}/{nb:<6} {100 * cb / max(nb, 1):5.1f}%"
              f" {cl:>6}/{ns:<6} {100 * cl / max(ns, 1):5.1f}%")


if __name__ == "__main__":
    main()
