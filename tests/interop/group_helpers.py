"""Helpers for consumer-group tests.

librdkafka: consumers that record their rebalance callbacks, a pump that polls several
consumers from one thread, and a librdkafka consumer run in a subprocess (so that it can be
killed with SIGKILL). Our client: `Recorder` (a ConsumerRebalanceListener that records its
calls), `OurMember` (one client.Consumer in a group, run as a trio task that polls until
told to stop, recording every record it was given and the member's state at that moment)
and `wait_for` (await a condition with a deadline, checking it between trio checkpoints).
`wait_for_error` polls a librdkafka consumer until it reports a given error code (an
authorization refusal, say).

Callbacks of a librdkafka consumer run inside its ``poll``; an eager member only rejoins
after its revocation was served, so every member of a group must be polled while the group
rebalances. ``pump`` polls each member in turn with a short timeout, which keeps all of them
moving from a single thread without any sleeping.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterable

import trio
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient

from broker.events import read_events
from client.consumer.consumer import Consumer as OurConsumer
from client.consumer.coordinator import ConsumerRebalanceListener
from client.consumer.membership import MemberState
from client.types import TopicPartition
from tests.util import WaitTimeout, wait_until
# the trio wait, where the group tests have always found it
from tests.util import wait_for  # noqa: F401

GROUP_DEFAULTS = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "enable.partition.eof": False,
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 250,
    # the rebalance timeout: a member that never rejoins fails the test in 20 s, not 5 min
    "max.poll.interval.ms": 20000,
    "topic.metadata.refresh.interval.ms": 2000,
}


def tps(partitions: Iterable) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in partitions}


class GroupMember:
    """A confluent-kafka consumer subscribed to topics, recording what the group did to it.

    ``events`` is a list of (kind, {(topic, partition)}) for kind in assign/revoke/lost, in
    the order librdkafka served them; ``owned`` is the assignment as the callbacks built it;
    ``messages`` holds every consumed (topic, partition, offset, value, time).
    """

    def __init__(self, bootstrap: str, group: str, topics: list[str], name: str,
                 **config: Any) -> None:
        self.name = name
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                **GROUP_DEFAULTS, **config}
        self.consumer = Consumer(conf)
        # confluent-kafka has no rebalance_protocol(): librdkafka is cooperative exactly when
        # the (only) assignor is cooperative-sticky
        self.cooperative = conf.get("partition.assignment.strategy") == "cooperative-sticky"
        self.events: list[tuple[str, set[tuple[str, int]]]] = []
        self.assign_times: list[float] = []  # wall clock (as the broker's event log) of each assign
        self.owned: set[tuple[str, int]] = set()
        self.min_owned_since_mark: int | None = None  # smallest assignment since mark()
        self.messages: list[tuple[str, int, int, bytes, float]] = []
        self.errors: list[KafkaError] = []
        self.closed = False
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)

    # -- callbacks ------------------------------------------------------------------------------

    def _on_assign(self, consumer, partitions) -> None:
        got = tps(partitions)
        self.events.append(("assign", got))
        self.assign_times.append(time.time())
        self.owned = self.owned | got if self.cooperative else got
        self._track()

    def _on_revoke(self, consumer, partitions) -> None:
        got = tps(partitions)
        self.events.append(("revoke", got))
        self.owned = self.owned - got if self.cooperative else set()
        self._track()

    def _on_lost(self, consumer, partitions) -> None:
        got = tps(partitions)
        self.events.append(("lost", got))
        self.owned = self.owned - got
        self._track()

    def _track(self) -> None:
        if self.min_owned_since_mark is not None:
            self.min_owned_since_mark = min(self.min_owned_since_mark, len(self.owned))

    def mark(self) -> int:
        """Start watching the smallest assignment; returns the index of the next event."""
        self.min_owned_since_mark = len(self.owned)
        return len(self.events)

    # -- polling --------------------------------------------------------------------------------

    def poll(self, timeout: float = 0.05) -> None:
        if self.closed:
            return
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        if msg.error():
            self.errors.append(msg.error())
            return
        self.messages.append((msg.topic(), msg.partition(), msg.offset(), msg.value(),
                              time.monotonic()))

    def assignment(self) -> set[tuple[str, int]]:
        return tps(self.consumer.assignment())

    def values(self) -> list[bytes]:
        return [m[3] for m in self.messages]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def pump(members: list, until: Callable[[], Any], timeout_s: float, message: str = "",
         poll_s: float = 0.05, broker=None, group: str | None = None) -> Any:
    """Poll every member in turn until ``until()`` is true (wait_until with a deadline).

    With ``broker`` and ``group``, a timeout also tells the group's story from the broker's
    event log, which is usually what explains a group that never settled."""
    def step():
        for m in members:
            m.poll(poll_s)
        return until()
    try:
        return wait_until(step, timeout_s, interval_s=0.001, message=message)
    except WaitTimeout as e:
        if broker is None or group is None:
            raise
        owned = [(m.name, sorted(m.owned)) for m in members]
        raise WaitTimeout(f"{e}\nmembers: {owned}\nbroker events of group {group}:\n"
                          f"{group_story(broker, group)}") from None


def group_story(broker, group: str) -> str:
    """The group's events, one line each, without the noise."""
    keep = ("type", "generation", "member", "old_state", "new_state", "reason", "kind",
            "assigned")
    return "\n".join(str({k: e[k] for k in keep if k in e})
                     for e in read_events(broker.data_dir) if e.get("group") == group)


