"""`minibroker transactions`: list and describe transactions, describe a partition's
producers, find hanging transactions and abort them, in the manner of Kafka's
kafka-transactions.sh (its TransactionsCommand), on the client library's AdminClient.

    minibroker transactions list [--duration-filter MS] --bootstrap-server 127.0.0.1:9092
    minibroker transactions describe --transactional-id ID --bootstrap-server ...
    minibroker transactions describe-producers --topic T --partition P [--broker-id N] ...
    minibroker transactions find-hanging --broker-id N [--max-transaction-timeout MIN] ...
    minibroker transactions find-hanging --topic T [--partition P] ...
    minibroker transactions abort --topic T --partition P --start-offset O ...
    minibroker transactions abort --topic T --partition P --producer-id ID \\
        --producer-epoch E --coordinator-epoch C ...

Each prints Kafka's table: a header row, then one row per item, every cell padded to its
column's widest and the columns tab-separated (ToolsUtils.prettyPrintTable):
- `list`: TransactionalId, Coordinator, ProducerId, TransactionState (ListTransactions to
  every broker; --duration-filter keeps those running at least that many ms);
- `describe`: CoordinatorId, TransactionalId, ProducerId, ProducerEpoch, TransactionState,
  TransactionTimeoutMs, CurrentTransactionStartTimeMs, TransactionDurationMs,
  TopicPartitions (t-0,t-1) of one id, on its coordinator ("None" when no transaction);
- `describe-producers`: ProducerId, ProducerEpoch, LatestCoordinatorEpoch, LastSequence,
  LastTimestamp, CurrentTransactionStartOffset ("None": no open transaction), from the
  partition's leader or the replica on --broker-id;
- `find-hanging` (Kafka's FindHangingTransactionsCommand): Topic, Partition, ProducerId,
  ProducerEpoch, CoordinatorEpoch, StartOffset, LastTimestamp, Duration(min) of every
  transaction open in a partition for longer than --max-transaction-timeout minutes (15:
  transaction.max.timeout.ms's default) whose coordinator does not list that partition in
  the producer's transaction: its transactional id unknown (ListTransactions by producer
  id), its coordinator not knowing the id, or its transaction not holding the partition.
  The partitions searched are those with a replica on --broker-id (each asked of that
  broker), or --topic's (and --partition's), as Kafka searches them;
- `abort`: nothing. It writes an ABORT marker for the transaction in that partition, on
  its leader (WriteTxnMarkers; the principal needs CLUSTER_ACTION), which ends it there and
  lets the last stable offset move on. The transaction is named by --start-offset (the
  producer whose open transaction begins there, found with DescribeProducers) or by
  --producer-id, --producer-epoch and --coordinator-epoch (a negative coordinator epoch,
  none known yet, is sent as 0, as Kafka does).

Exit status 0; 1 with one line on stderr ("minibroker transactions: Failed to ...: ERROR:
detail", Kafka's wording) when the cluster cannot be reached or answers an error, the
transactional id is unknown, or no open transaction starts at --start-offset; 2 on a bad
option (abort without a way to name the transaction, --partition without --topic, ...).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from client.admin import AdminClient, ProducerState, TransactionDescription
from client.errors import KafkaError
from client.types import TopicPartition
from protocol.errors import ErrorCode
from tools.admin_session import ToolError, one_line, open_admin, run_admin_tool

__all__ = ["OpenTransaction", "add_arguments", "find_hanging", "main", "run", "table_lines"]

DEFAULT_TIMEOUT_MS = 30000
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15  # transaction.max.timeout.ms, in minutes
MAX_BATCH_SIZE = 500  # partitions per DescribeProducers, as Kafka's tool batches them
PROG = "minibroker transactions"


def table_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    """Kafka's prettyPrintTable: each cell padded to its column's widest, tab-separated (the
    trailing padding dropped)."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    return ["\t".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]


def _write(out: TextIO, header: list[str], rows: list[list[str]]) -> None:
    for line in table_lines(header, rows):
        out.write(line + "\n")


def _opt(value: int | None) -> str:
    return "None" if value is None else str(value)


def _failed(what: str, e: KafkaError) -> ToolError:
    return ToolError(f"{what}: {one_line(e)}")


# --- list, describe, describe-producers -----------------------------------------------------

