"""One node's connection to another node's listener: `PeerChannel`.

Owns: `PeerChannel` (lazy connect, pipelined requests matched by correlation id, reconnect
with backoff, close), `PeerUnavailable` and `PeerTimeout` (what a request raises when it
gets no answer), and `open_peer_channel` (a channel with its own background tasks).

The versions are the caller's: a peer is another node of our own cluster, so there is no
ApiVersions handshake; the caller names the version it speaks (raft_codec.VERSIONS, say).
The registry defaults to every declared API (`ALL_APIS`), as the controller listener on
the other side serves control-plane APIs and chosen client ones.

While connected, two background tasks run in the nursery given to the channel:
- the writer, the only task that writes: callers queue whole frames on an unbounded memory
  channel, so a caller cancelled by its timeout never leaves half a frame on the wire;
- the reader, the only task that reads: it feeds `protocol.connection.ClientConnection`,
  which decodes each response by the (api key, version) remembered under its correlation
  id, and wakes the caller waiting under that id. Any number of requests may be in flight.

A connect failure, a lost connection or a response that does not parse fails every request
in flight with PeerUnavailable and closes the connection. The next request reconnects, but
not before the backoff since the last failure has passed (a request before then fails at
once, as the Raft node has its own retry deadlines and must not stall); the backoff doubles
with each failed connect, up to a maximum, and starts over once a connect succeeds. A
request that times out fails alone with PeerTimeout: the connection stays open for the
others and its late answer is dropped.
"""

from __future__ import annotations

import math
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping

import trio
from construct import Container

from broker import timeouts
from broker.security.tls import drain_decrypted
from protocol.connection import NEED_DATA, ClientConnection, Response
from protocol.errors import ProtocolError
from protocol.framing import DEFAULT_MAX_FRAME
from protocol.messages import ALL_APIS, Api

RECEIVE_SIZE = 1 << 16
MAX_COALESCED_WRITE = 1 << 20
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_BACKOFF_S = 0.05  # Kafka's reconnect.backoff.ms
DEFAULT_BACKOFF_MAX_S = 1.0  # Kafka's reconnect.backoff.max.ms

Opener = Callable[[str, int], Awaitable[trio.abc.Stream]]
_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class PeerUnavailable(Exception):
    """No answer from the peer: it could not be reached, the connection was lost before
    the answer came, the channel is backing off after such a failure, or it is closed."""


class PeerTimeout(PeerUnavailable):
    """The peer did not answer within the request's timeout (the connection stays open)."""


