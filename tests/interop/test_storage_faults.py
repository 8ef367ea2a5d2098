"""A real disk filling up, and a partition directory made unwritable, under a broker
subprocess, seen by librdkafka; and the broker's last line when it cannot start.

The data directory is a 2 MiB tmpfs the test mounts and unmounts itself (root may mount on
these machines; if mount fails the test fails saying so, it is never skipped). The broker's
own log stays outside the tmpfs so that what it says can be read. chmod binds only an
unprivileged process, so that broker runs as nobody (setpriv; missing, the test fails).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from tests.interop.conftest import REPO_ROOT, BrokerProcess, free_port
from tests.interop.librdkafka import consume_all, create_topic
from tests.util import mounted_tmpfs, wait_until

VALUE = b"v" * 8192


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    with mounted_tmpfs(tmp_path, "2m") as mountpoint:
        yield mountpoint


def _produce_one(producer: Producer, partition: int):
    """Produce one record and wait for its delivery report: (error or None, offset)."""
    report = []
    producer.produce("t", value=VALUE, partition=partition,
                     on_delivery=lambda err, msg: report.append((err, msg.offset())))
    assert producer.flush(15) == 0, "no delivery report within 15 s"
    return report[0]


def test_a_full_disk_answers_kafka_storage_error_and_writes_resume_when_space_returns(
        tmp_path, small_tmpfs):
    ballast = small_tmpfs / "ballast"  # what an operator frees later
    ballast.write_bytes(b"\0" * 512 * 1024)
    broker = BrokerProcess(tmp_path)  # its log in tmp_path, its data on the tmpfs
    broker.data_dir = small_tmpfs / "data"
    broker.start()
    try:
        create_topic(broker.bootstrap, "t", partitions=2)
        # retries=0: each delivery report carries the broker's own answer
        transport_errors = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "retries": 0, "linger.ms": 0,
                             "error_cb": lambda e: transport_errors.append(e)
                             if e.code() == KafkaError._TRANSPORT else None})
        delivered, error = 0, None
        for _ in range(400):  # 2 MiB / 8 KiB: the disk is full long before
            error, offset = _produce_one(producer, 0)
            if error is not None:
                break
            assert offset == delivered
            delivered += 1
        assert error is not None, "the 2 MiB disk never filled up"
        assert error.code() == KafkaError.KAFKA_STORAGE_ERROR, error
        for _ in range(5):  # stays so, on the same connections; no transport failure
            again, _ = _produce_one(producer, 0)
            assert again is not None and again.code() == KafkaError.KAFKA_STORAGE_ERROR, again
        again, _ = _produce_one(producer, 1)
        assert again is not None and again.code() == KafkaError.KAFKA_STORAGE_ERROR, again
        assert transport_errors == []  # the connection was never dropped

        # the broker lives on, says why once, and serves what is on disk
        wait_until(lambda: "cannot write the event log" in broker.tail(200), 10,
                   message="the broker to log that its event log is refused")
        assert broker.running
        assert "KAFKA_STORAGE_ERROR" in broker.tail(200)
        assert len(consume_all(broker.bootstrap, "t", 1, delivered)) == delivered

        # a producer with retries treats the answer as retriable: it keeps sending the
        # record (its statistics count the Produce requests)...
        produce_requests = [0]
        retrying = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "retry.backoff.ms": 50, "statistics.interval.ms": 100,
                             "stats_cb": lambda stats: produce_requests.append(sum(
                                 b["req"]["Produce"]
                                 for b in json.loads(stats)["brokers"].values()))})
        report = []
        retrying.produce("t", value=VALUE, partition=0,
                         on_delivery=lambda err, msg: report.append((err, msg.offset())))
        wait_until(lambda: retrying.poll(0.1) >= 0 and produce_requests[-1] >= 3, 20,
                   message="librdkafka to retry the produce after KAFKA_STORAGE_ERROR")
        assert report == []

        ballast.unlink()  # ...and space returns: no restart needed
        assert retrying.flush(15) == 0
        assert report[0][0] is None and report[0][1] == delivered
        error, offset = _produce_one(producer, 0)
        assert error is None and offset == delivered + 1
        error, offset = _produce_one(producer, 1)
        assert error is None and offset == 0
        wait_until(lambda: "event log writable again" in broker.tail(200), 10,
                   message="the broker to log that its event log works again")
        assert "accepts writes again" in broker.tail(200)
        assert len(consume_all(broker.bootstrap, "t", 2, delivered + 3)) == delivered + 3
    finally:
        status = broker.stop()
    assert status == 0, broker.tail()


NOBODY = 65534


class BrokerAsNobody(BrokerProcess):
    """A broker running as an unprivileged user, for whom chmod is binding (root ignores
    it), with its data directory owned by that user outside the root-only pytest tree."""

    def __init__(self, base_dir: Path):
        super().__init__(base_dir)
        self.data_dir = Path(tempfile.mkdtemp(prefix="minibroker-nobody-")) / "data"
        self.data_dir.mkdir()
        for path in (self.data_dir.parent, self.data_dir):
            os.chown(path, NOBODY, NOBODY)
        # nobody must read the checkout and its .venv: a clone into `mktemp -d` is 0700
        self._modes = _let_others_read(Path(REPO_ROOT))

    def command(self) -> list[str]:
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                *super().command()]

    def cleanup(self) -> None:
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)
        for path, mode in self._modes:
            path.chmod(mode)


def _let_others_read(root: Path) -> list[tuple[Path, int]]:
    """Give others r-x on `root` and x on its ancestors where they lack it; the modes to
    restore. The files inside a git checkout are already readable by all."""
    changed = []
    for path in (root, *root.parents):
        mode = path.stat().st_mode & 0o7777
        wanted = mode | (0o005 if path == root else 0o001)
        if wanted != mode:
            path.chmod(wanted)
            changed.append((path, mode))
    return changed


def test_an_unwritable_partition_directory_answers_56_until_it_is_writable_again(tmp_path):
    if shutil.which("setpriv") is None:
        pytest.fail("this test needs setpriv (util-linux) to run the broker unprivileged")
    broker = BrokerAsNobody(tmp_path)
    try:
        broker.start()
        create_topic(broker.bootstrap, "t", partitions=2, **{"segment.bytes": "65536"})
        errors = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "retries": 0, "linger.ms": 0, "error_cb": errors.append})
        assert _produce_one(producer, 0) == (None, 0)
        partition_dir = broker.data_dir / "t-0"
        partition_dir.chmod(0o555)  # the active segment's files stay open and writable
        delivered, error = 1, None
        for _ in range(20):  # 64 KiB segments of 8 KiB records: a roll comes within 9
            error, offset = _produce_one(producer, 0)
            if error is not None:
                break
            assert offset == delivered
            delivered += 1
        assert error is not None and error.code() == KafkaError.KAFKA_STORAGE_ERROR, error
        assert "Permission denied" in broker.tail(100)
        # the other partition, and reads of this one, go on
        assert _produce_one(producer, 1) == (None, 0)
        assert len(consume_all(broker.bootstrap, "t", 1, delivered)) == delivered

        partition_dir.chmod(0o755)
        assert _produce_one(producer, 0) == (None, delivered)
        assert [e for e in errors if e.code() == KafkaError._TRANSPORT] == []
        assert broker.running
    finally:
        status = broker.stop()
        broker.cleanup()
    assert status == 0, broker.tail()


def _serve(tmp_path: Path, data_dir: Path, port: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tools.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(data_dir)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))


def test_a_full_disk_at_start_is_named_as_such(tmp_path, small_tmpfs):
    filler = small_tmpfs / "filler"
    with open(filler, "wb") as f:  # fill the disk to the last block
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    data_dir = small_tmpfs / f"data-{uuid.uuid4().hex[:6]}"
    done = _serve(tmp_path, data_dir, free_port())
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"minibroker: cannot open the data directory {data_dir}: ")
    assert "No space left on device" in last and "cannot listen" not in done.stderr
