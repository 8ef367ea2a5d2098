"""sim.network: TCP as a program sees it, on the run's clock: bytes in order and after the
link's latency, held across a cut until it heals, refused where nobody listens, a connect
across a cut timing out, resets failing both ends."""

from __future__ import annotations

import errno
import random

import pytest
import trio

from sim.network import CONNECT_TIMEOUT_S, LATENCY_S, JITTER_S, Network

ADDRESS = ("10.0.0.1", 9092)


async def _pair(net: Network, nursery: trio.Nursery) -> tuple[trio.abc.Stream, trio.abc.Stream]:
    listen = net.listener("server")
    [listener] = await listen(*ADDRESS, "")
    accepted: list[trio.abc.Stream] = []

    async def accept() -> None:
        accepted.append(await listener.accept())
    nursery.start_soon(accept)
    client = await net.dialer("client")(*ADDRESS)
    await trio.testing.wait_all_tasks_blocked()
    return client, accepted[0]


async def _read(stream: trio.abc.Stream, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = await stream.receive_some()
        assert chunk, "end of stream"
        got += chunk
    return got


async def test_bytes_arrive_in_order_after_the_links_latency(autojump_clock):
    net = Network(random.Random(1))
    async with trio.open_nursery() as nursery:
        client, server = await _pair(net, nursery)
        sent_at = trio.current_time()
        for i in range(50):
            await client.send_all(bytes([i]))
        assert await _read(server, 50) == bytes(range(50))
        took = trio.current_time() - sent_at
        assert LATENCY_S[0] <= took <= LATENCY_S[1] + JITTER_S
        nursery.cancel_scope.cancel()


async def test_a_cut_holds_the_bytes_until_it_heals(autojump_clock):
    net = Network(random.Random(2))
    async with trio.open_nursery() as nursery:
        client, server = await _pair(net, nursery)
        net.cut("client", "server", both_ways=False)
        await client.send_all(b"held")
        with trio.move_on_after(30):
            await server.receive_some()
            pytest.fail("bytes crossed a cut link")
        await server.send_all(b"back")  # the other way still flows
        assert await _read(client, 4) == b"back"
        net.heal()
        assert await _read(server, 4) == b"held"
        nursery.cancel_scope.cancel()


async def test_a_dial_is_refused_where_nobody_listens_and_times_out_across_a_cut(
        autojump_clock):
    net = Network(random.Random(3))
    dial = net.dialer("client")
    with pytest.raises(OSError) as refused:
        await dial(*ADDRESS)
    assert refused.value.errno == errno.ECONNREFUSED
    await net.listener("server")(*ADDRESS, "")
    net.isolate("server")
    started = trio.current_time()
    with pytest.raises(OSError) as timed_out:
        await dial(*ADDRESS)
    assert timed_out.value.errno == errno.ETIMEDOUT
    assert trio.current_time() - started == pytest.approx(CONNECT_TIMEOUT_S)


async def test_a_reset_fails_both_ends_and_a_node_down_closes_its_listener(autojump_clock):
    net = Network(random.Random(4))
    async with trio.open_nursery() as nursery:
        client, server = await _pair(net, nursery)
        net.reset("server")
        with pytest.raises(trio.BrokenResourceError):
            await server.receive_some()
        with pytest.raises(trio.BrokenResourceError):
            await client.send_all(b"x")
        net.down("server")
        with pytest.raises(OSError):
            await net.dialer("client")(*ADDRESS)
        nursery.cancel_scope.cancel()


async def test_a_closed_end_reads_as_end_of_stream_after_the_bytes_before_it(autojump_clock):
    net = Network(random.Random(5))
    async with trio.open_nursery() as nursery:
        client, server = await _pair(net, nursery)
        await client.send_all(b"last words")
        await client.aclose()
        assert await _read(server, 10) == b"last words"
        assert await server.receive_some() == b""
        nursery.cancel_scope.cancel()