class _Waiter:
    """The caller's side of one request in flight: resolved or failed exactly once."""

    __slots__ = ("event", "response", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: Response | None = None
        self.error: PeerUnavailable | None = None

    def settle(self, response: Response | None, error: PeerUnavailable | None) -> None:
        if not self.event.is_set():
            self.response, self.error = response, error
            self.event.set()


class _Link:
    """One TCP connection and its two tasks; closed for good once it fails."""

    def __init__(self, address: str, stream: trio.abc.Stream, protocol: ClientConnection,
                 on_closed: Callable[["_Link"], None]):
        self.address = address
        self.on_closed = on_closed
        self.stream = stream
        self.protocol = protocol
        self.pending: dict[int, _Waiter] = {}
        self.outgoing: trio.MemorySendChannel[bytes]
        self._incoming: trio.MemoryReceiveChannel[bytes]
        self.outgoing, self._incoming = trio.open_memory_channel(math.inf)
        self.scope = trio.CancelScope()
        self.closed = False
        self.failure: str | None = None
        self.finished = trio.Event()

    def send(self, api_key: int, api_version: int, body: Any) -> tuple[int, _Waiter]:
        if self.closed:
            raise PeerUnavailable(f"connection to {self.address} closed: {self.failure}")
        correlation_id, frame = self.protocol.send_request(api_key, api_version, body)
        waiter = self.pending[correlation_id] = _Waiter()
        self.outgoing.send_nowait(frame)  # unbounded: never blocks
        return correlation_id, waiter

    def fail(self, reason: str) -> None:
        """Unusable from now: every request in flight fails and both tasks stop."""
        if self.failure is None:
            self.failure = reason
        if not self.closed:
            self.closed = True
            # at once, not when the tasks end: a caller woken by this failure may ask again
            # before they do, and must find the backoff in force
            self.on_closed(self)
        pending, self.pending = self.pending, {}
        for waiter in pending.values():
            waiter.settle(None, PeerUnavailable(f"connection to {self.address}: {reason}"))
        self.outgoing.close()
        self.scope.cancel()

    async def run(self) -> None:
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer)
                    nursery.start_soon(self._reader)
        finally:
            self.fail(self.failure or "closed")
            try:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(self.stream)
            finally:
                self.finished.set()

    async def _writer(self) -> None:
        try:
            async with self._incoming:
                async for frame in self._incoming:
                    chunks, size = [frame], len(frame)
                    while size < MAX_COALESCED_WRITE:
                        try:
                            more = self._incoming.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                        chunks.append(more)
                        size += len(more)
                    await self.stream.send_all(b"".join(chunks))
        except _STREAM_ERRORS as e:
            self.fail(f"lost while sending: {e or type(e).__name__}")

    async def _reader(self) -> None:
        tls = isinstance(self.stream, trio.SSLStream)
        try:
            while True:
                data = await self.stream.receive_some(RECEIVE_SIZE)
                if tls:  # a replica fetch's answer over TLS: every record received at once
                    data = drain_decrypted(self.stream, data, RECEIVE_SIZE)
                if not data:
                    self.fail("the peer closed the connection")
                    return
                self.protocol.receive_data(data)
                while (resp := self.protocol.next_response()) is not NEED_DATA:
                    waiter = self.pending.pop(resp.correlation_id, None)
                    if waiter is not None:  # None: its caller timed out; drop the answer
                        waiter.settle(resp, None)
        except _STREAM_ERRORS as e:
            self.fail(f"lost: {e or type(e).__name__}")
        except ProtocolError as e:
            self.fail(f"the peer broke the protocol: {e}")


