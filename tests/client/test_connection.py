"""client.config, client.connection and client.cluster: against a tiny fake broker served
by the test itself (for what a real broker will not do on demand: refuse ApiVersions v3,
answer out of order, stay silent, hang up) and against the real broker."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from construct import Container

from client import errors
from client.cluster import Cluster, ClusterMetadata
from client.config import AdminConfig, ClientConfig, check_config
from client.connection import (
    BrokerConnection, ConnectionPool, background_nursery, open_connection,
)
from protocol.connection import ServerConnection, encode_response
from protocol.errors import ErrorCode
from protocol.messages import API_VERSIONS, CREATE_TOPICS, FETCH, METADATA
# The real broker's fixtures (broker, shared_broker) come from tests/client/conftest.py.
from harness.ports import free_port

DEADLINE_S = 10


# -- a fake broker ------------------------------------------------------------------------

class FakeBroker:
    """Serves ApiVersions and Metadata on 127.0.0.1:<port>, with knobs:

    - `api_versions_max`: ApiVersions versions above it are refused the KIP-511 way (error
      35, v0 body naming `advertise[18]`, or no key-18 entry if that is absent);
    - `advertise`: api key -> (min, max) in its ApiVersions answer;
    - `metadata`: "answer" | "silent" (never answers) | ("reverse", n) (holds n requests,
      then answers them last-first) | ("hang_up", n) (closes after n requests, answering
      none).
    """

    def __init__(self, *, api_versions_max: int = 4, advertise=None, metadata="answer"):
        self.api_versions_max = api_versions_max
        self.advertise = dict(advertise or {18: (0, 4), 3: (0, 12)})
        self.metadata = metadata
        self.api_versions_seen: list[int] = []
        self.metadata_seen = 0
        self.connections = 0
        self.port: int | None = None

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED):
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    def _metadata_body(self, request):
        return {"throttle_time_ms": 0,
                "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}],
                "cluster_id": "fake", "controller_id": 0,
                "topics": [{"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": t.name,
                            "partitions": []} for t in request.body.topics or []]}

    async def _handle(self, stream):
        self.connections += 1
        server = ServerConnection()
        held = []

        async def send(request, body, version=None):
            await stream.send_all(encode_response(
                request.api_key, request.api_version if version is None else version,
                request.header.correlation_id, body))

        try:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                server.receive_data(data)
                while (request := server.next_request()) is not None:
                    if request.api_key == API_VERSIONS:
                        self.api_versions_seen.append(request.api_version)
                        keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                                for k, (lo, hi) in sorted(self.advertise.items())]
                        if request.api_version > self.api_versions_max:
                            keys = [k for k in keys if k["api_key"] == API_VERSIONS]
                            await send(request, {"error_code": ErrorCode.UNSUPPORTED_VERSION,
                                                 "api_keys": keys}, version=0)
                        else:
                            await send(request, {"error_code": 0, "api_keys": keys})
                        continue
                    self.metadata_seen += 1
                    mode = self.metadata
                    if mode == "answer":
                        await send(request, self._metadata_body(request))
                    elif mode == "silent":
                        pass
                    elif mode[0] == "reverse":
                        held.append(request)
                        if len(held) == mode[1]:
                            for r in reversed(held):
                                await send(r, self._metadata_body(r))
                            held.clear()
                    elif mode[0] == "hang_up" and self.metadata_seen >= mode[1]:
                        return
        except trio.BrokenResourceError:
            pass
        finally:
            await trio.aclose_forcefully(stream)


@pytest.fixture
async def fake(nursery):
    """A factory: `await fake(**knobs)` starts a FakeBroker and returns it."""
    async def start(**knobs) -> FakeBroker:
        server = FakeBroker(**knobs)
        await nursery.start(server.serve)
        return server
    return start


def metadata_for(name: str) -> dict:
    return {"topics": [{"name": name}], "allow_auto_topic_creation": False}


# -- config -------------------------------------------------------------------------------

def test_config_defaults_are_kafkas():
    cfg = check_config("common")
    assert isinstance(cfg, ClientConfig)
    assert (cfg.request_timeout_ms, cfg.metadata_max_age_ms, cfg.retry_backoff_ms,
            cfg.reconnect_backoff_ms, cfg.connections_max_idle_ms) == (30000, 300000, 100, 50,
                                                                        540000)
    admin = check_config("admin", bootstrap_servers="h1:1, [::1]:2 ,h3")
    assert isinstance(admin, AdminConfig)
    assert admin.bootstrap_addresses == [("h1", 1), ("::1", 2), ("h3", 9092)]
    assert (admin.default_api_timeout_ms, admin.connections_max_idle_ms) == (60000, 300000)
    assert admin.client_id.startswith("adminclient-")


def test_config_accepts_dotted_names():
    cfg = check_config("admin", **{"request.timeout.ms": 1234, "client.id": "me"})
    assert (cfg.request_timeout_ms, cfg.client_id) == (1234, "me")


def test_unknown_config_key_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="'request_timeout'.*did you mean 'request_timeout_ms'"):
        check_config("admin", request_timeout=5)
    with pytest.raises(TypeError, match="'no_such_thing'"):
        check_config("common", no_such_thing=1)


def test_config_values_are_checked():
    with pytest.raises(TypeError, match="request_timeout_ms must be an int"):
        check_config("common", request_timeout_ms="30000")
    with pytest.raises(ValueError, match="retry_backoff_ms must be >= 0"):
        check_config("common", retry_backoff_ms=-1)
    with pytest.raises(ValueError, match="bad broker address"):
        check_config("common", bootstrap_servers="host:notaport")
    with pytest.raises(ValueError, match="security_protocol"):
        check_config("common", security_protocol="TLS")
    assert check_config("common", security_protocol="sasl_ssl").security_protocol == "SASL_SSL"


@pytest.mark.parametrize("address", ["127.0.0.1:19504:1", "h:", "::1", "[::1", "[::1]9092",
                                     "a b:9092", ":9092"])
def test_a_malformed_bootstrap_address_is_refused_when_configured(address):
    # not taken as a host name that could only fail to resolve after every retry
    with pytest.raises(ValueError, match="bad broker address"):
        check_config("producer", bootstrap_servers=address)


def test_bootstrap_address_forms():
    cfg = check_config("common", bootstrap_servers="h1:1,[::1]:2,h3,PLAINTEXT://h4:4")
    assert cfg.bootstrap_addresses == [("h1", 1), ("::1", 2), ("h3", 9092), ("h4", 4)]


def test_backoff_doubles_up_to_its_maximum():
    cfg = check_config("common", retry_backoff_ms=100, retry_backoff_max_ms=1000,
                       reconnect_backoff_ms=50, reconnect_backoff_max_ms=300)
    assert [cfg.retry_backoff_s(n) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert [cfg.reconnect_backoff_s(n) for n in range(5)] == [0.0, 0.05, 0.1, 0.2, 0.3]


# -- errors -------------------------------------------------------------------------------

def test_error_codes_are_typed_exceptions():
    e = errors.for_code(36, "Topic 'x' already exists.")
    assert type(e) is errors.TopicAlreadyExistsError
    assert isinstance(e, errors.KafkaError)
    assert e.code is ErrorCode.TOPIC_ALREADY_EXISTS and not e.retriable
    assert str(e) == "TOPIC_ALREADY_EXISTS: Topic 'x' already exists."
    nl = errors.for_code(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert isinstance(nl, errors.NotLeaderOrFollowerError)
    assert nl.retriable and nl.refresh_metadata
    assert type(errors.for_code(9999)) is errors.UnknownServerError
    assert isinstance(errors.for_code(17), errors.InvalidTopicError)
    lost = errors.KafkaConnectionError("gone")
    assert isinstance(lost, errors.NetworkError) and lost.retriable
    assert isinstance(errors.KafkaTimeoutError("slow"), errors.RequestTimedOutError)
    assert not errors.IncompatibleBrokerVersion("old").retriable
    clone = lost.clone()
    assert type(clone) is type(lost) and str(clone) == str(lost) and clone is not lost


# -- ApiVersions negotiation --------------------------------------------------------------

async def test_api_versions_v3_against_the_real_broker(shared_broker):
    with trio.fail_after(DEADLINE_S):
        async with open_connection(shared_broker.host, shared_broker.port) as conn:
            assert conn.api_versions_version == 3
            assert conn.api_versions[METADATA] == (0, 13)
            resp = await conn.request(METADATA, {"topics": []})
            assert resp.api_version == 13 and resp.body.brokers[0].port == shared_broker.port


@pytest.mark.parametrize("advertised, expected", [((0, 2), 2), (None, 0)])
async def test_api_versions_falls_back_as_kip_511_says(fake, advertised, expected):
    """The broker refuses v3 with error 35 and a v0 body naming its ApiVersions range (or
    no range): we ask again at the highest version it names (or v0)."""
    advertise = {3: (0, 9)}
    if advertised is not None:
        advertise[API_VERSIONS] = advertised
    server = await fake(api_versions_max=expected, advertise=advertise)
    with trio.fail_after(DEADLINE_S):
        async with open_connection("127.0.0.1", server.port) as conn:
            assert server.api_versions_seen == [3, expected]
            assert conn.api_versions_version == expected
            assert conn.api_versions[METADATA] == (0, 9)
            resp = await conn.request(METADATA, metadata_for("t"))
            assert resp.api_version == 9  # highest common: the broker's max
            assert resp.body.topics[0].name == "t"


async def test_disjoint_or_missing_api_is_a_clear_error(fake):
    server = await fake(advertise={18: (0, 4), 3: (14, 15)})
    with trio.fail_after(DEADLINE_S):
        async with open_connection("127.0.0.1", server.port) as conn:
            with pytest.raises(errors.IncompatibleBrokerVersion,
                               match=r"no Metadata version in common .* serves 14-15, we "
                                     r"speak 0-13"):
                await conn.request(METADATA, metadata_for("t"))
            with pytest.raises(errors.IncompatibleBrokerVersion,
                               match=r"does not serve CreateTopics \(api key 19\)"):
                await conn.request(CREATE_TOPICS, {"topics": []})
            assert conn.is_ready  # nothing was sent; the connection is fine


# -- pipelining ---------------------------------------------------------------------------

async def test_fifty_pipelined_requests_answered_last_first_reach_their_callers(fake):
    """The fake holds 50 requests and then answers them in reverse: only a connection with
    all 50 in flight at once gets there, and each caller must get its own answer."""
    server = await fake(metadata=("reverse", 50))
    answers = {}
    with trio.fail_after(DEADLINE_S):
        async with open_connection("127.0.0.1", server.port) as conn:
            async def one(i):
                resp = await conn.request(METADATA, metadata_for(f"topic-{i}"))
                answers[i] = [t.name for t in resp.body.topics]

            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(one, i)
            assert conn.in_flight == 0
    assert answers == {i: [f"topic-{i}"] for i in range(50)}
    assert server.connections == 1


async def test_fifty_pipelined_requests_on_the_real_broker(shared_broker):
    answers = {}
    peak = 0
    with trio.fail_after(DEADLINE_S):
        async with open_connection(shared_broker.host, shared_broker.port) as conn:
            async def one(i):
                nonlocal peak
                peak = max(peak, conn.in_flight)
                resp = await conn.request(METADATA, metadata_for(f"pipelined-{i}"))
                answers[i] = [(t.name, t.error_code) for t in resp.body.topics]

            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(one, i)
    assert answers == {i: [(f"pipelined-{i}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
                       for i in range(50)}
    assert peak >= 49  # every task queued its request before the first answer came back


# -- timeouts and lost connections --------------------------------------------------------

async def test_request_timeout_fails_that_request_only(fake):
    server = await fake(metadata="silent")
    with trio.fail_after(DEADLINE_S):
        async with open_connection("127.0.0.1", server.port) as conn:
            start = trio.current_time()
            with pytest.raises(errors.KafkaTimeoutError, match="no answer to Metadata v12") as e:
                await conn.request(METADATA, metadata_for("t"), timeout_ms=200)
            assert e.value.retriable
            assert trio.current_time() - start >= 0.2
            assert conn.is_ready and conn.in_flight == 0
            server.metadata = "answer"  # the connection still works for the next request
            resp = await conn.request(METADATA, metadata_for("u"), timeout_ms=5000)
            assert resp.body.topics[0].name == "u"


async def test_default_request_timeout_comes_from_config(fake):
    server = await fake(metadata="silent")
    cfg = check_config("common", request_timeout_ms=150)
    with trio.fail_after(DEADLINE_S):
        async with open_connection("127.0.0.1", server.port, cfg) as conn:
            with pytest.raises(errors.KafkaTimeoutError, match="within 150 ms"):
                await conn.request(METADATA, metadata_for("t"))


async def test_hang_up_fails_every_request_in_flight_then_reopens(fake):
    server = await fake(metadata=("hang_up", 5))
    outcomes = []
    with trio.fail_after(DEADLINE_S):
        async with background_nursery() as nursery:
            conn = BrokerConnection("127.0.0.1", server.port)
            await conn.open(nursery)

            async def one(i):
                try:
                    await conn.request(METADATA, metadata_for(f"t{i}"))
                except errors.KafkaError as e:
                    outcomes.append(e)

            async with trio.open_nursery() as callers:
                for i in range(5):
                    callers.start_soon(one, i)
            assert len(outcomes) == 5
            assert all(type(e) is errors.KafkaConnectionError and e.retriable for e in outcomes)
            assert conn.is_closed and conn.in_flight == 0
            with pytest.raises(errors.KafkaConnectionError, match="not open"):
                await conn.request(METADATA, metadata_for("t"))

            server.metadata = "answer"
            await conn.open(nursery)  # the same object reopens
            resp = await conn.request(METADATA, metadata_for("again"))
            assert resp.body.topics[0].name == "again"
            assert server.connections == 2
            await conn.close()
            assert conn.is_closed


async def test_broker_killed_fails_in_flight_fetches_then_reconnects(broker):
    """Fetches the real broker holds (max_wait_ms) are in flight when it is killed: each
    fails with a retriable connection error; after a restart the connection reopens."""
    topic = "held"
    outcomes = []
    with trio.fail_after(60):
        async with background_nursery() as nursery:
            conn = BrokerConnection(broker.host, broker.port)
            await conn.open(nursery)
            created = await conn.request(CREATE_TOPICS, {"topics": [
                {"name": topic, "num_partitions": 1, "replication_factor": 1}]})
            assert created.body.topics[0].error_code == 0
            fetch = {"max_wait_ms": 30000, "min_bytes": 1, "max_bytes": 1 << 20,
                     "topics": [{"topic": topic, "partitions": [
                         {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}

            async def one():
                try:
                    await conn.request(FETCH, fetch, timeout_ms=40000)
                    outcomes.append("answered")
                except errors.KafkaError as e:
                    outcomes.append(e)

            async with trio.open_nursery() as callers:
                for _ in range(5):
                    callers.start_soon(one)
                while conn.in_flight < 5:
                    await trio.testing.wait_all_tasks_blocked()
                await trio.to_thread.run_sync(lambda: broker.stop(kill=True))
            assert len(outcomes) == 5
            assert all(isinstance(e, errors.KafkaConnectionError) and e.retriable
                       for e in outcomes), outcomes
            assert conn.is_closed

            with pytest.raises(errors.KafkaConnectionError, match="cannot connect"):
                await conn.open(nursery)
            await trio.to_thread.run_sync(broker.start)
            await conn.open(nursery)
            resp = await conn.request(METADATA, metadata_for(topic))
            assert resp.body.topics[0].error_code == 0
            await conn.close()


# -- the pool -----------------------------------------------------------------------------

async def test_least_loaded_picks_the_connection_with_fewest_in_flight(fake):
    busy = await fake(metadata="silent")
    idle = await fake()
    with trio.fail_after(DEADLINE_S):
        async with ConnectionPool(check_config("common")) as pool:
            a = await pool.connect("127.0.0.1", busy.port)
            b = await pool.connect("127.0.0.1", idle.port)
            assert await pool.connect("127.0.0.1", busy.port) is a  # one per address

            async def held(i):
                with pytest.raises(errors.KafkaConnectionError, match="closed"):
                    await a.request(METADATA, metadata_for(f"t{i}"))

            async with trio.open_nursery() as callers:
                for i in range(3):
                    callers.start_soon(held, i)
                while a.in_flight < 3:
                    await trio.testing.wait_all_tasks_blocked()
                assert pool.least_loaded_ready() is b
                assert await pool.least_loaded() is b
                await a.close()  # fails the three held requests
            assert a.in_flight == 0 and await pool.least_loaded() is b


async def test_a_channel_is_a_connection_of_its_own_that_never_serves_as_least_loaded(fake):
    # the consumer's group coordinator requests (a JoinGroup the broker holds until the
    # rebalance completes) must not queue in front of its fetches on one connection
    server = await fake(metadata="silent")
    with trio.fail_after(DEADLINE_S):
        async with ConnectionPool(check_config("common")) as pool:
            pool.update_nodes({0: ("127.0.0.1", server.port)})
            plain = await pool.get(0)
            group = await pool.get(0, channel="group")
            assert group is not plain and await pool.get(0, channel="group") is group
            assert server.connections == 2
            assert group.node_id == plain.node_id == 0

            async def held():
                with pytest.raises(errors.KafkaConnectionError, match="closed"):
                    await plain.request(METADATA, metadata_for("t"))

            async with trio.open_nursery() as callers:
                callers.start_soon(held)
                while plain.in_flight < 1:
                    await trio.testing.wait_all_tasks_blocked()
                # busier than the idle group connection, and still the one chosen
                assert pool.least_loaded_ready() is plain
                await plain.close()
            assert pool.least_loaded_ready() is None  # not the group connection either


async def test_concurrent_connects_share_one_attempt(fake):
    server = await fake()
    conns = []
    with trio.fail_after(DEADLINE_S):
        async with ConnectionPool(check_config("common")) as pool:
            async def get():
                conns.append(await pool.connect("127.0.0.1", server.port))
            async with trio.open_nursery() as n:
                for _ in range(10):
                    n.start_soon(get)
    assert len(conns) == 10 and len({id(c) for c in conns}) == 1
    assert server.connections == 1


async def test_idle_connections_are_closed(fake):
    server = await fake()
    cfg = check_config("common", connections_max_idle_ms=100)
    with trio.fail_after(DEADLINE_S):
        async with ConnectionPool(cfg) as pool:
            conn = await pool.connect("127.0.0.1", server.port)
            await conn.wait_closed()  # closed by the reaper, not by us
            assert conn.is_closed
            assert await pool.connect("127.0.0.1", server.port) is conn  # reopened on use
            assert conn.is_ready and server.connections == 2


# -- the cluster metadata -----------------------------------------------------------------

async def test_bootstrap_skips_a_dead_first_address(shared_broker):
    dead = free_port()
    cfg = check_config("common", bootstrap_servers=f"127.0.0.1:{dead},{shared_broker.bootstrap}")
    with trio.fail_after(DEADLINE_S):
        async with ConnectionPool(cfg) as pool:
            cluster = Cluster(pool, cfg)
            metadata = await cluster.refresh()
            assert [(n.node_id, n.port) for n in metadata.brokers.values()] == [
                (0, shared_broker.port)]
            assert pool.nodes == {0: (shared_broker.host, shared_broker.port)}
            assert pool.in_backoff(("127.0.0.1", dead))
            assert [c.port for c in pool.connections if c.is_ready] == [shared_broker.port]


async def test_no_bootstrap_address_answers():
    cfg = check_config("common", bootstrap_servers=f"127.0.0.1:{free_port()}")
    with trio.fail_after(DEADLINE_S):
        async with ConnectionPool(cfg) as pool:
            with pytest.raises(errors.NoBrokersAvailable, match="cannot connect") as e:
                await Cluster(pool, cfg).refresh()
            assert e.value.retriable


async def _create_topic(conn: BrokerConnection, name: str, partitions: int) -> None:
    resp = await conn.request(CREATE_TOPICS, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1}]})
    assert resp.body.topics[0].error_code == 0


async def test_metadata_refresh_sees_a_topic_created_since(shared_broker):
    cfg = check_config("common", bootstrap_servers=shared_broker.bootstrap)
    with trio.fail_after(DEADLINE_S):
        async with ConnectionPool(cfg) as pool:
            cluster = Cluster(pool, cfg)
            await cluster.refresh()
            assert cluster.metadata.partitions_for("fresh") is None
            await _create_topic(await pool.least_loaded(), "fresh", 3)
            assert cluster.metadata.partitions_for("fresh") is None  # a cache: not yet
            metadata = await cluster.refresh()
            assert metadata.partitions_for("fresh") == [0, 1, 2]
            assert metadata.leader_for("fresh", 2) == 0
            assert metadata.topic_id("fresh") is not None
            assert metadata.topic_name(metadata.topic_id("fresh")) == "fresh"
            assert metadata.controller_id == 0 and cluster.generation == 2


async def test_refresh_on_not_leader_and_unknown_topic_errors(shared_broker):
    """note_error with a refresh-metadata code wakes the background refresher; a code
    without that flag does not."""
    cfg = check_config("common", bootstrap_servers=shared_broker.bootstrap)
    with trio.fail_after(DEADLINE_S):
        async with ConnectionPool(cfg) as pool, trio.open_nursery() as nursery:
            cluster = Cluster(pool, cfg, topics=["later"])
            await cluster.refresh()
            assert cluster.metadata.topic_errors == {
                "later": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            await nursery.start(cluster.run)
            assert not cluster.note_error(ErrorCode.INVALID_CONFIG)
            assert not cluster.needs_refresh
            await _create_topic(await pool.least_loaded(), "later", 2)
            generation = cluster.generation
            assert cluster.note_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            await cluster.wait_for_refresh(generation)
            assert cluster.metadata.partitions_for("later") == [0, 1]
            generation = cluster.generation
            assert cluster.note_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            await cluster.wait_for_refresh(generation)
            assert list(cluster.metadata.topics) == ["later"]  # only what it tracks
            nursery.cancel_scope.cancel()


async def test_refresh_when_metadata_reaches_its_max_age(shared_broker):
    cfg = check_config("common", bootstrap_servers=shared_broker.bootstrap,
                       metadata_max_age_ms=100)
    with trio.fail_after(DEADLINE_S):
        async with ConnectionPool(cfg) as pool, trio.open_nursery() as nursery:
            cluster = Cluster(pool, cfg)
            await nursery.start(cluster.run)
            await cluster.wait_for_refresh(0)
            first = cluster.metadata.updated_at
            await cluster.wait_for_refresh(2)  # nobody asked: two more, by age alone
            assert cluster.metadata.updated_at - first >= 0.2
            nursery.cancel_scope.cancel()


async def test_concurrent_refreshes_share_a_request(shared_broker):
    cfg = check_config("common", bootstrap_servers=shared_broker.bootstrap)
    with trio.fail_after(DEADLINE_S):
        async with ConnectionPool(cfg) as pool:
            cluster = Cluster(pool, cfg)
            await cluster.refresh()
            async with trio.open_nursery() as n:
                for _ in range(5):
                    n.start_soon(cluster.refresh)
            # all five called before any refresh began (taking the lock is a schedule
            # point); the first to get it refreshes (#2), and the other four find that #2
            # began after their call and has completed: 5 calls, 1 request
            assert cluster.generation == 2


def _body(value):
    """A decoded response body as the client gets it: construct Containers all the way."""
    if isinstance(value, dict):
        return Container({k: _body(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_body(v) for v in value]
    return value


def _metadata_body(topics: dict[str, int | ErrorCode]) -> dict:
    """A Metadata response body: topic -> partition count, or a topic error code."""
    return {"brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None}],
            "cluster_id": "c", "controller_id": 0,
            "topics": [{"error_code": v if isinstance(v, ErrorCode) else 0, "name": name,
                        "topic_id": None, "is_internal": False,
                        "partitions": [] if isinstance(v, ErrorCode) else [
                            {"error_code": 0, "partition_index": p, "leader_id": 0,
                             "leader_epoch": 0, "replica_nodes": [0], "isr_nodes": [0],
                             "offline_replicas": []} for p in range(v)]}
                       for name, v in topics.items()]}


def test_metadata_knows_which_topics_exist_and_which_it_was_not_told_about():
    md = ClusterMetadata()
    assert md.exists("a") is None
    md.update(_body(_metadata_body({"a": 2, "gone": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    "busy": ErrorCode.LEADER_NOT_AVAILABLE})),
              now=1.0, requested=["a", "gone", "busy"])
    assert (md.exists("a"), md.exists("gone"), md.exists("busy"), md.exists("never")) == (
        True, False, None, None)
    md.update(_body(_metadata_body({"b": 1})), now=2.0, requested=None)  # every topic
    assert (md.exists("a"), md.exists("b"), md.exists("never")) == (False, True, False)


async def test_requested_updates_wait_out_retry_backoff(fake, mock_clock):
    """Java's Metadata.timeToNextUpdate: an update requested right after a refresh (an
    error on every fetch, say) waits until retry_backoff_ms after that refresh, however
    often it is requested; the background refresher then serves all of them at once."""
    server = await fake()
    cfg = check_config("common", bootstrap_servers=f"127.0.0.1:{server.port}",
                       retry_backoff_ms=100)
    async with ConnectionPool(cfg) as pool, trio.open_nursery() as nursery:
        cluster = Cluster(pool, cfg, topics=["gone"])
        await cluster.refresh()
        refreshed_at = trio.current_time()
        assert server.metadata_seen == 1 and cluster.metadata.exists("gone") is False
        await nursery.start(cluster.run)
        for _ in range(5):
            assert cluster.note_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            assert not cluster.needs_refresh
            await cluster.maybe_refresh()  # nothing to do yet
        assert cluster.refresh_due_at() == pytest.approx(refreshed_at + 0.1)
        await trio.testing.wait_all_tasks_blocked()
        assert server.metadata_seen == 1 and cluster.generation == 1
        mock_clock.jump(0.1)
        await cluster.wait_for_refresh(1)
        assert server.metadata_seen == 2
        # nothing requested since: the next one is due at metadata_max_age_ms
        assert not cluster.needs_refresh
        assert cluster.refresh_due_at() == pytest.approx(
            cluster.metadata.updated_at + cfg.metadata_max_age_ms / 1000)
        nursery.cancel_scope.cancel()
