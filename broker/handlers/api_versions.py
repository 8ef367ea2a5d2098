"""ApiVersions: advertise what we serve (protocol.versions decides the ranges)."""

from __future__ import annotations

from broker.handlers.context import RequestContext
from protocol.errors import ErrorCode
from protocol.versions import advertised


def _api_keys() -> list[dict]:
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in advertised()]


async def handle(ctx: RequestContext) -> dict:
    if ctx.body is None:
        # KIP-511: an unknown version gets error 35 and our ranges, in the v0 layout, so the
        # client can retry with a version we know (server.py encodes it as v0).
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys()}
    return {"error_code": ErrorCode.NONE, "api_keys": _api_keys(), "throttle_time_ms": 0}
