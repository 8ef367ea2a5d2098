"""`minibroker transactions` (tools/transactions.py) against a broker in the test's trio run
(tests/inproc.py): each command's arguments parsed by the real command line, run on an
AdminClient, its table read back. An open transaction of our transactional Producer is
listed, described and shown by describe-producers with its start offset; find-hanging does
not report it (its coordinator will end it) and reports none on a cluster with none; a
transaction its coordinator never knew of in that partition -- written straight into the
partition's log, as a broker without KIP-890's verification could be left with -- is found
once it is older than the max timeout, and `abort --start-offset` ends it so that the last
stable offset moves. Option errors exit 2 before anything connects."""

from __future__ import annotations

import io

import pytest
import trio

from cli.main import build_parser, main
from client.producer.producer import Producer
from protocol.errors import ErrorCode
from protocol.records import Record, encode_batch, parse_batch_header
from tests.inproc import InProcessBroker
from tests.util import unique
from tools import transactions
from tools.admin_session import ToolError, open_admin

DEADLINE_S = 600  # virtual seconds: the tests let minutes pass


async def _command(inproc: InProcessBroker, *argv: str) -> list[list[str]]:
    """Run `minibroker transactions ARGV` on the in-process broker: the table's rows, the
    header first, each cell stripped of its padding."""
    args = build_parser().parse_args(["transactions", *argv,
                                      "--bootstrap-server", inproc.bootstrap])
    out = io.StringIO()
    async with open_admin(inproc.bootstrap, timeout_ms=10_000,
                          client_id="transactions-test") as admin:
        await transactions.COMMANDS[args.transactions_command](admin, args, out,
                                                               inproc.broker.now_ms())
    return [[cell.strip() for cell in line.split("\t")] for line in out.getvalue().splitlines()]


def _rows(table: list[list[str]]) -> list[dict[str, str]]:
    header, *rows = table
    assert all(len(r) == len(header) for r in rows), table
    return [dict(zip(header, r)) for r in rows]


def _append_open_transaction(inproc: InProcessBroker, topic: str, producer_id: int,
                             epoch: int = 0) -> int:
    """A transactional batch straight into the partition's log, its coordinator never told:
    the offset it opens a transaction at."""
    batch = bytearray(encode_batch([Record(0, inproc.broker.now_ms(), b"k", b"hanging")],
                                   producer_id=producer_id, producer_epoch=epoch,
                                   base_sequence=0, is_transactional=True))
    result = inproc.broker.partition(topic, 0).append_batch(batch, parse_batch_header(batch),
                                                            inproc.broker.now_ms())
    assert result.error == ErrorCode.NONE
    return result.base_offset


async def test_an_open_transaction_listed_described_and_not_hanging(inproc, autojump_clock):
    t, tid = unique("t"), unique("tx")
    await inproc.create_topic(t, 2)
    node = str(inproc.broker.node_id)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=inproc.bootstrap) as plain:
            for i in range(2):
                await (await plain.send(t, b"p%d" % i, partition=0))             # 0-1
        async with Producer(bootstrap_servers=inproc.bootstrap, transactional_id=tid,
                            transaction_timeout_ms=600_000) as producer:
            producer.begin_transaction()
            await (await producer.send(t, b"open", partition=0))                 # 2
            md = inproc.broker.transactions.coordinator.transactions[tid]
            pid, epoch = str(md.producer_id), str(md.producer_epoch)
            await trio.sleep(90)  # virtual time: 1.5 minutes into the transaction

            assert await _command(inproc, "list") == [
                transactions.LIST_HEADER, [tid, node, pid, "Ongoing"]]
            (described,) = _rows(await _command(inproc, "describe", "--transactional-id", tid))
            assert described == {
                "CoordinatorId": node, "TransactionalId": tid, "ProducerId": pid,
                "ProducerEpoch": epoch, "TransactionState": "Ongoing",
                "TransactionTimeoutMs": "600000",
                "CurrentTransactionStartTimeMs": str(md.txn_start_timestamp),
                "TransactionDurationMs": described["TransactionDurationMs"],
                "TopicPartitions": f"{t}-0"}
            assert 90_000 <= int(described["TransactionDurationMs"]) < 95_000

            rows = _rows(await _command(inproc, "describe-producers", "--topic", t,
                                        "--partition", "0"))
            mine = next(r for r in rows if r["ProducerId"] == pid)
            assert (mine["ProducerEpoch"], mine["LatestCoordinatorEpoch"], mine["LastSequence"],
                    mine["CurrentTransactionStartOffset"]) == (epoch, "-1", "0", "2")
            assert [r["CurrentTransactionStartOffset"] for r in rows if r is not mine] == \
                ["None"]
            assert _rows(await _command(inproc, "describe-producers", "--topic", t,
                                        "--partition", "1")) == []

            # open over a minute, but its coordinator holds it with this partition: its own
            # timeout or its producer will end it
            for scope in (["--broker-id", node], ["--topic", t], ["--topic", t,
                                                                  "--partition", "0"]):
                assert await _command(inproc, "find-hanging", *scope,
                                      "--max-transaction-timeout", "1") == [
                    transactions.HANGING_HEADER]

            with pytest.raises(ToolError, match="Could not find any open transactions "
                                                f"starting at offset 1 on partition {t}-0"):
                await _command(inproc, "abort", "--topic", t, "--partition", "0",
                               "--start-offset", "1")
            with pytest.raises(ToolError, match="Failed to describe transaction state of "
                                                "transactional-id `nope`: "
                                                "TRANSACTIONAL_ID_NOT_FOUND"):
                await _command(inproc, "describe", "--transactional-id", "nope")
            with pytest.raises(ToolError, match=f"Failed to describe producers for partition "
                                                f"{t}-7 on leader: UNKNOWN_TOPIC_OR_PARTITION"):
                await _command(inproc, "describe-producers", "--topic", t, "--partition", "7")


