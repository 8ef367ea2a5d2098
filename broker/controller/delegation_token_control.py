"""Delegation tokens on the controller (KIP-48; Kafka's DelegationTokenControlManager).

Owns `create`, `renew`, `expire` (the three requests that change tokens, each taking the
principal of the client the broker forwarded it for) and `sweep_expired` (the periodic
removal of tokens past their expiry or maximum time). Tokens live in the metadata log:
DelegationTokenRecord creates or renews one, RemoveDelegationTokenRecord drops it; the
HMAC is not recorded (broker.security.tokens computes it from the id and the secret).

Kafka's rules: no `delegation.token.secret.key` is DELEGATION_TOKEN_AUTH_DISABLED; the
owner is the requester unless the request (v3) names another; a token's maximum time is
now + min(delegation.token.max.lifetime.ms, the request's max_lifetime_ms if > 0), its
expiry now + delegation.token.expiry.time.ms, never past the maximum. A renewal or an
expiry names the token by its HMAC (DELEGATION_TOKEN_NOT_FOUND when none matches) and
must come from its owner, its requester or one of its renewers
(DELEGATION_TOKEN_OWNER_MISMATCH); renewing a token past its expiry or maximum is
DELEGATION_TOKEN_EXPIRED; a renewal moves the expiry to now + min(expiry time, the
request's period if > 0), never past the maximum; an expiry with a negative period removes
the token at once, else moves its expiry to now + the period (at most the maximum).

Which connections may ask at all (SASL or mutual TLS, not a token's own login) is the
broker's check (broker.handlers.delegation_tokens). Pure: `now_ms` and the token id's
randomness are arguments.
"""

from __future__ import annotations

from typing import Any, Callable

from broker.controller.controller_result import Record
from broker.controller.image import DelegationToken, MetadataImage
from broker.security.tokens import principal_name, token_for_hmac, token_hmac
from protocol.errors import ErrorCode
from protocol.metadata_records import MetadataRecordType as T

E = ErrorCode


def _record(token: DelegationToken) -> Record:
    return (int(T.DELEGATION_TOKEN_RECORD), 0, {
        "owner": token.owner, "requester": token.requester, "renewers": list(token.renewers),
        "issue_timestamp": token.issue_timestamp, "max_timestamp": token.max_timestamp,
        "expiration_timestamp": token.expiration_timestamp, "token_id": token.token_id})


def _may_renew(token: DelegationToken, principal: str) -> bool:
    """Kafka's TokenInformation.ownerOrRenewer."""
    return principal in (token.owner, token.requester) or principal in token.renewers


def create(image: MetadataImage, body: Any, principal: str, now_ms: int,
           settings: Any, new_token_id: Callable[[], str]) -> tuple[list[Record], dict]:
    owner = principal
    if body.get("owner_principal_name"):
        owner = f"{body.get('owner_principal_type') or 'User'}:{body.owner_principal_name}"
    owner_type, owner_name = principal_name(owner)
    requester_type, requester_name = principal_name(principal)
    response = {"error_code": E.NONE, "principal_type": owner_type,
                "principal_name": owner_name, "token_requester_principal_type": requester_type,
                "token_requester_principal_name": requester_name, "issue_timestamp_ms": -1,
                "expiry_timestamp_ms": -1, "max_timestamp_ms": -1, "token_id": "",
                "hmac": b"", "throttle_time_ms": 0}
    secret = settings.delegation_token_secret_key
    if not secret:
        return [], {**response, "error_code": E.DELEGATION_TOKEN_AUTH_DISABLED}
    lifetime = settings.delegation_token_max_lifetime_ms
    if body.max_lifetime_ms > 0:
        lifetime = min(lifetime, body.max_lifetime_ms)
    max_timestamp = now_ms + lifetime
    expiry = min(max_timestamp, now_ms + settings.delegation_token_expiry_time_ms)
    token_id = new_token_id()
    while token_id in image.delegation_tokens:
        token_id = new_token_id()
    token = DelegationToken(
        token_id, owner, principal,
        tuple(f"{r.principal_type}:{r.principal_name}" for r in body.renewers),
        now_ms, max_timestamp, expiry)
    return [_record(token)], {
        **response, "issue_timestamp_ms": now_ms, "expiry_timestamp_ms": expiry,
        "max_timestamp_ms": max_timestamp, "token_id": token_id,
        "hmac": token_hmac(secret, token_id)}


def _find(image: MetadataImage, body: Any, principal: str, settings: Any
          ) -> tuple[DelegationToken | None, ErrorCode]:
    secret = settings.delegation_token_secret_key
    if not secret:
        return None, E.DELEGATION_TOKEN_AUTH_DISABLED
    token = token_for_hmac(image.delegation_tokens, secret, body.hmac)
    if token is None:
        return None, E.DELEGATION_TOKEN_NOT_FOUND
    if not _may_renew(token, principal):
        return None, E.DELEGATION_TOKEN_OWNER_MISMATCH
    return token, E.NONE


def _expired(token: DelegationToken, now_ms: int) -> bool:
    return token.max_timestamp < now_ms or token.expiration_timestamp < now_ms


def renew(image: MetadataImage, body: Any, principal: str, now_ms: int, settings: Any
          ) -> tuple[list[Record], dict]:
    token, code = _find(image, body, principal, settings)
    if token is not None and _expired(token, now_ms):
        token, code = None, E.DELEGATION_TOKEN_EXPIRED
    if token is None:
        return [], {"error_code": code, "expiry_timestamp_ms": -1, "throttle_time_ms": 0}
    period = settings.delegation_token_expiry_time_ms
    if body.renew_period_ms > 0:
        period = min(period, body.renew_period_ms)
    renewed = DelegationToken(token.token_id, token.owner, token.requester, token.renewers,
                              token.issue_timestamp, token.max_timestamp,
                              min(token.max_timestamp, now_ms + period))
    return [_record(renewed)], {"error_code": E.NONE,
                                "expiry_timestamp_ms": renewed.expiration_timestamp,
                                "throttle_time_ms": 0}


def expire(image: MetadataImage, body: Any, principal: str, now_ms: int, settings: Any
           ) -> tuple[list[Record], dict]:
    token, code = _find(image, body, principal, settings)
    if token is None:
        return [], {"error_code": code, "expiry_timestamp_ms": -1, "throttle_time_ms": 0}
    if body.expiry_time_period_ms < 0:
        return ([(int(T.REMOVE_DELEGATION_TOKEN_RECORD), 0, {"token_id": token.token_id})],
                {"error_code": E.NONE, "expiry_timestamp_ms": now_ms, "throttle_time_ms": 0})
    if _expired(token, now_ms):
        return [], {"error_code": E.DELEGATION_TOKEN_EXPIRED, "expiry_timestamp_ms": -1,
                    "throttle_time_ms": 0}
    expiry = min(token.max_timestamp, now_ms + body.expiry_time_period_ms)
    changed = DelegationToken(token.token_id, token.owner, token.requester, token.renewers,
                              token.issue_timestamp, token.max_timestamp, expiry)
    return [_record(changed)], {"error_code": E.NONE, "expiry_timestamp_ms": expiry,
                                "throttle_time_ms": 0}


def sweep_expired(image: MetadataImage, now_ms: int) -> list[Record]:
    """RemoveDelegationTokenRecords for every token whose expiry or maximum time passed
    (Kafka's sweepExpiredDelegationTokens)."""
    return [(int(T.REMOVE_DELEGATION_TOKEN_RECORD), 0, {"token_id": token_id})
            for token_id, token in sorted(image.delegation_tokens.items())
            if _expired(token, now_ms)]
