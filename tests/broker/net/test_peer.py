"""broker.net.peer.PeerChannel against a tiny in-test peer: pipelining over one connection,
timeouts that leave the connection up, lost connections, connect failures with backoff,
closing, and one run over a real 127.0.0.1 socket.

The peer speaks BrokerHeartbeat: it answers with throttle_time_ms set to the request's
broker_id, so every caller can tell its own answer.
"""

from __future__ import annotations

from functools import partial
from typing import Awaitable, Callable

import pytest
import trio
import trio.testing

from broker.net.peer import PeerChannel, PeerTimeout, PeerUnavailable, open_peer_channel
from protocol.connection import NEED_DATA, Request, ServerConnection
from protocol.messages import ALL_APIS, BROKER_HEARTBEAT

Handler = Callable[[list[Request], "Conn"], Awaitable[None]]


def heartbeat(broker_id: int) -> dict:
    return {"broker_id": broker_id, "broker_epoch": 1, "current_metadata_offset": 0}


class Conn:
    """The peer's side of one connection."""

    def __init__(self, stream: trio.abc.Stream):
        self.stream = stream
        self.protocol = ServerConnection(apis=ALL_APIS)

    async def answer(self, request: Request) -> None:
        assert request.body is not None
        body = {"throttle_time_ms": request.body.broker_id, "error_code": 0}
        await self.stream.send_all(self.protocol.encode_response(request, body))


async def answer_each(received: list[Request], conn: Conn) -> None:
    await conn.answer(received[-1])


async def hang_up(received: list[Request], conn: Conn) -> None:
    await conn.stream.aclose()


