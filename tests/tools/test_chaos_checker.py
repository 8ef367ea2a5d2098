"""harness/chaos/checker.py: each property passes on a good history and fails on a minimal
bad one (and only that property fails, unless another one is implied by it)."""

from __future__ import annotations

import json

from harness.chaos.checker import FAILURES, INFORMATIONAL, MAX_EXAMPLES, check, summary_rows


class H:
    """Builds a history in history.py's format."""

    def __init__(self) -> None:
        self.ops: list[dict] = []

    def op(self, process: str, type_: str, f: str, value) -> None:
        self.ops.append({"index": len(self.ops), "time": len(self.ops) / 100,
                         "process": process, "type": type_, "f": f, "value": value})

    def send(self, value: str, offset: int | None, outcome: str = "ok") -> None:
        producer, partition, _ = value.rsplit("-", 2)
        p = int(partition)
        self.op(f"producer-{producer}", "invoke", "send", {"partition": p, "value": value})
        done = {"partition": p, "value": value}
        if outcome == "ok":
            done["offset"] = offset
        else:
            done["error"] = "timed out"
        self.op(f"producer-{producer}", outcome, "send", done)

    def assign(self, consumer: str, partitions: list[int]) -> None:
        self.op(consumer, "ok", "assign", {"partitions": partitions})

    def poll(self, consumer: str, records: list[tuple[int, int, str]]) -> None:
        self.op(consumer, "ok", "poll", {"records": [list(r) for r in records]})

    def commit(self, consumer: str, offsets: dict[int, int], outcome: str = "ok") -> None:
        self.op(consumer, "invoke", "commit", {"offsets": offsets})
        self.op(consumer, outcome, "commit", {"offsets": offsets})

    def observe(self, offsets: dict[int, int]) -> None:
        self.op("observer", "ok", "offsets", {"offsets": offsets})

    def final(self, partition: int, records: list[tuple[int, str]]) -> None:
        self.op("final", "ok", "read", {"partition": partition,
                                        "records": [list(r) for r in records]})


def good(layout: dict[int, list[str]] | None = None) -> H:
    """Two partitions written by producer 0 (log order as `layout` says, sends in sequence
    order), consumed whole by consumer-a in two polls each, committed, observed, read."""
    layout = layout or {0: [f"0-0-{i}" for i in range(5)], 1: [f"0-1-{i}" for i in range(3)]}
    h = H()
    for values in layout.values():
        for v in sorted(values, key=lambda v: int(v.rsplit("-", 1)[1])):
            h.send(v, values.index(v))
    h.assign("consumer-a", sorted(layout))
    for p, values in layout.items():
        records = [(p, o, v) for o, v in enumerate(values)]
        h.poll("consumer-a", records[:2])
        h.poll("consumer-a", records[2:])
    h.commit("consumer-a", {p: len(values) for p, values in layout.items()})
    h.observe({p: len(values) for p, values in layout.items()})
    for p, values in layout.items():
        h.final(p, list(enumerate(values)))
    return h


def failing(ops: list[dict], partitions: int = 2) -> set[str]:
    return {name for name, r in check(ops, partitions).items() if r.failed}


def test_good_history_passes_every_check():
    results = check(good().ops, 2)
    assert list(results) == [*FAILURES, *INFORMATIONAL]
    assert {name: r.count for name, r in results.items()} == dict.fromkeys(results, 0)
    assert all(r.description for r in results.values())
    assert summary_rows(results) == [(name, 0, "info" if name in INFORMATIONAL else "ok")
                                     for name in results]


def test_history_read_back_from_json_passes():
    # commits and OffsetFetch answers come back from the file with string keys
    ops = [json.loads(json.dumps(op)) for op in good().ops]
    assert failing(ops) == set()


def test_failures_are_every_check_but_the_informational_one():
    assert "unacknowledged-read" not in FAILURES and INFORMATIONAL == ("unacknowledged-read",)
    assert set(FAILURES) == {"lost", "lost-before-poll", "duplicate", "inconsistent-offsets",
                             "order", "nonmonotonic-poll", "poll-skip", "commit-regression",
                             "aborted-read"}


# --- lost -------------------------------------------------------------------------------

def test_lost_acked_send_missing_from_the_final_read():
    h = good()
    h.send("0-0-5", 5)  # acked, never polled, and not in the final read
    results = check(h.ops, 2)
    assert failing(h.ops) == {"lost"}
    assert results["lost"].examples == [{"value": "0-0-5", "partition": 0, "offset": 5}]
    assert summary_rows(results)[0] == ("lost", 1, "FAIL")


def test_lost_when_a_partition_was_never_read_at_the_end():
    h = good()
    h.ops = [op for op in h.ops if not (op["f"] == "read" and op["value"]["partition"] == 1)]
    r = check(h.ops, 2)["lost"]
    assert r.count == 3 and r.examples[0] == {"partition": 1,
                                              "problem": "no final read of this partition"}
    assert "[1]" in r.description


