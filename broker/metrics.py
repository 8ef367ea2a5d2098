"""Operators' metrics: what the broker counts, what it reads off its state when asked, and
the two ways out (a Prometheus endpoint, and `metrics` events in the event log).

Owns: `BrokerMetrics`, the counters the hot path increments (records and bytes in per
produce batch, bytes out per fetch response, ISR shrinks and expands, one request-time
histogram per request name), each a plain integer: one dict update per batch or request, no
lock, no per-record work; `figures(broker)`, the gauges read off the broker's state at the
moment they are asked for (partition, leader and under-replicated counts, the active
controller's view of the cluster, the fetch-session cache) and the counters' totals, one
flat dict, which is what a `metrics` event carries; `BrokerCollector`, the same figures as
Prometheus metric families under the names Kafka's JMX metrics take through the Prometheus
JMX exporter's usual Kafka rules (`kafka.server<type=BrokerTopicMetrics,
name=MessagesInPerSec, topic=T>` is `kafka_server_brokertopicmetrics_messagesin_total
{topic="T"}`; without the topic, all topics); and `serve_metrics`, a tiny HTTP/1.x server on
trio that answers `GET /metrics` with the exposition of this broker's own registry.

The endpoint is off unless `metrics.port` is set (Kafka has no such property: its metrics
go out through JMX). One response per connection, then the connection closes; a request
that is not a well-formed `GET` within the size and time limits gets a 4xx, or just a
close, and the broker never notices. Each broker has its own CollectorRegistry, so several
brokers in one process (tests) do not mix their figures.
"""

from __future__ import annotations

import bisect
import logging
from typing import Any, Callable, Iterator

import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, Metric)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from broker import timeouts
from protocol.messages import FETCH

# the broker (broker.broker.Broker) is typed loosely: it imports this module
Broker = Any

log = logging.getLogger("minibroker.metrics")

# TotalTimeMs buckets, in ms: from a cached Metadata answer to a long-polling fetch's wait
TIME_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

# Kafka's BrokerState, as kafka.server:type=KafkaServer,name=BrokerState reports it
BROKER_STATE_STARTING, BROKER_STATE_RUNNING = 1, 3
BROKER_STATE_PENDING_CONTROLLED_SHUTDOWN = 6


class RequestTimes:
    """One request name's TotalTimeMs: counts per bucket (not cumulative), sum and count."""

    __slots__ = ("buckets", "sum_ms", "count")

    def __init__(self) -> None:
        self.buckets = [0] * (len(TIME_BUCKETS_MS) + 1)  # the last is +Inf
        self.sum_ms = 0.0
        self.count = 0

    def observe(self, ms: float) -> None:
        # bisect_left: a time equal to a bound falls in that bound's bucket (le, "<=")
        self.buckets[bisect.bisect_left(TIME_BUCKETS_MS, ms)] += 1
        self.sum_ms += ms
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        out, total = [], 0
        for bound, n in zip((*(f"{b:g}" for b in TIME_BUCKETS_MS), "+Inf"), self.buckets):
            total += n
            out.append((bound, total))
        return out


class BrokerMetrics:
    """The counters. Totals since the process started, as Prometheus counters are."""

    def __init__(self) -> None:
        self.messages_in: dict[str, int] = {}  # topic -> records appended for producers
        self.bytes_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}  # topic -> record bytes sent to consumers
        self.replication_bytes_out = 0  # record bytes sent to follower replicas
        self.failed_produce_requests = 0  # partitions of produce requests refused
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.requests: dict[str, RequestTimes] = {}
        self._fetch_shape_logged = False
        # the open client connections; set by broker.server once it serves
        self.connection_count: Callable[[], int] = lambda: 0

    # -- the hot path: one call per batch, response or request ------------------------------

    def produced(self, topic: str, records: int, size: int) -> None:
        """A batch a producer wrote, appended by this leader (MessagesIn counts records:
        the batch header's count, no record is decoded)."""
        self.messages_in[topic] = self.messages_in.get(topic, 0) + records
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + size

    def fetched(self, answer: Any, follower: bool, topic_name: Callable[[Any], str | None]
                ) -> None:
        """The record bytes of one Fetch answer, per topic (BytesOut) or, to a follower,
        all topics together (ReplicationBytesOut). The answer's topics each name their
        topic (or, from Fetch v13, its topic id: `topic_name` resolves it). An answer of
        another shape is left uncounted, once said: a metric must not cost the fetch."""
        try:
            self._fetched(answer["responses"], follower, topic_name)
        except (KeyError, TypeError, AttributeError) as e:
            if not self._fetch_shape_logged:
                self._fetch_shape_logged = True
                log.warning("BytesOut is not counted: a Fetch answer of an unexpected shape "
                            "(%s: %s)", type(e).__name__, e)

    def _fetched(self, responses: Any, follower: bool,
                 topic_name: Callable[[Any], str | None]) -> None:
        for t in responses:
            size = sum(len(p["records"] or b"") for p in t["partitions"])
            if not size:
                continue
            if follower:
                self.replication_bytes_out += size
                continue
            topic = t.get("topic") or topic_name(t.get("topic_id"))
            if topic:
                self.bytes_out[topic] = self.bytes_out.get(topic, 0) + size

    def isr_changed(self, shrink: bool) -> None:
        if shrink:
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1

    def request_done(self, name: str, ms: float) -> None:
        times = self.requests.get(name)
        if times is None:
            times = self.requests[name] = RequestTimes()
        times.observe(ms)


