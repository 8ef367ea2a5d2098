"""broker.metrics in process: the counters our own client's produce and fetch move, the
figures read off the broker's state, the Prometheus exposition they make, the `metrics`
event, and the HTTP handler's answers to requests good and bad."""

from __future__ import annotations

import trio
import trio.testing
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.events import read_events
from broker.metrics import (TIME_BUCKETS_MS, RequestTimes, answer, figures, handle_http,
                            registry_for)
from client import Consumer, Producer, TopicPartition

RECORDS = 25


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of an exposition."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_request_times_fall_in_the_bucket_whose_bound_they_do_not_exceed():
    t = RequestTimes()
    for ms in (0.1, 0.5, 0.6, 7, 10_000_000):
        t.observe(ms)
    cumulative = dict(t.cumulative())
    assert cumulative["0.5"] == 2  # 0.5 itself is "le 0.5"
    assert cumulative["1"] == 3
    assert cumulative["10"] == 4
    assert cumulative[f"{TIME_BUCKETS_MS[-1]:g}"] == 4
    assert cumulative["+Inf"] == t.count == 5
    assert t.sum_ms == 0.1 + 0.5 + 0.6 + 7 + 10_000_000


async def test_produce_and_fetch_move_the_counters_and_the_gauges_read_the_state(
        inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("metered", 3)
    async with Producer(bootstrap_servers=inproc.bootstrap, linger_ms=0) as producer:
        for i in range(RECORDS):
            await producer.send_and_wait("metered", b"v%d" % i, partition=i % 3)
    async with Consumer(bootstrap_servers=inproc.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("metered", i) for i in range(3)])
        seen = 0
        with trio.fail_after(30):
            while seen < RECORDS:
                seen += sum(len(r) for r in (await c.getmany(timeout_ms=500)).values())

    now = figures(broker)
    assert now["messages_in"] == RECORDS
    assert broker.metrics.messages_in == {"metered": RECORDS}
    assert now["bytes_in"] == broker.metrics.bytes_in["metered"] > 0
    # every record batch appended went out to the consumer once: the same bytes
    assert now["bytes_out"] == broker.metrics.bytes_out["metered"] == now["bytes_in"]
    partitions = len(broker.partitions)  # no group: no __consumer_offsets
    assert now["partition_count"] == now["leader_count"] == partitions == 3
    assert now["under_replicated_partitions"] == 0
    assert now["active_controller"] == 1  # a single node is its own controller
    assert now["global_partitions"] == partitions and now["offline_partitions"] == 0
    assert now["broker_state"] == 3  # running
    assert any(r.startswith("Produce=") for r in now["requests"])

    text = generate_latest(registry_for(broker)).decode()
    got = samples(text)
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", ())] == RECORDS
    assert got[("kafka_server_brokertopicmetrics_messagesin_total",
                (("topic", "metered"),))] == RECORDS
    assert got[("kafka_server_brokertopicmetrics_bytesout_total",
                (("topic", "metered"),))] == now["bytes_out"]
    assert got[("kafka_server_replicamanager_partitioncount", ())] == partitions
    assert got[("kafka_server_replicamanager_leadercount", ())] == partitions
    assert got[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    produce_count = got[("kafka_network_requestmetrics_totaltimems_count",
                         (("request", "Produce"),))]
    assert produce_count == broker.metrics.requests["Produce"].count >= RECORDS
    assert got[("kafka_network_requestmetrics_totaltimems_bucket",
                (("le", "+Inf"), ("request", "Produce")))] == produce_count
    assert ("kafka_network_requestmetrics_totaltimems_count",
            (("request", "FetchConsumer"),)) in got


async def test_the_metrics_event_carries_the_figures(inproc, autojump_clock):
    broker = inproc.broker
    await inproc.create_topic("evented", 2)
    broker.emit_metrics()
    broker.events.flush()
    written = [e for e in read_events(broker.data_dir) if e["type"] == "metrics"]
    assert len(written) == 1
    event = written[0]
    assert event["partition_count"] == 2 and event["leader_count"] == 2
    assert event["messages_in"] == 0 and event["active_controller"] == 1
    assert all("=" in r for r in event["requests"])


async def test_a_metrics_event_is_written_every_interval(tmp_path, autojump_clock):
    from tests.inproc import in_process_broker
    async with in_process_broker(tmp_path / "b", **{"events.metrics.interval.ms": "1000"}) as b:
        from broker.server import _metrics_events
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_metrics_events, b.broker)
            await trio.sleep(3.5)
            nursery.cancel_scope.cancel()
        b.broker.events.flush()
        times = [e["ts"] for e in read_events(b.broker.data_dir) if e["type"] == "metrics"]
    assert len(times) == 3
    assert [later - earlier for earlier, later in zip(times, times[1:])] == [1000, 1000]