def rebalance_served(broker, group: str, members: list[GroupMember]) -> bool:
    """Every member has served the assign callback of the group's latest generation.

    The broker logs `group_assignment` for each member when it answers that member's
    SyncGroup; librdkafka then calls on_assign (possibly with nothing new, under the
    cooperative protocol) from a later poll. A member that owns the right partitions may
    still have that callback ahead of it, so "converged" alone is not "settled"."""
    assignments = [e for e in read_events(broker.data_dir)
                   if e.get("type") == "group_assignment" and e.get("group") == group]
    if not assignments:
        return False
    latest = max(e["generation"] for e in assignments)
    synced = {e["member"]: e["ts"] for e in assignments if e["generation"] == latest}
    for m in members:
        ts = synced.get(m.consumer.memberid())
        if ts is None or not any(t * 1000 >= ts for t in m.assign_times):
            return False
    return True


def pump_for(members: list, duration_s: float, poll_s: float = 0.05) -> None:
    """Keep every member polling for an observation window (to show that nothing happens)."""
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        for m in members:
            m.poll(poll_s)


def all_partitions(topic: str, n: int) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(n)}


def disjoint_cover(assignments: list[set], everything: set) -> bool:
    """Every member owns something, and every partition is owned by exactly one member."""
    if not all(assignments):
        return False
    total = sum(len(a) for a in assignments)
    return total == len(everything) and set().union(*assignments) == everything


def describe_group(bootstrap: str, group: str):
    """The group as the broker describes it (DescribeGroups through librdkafka's admin)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(timeout=10)


def broker_assignment(description) -> dict[str, set[tuple[str, int]]]:
    """client id -> partitions, from a ConsumerGroupDescription."""
    return {m.client_id: tps(m.assignment.topic_partitions) for m in description.members}


# -- a consumer in a subprocess ----------------------------------------------------------------

_CHILD = r"""
import json, sys
from confluent_kafka import Consumer
conf, topics = json.loads(sys.argv[1]), json.loads(sys.argv[2])
cooperative = conf.get("partition.assignment.strategy") == "cooperative-sticky"
c = Consumer(conf)

def say(event, partitions):
    print(json.dumps({"event": event, "member_id": c.memberid(),
                      "partitions": [[p.topic, p.partition] for p in partitions],
                      "assignment": [[p.topic, p.partition] for p in c.assignment()]}),
          flush=True)

def on_assign(consumer, partitions):
    consumer.incremental_assign(partitions) if cooperative else consumer.assign(partitions)
    say("assign", partitions)

def on_revoke(consumer, partitions):
    consumer.incremental_unassign(partitions) if cooperative else consumer.unassign()
    say("revoke", partitions)

c.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke)
print(json.dumps({"event": "subscribed"}), flush=True)
while True:
    c.poll(0.1)
"""


class SubprocessMember:
    """A librdkafka group member in its own process; it prints one JSON line per callback."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], name: str,
                 **config: Any) -> None:
        self.name = name
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                **GROUP_DEFAULTS, **config}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, json.dumps(conf), json.dumps(topics)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.lines: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.lines.append(json.loads(line))
            except json.JSONDecodeError:
                pass

    def poll(self, timeout: float = 0.0) -> None:
        """Nothing to do: the child polls itself (here so a pump can include it)."""

    @property
    def assignment(self) -> set[tuple[str, int]]:
        callbacks = [x for x in self.lines if x["event"] in ("assign", "revoke")]
        return {tuple(p) for p in callbacks[-1]["assignment"]} if callbacks else set()

    owned = assignment

    @property
    def member_id(self) -> str | None:
        ids = [x["member_id"] for x in self.lines if x.get("member_id")]
        return ids[-1] if ids else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class ThreadPump:
    """Polls one librdkafka member from a worker thread (its callbacks run inside poll,
    and a librdkafka consumer must be closed from the thread that polls it)."""

    def __init__(self, member: GroupMember) -> None:
        self.member = member
        self.stop = threading.Event()
        self.close_requested = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            if self.close_requested.is_set():
                self.member.close()
                return
            self.member.poll(0.05)


@asynccontextmanager
async def polled_in_a_thread(member: GroupMember) -> AsyncIterator[ThreadPump]:
    """Keep `member` polling while the block runs (in a trio test); `pump.close_requested`
    makes it leave the group."""
    pump = ThreadPump(member)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, pump.run)
            try:
                yield pump
            finally:
                pump.stop.set()
    finally:
        pump.stop.set()
        member.close()