def request_name(api_name: str, api_key: int, body: Any) -> str:
    """Kafka's RequestMetrics name: the API's name, but a Fetch is FetchConsumer or
    FetchFollower (a replica's, from its replica id)."""
    if api_key != FETCH:
        return api_name
    return "FetchFollower" if fetch_replica_id(body) >= 0 else "FetchConsumer"



def fetch_replica_id(body: Any) -> int:
    """The replica a Fetch comes from (-1 for a consumer): replica_id, or from v15 the
    tagged ReplicaState's."""
    if body is None:
        return -1
    state = body.get("replica_state")
    if state is not None:
        return state.replica_id
    replica_id = body.get("replica_id")
    return -1 if replica_id is None else replica_id


# -- the figures: counters' totals and the state read now ----------------------------------

def _fetch_sessions(broker: Broker) -> tuple[int, int, int]:
    """(sessions, partitions cached, evictions) of the KIP-227 fetch-session cache, if the
    broker has one (`broker.fetch_sessions`: len(), `num_partitions`, `evictions`)."""
    cache = getattr(broker, "fetch_sessions", None)
    if cache is None:
        return 0, 0, 0
    partitions = getattr(cache, "num_partitions", 0)
    if callable(partitions):
        partitions = partitions()
    return len(cache), int(partitions), int(getattr(cache, "evictions", 0))


def broker_state(broker: Broker) -> int:
    lifecycle = broker.lifecycle
    if lifecycle.want_shut_down:
        return BROKER_STATE_PENDING_CONTROLLED_SHUTDOWN
    if not broker.addresses.is_broker:
        return BROKER_STATE_RUNNING
    return BROKER_STATE_STARTING if lifecycle.fenced else BROKER_STATE_RUNNING


def figures(broker: Broker) -> dict[str, Any]:
    """Every figure as one flat dict: the counters' all-topics totals and the gauges,
    computed now. The `metrics` event's fields, and the exporter's values."""
    m = broker.metrics
    partitions = leaders = under_replicated = under_min_isr = at_min_isr = 0
    for p in broker.partitions.values():
        if not p.is_leader:
            continue
        leaders += 1
        isr, replicas = len(p.isr), len(p.state.replicas)
        if isr < replicas:
            under_replicated += 1
        min_isr = p.state.effective_min_isr  # Kafka's gauges use the capped minimum
        if isr < min_isr:
            under_min_isr += 1
        elif isr == min_isr:
            at_min_isr += 1
    partitions = len(broker.partitions)
    sessions, cached, evictions = _fetch_sessions(broker)
    controller = _controller_figures(broker)
    return {
        "messages_in": sum(m.messages_in.values()),
        "bytes_in": sum(m.bytes_in.values()),
        "bytes_out": sum(m.bytes_out.values()),
        "replication_bytes_out": m.replication_bytes_out,
        "failed_produce_requests": m.failed_produce_requests,
        "partition_count": partitions,
        "leader_count": leaders,
        "under_replicated_partitions": under_replicated,
        "under_min_isr_partitions": under_min_isr,
        "at_min_isr_partitions": at_min_isr,
        "offline_replicas": len(broker.offline_partitions),
        "isr_shrinks": m.isr_shrinks,
        "isr_expands": m.isr_expands,
        "fetch_sessions": sessions,
        "fetch_session_partitions": cached,
        "fetch_session_evictions": evictions,
        "connections": m.connection_count(),
        "broker_state": broker_state(broker),
        **controller,
        "requests": [f"{name}={t.count}" for name, t in sorted(m.requests.items())],
        "request_time_ms": [f"{name}={t.sum_ms:.3f}" for name, t in sorted(m.requests.items())],
    }


