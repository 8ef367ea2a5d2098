"""Who a connection is: each listener's security settings, and the SASL server that runs
on a SASL listener's connection before anything else is served.

Owns: `ListenerSecurity` (one listener's protocol, TLS context, enabled mechanisms and
PLAIN users, built once from the config), `SaslGate` (one connection's authentication, in
Kafka's SaslServerAuthenticator states), `GateAnswer` and `scram_lookup` (credentials from
the metadata image).

The gate's states, as Kafka's:
- before the handshake: ApiVersions is served (clients ask it first), SaslHandshake names
  a mechanism; a SaslAuthenticate answers ILLEGAL_SASL_STATE and closes, anything else
  closes the connection unanswered;
- after SaslHandshake v1: SaslAuthenticate requests carry the tokens; after v0 (KIP-43
  clients) the tokens come as bare length-prefixed frames with no request header;
- complete: the principal is `User:<name>` and every API is served. A SCRAM login with
  the `tokenauth=true` extension is a delegation token's (broker.security.tokens): the
  name is the token id, and the principal the token's owner, marked token-authenticated.
An unknown mechanism answers UNSUPPORTED_SASL_MECHANISM with the enabled ones, a failed
exchange SASL_AUTHENTICATION_FAILED with a message; either closes the connection
(`GateAnswer.failure` says why, for the broker's log and its auth_failure event; the client
is told no more than Kafka tells it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from broker.config import BrokerConfig, ConfigError
from broker.listeners import Endpoint
from broker.security.tokens import token_lookup
from protocol.errors import ErrorCode
from protocol.messages import API_VERSIONS
from protocol.sasl import (
    PLAIN, SCRAM_MECHANISMS, PlainServer, SaslError, ScramSecret, ScramServer, parse_jaas,
)

SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
AUTH_FAILED_MESSAGE = "Authentication failed: Invalid username or password"


def jaas_options(config: BrokerConfig, listener: str, mechanism: str) -> dict[str, str] | None:
    """The options of `listener.name.<listener>.<mechanism>.sasl.jaas.config`, if set."""
    text = config.for_listener(listener, f"{mechanism.lower()}.sasl.jaas.config")
    if not text:
        return None
    try:
        return parse_jaas(text)[1]
    except SaslError as e:
        raise ConfigError(f"listener.name.{listener.lower()}.{mechanism.lower()}"
                          f".sasl.jaas.config: {e}") from None


@dataclass
class ListenerSecurity:
    name: str
    protocol: str
    ssl_context: Any = None  # ssl.SSLContext on SSL and SASL_SSL listeners
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    max_receive_size: int = 524288

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def build(cls, config: BrokerConfig, endpoint: Endpoint) -> ListenerSecurity:
        name, protocol = endpoint.name, endpoint.security_protocol
        out = cls(name, protocol, max_receive_size=config.sasl_server_max_receive_size)
        if endpoint.uses_tls:
            from broker.security.tls import server_context
            out.ssl_context = server_context(config, name)
        if endpoint.uses_sasl:
            mechanisms = tuple(m.upper() for m in
                               config.for_listener(name, "sasl.enabled.mechanisms"))
            unknown = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
            if unknown or not mechanisms:
                raise ConfigError(f"sasl.enabled.mechanisms: {', '.join(unknown) or 'none'} "
                                  f"on listener {name}: supported are "
                                  f"{', '.join(SUPPORTED_MECHANISMS)}")
            out.mechanisms = mechanisms
            if PLAIN in mechanisms:
                options = jaas_options(config, name, PLAIN) or {}
                out.plain_users = {k[len("user_"):]: v for k, v in options.items()
                                   if k.startswith("user_")}
        return out


def scram_lookup(image_of: Callable[[], Any], mechanism_id: int
                 ) -> Callable[[str], ScramSecret | None]:
    """Credentials read from the current metadata image at the moment a client asks."""
    def lookup(user: str) -> ScramSecret | None:
        credential = image_of().scram_credentials.get((user, mechanism_id))
        if credential is None:
            return None
        return ScramSecret(credential.salt, credential.stored_key, credential.server_key,
                           credential.iterations)
    return lookup


@dataclass
class GateAnswer:
    body: Any  # the response body, or the bare token (bytes) after a v0 handshake
    failure: str | None = None  # set: send the body, then close the connection


class SaslGate:
    """One SASL listener connection's authentication (see the module docstring)."""

    def __init__(self, security: ListenerSecurity, image_of: Callable[[], Any],
                 token_secret: str | None = None,
                 now_ms: Callable[[], int] | None = None):
        self.security = security
        self._image_of = image_of
        self._token_secret = token_secret  # delegation.token.secret.key; None: no tokens
        self._now_ms = now_ms or (lambda: 0)
        self.state = "handshake"  # -> authenticate -> complete | failed
        self.bare_tokens = False
        self.mechanism = ""
        self.username = ""
        self.token_authenticated = False
        self._server: PlainServer | ScramServer | None = None

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    @property
    def principal(self) -> str:
        return f"User:{self.username}"

    @property
    def claimed_principal(self) -> str:
        """Who the client said it was, for an auth_failure event; "" before it named one."""
        return self.principal if self.username else ""

    def allows_unauthenticated(self, api_key: int) -> bool:
        """ApiVersions is answered before the handshake, as Kafka does."""
        return api_key == API_VERSIONS and self.state == "handshake"

    def handshake(self, version: int, mechanism: str) -> GateAnswer:
        enabled = list(self.security.mechanisms)
        if self.state != "handshake":
            self.state = "failed"
            return GateAnswer({"error_code": ErrorCode.ILLEGAL_SASL_STATE,
                               "mechanisms": enabled}, "SaslHandshake after the handshake")
        self.mechanism = mechanism
        if mechanism not in enabled:
            self.state = "failed"
            return GateAnswer({"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                               "mechanisms": enabled},
                              f"unsupported SASL mechanism {mechanism[:64]!r}")
        if mechanism == PLAIN:
            self._server = PlainServer(self.security.plain_users)
        else:
            scram = SCRAM_MECHANISMS[mechanism]
            self._server = ScramServer(
                scram, scram_lookup(self._image_of, scram.id),
                token_lookup=token_lookup(self._image_of, self._token_secret, self._now_ms,
                                          scram))
        self.state = "authenticate"
        self.bare_tokens = version == 0
        return GateAnswer({"error_code": ErrorCode.NONE, "mechanisms": enabled})

    def _step(self, token: bytes) -> tuple[bytes, str | None]:
        assert self._server is not None
        try:
            reply = self._server.step(token)
        except SaslError as e:
            self.state = "failed"
            self.username = self._server.username or ""
            return b"", str(e)
        if self._server.complete:
            assert self._server.username is not None
            owner = getattr(self._server, "token_owner", None)
            self.username = owner if owner is not None else self._server.username
            self.token_authenticated = owner is not None
            self.state = "complete"
        return reply, None

    def authenticate(self, auth_bytes: bytes) -> GateAnswer:
        if self.state != "authenticate" or self.bare_tokens:
            self.state = "failed"
            return GateAnswer({"error_code": ErrorCode.ILLEGAL_SASL_STATE,
                               "error_message": "SaslAuthenticate before a SaslHandshake "
                                                "(v1) named a mechanism",
                               "auth_bytes": b"", "session_lifetime_ms": 0},
                              "SaslAuthenticate out of order")
        reply, failure = self._step(bytes(auth_bytes))
        if failure is not None:
            return GateAnswer({"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                               "error_message": f"{AUTH_FAILED_MESSAGE} ({self.mechanism})",
                               "auth_bytes": b"", "session_lifetime_ms": 0}, failure)
        return GateAnswer({"error_code": ErrorCode.NONE, "error_message": None,
                           "auth_bytes": reply, "session_lifetime_ms": 0})

    def bare_token(self, token: bytes) -> GateAnswer:
        """A v0 token: answered with a bare token; a failure closes without one (KIP-43)."""
        reply, failure = self._step(token)
        return GateAnswer(reply, failure)