LIST_HEADER = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADER = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                   "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                   "TransactionDurationMs", "TopicPartitions"]
PRODUCERS_HEADER = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                    "LastTimestamp", "CurrentTransactionStartOffset"]
HANGING_HEADER = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                  "StartOffset", "LastTimestamp", "Duration(min)"]


async def list_transactions(admin: AdminClient, args, out: TextIO, now_ms: int) -> None:
    try:
        listed = await admin.list_transactions(duration_filter_ms=args.duration_filter)
    except KafkaError as e:
        raise _failed("Failed to list transactions", e) from e
    _write(out, LIST_HEADER, [[t.transactional_id, str(t.coordinator), str(t.producer_id),
                               t.state] for t in listed])


def describe_row(d: TransactionDescription, now_ms: int) -> list[str]:
    start = d.transaction_start_time_ms
    return [str(d.coordinator), d.transactional_id, str(d.producer_id), str(d.producer_epoch),
            d.state, str(d.transaction_timeout_ms), _opt(start),
            _opt(None if start is None else now_ms - start),
            ",".join(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions)]


async def describe(admin: AdminClient, args, out: TextIO, now_ms: int) -> None:
    tid = args.transactional_id
    try:
        described = (await admin.describe_transactions([tid]))[tid]
    except KafkaError as e:
        raise _failed(f"Failed to describe transaction state of transactional-id `{tid}`",
                      e) from e
    _write(out, DESCRIBE_HEADER, [describe_row(described, now_ms)])


async def _producers(admin: AdminClient, tp: TopicPartition, broker_id: int | None
                     ) -> list[ProducerState]:
    try:
        return (await admin.describe_producers([tp], broker_id=broker_id))[tp]
    except KafkaError as e:
        where = "leader" if broker_id is None else f"broker {broker_id}"
        raise _failed(f"Failed to describe producers for partition {tp.topic}-{tp.partition} "
                      f"on {where}", e) from e


async def describe_producers(admin: AdminClient, args, out: TextIO, now_ms: int) -> None:
    producers = await _producers(admin, TopicPartition(args.topic, args.partition),
                                 args.broker_id)
    _write(out, PRODUCERS_HEADER, [
        [str(p.producer_id), str(p.producer_epoch),
         str(-1 if p.coordinator_epoch is None else p.coordinator_epoch),
         str(p.last_sequence), str(p.last_timestamp),
         _opt(p.current_transaction_start_offset)] for p in producers])


# --- abort ----------------------------------------------------------------------------------

async def abort(admin: AdminClient, args, out: TextIO, now_ms: int) -> None:
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is not None:
        producers = await _producers(admin, tp, None)
        found = next((p for p in producers
                      if p.current_transaction_start_offset == args.start_offset), None)
        if found is None:
            raise ToolError(f"Could not find any open transactions starting at offset "
                            f"{args.start_offset} on partition {args.topic}-{args.partition}")
        producer_id, producer_epoch = found.producer_id, found.producer_epoch
        coordinator_epoch = -1 if found.coordinator_epoch is None else found.coordinator_epoch
    else:
        producer_id, producer_epoch = args.producer_id, args.producer_epoch
        coordinator_epoch = args.coordinator_epoch
    # a transaction that hung before its producer's first marker here has no coordinator
    # epoch yet (-1): 0 is no newer than any coordinator's, as Kafka's tool reasons
    coordinator_epoch = max(coordinator_epoch, 0)
    try:
        await admin.abort_transaction(args.topic, args.partition, producer_id, producer_epoch,
                                      coordinator_epoch)
    except KafkaError as e:
        raise _failed(f"Failed to abort transaction of producer {producer_id} (epoch "
                      f"{producer_epoch}, coordinator epoch {coordinator_epoch}) in "
                      f"{args.topic}-{args.partition}", e) from e


# --- find-hanging ---------------------------------------------------------------------------

@dataclass(frozen=True)
class OpenTransaction:
    """A transaction a partition's replica holds open, and its producer as it saw it."""

    topic_partition: TopicPartition
    producer: ProducerState


async def _partitions_to_search(admin: AdminClient, topic: str | None, partition: int | None,
                                broker_id: int | None) -> list[TopicPartition]:
    if topic is not None and partition is not None:
        return [TopicPartition(topic, partition)]
    try:
        names = ([topic] if topic is not None
                 else [t.name for t in await admin.list_topics(include_internal=True)])
    except KafkaError as e:
        raise _failed("Failed to list topics", e) from e
    found: list[TopicPartition] = []
    for start in range(0, len(names), MAX_BATCH_SIZE):
        batch = names[start:start + MAX_BATCH_SIZE]
        try:
            descriptions = await admin.describe_topics(batch)
        except KafkaError as e:
            raise _failed(f"Failed to describe {len(batch)} topics", e) from e
        for name in batch:
            found += [TopicPartition(name, p.partition) for p in descriptions[name].partitions
                      if broker_id is None or broker_id in p.replicas]
    return found


