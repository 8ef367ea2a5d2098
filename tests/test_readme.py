"""The README as a newcomer meets it: the snippets run as written, and `make run` starts fast.

- Every ```sh block parses (`bash -n`) and every ```python block compiles, in every section:
  those that need Docker, three brokers, certificates or Spark are only parsed here.
- The walk-through, from the top to "Analysing the logs" (kcat, `minibroker topics` and
  `cluster`, confluent-kafka's producer and consumer, `groups describe` and `dump-log`, our
  client library, a KIP-848 consumer), runs in order as written against a fresh broker, its
  address in place of 127.0.0.1:9092, in one shell session as in a newcomer's terminal: a
  variable one block sets is there for the next, and `data/` is the broker's data directory.
  The first block (`make run`, `make test`) is what the test stands in for.
- `make run` installs the package alone (not the test extra), says where the tools are, and
  the two installs know about each other (checked with `make -n` on a made-up venv).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.interop.conftest import BrokerProcess

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_ADDRESS = "127.0.0.1:9092"
WALK_THROUGH_ENDS = "## Analysing the logs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
MARK = "@@@ README block "
WALK_THROUGH_TIMEOUT_S = 300


class Snippet(NamedTuple):
    lang: str
    code: str
    line: int  # of the opening fence, 1-based
    offset: int  # in the README's text


def snippets(text: str) -> list[Snippet]:
    return [Snippet(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, m.start())
            for m in FENCE.finditer(text)]


def walk_through(text: str) -> list[Snippet]:
    """The runnable blocks a newcomer meets before "Analysing the logs", after `make run`."""
    end = text.index(WALK_THROUGH_ENDS)
    setup, *rest = [s for s in snippets(text) if s.offset < end and s.lang in ("sh", "python")]
    assert [line.split()[:2] for line in setup.code.splitlines()] == [
        ["make", "run"], ["make", "test"]], "the README opens with make run and make test"
    return rest


def shell_script(blocks: list[Snippet], workdir: Path, address: str) -> str:
    """One bash session running `blocks` in order, each after a marker line on stdout."""
    lines = ["set -eo pipefail", "exec 2>&1", f"cd {workdir}"]
    for i, block in enumerate(blocks):
        # the venv the test runs in stands for the checkout's .venv
        code = block.code.replace(README_ADDRESS, address).replace(".venv/", f"{sys.prefix}/")
        lines.append(f"echo '{MARK}{i}'")
        if block.lang == "python":
            script = workdir / f"readme-{block.line}.py"
            script.write_text(code)
            lines.append(f"python {script}")
        else:
            lines.append(code)
    return "\n".join(lines) + "\n"


def outputs_by_block(output: str, count: int) -> list[str]:
    parts = re.split(rf"^{re.escape(MARK)}(\d+)$", output, flags=re.M)
    found = {int(i): text for i, text in zip(parts[1::2], parts[2::2])}
    return [found.get(i, "") for i in range(count)]


# -- every snippet parses ---------------------------------------------------------------------

def test_every_python_and_shell_snippet_of_the_readme_parses():
    all_snippets = snippets(README.read_text())
    python = [s for s in all_snippets if s.lang == "python"]
    shell = [s for s in all_snippets if s.lang == "sh"]
    assert len(python) >= 5 and len(shell) >= 10  # the parser found the blocks
    for s in python:
        compile(s.code, f"README.md:{s.line}", "exec")
    wrong = []
    for s in shell:
        done = subprocess.run(["bash", "-n"], input=s.code, capture_output=True, text=True)
        if done.returncode != 0:
            wrong.append(f"README.md:{s.line}: {done.stderr.strip()}")
    assert wrong == []


def test_every_fenced_block_that_names_a_command_is_marked_sh_or_python():
    # an unmarked block escapes both checks; only the usage line, a transcript and the
    # layout are text
    unmarked = [s for s in snippets(README.read_text()) if s.lang == ""]
    assert [s.code.split(None, 1)[0] for s in unmarked] == ["minibroker", "$", "protocol/"]


# -- the walk-through runs ----------------------------------------------------------------------

@pytest.mark.interop
def test_the_walk_through_runs_in_order_as_written(tmp_path):
    assert shutil.which("kcat"), "kcat is missing: make test installs it (make sysdeps)"
    assert sys.prefix != sys.base_prefix, "run from a venv: it stands for the README's .venv"
    blocks = walk_through(README.read_text())
    broker = BrokerProcess(tmp_path)  # its data directory is tmp_path/data, the README's data/
    broker.start()
    try:
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                   PIP_NO_INDEX="1")  # `pip install confluent-kafka` finds it installed
        done = subprocess.run(["bash", "-c", shell_script(blocks, tmp_path, broker.bootstrap)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=WALK_THROUGH_TIMEOUT_S)
    finally:
        broker.stop()
    outputs = outputs_by_block(done.stdout, len(blocks))
    ran = sum(1 for i in range(len(blocks)) if f"{MARK}{i}\n" in done.stdout)
    assert done.returncode == 0, (
        f"README.md:{blocks[ran - 1].line} failed (status {done.returncode}):\n{outputs[ran - 1]}")

    def output_of(marker: str) -> str:
        (i,) = [i for i, b in enumerate(blocks) if marker in b.code]
        return outputs[i]

    kcat = output_of("kcat -b 127.0.0.1:9092 -L")
    assert "1 brokers:" in kcat and "k1 => hello @ 0" in kcat and "k2 => world @ 1" in kcat
    topics = output_of("minibroker topics create orders")
    assert "Created topic orders." in topics
    assert {"demo", "orders"} <= set(topics.splitlines())
    assert re.search(r"^Topic: orders\t.*PartitionCount: 6\t.*"
                     r"Configs: cleanup\.policy=compact,retention\.ms=86400000$", topics, re.M)
    assert "ClusterId:" in output_of("minibroker cluster describe")
    assert "delivered to orders [" in output_of("on_delivery=delivered")
    assert "b'customer-42' b'...'" in output_of('"group.id": "billing"')
    assert "offset_commit::group=billing,partition=orders-" in output_of("minibroker dump-log")
    assert "b'customer-42' b'hello'" in output_of("from client import")
    assert "topic=orders" in output_of('"group.protocol": "consumer"')


# -- make run -----------------------------------------------------------------------------------

def make_dry_run(target: str, venv: Path) -> str:
    done = subprocess.run(["make", "-n", target, f"VENV={venv}", "LISTEN=127.0.0.1:1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def fake_venv(tmp_path: Path, *stamps: str) -> Path:
    """A venv directory with a python and the given stamps, newer than pyproject.toml."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("bin/python", *stamps):
        (venv / name).touch()
    return venv


def test_make_run_installs_the_package_alone_and_says_where_the_tools_are(tmp_path):
    venv = tmp_path / "venv"
    plan = make_dry_run("run", venv)
    assert f"{venv}/bin/python -m pip install -e .\n" in plan
    assert "[test]" not in plan
    assert f". {venv}/bin/activate" in plan and f"{venv}/bin/minibroker serve" in plan


def test_make_run_after_make_test_installs_nothing(tmp_path):
    plan = make_dry_run("run", fake_venv(tmp_path, ".installed", ".installed-run"))
    assert "pip install" not in plan and "minibroker serve" in plan


def test_make_test_after_make_run_installs_the_test_extra(tmp_path):
    venv = fake_venv(tmp_path, ".installed-run")
    assert "pip install" not in make_dry_run("run", venv)
    assert f"{venv}/bin/python -m pip install -e '.[test]'" in make_dry_run("lint", venv)
