"""`minibroker bench rebalance` (bench/rebalance.py and its worker) on a small group:
3 instances of our client over 6 partitions, each bounced once, under eager and cooperative
rebalancing; what the instances' event files say must follow the declared schema and the
protocols' rules. And the plain-Python pause arithmetic on a crafted history, against
numbers computed by hand. No figure is asserted: benchmarks print them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import rebalance as bench
from spark_jobs.consumer_events import CONSUMER_EVENT_TYPES

INSTANCES, PARTITIONS = 3, 6
# a short heartbeat keeps each bounce under a second; the windows are the bench's own
SMALL = ["--instances", str(INSTANCES), "--partitions", str(PARTITIONS), "--rate", "300",
         "--work-ms-per-record", "0.5", "--warmup-s", "1", "--cooldown-s", "1",
         "--heartbeat-interval-ms", "300", "--session-timeout-ms", "6000",
         "--stable-timeout-s", "40", "--no-spark"]


def _run(out: Path, protocol: str, *extra: str) -> dict:
    assert bench.main(["--protocol", protocol, "--out", str(out), *SMALL, *extra]) == 0
    return json.loads((out / "bench.json").read_text())


def _check_schema(out: Path) -> list[dict]:
    files = sorted((out / "consumers").glob("*.jsonl"))
    assert [f.stem for f in files] == [f"c{i}" for i in range(INSTANCES)]
    for f in files:
        lines = [json.loads(line) for line in f.read_text().splitlines()]
        for e in lines:
            declared = CONSUMER_EVENT_TYPES[e["type"]]
            assert set(e) == {"ts", "type", *declared}, e
            assert e["instance"] == f.stem
            assert isinstance(e["ts"], int)
            if "partitions" in declared:
                assert all(isinstance(p, str) and p.rsplit("-", 1)[1].isdigit()
                           for p in e["partitions"])
        kinds = [e["type"] for e in lines]
        # bounced once: two lives, each started ... stopped, appended to the same file
        assert kinds.count("started") == kinds.count("stopped") == 2
        assert kinds[0] == "started" and kinds[-1] == "stopped"
        assert "consumed" in kinds
    return bench.load_consumer_events(out)


def _owned_at(events: list[dict], ts: int) -> dict[str, set[str]]:
    ownership = bench.Ownership()
    for e in events:
        if e["ts"] <= ts:
            ownership.apply(e)
    return {i: set(p) for i, p in ownership.owned.items() if i in ownership.running}


def _check_final_ownership(meta: dict, events: list[dict]) -> dict[str, set[str]]:
    owned = _owned_at(events, meta["window_end_ts"])
    everything = {f"{meta['topic']}-{p}" for p in range(PARTITIONS)}
    assert sorted(owned) == [f"c{i}" for i in range(INSTANCES)]
    flat = [p for parts in owned.values() for p in parts]
    assert sorted(flat) == sorted(everything)  # each partition owned by exactly one
    assert all(owned.values())
    return owned


def _revocations_during(events, bounce) -> list[dict]:
    """revoked / lost events of the instances that were not bounced, during the bounce."""
    return [e for e in events if e["type"] in ("revoked", "lost")
            and e["instance"] != bounce["instance"]
            and bounce["stop_ts"] <= e["ts"] <= bounce["stable_ts"]]


def test_eager_rolling_bounce_revokes_everything(tmp_path):
    out = tmp_path / "eager"
    meta = _run(out, "eager")
    events = _check_schema(out)
    _check_final_ownership(meta, events)
    assert len(meta["bounces"]) == INSTANCES
    assert (out / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any(f.name.startswith("events-") for f in (out / "events").iterdir())

    # every revocation by a running member gives up everything it owned at that moment
    ownership = bench.Ownership()
    revocations = 0
    for e in events:
        if e["type"] == "revoked" and e["partitions"]:
            assert set(e["partitions"]) == ownership.owned[e["instance"]], e
            revocations += 1
        ownership.apply(e)
    # and each bounce made the instances that stayed give up their partitions
    for bounce in meta["bounces"]:
        assert _revocations_during(events, bounce), bounce
    result = json.loads((out / "result.json").read_text())
    assert result["partition_pauses"] > 0 and result["member_pauses"] > 0
    assert revocations >= INSTANCES * 2


def test_cooperative_rolling_bounce_revokes_only_moved(tmp_path, make_broker):
    broker = make_broker(**{"group.initial.rebalance.delay.ms": "0"})
    out = tmp_path / "cooperative"
    meta = _run(out, "cooperative", "--bootstrap", broker.bootstrap,
                "--broker-data-dir", str(broker.data_dir))
    events = _check_schema(out)
    _check_final_ownership(meta, events)
    assert any(f.name.startswith("events-") for f in (out / "events").iterdir())
    for bounce in meta["bounces"]:
        after = _owned_at(events, bounce["stable_ts"])
        for e in _revocations_during(events, bounce):
            # a revoked partition moved to another instance: the revoker does not keep it
            assert not set(e["partitions"]) & after[e["instance"]], (e, after)
            assert all(any(p in parts for i, parts in after.items() if i != e["instance"])
                       for p in e["partitions"]), (e, after)
    # a member that stays keeps consuming: no instance is ever left with nothing mid-run
    assert bench.member_pauses(events) == []


@pytest.mark.parametrize("client", ["minibroker", "librdkafka"])
def test_consumer_protocol_rolling_bounce_never_stops_the_others(tmp_path, client):
    """KIP-848: the bench's broker gets its heartbeat interval; the instances that stay
    revoke only what moves, and are never left with nothing."""
    out = tmp_path / f"consumer-{client}"
    meta = _run(out, "consumer", "--client", client)
    events = _check_schema(out)
    _check_final_ownership(meta, events)
    assert {e["protocol"] for e in events if e["type"] == "started"} == {"consumer"}
    for bounce in meta["bounces"]:
        after = _owned_at(events, bounce["stable_ts"])
        for e in _revocations_during(events, bounce):
            assert not set(e["partitions"]) & after[e["instance"]], (e, after)
    assert bench.member_pauses(events) == []


def test_compare_takes_three_runs(tmp_path, capsys):
    runs = []
    for protocol in ("eager", "cooperative", "consumer"):
        out = tmp_path / protocol
        _write(out, [_e(0, "started", "c0", protocol=protocol),
                     _e(10, "assigned", "c0", [0, 1]),
                     _e(20, "stopped", "c0"),
                     _e(30, "started", "c0", protocol=protocol),
                     _e(30 + {"eager": 1000, "cooperative": 300, "consumer": 50}[protocol],
                        "assigned", "c0", [0, 1])])
        (out / "bench.json").write_text(json.dumps({
            "protocol": protocol, "client": "minibroker", "instances": 1, "partitions": 2,
            "rate": 1, "work_ms_per_record": 0, "topic": "t", "group": "g", "bounces": [
                {"instance": "c0", "stop_ts": 15, "stopped_ts": 20, "start_ts": 30,
                 "stable_ts": 2000}], "window_start_ts": 15, "window_end_ts": 2000,
            "producer_start_ts": 0, "run_end_ts": 2000, "formed_ts": 10}))
        runs.append(str(out))
    assert bench.main(["--compare", *runs, "--no-spark",
                       "--chart", str(tmp_path / "c.png")]) == 0
    printed = capsys.readouterr().out
    assert "goal (consumer partition pause <= cooperative / 3): met" in printed
    assert "goal (consumer partition pause <= eager / 10): met" in printed
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


# -- the arithmetic on a crafted history -------------------------------------------------------

def _write(dir: Path, events: list[dict]) -> None:
    (dir / "consumers").mkdir(parents=True)
    for e in events:
        with open(dir / "consumers" / f"{e['instance']}.jsonl", "a") as f:
            f.write(json.dumps(e) + "\n")


def _e(ts, type, inst, parts=None, gen=-1, **kw):
    e = {"ts": ts, "type": type, "instance": inst}
    if type in ("assigned", "revoked", "lost"):
        e.update(member=f"{inst}-m", generation=gen, partitions=[f"t-{p}" for p in parts])
    elif type == "started":
        e.update(client="minibroker", protocol=kw["protocol"])
    elif type == "stopped":
        e.update(reason="signal")
    return e


def test_pause_totals_on_a_crafted_eager_history(tmp_path):
    eager = dict(protocol="eager")
    _write(tmp_path, [
        _e(0, "started", "c0", **eager), _e(0, "started", "c1", **eager),
        _e(100, "assigned", "c0", [0, 1], 1), _e(100, "assigned", "c1", [2, 3], 1),
        # c1 is bounced: it revokes on close and leaves
        _e(1000, "revoked", "c1", [2, 3], 1), _e(1010, "stopped", "c1"),
        # c0 notices the rebalance, revokes everything, gets all four
        _e(2000, "revoked", "c0", [0, 1], 1), _e(2050, "assigned", "c0", [0, 1, 2, 3], 2),
        # c1 is back: c0 revokes everything again; each gets its half
        _e(2500, "started", "c1", **eager),
        _e(4000, "revoked", "c0", [0, 1, 2, 3], 2),
        _e(4030, "assigned", "c0", [0, 1], 3), _e(4040, "assigned", "c1", [2, 3], 3),
        _e(9000, "revoked", "c0", [0, 1], 3), _e(9001, "stopped", "c0"),
    ])
    events = bench.load_consumer_events(tmp_path)
    pauses = {(p.partition, p.released_ts): (p.old_instance, p.new_instance, p.pause_ms)
              for p in bench.partition_pauses(events)}
    assert pauses == {
        ("t-2", 1000): ("c1", "c0", 1050), ("t-3", 1000): ("c1", "c0", 1050),
        ("t-0", 2000): ("c0", "c0", 50), ("t-1", 2000): ("c0", "c0", 50),
        ("t-0", 4000): ("c0", "c0", 30), ("t-1", 4000): ("c0", "c0", 30),
        ("t-2", 4000): ("c0", "c1", 40), ("t-3", 4000): ("c0", "c1", 40),
    }
    # c1's close is no member pause (it left), nor is its wait after starting
    assert [(m.instance, m.start_ts, m.pause_ms) for m in bench.member_pauses(events)] == [
        ("c0", 2000, 50), ("c0", 4000, 30)]
    assert bench.pause_totals(events) == {
        "partition_pause_ms": 2 * 1050 + 2 * 50 + 2 * 30 + 2 * 40, "partition_pauses": 8,
        "member_pause_ms": 80, "member_pauses": 2, "rebalances": 3}
    # the window keeps only the pauses that began and ended inside it (the second rebalance)
    assert bench.pause_totals(events, 3000, 5000) == {
        "partition_pause_ms": 140, "partition_pauses": 4, "member_pause_ms": 30,
        "member_pauses": 1, "rebalances": 1}
    assert bench.consumer_throughput(
        [{"ts": 1500, "type": "consumed", "count": 5}, {"ts": 3999, "type": "consumed",
                                                         "count": 7}], 1000) == [
        (1000, 5), (2000, 0), (3000, 7)]


def test_pause_totals_on_a_crafted_cooperative_history(tmp_path):
    coop = dict(protocol="cooperative")
    _write(tmp_path, [
        _e(0, "started", "c0", **coop), _e(0, "started", "c1", **coop),
        _e(100, "assigned", "c0", [0, 1, 2], 1), _e(100, "assigned", "c1", [], 1),
        # c1 gets t-2 in the follow-up rebalance; c0 keeps t-0 and t-1 throughout
        _e(1000, "revoked", "c0", [2], 2), _e(1000, "assigned", "c0", [], 2),
        _e(1700, "assigned", "c1", [2], 3), _e(1700, "assigned", "c0", [], 3),
        # c1 hears it was fenced only after t-2 went back to c0: no pause, c0 had it all along
        _e(5000, "assigned", "c0", [2], 4), _e(5200, "lost", "c1", [2], 3),
        # a hand-over in one millisecond: released before acquired, a 0 ms pause
        _e(6000, "revoked", "c0", [1], 5), _e(6000, "assigned", "c1", [1], 5),
    ])
    events = bench.load_consumer_events(tmp_path)
    assert [(p.partition, p.old_instance, p.new_instance, p.pause_ms)
            for p in bench.partition_pauses(events)] == [
        ("t-2", "c0", "c1", 700), ("t-1", "c0", "c1", 0)]
    # c0 always kept something; c1 owned nothing from its loss until it was given t-1
    assert bench.member_pauses(events) == [bench.MemberPause("c1", 5200, 6000)]
    assert bench.pause_totals(events)["partition_pause_ms"] == 700


@pytest.mark.parametrize("value, expected", [(b"1795328093700:7", 1795328093700),
                                             (b"junk", -1), (None, -1)])
def test_produced_ts_from_the_record_value(value, expected):
    from bench.rebalance_worker import encode_value, produced_ts
    assert produced_ts(value) == expected
    assert produced_ts(encode_value(42, 3)) == 42
