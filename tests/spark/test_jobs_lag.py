"""The lag job on crafted histories: lag in records and seconds, Burrow's status for each
rule (OK, WARN, STALL, REWIND, STOP, and ERR as the capped group status)."""

from __future__ import annotations

import pytest

from spark_jobs.jobs import frame
from spark_jobs.jobs.lag import (group_status, lag_history, last_state, latest_status,
                                 partition_status)
from spark_jobs.tables import BATCHES_SCHEMA, OFFSET_COMMITS_SCHEMA

T0 = 1_700_000_000_000
STEP = 10_000


def batches(spark, partitions=range(6), count=10):
    """One 100-record batch per partition every 10 s: the LEO is 100 (k + 1) from T0 + k*STEP."""
    return frame(spark, BATCHES_SCHEMA, [
        {"topic": "t", "partition": p, "base_offset": 100 * k, "last_offset": 100 * k + 99,
         "record_count": 100, "first_timestamp": T0 + k * STEP, "max_timestamp": T0 + k * STEP,
         "batch_position": 0, "crc_valid": True, "segment": "x", "is_control": False}
        for p in partitions for k in range(count)])


def commits(spark, spec):
    """spec: {(group, partition): [offset at commit k, ...]}; commit k is 1 ms after batch k."""
    rows, log_offset = [], 0
    for (group, partition), offsets in spec.items():
        for k, offset in enumerate(offsets):
            if offset is None:
                continue
            log_offset += 1
            rows.append({"group": group, "topic": "t", "partition": partition,
                         "committed_offset": offset, "commit_timestamp": T0 + k * STEP + 1,
                         "is_tombstone": False, "record_timestamp": T0 + k * STEP + 1,
                         "log_offset": log_offset, "offsets_partition": 0})
    return frame(spark, OFFSET_COMMITS_SCHEMA, rows)


SPEC = {
    ("g-ok", 0): [100 * (k + 1) for k in range(10)],                 # always caught up
    ("g-warn", 1): [50 * (k + 1) for k in range(10)],                # advancing, lag growing
    ("g-stall", 2): [10] * 10,                                       # same offset, lag growing
    ("g-rewind", 3): [90 * (k + 1) for k in range(5)] + [100 + k for k in range(5)],
    ("g-stop", 4): [10, 20, 30, 40] + [None] * 6,                    # stops after 30 s
    ("g-mixed", 0): [100 * (k + 1) for k in range(10)],
    ("g-mixed", 5): [10, 20, 30, 40] + [None] * 6,
    ("g-once-zero", 1): [100, 150, 200] + [200 + 10 * k for k in range(7)],  # lag 0 at first
    ("g-recovered", 2): [50, 150, 60, 150, 200, 250, 300, 350, 400, 450],  # back to 150
}
END = T0 + 9 * STEP + 1


@pytest.fixture(scope="module")
def evaluated(spark):
    b = batches(spark)
    history = lag_history(commits(spark, SPEC), b).cache()
    statuses = partition_status(history, b, END).cache()
    return history, statuses


def test_lag_history_records_and_seconds(evaluated):
    history, _ = evaluated
    rows = {(r["group"], r["ts"]): r for r in history.where("group = 'g-warn'").collect()}
    # commit 3 at T0+30001: LEO 400, committed 200 -> 200 behind; the oldest unconsumed
    # record (offset 200) is in the batch written at T0+20000
    r = rows[("g-warn", T0 + 3 * STEP + 1)]
    assert (r["committed_offset"], r["log_end_offset"], r["lag_records"]) == (200, 400, 200)
    assert r["lag_seconds"] == pytest.approx(10.001)
    caught_up = history.where("group = 'g-ok'").collect()
    assert {(r["lag_records"], r["lag_seconds"]) for r in caught_up} == {(0, 0.0)}


def _final(statuses):
    return {(r["group"], r["partition"]): (r["status"], r["status_code"])
            for r in latest_status(statuses, ["group", "topic", "partition"]).collect()}


def test_burrow_partition_status_at_the_end(evaluated):
    _, statuses = evaluated
    assert _final(statuses) == {
        ("g-ok", 0): ("OK", 1),
        ("g-warn", 1): ("WARN", 2),
        ("g-stall", 2): ("STALL", 5),
        ("g-rewind", 3): ("REWIND", 6),
        ("g-stop", 4): ("STOP", 4),
        ("g-mixed", 0): ("OK", 1),
        ("g-mixed", 5): ("STOP", 4),
        ("g-once-zero", 1): ("OK", 1),
        ("g-recovered", 2): ("WARN", 2),
    }


def test_burrow_status_history_of_a_stopping_partition(evaluated):
    _, statuses = evaluated
    rows = statuses.where("group = 'g-stop'").orderBy("ts").collect()
    # one commit: Burrow's rules find every offset equal (STALL); then the lag only grows
    # (WARN); at the end of the data, 60 s after a window spanning 30 s: STOP
    assert [(r["ts"] - T0, r["status"], r["window_commits"]) for r in rows] == [
        (1, "STALL", 1), (STEP + 1, "WARN", 2), (2 * STEP + 1, "WARN", 3),
        (3 * STEP + 1, "WARN", 4), (9 * STEP + 1, "STOP", 4)]
    assert rows[-1]["current_lag"] == 1000 - 40


def test_group_status_is_the_worst_partition_capped_at_err(evaluated):
    _, statuses = evaluated
    groups = {r["group"]: r for r in latest_status(group_status(statuses), ["group"]).collect()}
    assert {g: (r["status"], r["status_code"]) for g, r in groups.items()} == {
        "g-ok": ("OK", 1), "g-warn": ("WARN", 2), "g-stall": ("ERR", 3),
        "g-rewind": ("ERR", 3), "g-stop": ("ERR", 3), "g-mixed": ("ERR", 3),
        "g-once-zero": ("OK", 1), "g-recovered": ("WARN", 2)}
    mixed = groups["g-mixed"]
    assert (mixed["partition_count"], mixed["total_lag"], mixed["max_lag"],
            mixed["max_lag_partition"]) == (2, 960, 960, "t-5")
    # the group's evaluation instants include the other partition's commits. At T0+70001
    # the window (1..30001) is 40 s old, but Burrow's ring of broker offsets (polled over
    # the last 90 s) reaches back before T0, when the LEO was 0 <= 40: not stopped yet.
    # At T0+90001 the ring starts at LEO 100: STOP.
    history = {r["ts"] - T0: r["status"] for r in
               statuses.where("group = 'g-mixed' and partition = 5").collect()}
    assert [history[k * STEP + 1] for k in (3, 7, 8, 9)] == ["WARN", "WARN", "WARN", "STOP"]


def _state(ts, generation, old, new):
    return {"ts": ts, "generation": generation, "old_state": old, "new_state": new}


@pytest.mark.parametrize("order", [0, 1])
def test_last_state_follows_the_chain_of_transitions_in_one_millisecond(order):
    # a lone member's SyncGroup: CompletingRebalance and Stable in the same ms and generation,
    # in whatever order the sort gives them
    tied = [_state(100, 1, "PreparingRebalance", "CompletingRebalance"),
            _state(100, 1, "CompletingRebalance", "Stable")]
    latest = (tied if order == 0 else tied[::-1]) + [_state(90, 0, "Empty", "PreparingRebalance")]
    assert last_state(latest) == "Stable"


def test_last_state_takes_the_newest_event_when_nothing_ties():
    latest = [_state(120, 2, "Stable", "PreparingRebalance"),
              _state(100, 2, "CompletingRebalance", "Stable")]
    assert last_state(latest) == "PreparingRebalance"
