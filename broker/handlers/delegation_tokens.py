"""Delegation tokens (KIP-48): CreateDelegationToken (38), RenewDelegationToken (39) and
ExpireDelegationToken (40), forwarded to the active controller inside an Envelope with the
client's principal (broker.controller.delegation_token_control decides), and
DescribeDelegationToken (41), answered from this broker's metadata image.

As Kafka's KafkaApis: none of the four is served to a connection that did not
authenticate (PLAINTEXT, or SSL without a client certificate) or that logged in with a
token itself: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED. A token for another owner (v3) needs
CREATE_TOKENS on that user (DELEGATION_TOKEN_AUTHORIZATION_FAILED), and owners and
renewers must be of type User (INVALID_PRINCIPAL_TYPE). Describe lists the tokens the
request's owners own or may renew (every token for a null list, none for an empty one)
that the requester owns or may renew, or may DESCRIBE as a DELEGATION_TOKEN, or whose
owner it may DESCRIBE_TOKENS as a USER; with each token its HMAC. No controller in time:
REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from typing import Any

from broker.controller_channel import ControllerUnavailable
from broker.handlers.context import ANONYMOUS, RequestContext
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize
from broker.security.tokens import USER_TYPE, principal_name, token_hmac
from protocol import envelope
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.messages import request_body

E = ErrorCode


def allowed(ctx: RequestContext) -> bool:
    """Kafka's allowTokenRequests: an authenticated connection, not a token's own."""
    session = ctx.connection
    if getattr(session, "token_authenticated", False):
        return False
    security = getattr(session, "security", None)
    protocol = security.protocol if security is not None else "PLAINTEXT"
    if protocol == "PLAINTEXT":
        return False
    return not (protocol == "SSL" and ctx.principal == ANONYMOUS)


async def _forward(ctx: RequestContext, failed: dict) -> dict:
    """The request, in an Envelope with the principal, to the active controller."""
    wrapped = envelope.wrap_request(ctx.request.api_key, ctx.version, ctx.body, ctx.principal,
                                    False, _host_bytes(ctx.client_host))
    try:
        answer = await ctx.broker.controller_channel.forward(
            m.ENVELOPE, 0, request_body(m.ENVELOPE, 0, wrapped))
    except ControllerUnavailable:
        return {**failed, "error_code": E.REQUEST_TIMED_OUT}
    if answer.get("error_code") or answer.get("response_data") is None:
        return {**failed, "error_code": answer.get("error_code") or E.UNKNOWN_SERVER_ERROR}
    return dict(envelope.unwrap_response(ctx.request.api_key, ctx.version,
                                         answer["response_data"]))


def _host_bytes(host: str) -> bytes:
    import ipaddress
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


def _created(code: ErrorCode, owner: tuple[str, str], requester: str) -> dict:
    requester_type, requester_name = principal_name(requester)
    return {"error_code": code, "principal_type": owner[0], "principal_name": owner[1],
            "token_requester_principal_type": requester_type,
            "token_requester_principal_name": requester_name, "issue_timestamp_ms": -1,
            "expiry_timestamp_ms": -1, "max_timestamp_ms": -1, "token_id": "", "hmac": b"",
            "throttle_time_ms": 0}


async def handle_create(ctx: RequestContext) -> dict:
    body = ctx.body
    owner_name = body.get("owner_principal_name")
    owner = ((body.get("owner_principal_type") or USER_TYPE, owner_name) if owner_name
             else principal_name(ctx.principal))
    failed = _created(E.NONE, owner, ctx.principal)
    if not allowed(ctx):
        return {**failed, "error_code": E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED}
    if owner[0] != USER_TYPE or any(r.principal_type != USER_TYPE for r in body.renewers):
        return {**failed, "error_code": E.INVALID_PRINCIPAL_TYPE}
    if owner_name and not authorize(ctx, AclOperation.CREATE_TOKENS, ResourceType.USER,
                                    f"{owner[0]}:{owner[1]}"):
        return {**failed, "error_code": E.DELEGATION_TOKEN_AUTHORIZATION_FAILED}
    return await _forward(ctx, failed)


async def handle_renew(ctx: RequestContext) -> dict:
    failed = {"error_code": E.NONE, "expiry_timestamp_ms": -1, "throttle_time_ms": 0}
    if not allowed(ctx):
        return {**failed, "error_code": E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED}
    return await _forward(ctx, failed)


handle_expire = handle_renew  # the same checks, the same response shape


def _describable(ctx: RequestContext, token: Any, owners: list[str] | None) -> bool:
    """Kafka's DelegationTokenManager.filterToken."""
    def owner_or_renewer(principal: str) -> bool:
        return principal in (token.owner, token.requester) or principal in token.renewers
    if owners is not None and not any(owner_or_renewer(o) for o in owners):
        return False
    return (owner_or_renewer(ctx.principal)
            or authorize(ctx, AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN,
                         token.token_id, log_denied=False)
            or authorize(ctx, AclOperation.DESCRIBE_TOKENS, ResourceType.USER, token.owner,
                         log_denied=False))


async def handle_describe(ctx: RequestContext) -> dict:
    answer: dict = {"error_code": E.NONE, "tokens": [], "throttle_time_ms": 0}
    if not allowed(ctx):
        return {**answer, "error_code": E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED}
    secret = ctx.broker.config.delegation_token_secret_key
    if not secret:
        return {**answer, "error_code": E.DELEGATION_TOKEN_AUTH_DISABLED}
    owners = (None if ctx.body.owners is None else
              [f"{o.principal_type}:{o.principal_name}" for o in ctx.body.owners])
    tokens = ctx.broker.metadata_cache.image.delegation_tokens
    for token_id, t in sorted(tokens.items()):
        if not _describable(ctx, t, owners):
            continue
        owner_type, owner_name = principal_name(t.owner)
        requester_type, requester_name = principal_name(t.requester)
        answer["tokens"].append({
            "principal_type": owner_type, "principal_name": owner_name,
            "token_requester_principal_type": requester_type,
            "token_requester_principal_name": requester_name,
            "issue_timestamp": t.issue_timestamp, "expiry_timestamp": t.expiration_timestamp,
            "max_timestamp": t.max_timestamp, "token_id": token_id,
            "hmac": token_hmac(secret, token_id),
            "renewers": [dict(zip(("principal_type", "principal_name"), principal_name(r)))
                         for r in t.renewers]})
    return answer
