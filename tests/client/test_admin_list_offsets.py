"""AdminClient.list_offsets speaks ListOffsets at the newest version both sides know (v10)
and, as Java's ListOffsetsHandler does, gives the broker the call's timeout for lookups in
remote storage."""

from __future__ import annotations

from client.admin import AdminClient
from protocol.messages import LIST_OFFSETS


async def test_list_offsets_sends_v10_with_the_calls_timeout(inproc, autojump_clock, monkeypatch):
    from broker.handlers import HANDLERS
    await inproc.create_topic("lo", 1)
    seen: list[tuple[int, int]] = []
    served = HANDLERS[LIST_OFFSETS]

    async def recording(ctx):
        seen.append((ctx.version, ctx.body.timeout_ms))
        return await served(ctx)
    monkeypatch.setitem(HANDLERS, LIST_OFFSETS, recording)
    async with AdminClient(bootstrap_servers=inproc.bootstrap, request_timeout_ms=12_000) as admin:
        assert await admin.list_offsets({("lo", 0): "latest"}) == {("lo", 0): 0}
        assert await admin.list_offsets({("lo", 0): "earliest"}, timeout_ms=7_000) == {
            ("lo", 0): 0}
    assert seen == [(10, 12_000), (10, 7_000)]