def _controller_figures(broker: Broker) -> dict[str, int]:
    """The cluster as the active controller sees it (its metadata image); 0 on every other
    node, as Kafka's controller metrics, so that a sum over the nodes counts each once."""
    runtime = broker.runtime
    active = runtime is not None and runtime.active
    out = {"active_controller": int(active), "offline_partitions": 0, "global_topics": 0,
           "global_partitions": 0, "active_brokers": 0, "fenced_brokers": 0,
           "preferred_replica_imbalance": 0}
    if not active:
        return out
    image = broker.metadata_cache.image
    for topic in image.topics_by_id.values():
        out["global_topics"] += 1
        for registration in topic.partitions.values():
            out["global_partitions"] += 1
            if registration.leader < 0:
                out["offline_partitions"] += 1
            if registration.replicas and registration.leader != registration.replicas[0]:
                out["preferred_replica_imbalance"] += 1
    for b in image.brokers.values():
        out["fenced_brokers" if b.fenced else "active_brokers"] += 1
    return out


# -- Prometheus ------------------------------------------------------------------------------

_GAUGES = (
    # (figure, Prometheus name, help)
    ("partition_count", "kafka_server_replicamanager_partitioncount",
     "Partitions with a replica on this broker."),
    ("leader_count", "kafka_server_replicamanager_leadercount",
     "Partitions this broker leads."),
    ("under_replicated_partitions", "kafka_server_replicamanager_underreplicatedpartitions",
     "Partitions this broker leads whose ISR is smaller than their replicas."),
    ("under_min_isr_partitions", "kafka_server_replicamanager_underminisrpartitioncount",
     "Partitions this broker leads whose ISR is under min.insync.replicas."),
    ("at_min_isr_partitions", "kafka_server_replicamanager_atminisrpartitioncount",
     "Partitions this broker leads whose ISR is exactly min.insync.replicas."),
    ("offline_replicas", "kafka_server_replicamanager_offlinereplicacount",
     "Replicas in an offline log directory."),
    ("fetch_sessions", "kafka_server_fetchsessioncache_numincrementalfetchsessions",
     "Incremental fetch sessions (KIP-227) in the cache."),
    ("fetch_session_partitions",
     "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
     "Partitions held by the cached incremental fetch sessions."),
    ("broker_state", "kafka_server_kafkaserver_brokerstate",
     "Kafka's BrokerState: 1 starting (fenced), 3 running, 6 pending controlled shutdown."),
    ("active_controller", "kafka_controller_kafkacontroller_activecontrollercount",
     "1 on the active controller, else 0."),
    ("offline_partitions", "kafka_controller_kafkacontroller_offlinepartitionscount",
     "Partitions without a leader (on the active controller)."),
    ("global_topics", "kafka_controller_kafkacontroller_globaltopiccount",
     "Topics in the cluster (on the active controller)."),
    ("global_partitions", "kafka_controller_kafkacontroller_globalpartitioncount",
     "Partitions in the cluster (on the active controller)."),
    ("active_brokers", "kafka_controller_kafkacontroller_activebrokercount",
     "Registered unfenced brokers (on the active controller)."),
    ("fenced_brokers", "kafka_controller_kafkacontroller_fencedbrokercount",
     "Registered fenced brokers (on the active controller)."),
    ("preferred_replica_imbalance",
     "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
     "Partitions not led by their preferred replica (on the active controller)."),
)
_COUNTERS = (
    ("isr_shrinks", "kafka_server_replicamanager_isrshrinks",
     "ISR shrinks of partitions this broker leads."),
    ("isr_expands", "kafka_server_replicamanager_isrexpands",
     "ISR expansions of partitions this broker leads."),
    ("replication_bytes_out", "kafka_server_brokertopicmetrics_replicationbytesout",
     "Record bytes sent to follower replicas."),
    ("failed_produce_requests", "kafka_server_brokertopicmetrics_failedproducerequests",
     "Partitions of produce requests refused."),
    ("fetch_session_evictions", "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
     "Incremental fetch sessions evicted from the cache."),
)
_PER_TOPIC = (
    ("messages_in", "kafka_server_brokertopicmetrics_messagesin",
     "Records appended for producers (no label: all topics)."),
    ("bytes_in", "kafka_server_brokertopicmetrics_bytesin",
     "Record bytes appended for producers (no label: all topics)."),
    ("bytes_out", "kafka_server_brokertopicmetrics_bytesout",
     "Record bytes sent to consumers (no label: all topics)."),
)
REQUEST_TIME = "kafka_network_requestmetrics_totaltimems"
CONNECTIONS = "kafka_server_socket_server_metrics_connection_count"