def scrape() -> bytes:
    return b"figures\n"


def test_answers_to_requests_good_and_bad():
    ok = answer(b"GET /metrics HTTP/1.1\r\nHost: x", scrape)
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and ok.endswith(b"\r\n\r\nfigures\n")
    assert b"Content-Type: text/plain; version=0.0.4" in ok
    assert b"Content-Length: 8\r\n" in ok
    head = answer(b"HEAD /metrics HTTP/1.0", scrape)
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
    assert answer(b"POST /metrics HTTP/1.1", scrape).startswith(b"HTTP/1.1 405")
    assert answer(b"GET /other HTTP/1.1", scrape).startswith(b"HTTP/1.1 404")
    for junk in (b"", b"\x00\x00\x00\x10garbage", b"GET /metrics", b"GET /metrics SMTP/1.0"):
        assert answer(junk, scrape).startswith(b"HTTP/1.1 400"), junk


async def _exchange(sent: bytes, close_after_send: bool = False) -> bytes:
    client, server = trio.testing.memory_stream_pair()
    received = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handle_http, server, scrape)
        if sent:
            await client.send_all(sent)
        if close_after_send:
            await client.send_eof()
        while data := await client.receive_some(65536):
            received += data
    return received


async def test_the_handler_answers_once_and_closes(autojump_clock):
    got = await _exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"figures\n")


async def test_a_client_that_sends_too_much_or_nothing_is_closed(autojump_clock):
    got = await _exchange(b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 5000)
    assert got.startswith(b"HTTP/1.1 431")
    started = trio.current_time()
    assert await _exchange(b"GET /metr") == b""  # never finished: closed at the time limit
    assert trio.current_time() - started >= 10
    assert await _exchange(b"GET /", close_after_send=True) == b""


def _dashboard() -> dict:
    import json
    from pathlib import Path
    return json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana"
                       / "minibroker.json").read_text())


async def test_the_grafana_dashboard_names_only_metrics_the_broker_serves(inproc,
                                                                          autojump_clock):
    import re

    broker = inproc.broker
    broker.metrics.request_done("Produce", 1.0)  # a histogram with no request has no samples
    served = {s.name for family in text_string_to_metric_families(
        generate_latest(registry_for(broker)).decode()) for s in family.samples}
    dashboard = _dashboard()
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    named = {name for e in exprs for name in re.findall(r"\bkafka_[a-z_]+", e)}
    assert named and named <= served, sorted(named - served)
    # every panel but the rows queries something, through the data-source variable
    assert all(p.get("targets") for p in dashboard["panels"] if p["type"] != "row")
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"datasource"}
    assert all(t["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"]
               for t in p.get("targets", ()))


def test_a_fetch_answer_of_another_shape_is_left_uncounted_not_fatal(caplog):
    from broker.metrics import BrokerMetrics
    m = BrokerMetrics()
    m.fetched({"responses": [{"topic": "t", "partitions": [{"records": b"abc"}]}]}, False,
              lambda _id: None)
    m.fetched({"responses": [{"topic_id": "id", "partitions": [{"records": b"de"}]}]}, False,
              lambda _id: "t")
    m.fetched({"responses": [{"topic": "t", "partitions": [{"records": b"xyz"}]}]}, True,
              lambda _id: None)
    assert m.bytes_out == {"t": 5} and m.replication_bytes_out == 3
    m.fetched(b"already encoded", False, lambda _id: None)
    m.fetched({"topics": []}, False, lambda _id: None)
    assert m.bytes_out == {"t": 5}
    assert len([r for r in caplog.records if "BytesOut is not counted" in r.message]) == 1
