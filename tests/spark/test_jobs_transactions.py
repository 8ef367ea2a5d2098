"""The transactions job over a real broker's data directory: an in-process broker (virtual
time, tests/inproc.py) takes committed transactions, one aborted by its producer, one fenced
by a new producer with the same transactional id, one the coordinator aborts past its
timeout, and one left open, whose data directory is copied as it stands (a running broker's
log); `minibroker analyze --job transactions` must find each outcome, the abort rate, the open
transaction and how far it holds each partition back, and the aborted records.

And the event-log side on a crafted log: the abort reasons told from the epochs and times, a
log that begins mid-transaction, and states of one millisecond in their order."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spark_jobs.jobs import frame
from spark_jobs.jobs.transactions import transactions
from spark_jobs.tables import EVENTS_SCHEMA
from tools.analyze import main

TOPIC = "payments"
DEADLINE_S = 60


async def _write_transactions(data_dir: Path, snapshot: Path) -> dict:
    import trio

    from client import errors
    from client.producer.producer import Producer
    from tests.inproc import in_process_broker
    from tests.util import wait_for

    expected: dict = {}
    async with in_process_broker(
            data_dir, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms":
                         "1000"}) as broker:
        await broker.create_topic(TOPIC, 2)

        def producer(tid: str, **config) -> Producer:
            return Producer(bootstrap_servers=broker.bootstrap, transactional_id=tid,
                            **config)

        def state(tid: str) -> str:
            return broker.broker.transactions.coordinator.transactions[tid].state.value

        with trio.fail_after(DEADLINE_S):
            async with producer("tx-app") as app:
                for i in range(3):  # committed: 2 records in partition 0, 1 in partition 1
                    app.begin_transaction()
                    for partition in (0, 0, 1):
                        await app.send(TOPIC, b"ok%d" % i, partition=partition)
                    await app.commit_transaction()
                app.begin_transaction()  # aborted by the producer: 2 records in each
                for partition in (0, 0, 1, 1):
                    await app.send(TOPIC, b"no", partition=partition)
                await app.flush()
                await app.abort_transaction()

            async with producer("tx-zombie") as zombie:
                zombie.begin_transaction()
                await zombie.send(TOPIC, b"zombie", partition=0)
                await zombie.flush()
                # the new producer's InitProducerId aborts the zombie's transaction
                async with producer("tx-zombie") as successor:
                    with pytest.raises(errors.ProducerFencedError):
                        await zombie.commit_transaction()
                    async with successor.transaction():
                        await successor.send(TOPIC, b"successor", partition=1)

            async with producer("tx-slow", transaction_timeout_ms=2000) as slow:
                slow.begin_transaction()
                for _ in range(3):
                    await slow.send(TOPIC, b"slow", partition=1)
                await slow.flush()
                await wait_for(lambda: state("tx-slow") == "CompleteAbort", 30,
                               "the coordinator to abort the timed-out transaction")

            async with producer("tx-open", transaction_timeout_ms=900_000) as left_open:
                left_open.begin_transaction()
                first = await left_open.send_and_wait(TOPIC, b"open", partition=0)
                await left_open.send_and_wait(TOPIC, b"open", partition=0)
                expected["open_first_offset"] = first.offset
                expected["log_end_offset"] = first.offset + 2
                # the log as the running broker has it, the transaction open: nothing runs
                # while the copy does (one trio thread), and every write is in the files
                broker.events()  # flushes the event log
                shutil.copytree(data_dir, snapshot)
                # (closing the producer now aborts the transaction in the broker's own log)
    return expected


@pytest.fixture(scope="module")
def txn_run(tmp_path_factory):
    import trio
    import trio.testing

    from broker import blocking

    base = tmp_path_factory.mktemp("txn-broker")

    async def inline(fn, *args):  # as tests/conftest.py's inline_disk_work, on virtual time
        return fn(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(blocking, "run_sync", inline)
        expected = trio.run(_write_transactions, base / "broker", base / "snapshot",
                            clock=trio.testing.MockClock(autojump_threshold=0))
    return {"data_dir": base / "snapshot", **expected}


def test_analyze_finds_every_outcome_the_open_transaction_and_the_aborted_records(
        spark, txn_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--data-dir", str(txn_run["data_dir"]), "--out", str(out),
                 "--job", "transactions"]) == 0, capsys.readouterr().err

    def table(name):
        assert list((out / "transactions" / name / "csv").glob("part-*.csv")), name
        return [r.asDict() for r in
                spark.read.parquet(str(out / "transactions" / name / "parquet")).collect()]

    txns = sorted(table("transactions"), key=lambda r: (r["transactional_id"], r["start_ts"]))
    assert [(r["transactional_id"], r["outcome"], r["abort_reason"]) for r in txns] == [
        ("tx-app", "commit", None), ("tx-app", "commit", None), ("tx-app", "commit", None),
        ("tx-app", "abort", "requested"),
        ("tx-open", "open", None),
        ("tx-slow", "abort", "timeout"),
        ("tx-zombie", "abort", "fenced"), ("tx-zombie", "commit", None)]
    for r in txns:
        if r["outcome"] == "open":
            assert r["end_ts"] is None and r["duration_ms"] is None and r["open_ms"] >= 0
        else:
            assert r["end_ts"] >= r["decided_ts"] >= r["start_ts"]
            assert r["duration_ms"] == r["end_ts"] - r["start_ts"] and r["open_ms"] is None
    assert txns[0]["partitions"] == [f"{TOPIC}-0", f"{TOPIC}-1"]
    slow = txns[5]
    assert slow["decision_epoch"] == slow["producer_epoch"] + 1
    assert slow["decided_ts"] - slow["start_ts"] > slow["timeout_ms"] == 2000

    [summary] = table("transaction_summary")
    assert (summary["transactional_ids"], summary["transactions"], summary["committed"],
            summary["aborted"], summary["open"]) == (4, 8, 4, 3, 1)
    assert summary["abort_rate"] == pytest.approx(3 / 7)
    assert (summary["aborted_requested"], summary["aborted_timeout"],
            summary["aborted_fenced"]) == (1, 1, 1)
    ids = {r["transactional_id"]: r for r in table("transactional_ids")}
    assert (ids["tx-app"]["committed"], ids["tx-app"]["aborted"]) == (3, 1)
    assert ids["tx-app"]["abort_rate"] == pytest.approx(0.25)
    assert ids["tx-open"]["abort_rate"] is None

    [still_open] = table("open_transactions")
    assert (still_open["transactional_id"], still_open["state"], still_open["partitions"],
            still_open["past_timeout"]) == ("tx-open", "Ongoing", [f"{TOPIC}-0"], False)

    latency = {r["result"]: r for r in table("marker_latency")}
    assert {k: v["transactions"] for k, v in latency.items()} == {"COMMIT": 4, "ABORT": 3}
    assert all(0 <= v["p50_ms"] <= v["max_ms"] for v in latency.values())

    lso = {r["partition"]: r for r in table("lso_lag") if r["topic"] == TOPIC}
    p0, p1 = lso[0], lso[1]
    # partition 0: the open transaction's first offset is the last stable offset
    assert (p0["last_stable_offset"], p0["log_end_offset"]) == (
        txn_run["open_first_offset"], txn_run["log_end_offset"])
    assert (p0["unstable_offsets"], p0["unstable_records"], p0["open_transactions"],
            p0["open_records"]) == (2, 2, 1, 2)
    assert p0["open_since_ts"] is not None and p0["open_ms"] >= 0
    assert (p0["committed_transactions"], p0["committed_records"],
            p0["aborted_transactions"], p0["aborted_records"], p0["txnindex_aborted"]) == (
        3, 6, 2, 3, 2)
    # partition 1: nothing open; aborted by the producer (2) and by the timeout (3)
    assert (p1["unstable_offsets"], p1["open_transactions"], p1["open_ms"]) == (0, 0, None)
    assert p1["last_stable_offset"] == p1["log_end_offset"]
    assert (p1["committed_transactions"], p1["committed_records"],
            p1["aborted_transactions"], p1["aborted_records"], p1["txnindex_aborted"]) == (
        4, 4, 2, 5, 2)
    per_txn = [r for r in table("partition_transactions") if r["topic"] == TOPIC]
    assert sorted(r["result"] for r in per_txn) == ["ABORT"] * 4 + ["COMMIT"] * 7 + ["open"]

    html = (out / "report.html").read_text()
    assert "<h2 id='transactions'>transactions</h2>" in html
    assert "8 transaction(s) of 4 transactional id(s): 4 committed, 3 aborted" in html
    assert "still open: tx-open" in html
    assert f"{TOPIC}-0 (2)" in html  # held back by the open transaction
    for name in ("transaction_summary", "transactional_ids", "open_transactions",
                 "marker_latency", "lso_lag"):
        assert f"<h3>{name}</h3>" in html
    assert (out / "transactions" / "transactions.png").read_bytes()[:4] == b"\x89PNG"
    assert "src='transactions/transactions.png'" in html


def _states(*states):
    """txn_state events of id "t", producer 7, in the order given: the log offsets."""
    return [{"ts": ts, "type": "txn_state", "broker": 0, "transactional_id": "t",
             "producer_id": 7, "producer_epoch": epoch, "state": state,
             "topic_partitions": ["a-0"], "start_ms": start_ms, "timeout_ms": timeout_ms,
             "log_offset": offset}
            for offset, (ts, state, epoch, start_ms, timeout_ms) in enumerate(states)]


def test_abort_reasons_and_a_log_that_begins_mid_transaction(spark):
    rows = _states(
        # begun before the log: no Ongoing, so the reason of its abort is unknown
        (100, "PrepareAbort", 3, 50, 60_000), (101, "CompleteAbort", 3, 50, 60_000),
        (200, "Empty", 4, -1, 60_000),
        # two transactions in one millisecond, told apart by their order in the log
        (300, "Ongoing", 4, 300, 60_000), (300, "Ongoing", 4, 300, 60_000),
        (300, "PrepareCommit", 4, 300, 60_000), (300, "CompleteCommit", 4, 300, 60_000),
        (300, "Ongoing", 4, 300, 60_000), (300, "PrepareAbort", 4, 300, 60_000),
        (300, "CompleteAbort", 4, 300, 60_000),
        # fenced before its timeout, then one past it
        (400, "Ongoing", 4, 400, 60_000), (500, "PrepareAbort", 5, 400, 60_000),
        (501, "CompleteAbort", 5, 400, 60_000),
        (600, "Ongoing", 6, 600, 1000), (1700, "PrepareAbort", 7, 600, 1000),
        # decided, its markers not all written when the log ends (the one before it was
        # completed, but its event is not in the log: a full disk drops events)
        (1800, "Ongoing", 8, 1800, 60_000), (1900, "PrepareCommit", 8, 1800, 60_000),
    )
    got = [(r["start_ts"], r["outcome"], r["abort_reason"], r["state"], r["duration_ms"],
            r["open_ms"])
           for r in transactions(frame(spark, EVENTS_SCHEMA, rows), 2000).collect()]
    assert got == [(50, "abort", None, "CompleteAbort", 51, None),
                   (300, "commit", None, "CompleteCommit", 0, None),
                   (300, "abort", "requested", "CompleteAbort", 0, None),
                   (400, "abort", "fenced", "CompleteAbort", 101, None),
                   (600, "open", "timeout", "PrepareAbort", None, 1400),
                   (1800, "open", None, "PrepareCommit", None, 200)]