async def test_find_hanging_on_a_cluster_with_none(inproc, autojump_clock):
    await inproc.create_topic(unique("t"), 3)
    node = str(inproc.broker.node_id)
    with trio.fail_after(DEADLINE_S):
        assert await _command(inproc, "find-hanging", "--broker-id", node) == [
            transactions.HANGING_HEADER]
        assert await _command(inproc, "list") == [transactions.LIST_HEADER]


async def test_a_hanging_transaction_is_found_and_aborted(inproc, autojump_clock):
    t, tid = unique("t"), unique("tx")
    await inproc.create_topic(t, 2)
    node = str(inproc.broker.node_id)
    partition = inproc.broker.partition(t, 0)
    with trio.fail_after(DEADLINE_S):
        async with Producer(bootstrap_servers=inproc.bootstrap, transactional_id=tid,
                            transaction_timeout_ms=600_000) as producer:
            # a producer id no coordinator handed out, and a known producer whose ongoing
            # transaction holds partition 1 but was never told of partition 0
            unknown_start = _append_open_transaction(inproc, t, 4242)                # 0
            producer.begin_transaction()
            await (await producer.send(t, b"elsewhere", partition=1))
            md = inproc.broker.transactions.coordinator.transactions[tid]
            known_start = _append_open_transaction(inproc, t, md.producer_id,
                                                   md.producer_epoch)                # 1
            async with Producer(bootstrap_servers=inproc.bootstrap) as plain:
                await (await plain.send(t, b"after", partition=0))                   # 2
            assert partition.last_stable_offset == 0

            # younger than the max timeout: not yet suspect
            assert await _command(inproc, "find-hanging", "--broker-id", node,
                                  "--max-transaction-timeout", "2") == [
                transactions.HANGING_HEADER]
            await trio.sleep(180)  # virtual time
            hanging = _rows(await _command(inproc, "find-hanging", "--broker-id", node,
                                           "--max-transaction-timeout", "2"))
            assert sorted((h["Topic"], h["Partition"], h["ProducerId"], h["ProducerEpoch"],
                           h["CoordinatorEpoch"], h["StartOffset"], h["Duration(min)"])
                          for h in hanging) == sorted([
                (t, "0", "4242", "0", "-1", str(unknown_start), "3"),
                (t, "0", str(md.producer_id), str(md.producer_epoch), "-1", str(known_start),
                 "3")])
            assert _rows(await _command(inproc, "find-hanging", "--topic", t, "--partition",
                                        "0", "--max-transaction-timeout", "2")) == hanging

            assert await _command(inproc, "abort", "--topic", t, "--partition", "0",
                                  "--start-offset", str(unknown_start)) == []
            assert partition.last_stable_offset == known_start
            assert await _command(inproc, "abort", "--topic", t, "--partition", "0",
                                  "--producer-id", str(md.producer_id), "--producer-epoch",
                                  str(md.producer_epoch), "--coordinator-epoch", "-1") == []
            assert partition.last_stable_offset == partition.high_watermark == 5
            assert await _command(inproc, "find-hanging", "--broker-id", node,
                                  "--max-transaction-timeout", "2") == [
                transactions.HANGING_HEADER]
            # the producer's own transaction, in partition 1, was not touched
            assert inproc.broker.partition(t, 1).last_stable_offset == 0


@pytest.mark.parametrize("argv, message", [
    (["abort", "--topic", "t", "--partition", "0"],
     "must be named either with --start-offset or with --producer-id"),
    (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5",
      "--producer-epoch", "0"], "missing required argument --coordinator-epoch"),
    (["abort", "--topic", "t", "--partition", "0", "--start-offset", "3",
      "--producer-id", "5"], "name the transaction two ways"),
    (["find-hanging"], "needs --topic or --broker-id"),
    (["find-hanging", "--broker-id", "0", "--partition", "1"], "--partition needs --topic"),
    (["list"], "the following arguments are required: --bootstrap-server"),
])
def test_option_errors_exit_2_before_connecting(argv, message, capsys):
    bootstrap = [] if argv == ["list"] else ["--bootstrap-server", "127.0.0.1:1"]
    assert main(["transactions", *argv, *bootstrap]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"minibroker transactions {argv[0]}: ") and message in err, err


def test_an_unreachable_cluster_is_one_line_and_exit_1(capsys):
    assert main(["transactions", "--bootstrap-server", "127.0.0.1:1", "list",
                 "--timeout", "2000"]) == 1
    assert capsys.readouterr().err == \
        "minibroker transactions: cannot connect to 127.0.0.1:1: Connection refused\n"