def test_lost_before_poll():
    h = good()
    h.send("0-0-5", 5)
    h.send("0-0-6", 6)
    # offset 6 was polled (by a consumer that started from a commit of 6), so the log was
    # walked past 5: its acked value, never read anywhere, was dropped. A lost write is
    # always also missing from the final read.
    h.commit("consumer-a", {0: 6}, outcome="info")
    h.assign("consumer-b", [0])
    h.poll("consumer-b", [(0, 6, "0-0-6")])
    h.final(0, [(6, "0-0-6")])
    results = check(h.ops, 2)
    assert failing(h.ops) == {"lost", "lost-before-poll"}
    assert results["lost-before-poll"].examples == [
        {"value": "0-0-5", "partition": 0, "offset": 5, "highest_polled": 6}]


# --- duplicate / inconsistent-offsets --------------------------------------------------------

def test_duplicate_value_at_two_offsets():
    h = good()
    h.final(0, [(5, "0-0-4")])  # a retried send written twice
    results = check(h.ops, 2)
    assert failing(h.ops) == {"duplicate"}
    assert results["duplicate"].examples == [{"value": "0-0-4", "at": [
        {"partition": 0, "offset": 4, "seen_by": ["ack", "consumer-a", "final"]},
        {"partition": 0, "offset": 5, "seen_by": ["final"]}]}]


def test_inconsistent_offsets_two_values_at_one_offset():
    h = good()
    h.send("1-0-0", None, outcome="info")
    # consumer-a's second poll of partition 0 saw another value at offset 4 than the log
    poll = [op for op in h.ops if op["f"] == "poll"][1]
    assert poll["value"]["records"][-1] == [0, 4, "0-0-4"]
    poll["value"]["records"][-1] = [0, 4, "1-0-0"]
    results = check(h.ops, 2)
    assert failing(h.ops) == {"inconsistent-offsets"}
    assert results["inconsistent-offsets"].examples == [{"partition": 0, "offset": 4, "values": [
        {"value": "0-0-4", "seen_by": ["ack", "final"]},
        {"value": "1-0-0", "seen_by": ["consumer-a"]}]}]


# --- order -------------------------------------------------------------------------------

def test_order_producer_values_out_of_sequence():
    # 0-1-0 was sent first yet sits after 0-1-1: consistent everywhere, just reordered
    h = good({0: [f"0-0-{i}" for i in range(5)], 1: ["0-1-1", "0-1-0", "0-1-2"]})
    results = check(h.ops, 2)
    assert failing(h.ops) == {"order"}
    assert results["order"].examples == [{"producer": "0", "partition": 1, "value": "0-1-1",
                                          "offset": 0, "after": {"value": "0-1-0", "offset": 1}}]


def test_order_falls_back_to_ack_offsets_without_a_final_read():
    h = good({0: [f"0-0-{i}" for i in range(5)], 1: ["0-1-1", "0-1-0", "0-1-2"]})
    h.ops = [op for op in h.ops if not (op["f"] == "read" and op["value"]["partition"] == 1)]
    assert check(h.ops, 2)["order"].count == 1


def test_order_interleaved_producers_pass():
    h = good({0: ["0-0-0", "1-0-0", "0-0-1", "1-0-1"], 1: ["1-1-0", "0-1-0", "1-1-1"]})
    assert failing(h.ops) == set()


# --- nonmonotonic-poll / poll-skip -----------------------------------------------------------

def test_nonmonotonic_poll_between_polls():
    h = good()
    h.poll("consumer-a", [(0, 4, "0-0-4")])  # offset 4 again, with no assign in between
    results = check(h.ops, 2)
    assert failing(h.ops) == {"nonmonotonic-poll"}
    assert results["nonmonotonic-poll"].examples[0]["kind"] == "nonmonotonic"


def test_nonmonotonic_poll_inside_one_poll():
    h = good()
    h.assign("consumer-b", [1])
    h.poll("consumer-b", [(1, 1, "0-1-1"), (1, 0, "0-1-0")])
    h.poll("consumer-b", [(1, 2, "0-1-2")])  # after the backward step, no skip either
    results = check(h.ops, 2)
    assert failing(h.ops) == {"nonmonotonic-poll"}
    assert [e["kind"] for e in results["nonmonotonic-poll"].examples] == ["int-nonmonotonic"]


def test_repolling_after_an_assign_is_fine():
    h = good()
    h.assign("consumer-a", [0, 1])
    h.poll("consumer-a", [(0, 4, "0-0-4")])  # from the committed offset (5) or before
    assert failing(h.ops) == set()


def test_poll_skip_between_polls():
    h = good()
    h.assign("consumer-b", [0])
    h.poll("consumer-b", [(0, 0, "0-0-0"), (0, 1, "0-0-1")])
    h.poll("consumer-b", [(0, 3, "0-0-3")])  # 2 skipped
    results = check(h.ops, 2)
    assert failing(h.ops) == {"poll-skip"}
    assert results["poll-skip"].examples == [{"process": "consumer-b", "index": len(h.ops) - 1,
                                              "partition": 0, "offset": 3, "previous": 1,
                                              "kind": "poll-skip"}]