class BrokerCollector:
    """A broker's figures as Prometheus metric families, computed at each scrape."""

    def __init__(self, broker: Broker):
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker, m = self.broker, self.broker.metrics
        now = figures(broker)
        for figure, name, text in _PER_TOPIC:
            per_topic: dict[str, int] = getattr(m, figure)
            family = CounterMetricFamily(name, text, labels=["topic"])
            family.add_metric([], now[figure])  # Kafka's all-topics metric has no topic
            for topic, value in sorted(per_topic.items()):
                family.add_metric([topic], value)
            yield family
        for figure, name, text in _COUNTERS:
            yield CounterMetricFamily(name, text, value=now[figure])
        for figure, name, text in _GAUGES:
            yield GaugeMetricFamily(name, text, value=now[figure])
        connections = GaugeMetricFamily(CONNECTIONS, "Open client connections.",
                                        labels=["listener"])
        connections.add_metric([broker.listener_name], now["connections"])
        yield connections
        times = HistogramMetricFamily(REQUEST_TIME, "Time from a request's arrival to its "
                                      "answer, in ms, by request.", labels=["request"])
        for request, t in sorted(m.requests.items()):
            times.add_metric([request], t.cumulative(), t.sum_ms)
        yield times


def registry_for(broker: Broker) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker))
    return registry


# -- the HTTP endpoint -----------------------------------------------------------------------

MAX_REQUEST_HEAD = 8192
REQUEST_TIMEOUT_S = 10.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large"}


def _response(status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
              head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head if head_only else head + body


def answer(request_head: bytes, scrape: Callable[[], bytes]) -> bytes:
    """The response to one HTTP request head (request line and headers, without the blank
    line): the exposition for GET (or HEAD) /metrics, a 4xx otherwise."""
    line = request_head.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return _response(400, b"not an HTTP/1.x request line\n")
    method, target = parts[0], parts[1]
    if method not in (b"GET", b"HEAD"):
        return _response(405, b"only GET\n")
    path = target.split(b"?", 1)[0]
    if path not in (b"/metrics", b"/"):
        return _response(404, b"the metrics are at /metrics\n")
    return _response(200, scrape(), CONTENT_TYPE_PLAIN_0_0_4, head_only=method == b"HEAD")


async def handle_http(stream: trio.abc.Stream, scrape: Callable[[], bytes]) -> None:
    """One connection: read the request head, answer it, close. A client that sends too
    much or too slowly, or something other than HTTP, is answered 4xx or simply closed."""
    async with stream:
        head = b""
        try:
            with timeouts.move_on_after(REQUEST_TIMEOUT_S):
                while b"\r\n\r\n" not in head and b"\n\n" not in head:
                    if len(head) > MAX_REQUEST_HEAD:
                        await stream.send_all(_response(431, b"request head too large\n"))
                        return
                    data = await stream.receive_some(4096)
                    if not data:
                        return
                    head += data
                await stream.send_all(answer(head, scrape))
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass  # the client went away


async def serve_metrics(broker: Broker, listeners: list, *,
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve GET /metrics on `listeners` (already bound) until cancelled."""
    registry = registry_for(broker)

    def scrape() -> bytes:
        return generate_latest(registry)

    async def handler(stream: trio.abc.Stream) -> None:
        try:
            await handle_http(stream, scrape)
        except Exception:  # noqa: BLE001  a bug of ours costs this scrape only
            log.exception("metrics request failed")

    await trio.serve_listeners(handler, listeners, task_status=task_status)
