"""The `minibroker` command line has three doors, and all lead to cli.main: the console
script, `python -m cli`, and `python -m tools.cli` (its module name before cli/ was its own
package, which scripts outside the project still run)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_the_console_script_is_cli_main():
    (script,) = entry_points(group="console_scripts", name="minibroker")
    assert script.value == "cli.main:main"


def test_both_module_names_print_the_same_help_and_status():
    new, old = run("-m", "cli", "topics", "--help"), run("-m", "tools.cli", "topics", "--help")
    assert new.returncode == old.returncode == 0, (new.stderr, old.stderr)
    assert new.stdout == old.stdout
    assert new.stdout.startswith("usage: minibroker topics ")


def test_a_failure_keeps_its_exit_status_through_the_old_name():
    done = run("-m", "tools.cli", "topics", "list", "--bootstrap-server", "h:1:2")
    assert done.returncode == 2
    assert done.stderr.startswith("minibroker topics: --bootstrap-server: bad broker address")
