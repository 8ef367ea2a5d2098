"""ApiVersions: advertise what we serve (protocol.versions decides the ranges); the client
telemetry APIs (KIP-714) only with telemetry.metrics set, since a client that sees them
asks for a subscription on every connection. From v3, the features this software supports
and those the cluster has finalized (KIP-584), read off this broker's metadata image: the
epoch is the offset of the last metadata entry applied, as Kafka's finalized-features
epoch is the image's offset."""

from __future__ import annotations

from broker.controller import features
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


def feature_fields(ctx: RequestContext) -> dict:
    """SupportedFeatures, FinalizedFeatures and their epoch. v3 leaves out the features
    whose minimum is 0, as Kafka does: clients before v4 took a minimum of 0 for invalid."""
    cache = ctx.broker.metadata_cache
    finalized = cache.image.features
    return {
        "supported_features": [
            {"name": name, "min_version": low, "max_version": high}
            for name, (low, high) in sorted(features.SUPPORTED.items())
            if low > 0 or ctx.version >= 4],
        # Kafka sets the deprecated minimum level to the level itself
        "finalized_features": [
            {"name": name, "max_version_level": level, "min_version_level": level}
            for name, level in sorted(finalized.items())],
        "finalized_features_epoch": cache.offset - 1 if finalized else -1,
    }


async def handle(ctx: RequestContext) -> dict:
    if ctx.body is None:
        # KIP-511: an unknown version gets error 35 and our ranges, in the v0 layout, so the
        # client can retry with a version we know (server.py encodes it as v0).
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys(ctx)}
    return {"error_code": ErrorCode.NONE, "api_keys": _api_keys(ctx), "throttle_time_ms": 0,
            **feature_fields(ctx)}
