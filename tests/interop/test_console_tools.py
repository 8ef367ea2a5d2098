"""`minibroker produce` / `minibroker consume` (tools/produce.py, consume.py) run as
subprocesses against the real broker, cross-checked with kcat: keys through
--key-separator, every codec, --group (a member of the group) resuming at the committed
offset, --timeout-ms, and a line without the separator reported and skipped."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.interop.conftest import REPO_ROOT
from tests.interop.kcat import kcat
from tests.interop.librdkafka import create_topic
from tests.util import unique

pytestmark = pytest.mark.interop
# consume --group joins a group: without the initial delay the first rebalance is at once
SHARED_BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def cli(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], cwd=REPO_ROOT,
                          input=stdin, capture_output=True, text=True, timeout=timeout)


def produce(bootstrap: str, topic: str, lines: list[str], *extra: str
            ) -> subprocess.CompletedProcess:
    done = cli("produce", topic, "--bootstrap-server", bootstrap, *extra,
               stdin="".join(line + "\n" for line in lines))
    assert done.returncode == 0, done.stderr
    return done


def consume(bootstrap: str, topic: str, *extra: str) -> subprocess.CompletedProcess:
    done = cli("consume", topic, "--bootstrap-server", bootstrap, *extra)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("codec", CODECS)
def test_keys_and_every_codec_read_back_by_consume_and_kcat(shared_broker, codec):
    topic = unique(f"console-{codec}")
    create_topic(shared_broker.bootstrap, topic, 3)
    lines = [f"key{i % 7}:value {i} ünï" for i in range(60)]
    produce(shared_broker.bootstrap, topic, lines, "--key-separator", ":",
            "--compression", codec)

    ours = consume(shared_broker.bootstrap, topic, "--from-beginning", "--print-key",
                   "--key-separator", ":", "--max-messages", str(len(lines)))
    assert sorted(ours.stdout.splitlines()) == sorted(lines)
    assert "Processed a total of 60 messages" in ours.stderr
    # keyed records land per key on one partition, so each key's values stay in order
    for k in range(7):
        prefix = f"key{k}:"
        assert ([x for x in ours.stdout.splitlines() if x.startswith(prefix)]
                == [x for x in lines if x.startswith(prefix)])

    theirs = kcat("-b", shared_broker.bootstrap, "-C", "-t", topic, "-o", "beginning",
                  "-e", "-f", "%k:%s\n")
    assert sorted(theirs.splitlines()) == sorted(lines)


def test_consume_reads_what_kcat_produced_null_key_printed(shared_broker):
    topic = unique("console-kcat")
    kcat("-b", shared_broker.bootstrap, "-P", "-t", topic, "-z", "lz4",
         stdin=b"plain one\nplain two\n")
    out = consume(shared_broker.bootstrap, topic, "--from-beginning", "--print-key",
                  "--max-messages", "2")
    assert out.stdout.splitlines() == ["null\tplain one", "null\tplain two"]
    values = consume(shared_broker.bootstrap, topic, "--from-beginning", "--max-messages", "2")
    assert values.stdout.splitlines() == ["plain one", "plain two"]


def test_group_second_run_resumes_after_first_commit(shared_broker):
    topic, group = unique("console-group"), unique("console-g")
    produce(shared_broker.bootstrap, topic, [f"m{i}" for i in range(10)])

    first = consume(shared_broker.bootstrap, topic, "--group", group, "--from-beginning",
                    "--max-messages", "4")
    assert first.stdout.splitlines() == ["m0", "m1", "m2", "m3"]
    # committed offset 4 wins over --from-beginning, as in kafka-console-consumer
    second = consume(shared_broker.bootstrap, topic, "--group", group, "--from-beginning",
                     "--timeout-ms", "1500")
    assert second.stdout.splitlines() == [f"m{i}" for i in range(4, 10)]
    assert "Processed a total of 6 messages" in second.stderr

    produce(shared_broker.bootstrap, topic, ["m10", "m11"])
    third = consume(shared_broker.bootstrap, topic, "--group", group, "--timeout-ms", "1500")
    assert third.stdout.splitlines() == ["m10", "m11"]

    # a new group without --from-beginning starts at the end: nothing old
    fresh = consume(shared_broker.bootstrap, topic, "--group", unique("console-g2"),
                    "--timeout-ms", "800")
    assert fresh.stdout == ""
    described = cli("groups", "describe", group, "--bootstrap-server", shared_broker.bootstrap)
    assert described.returncode == 0, described.stderr
    assert any(line.split()[:4] == [group, topic, "0", "12"]
               for line in described.stdout.splitlines()), described.stdout


def test_timeout_ms_exits_zero_with_total_on_stderr(shared_broker):
    topic = unique("console-timeout")
    produce(shared_broker.bootstrap, topic, ["a", "b", "c"])
    started = time.monotonic()
    done = consume(shared_broker.bootstrap, topic, "--from-beginning", "--timeout-ms", "1000")
    elapsed = time.monotonic() - started
    assert done.stdout.splitlines() == ["a", "b", "c"]
    assert done.stderr.strip().splitlines()[-1] == "Processed a total of 3 messages"
    assert elapsed < 15, elapsed

    empty = consume(shared_broker.bootstrap, topic, "--timeout-ms", "500")  # from the end
    assert empty.stdout == ""
    assert "Processed a total of 0 messages" in empty.stderr


def test_partition_and_offset(shared_broker):
    topic = unique("console-part")
    produce(shared_broker.bootstrap, topic, [f"v{i}" for i in range(5)])
    done = consume(shared_broker.bootstrap, topic, "--partition", "0", "--offset", "3",
                   "--timeout-ms", "800")
    assert done.stdout.splitlines() == ["v3", "v4"]
    bad = cli("consume", topic, "--bootstrap-server", shared_broker.bootstrap,
              "--offset", "3")
    assert bad.returncode == 2 and "--offset needs --partition" in bad.stderr
    # a member reads what the group assigns it, as in kafka-console-consumer
    grouped = cli("consume", topic, "--bootstrap-server", shared_broker.bootstrap,
                  "--group", unique("console-pg"), "--partition", "0")
    assert (grouped.returncode, grouped.stderr) == (
        2, "minibroker consume: Options group and partition cannot be specified together.\n")


def test_line_without_separator_is_reported_and_skipped(shared_broker):
    topic = unique("console-nosep")
    done = produce(shared_broker.bootstrap, topic, ["a:1", "broken line", "b:2=x:y"],
                   "--key-separator", ":")
    assert "line 2" in done.stderr and "broken line" in done.stderr and "skipped" in done.stderr
    out = consume(shared_broker.bootstrap, topic, "--from-beginning", "--print-key",
                  "--key-separator", "|", "--timeout-ms", "1000")
    assert out.stdout.splitlines() == ["a|1", "b|2=x:y"]


def test_failed_delivery_exits_one(shared_broker):
    topic = unique("console-fail")
    done = cli("produce", topic, "--bootstrap-server", shared_broker.bootstrap,
               "--property", "max.request.size=200", stdin="small\n" + "x" * 500 + "\n")
    assert done.returncode == 1
    assert "line 2" in done.stderr and "MESSAGE_TOO_LARGE" in done.stderr
    out = consume(shared_broker.bootstrap, topic, "--from-beginning", "--timeout-ms", "800")
    assert out.stdout.splitlines() == ["small"]


def test_unknown_topic_and_bad_options(shared_broker):
    missing = cli("consume", unique("console-none"), "--bootstrap-server",
                  shared_broker.bootstrap, "--timeout-ms", "500")
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    bad = cli("produce", "t", "--bootstrap-server", shared_broker.bootstrap,
              "--property", "no.such.setting=1", stdin="")
    assert bad.returncode == 2 and "no.such.setting" in bad.stderr