async def _candidates(admin: AdminClient, partitions: list[TopicPartition],
                      broker_id: int | None, max_timeout_ms: int, now_ms: int
                      ) -> list[OpenTransaction]:
    """Transactions open longer than the longest a coordinator lets one run."""
    out: list[OpenTransaction] = []
    for start in range(0, len(partitions), MAX_BATCH_SIZE):
        batch = partitions[start:start + MAX_BATCH_SIZE]
        try:
            described = await admin.describe_producers(batch, broker_id=broker_id)
        except KafkaError as e:
            raise _failed(f"Failed to describe producers for {len(batch)} partitions on "
                          f"{'leaders' if broker_id is None else f'broker {broker_id}'}",
                          e) from e
        out += [OpenTransaction(tp, p) for tp in batch for p in described[tp]
                if p.current_transaction_start_offset is not None
                and now_ms - p.last_timestamp > max_timeout_ms]
    return out


async def _descriptions(admin: AdminClient, transactional_ids: list[str]
                        ) -> dict[str, TransactionDescription | None]:
    """Each id's description, None for an id its coordinator does not know."""
    out: dict[str, TransactionDescription | None] = {}
    for tid in transactional_ids:
        try:
            out[tid] = (await admin.describe_transactions([tid]))[tid]
        except KafkaError as e:
            if e.code is not ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                raise _failed(f"Failed to describe {len(transactional_ids)} transactions",
                              e) from e
            out[tid] = None
    return out


async def find_hanging(admin: AdminClient, *, broker_id: int | None, topic: str | None,
                       partition: int | None, max_transaction_timeout_min: int, now_ms: int
                       ) -> list[OpenTransaction]:
    """Kafka's FindHangingTransactionsCommand: the transactions open in the partitions
    searched for longer than the max timeout whose coordinator will never end them there,
    in the order found."""
    partitions = await _partitions_to_search(admin, topic, partition, broker_id)
    candidates = await _candidates(admin, partitions, broker_id,
                                   max_transaction_timeout_min * 60_000, now_ms)
    if not candidates:
        return []
    producer_ids = sorted({c.producer.producer_id for c in candidates})
    try:
        listed = await admin.list_transactions(producer_id_filters=producer_ids)
    except KafkaError as e:
        raise _failed(f"Failed to list transactions for {len(producer_ids)} producers",
                      e) from e
    ids = {t.producer_id: t.transactional_id for t in listed if t.producer_id in producer_ids}
    descriptions = await _descriptions(admin, sorted(set(ids.values())))
    hanging = []
    for c in candidates:
        tid = ids.get(c.producer.producer_id)
        description = None if tid is None else descriptions.get(tid)
        # the coordinator lists the partitions of an ongoing transaction, and those whose
        # markers it is still writing: any other open transaction it will never end
        if description is None or c.topic_partition not in description.topic_partitions:
            hanging.append(c)
    return hanging


