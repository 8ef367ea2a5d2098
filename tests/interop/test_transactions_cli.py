"""`minibroker transactions` (tools/transactions.py) run as a subprocess against a broker
process, on a transaction librdkafka's producer (confluent-kafka) leaves open: list,
describe and describe-producers show it with its start offset, find-hanging does not
report it (its coordinator holds it with the partition), `abort --start-offset` ends it in
the partition so that librdkafka's read_committed consumer reads past it, and a failure is
one line with exit status 1."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Producer

from tests.interop.conftest import REPO_ROOT
from tests.interop.test_transactions import _read, _topic
from tests.util import unique

pytestmark = pytest.mark.interop
SHARED_BROKER_OVERRIDES = {"transaction.state.log.num.partitions": "2",
                           "offsets.topic.num.partitions": "2"}
TIMEOUT_S = 30


def transactions(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", "transactions", *args,
                           "--bootstrap-server", bootstrap],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def table(bootstrap: str, *args: str) -> list[dict[str, str]]:
    done = transactions(bootstrap, *args)
    assert (done.returncode, done.stderr) == (0, ""), done
    header, *rows = [[c.strip() for c in line.split("\t")]
                     for line in done.stdout.splitlines()]
    assert all(len(r) == len(header) for r in rows), done.stdout
    return [dict(zip(header, r)) for r in rows]


def test_an_open_librdkafka_transaction_described_and_aborted(shared_broker):
    bs = shared_broker.bootstrap
    topic, tid = _topic(shared_broker, "tcli"), unique("tcli-tx")
    plain = Producer({"bootstrap.servers": bs})
    plain.produce(topic, b"before", partition=0)                                     # 0
    assert plain.flush(TIMEOUT_S) == 0
    txn = Producer({"bootstrap.servers": bs, "transactional.id": tid,
                    "transaction.timeout.ms": 600_000})
    txn.init_transactions(TIMEOUT_S)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0)                                         # 1
    assert txn.flush(TIMEOUT_S) == 0
    plain.produce(topic, b"after", partition=0)                                      # 2
    assert plain.flush(TIMEOUT_S) == 0

    (listed,) = [r for r in table(bs, "list") if r["TransactionalId"] == tid]
    assert listed["TransactionState"] == "Ongoing"
    (described,) = table(bs, "describe", "--transactional-id", tid)
    assert (described["ProducerId"], described["TransactionState"],
            described["TransactionTimeoutMs"], described["TopicPartitions"]) == (
        listed["ProducerId"], "Ongoing", "600000", f"{topic}-0")
    producers = table(bs, "describe-producers", "--topic", topic, "--partition", "0")
    (mine,) = [r for r in producers if r["ProducerId"] == listed["ProducerId"]]
    assert (mine["ProducerEpoch"], mine["CurrentTransactionStartOffset"]) == (
        described["ProducerEpoch"], "1")
    assert table(bs, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0") == []
    assert _read(shared_broker, topic, "read_committed") == [b"before"]

    done = transactions(bs, "abort", "--topic", topic, "--partition", "0",
                        "--start-offset", "1")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert _read(shared_broker, topic, "read_committed", expect=2) == [b"before", b"after"]
    (mine,) = [r for r in table(bs, "describe-producers", "--topic", topic, "--partition", "0")
               if r["ProducerId"] == listed["ProducerId"]]
    assert mine["CurrentTransactionStartOffset"] == "None"

    done = transactions(bs, "abort", "--topic", topic, "--partition", "0",
                        "--start-offset", "1")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"minibroker transactions: Could not find any open transactions "
                           f"starting at offset 1 on partition {topic}-0\n")
    txn.abort_transaction(TIMEOUT_S)
