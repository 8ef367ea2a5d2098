"""What every benchmark shares: the error that voids a figure, waiting on a condition
(harness.wait's, failing with that error), CPU accounting from /proc, the optional
confluent-kafka import, a librdkafka client's warm-up before a clock starts, and the
aligned text table the figures are printed in.

CPU seconds are read for a whole process tree (the broker and any children) so that a
broker's figure includes work it hands to helper processes; the client's own CPU comes
from getrusage and so includes librdkafka's threads.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import Any, Callable, Container, Sequence, TypeVar

from harness.wait import WaitTimeout, wait_until

T = TypeVar("T")

_CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """A benchmark run that could not produce a valid figure."""


def progress(text: str) -> None:
    """A step of a long benchmark, on stderr, indented under its title."""
    print(f"  {text}", file=sys.stderr, flush=True)


def wait_for(predicate: Callable[[], T | None], timeout_s: float, what: str, *,
             interval_s: float = 0.05,
             ignore: tuple[type[BaseException], ...] = (OSError,)) -> T:
    """Poll `predicate` every `interval_s` until it is truthy and return that (`ignore`d
    exceptions, a node restarting, count as not yet); BenchError after `timeout_s`."""
    try:
        return wait_until(predicate, timeout_s, interval_s, what, ignore_exceptions=ignore)
    except WaitTimeout:
        raise BenchError(f"timed out after {timeout_s:g} s waiting for {what}") from None


# --------------------------------------------------------------------------- CPU


def _proc_stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read().decode("ascii", "replace")
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def _children(pid: int) -> list[int]:
    out: list[int] = []
    task_dir = f"/proc/{pid}/task"
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return out


def process_tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (utime+stime, all threads) of ``pid``.

    Also counts its live descendants and the children it has already reaped
    (cutime+cstime), so a broker that forks workers is measured completely; for
    a single-process broker this is exactly utime+stime of ``pid``.
    """
    total_ticks = 0
    seen: set[int] = set()
    stack = [pid]
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            fields = _proc_stat_fields(p)
        except (OSError, ValueError) as err:
            if p == pid:
                raise BenchError(
                    f"cannot read /proc/{pid}/stat: is the broker (pid {pid}) running?") from err
            continue
        # After the comm field, index 0 is field 3 (state): utime is field 14,
        # stime 15, cutime 16, cstime 17.
        total_ticks += sum(int(x) for x in fields[11:15])
        stack.extend(_children(p))
    return total_ticks / _CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds every process of the machine has used since boot (/proc/stat, not idle
    nor iowait): with `own_cpu_seconds`, what others took from a run."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _CLK_TCK


def own_cpu_seconds() -> float:
    """This process's CPU seconds and its waited-for children's (brokers a bench started
    and has stopped)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _client_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class CpuMeter:
    """CPU seconds over a timed section: the client's (getrusage) and, for each broker pid
    given (one broker, or every broker of a cluster), its process tree's from /proc."""

    def __init__(self, broker_pids: int | Sequence[int] | None) -> None:
        if broker_pids is None:
            broker_pids = ()
        self.broker_pids = (broker_pids,) if isinstance(broker_pids, int) else tuple(broker_pids)
        self._b0: dict[int, float] = {}
        self._c0 = 0.0
        self.per_broker: dict[int, float] = {}  # pid -> CPU seconds, filled by stop()

    def start(self) -> None:
        self._c0 = _client_cpu_seconds()
        self._b0 = {pid: process_tree_cpu_seconds(pid) for pid in self.broker_pids}

    def stop(self) -> tuple[float | None, float]:
        """(the brokers' CPU seconds added up, None without a broker pid; the client's)."""
        client = _client_cpu_seconds() - self._c0
        self.per_broker = {pid: process_tree_cpu_seconds(pid) - self._b0[pid]
                           for pid in self.broker_pids}
        broker = sum(self.per_broker.values()) if self.broker_pids else None
        return broker, client


def confluent_kafka_modules():
    try:
        import confluent_kafka
        from confluent_kafka import admin
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BenchError(
            "confluent-kafka is not installed; pip install 'minibroker[bench]'"
        ) from e
    return confluent_kafka, admin


def join_group_once(ck: Any, bootstrap: str, topic: str, group: str) -> None:
    """A consumer group joins once and leaves: its coordinator creates __consumer_offsets
    on first need, so a benchmark takes its figures beside it (RF 3 on a cluster)."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "session.timeout.ms": 10000})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 120
        while not consumer.assignment():
            if time.monotonic() > deadline:
                raise BenchError("the consumer group got no assignment in 120 s")
            consumer.poll(0.2)
    finally:
        consumer.close()


def warm_up_producer(producer: Any, topic: str, partitions: int, value: bytes,
                      timeout_s: float) -> None:
    """One record to each partition of `topic`, acknowledged, before a producer's clock
    starts; the topic's metadata first. All of this is start-up, not the rate measured:
    librdkafka (2.16) drops its bootstrap connection once it has the metadata and connects
    to a partition's leader only when it first has records for it (about 1 ms on loopback,
    13 ms with SASL_SSL's handshakes); an idempotent producer asks for its producer id in
    the background and, with no connection up yet, again only 500 ms later; and on a
    replicated topic made less than about 500 ms before, the first acks=all records wait
    for a follower's parked fetch to return (replica.fetch.wait.max.ms) before its next
    one names the new partition (440-490 ms measured on three local nodes)."""
    producer.list_topics(topic, timeout=timeout_s)
    for partition in range(partitions):
        producer.produce(topic, value, partition=partition)
    if producer.flush(timeout_s):
        raise BenchError(f"the warm-up records to {topic} were not acknowledged in "
                         f"{timeout_s:g}s")


def warm_up_consumer(ck: Any, consumer: Any, topic: str, partitions: int,
                      timeout_s: float) -> None:
    """The topic's metadata and a connection to each partition's leader (a ListOffsets
    to each), before a consumer's clock starts. A partition assigned at OFFSET_BEGINNING
    before librdkafka knows its leader waits 500 ms for its next try at the offset
    (rd_kafka_toppar_offset_request's back-off), and a clock started with the Consumer
    counted those 500 ms."""
    consumer.list_topics(topic, timeout=timeout_s)
    for partition in range(partitions):  # ListOffsets to each leader: its connection
        if consumer.get_watermark_offsets(ck.TopicPartition(topic, partition),
                                          timeout=timeout_s) is None:
            raise BenchError(f"no watermarks of {topic}[{partition}] in {timeout_s:g}s")


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]],
                left: Container[int] = (0,)) -> list[str]:
    """`header`, a rule and `rows` in aligned columns: the columns numbered in `left` (words)
    flush left, the others (figures) flush right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) if i in left else c.rjust(w)
                      for i, (c, w) in enumerate(zip(line, widths))).rstrip()
            for line in [header, ["-" * w for w in widths], *rows]]