class PeerChannel:
    """Requests to one peer node over one lazily opened, pipelined connection.

        async with trio.open_nursery() as nursery:
            peer = PeerChannel("controller-1", 9093, nursery)
            body = await peer.request(VOTE, 1, vote_body, timeout_s=2.0)
            await peer.aclose()

    `nursery` runs the connection's reader and writer; it must outlive the channel (close
    the channel first). `opener` replaces `trio.open_tcp_stream`, e.g. with memory
    streams in tests.
    """

    def __init__(self, host: str, port: int, nursery: trio.Nursery, *,
                 apis: Mapping[int, Api] = ALL_APIS, client_id: str = "minibroker-peer",
                 opener: Opener | None = None,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 backoff_s: float = DEFAULT_BACKOFF_S,
                 backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
                 max_frame: int = DEFAULT_MAX_FRAME):
        self.host, self.port = host, port
        self.apis = apis
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.max_frame = max_frame
        self.connects = 0  # connections opened, for tests and metrics
        self.last_failure: str | None = None
        self._nursery = nursery
        self._opener: Opener = opener if opener is not None else trio.open_tcp_stream
        self._link: _Link | None = None
        self._connect_lock = trio.Lock()
        self._backoff = backoff_s
        self._retry_at = -math.inf  # trio clock: no connect attempt before it
        self._closed = False

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def is_connected(self) -> bool:
        return self._link is not None and not self._link.closed

    @property
    def in_flight(self) -> int:
        return 0 if self._link is None else len(self._link.pending)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "connected" if self.is_connected else "idle"
        return f"<PeerChannel {self.address} {state} in_flight={self.in_flight}>"

    async def request(self, api_key: int, api_version: int, body: Any,
                      timeout_s: float) -> Container:
        """Send one request and return the decoded response body.

        `timeout_s` covers connecting too. Raises PeerTimeout when no answer came in time,
        PeerUnavailable when the peer cannot be reached, the connection is lost before the
        answer, the channel is backing off or closed. Kafka error codes inside the body are
        not raised here. EncodeError (a body that does not fit the declaration) is raised
        as itself: a bug of the caller, not of the network."""
        if self._closed:
            raise PeerUnavailable(f"channel to {self.address} is closed")
        api = self.apis.get(api_key)
        name = api.name if api is not None else f"api key {api_key}"
        waiter: _Waiter | None = None
        link: _Link | None = None
        correlation_id = -1
        with timeouts.move_on_after(timeout_s):
            try:
                link = await self._ensure_link()
                correlation_id, waiter = link.send(api_key, api_version, body)
                await waiter.event.wait()
            finally:
                if link is not None and link.pending.get(correlation_id) is waiter:
                    del link.pending[correlation_id]
        if waiter is None or not waiter.event.is_set():
            raise PeerTimeout(f"no answer to {name} v{api_version} from {self.address} "
                              f"within {timeout_s} s")
        if waiter.error is not None:
            raise waiter.error
        assert waiter.response is not None
        return waiter.response.body

    async def aclose(self) -> None:
        """Close for good: requests in flight and later ones fail with PeerUnavailable."""
        self._closed = True
        link = self._link
        if link is not None:
            link.fail("the channel was closed")
            await link.finished.wait()

    # -- connecting -------------------------------------------------------------------

    async def _ensure_link(self) -> _Link:
        link = self._link
        if link is not None and not link.closed:
            return link
        async with self._connect_lock:
            link = self._link
            if link is not None and not link.closed:
                return link  # another caller connected while we waited for the lock
            if self._closed:
                raise PeerUnavailable(f"channel to {self.address} is closed")
            wait = self._retry_at - trio.current_time()
            if wait > 0:
                raise PeerUnavailable(
                    f"{self.address} is backing off for {wait * 1000:.0f} ms after: "
                    f"{self.last_failure}")
            return await self._connect()

    async def _connect(self) -> _Link:
        stream: trio.abc.Stream | None = None
        try:
            with timeouts.move_on_after(self.connect_timeout_s):
                stream = await self._opener(self.host, self.port)
        except OSError as e:
            raise self._connect_failed(str(e) or type(e).__name__) from e
        except trio.Cancelled:
            # the caller's own timeout ended the attempt: a failed attempt all the same
            self._note_failure("the connect attempt was abandoned")
            raise
        if stream is None:
            raise self._connect_failed(f"no answer within {self.connect_timeout_s} s")
        self.connects += 1
        self._backoff = self.backoff_s
        self._retry_at = -math.inf
        protocol = ClientConnection(self.client_id, self.max_frame, apis=self.apis)
        link = self._link = _Link(self.address, stream, protocol, self._link_closed)
        self._nursery.start_soon(link.run)
        return link

    def _connect_failed(self, reason: str) -> PeerUnavailable:
        self._note_failure(f"cannot connect: {reason}")
        return PeerUnavailable(f"cannot connect to {self.address}: {reason}")

    def _note_failure(self, reason: str) -> None:
        self.last_failure = reason
        self._retry_at = trio.current_time() + self._backoff
        self._backoff = min(self._backoff * 2, self.backoff_max_s)

    def _link_closed(self, link: _Link) -> None:
        if link is self._link and not self._closed:
            # a lost connection is retried after the (reset) backoff, not at once
            self.last_failure = link.failure
            self._retry_at = trio.current_time() + self._backoff


@asynccontextmanager
async def open_peer_channel(host: str, port: int, **kwargs: Any) -> AsyncIterator[PeerChannel]:
    """A channel whose background tasks live as long as the block; closed when it ends."""
    async with trio.open_nursery() as nursery:
        channel = PeerChannel(host, port, nursery, **kwargs)
        try:
            yield channel
        finally:
            await channel.aclose()
