"""Fetch semantics over the wire: long polling woken by appends, KIP-74 size limits."""

from __future__ import annotations

import threading

import pytest

from protocol.messages import FETCH
from protocol.records import Record, decode_batches, encode_batch
from tests.interop.raw import create_topic, produce

pytestmark = pytest.mark.interop


def _fetch(raw, topic, partitions, *, max_wait_ms=0, min_bytes=0, max_bytes=1 << 30,
           partition_max_bytes=1 << 20):
    body = raw.call(FETCH, 12, {"max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
                                "max_bytes": max_bytes, "topics": [{"topic": topic, "partitions": [
                                    {"partition": p, "fetch_offset": o,
                                     "partition_max_bytes": partition_max_bytes}
                                    for p, o in partitions]}]})
    return body.responses[0].partitions


def test_a_long_poll_returns_when_data_arrives(raw):
    r = raw()
    assert create_topic(r, "longpoll").error_code == 0
    result = {}
    poller = raw()

    def poll():
        result["partitions"] = _fetch(poller, "longpoll", [(0, 0)],
                                      max_wait_ms=30_000, min_bytes=1)
    waiter = threading.Thread(target=poll)
    waiter.start()
    produce(r, "longpoll", encode_batch([Record(0, 5, None, b"wake", [])]))
    waiter.join(timeout=20)  # the poll's own max_wait is 30 s: only an append ends it sooner
    assert not waiter.is_alive(), "the fetch was not woken by the append"
    (p,) = result["partitions"]
    assert [r.value for _, rs in decode_batches(p.records) for r in rs] == [b"wake"]
    assert p.high_watermark == 1


def test_an_empty_long_poll_waits_then_answers_empty(raw):
    r = raw()
    assert create_topic(r, "quiet").error_code == 0
    (p,) = _fetch(r, "quiet", [(0, 0)], max_wait_ms=200, min_bytes=1)
    assert (p.error_code, p.records, p.high_watermark) == (0, b"", 0)


def test_the_first_batch_is_sent_whole_even_above_the_limits(raw):
    r = raw()
    assert create_topic(r, "kip74").error_code == 0
    r2 = raw()
    for i in range(3):
        produce(r2, "kip74", encode_batch([Record(0, i, None, b"x" * 5000, [])]))
    (p,) = _fetch(r, "kip74", [(0, 0)], max_bytes=100, partition_max_bytes=100)
    batches = decode_batches(p.records)
    assert len(batches) == 1 and batches[0][1][0].value == b"x" * 5000
    (p,) = _fetch(r, "kip74", [(0, 0)], partition_max_bytes=12_000)
    assert len(decode_batches(p.records)) == 2  # whole batches only, up to the limit


def test_out_of_range_offsets(raw):
    r = raw()
    assert create_topic(r, "range").error_code == 0
    produce(raw(), "range", encode_batch([Record(0, 1, None, b"a", [])]))
    (p,) = _fetch(r, "range", [(0, 5)])
    assert p.error_code == 1  # OFFSET_OUT_OF_RANGE
    (p,) = _fetch(r, "range", [(0, 1)])
    assert (p.error_code, p.records) == (0, b"")
