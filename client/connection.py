"""The trio pump over protocol.connection: one connection per broker node, and the pool.

Owns: `BrokerConnection` (one TCP stream to one broker driving the sans-IO
`protocol.connection.ClientConnection`), `ConnectionPool` (connections by address, node ids
mapped to addresses, least-loaded choice, reconnect backoff, idle reaping), `open_connection`
(a standalone connection for tests and tools) and `background_nursery`.

A BrokerConnection runs three things while it is open, all in the nursery given to `open()`:
- the writer task: the only task that writes to the stream. Callers hand it whole frames
  through an unbounded memory channel, so a caller cancelled by its timeout can never leave
  half a frame on the wire. It coalesces queued frames into one write.
- the reader task: the only task that reads. It feeds bytes to ClientConnection, which
  decodes each response with the (api key, version) remembered under its correlation id,
  and hands the response to the caller waiting under that id (one `_Waiter` per request).
- the callers: `await conn.request(api_key, body)` encodes, queues, and waits with a cancel
  scope of request_timeout_ms. Any number of requests may be in flight at once (pipelined);
  each caller gets its own response whatever order they complete in.

With security_protocol SSL or SASL_SSL the stream is wrapped in TLS as soon as it is
connected; with SASL_PLAINTEXT or SASL_SSL the connection logs in (client/security.py)
right after ApiVersions, before it is ready for anyone's requests.

On open, the connection negotiates versions with ApiVersions v3, as librdkafka does. A broker
that does not know v3 answers UNSUPPORTED_VERSION with a v0 body naming its own ApiVersions
range (KIP-511, docs/PROTOCOL.md §2); we ask once more at the highest version both sides know.
Every later request speaks protocol.versions.pick_version(api_key, broker_min, broker_max),
or fails with IncompatibleBrokerVersion when the ranges are disjoint.

Connections reach a broker over TCP (`trio.open_tcp_stream`) unless the context binds
another opener in `stream_opener`: an in-process broker for tests hands out memory streams
this way. Tasks inherit the binding from the task that starts them, so every connection a
client opens follows the binding that was in force when the client was created.

When the stream fails (EOF, reset, a response that does not parse) every request in flight
fails with KafkaConnectionError (retriable) and the connection becomes closed; `open()` may be
called again to reopen it. A request that times out fails alone with KafkaTimeoutError: the
connection stays open for the others and a late response is dropped.
"""

from __future__ import annotations

import logging
import math
import os
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from typing import Any, AsyncIterator, Awaitable, Callable, Literal, overload

import trio

from client.config import ClientConfig
from client.errors import (
    IncompatibleBrokerVersion, KafkaConnectionError, KafkaError, KafkaTimeoutError,
    NoBrokersAvailable, for_code,
)
from client.ratelimit import RateLimitedWarning
from client.security import sasl_credentials, tls_context
from protocol.connection import NEED_DATA, ClientConnection, Response
from protocol.errors import ErrorCode, ProtocolError
from protocol.framing import DEFAULT_MAX_FRAME
from protocol.messages import API_VERSIONS, APIS, SASL_AUTHENTICATE
from protocol.sasl import SaslError, SaslLogin, SaslLoginRefused
from protocol.versions import implemented, pick_version

__all__ = ["BrokerConnection", "ConnectionPool", "Response", "api_name", "background_nursery",
           "open_connection", "stream_opener", "CLIENT_SOFTWARE_NAME", "CLIENT_SOFTWARE_VERSION"]

CLIENT_SOFTWARE_NAME = "minibroker-client"
CLIENT_SOFTWARE_VERSION = "0.1.0"
FIRST_API_VERSIONS_VERSION = 3  # what librdkafka sends first (docs/PROTOCOL.md §1)
RECEIVE_SIZE = 1 << 16
MAX_COALESCED_WRITE = 1 << 20

_NEW, _CONNECTING, _READY, _CLOSED = "new", "connecting", "ready", "closed"
_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)

log = logging.getLogger("minibroker.client.connection")

# (host, port) -> an open byte stream to that broker; see the module docstring
StreamOpener = Callable[[str, int], Awaitable[trio.abc.Stream]]
stream_opener: ContextVar[StreamOpener] = ContextVar("stream_opener",
                                                     default=trio.open_tcp_stream)


