"""The chaos job over a small history written by harness.chaos.history.History: faults
paired start to end, acknowledgements a second, ISR sizes and each client's outcomes, and
`minibroker analyze --chaos` drawing the chart from nothing but the history."""

from __future__ import annotations

from pathlib import Path

from harness.chaos.history import INFO, INVOKE, OK, History
from spark_jobs.jobs import chaos
from tools.analyze import main as analyze


def _history(path: Path) -> Path:
    h = History(path)
    h.record("p0", INVOKE, "send", {"partition": 0, "value": "p0-0-0"})
    h.record("p0", OK, "send", {"partition": 0, "value": "p0-0-0", "offset": 0})
    h.record("p0", INVOKE, "send", {"partition": 0, "value": "p0-0-1"})
    h.record("p0", INFO, "send", {"partition": 0, "value": "p0-0-1", "error": "timeout"})
    h.record("nemesis", INFO, "fault", {"fault": "kill", "aim": "leader", "target": 2,
                                        "hold_s": 3, "phase": "start"})
    h.record("observer", OK, "isr", {"partitions": {"0": {"leader": 1, "isr": [1, 0]},
                                                    "1": {"leader": -1, "isr": [0]}}})
    h.record("nemesis", INFO, "fault", {"fault": "kill", "aim": "leader", "target": 2,
                                        "hold_s": 3, "phase": "end"})
    h.record("nemesis", INFO, "fault", {"fault": "pause", "aim": "random", "target": 0,
                                        "hold_s": 6, "phase": "start"})  # never ended
    h.record("c-ours", OK, "poll", {"records": [[0, 0, "p0-0-0"]]})
    h.close()
    return path


def test_chaos_tables(spark, tmp_path):
    ops = chaos.operations(spark.read.text(str(_history(tmp_path / "history.jsonl"))))
    faults = [r.asDict() for r in chaos.faults(ops).collect()]
    assert [(f["fault"], f["target"], f["end_s"] is not None) for f in faults] == [
        ("kill", 2, True), ("pause", 0, False)]
    [second] = chaos.throughput(ops).collect()
    assert (second.acked, second.sent, second.uncertain) == (1, 2, 1)
    [isr] = chaos.isr_sizes(ops).collect()
    assert (isr.min_isr, isr.max_isr, isr.leaderless) == (1, 2, 1)
    outcomes = {(r.process, r.f, r.type): r["count"] for r in chaos.outcomes(ops).collect()}
    assert outcomes == {("p0", "send", "invoke"): 2, ("p0", "send", "ok"): 1,
                        ("p0", "send", "info"): 1, ("c-ours", "poll", "ok"): 1}


def test_analyze_charts_a_history_alone(spark, tmp_path):
    run = tmp_path / "seed-9"
    _history(run / "history.jsonl")
    out = tmp_path / "report"
    assert analyze(["--chaos", str(run), "--out", str(out), "--master", "local[2]"]) == 0
    assert (out / "chaos" / "chaos.png").stat().st_size > 1000
    assert "chaos" in (out / "report.html").read_text()


def test_analyze_refuses_a_missing_history(tmp_path, capsys):
    assert analyze(["--chaos", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