def test_poll_skip_inside_one_poll():
    h = good()
    h.assign("consumer-b", [0])
    h.poll("consumer-b", [(0, 0, "0-0-0"), (0, 2, "0-0-2")])
    results = check(h.ops, 2)
    assert failing(h.ops) == {"poll-skip"}
    assert results["poll-skip"].examples[0]["kind"] == "int-poll-skip"


def test_poll_skip_after_assign_beyond_the_committed_offset():
    h = good({0: [f"0-0-{i}" for i in range(8)], 1: [f"0-1-{i}" for i in range(3)]})
    h.assign("consumer-b", [0])
    h.poll("consumer-b", [(0, 9, "0-0-9")])  # committed 8: offset 8 would be skipped
    h.send("0-0-8", 8)
    h.send("0-0-9", 9)
    h.final(0, [(8, "0-0-8"), (9, "0-0-9")])
    results = check(h.ops, 2)
    assert failing(h.ops) == {"poll-skip"}
    assert results["poll-skip"].examples[0] == {
        "process": "consumer-b", "index": results["poll-skip"].examples[0]["index"],
        "partition": 0, "offset": 9, "committed": 8, "kind": "after-assign"}


def test_first_poll_after_assign_within_commits_or_own_position_passes():
    h = good()
    # consumer-b starts exactly at the committed offset; with none committed, at 0
    h.send("0-0-5", 5)
    h.final(0, [(5, "0-0-5")])
    h.assign("consumer-b", [0])
    h.poll("consumer-b", [(0, 5, "0-0-5")])
    # consumer-a keeps partition 1 through a rebalance and goes on from its own position
    # (4), past the group's committed offset (3)
    h.send("0-1-3", 3)
    h.send("0-1-4", 4)
    h.final(1, [(3, "0-1-3"), (4, "0-1-4")])
    h.poll("consumer-a", [(1, 3, "0-1-3")])
    h.assign("consumer-a", [1])
    h.poll("consumer-a", [(1, 4, "0-1-4")])
    assert failing(h.ops) == set()


# --- commit-regression -----------------------------------------------------------------------

def test_commit_regression_observed():
    h = good()
    h.observe({0: 3})  # the group's committed offset of partition 0 went from 5 to 3
    results = check(h.ops, 2)
    assert failing(h.ops) == {"commit-regression"}
    assert results["commit-regression"].examples[0]["kind"] == "observed"


def test_commit_regression_between_ok_commits():
    h = good()
    h.commit("consumer-b", {0: 2})  # invoked after consumer-a's commit of 5 completed ok
    results = check(h.ops, 2)
    assert failing(h.ops) == {"commit-regression"}
    assert results["commit-regression"].examples[0] == {
        "kind": "commit", "process": "consumer-b", "partition": 0, "offset": 2,
        "index": len(h.ops) - 2, "earlier": 5,
        "earlier_index": results["commit-regression"].examples[0]["earlier_index"]}


def test_concurrent_or_failed_commits_are_not_a_regression():
    h = H()
    h.op("consumer-b", "invoke", "commit", {"offsets": {0: 1}})  # before a's completes
    h.op("consumer-a", "invoke", "commit", {"offsets": {0: 5}})
    h.op("consumer-a", "ok", "commit", {"offsets": {0: 5}})
    h.op("consumer-b", "ok", "commit", {"offsets": {0: 1}})
    h.commit("consumer-c", {0: 0}, outcome="fail")
    h.commit("consumer-c", {0: 3}, outcome="info")
    for p in range(2):
        h.final(p, [])
    assert failing(h.ops) == set()
    h.commit("consumer-c", {0: 4})  # after a's commit of 5 completed: a regression
    assert failing(h.ops) == {"commit-regression"}


# --- aborted-read / unacknowledged-read --------------------------------------------------------

def test_aborted_read():
    h = good()
    h.send("0-0-5", None, outcome="fail")  # definitely failed, yet in the log
    h.final(0, [(5, "0-0-5")])
    results = check(h.ops, 2)
    assert failing(h.ops) == {"aborted-read"}
    assert results["aborted-read"].examples == [
        {"value": "0-0-5", "partition": 0, "offset": 5, "read_by": "final",
         "send": "fail"}]


def test_unacknowledged_read_is_informational():
    h = good()
    h.send("0-0-5", None, outcome="info")  # indeterminate and written
    h.op("producer-0", "invoke", "send", {"partition": 0, "value": "0-0-6"})  # no answer
    h.final(0, [(5, "0-0-5"), (6, "0-0-6")])
    results = check(h.ops, 2)
    assert failing(h.ops) == set()
    assert results["unacknowledged-read"].count == 2
    assert [e["send"] for e in results["unacknowledged-read"].examples] == ["info", "invoke"]
    assert ("unacknowledged-read", 2, "info") in summary_rows(results)


def test_examples_are_capped_and_json_able():
    h = good()
    for i in range(5, 30):
        h.send(f"0-0-{i}", i)
    r = check(h.ops, 2)["lost"]
    assert r.count == 25 and len(r.examples) == MAX_EXAMPLES
    json.dumps([r.examples for r in check(h.ops, 2).values()])