def api_name(api_key: int) -> str:
    api = APIS.get(api_key)
    return api.name if api is not None else f"api key {api_key}"


@asynccontextmanager
async def background_nursery() -> AsyncIterator[trio.Nursery]:
    """A nursery for background tasks that are cancelled when the block ends.

    Unlike `async with trio.open_nursery()`, an exception raised by the block itself is not
    fed into the nursery, so it reaches the caller as itself rather than wrapped in an
    ExceptionGroup (background tasks here fail only from bugs): the nursery is exited with
    no exception (AsyncExitStack.aclose) once its tasks are cancelled."""
    stack = AsyncExitStack()
    nursery = await stack.enter_async_context(trio.open_nursery())
    try:
        yield nursery
    finally:
        nursery.cancel_scope.cancel()
        await stack.aclose()


def _connect_reason(error: OSError) -> str:
    """Why a connect failed, as the operating system says it ("Connection refused"):
    trio.open_tcp_stream wraps the failures of its attempts ("all attempts to connect to
    ... failed") and keeps them in its cause; the first with an errno speaks for all."""
    pending: list[BaseException] = [error]
    while pending:
        e = pending.pop(0)
        if isinstance(e, OSError) and e.errno:
            return os.strerror(e.errno)
        if isinstance(e, BaseExceptionGroup):
            pending.extend(e.exceptions)
        if e.__cause__ is not None:
            pending.append(e.__cause__)
    return str(error)


