"""SaslHandshake (17) and SaslAuthenticate (36) once they reach the handler table.

Owns the answers for a connection that is not (or no longer) authenticating: on a SASL
listener the server's SaslGate (broker.security.authenticator) takes these requests until
the client has logged in, so a handler sees them only on a PLAINTEXT or SSL listener or
after authentication, where Kafka answers ILLEGAL_SASL_STATE and serves on.
"""

from __future__ import annotations

from broker.handlers.context import RequestContext
from protocol.errors import ErrorCode


async def handle_handshake(ctx: RequestContext) -> dict:
    security = ctx.broker.listener_security.get(ctx.listener_name)
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
            "mechanisms": list(security.mechanisms) if security is not None else []}


async def handle_authenticate(ctx: RequestContext) -> dict:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate on a connection that is not authenticating",
            "auth_bytes": b"", "session_lifetime_ms": 0}
