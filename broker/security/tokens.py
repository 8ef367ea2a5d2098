"""Delegation tokens' secrets (KIP-48): what a token's HMAC is and how it logs in.

Owns `token_hmac` (Kafka's DelegationTokenManager.createHmac: HmacSHA512 of the token id,
keyed with `delegation.token.secret.key`), `token_for_hmac` (the token an HMAC belongs to,
Kafka's tokenForHmac), `token_scram_secret` (the SCRAM credential a token logs in with:
its HMAC in base64 as the password, as Kafka's DelegationTokenCache prepares it) and
`token_lookup`, what the SCRAM server asks on a `tokenauth=true` login. The HMAC is never
stored: every node computes it again from the token id and the shared secret, so every
broker must have the same `delegation.token.secret.key`.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Callable

from protocol.sasl import MIN_ITERATIONS, ScramMechanism, ScramSecret, scram_secret, \
    token_password

USER_TYPE = "User"


def token_hmac(secret_key: str, token_id: str) -> bytes:
    return hmac.new(secret_key.encode(), token_id.encode(), hashlib.sha512).digest()


def token_for_hmac(tokens: Any, secret_key: str, mac: bytes) -> Any | None:
    """The token (of a mapping by id) whose HMAC is `mac`, compared in constant time."""
    for token_id, token in tokens.items():
        if hmac.compare_digest(token_hmac(secret_key, token_id), bytes(mac)):
            return token
    return None


def token_scram_secret(mechanism: ScramMechanism, secret_key: str, token_id: str
                       ) -> ScramSecret:
    """The SCRAM credential of a token. Kafka salts it at random in each broker's cache;
    here the salt is derived from the token id, so it needs no cache to agree between the
    two messages of one login."""
    salt = hashlib.sha256(b"delegation-token:" + token_id.encode()).digest()[:16]
    password = token_password(token_hmac(secret_key, token_id))
    salted = mechanism.salted_password(password, salt, MIN_ITERATIONS)
    return scram_secret(mechanism, salted, salt, MIN_ITERATIONS)


def principal_name(principal: str) -> tuple[str, str]:
    """`User:alice` -> ("User", "alice")."""
    kind, sep, name = principal.partition(":")
    return (kind, name) if sep else (USER_TYPE, principal)


def token_lookup(image_of: Callable[[], Any], secret_key: str | None,
                 now_ms: Callable[[], int], mechanism: ScramMechanism
                 ) -> Callable[[str], tuple[ScramSecret, str] | None]:
    """For ScramServer: a live token's credential and its owner's name; None when token
    authentication is off, the token unknown, or its expiry passed (the controller's sweep
    removes it soon after)."""
    def lookup(token_id: str) -> tuple[ScramSecret, str] | None:
        if not secret_key:
            return None
        token = image_of().delegation_tokens.get(token_id)
        if token is None or token.expiration_timestamp < now_ms() \
                or token.max_timestamp < now_ms():
            return None
        return (token_scram_secret(mechanism, secret_key, token_id),
                principal_name(token.owner)[1])
    return lookup
