"""`minibroker consume`: print a topic's records, one per stdout line, in the manner of
Kafka's kafka-console-consumer.sh, built on client.Consumer.

    minibroker consume orders --bootstrap-server 127.0.0.1:9092 --from-beginning \\
        --print-key --key-separator : --max-messages 10
    minibroker consume orders --group billing --bootstrap-server 127.0.0.1:9092

With --group G the command is a member of group G, as kafka-console-consumer is: it
subscribes to the topic (the classic protocol, the client's default assignor), reads the
partitions the group assigns it and gives them up when another member joins; it commits its
positions every auto.commit.interval.ms (enable.auto.commit, as kafka-console-consumer sets
it) and once more on exit, also after Ctrl-C, then leaves the group. Each partition starts
at the group's committed offset, else the earliest offset with --from-beginning
(auto.offset.reset=earliest), else the latest. --partition and --offset cannot be used with
--group (exit 2), as in Kafka.

SIGINT (Ctrl-C) and SIGTERM end the command as kafka-console-consumer's shutdown hook does:
the reading stops, "Processed a total of N messages" is printed, the positions are committed
and the member leaves its group (--group), and the exit status is 0. A second signal exits
at once (status 128 + the signal's number) without waiting for the commit or the leave.

Without --group every partition of the topic (or only --partition P) is assigned, nothing
is committed, and each starts at --offset O (earliest, latest or a number; needs
--partition), else the earliest with --from-beginning, else the latest.

Output: the value per line, "KEY<SEP>VALUE" with --print-key (SEP defaults to a tab); bytes
are decoded as UTF-8 with errors replaced, a null key or value prints as "null". The command
stops after --max-messages records, or when no record arrived for --timeout-ms (counted
from the start: finding the topic, joining the group and the first positions are part of
it); then "Processed a total of N messages" goes to stderr and the exit status is 0. Exit
status 1 (one line on stderr) when the broker cannot be reached (the address is named), the
topic does not exist or the broker answers an error; 2 on a bad option or a malformed
--bootstrap-server.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from contextlib import contextmanager
from typing import Any, AsyncIterator, BinaryIO, Iterator, TextIO

import trio

__all__ = ["add_arguments", "main", "format_record", "Interrupt"]

DESCRIPTION = ("Print a topic's records, one per line (kafka-console-consumer). With --group "
               "the command joins the group, reads the partitions it is assigned and "
               "commits its positions; without, it reads every partition.")
POLL_MS = 500
API_TIMEOUT_MS = 60000  # without --timeout-ms: the clients' default.api.timeout.ms


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="a broker to start from (comma-separated for several)")
    parser.add_argument("--group", default=None, metavar="G",
                        help="join consumer group G: read the partitions G assigns this "
                             "member, starting at G's committed offsets, and commit the "
                             "positions reached (periodically and on exit)")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest offset when no committed offset applies "
                             "(default: the latest)")
    parser.add_argument("--max-messages", type=int, default=None, metavar="N",
                        help="exit after N records")
    parser.add_argument("--timeout-ms", type=int, default=None, metavar="MS",
                        help="exit when no record arrived for MS milliseconds")
    parser.add_argument("--print-key", action="store_true",
                        help="print KEY<SEP>VALUE instead of VALUE")
    parser.add_argument("--key-separator", default="\t", metavar="SEP",
                        help="between key and value with --print-key (default TAB)")
    parser.add_argument("--partition", type=int, default=None, metavar="P",
                        help="read only partition P")
    parser.add_argument("--offset", default=None, metavar="O",
                        help="start offset for --partition: earliest, latest or a number")


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


def format_record(record: Any, print_key: bool, separator: str) -> str:
    if print_key:
        return f"{_text(record.key)}{separator}{_text(record.value)}"
    return _text(record.value)


def _check_args(args: argparse.Namespace) -> int | str | None:
    """The parsed --offset (None when absent); ValueError on a bad combination."""
    if args.max_messages is not None and args.max_messages <= 0:
        raise ValueError("--max-messages must be > 0")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise ValueError("--timeout-ms must be >= 0")
    if args.group is not None and args.partition is not None:
        raise ValueError("Options group and partition cannot be specified together.")
    if args.group is not None and args.offset is not None:
        raise ValueError("Options group and offset cannot be specified together.")
    if args.offset is None:
        return None
    if args.partition is None:
        raise ValueError("--offset needs --partition")
    if args.offset in ("earliest", "latest"):
        return args.offset
    try:
        offset = int(args.offset)
    except ValueError:
        raise ValueError(f"--offset expects earliest, latest or a number, "
                         f"got {args.offset!r}") from None
    if offset < 0:
        raise ValueError(f"--offset must be >= 0, got {offset}")
    return offset


async def _partitions(bootstrap: str, topic: str) -> list[int]:
    """The topic's partitions; ToolError naming the address when no bootstrap address
    answers (at once when the connection is refused)."""
    from tools.admin_session import open_admin

    async with open_admin(bootstrap, timeout_ms=API_TIMEOUT_MS,
                          client_id="console-consumer") as admin:
        description = (await admin.describe_topics([topic]))[topic]
    return [p.partition for p in description.partitions]


class Interrupt:
    """What SIGINT and SIGTERM do to a running command (module docstring): the first cancels
    the block of work under way (`interruptible()`: finding the topic, then the reading),
    at the next checkpoint of the task that runs it; a second exits the process at once.

    The signals are taken with trio.open_signal_receiver (`watch`), not as trio's default
    KeyboardInterrupt: that one is raised at whatever bytecode is running when the signal
    arrives, in whichever task. In a background task of the Consumer it ended the command
    with a traceback and status 1 instead of the final commit; inside trio's own
    Nursery.start_soon (not protected from it) it left a child registered but never
    scheduled, and the Consumer's close then waited for it forever (the console consumer
    that did not exit after Ctrl-C, right after a rebalance, when it is busiest)."""

    def __init__(self) -> None:
        self.received: int | None = None  # the first signal's number
        self._scopes: set[trio.CancelScope] = set()

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """A block the first signal cancels (at once if it came before the block)."""
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                if self.received is not None:
                    scope.cancel()
                yield
            finally:
                self._scopes.discard(scope)

    def interrupt(self, signum: int) -> None:
        """The first signal: cancel whatever is interruptible now, and what comes later."""
        self.received = signum
        for scope in self._scopes:
            scope.cancel()

    async def watch(self, signals: AsyncIterator[int], err: TextIO) -> None:
        async for signum in signals:
            if self.received is None:
                self.interrupt(signum)
                continue
            print(f"minibroker consume: {signal.Signals(signum).name} again: exiting "
                  "without waiting for the final commit", file=err)
            err.flush()
            os._exit(128 + signum)


async def consume(args: argparse.Namespace, out: BinaryIO, err: TextIO,
                  interrupt: Interrupt | None = None) -> int:
    """Run the command; `out` gets the records as UTF-8 lines. `interrupt` (main() makes
    one that the signals trigger) stops the topic's lookup or the reading early.

    --timeout-ms bounds everything from the start: looking the topic up and the first
    positions count as time without a record, so an unreachable broker ends the command
    within it (exit 1, naming the address)."""
    from client import Consumer, TopicPartition
    from client.errors import KafkaError
    from tools.admin_session import ToolError, client_settings, one_line

    offset = _check_args(args)
    idle_s = math.inf if args.timeout_ms is None else args.timeout_ms / 1000
    deadline = trio.current_time() + idle_s  # moves on with every record
    interrupt = interrupt if interrupt is not None else Interrupt()
    with interrupt.interruptible(), trio.move_on_at(deadline) as lookup:
        partitions = await _partitions(args.bootstrap_server, args.topic)
    if interrupt.received is not None:
        print("Processed a total of 0 messages", file=err)
        return 0
    if lookup.cancelled_caught:
        raise ToolError(f"no answer from {args.bootstrap_server} within --timeout-ms "
                        f"{args.timeout_ms} ms")
    if args.partition is not None:
        if args.partition not in partitions:
            print(f"minibroker consume: topic {args.topic} has no partition {args.partition} "
                  f"({len(partitions)} partitions)", file=err)
            return 1
        partitions = [args.partition]
    tps = [TopicPartition(args.topic, p) for p in partitions]

    total = 0
    settings = dict(client_settings.get())
    settings.setdefault("client_id", "console-consumer")
    reset = "earliest" if args.from_beginning else "latest"
    if args.group is None:
        consumer = Consumer(bootstrap_servers=args.bootstrap_server, enable_auto_commit=False,
                            auto_offset_reset=reset, **settings)
    else:
        # a member of the group, as kafka-console-consumer (enable.auto.commit=true)
        consumer = Consumer(args.topic, bootstrap_servers=args.bootstrap_server,
                            group_id=args.group, enable_auto_commit=True,
                            auto_offset_reset=reset, **settings)
    async with consumer:
        if args.group is None:
            consumer.assign(tps)
        try:
            # A signal cancels getmany, which loses no record to it: the records it takes
            # from the buffers are returned without a checkpoint in between.
            with interrupt.interruptible():
                # the deadline cancels only these: getmany is given what is left of the time
                with trio.move_on_at(deadline):
                    if offset == "earliest":
                        await consumer.seek_to_beginning(*tps)
                    elif offset == "latest":
                        await consumer.seek_to_end(*tps)
                if isinstance(offset, int):
                    consumer.seek(tps[0], offset)
                while args.max_messages is None or total < args.max_messages:
                    left_ms = (deadline - trio.current_time()) * 1000
                    if left_ms <= 0:
                        break
                    wait_ms = max(1, int(min(POLL_MS, left_ms)))
                    left = None if args.max_messages is None else args.max_messages - total
                    batches = await consumer.getmany(timeout_ms=wait_ms, max_records=left)
                    lines = [format_record(r, args.print_key, args.key_separator)
                             for records in batches.values() for r in records]
                    if lines:
                        out.write("".join(line + "\n" for line in lines).encode("utf-8"))
                        out.flush()
                        total += len(lines)
                        deadline = trio.current_time() + idle_s
        finally:
            print(f"Processed a total of {total} messages", file=err)
            if args.group is not None:
                # the positions reached, also after Ctrl-C (closing commits them too, but
                # says nothing when it cannot); bounded, as the broker may be what stopped
                # answering
                with trio.CancelScope(shield=True) as commit_scope:
                    commit_scope.deadline = trio.current_time() + API_TIMEOUT_MS / 1000
                    try:
                        await consumer.commit()
                    except KafkaError as e:
                        print(f"minibroker consume: the final commit failed: {one_line(e)}",
                              file=err)
                if commit_scope.cancelled_caught:
                    print("minibroker consume: the final commit did not complete in "
                          f"{API_TIMEOUT_MS} ms", file=err)
    return 0


async def _consume_until_signalled(args: argparse.Namespace, out: BinaryIO,
                                   err: TextIO) -> int:
    from client.connection import background_nursery

    interrupt = Interrupt()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with background_nursery() as nursery:
            nursery.start_soon(interrupt.watch, signals, err)
            return await consume(args, out, err, interrupt)


def main(args: argparse.Namespace) -> int:
    from client.errors import KafkaError
    from tools.admin_session import ToolError, one_line

    try:
        return trio.run(_consume_until_signalled, args, sys.stdout.buffer, sys.stderr)
    except ValueError as e:
        print(f"minibroker consume: {e}", file=sys.stderr)
        return 2
    except ToolError as e:
        print(f"minibroker consume: {e}", file=sys.stderr)
        return 1
    except KafkaError as e:
        print(f"minibroker consume: {one_line(e)}", file=sys.stderr)
        return 1
    except OSError as e:
        if isinstance(e, BrokenPipeError):  # `| head`: the reader went away
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        print(f"minibroker consume: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