def hanging_rows(hanging: list[OpenTransaction], now_ms: int) -> list[list[str]]:
    return [[h.topic_partition.topic, str(h.topic_partition.partition),
             str(h.producer.producer_id), str(h.producer.producer_epoch),
             str(-1 if h.producer.coordinator_epoch is None else h.producer.coordinator_epoch),
             _opt(h.producer.current_transaction_start_offset),
             str(h.producer.last_timestamp),
             str((now_ms - h.producer.last_timestamp) // 60_000)] for h in hanging]


async def find_hanging_command(admin: AdminClient, args, out: TextIO, now_ms: int) -> None:
    hanging = await find_hanging(admin, broker_id=args.broker_id, topic=args.topic,
                                 partition=args.partition,
                                 max_transaction_timeout_min=args.max_transaction_timeout,
                                 now_ms=now_ms)
    _write(out, HANGING_HEADER, hanging_rows(hanging, now_ms))


COMMANDS = {"list": list_transactions, "describe": describe,
            "describe-producers": describe_producers, "abort": abort,
            "find-hanging": find_hanging_command}


# --- command line ---------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Analyse the transactional state of producers in the cluster, and "
                          "find and abort hanging transactions (kafka-transactions).")
    # kafka-transactions takes --bootstrap-server before the command: accepted on both sides
    parser.add_argument("--bootstrap-server", dest="bootstrap_before", default=None,
                        metavar="HOST:PORT", help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="transactions_command", required=True,
                                metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT",
                       help="a broker to start from (comma-separated for several; required)")
        p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                       help="how long to wait for each answer (default %(default)s)")

    def partition(p: argparse.ArgumentParser, required: bool = True) -> None:
        p.add_argument("--topic", required=required, metavar="T", help="topic name")
        p.add_argument("--partition", type=int, required=required, metavar="P",
                       help="partition number")

    lst = sub.add_parser("list", help="list transactions")
    common(lst)
    lst.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                     help="only transactions running longer than this many ms (default: "
                          "all)")

    desc = sub.add_parser("describe", help="describe the state of an active transactional-id")
    common(desc)
    desc.add_argument("--transactional-id", required=True, metavar="ID",
                      help="transactional id")

    producers = sub.add_parser("describe-producers",
                               help="describe the states of active producers for a topic "
                                    "partition")
    common(producers)
    partition(producers)
    producers.add_argument("--broker-id", type=int, default=None, metavar="N",
                           help="describe the producer state on this broker's replica "
                                "(default: the leader)")

    abort_p = sub.add_parser("abort", help="abort a hanging transaction (requires "
                                           "CLUSTER_ACTION on the cluster)")
    common(abort_p)
    partition(abort_p)
    abort_p.add_argument("--start-offset", type=int, default=None, metavar="O",
                         help="start offset of the transaction to abort")
    abort_p.add_argument("--producer-id", type=int, default=None, metavar="ID",
                         help="producer id (with --producer-epoch and --coordinator-epoch, "
                              "instead of --start-offset)")
    abort_p.add_argument("--producer-epoch", type=int, default=None, metavar="E",
                         help="producer epoch")
    abort_p.add_argument("--coordinator-epoch", type=int, default=None, metavar="C",
                         help="coordinator epoch")

    hanging = sub.add_parser("find-hanging", help="find hanging transactions")
    common(hanging)
    hanging.add_argument("--broker-id", type=int, default=None, metavar="N",
                         help="search the partitions with a replica on this broker")
    hanging.add_argument("--max-transaction-timeout", type=int,
                         default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN, metavar="MIN",
                         help="maximum transaction timeout in minutes, to limit the search "
                              "(default %(default)s)")
    partition(hanging, required=False)


def _check(args) -> str | None:
    """What is wrong with options argparse cannot check, or None."""
    command = args.transactions_command
    if command == "abort":
        if args.start_offset is None and args.producer_id is None:
            return ("the transaction to abort must be named either with --start-offset or "
                    "with --producer-id, --producer-epoch and --coordinator-epoch")
        if args.start_offset is not None and args.producer_id is not None:
            return "--start-offset and --producer-id name the transaction two ways: give one"
        if args.start_offset is None:
            for name in ("producer_epoch", "coordinator_epoch"):
                if getattr(args, name) is None:
                    return f"missing required argument --{name.replace('_', '-')}"
    if command == "find-hanging":
        if args.topic is None and args.broker_id is None:
            return ("find-hanging needs --topic or --broker-id to limit the scope of the "
                    "search")
        if args.partition is not None and args.topic is None:
            return "--partition needs --topic"
        if args.max_transaction_timeout < 0:
            return "--max-transaction-timeout must not be negative"
    return None


async def _run(args, out: TextIO) -> None:
    async with open_admin(args.bootstrap_server, timeout_ms=args.timeout,
                          client_id="minibroker-transactions") as admin:
        await COMMANDS[args.transactions_command](admin, args, out, int(time.time() * 1000))


def run(args, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    args.bootstrap_server = args.bootstrap_server or getattr(args, "bootstrap_before", None)
    if not args.bootstrap_server:
        err.write(f"{PROG} {args.transactions_command}: the following arguments are "
                  f"required: --bootstrap-server\n")
        return 2
    problem = _check(args)
    if problem is not None:
        err.write(f"{PROG} {args.transactions_command}: {problem}\n")
        return 2
    return run_admin_tool(PROG, _run, args, out, err)


def main(args) -> int:
    return run(args)
