"""ApiVersions: advertise what we serve (protocol.versions decides the ranges); the client
telemetry APIs (KIP-714) only with telemetry.metrics set, since a client that sees them
asks for a subscription on every connection."""

from __future__ import annotations

from broker.handlers.context import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import (GET_TELEMETRY_SUBSCRIPTIONS, LIST_CLIENT_METRICS_RESOURCES,
                               PUSH_TELEMETRY)
from protocol.versions import advertised

TELEMETRY_APIS = frozenset({GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY,
                            LIST_CLIENT_METRICS_RESOURCES})


def _api_keys(ctx: RequestContext) -> list[dict]:
    hidden = frozenset() if ctx.broker.telemetry.enabled else TELEMETRY_APIS
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in advertised()
            if k not in hidden]


async def handle(ctx: RequestContext) -> dict:
    if ctx.body is None:
        # KIP-511: an unknown version gets error 35 and our ranges, in the v0 layout, so the
        # client can retry with a version we know (server.py encodes it as v0).
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys(ctx)}
    return {"error_code": ErrorCode.NONE, "api_keys": _api_keys(ctx), "throttle_time_ms": 0}