class FakePeer:
    """Hands out memory streams as connections and serves each with `handler`, called
    with every request received so far on that connection."""

    def __init__(self, nursery: trio.Nursery, handler: Handler = answer_each):
        self.nursery = nursery
        self.handler = handler
        self.refuse = False
        self.opened = 0
        self.conns: list[Conn] = []
        self.received: list[Request] = []
        self._changed = trio.Event()

    async def until(self, condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Wait, with a deadline, until `condition` holds; it is checked at each request."""
        with trio.fail_after(timeout_s):
            while not condition():
                await self._changed.wait()

    async def opener(self, host: str, port: int) -> trio.abc.Stream:
        if self.refuse:
            raise ConnectionRefusedError(111, "Connection refused")
        self.opened += 1
        client, server = trio.testing.memory_stream_pair()
        conn = Conn(server)
        self.conns.append(conn)
        self.nursery.start_soon(self._serve, conn)
        return client

    async def _serve(self, conn: Conn) -> None:
        received: list[Request] = []
        try:
            while True:
                data = await conn.stream.receive_some(1 << 16)
                if not data:
                    return
                conn.protocol.receive_data(data)
                while (request := conn.protocol.next_request()) is not NEED_DATA:
                    received.append(request)
                    self.received.append(request)
                    self._changed.set()
                    self._changed = trio.Event()
                    await self.handler(received, conn)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return


@pytest.fixture
async def setup(nursery):
    peer = FakePeer(nursery)
    channel = PeerChannel("peer", 9093, nursery, opener=peer.opener, backoff_s=0.1,
                          backoff_max_s=0.4)
    yield peer, channel
    await channel.aclose()


async def test_concurrent_requests_share_one_connection_and_get_their_own_answers(
        setup, autojump_clock):
    peer, channel = setup

    async def reverse_once_all_arrived(received, conn):
        if len(received) == 3:  # answer only when all three are in flight, last first
            for request in reversed(received):
                await conn.answer(request)

    peer.handler = reverse_once_all_arrived
    answers: dict[int, int] = {}

    async def ask(broker_id):
        body = await channel.request(BROKER_HEARTBEAT, 1, heartbeat(broker_id), timeout_s=5)
        answers[broker_id] = body.throttle_time_ms

    async with trio.open_nursery() as n:
        for broker_id in (1, 2, 3):
            n.start_soon(ask, broker_id)
    assert answers == {1: 1, 2: 2, 3: 3}
    assert peer.opened == 1 and channel.connects == 1 and channel.in_flight == 0
    ids = [r.header.correlation_id for r in peer.received]
    assert len(set(ids)) == 3  # one correlation id each
    assert peer.received[0].header.client_id == "minibroker-peer"


async def test_a_timed_out_request_fails_alone_and_its_late_answer_is_dropped(
        setup, autojump_clock):
    peer, channel = setup
    held: list[Request] = []

    async def hold_the_first(received, conn):
        if len(received) == 1:
            held.append(received[0])
        else:
            await conn.answer(received[-1])

    peer.handler = hold_the_first
    start = trio.current_time()
    with pytest.raises(PeerTimeout, match="no answer to BrokerHeartbeat v1"):
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=2)
    assert trio.current_time() - start == pytest.approx(2)
    assert channel.is_connected and channel.in_flight == 0
    await peer.conns[0].answer(held[0])  # too late: nobody waits for it any more
    body = await channel.request(BROKER_HEARTBEAT, 1, heartbeat(2), timeout_s=2)
    assert body.throttle_time_ms == 2 and peer.opened == 1


async def test_a_lost_connection_fails_requests_in_flight_and_reconnects_after_backoff(
        setup, autojump_clock):
    peer, channel = setup
    peer.handler = hang_up
    with pytest.raises(PeerUnavailable, match="closed the connection") as e:
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=5)
    assert not isinstance(e.value, PeerTimeout)
    assert not channel.is_connected
    peer.handler = answer_each
    with pytest.raises(PeerUnavailable, match="backing off"):  # at once, not after a wait
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(2), timeout_s=5)
    assert peer.opened == 1
    autojump_clock.jump(0.1)
    body = await channel.request(BROKER_HEARTBEAT, 1, heartbeat(3), timeout_s=5)
    assert body.throttle_time_ms == 3 and peer.opened == 2 and channel.connects == 2


async def test_connect_failures_back_off_exponentially_up_to_the_maximum(
        setup, autojump_clock):
    peer, channel = setup
    peer.refuse = True
    with pytest.raises(PeerUnavailable, match="cannot connect to peer:9093"):
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=5)
    waits = []
    for _ in range(4):
        failed_at = trio.current_time()
        # find when the next attempt is allowed, in 10 ms steps of virtual time; until
        # then a request fails at once
        while True:
            autojump_clock.jump(0.01)
            try:
                await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=5)
            except PeerUnavailable as e:
                if "backing off" in str(e):
                    continue
                assert "cannot connect" in str(e)  # refused again: the next round begins
            break
        waits.append(trio.current_time() - failed_at)
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.4], abs=0.011)
    assert peer.opened == 0
    peer.refuse = False
    autojump_clock.jump(0.4)
    body = await channel.request(BROKER_HEARTBEAT, 1, heartbeat(7), timeout_s=5)
    assert body.throttle_time_ms == 7
    # a successful connect starts the backoff over
    peer.handler = hang_up
    with pytest.raises(PeerUnavailable, match="closed the connection"):
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(8), timeout_s=5)
    with pytest.raises(PeerUnavailable, match="backing off for 100 ms"):
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=5)


async def test_a_peer_that_never_accepts_times_the_request_out(nursery, autojump_clock):
    async def never(host, port):
        await trio.sleep_forever()

    channel = PeerChannel("peer", 1, nursery, opener=never, connect_timeout_s=30)
    with pytest.raises(PeerTimeout):
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=3)
    with pytest.raises(PeerUnavailable, match="backing off"):  # the abandoned attempt counts
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=3)
    autojump_clock.jump(1)
    channel.connect_timeout_s = 2
    with pytest.raises(PeerUnavailable, match="no answer within 2 s") as e:
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=5)
    assert not isinstance(e.value, PeerTimeout)


async def test_closing_fails_requests_in_flight_and_later_ones(setup, autojump_clock):
    peer, channel = setup

    async def never_answer(received, conn):
        pass

    peer.handler = never_answer
    failures: list[Exception] = []

    async def ask():
        try:
            await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=60)
        except PeerUnavailable as e:
            failures.append(e)

    async with trio.open_nursery() as n:
        n.start_soon(ask)
        n.start_soon(ask)
        await peer.until(lambda: len(peer.received) == 2)
        await channel.aclose()
    assert len(failures) == 2 and all("closed" in str(e) for e in failures)
    assert not any(isinstance(e, PeerTimeout) for e in failures)
    with pytest.raises(PeerUnavailable, match="is closed"):
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=1)
    assert trio.current_time() < 60


async def test_a_response_that_does_not_parse_closes_the_connection(setup, autojump_clock):
    peer, channel = setup

    async def garbage(received, conn):
        cid = received[-1].header.correlation_id
        await conn.stream.send_all(b"\x00\x00\x00\x06" + cid.to_bytes(4, "big") + b"\x00\x01")

    peer.handler = garbage
    with pytest.raises(PeerUnavailable, match="broke the protocol"):
        await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=5)
    assert not channel.is_connected


async def test_over_a_real_socket():
    async def serve(stream: trio.SocketStream) -> None:
        conn = Conn(stream)
        while data := await stream.receive_some(1 << 16):
            conn.protocol.receive_data(data)
            while (request := conn.protocol.next_request()) is not NEED_DATA:
                await conn.answer(request)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        async with open_peer_channel("127.0.0.1", port) as channel:
            results = []

            async def ask(i):
                results.append((await channel.request(BROKER_HEARTBEAT, 1, heartbeat(i),
                                                      timeout_s=10)).throttle_time_ms)

            async with trio.open_nursery() as n:
                for i in range(20):
                    n.start_soon(ask, i)
            assert sorted(results) == list(range(20)) and channel.connects == 1
        nursery.cancel_scope.cancel()
    # nothing listens on that port any more
    async with open_peer_channel("127.0.0.1", port) as channel:
        with pytest.raises(PeerUnavailable, match="cannot connect"):
            await channel.request(BROKER_HEARTBEAT, 1, heartbeat(1), timeout_s=10)
