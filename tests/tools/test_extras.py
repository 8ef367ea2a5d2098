"""A missing optional dependency is one line naming the extra to install, and exit status 2:
`minibroker analyze` without the spark extra, `minibroker bench ...` without the bench
extra. Each case runs the real CLI in a subprocess where the module cannot be imported:
either blocked (None in sys.modules, as when it is not installed) or shadowed by a package
whose import raises (a broken install)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_blocked(blocked: list[str], argv: list[str], *, pythonpath: Path | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess:
    code = ("import sys\n"
            f"for name in {blocked!r}:\n"
            "    sys.modules[name] = None\n"
            "from cli.main import main\n"
            f"sys.exit(main({argv!r}))\n")
    path = [str(ROOT)] + ([str(pythonpath)] if pythonpath else [])
    if pythonpath:
        path.reverse()  # the shadowing package first
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run([sys.executable, "-c", code], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def assert_one_line(done: subprocess.CompletedProcess, line: str) -> None:
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n"), done.stderr


@pytest.mark.parametrize("module,distribution", [
    ("pyspark", "pyspark"), ("pyarrow", "pyarrow"), ("pandas", "pandas"),
    ("matplotlib", "matplotlib")])
def test_analyze_without_the_spark_extra(tmp_path, module, distribution):
    (tmp_path / "data").mkdir()
    done = run_blocked([module], ["analyze", "--data-dir", str(tmp_path / "data"),
                                  "--out", str(tmp_path / "out")])
    assert_one_line(done, f"minibroker analyze: {distribution} is not installed; "
                          f"pip install 'minibroker[spark]'")
    assert not (tmp_path / "out").exists()  # failed before any work


def test_analyze_with_a_broken_install_names_the_error(tmp_path):
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('libfreetype.so.6: cannot open')\n")
    done = run_blocked([], ["analyze", "--data-dir", str(tmp_path), "--out",
                            str(tmp_path / "out")], pythonpath=tmp_path / "shadow")
    assert_one_line(done, "minibroker analyze: matplotlib cannot be imported "
                          "(libfreetype.so.6: cannot open); pip install 'minibroker[spark]'")


def test_analyze_help_needs_no_extra():
    done = run_blocked(["pyspark", "matplotlib"], ["analyze", "--help"])
    assert done.returncode == 0 and "--data-dir" in done.stdout


@pytest.mark.parametrize("argv,module,distribution", [
    (["bench", "produce", "--records", "10"], "confluent_kafka", "confluent-kafka"),
    (["bench", "groups"], "confluent_kafka", "confluent-kafka"),
    (["bench", "replication", "--runs", "1"], "confluent_kafka", "confluent-kafka"),
    (["bench", "client", "--clients", "minibroker,kafka-python"], "kafka", "kafka-python"),
    (["bench", "client", "--clients", "minibroker"], "confluent_kafka", "confluent-kafka"),
    (["bench", "client", "--clients", "minibroker,aiokafka"], "aiokafka", "aiokafka"),
    (["bench", "rebalance", "--protocol", "eager", "--client", "librdkafka"],
     "confluent_kafka", "confluent-kafka"),
    (["bench", "rebalance", "--protocol", "eager"], "matplotlib", "matplotlib"),
])
def test_bench_without_the_bench_extra(argv, module, distribution):
    done = run_blocked([module], argv)
    assert_one_line(done, f"minibroker bench: {distribution} is not installed; "
                          f"pip install 'minibroker[bench]'")


def test_bench_asks_only_for_what_the_benchmark_uses():
    from bench.cli import requirements
    assert requirements(["client", "--clients", "minibroker"]) == ["confluent_kafka"]
    assert requirements(["client"]) == ["confluent_kafka", "aiokafka", "kafka"]
    assert requirements(["rebalance", "--compare", "a", "b"]) == []
    assert requirements(["rebalance", "--compare", "a", "b", "--chart=c.png"]) == ["matplotlib"]
    assert requirements(["produce", "--help"]) == []
    assert requirements(["codec"]) == requirements(["authorizer"]) == []


def test_bench_codec_runs_without_the_bench_extra():
    """Pure CPU: every case prints its encode and decode line, the two codecs agreeing."""
    done = run_blocked(["confluent_kafka", "kafka", "aiokafka", "matplotlib"],
                       ["bench", "codec", "--quick"])
    assert done.returncode == 0, done.stderr
    *table, framing_line = done.stdout.splitlines()
    assert framing_line.startswith("framing: a 1 MB frame") and framing_line.endswith(" µs")
    rows = [line.split() for line in table[1:]]
    assert [row[0] for row in rows if row[0][0].isupper()] == [
        "FetchRequest", "FetchResponse", "ProduceRequest", "MetadataResponse"]
    # per message an encode and a decode line, ending in the speed-up
    assert [row[-4] for row in rows].count("encode") == 4
    assert [row[-4] for row in rows].count("decode") == 4
    assert all(row[-1].endswith("x") and float(row[-1][:-1]) > 0 for row in rows)


def test_a_module_missing_later_is_caught_too():
    """A ModuleNotFoundError that escapes the up-front check (an import deep in a job)
    still becomes the one line; one of ours missing stays a traceback, as a bug."""
    from cli.extras import missing_extra
    e = ModuleNotFoundError("No module named 'pyarrow.lib'", name="pyarrow.lib")
    assert str(missing_extra("minibroker analyze", e, ["spark"])) == (
        "minibroker analyze: pyarrow is not installed; pip install 'minibroker[spark]'")
    assert missing_extra("minibroker analyze", ModuleNotFoundError(name="client"),
                         ["spark"]) is None


def test_serve_needs_no_extra(tmp_path):
    code = ("import sys\n"
            "for name in ['pyspark', 'pyarrow', 'pandas', 'matplotlib', 'confluent_kafka',"
            " 'kafka', 'aiokafka', 'numpy']:\n"
            "    sys.modules[name] = None\n"
            "import cli.main, broker.main, broker.broker, broker.server, client\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
