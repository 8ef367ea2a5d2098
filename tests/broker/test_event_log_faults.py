"""The event log is best effort: refused writes drop and count events, never raise, and
leave a file whose every line still parses."""

from __future__ import annotations

import json
import logging
import os

from broker.events import EventLog, read_events

from .faults import FaultyDisk


def _log(tmp_path, **kw) -> EventLog:
    return EventLog(tmp_path, 0, clock=lambda: 1.0, **kw)


def test_a_full_disk_drops_and_counts_events_then_writing_resumes(tmp_path, monkeypatch, caplog):
    events = _log(tmp_path)
    events.emit("topic_delete", topic="before", topic_id="x")
    disk = FaultyDisk(monkeypatch, tmp_path / "events", "full")
    with caplog.at_level(logging.WARNING, logger="minibroker.events"):
        for i in range(5):
            events.emit("topic_delete", topic=f"lost{i}", topic_id="x")   # flushed at once
        for _ in range(3):
            events.emit("request", api="Fetch", api_key=1, api_version=12, client_id="c",
                        latency_ms=1.0, request_bytes=1, response_bytes=1, error="")
        events.flush()
        assert events.dropped == 8
        assert sum("dropping events" in r.getMessage() for r in caplog.records) == 1
        disk.heal()
        events.emit("topic_delete", topic="after", topic_id="x")
    assert events.dropped == 8
    assert any("8 events dropped" in r.getMessage() for r in caplog.records)
    assert [e["topic"] for e in read_events(tmp_path)] == ["before", "after"]


def test_a_line_cut_short_by_enospc_is_cut_off_the_file(tmp_path, monkeypatch):
    events = _log(tmp_path)
    events.emit("topic_delete", topic="first", topic_id="x")
    path = events._path_of(events._seq)
    size = os.path.getsize(path)
    disk = FaultyDisk(monkeypatch, tmp_path / "events", "full", budget=10)  # 10 bytes of a line
    events.emit("topic_delete", topic="torn", topic_id="x")
    assert events.dropped == 1 and os.path.getsize(path) == size
    disk.heal()
    events.emit("topic_delete", topic="next", topic_id="x")
    assert [json.loads(line)["topic"] for line in path.read_text().splitlines()] == [
        "first", "next"]  # every line parses: the fragment is gone


def test_a_fragment_that_cannot_be_cut_stays_one_bad_line(tmp_path, monkeypatch):
    events = _log(tmp_path)
    events.emit("topic_delete", topic="first", topic_id="x")
    # a short write, then the device fails outright: the fragment cannot be cut off
    disk = FaultyDisk(monkeypatch, tmp_path / "events", "full", budget=10, then="eio")
    events.emit("topic_delete", topic="torn", topic_id="x")
    events.emit("topic_delete", topic="lost", topic_id="x")
    assert events.dropped == 2
    disk.heal()
    events.emit("topic_delete", topic="next", topic_id="x")
    path = events._path_of(events._seq)
    assert len(path.read_text().splitlines()) == 3  # first, the fragment, next
    assert [e["topic"] for e in read_events(tmp_path)] == ["first", "next"]


def test_rotation_into_an_unwritable_directory_keeps_writing_the_current_file(
        tmp_path, monkeypatch):
    events = _log(tmp_path, segment_bytes=1024)
    disk = FaultyDisk(monkeypatch, tmp_path / "events", "readonly")
    for i in range(40):  # well past segment.bytes: every rotation is refused
        events.emit("topic_delete", topic=f"t{i}", topic_id="x")
    assert events.dropped == 0 and len(list((tmp_path / "events").iterdir())) == 1
    disk.heal()
    events.emit("topic_delete", topic="rotated", topic_id="x")
    assert len(list((tmp_path / "events").iterdir())) == 2
    assert [e["topic"] for e in read_events(tmp_path)] == [f"t{i}" for i in range(40)] + ["rotated"]


def test_close_on_a_failing_device_does_not_raise(tmp_path, monkeypatch):
    events = _log(tmp_path)
    events.emit("request", api="Fetch", api_key=1, api_version=12, client_id="c",
                latency_ms=1.0, request_bytes=1, response_bytes=1, error="")
    FaultyDisk(monkeypatch, tmp_path / "events", "eio")
    events.close()
    assert events.dropped == 1