class _Waiter:
    """The caller's side of one request in flight: resolved or failed exactly once."""

    __slots__ = ("event", "response", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: Response | None = None
        self.error: KafkaError | None = None

    def resolve(self, response: Response) -> None:
        if not self.event.is_set():
            self.response = response
            self.event.set()

    def fail(self, error: KafkaError) -> None:
        if not self.event.is_set():
            self.error = error
            self.event.set()


class BrokerConnection:
    """One connection to one broker: pipelined requests matched by correlation id.

        async with background_nursery() as nursery:
            conn = BrokerConnection("127.0.0.1", 9092, config)
            await conn.open(nursery)              # TCP connect + ApiVersions
            resp = await conn.request(METADATA, {"topics": None})
            resp.body.brokers, resp.api_version
    """

    def __init__(self, host: str, port: int, config: ClientConfig | None = None, *,
                 node_id: int | None = None, max_frame: int = DEFAULT_MAX_FRAME):
        self.host, self.port = host, port
        self.node_id = node_id
        self.config = config if config is not None else ClientConfig()
        self._tls = tls_context(self.config)  # None on PLAINTEXT and SASL_PLAINTEXT
        self.max_frame = max_frame
        self.api_versions: dict[int, tuple[int, int]] = {}  # api key -> broker (min, max)
        self.api_versions_version: int | None = None  # the ApiVersions version that worked
        self.failure: KafkaError | None = None  # why the connection last closed
        self.last_active = 0.0  # trio clock, for idle reaping
        self._state = _NEW
        self._protocol: ClientConnection | None = None
        self._pending: dict[int, _Waiter] = {}
        self._outgoing: trio.MemorySendChannel | None = None
        self._cancel_scope: trio.CancelScope | None = None
        self._opening = False
        self._finished = trio.Event()  # set while no run is under way
        self._finished.set()
        # Pool connections outlive a cancellation of the tasks around them once ready: a
        # consumer cancelled by its caller still sends its final commit and LeaveGroup
        # over them (within its close budget); only close() ends them. `retired`: the pool
        # is closing, the connection must not become ready again.
        self.shield_when_ready = False
        self.retired = False

    # -- state -------------------------------------------------------------------------

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def is_ready(self) -> bool:
        return self._state == _READY

    @property
    def is_closed(self) -> bool:
        return self._state in (_NEW, _CLOSED)

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered, failed or timed out."""
        return len(self._pending)

    def __repr__(self) -> str:
        node = "" if self.node_id is None else f" node {self.node_id}"
        return f"<BrokerConnection {self.address}{node} {self._state} in_flight={self.in_flight}>"

    # -- opening and closing ---------------------------------------------------------

    async def open(self, nursery: trio.Nursery) -> None:
        """Connect and negotiate versions; the connection's tasks then run in `nursery`.

        Raises KafkaConnectionError (cannot connect, lost during the handshake),
        KafkaTimeoutError or IncompatibleBrokerVersion; the connection is then closed."""
        if self._state in (_CONNECTING, _READY) or self._opening:
            raise RuntimeError(f"{self!r} is already open")
        self._opening = True
        try:
            await self._finished.wait()  # the previous run's cleanup, if it is still going
            await nursery.start(self._run)
        finally:
            self._opening = False

    async def close(self) -> None:
        """Close the connection; requests in flight fail with KafkaConnectionError."""
        if self._state in (_CONNECTING, _READY):
            if self.failure is None:
                self.failure = KafkaConnectionError(f"connection to {self.address} closed")
            if self._cancel_scope is not None:
                self._cancel_scope.cancel()
        await self._finished.wait()

    async def wait_closed(self) -> None:
        """Return once the connection is closed (at once if it is not open)."""
        await self._finished.wait()

    async def _run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._state = _CONNECTING
        self.failure = None
        self._finished = trio.Event()
        self._protocol = ClientConnection(self.config.client_id, self.max_frame)
        self.api_versions = {}
        stream: trio.abc.Stream | None = None
        started = False
        error: KafkaError | None = None
        send, receive = trio.open_memory_channel(math.inf)
        self._outgoing = send
        # close() and _fail() cancel this scope: it covers the connect, the handshake and the
        # two tasks, so a close during the handshake ends the attempt too
        scope = self._cancel_scope = trio.CancelScope()
        try:
            with scope:
                stream = await self._connect()
                self.last_active = trio.current_time()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, stream, receive)
                    nursery.start_soon(self._reader, stream)
                    try:
                        await self._handshake()
                    except KafkaError as e:
                        error = e
                        self._fail(e)
                    else:
                        if self.retired:
                            error = KafkaConnectionError(
                                f"connection to {self.address}: the client is closing")
                            self._fail(error)
                        elif self._state == _CONNECTING:  # not failed meanwhile
                            scope.shield = self.shield_when_ready
                            self._state = _READY
                            started = True
                            task_status.started()
        except KafkaError as e:
            error = e
        finally:
            self._state = _CLOSED
            self._cancel_scope = None
            send.close()
            if self.failure is None:
                self.failure = error or KafkaConnectionError(
                    f"connection to {self.address} closed")
            self._fail_pending(self.failure)
            try:
                if stream is not None:
                    await trio.aclose_forcefully(stream)
            finally:
                # set even when the close above is cancelled, or close() would wait forever
                self._finished.set()
        if not started:
            raise (error or self.failure).clone()

    async def _connect(self) -> trio.abc.Stream:
        timeout_ms = self.config.socket_connection_setup_timeout_ms
        try:
            with trio.fail_after(timeout_ms / 1000):
                stream = await stream_opener.get()(self.host, self.port)
                if self._tls is None:
                    return stream
                tls = trio.SSLStream(stream, self._tls, server_hostname=self.host)
                try:
                    await tls.do_handshake()
                except trio.BrokenResourceError as e:
                    await trio.aclose_forcefully(stream)
                    raise KafkaConnectionError(f"TLS handshake with {self.address} failed: "
                                               f"{e.__cause__ or e}") from e
                return tls
        except trio.TooSlowError:
            raise KafkaConnectionError(f"cannot connect to {self.address}: no answer within "
                                       f"{timeout_ms} ms") from None
        except OSError as e:
            raise KafkaConnectionError(
                f"cannot connect to {self.address}: {_connect_reason(e)}") from e

    async def _handshake(self) -> None:
        """ApiVersions v3, then (KIP-511) once more at the version the broker names."""
        body = {"client_software_name": CLIENT_SOFTWARE_NAME,
                "client_software_version": CLIENT_SOFTWARE_VERSION}
        version = FIRST_API_VERSIONS_VERSION
        resp = await self._roundtrip(API_VERSIONS, version, body)
        if resp.body.error_code == ErrorCode.UNSUPPORTED_VERSION:
            theirs = {k.api_key: (k.min_version, k.max_version) for k in resp.body.api_keys}
            rng = theirs.get(API_VERSIONS)
            fallback = 0 if rng is None else pick_version(API_VERSIONS, *rng)
            if fallback is None:
                assert rng is not None
                raise IncompatibleBrokerVersion(
                    f"the broker at {self.address} serves ApiVersions {rng[0]}-{rng[1]}, "
                    f"we speak {self._ours(API_VERSIONS)}")
            version = fallback
            resp = await self._roundtrip(API_VERSIONS, version, body)
        if resp.body.error_code != ErrorCode.NONE:
            code = ErrorCode.of(resp.body.error_code)
            raise IncompatibleBrokerVersion(
                f"ApiVersions v{version} to {self.address} failed: {code.name}")
        self.api_versions = {k.api_key: (k.min_version, k.max_version)
                             for k in resp.body.api_keys}
        self.api_versions_version = version
        credentials = sasl_credentials(self.config)
        if credentials is not None:
            await self._sasl_login(*credentials)

    async def _sasl_login(self, mechanism: str, username: str, password: str,
                          token_auth: bool = False) -> None:
        """SaslHandshake v1, then the mechanism's tokens in SaslAuthenticate requests
        (`token_auth`: a delegation token's SCRAM login, KIP-48)."""
        version = pick_version(SASL_AUTHENTICATE,
                               *self.api_versions.get(SASL_AUTHENTICATE, (0, 1))) or 0
        login = SaslLogin(mechanism, username, password, version, token_auth=token_auth)
        try:
            while (request := login.request()) is not None:
                login.response((await self._roundtrip(*request)).body)
        except SaslLoginRefused as e:
            raise for_code(e.error_code, f"{e} ({self.address})") from None
        except SaslError as e:
            raise for_code(ErrorCode.SASL_AUTHENTICATION_FAILED,
                           f"{mechanism} login to {self.address}: {e}") from None

    # -- the two tasks ---------------------------------------------------------------

    async def _writer(self, stream: trio.abc.Stream,
                      receive: trio.MemoryReceiveChannel) -> None:
        try:
            async with receive:
                async for frame in receive:
                    chunks, size = [frame], len(frame)
                    while size < MAX_COALESCED_WRITE:
                        try:
                            more = receive.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                        chunks.append(more)
                        size += len(more)
                    await stream.send_all(chunks[0] if len(chunks) == 1 else b"".join(chunks))
                    self.last_active = trio.current_time()
        except _STREAM_ERRORS as e:
            self._fail(KafkaConnectionError(
                f"connection to {self.address} lost while sending: {e or type(e).__name__}"))

    async def _reader(self, stream: trio.abc.Stream) -> None:
        protocol = self._protocol
        assert protocol is not None  # open() makes it before starting the tasks
        try:
            while True:
                data = await stream.receive_some(RECEIVE_SIZE)
                if not data:
                    self._fail(KafkaConnectionError(
                        f"the broker at {self.address} closed the connection"))
                    return
                self.last_active = trio.current_time()
                protocol.receive_data(data)
                while (resp := protocol.next_response()) is not NEED_DATA:
                    waiter = self._pending.pop(resp.correlation_id, None)
                    if waiter is not None:  # None: its caller timed out; drop it
                        waiter.resolve(resp)
        except _STREAM_ERRORS as e:
            self._fail(KafkaConnectionError(
                f"connection to {self.address} lost: {e or type(e).__name__}"))
        except ProtocolError as e:
            self._fail(KafkaConnectionError(
                f"the broker at {self.address} broke the protocol: {e}"))

    def _fail(self, error: KafkaError) -> None:
        """The connection is unusable: fail every request in flight and stop both tasks."""
        if self.failure is None:
            self.failure = error
        if self._state in (_CONNECTING, _READY):
            self._state = _CLOSED
        self._fail_pending(self.failure)
        if self._outgoing is not None:
            self._outgoing.close()
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    def _fail_pending(self, error: KafkaError) -> None:
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            # one exception object per caller: each raise writes its own traceback
            waiter.fail(error.clone())

    # -- requests --------------------------------------------------------------------

    def _ours(self, api_key: int) -> str:
        rng = implemented(api_key)
        return "none" if rng is None else f"{rng[0]}-{rng[1]}"

    def version_for(self, api_key: int) -> int:
        """The version we speak for `api_key`: the highest both sides support."""
        rng = self.api_versions.get(api_key)
        if rng is None:
            raise IncompatibleBrokerVersion(
                f"the broker at {self.address} does not serve {api_name(api_key)} "
                f"(api key {api_key})")
        version = pick_version(api_key, *rng)
        if version is None:
            raise IncompatibleBrokerVersion(
                f"no {api_name(api_key)} version in common with the broker at {self.address}: "
                f"it serves {rng[0]}-{rng[1]}, we speak {self._ours(api_key)}")
        return version

    def supports(self, api_key: int) -> bool:
        rng = self.api_versions.get(api_key)
        return rng is not None and pick_version(api_key, *rng) is not None

    @overload
    async def request(self, api_key: int, body: Any, version: int | None = None, *,
                      timeout_ms: int | None = None,
                      expect_response: Literal[True] = True) -> Response: ...
    @overload
    async def request(self, api_key: int, body: Any, version: int | None = None, *,
                      timeout_ms: int | None = None,
                      expect_response: bool) -> Response | None: ...
    async def request(self, api_key: int, body: Any, version: int | None = None, *,
                      timeout_ms: int | None = None,
                      expect_response: bool = True) -> Response | None:
        """Send one request and wait for its response (None when `expect_response` is
        False, as for Produce with acks=0: it returns once the frame is queued).

        `version` None picks the highest version both sides support. Raises
        KafkaConnectionError (not open, or lost while waiting), KafkaTimeoutError (no
        answer within `timeout_ms`, default request_timeout_ms) or
        IncompatibleBrokerVersion. Kafka error codes inside the body are not raised here."""
        if self._state != _READY:
            reason = f": {self.failure}" if self.failure is not None else ""
            raise KafkaConnectionError(f"connection to {self.address} is not open{reason}")
        if version is None:
            version = self.version_for(api_key)
        else:
            rng = self.api_versions.get(api_key)
            if rng is None or not rng[0] <= version <= rng[1] or pick_version(
                    api_key, version, version) is None:
                raise IncompatibleBrokerVersion(
                    f"{api_name(api_key)} v{version} is not served by both sides (the broker "
                    f"at {self.address}: {'none' if rng is None else f'{rng[0]}-{rng[1]}'}, "
                    f"we speak {self._ours(api_key)})")
        return await self._roundtrip(api_key, version, body, timeout_ms, expect_response)

    @overload
    async def _roundtrip(self, api_key: int, version: int, body: Any,
                         timeout_ms: int | None = None,
                         expect_response: Literal[True] = True) -> Response: ...
    @overload
    async def _roundtrip(self, api_key: int, version: int, body: Any,
                         timeout_ms: int | None, expect_response: bool) -> Response | None: ...
    async def _roundtrip(self, api_key: int, version: int, body: Any,
                         timeout_ms: int | None = None,
                         expect_response: bool = True) -> Response | None:
        assert self._protocol is not None and self._outgoing is not None  # open() made them
        correlation_id, frame = self._protocol.send_request(api_key, version, body,
                                                            expect_response)
        waiter = None
        if expect_response:
            waiter = self._pending[correlation_id] = _Waiter()
        try:
            self._outgoing.send_nowait(frame)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self._pending.pop(correlation_id, None)
            raise KafkaConnectionError(
                f"connection to {self.address} closed: {self.failure}") from None
        if waiter is None:
            return None
        timeout_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        try:
            with trio.move_on_after(timeout_ms / 1000):
                await waiter.event.wait()
        finally:
            if self._pending.get(correlation_id) is waiter:
                del self._pending[correlation_id]
        if not waiter.event.is_set():
            raise KafkaTimeoutError(f"no answer to {api_name(api_key)} v{version} from "
                                    f"{self.address} within {timeout_ms} ms")
        if waiter.error is not None:
            raise waiter.error
        return waiter.response


@asynccontextmanager
async def open_connection(host: str, port: int, config: ClientConfig | None = None,
                          **kwargs: Any) -> AsyncIterator[BrokerConnection]:
    """A standalone open connection, closed when the block ends."""
    async with background_nursery() as nursery:
        conn = BrokerConnection(host, port, config, **kwargs)
        await conn.open(nursery)
        try:
            yield conn
        finally:
            await conn.close()


class ConnectionPool:
    """Connections by broker address; node ids map to addresses from cluster metadata.

        async with ConnectionPool(config) as pool:
            conn = await pool.least_loaded()    # any live broker (bootstrap if none yet)
            pool.update_nodes({0: ("127.0.0.1", 9092)})
            conn = await pool.get(0)

    Bootstrap addresses are tried in order until one answers. `get(node, channel="group")`
    is a second connection to the node, kept apart from the node's ordinary one: a broker
    answers a connection's requests in order, so a consumer's JoinGroup (which the broker
    holds until the rebalance completes) must not sit in front of its Fetch requests; Java
    opens the coordinator's connection apart for the same reason. Channel connections never
    serve as the least-loaded one. A connection that failed is reopened on next use, after
    reconnect_backoff_ms doubling per consecutive failure up to reconnect_backoff_max_ms.
    Connections idle for connections_max_idle_ms are closed.

    A failed connect is logged as a warning naming the address and the reason, at the first
    failure and then at most every WARN_INTERVAL_S per address while it keeps failing
    (client/ratelimit.py); the first success after that is logged at info.
    """

    def __init__(self, config: ClientConfig | None = None):
        self.config = config if config is not None else ClientConfig()
        self.nodes: dict[int, tuple[str, int]] = {}  # node id -> address, from metadata
        # keyed by (host, port), or (host, port, channel) for a channel connection
        self._conns: dict[tuple, BrokerConnection] = {}
        self._connecting: dict[tuple, trio.Event] = {}
        self._failures: dict[tuple, tuple[int, float]] = {}  # count, last time
        self._unreachable = RateLimitedWarning(log)
        self._closing = False
        self._nursery: trio.Nursery | None = None
        self._exit_stack: AsyncExitStack | None = None

    async def __aenter__(self) -> "ConnectionPool":
        async with AsyncExitStack() as stack:
            self._nursery = await stack.enter_async_context(background_nursery())
            stack.push_async_callback(self._close_connections)
            if self.config.connections_max_idle_ms >= 0:
                self._nursery.start_soon(self._reap_idle)
            self._exit_stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info) -> None:
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            await stack.aclose()

    async def _close_connections(self) -> None:
        self._closing = True
        try:
            with trio.CancelScope(shield=True):
                for conn in self._conns.values():
                    conn.retired = True  # one that is still connecting will not be kept
                for conn in list(self._conns.values()):
                    await conn.close()
        finally:
            self._nursery = None

    # -- addresses ---------------------------------------------------------------------

    def update_nodes(self, nodes: dict[int, tuple[str, int]]) -> None:
        """Node id -> (host, port), as the latest Metadata response lists them."""
        self.nodes = dict(nodes)
        for key, conn in self._conns.items():
            conn.node_id = next((n for n, a in self.nodes.items() if a == key[:2]), None)

    def connection(self, node_id: int) -> BrokerConnection | None:
        """The node's connection object if one exists (open or not), without connecting."""
        address = self.nodes.get(node_id)
        return None if address is None else self._conns.get(address)

    @property
    def connections(self) -> list[BrokerConnection]:
        return list(self._conns.values())

    def in_backoff(self, address: tuple[str, int]) -> bool:
        failures, when = self._failures.get(address, (0, 0.0))
        return failures > 0 and trio.current_time() < when + self.config.reconnect_backoff_s(
            failures)

    # -- connecting --------------------------------------------------------------------

    async def get(self, node_id: int, channel: str | None = None) -> BrokerConnection:
        """A ready connection to the node (connecting or reconnecting as needed); with
        `channel`, the node's connection for that channel (class docstring)."""
        address = self.nodes.get(node_id)
        if address is None:
            raise KafkaConnectionError(f"node {node_id} is not in the cluster metadata")
        return await self.connect(*address, node_id=node_id, channel=channel)

    async def connect(self, host: str, port: int, *, node_id: int | None = None,
                      channel: str | None = None) -> BrokerConnection:
        """A ready connection to the address; concurrent callers share one attempt."""
        if self._nursery is None:
            raise RuntimeError("the connection pool is not open (use `async with`)")
        if self._closing:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: the client is closing")
        address = (host, port) if channel is None else (host, port, channel)
        while True:
            conn = self._conns.get(address)
            if conn is not None and conn.is_ready:
                return conn
            attempt = self._connecting.get(address)
            if attempt is None:
                break
            await attempt.wait()
            conn = self._conns.get(address)
            if conn is not None and conn.is_ready:
                return conn
            if conn is not None and conn.failure is not None:
                raise conn.failure.clone()
        attempt = self._connecting[address] = trio.Event()
        try:
            failures, when = self._failures.get(address, (0, 0.0))
            if failures:
                await trio.sleep_until(when + self.config.reconnect_backoff_s(failures))
            conn = self._conns.get(address)
            if conn is None:
                if node_id is None:
                    node_id = next((n for n, a in self.nodes.items() if a == address[:2]),
                                   None)
                conn = self._conns[address] = BrokerConnection(host, port, self.config,
                                                               node_id=node_id)
                conn.shield_when_ready = True  # only _close_connections ends it
            try:
                await conn.open(self._nursery)
            except KafkaError as e:
                self._failures[address] = (failures + 1, trio.current_time())
                self._unreachable.failed(address[:2], f"{e.message or e}")
                raise
            self._failures.pop(address, None)
            self._unreachable.recovered(address[:2], f"connected to {conn.address} again")
            return conn
        finally:
            del self._connecting[address]
            attempt.set()

    def least_loaded_ready(self) -> BrokerConnection | None:
        """The ready connection with the fewest requests in flight, if any is open."""
        ready = [c for key, c in self._conns.items() if c.is_ready and len(key) == 2]
        return min(ready, key=lambda c: c.in_flight) if ready else None

    async def least_loaded(self) -> BrokerConnection:
        """The ready connection with the fewest requests in flight (where FindCoordinator
        and Metadata go). With none open: known nodes, then the bootstrap addresses, in
        order (those not backing off first), until one answers; else NoBrokersAvailable."""
        conn = self.least_loaded_ready()
        if conn is not None:
            return conn
        candidates: list[tuple[str, int]] = []
        for address in [*self.nodes.values(), *self.config.bootstrap_addresses]:
            if address not in candidates:
                candidates.append(address)
        candidates.sort(key=self.in_backoff)  # stable: order kept within each group
        failures = []
        for host, port in candidates:
            try:
                return await self.connect(host, port)
            except (KafkaConnectionError, KafkaTimeoutError, IncompatibleBrokerVersion) as e:
                failures.append(f"{host}:{port}: {e}")
        raise NoBrokersAvailable("no broker answered: " + "; ".join(failures))

    async def bootstrap(self) -> BrokerConnection:
        """What entering a Producer or Consumer does, as aiokafka's start(): connect to the
        bootstrap addresses in order, each once, until one answers ApiVersions. When none
        does, KafkaConnectionError "unable to bootstrap from [...]" with each reason. The
        bound: per address, socket_connection_setup_timeout_ms to connect plus
        request_timeout_ms for the handshake (a refused connection fails at once)."""
        conn = self.least_loaded_ready()
        if conn is not None:
            return conn
        reasons = []
        for host, port in self.config.bootstrap_addresses:
            try:
                return await self.connect(host, port)
            except (KafkaConnectionError, KafkaTimeoutError, IncompatibleBrokerVersion) as e:
                reasons.append(e.message or str(e))
        raise KafkaConnectionError(f"unable to bootstrap from "
                                   f"{list(self.config.bootstrap_servers)}: "
                                   + "; ".join(reasons))

    async def close_node(self, node_id: int) -> None:
        conn = self.connection(node_id)
        if conn is not None:
            await conn.close()

    async def _reap_idle(self) -> None:
        idle_s = self.config.connections_max_idle_ms / 1000
        while True:
            now = trio.current_time()
            next_check = now + max(idle_s, 0.001)
            for conn in list(self._conns.values()):
                if conn.is_ready and conn.in_flight == 0:
                    expiry = conn.last_active + idle_s
                    if expiry <= now:
                        await conn.close()
                    else:
                        next_check = min(next_check, expiry)
            await trio.sleep_until(next_check)
