"""The trio server: listeners, one task per connection, graceful drain.

Owns: `serve()`, the root of the broker's nursery tree (listeners, the metrics endpoint
when metrics.port is set, housekeeping, `metrics` events, signal watcher), and the
per-connection loop, which times every request for broker.metrics. Requests on one
connection are answered strictly in the order they arrived (Kafka's guarantee; clients
pipeline on it), but a connection never waits for another: each has its own task, so a
slow or stuck client only stalls itself.

A protocol violation on a connection (bad frame size, unparseable body, unknown api key,
unsupported version) closes that connection after one log line; the broker keeps serving
everyone else. Responses computed back to back are written with one send. A connection
that has no request in flight and sends nothing for connections.max.idle.ms is closed
(Kafka's Selector idle expiry).

Security, per listener (broker.security): an SSL or SASL_SSL listener's connection is
wrapped in trio's SSLStream and handshakes first (a client certificate's subject becomes
the principal); a SASL listener's connection then logs in through its SaslGate before any
request but ApiVersions is served, with frames capped at sasl.server.max.receive.size until
it has. A refused handshake or login, a request before the login, or a TLS ClientHello on a
listener without TLS closes that connection with one log line and an `auth_failure` event.

Client quotas (broker/quotas.py): a request's handling time counts against its client's
request_percentage, and an answer some quota throttles carries the throttle time in
throttle_time_ms; the connection then reads nothing more until that time has passed
(Kafka's muted channel), the answer going out first to a client that throttles itself
(KIP-219) and after the time to an older one. With no quota in the metadata image this
costs one test per request.

Housekeeping (event flush, checkpoints, retention, compaction) survives storage faults: a
step the file system refuses is logged and retried at its next turn, never fatal; an
offline log directory (broker/log_dirs.py) gets no checkpoint, retention or cleaning.
"""

from __future__ import annotations

import errno
import functools
import logging
import math
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from broker import timeouts
from broker import blocking
from broker.broker import Broker
from broker.controller.runtime import QuorumMismatch
from broker.handlers import HANDLERS
from broker.handlers.txn_markers import write_markers
from broker.handlers.controller import CONTROLLER_HANDLERS, CONTROLLER_LISTENER_APIS
from broker.handlers.context import ANONYMOUS, CloseConnection, RequestContext
from broker.log.log import fsync_plans
from broker.metrics import fetch_replica_id, request_name, serve_metrics
from broker.quotas import REQUEST_QUOTA_EXEMPT, client_throttles
from broker.security.authenticator import ListenerSecurity, SaslGate
from broker.security.tls import drain_decrypted, principal_from_cert
from protocol import framing
from protocol.connection import NEED_DATA, ServerConnection, encode_response
from protocol.errors import ProtocolError
from protocol.messages import APIS, FETCH, SASL_AUTHENTICATE, SASL_HANDSHAKE, SHARE_FETCH

# requests that may wait for records: answers queued before one go out first
_LONG_POLLS = frozenset({FETCH, SHARE_FETCH})

log = logging.getLogger("minibroker.server")

RECEIVE_SIZE = 256 * 1024
TLS_HANDSHAKE_TIMEOUT_S = 30.0
TLS_HANDSHAKE_RECORD = b"\x16\x03"  # a TLS record of type handshake, any TLS version


class RequestSampler:
    """Bounds request events to N per API per second, so the event log stays cheap."""

    def __init__(self, per_second: int):
        self.per_second = per_second
        self._window = -1
        self._counts: dict[int, int] = {}

    def allow(self, api_key: int, now_s: int) -> bool:
        if now_s != self._window:
            self._window, self._counts = now_s, {}
        n = self._counts.get(api_key, 0)
        if n >= self.per_second:
            return False
        self._counts[api_key] = n + 1
        return True


