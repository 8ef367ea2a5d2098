"""The share_groups job over a real broker's event log: an in-process broker (virtual time)
serves two share consumers' requests (tests/broker/share/test_share_state_events.py's
scenario: acceptances, a release, a rejection, locks that expire, redeliveries, a member
that leaves holding records at the delivery limit); `minibroker analyze --job share_groups`
must find the acquisitions and redeliveries, the archived records by reason, the lock
expiry, the members' joins and leaves, and chart the records in flight.

And the pure transforms on crafted events: totals that restart with a new load, a log that
begins after the load, archived records by reason, members that leave, are fenced or stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.jobs import frame
from spark_jobs.jobs.share_groups import (
    archived, share_group_summary, share_members, share_partition_summary,
    share_partition_timeline)
from spark_jobs.tables import EVENTS_SCHEMA
from tools.analyze import main


@pytest.fixture(scope="module")
def share_run(tmp_path_factory) -> Path:
    import trio
    import trio.testing

    from broker import blocking
    from tests.broker.share.test_share_state_events import share_scenario

    base = tmp_path_factory.mktemp("share-broker")

    async def inline(fn, *args):  # as tests/conftest.py's inline_disk_work, on virtual time
        return fn(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(blocking, "run_sync", inline)
        trio.run(share_scenario, base / "broker",
                 clock=trio.testing.MockClock(autojump_threshold=0))
    return base / "broker"


def test_analyze_finds_redeliveries_archived_records_expiries_and_members(
        spark, share_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--data-dir", str(share_run), "--out", str(out),
                 "--job", "share_groups"]) == 0, capsys.readouterr().err

    def table(name):
        assert list((out / "share_groups" / name / "csv").glob("part-*.csv")), name
        return [r.asDict() for r in
                spark.read.parquet(str(out / "share_groups" / name / "parquet")).collect()]

    [p] = table("share_partitions")
    assert (p["group"], p["topic"], p["partition"], p["loads"]) == ("workers", "jobs", 0, 1)
    # 10 first deliveries, then 4-5 and 7-9 again
    assert (p["acquisitions"], p["redeliveries"]) == (15, 5)
    assert p["redelivery_rate"] == pytest.approx(5 / 15)
    assert (p["lock_expiries"], p["expired_records"]) == (1, 3)
    assert (p["archived_rejected"], p["archived_delivery_limit"], p["archived_records"]) == (
        1, 2, 3)
    assert (p["start_offset"], p["end_offset"], p["in_flight"], p["acquired_records"]) == (
        10, 10, 0, 0)
    assert (p["max_in_flight"], p["max_acquired"]) == (10, 10)

    gone = sorted((r["member"], r["first_offset"], r["last_offset"], r["records"],
                   r["reason"]) for r in table("archived_records"))
    assert gone == [("m1", 6, 6, 1, "rejected"), ("m2", 4, 5, 2, "delivery count limit")]

    timeline = sorted(table("share_partition_timeline"), key=lambda r: r["ts"])
    assert sum(r["acquired_delta"] for r in timeline) == 15
    assert max(r["acquired_records"] for r in timeline) == 10

    members = {r["member"]: r for r in table("share_members")}
    assert set(members) == {"m1", "m2"}
    for r in members.values():
        assert (r["group"], r["joins"], r["end"]) == ("workers", 1, "left")
        assert r["assigned"] == ["jobs-0"] and r["member_ms"] > 0
    [g] = table("share_groups")
    assert (g["group"], g["partitions"], g["members"], g["joins"], g["left"], g["fenced"],
            g["acquisitions"], g["redeliveries"], g["lock_expiries"],
            g["archived_records"]) == ("workers", 1, 2, 2, 2, 0, 15, 5, 1, 3)

    html = (out / "report.html").read_text()
    assert "<h2 id='share_groups'>share_groups</h2>" in html
    assert ("share group workers: 2 member(s) (2 left, 0 fenced), 1 share partition(s); "
            "15 records acquired, 5 redelivered (33.3%), 1 lock expiries, 3 records "
            "archived") in html
    for name in ("share_groups", "share_partitions", "share_members", "archived_records"):
        assert f"<h3>{name}</h3>" in html
    for chart in ("in_flight.png", "members.png"):
        assert (out / "share_groups" / chart).read_bytes()[:4] == b"\x89PNG"
        assert f"src='share_groups/{chart}'" in html


def _state(ts, acquisitions, redeliveries, broker=0, in_flight=0, acquired=0):
    return {"ts": ts, "type": "share_partition_state", "broker": broker, "group_id": "g",
            "topic": "t", "partition": 0, "start_offset": 0, "end_offset": in_flight,
            "in_flight": in_flight, "acquired_records": acquired,
            "acquisitions": acquisitions, "redeliveries": redeliveries}


def _loaded(ts, broker=0):
    return {"ts": ts, "type": "share_partition_loaded", "broker": broker, "group_id": "g",
            "topic": "t", "partition": 0, "start_offset": 0, "in_flight": 0}


def test_the_totals_count_within_one_load_and_unknown_before_the_first(spark):
    rows = [
        _state(100, 40, 5),  # the log begins after the load: its base is unknown
        _state(200, 50, 6, in_flight=8, acquired=3),
        # a new leader loads it (another broker) and the old one's reload: totals from 0
        _loaded(300, broker=1), _state(300, 7, 0, broker=1),
        _loaded(400), _state(400, 20, 2),  # more than before, but counted from the load
        _state(500, 30, 2, broker=1),
    ]
    events = frame(spark, EVENTS_SCHEMA, rows)
    timeline = share_partition_timeline(events)
    got = [(r["ts"], r["broker"], r["from_ts"], r["acquired_delta"], r["redelivered_delta"])
           for r in timeline.collect()]
    assert got == [(100, 0, None, None, None), (200, 0, 100, 10, 1), (300, 1, None, 7, 0),
                   (400, 0, None, 20, 2), (500, 1, 300, 23, 2)]
    [s] = share_partition_summary(events, timeline).collect()
    assert (s["loads"], s["samples"], s["acquisitions"], s["redeliveries"],
            s["max_in_flight"], s["max_acquired"]) == (2, 5, 60, 5, 8, 3)
    assert (s["first_ts"], s["last_ts"], s["lock_expiries"], s["archived_records"]) == (
        100, 500, 0, 0)


def test_archived_records_by_reason_from_acknowledgements_and_expiries(spark):
    common = {"group_id": "g", "topic": "t", "partition": 0, "broker": 0}
    rows = [
        {"ts": 1, "type": "share_records_archived", "member_id": "a", "first_offset": 0,
         "last_offset": 4, "reason": "rejected", **common},
        {"ts": 2, "type": "share_lock_expired", "member_id": "a", "first_offset": 5,
         "last_offset": 6, "archived": True, **common},
        {"ts": 3, "type": "share_lock_expired", "member_id": "b", "first_offset": 7,
         "last_offset": 9, "archived": False, **common},
        {"ts": 4, "type": "share_records_archived", "member_id": "b", "first_offset": 7,
         "last_offset": 7, "reason": "delivery count limit", **common},
    ]
    events = frame(spark, EVENTS_SCHEMA, rows)
    got = [(r["ts"], r["member"], r["records"], r["reason"], r["event"])
           for r in archived(events).collect()]
    assert got == [(1, "a", 5, "rejected", "share_records_archived"),
                   (2, "a", 2, "delivery count limit", "share_lock_expired"),
                   (4, "b", 1, "delivery count limit", "share_records_archived")]
    [s] = share_partition_summary(events, share_partition_timeline(events)).collect()
    assert (s["lock_expiries"], s["expired_records"], s["archived_rejected"],
            s["archived_delivery_limit"], s["archived_records"], s["samples"],
            s["acquisitions"], s["redelivery_rate"]) == (2, 5, 5, 3, 8, 0, 0, None)


def test_members_leave_are_fenced_stay_or_go_with_their_group(spark):
    def e(ts, type_, member, group="g", **fields):
        return {"ts": ts, "type": type_, "broker": 0, "group": group, "member": member,
                **fields}
    rows = [
        e(10, "share_group_join", "a", group_epoch=1),
        e(10, "share_group_assignment", "a", member_epoch=1, assigned=["t-0", "t-1"]),
        e(20, "share_group_join", "b", group_epoch=2),
        e(20, "share_group_assignment", "b", member_epoch=2, assigned=["t-1"]),
        e(20, "share_group_assignment", "a", member_epoch=2, assigned=["t-0"]),
        e(30, "share_group_fenced", "b", reason="session timeout"),
        e(40, "share_group_leave", "a"),
        e(50, "share_group_join", "a", group_epoch=4),  # back, and still there at the end
        e(15, "share_group_assignment", "c", group="h", member_epoch=3, assigned=[]),
        {"ts": 60, "type": "share_group_deleted", "broker": 0, "group": "h"},
    ]
    members = share_members(frame(spark, EVENTS_SCHEMA, rows), 100)
    got = [(r["group"], r["member"], r["joined_ts"], r["joins"], r["assignments"],
            r["assigned"], r["end_ts"], r["end"], r["fenced_reason"], r["member_ms"])
           for r in members.collect()]
    assert got == [
        ("g", "a", 10, 2, 2, ["t-0"], 100, "member", None, 90),
        ("g", "b", 20, 1, 1, ["t-1"], 30, "fenced", "session timeout", 10),
        # the log began after c joined: from its first event, to its group's deletion
        ("h", "c", 15, 0, 1, [], 60, "deleted", None, 45)]
    partitions = share_partition_summary(frame(spark, EVENTS_SCHEMA, []),
                                         frame(spark, share_partition_timeline(
                                             frame(spark, EVENTS_SCHEMA, [])).schema, []))
    groups = [(r["group"], r["partitions"], r["members"], r["joins"], r["left"], r["fenced"],
               r["redelivery_rate"]) for r in share_group_summary(partitions, members).collect()]
    assert groups == [("g", 0, 2, 3, 0, 1, None), ("h", 0, 1, 0, 0, 0, None)]
