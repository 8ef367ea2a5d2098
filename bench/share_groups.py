"""`minibroker bench share-groups`: issue 26's performance figures on one broker of ours,
with librdkafka's share consumer (confluent-kafka's ShareConsumer), our client's
(client.ShareConsumer, `--client ours`) or both in one run (`--client both`):

    minibroker bench share-groups [--client librdkafka|ours|both] [--slow-records 400]
        [--work-ms 5] [--members 1,2,4] [--fast-records 100000] [--runs 3] [--json FILE]

1. slow consumers: one partition, N share consumers of one group (max.poll.records
   --max-poll-records: each takes that many records at a time), each spending --work-ms
   per record (a sleep, as work that waits on something else would) and
   accepting it (implicit acknowledgement). The clock runs from the produce of
   --slow-records records until every record was handled; the figure is records a second
   for each N. The issue asks four members to handle at least 3.5 times what one does:
   the point of share groups, several consumers on one partition.
2. fast consumers: one partition of --fast-records records read whole by one share
   consumer (each record acquired and accepted), beside a classic consumer group's
   consumer of the same client reading the same partition in the same run.

Our client's members run as trio tasks in one process, each poll() taking at most
--max-poll-records records, the work an `await trio.sleep` per record; records are
produced with librdkafka's producer either way.

Every group has read the topic before its clock starts (a warm record delivered), so no
figure counts joining the group or loading the share partition. Each figure is the median
of --runs runs with their min and max; nothing asserts a figure (docs/BENCHMARKS.md
records them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

import trio

from bench.cluster import Node
from bench.common import BenchError, confluent_kafka_modules, progress, table_lines
from client import Consumer, ShareConsumer
from harness.ports import free_port

VALUE = b"x" * 100
WARM = b"warm"
DEADLINE_S = 300.0


class Run:
    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.ck, self.admin_mod = confluent_kafka_modules()

    def topic(self) -> str:
        name = f"bench-share-{uuid.uuid4().hex[:8]}"
        admin = self.admin_mod.AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([self.admin_mod.NewTopic(name, 1, 1)])[name].result(30)
        return name

    def produce(self, topic: str, values: list[bytes]) -> None:
        p = self.ck.Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                              "acks": "all"})
        for v in values:
            while True:
                try:
                    p.produce(topic, v)
                    break
                except BufferError:
                    p.poll(0.05)
        if p.flush(60) != 0:
            raise BenchError("the producer did not deliver every record")

    def share_members(self, topic: str, n: int, max_poll_records: int = 500) -> list:
        """N share consumers of a new group, each having read the warm record (or seen the
        group deliver it to another member)."""
        group = f"bench-share-{uuid.uuid4().hex[:6]}"
        members = []
        for _ in range(n):
            c = self.ck.ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": group,
                                       "max.poll.records": max_poll_records})
            c.subscribe([topic])
            members.append(c)
        # the group starts at the log end (share.auto.offset.reset=latest): every member
        # polls until the share partition is loaded and then the warm record comes
        for c in members:
            c.poll(0.5)
        self.produce(topic, [WARM])
        deadline = time.monotonic() + 60
        warm = False
        while not warm:
            if time.monotonic() > deadline:
                raise BenchError("the share group never delivered its warm record")
            for c in members:
                warm |= any(m.error() is None and m.value() == WARM for m in c.poll(0.2) or [])
        return members


def slow_rate(run: Run, members_n: int, records: int, work_ms: int,
              max_poll_records: int) -> float:
    topic = run.topic()
    members = run.share_members(topic, members_n, max_poll_records)
    handled: set[bytes] = set()
    lock = threading.Lock()
    done = threading.Event()

    def work(c) -> None:
        while not done.is_set():
            for msg in c.poll(0.1) or []:
                if msg.error() is not None or msg.value() == WARM:
                    continue
                time.sleep(work_ms / 1000)
                with lock:
                    handled.add(msg.value())
                    if len(handled) >= records:
                        done.set()

    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in members]
    values = [str(i).encode().ljust(len(VALUE), b" ") for i in range(records)]
    started = time.monotonic()
    for t in threads:
        t.start()
    run.produce(topic, values)
    if not done.wait(DEADLINE_S):
        raise BenchError(f"{members_n} members handled {len(handled)} of {records} records")
    elapsed = time.monotonic() - started
    for t in threads:
        t.join(5)
    for c in members:
        c.close()
    return records / elapsed


def fast_rates(run: Run, records: int) -> tuple[float, float]:
    topic = run.topic()
    share = run.share_members(topic, 1)[0]
    run.produce(topic, [VALUE] * records)
    got, started = 0, time.monotonic()
    deadline = started + DEADLINE_S
    while got < records:
        if time.monotonic() > deadline:
            raise BenchError(f"the share consumer read {got} of {records}")
        got += sum(1 for m in share.poll(0.5) or [] if m.error() is None)
    share_rate = records / (time.monotonic() - started)
    share.close()
    classic = run.ck.Consumer({"bootstrap.servers": run.bootstrap,
                               "group.id": f"bench-classic-{uuid.uuid4().hex[:6]}",
                               "auto.offset.reset": "earliest"})
    classic.subscribe([topic])
    while True:  # joined and past the warm record: the clock starts at the records
        msg = classic.poll(1.0)
        if msg is not None and msg.error() is None and msg.value() == WARM:
            break
    got, started = 0, time.monotonic()
    while got < records:
        if time.monotonic() > deadline:
            raise BenchError(f"the classic consumer read {got} of {records}")
        got += sum(1 for m in classic.consume(1000, 0.5) if m.error() is None)
    classic_rate = records / (time.monotonic() - started)
    classic.close()
    return share_rate, classic_rate


# -- our client's ShareConsumer ---------------------------------------------------------

async def _our_members(run: Run, topic: str, n: int, max_poll_records: int,
                       stack: AsyncExitStack) -> list[ShareConsumer]:
    """share_members with our client: N members of a new group, past the warm record."""
    group = f"bench-share-{uuid.uuid4().hex[:6]}"
    members = [await stack.enter_async_context(ShareConsumer(
        topic, bootstrap_servers=run.bootstrap, group_id=group,
        max_poll_records=max_poll_records)) for _ in range(n)]
    for c in members:
        await c.poll(timeout_ms=500)
    await trio.to_thread.run_sync(run.produce, topic, [WARM])
    with trio.move_on_after(60):
        while True:
            for c in members:
                if any(r.value == WARM for r in await c.poll(timeout_ms=200)):
                    return members
    raise BenchError("the share group never delivered its warm record")


def our_slow_rate(run: Run, members_n: int, records: int, work_ms: int,
                  max_poll_records: int) -> float:
    return trio.run(_our_slow_rate, run, run.topic(), members_n, records, work_ms,
                    max_poll_records)


async def _our_slow_rate(run: Run, topic: str, members_n: int, records: int, work_ms: int,
                         max_poll_records: int) -> float:
    handled: set[bytes] = set()
    done = trio.Event()

    async def work(c: ShareConsumer) -> None:
        while True:
            for r in await c.poll(timeout_ms=100):
                if r.value == WARM:
                    continue
                await trio.sleep(work_ms / 1000)
                handled.add(r.value)
                if len(handled) >= records:
                    done.set()

    values = [str(i).encode().ljust(len(VALUE), b" ") for i in range(records)]
    async with AsyncExitStack() as stack:
        members = await _our_members(run, topic, members_n, max_poll_records, stack)
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            for c in members:
                nursery.start_soon(work, c)
            await trio.to_thread.run_sync(run.produce, topic, values)
            with trio.move_on_after(DEADLINE_S):
                await done.wait()
            elapsed = time.monotonic() - started
            nursery.cancel_scope.cancel()
    if not done.is_set():
        raise BenchError(f"{members_n} members handled {len(handled)} of {records} records")
    return records / elapsed


def our_fast_rates(run: Run, records: int) -> tuple[float, float]:
    return trio.run(_our_fast_rates, run, run.topic(), records)


async def _our_fast_rates(run: Run, topic: str, records: int) -> tuple[float, float]:
    with trio.fail_after(DEADLINE_S * 2):
        async with AsyncExitStack() as stack:
            [share] = await _our_members(run, topic, 1, 500, stack)
            await trio.to_thread.run_sync(run.produce, topic, [VALUE] * records)
            got, started = 0, time.monotonic()
            while got < records:
                got += len(await share.poll(timeout_ms=500))
            share_rate = records / (time.monotonic() - started)
        async with Consumer(topic, bootstrap_servers=run.bootstrap,
                            group_id=f"bench-classic-{uuid.uuid4().hex[:6]}",
                            auto_offset_reset="earliest") as classic:
            async for record in classic:  # joined and past the warm record
                if record.value == WARM:
                    break
            got, started = 0, time.monotonic()
            while got < records:
                batches = await classic.getmany(timeout_ms=500)
                got += sum(len(b) for b in batches.values())
            classic_rate = records / (time.monotonic() - started)
    return share_rate, classic_rate


CLIENTS = {"librdkafka": (slow_rate, fast_rates), "ours": (our_slow_rate, our_fast_rates)}


def _figure(values: list[float]) -> str:
    return (f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minibroker bench share-groups")
    p.add_argument("--slow-records", type=int, default=400)
    p.add_argument("--work-ms", type=int, default=5)
    p.add_argument("--members", default="1,2,4")
    p.add_argument("--max-poll-records", type=int, default=10,
                   help="the slow members' max.poll.records: how many records one member "
                        "takes at a time (librdkafka's default, 500, lets the first member "
                        "hold every record of a short run)")
    p.add_argument("--client", choices=["librdkafka", "ours", "both"], default="librdkafka",
                   help="whose share consumer: librdkafka's, our client's, or a row of each")
    p.add_argument("--fast-records", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    counts = [int(n) for n in args.members.split(",")]
    clients = ["librdkafka", "ours"] if args.client == "both" else [args.client]
    base = Path(tempfile.mkdtemp(prefix="bench-share-"))
    node = Node(0, free_port(), 0, base / "single")
    slow: dict[str, dict[int, list[float]]] = {c: {n: [] for n in counts} for c in clients}
    share_fast: dict[str, list[float]] = {c: [] for c in clients}
    classic_fast: dict[str, list[float]] = {c: [] for c in clients}
    try:
        node.launch()
        node.wait_ready()
        run = Run(node.bootstrap)
        for i in range(args.runs):
            for client in clients:
                slow_case, fast_case = CLIENTS[client]
                for n in counts:
                    progress(f"run {i + 1}, {client}: {n} member(s), {args.work_ms} ms a "
                             "record")
                    slow[client][n].append(slow_case(run, n, args.slow_records,
                                                     args.work_ms, args.max_poll_records))
                progress(f"run {i + 1}, {client}: fast consumers, {args.fast_records:,} "
                         "records")
                s, c = fast_case(run, args.fast_records)
                share_fast[client].append(s)
                classic_fast[client].append(c)
    except BenchError as e:
        print(f"minibroker bench share-groups: {e}\n--- {node.log_path} ---\n{node.tail()}",
              file=sys.stderr)
        return 1
    finally:
        node.kill()
    shutil.rmtree(base, ignore_errors=True)
    rows = []
    for client in clients:
        label = f"{client}: " if len(clients) > 1 else ""
        one = statistics.median(slow[client][counts[0]])
        rows += [[f"{label}{n} member(s), {args.work_ms} ms a record",
                  _figure(slow[client][n]), f"{statistics.median(slow[client][n]) / one:.2f}x"]
                 for n in counts]
        ratio = statistics.median(share_fast[client]) / statistics.median(classic_fast[client])
        rows.append([f"{label}1 share consumer, no work", _figure(share_fast[client]),
                     f"{ratio:.2f} of classic"])
        rows.append([f"{label}1 classic consumer, same partition",
                     _figure(classic_fast[client]), ""])
    names = {"librdkafka": "librdkafka's ShareConsumer", "ours": "our client's ShareConsumer"}
    print(f"share groups: one partition, {' and '.join(names[c] for c in clients)}; median "
          f"of {args.runs} runs (min-max), records a second")
    print("\n".join(table_lines(["case", "records/s", "ratio"], rows)))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {c: {"slow": {str(n): v for n, v in slow[c].items()},
                 "share_fast": share_fast[c], "classic_fast": classic_fast[c]}
             for c in clients}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