# -- our consumers, as trio tasks --------------------------------------------------------------

# small timeouts keep rebalances well under a second; with the broker's
# group.initial.rebalance.delay.ms=0 (FAST_GROUP_BROKER)
FAST_GROUP = dict(session_timeout_ms=6000, heartbeat_interval_ms=100,
                  max_poll_interval_ms=20000, auto_offset_reset="earliest",
                  enable_auto_commit=False)
FAST_GROUP_BROKER = {"group.initial.rebalance.delay.ms": "0"}


def partitions_of(topic: str, n: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


class Recorder(ConsumerRebalanceListener):
    """Records (kind, partitions) and the owned set as the calls build it (incrementally
    under the cooperative protocol, replaced by each assignment under the eager one)."""

    def __init__(self, cooperative: bool = False):
        self.cooperative = cooperative
        self.calls: list[tuple[str, frozenset]] = []
        self.owned: set[TopicPartition] = set()

    async def on_partitions_revoked(self, partitions):
        self.calls.append(("revoked", frozenset(partitions)))
        self.owned -= set(partitions)

    async def on_partitions_assigned(self, partitions):
        self.calls.append(("assigned", frozenset(partitions)))
        self.owned = (self.owned | set(partitions)) if self.cooperative else set(partitions)

    async def on_partitions_lost(self, partitions):
        self.calls.append(("lost", frozenset(partitions)))
        self.owned -= set(partitions)


@dataclass(frozen=True)
class Delivered:
    """A record as one of our members got it, with the member's state at that moment."""
    tp: TopicPartition
    offset: int
    value: bytes | None
    state: MemberState
    generation: int


class OurMember:
    """One client.Consumer subscribed to `topics` in `group`, run by `run` as a trio task:
    it polls (getmany) until `leave()`; `polling = False` makes it stop polling (the
    max.poll.interval case) until set back. `records` holds every record it was given."""

    def __init__(self, name: str, bootstrap: str, group: str, topics: list[str], *,
                 listener: Recorder | None = None, cooperative: bool = False,
                 **config: Any) -> None:
        self.name = name
        self.listener = listener if listener is not None else Recorder(cooperative)
        self.records: list[Delivered] = []
        self.consumer = OurConsumer(bootstrap_servers=bootstrap, group_id=group,
                                    client_id=name, **config)
        self.topics = topics
        self.polling = True
        self._resume = trio.Event()
        self._stop = trio.Event()
        self.closed = trio.Event()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with self.consumer as c:
                c.subscribe(self.topics, listener=self.listener)
                task_status.started()
                while not self._stop.is_set():
                    if not self.polling:
                        await self._resume.wait()
                        self._resume = trio.Event()
                        continue
                    batch = await c.getmany(timeout_ms=50)
                    group = c._group
                    state = group.state if group is not None else MemberState.UNJOINED
                    generation = group.member.generation if group is not None else -1
                    for tp, records in batch.items():
                        self.records += [Delivered(tp, r.offset, r.value, state, generation)
                                         for r in records]
        finally:
            self.closed.set()

    def resume_polling(self) -> None:
        self.polling = True
        self._resume.set()

    async def leave(self) -> None:
        """Stop polling and close the consumer (LeaveGroup for a dynamic member)."""
        self._stop.set()
        self._resume.set()
        await self.closed.wait()

    # -- what the group made of it ----------------------------------------------------------

    @property
    def group(self):
        return self.consumer._group

    def stable(self) -> bool:
        g = self.group
        return g is not None and g.state is MemberState.STABLE and not g._queue

    @property
    def generation(self) -> int:
        return self.group.member.generation if self.group is not None else -1

    def assignment(self) -> set[TopicPartition]:
        return self.consumer.assignment()

    def offsets(self, tp: TopicPartition) -> list[int]:
        return [d.offset for d in self.records if d.tp == tp]


def balanced_cover(members: list[OurMember], everything: set[TopicPartition]) -> bool:
    """Every member stable in the same generation, its listener's view equal to its
    assignment, every partition owned by exactly one member, sizes within one."""
    if not all(m.stable() for m in members):
        return False
    if len({m.generation for m in members}) != 1:
        return False
    owned = [m.assignment() for m in members]
    if any(m.listener.owned != a for m, a in zip(members, owned)):
        return False
    sizes = [len(a) for a in owned]
    return (sum(sizes) == len(everything) and set().union(*owned) == everything
            and max(sizes) - min(sizes) <= 1)


def wait_for_error(conf: dict, topic: str, code: int, timeout_s: float = 20) -> None:
    """Subscribe a librdkafka consumer (`conf` names its group) to `topic` and poll until it
    reports the error `code` (a KafkaError attribute), or fail after the timeout."""
    consumer = Consumer({"auto.offset.reset": "earliest", **conf})
    errors: list = []
    try:
        consumer.subscribe([topic])

        def reported() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error().code())
            return code in errors

        wait_until(reported, timeout_s, message=f"error {code} from the consumer")
    finally:
        consumer.close()
