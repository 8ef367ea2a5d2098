"""Helpers for consumer-group tests: librdkafka consumers that record their rebalance
callbacks, a pump that polls several consumers from one thread, and a librdkafka consumer
run in a subprocess (so that it can be killed with SIGKILL).

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
from typing import Any, Callable, Iterable

from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient

from broker.events import read_events
from tests.util import WaitTimeout, wait_until

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
