"""What a chaos history must not show: the safety properties of a Kafka queue, checked the
way Jepsen's kafka checker (jepsen/tests/kafka.clj) checks them.

Owns: reading a history (history.py's format, its contract) into one index, and one
function per property over that index. `check` runs them all and returns a `Result` per
property, keyed by name; `FAILURES` names the properties whose count must be 0;
`summary_rows` gives the rows of the printed table.

    lost                  an acknowledged send (ok) missing from the final read of its
                          partition, the whole log read after healing ("unseen" in Jepsen
                          once the final drain is done)
    lost-before-poll      Jepsen's lost-write: an acknowledged send at an offset at or
                          below the highest offset any consumer polled in its partition,
                          that no poll nor the final read ever returned
    duplicate             one value at more than one offset (acks, polls, final reads)
    inconsistent-offsets  one offset holding more than one value (acks, polls, final reads)
    order                 one producer's values on one partition at offsets that do not
                          grow with its sequence numbers (nonmonotonic-send)
    nonmonotonic-poll     a consumer, with no assign in between, polling a partition at or
                          before its last polled offset; or a backward step inside a poll
    poll-skip             a consumer, with no assign in between, jumping over offsets of a
                          partition (or a gap inside a poll); or, at its first poll of a
                          partition after an assign, starting beyond every committed offset
    commit-regression     the group's committed offset of a partition going down, as the
                          observer's OffsetFetch saw it, or as ok commits ordered in real
                          time set it
    aborted-read          G1a: a value whose send definitely failed appears in a read
    unacknowledged-read   informational: values read whose send ended info (or never
                          ended): indeterminate sends that were in fact written

Offsets are contiguous in these logs (no transactions, no compaction), which is what lets
a gap count as a skip. Real-time order is the order of the history's lines: one clock and
one lock record them (history.py). Everything is a dict lookup in a single pass over the
ops or over the records read, so a history of a million operations checks in seconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .history import FAIL, INFO, INVOKE, OK

__all__ = ["FAILURES", "INFORMATIONAL", "Result", "check", "summary_rows"]

MAX_EXAMPLES = 10
FINAL = "final"  # the process of the reads after healing


@dataclass(slots=True)
class Result:
    """One property's verdict: how many violations (or, for an informational property,
    occurrences), up to MAX_EXAMPLES of them as JSON-able dicts, and what it checks."""

    name: str
    count: int
    examples: list[Any]
    description: str

    @property
    def failed(self) -> bool:
        return self.name in FAILURES and self.count > 0


class _Found:
    """Counts violations and keeps the first few as examples."""

    def __init__(self) -> None:
        self.count = 0
        self.examples: list[Any] = []

    def add(self, example: Any) -> None:
        self.count += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(example)

    def result(self, name: str, description: str) -> Result:
        return Result(name, self.count, self.examples, description)


def _int_keys(offsets: Any) -> dict[int, int]:
    """A commit's or OffsetFetch's {partition: offset}; JSON turned the keys into strings.
    Negative offsets (-1: nothing committed, -1001: librdkafka's invalid) say nothing about
    a position and are left out."""
    if not isinstance(offsets, dict):
        return {}
    out = {}
    for p, o in offsets.items():
        if o is not None and int(o) >= 0:
            out[int(p)] = int(o)
    return out


@dataclass(slots=True)
class _History:
    """The ops indexed once, for every check."""

    partitions: int
    # send outcome by value: ok, fail, info, or invoke (no completion recorded)
    outcome: dict[str, str] = field(default_factory=dict)
    sent_partition: dict[str, int] = field(default_factory=dict)
    # value -> (partition, offset or None) of every ok send; None: no offset in the answer
    acked: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    # (history position, process, [[partition, offset, value], ...]) of every ok poll
    polls: list[tuple[int, str, list]] = field(default_factory=list)
    # partition -> [(offset, value)] of the final reads (several reads of one partition
    # are concatenated; a disagreement between them shows as inconsistent-offsets)
    final: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    # assign ok, poll ok and commit invoke ops of the consumers, in history order
    consumer_ops: list[tuple[int, dict]] = field(default_factory=list)
    # every commit op (invoke and completions), in history order
    commits: list[tuple[int, dict]] = field(default_factory=list)
    # the observer's ok OffsetFetch answers, in history order
    observed: list[tuple[int, dict[int, int]]] = field(default_factory=list)
    # every value the final reads returned
    final_values: set[str] = field(default_factory=set)

    def observations(self) -> Iterator[tuple[str, int, int, str]]:
        """(who saw it, partition, offset, value) for every offset a value was seen at:
        the ack of its send, each poll returning it, the final read."""
        for v, (p, o) in self.acked.items():
            if o is not None and o >= 0:
                yield "ack", p, o, v
        for _, process, records in self.polls:
            for p, o, v in records:
                yield process, p, o, v
        for p, records in self.final.items():
            for o, v in records:
                yield FINAL, p, o, v


def _index(ops: list[dict[str, Any]], partitions: int) -> _History:
    h = _History(partitions)
    outcome = h.outcome
    for pos, op in enumerate(ops):
        f = op["f"]
        t = op["type"]
        value: dict[str, Any] = op.get("value") or {}
        if f == "send":
            v = value.get("value")
            if v is None:
                continue
            if t == INVOKE:
                outcome.setdefault(v, INVOKE)
                h.sent_partition.setdefault(v, value["partition"])
            elif t == OK:
                outcome[v] = OK
                off = value.get("offset")
                p = value["partition"] if "partition" in value else h.sent_partition[v]
                h.acked[v] = (p, None if off is None or off < 0 else off)
            elif outcome.get(v) != OK:  # an ok is never taken back by a later answer
                outcome[v] = t
        elif f == "poll":
            if t == OK:
                h.polls.append((pos, op.get("process", ""), value.get("records") or []))
                h.consumer_ops.append((pos, op))
        elif f == "assign":
            if t == OK:
                h.consumer_ops.append((pos, op))
        elif f == "commit":
            h.commits.append((pos, op))
            if t == INVOKE:
                h.consumer_ops.append((pos, op))
        elif f == "offsets":
            if t == OK:
                h.observed.append((pos, _int_keys(value.get("offsets"))))
        elif f == "read":
            if t == OK and op.get("process") == FINAL:
                records = [(o, v) for o, v in value.get("records") or []]
                h.final.setdefault(value["partition"], []).extend(records)
                h.final_values.update(v for _, v in records)
    return h


def _read_values(h: _History) -> Iterator[tuple[str, int, int, str]]:
    """(who, partition, offset, value) of every record a poll or a final read returned."""
    for _, process, records in h.polls:
        for p, o, v in records:
            yield process, p, o, v
    for p, records in h.final.items():
        for o, v in records:
            yield FINAL, p, o, v


def _seen_by(h: _History, wanted: set[str]) -> dict[str, dict[tuple[int, int], list[str]]]:
    """For a few values (the examples): where each was seen, by whom. A second pass, so
    the main passes need not remember who saw what."""
    out: dict[str, dict[tuple[int, int], list[str]]] = {v: {} for v in wanted}
    if not wanted:
        return out
    for who, p, o, v in h.observations():
        if v in wanted:
            seen = out[v].setdefault((p, o), [])
            if who not in seen:
                seen.append(who)
    return out


# --- lost writes ---------------------------------------------------------------------

def lost(h: _History) -> Result:
    final_values = h.final_values
    unread = [p for p in range(h.partitions) if p not in h.final]
    found = _Found()
    missing = [(v, p, o) for v, (p, o) in h.acked.items() if v not in final_values]
    # a partition with no final read cannot vouch for its acked sends: they count as lost,
    # so that a run whose drain failed cannot pass; the examples say why first
    missing_in = {p for _, p, _ in missing}
    found.examples = [{"partition": p, "problem": "no final read of this partition"}
                      for p in unread if p in missing_in][:MAX_EXAMPLES]
    for v, p, o in missing:
        found.add({"value": v, "partition": p, "offset": o})
    note = f" Partitions never read at the end: {unread}." if unread else ""
    return found.result("lost", "acknowledged sends missing from the final read of their "
                                "partition, the whole log read after healing." + note)


def lost_before_poll(h: _History) -> Result:
    # the highest offset any consumer polled per partition: up to there a consumer has
    # walked the log, so an acked value below it that no one ever read was dropped
    highest: dict[int, int] = {}
    polled: set[str] = set()
    for _, _, records in h.polls:
        for p, o, v in records:
            polled.add(v)
            if o > highest.get(p, -1):
                highest[p] = o
    final_values = h.final_values
    found = _Found()
    for v, (p, o) in h.acked.items():
        if o is not None and o <= highest.get(p, -1) and v not in polled \
                and v not in final_values:
            found.add({"value": v, "partition": p, "offset": o,
                       "highest_polled": highest[p]})
    return found.result("lost-before-poll",
                        "Jepsen's lost-write: acknowledged sends at an offset at or below "
                        "the highest offset consumers polled in their partition that no "
                        "poll nor the final read returned.")


# --- offsets and values ----------------------------------------------------------------

def duplicate(h: _History) -> Result:
    first: dict[str, tuple[int, int]] = {}
    dups: dict[str, set[tuple[int, int]]] = {}
    for _, p, o, v in h.observations():
        at = (p, o)
        prev = first.setdefault(v, at)
        if prev != at:
            dups.setdefault(v, {prev}).add(at)
    found = _Found()
    found.count = len(dups)
    seen = _seen_by(h, set(list(dups)[:MAX_EXAMPLES]))
    for v, where in seen.items():
        found.examples.append({"value": v, "at": [
            {"partition": p, "offset": o, "seen_by": by} for (p, o), by in sorted(where.items())]})
    return found.result("duplicate", "values seen at more than one offset, across send "
                                     "acks, polls and final reads.")


def inconsistent_offsets(h: _History) -> Result:
    holds: dict[tuple[int, int], str] = {}
    clashes: dict[tuple[int, int], set[str]] = {}
    for _, p, o, v in h.observations():
        at = (p, o)
        prev = holds.setdefault(at, v)
        if prev != v:
            clashes.setdefault(at, {prev}).add(v)
    found = _Found()
    found.count = len(clashes)
    shown = dict(list(clashes.items())[:MAX_EXAMPLES])
    seen = _seen_by(h, {v for values in shown.values() for v in values})
    for (p, o), values in shown.items():
        found.examples.append({"partition": p, "offset": o, "values": [
            {"value": v, "seen_by": seen[v].get((p, o), [])} for v in sorted(values)]})
    return found.result("inconsistent-offsets", "offsets holding more than one value, "
                                                "across send acks, polls and final reads.")


def _parse_value(v: str) -> tuple[str, int, int] | None:
    """(producer, partition, sequence) of "<producer>-<partition>-<sequence>"."""
    parts = v.rsplit("-", 2)
    if len(parts) != 3:
        return None
    try:
        return parts[0], int(parts[1]), int(parts[2])
    except ValueError:
        return None


def order(h: _History) -> Result:
    # Where each value sits: its offset in the final read (the lowest, if duplicated).
    # For a partition with no final read, the acks are all there is. A value acked but
    # missing from a partition that was read is lost, and left to `lost`: its stale ack
    # offset would be reused by later values and show as a false reordering here.
    where: dict[str, tuple[int, int]] = {}
    for p, records in h.final.items():
        for o, v in records:
            if v not in where or o < where[v][1]:
                where[v] = (p, o)
    for v, (p, acked_at) in h.acked.items():
        if p not in h.final and acked_at is not None:
            where[v] = (p, acked_at)
    streams: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
    for v, (p, o) in where.items():
        parsed = _parse_value(v)
        if parsed is not None:
            producer, _, seq = parsed
            streams.setdefault((producer, p), []).append((seq, o, v))
    found = _Found()
    for (producer, p), stream in streams.items():
        stream.sort()
        # every value must sit after every value its producer sent before it
        top_offset, top_value = -1, ""
        for _seq, o, v in stream:
            if o <= top_offset:
                found.add({"producer": producer, "partition": p, "value": v, "offset": o,
                           "after": {"value": top_value, "offset": top_offset}})
            else:
                top_offset, top_value = o, v
    return found.result("order", "values placed at or before a value their producer sent "
                                 "earlier to the same partition (final read; the acks for a "
                                 "partition that was not read).")


# --- consumers ---------------------------------------------------------------------------

def _walk_polls(h: _History, on_record: Callable[..., None]) -> None:
    """Each consumer's polls, partition by partition, between assigns: calls
    on_record(kind, op position, process, partition, offset, previous, committed) where
    kind is "in-poll" (previous: the record before it in this poll), "next-poll"
    (previous: the highest offset this consumer polled there since its last assign) or
    "first" (its first poll of the partition since the assign; previous: its own highest
    offset there from before the assign, or None); committed maps each partition to the
    largest offset any consumer's commit invoked so far."""
    last: dict[str, dict[int, int]] = {}     # process -> partition -> last polled offset
    before: dict[str, dict[int, int]] = {}   # the same, as it was at the last assign
    committed: dict[int, int] = {}           # the largest commit invoked so far
    for pos, op in h.consumer_ops:
        process = op.get("process", "")
        f = op.get("f")
        value = op.get("value") or {}
        if f == "assign":
            before[process] = last.pop(process, {})
        elif f == "commit":
            for p, o in _int_keys(value.get("offsets")).items():
                if o > committed.get(p, -1):
                    committed[p] = o
        else:
            state = last.setdefault(process, {})
            in_poll: dict[int, int] = {}   # partition -> the previous record's offset
            highest: dict[int, int] = {}   # partition -> the highest offset of this poll
            for p, o, _ in value.get("records") or []:
                if p in in_poll:
                    on_record("in-poll", pos, process, p, o, in_poll[p], committed)
                    if o > highest[p]:
                        highest[p] = o
                else:
                    if p in state:
                        on_record("next-poll", pos, process, p, o, state[p], committed)
                    else:
                        on_record("first", pos, process, p, o,
                                  before.get(process, {}).get(p), committed)
                    highest[p] = o
                in_poll[p] = o
            # the consumer's position is past the highest offset it was given, so one
            # backward step inside a poll is reported once, not again as a skip after it
            state.update(highest)


def nonmonotonic_poll(h: _History) -> Result:
    found = _Found()

    def on_record(kind: str, pos: int, process: str, p: int, o: int, previous: int | None,
                  committed: dict[int, int]) -> None:
        if kind != "first" and previous is not None and o <= previous:
            found.add({"process": process, "index": pos, "partition": p, "offset": o,
                       "previous": previous,
                       "kind": "int-nonmonotonic" if kind == "in-poll" else "nonmonotonic"})

    _walk_polls(h, on_record)
    return found.result("nonmonotonic-poll",
                        "a consumer polling a partition at or before the offset it last "
                        "polled there with no assign in between, or a backward step inside "
                        "one poll (int-nonmonotonic).")


def poll_skip(h: _History) -> Result:
    found = _Found()

    def on_record(kind: str, pos: int, process: str, p: int, o: int, previous: int | None,
                  committed: dict[int, int]) -> None:
        if kind != "first":
            if previous is not None and o > previous + 1:
                found.add({"process": process, "index": pos, "partition": p, "offset": o,
                           "previous": previous,
                           "kind": "int-poll-skip" if kind == "in-poll" else "poll-skip"})
            return
        # After an assign the consumer starts at the group's committed offset (the next
        # offset to read; 0, the log start, with none). Starting beyond every commit any
        # consumer invoked skips the records in between. A consumer that kept the
        # partition through the rebalance may instead go on from its own position.
        bound = committed.get(p, 0)
        if o > bound and not (previous is not None and o <= previous + 1):
            found.add({"process": process, "index": pos, "partition": p, "offset": o,
                       "committed": bound, "kind": "after-assign"})

    _walk_polls(h, on_record)
    return found.result("poll-skip",
                        "a consumer jumping over offsets of a partition between polls with "
                        "no assign in between, or inside one poll (int-poll-skip), or "
                        "starting after an assign beyond the largest commit invoked.")


# --- commits ----------------------------------------------------------------------------

def commit_regression(h: _History) -> Result:
    found = _Found()
    # the observer's OffsetFetch answers, in time order: a committed offset only grows
    last_seen: dict[int, tuple[int, int]] = {}
    for pos, offsets in h.observed:
        for p, o in offsets.items():
            prev = last_seen.get(p)
            if prev is not None and o < prev[0]:
                found.add({"kind": "observed", "partition": p, "offset": o, "index": pos,
                           "previous": prev[0], "previous_index": prev[1]})
            last_seen[p] = (o, pos)
    # ok commits in real-time order: a commit invoked after another completed ok must not
    # set a lower offset. Each process has one commit in flight at a time (Jepsen's
    # process model), so its completions answer its invokes first in, first out.
    done: dict[int, tuple[int, int]] = {}    # partition -> (highest ok commit, its index)
    pending: dict[str, deque[tuple[int, dict[int, int], dict[int, tuple[int, int]]]]] = {}
    for pos, op in h.commits:
        process = op.get("process", "")
        offsets = _int_keys((op.get("value") or {}).get("offsets"))
        if op.get("type") == INVOKE:
            # what had completed when this commit began is all it may be compared with
            snapshot = {p: done[p] for p in offsets if p in done}
            pending.setdefault(process, deque()).append((pos, offsets, snapshot))
            continue
        queue = pending.get(process)
        if not queue:
            continue
        invoked_at, invoked, snapshot = queue.popleft()
        if op.get("type") != OK:
            continue
        for p, o in (offsets or invoked).items():
            prev = snapshot.get(p)
            if prev is not None and o < prev[0]:
                found.add({"kind": "commit", "process": process, "partition": p,
                           "offset": o, "index": invoked_at, "earlier": prev[0],
                           "earlier_index": prev[1]})
            if p not in done or o > done[p][0]:
                done[p] = (o, pos)
    return found.result("commit-regression",
                        "the group's committed offset of a partition going down: between "
                        "the observer's OffsetFetch answers, or from an ok commit to an ok "
                        "commit invoked after it completed.")


# --- reads of sends that did not succeed -----------------------------------------------------

def _reads_of_sends_that(h: _History, outcomes: tuple[str, ...]) -> _Found:
    """Each value read (once) whose send ended with one of `outcomes`."""
    found = _Found()
    reported: set[str] = set()
    for who, p, o, v in _read_values(h):
        result = h.outcome.get(v)
        if v not in reported and result in outcomes:
            reported.add(v)
            found.add({"value": v, "partition": p, "offset": o, "read_by": who,
                       "send": result})
    return found


def aborted_read(h: _History) -> Result:
    return _reads_of_sends_that(h, (FAIL,)).result(
        "aborted-read", "G1a: values whose send definitely failed, returned by a poll or "
                        "the final read.")


def unacknowledged_read(h: _History) -> Result:
    return _reads_of_sends_that(h, (INFO, INVOKE)).result(
        "unacknowledged-read", "informational: values read whose send ended indeterminate "
                               "(info, or no answer recorded) -- they were in fact written.")


_CHECKS: dict[str, Callable[[_History], Result]] = {
    "lost": lost,
    "lost-before-poll": lost_before_poll,
    "duplicate": duplicate,
    "inconsistent-offsets": inconsistent_offsets,
    "order": order,
    "nonmonotonic-poll": nonmonotonic_poll,
    "poll-skip": poll_skip,
    "commit-regression": commit_regression,
    "aborted-read": aborted_read,
    "unacknowledged-read": unacknowledged_read,
}
INFORMATIONAL = ("unacknowledged-read",)
FAILURES = tuple(name for name in _CHECKS if name not in INFORMATIONAL)


def check(ops: list[dict[str, Any]], partitions: int) -> dict[str, Result]:
    """Every property over a history's ops (history.py's dicts, in recorded order) of a
    topic with `partitions` partitions, keyed by name in FAILURES order, then the
    informational ones."""
    h = _index(ops, partitions)
    return {name: fn(h) for name, fn in _CHECKS.items()}


def summary_rows(results: dict[str, Result]) -> list[tuple[str, int, str]]:
    """(name, count, verdict) per property for a printed table; verdict is "ok", "FAIL" or
    "info" (an informational count)."""
    rows = []
    for name, r in results.items():
        verdict = "info" if name not in FAILURES else ("FAIL" if r.count else "ok")
        rows.append((name, r.count, verdict))
    return rows