@dataclass(slots=True)
class _Session:
    """One connection's identity: where it came from, and who it proved to be."""
    peer: str
    listener: str | None
    security: ListenerSecurity | None
    gate: SaslGate | None  # set while a SASL listener's connection has not logged in
    principal: str
    # client quotas: the throttle time of the request just answered, and whether its
    # client waits it out itself (KIP-219); the loop mutes the connection for it
    throttle_ms: int = 0
    client_throttles: bool = True
    # logged in with a delegation token, which may not ask for tokens itself (Kafka's
    # KafkaPrincipal.tokenAuthenticated)
    token_authenticated: bool = False


class ListenError(Exception):
    """The listener could not be bound (port taken, address not ours). Only this failure
    is reported as "cannot listen"; any other ends the broker under its own name."""


class Server:
    def __init__(self, broker: Broker, handlers: dict | None = None, apis: dict | None = None):
        self.broker = broker
        self.handlers = HANDLERS if handlers is None else handlers
        self.apis = APIS if apis is None else apis
        # the data plane (client listener) counts the record bytes it sends (BytesOut);
        # the controller listener's Raft fetches carry the metadata log, not topics
        self.counts_bytes = apis is None
        if handlers is None:
            # the data plane's WriteTxnMarkers, for the markers this broker's own
            # transaction coordinator writes to partitions it leads
            broker.transactions.local_markers = write_markers
        self._api_names = {key: api.name for key, api in self.apis.items()}
        self.sampler = RequestSampler(broker.config.events_request_sample_per_second)
        max_idle_ms = broker.config.connections_max_idle_ms
        self.max_idle_s = max_idle_ms / 1000 if max_idle_ms >= 0 else math.inf
        self.in_flight = 0
        self.connections = 0
        self.idle_closed = 0  # connections closed by connections.max.idle.ms
        self._idle = trio.Event()
        self._idle.set()

    async def handle_connection(self, stream: trio.abc.Stream, peer: str | None = None,
                                listener: str | None = None) -> None:
        """Serve one connection until it closes; `peer` names it where the stream has no
        socket to ask (an in-process transport); `listener` is the name of the listener it
        came through (None: the broker's first)."""
        peer = peer or _peer_name(stream)
        security = self.broker.listener_security.get(listener) if listener else None
        self.connections += 1
        session: _Session | None = None
        try:
            principal = ANONYMOUS
            if security is not None and security.ssl_context is not None:
                secured = await self._tls_handshake(stream, security, peer)
                if secured is None:
                    return
                stream, principal = secured
            gate = (SaslGate(security, lambda: self.broker.metadata_cache.image,
                             self.broker.config.delegation_token_secret_key,
                             self.broker.now_ms)
                    if security is not None and security.uses_sasl else None)
            # before a SASL login a frame may be no larger than sasl.server.max.receive.size
            max_frame = (gate.security.max_receive_size if gate is not None
                         else self.broker.config.socket_request_max_bytes)
            conn = ServerConnection(max_frame, apis=self.apis)
            session = _Session(peer, listener, security, gate, principal)
            async with stream:
                await self._serve(stream, conn, session)
        except ProtocolError as e:
            log.warning("closing connection from %s: %s", peer, e)
            self.broker.events.emit("connection_error", peer=peer, error=str(e))
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass  # the client went away; nothing to answer
        except Exception as e:  # noqa: BLE001  a bug of ours: it costs this connection only
            log.exception("closing connection from %s after an internal error", peer)
            self.broker.events.emit("connection_error", peer=peer,
                                    error=f"internal error: {type(e).__name__}: {e}")
        finally:
            self.connections -= 1
            if session is not None:
                self.broker.shares.connection_closed(session)

    def auth_failure(self, session: _Session, mechanism: str, reason: str,
                     principal: str = "") -> None:
        """Log and record a refused TLS handshake or SASL login; the caller closes."""
        log.warning("authentication failed on listener %s from %s (%s): %s",
                    session.listener, session.peer, mechanism, reason)
        self.broker.events.emit("auth_failure", principal=principal,
                                listener=session.listener or "", peer=session.peer,
                                mechanism=mechanism, reason=reason)

    async def _tls_handshake(self, stream: trio.abc.Stream, security: ListenerSecurity,
                             peer: str) -> tuple[trio.SSLStream, str] | None:
        """The server side of TLS; (stream, principal), or None once refused and closed."""
        tls = trio.SSLStream(stream, security.ssl_context, server_side=True)
        reason = ""
        with timeouts.move_on_after(min(self.max_idle_s, TLS_HANDSHAKE_TIMEOUT_S)):
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as e:
                reason = str(e.__cause__ or e) or "the peer closed the connection"
            else:
                principal = principal_from_cert(tls.getpeercert()) or ANONYMOUS
                return tls, principal
        reason = reason or "no TLS handshake within the timeout"
        self.auth_failure(_Session(peer, security.name, security, None, ""), "SSL",
                          f"TLS handshake failed: {reason}")
        await trio.aclose_forcefully(stream)
        return None

    async def _serve(self, stream: trio.abc.Stream, conn: ServerConnection,
                     session: _Session) -> None:
        # entered with the node's timeouts, so that a paused node's idle limit waits too
        with timeouts.move_on_at(math.inf) as idle:
            await self._serve_requests(stream, conn, session, idle)
        if idle.cancel_called:
            self.idle_closed += 1
            log.debug("closing connection from %s: idle for %.0f ms (connections.max.idle.ms)",
                      session.peer, self.max_idle_s * 1000)

    async def _serve_requests(self, stream: trio.abc.Stream, conn: ServerConnection,
                              session: _Session, idle: trio.CancelScope) -> None:
        outbox: list[bytes] = []
        peer, listener = session.peer, session.listener
        tls = isinstance(stream, trio.SSLStream)
        first = True
        while True:
            # Idle means waiting for bytes with no request in flight, so the deadline runs
            # only around the receive: a long-polling fetch or a slow reader is never idle.
            # (One scope per connection, moved rather than re-made: this is the hot path.)
            timeouts.set_deadline(idle, trio.current_time() + self.max_idle_s)
            data = await stream.receive_some(RECEIVE_SIZE)
            if tls:
                data = drain_decrypted(stream, data, RECEIVE_SIZE)
            timeouts.set_deadline(idle, math.inf)
            if idle.cancel_called:
                # the limit passed just as bytes came in: close without reading them, as
                # Kafka's Selector does, rather than be cancelled halfway through a request
                return
            if not data:
                return
            if first and data[:2] == TLS_HANDSHAKE_RECORD and (
                    session.security is None or session.security.ssl_context is None):
                # a TLS client on a listener that is not TLS: its ClientHello would read
                # as a ~369 MB frame size; say what it is
                self.auth_failure(session, "PLAINTEXT" if session.security is None
                                  else session.security.protocol,
                                  "a TLS handshake on a listener without TLS")
                return
            first = False
            conn.receive_data(data)
            while True:
                if session.gate is not None and not session.gate.complete:
                    if not await self._authenticate(stream, conn, session, outbox):
                        return
                    if session.gate is not None:  # still authenticating: needs more bytes
                        break
                    continue
                request = conn.next_request()
                if request is NEED_DATA:
                    break
                if request.api_key in _LONG_POLLS and outbox:
                    # a fetch may wait; earlier answers must not wait with it
                    await stream.send_all(b"".join(outbox))
                    outbox.clear()
                try:
                    response = await self._dispatch(conn, request, peer, listener,
                                                    session.principal, session)
                except CloseConnection as e:
                    if outbox:  # what was answered before still goes out
                        await stream.send_all(b"".join(outbox))
                    log.info("closing connection from %s: %s", peer, e)
                    return
                if response is not None:
                    outbox.append(response)
                if session.throttle_ms:
                    await self._mute(stream, session, outbox)
            if outbox:
                await stream.send_all(b"".join(outbox) if len(outbox) > 1 else outbox[0])
                outbox.clear()

    async def _mute(self, stream: trio.abc.Stream, session: _Session,
                    outbox: list[bytes]) -> None:
        """Read nothing more from a throttled client until its throttle time has passed
        (Kafka's muted channel): a client that throttles itself has its answer at once,
        an older one only when the time is up."""
        throttle_s, session.throttle_ms = session.throttle_ms / 1000, 0
        if session.client_throttles and outbox:
            await stream.send_all(b"".join(outbox))
            outbox.clear()
        await timeouts.sleep(throttle_s)

    async def _authenticate(self, stream: trio.abc.Stream, conn: ServerConnection,
                            session: _Session, outbox: list[bytes]) -> bool:
        """Serve what has arrived of a SASL login; False: close the connection. Clears
        `session.gate` once the client has logged in (with NEED_DATA left to read when the
        gate still waits for bytes, the gate is kept)."""
        gate = session.gate
        assert gate is not None
        try:
            return await self._login_steps(stream, conn, session, gate, outbox)
        except ProtocolError as e:
            # an oversized frame (sasl.server.max.receive.size) or one that does not parse,
            # before the login: an authentication failure of this connection
            self._login_failed(session, gate, str(e))
            return False

    def _login_failed(self, session: _Session, gate: SaslGate, reason: str) -> None:
        self.auth_failure(session, gate.mechanism or "none", reason, gate.claimed_principal)

    async def _login_steps(self, stream: trio.abc.Stream, conn: ServerConnection,
                           session: _Session, gate: SaslGate, outbox: list[bytes]) -> bool:
        while not gate.complete:
            if gate.bare_tokens:  # after SaslHandshake v0: tokens without a Kafka header
                frame = conn.next_frame()
                if frame is NEED_DATA:
                    return True
                answer = gate.bare_token(frame)
                if answer.failure is not None:
                    self._login_failed(session, gate, answer.failure)
                    return False
                outbox.append(framing.frame(answer.body))
                continue
            request = conn.next_request()
            if request is NEED_DATA:
                return True
            body: Any = request.body  # None only for an ApiVersions of an unknown version
            if request.api_key == SASL_HANDSHAKE:
                answer = gate.handshake(request.api_version, body.mechanism)
            elif request.api_key == SASL_AUTHENTICATE:
                answer = gate.authenticate(body.auth_bytes)
            elif gate.allows_unauthenticated(request.api_key):
                response = await self._dispatch(conn, request, session.peer, session.listener,
                                                ANONYMOUS, session)
                if response is not None:
                    outbox.append(response)
                continue
            else:
                api = self.apis.get(request.api_key)
                self._login_failed(session, gate, f"{api.name if api else request.api_key} "
                                   "request before SASL authentication")
                return False
            outbox.append(conn.encode_response(request, answer.body))
            if answer.failure is not None:
                await stream.send_all(b"".join(outbox))
                outbox.clear()
                self._login_failed(session, gate, answer.failure)
                return False
        session.principal = gate.principal
        session.token_authenticated = gate.token_authenticated
        session.gate = None
        conn.max_frame = self.broker.config.socket_request_max_bytes
        log.debug("%s authenticated as %s with %s on listener %s", session.peer,
                  session.principal, gate.mechanism, session.listener)
        return True

    async def _dispatch(self, conn: ServerConnection, request, peer: str,
                        listener: str | None = None,
                        principal: str = ANONYMOUS, connection: object = None) -> bytes | None:
        started = trio.current_time()  # the run's clock: latencies follow a test's MockClock
        self.in_flight += 1
        self._idle = trio.Event() if self.in_flight == 1 else self._idle
        response: bytes | None = None
        error = ""
        handling = time.perf_counter()
        try:
            ctx = RequestContext(self.broker, request, peer, listener, principal, connection)
            body = await self.handlers[request.api_key](ctx)
            if self.counts_bytes and self.broker.metadata_cache.image.client_quotas:
                self._throttle(ctx, body, handling, connection)
            if body is None:  # acks=0 produce: no response at all
                return None
            if request.api_key == FETCH and self.counts_bytes:
                self.broker.metrics.fetched(body, fetch_replica_id(request.body) >= 0,
                                            self._topic_name)
            if request.body is None:  # ApiVersions of an unknown version: the v0 layout
                response = encode_response(request.api_key, 0, request.header.correlation_id, body)
            else:
                response = conn.encode_response(request, body)
            return response
        except BaseException as e:
            error = type(e).__name__
            raise
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()
            latency_ms = (trio.current_time() - started) * 1000
            name = self._api_names.get(request.api_key) or str(request.api_key)
            self.broker.metrics.request_done(
                request_name(name, request.api_key, request.body), latency_ms)
            if self.sampler.allow(request.api_key, self.broker.now_ms() // 1000):
                self.broker.events.emit(
                    "request", api=name, api_key=request.api_key,
                    api_version=request.api_version,
                    client_id=request.header.client_id or "",
                    latency_ms=round(latency_ms, 3),
                    request_bytes=request.size,
                    response_bytes=len(response) if response is not None else 0, error=error)

    def _throttle(self, ctx: RequestContext, body: Any, handling: float,
                  connection: object) -> None:
        """Client quotas on an answered request (broker.quotas): its handling time
        counted against request_percentage, and the longest throttle time any quota calls
        for put in the answer's throttle_time_ms and on the connection to be muted for."""
        request = ctx.request
        throttle = ctx.throttle_ms
        if (request.api_key not in REQUEST_QUOTA_EXEMPT
                and not (request.api_key == FETCH and fetch_replica_id(request.body) >= 0)):
            # the processor's time, as Kafka counts its threads' (on the perf counter,
            # not the run's clock, which a simulation's virtual time stands still on)
            handled_s = max(time.perf_counter() - handling - ctx.waited_s, 0.0)
            throttle = max(throttle, self.broker.quotas.request.record(
                self.broker.metadata_cache.image.client_quotas, ctx.user, ctx.client_id,
                handled_s * 100, self.broker.now_ms()))
        if throttle <= 0:
            return
        if body is not None:
            body["throttle_time_ms"] = throttle
        if isinstance(connection, _Session):
            connection.throttle_ms = throttle
            connection.client_throttles = client_throttles(request.api_key,
                                                           request.api_version)

    def _topic_name(self, topic_id) -> str | None:
        """A Fetch answer's topic id (v13+) as its name, for BytesOut's topic label."""
        topic = self.broker.metadata_cache.image.topic_by_id(topic_id) if topic_id else None
        return topic.name if topic is not None else None

    async def wait_idle(self) -> None:
        await self._idle.wait()


async def _wait_for_stop(install_signal_handlers: bool) -> str:
    if not install_signal_handlers:
        await trio.sleep(math.inf)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            return signal.Signals(signum).name
    return "signal"


def _peer_name(stream: trio.abc.Stream) -> str:
    if not isinstance(stream, trio.SocketStream):
        return "?"
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


CHECKPOINT_INTERVAL_S = 60  # log.flush.offset.checkpoint.interval.ms


class _StorageSteps:
    """Runs housekeeping steps that write to disk; an OSError is logged when a step starts
    failing and when it works again, and the step is simply retried at its next turn
    (a checkpoint that cannot be written only makes an unclean restart rescan more)."""

    def __init__(self):
        self.failing: dict[str, int] = {}  # step -> failures in a row

    def run(self, step: str, work: Callable[[], object]) -> None:
        try:
            work()
        except OSError as e:
            self._failed(step, e)
            return
        self._worked(step)

    async def run_async(self, step: str, work: Callable[[], Awaitable[object]]) -> None:
        try:
            await work()
        except OSError as e:
            self._failed(step, e)
            return
        self._worked(step)

    def _failed(self, step: str, e: OSError) -> None:
        if step not in self.failing:
            log.warning("%s failed, retrying at its next interval: %s", step, e)
        self.failing[step] = self.failing.get(step, 0) + 1

    def _worked(self, step: str) -> None:
        if (failures := self.failing.pop(step, 0)):
            log.warning("%s works again after %d failures", step, failures)


async def _checkpoint(broker: Broker) -> None:
    """Flush the active segments and write the checkpoints. The fsyncs run on a worker
    thread: on the event loop they stalled every request for as long as the disk took."""
    logs = broker.logs
    flushed = await blocking.run_disk(broker.fs, fsync_plans, logs.flush_plans())
    for plan in flushed:
        plan.log.flushed(plan)
    async with broker.checkpoint_lock:
        await blocking.run_disk(broker.fs, logs.write_checkpoints, logs.checkpoints())


async def _metrics_events(broker: Broker) -> None:
    """A `metrics` event every events.metrics.interval.ms (Broker.close writes the last)."""
    interval_ms = broker.config.events_metrics_interval_ms
    if interval_ms <= 0:
        return
    while True:
        await timeouts.sleep(interval_ms / 1000)
        broker.emit_metrics()


async def _housekeeping(broker: Broker) -> None:
    """Periodic work: flush events, checkpoint recovery points, retention, compaction."""
    retention_every = broker.config.log_retention_check_interval_ms / 1000
    cleaner_every = broker.config.log_cleaner_backoff_ms / 1000
    now = trio.current_time()
    next_retention, next_checkpoint = now + retention_every, now + CHECKPOINT_INTERVAL_S
    next_clean = now + cleaner_every
    steps = _StorageSteps()
    while True:
        await timeouts.sleep(0.5)
        broker.events.flush()  # buffered, best effort; flushed often so tools see events promptly
        if broker.log_dirs.all_offline:
            continue  # a failed directory is left alone until restart, as Kafka does (LogDirs)
        now = trio.current_time()
        if now >= next_checkpoint:
            # an unclean restart then rescans only what was written since
            await steps.run_async("checkpoint", functools.partial(_checkpoint, broker))
            next_checkpoint = now + CHECKPOINT_INTERVAL_S
        if now >= next_retention:
            steps.run("retention", broker.apply_retention)
            next_retention = now + retention_every
        if now >= next_clean:
            # keeps __consumer_offsets small and fast to load
            steps.run("log cleaning", broker.clean_compacted)
            next_clean = trio.current_time() + cleaner_every


def _first(group: BaseExceptionGroup) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _listen_failure(host: str, port: int, what: str, e: OSError) -> ListenError:
    """`cannot listen on H:P: address already in use`: the cause in the words a person
    looks for, not trio's 'Error while attempting to bind on address (...)'."""
    reasons = {errno.EADDRINUSE: "address already in use",
               errno.EADDRNOTAVAIL: "address not available on this host",
               errno.EACCES: "permission denied"}
    reason = reasons.get(e.errno or 0) or e.strerror or str(e)
    return ListenError(f"cannot listen on {host}:{port}{what}: {reason}")


async def _listen(host: str, port: int, what: str) -> list:
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as e:
        raise _listen_failure(host, port, what, e) from e


async def _check_free(host: str, port: int, what: str) -> None:
    """Bind (without listening) every address the listener will take, and let go again:
    a port already taken fails here, before the node starts its quorum and registers,
    rather than once it is unfenced. Binding alone accepts no connection, so nobody meets
    a broker that cannot serve yet. Port 0 is the kernel's choice: nothing to check."""
    if port == 0:
        return
    try:
        infos = await trio.socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                              flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in infos:
            with socket.socket(family, kind, proto) as probe:
                # as trio's listeners, so a port in TIME_WAIT is no false alarm
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
    except OSError as e:
        raise _listen_failure(host, port, what, e) from e


Listen = Callable[[str, int, str], Awaitable[list]]


async def serve(broker: Broker, *, task_status=trio.TASK_STATUS_IGNORED,
                install_signal_handlers: bool = True, listen: Listen | None = None,
                stop: Callable[[], Awaitable[str]] | None = None) -> None:
    """Run until SIGTERM/SIGINT (or cancellation), then drain and close cleanly.

    The one wiring of a node, used by `minibroker serve` and by the simulation (sim/),
    which gives `listen` (host, port, what -> trio Listeners; TCP sockets when None, after
    checking the client ports are free) and `stop` (returns the reason to stop; the
    signals when None).

    Start-up order, as a KRaft node starts: the controller listener (other voters need it to
    elect anyone), the quorum, then registration; the client listener opens only once the
    controller has unfenced this broker, so no client sees a broker that cannot serve yet.
    At shutdown a broker first moves its leaderships away (controlled shutdown) and a
    controller that leads the quorum hands it on (EndQuorumEpoch)."""
    server = Server(broker)
    broker.metrics.connection_count = lambda: server.connections
    reason = "cancelled"
    addresses = broker.addresses
    config = broker.config
    bind: Listen = listen if listen is not None else _listen
    try:
        reason = "cannot listen"
        controller_listeners = []
        if addresses.controller is not None:
            controller_listeners = await bind(addresses.controller.host,
                                                 addresses.controller.port,
                                                 " (controller listener)")
        metrics_listeners = []
        if config.metrics_port:
            # open from the start: a node still catching up, or fenced, is worth watching
            metrics_listeners = await _listen(config.metrics_host, config.metrics_port,
                                              " (metrics.port)")
        if addresses.is_broker and listen is None:
            for endpoint in addresses.clients:
                await _check_free(endpoint.host, endpoint.port, "")
        reason = "cancelled"
        listeners: list = []
        async with trio.open_nursery() as root:
            async with trio.open_nursery() as connections:
                async with trio.open_nursery() as accepting:
                    if controller_listeners:
                        controller_server = Server(broker, CONTROLLER_HANDLERS,
                                                   CONTROLLER_LISTENER_APIS)
                        assert addresses.controller is not None
                        root.start_soon(functools.partial(
                            trio.serve_listeners,
                            functools.partial(controller_server.handle_connection,
                                              listener=addresses.controller.name),
                            controller_listeners, handler_nursery=root))
                    if metrics_listeners:
                        await root.start(serve_metrics, broker, metrics_listeners)
                        log.info("metrics at http://%s:%d/metrics", config.metrics_host,
                                 config.metrics_port)
                    await broker.start(root)
                    root.start_soon(_housekeeping, broker)
                    root.start_soon(_metrics_events, broker)
                    if addresses.is_broker:
                        # bound only once unfenced: until then not even the kernel accepts
                        # a client's connection for a broker that cannot serve it
                        await broker.lifecycle.unfenced.wait()
                        reason = "cannot listen"
                        for endpoint in addresses.clients:
                            bound = await bind(endpoint.host, endpoint.port, "")
                            listeners.extend(bound)
                            # each connection knows its listener: answers name the
                            # addresses advertised on that one (inside or outside a
                            # container network)
                            handler = functools.partial(server.handle_connection,
                                                        listener=endpoint.name)
                            accepting.start_soon(functools.partial(
                                trio.serve_listeners, handler, bound,
                                handler_nursery=connections))
                            log.info("minibroker %d listening on %s:%d (%s)", broker.node_id,
                                     endpoint.host, endpoint.port, endpoint.name)
                        reason = "cancelled"
                    task_status.started(server)
                    reason = await (stop() if stop is not None
                                    else _wait_for_stop(install_signal_handlers))
                    await broker.stop_gracefully()
                    accepting.cancel_scope.cancel()  # stop accepting; finish what is in flight
                for listener in listeners:
                    await listener.aclose()
                with timeouts.move_on_after(broker.config.shutdown_drain_timeout_ms / 1000):
                    await server.wait_idle()
                connections.cancel_scope.cancel()
            root.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # a port taken and a quorum of other voters are the failures named as themselves
        # (main answers each in one line), whichever nursery they rose in
        named = group.subgroup((ListenError, QuorumMismatch))
        if named is not None:
            raise _first(named) from None
        raise
    finally:
        broker.close(reason)
        # "cannot listen" is main's one line on stderr already
        log.log(logging.DEBUG if reason == "cannot listen" else logging.INFO,
                "minibroker %d stopped (%s)", broker.node_id, reason)
