"""Share-group members in a fault run, and what their history must show (KIP-932).

Owns `ShareMember` (our ShareConsumer in explicit mode: every record it is given is
ACCEPTed and committed at once) and `check_share`, the share invariants over the history:

  share_poll    share-N   ok {records: [[partition, offset, value, delivery_count], ...]}
  share_accept  share-N   ok {records: [[partition, offset], ...]}: accepts the leader
                          confirmed (ShareAcknowledge answered NONE for the partition)
  share_offsets checker   ok {offsets: {partition: start offset}}: the group's share-
                          partition start offsets (DescribeShareGroupOffsets) at the end

- **accepted-twice**: a record whose ACCEPT was confirmed is never delivered again after
  the confirmation (an acknowledged state is durable across leader and share-coordinator
  failovers);
- **over-limit**: no delivery count above group.share.delivery.count.limit;
- **not-accepted**: every record a producer's send was acknowledged for is, by the end,
  done with: below its partition's last share-partition start offset, or accepted
  (confirmed) or archived by the delivery limit (`share_records_archived`) past it. An
  accept whose answer was lost (a failover) may have been written all the same: the start
  offset, not the member's view, says whether the group is done with a record.
"""

from __future__ import annotations

from typing import Any, Iterable

import trio

from client import AcknowledgeType, ShareConsumer
from harness.chaos.history import OK, History
from harness.chaos.workload import POLL_TIMEOUT_MS, Counters, Settings, started

__all__ = ["Progress", "ShareMember", "check_share", "share_group_of", "unfinished"]

EXAMPLES = 5


def share_group_of(group: str) -> str:
    return f"{group}-share"


class Progress:
    """Wakes whoever waits for the members' next confirmed accepts."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class ShareMember:
    def __init__(self, name: str, s: Settings, history: History, counters: Counters,
                 progress: Progress | None = None) -> None:
        self.name, self.s, self.h, self.c = name, s, history, counters
        self.progress = progress or Progress()

    async def run(self, stop: trio.Event) -> None:
        async with started(lambda: ShareConsumer(
                self.s.topic, bootstrap_servers=self.s.bootstrap,
                group_id=share_group_of(self.s.group), share_acknowledgement_mode="explicit",
                request_timeout_ms=10000, max_poll_records=50)) as consumer:
            while not stop.is_set():
                try:
                    records = await consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
                except Exception as e:  # noqa: BLE001 - a refused poll is part of the run
                    self.c.note_error(f"{self.name} poll: {e!r}")
                    continue
                if not records:
                    continue
                self.h.record(self.name, OK, "share_poll", {"records": [
                    [r.partition, r.offset, (r.value or b"").decode(), r.delivery_count]
                    for r in records]})
                self.c.polled += len(records)
                for r in records:
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT)
                try:
                    results = await consumer.commit()
                except Exception as e:  # noqa: BLE001 - unknown: not recorded as accepted
                    self.c.note_error(f"{self.name} commit: {e!r}")
                    continue
                accepted = [[r.partition, r.offset] for r in records
                            if r.topic_partition in results
                            and results[r.topic_partition] is None]
                if accepted:
                    self.h.record(self.name, OK, "share_accept", {"records": accepted})
                    self.c.commits += 1
                    self.progress.notify()


def _acked_sends(ops: Iterable[dict[str, Any]]) -> set[tuple[int, int]]:
    return {(op["value"]["partition"], op["value"]["offset"]) for op in ops
            if op["f"] == "send" and op["type"] == OK}


def _accepted(ops: Iterable[dict[str, Any]]) -> set[tuple[int, int]]:
    return {(p, o) for op in ops if op["f"] == "share_accept"
            for p, o in op["value"]["records"]}


def _start_offsets(ops: Iterable[dict[str, Any]]) -> dict[int, int]:
    last: dict[int, int] = {}
    for op in ops:
        if op["f"] == "share_offsets":
            last = {int(p): o for p, o in op["value"]["offsets"].items()}
    return last


def unfinished(ops: list[dict[str, Any]], archived: set[tuple[int, int]],
               starts: dict[int, int] | None = None) -> set[tuple[int, int]]:
    """The acknowledged sends the group is not done with: at or past their partition's
    start offset (`starts`, else the last share_offsets op), neither accepted nor archived."""
    starts = _start_offsets(ops) if starts is None else starts
    return {(p, o) for p, o in _acked_sends(ops) - _accepted(ops) - archived
            if o >= starts.get(p, 0)}


def check_share(ops: list[dict[str, Any]], archived: set[tuple[int, int]],
                delivery_limit: int) -> dict[str, list[str]]:
    """The share invariants' violations, by name (a few examples each)."""
    out: dict[str, list[str]] = {}
    accepted_at: dict[tuple[int, int], int] = {}
    twice, over = [], []
    for op in ops:
        if op["f"] == "share_accept":
            for p, o in op["value"]["records"]:
                accepted_at.setdefault((p, o), op["index"])
        elif op["f"] == "share_poll":
            for p, o, _value, count in op["value"]["records"]:
                if (p, o) in accepted_at:
                    twice.append(f"{p}@{o} delivered to {op['process']} (count {count}) after "
                                 f"its accept was confirmed (op {accepted_at[(p, o)]})")
                if count > delivery_limit:
                    over.append(f"{p}@{o} delivered a {count}th time (limit "
                                f"{delivery_limit})")
    missing = sorted(unfinished(ops, archived))
    for name, found in (("share-accepted-twice", twice), ("share-over-limit", over),
                        ("share-not-accepted", [f"{p}@{o}" for p, o in missing])):
        if found:
            out[name] = found[:EXAMPLES] + ([f"... {len(found)} in all"]
                                            if len(found) > EXAMPLES else [])
    return out
