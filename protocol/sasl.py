"""SASL mechanisms, sans-IO: PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, RFC 7677), and
the JAAS option strings Kafka configures them with.

Owns: the mechanism names and Kafka's SCRAM ids (`SCRAM_MECHANISMS`), the SCRAM key
derivation (`scram_secret`: salted password -> StoredKey and ServerKey), `ScramServer` and
`ScramClient` (the two halves of one exchange, token in, token out), `PlainServer`, the
client side of either (`SaslClient`), the client's whole login as Kafka requests
(`SaslLogin`, `SaslLoginRefused`), `parse_jaas` and `SaslError`. No sockets, no clock:
nonces are handed in by the caller (or drawn from `secrets`), credentials are looked up
through a function the caller gives.

Delegation tokens (KIP-48) log in with SCRAM: the client-first message carries the
extension `tokenauth=true` after the nonce, the user name is the token id and the password
the token's HMAC in base64 (`token_password`); the server then looks the token up rather
than a user (`ScramServer`'s `token_lookup`) and the connection is the token owner's.

Kafka's rules kept here: a SCRAM credential has 4096 to 16384 iterations (ScramMechanism's
minimum; AlterUserScramCredentials refuses more); the server's nonce extends the client's,
and a client-final message that does not repeat the combined nonce, or the channel-binding
header of the first message, fails; proofs and passwords are compared in constant time. A
failure is one `SaslError`, whose message says what was wrong (for the broker's log; the
client is told only that authentication failed).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any, Callable

from protocol.errors import ErrorCode
from protocol.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MIN_ITERATIONS = 4096  # ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # what Kafka's AlterUserScramCredentials accepts at most


class SaslError(Exception):
    """The exchange failed: a malformed token, a wrong password, an unknown user."""


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    id: int  # Kafka's ScramMechanism type, as metadata records and the admin APIs carry it
    hash: str

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash).digest()

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """RFC 5802's Hi(): what a client sends AlterUserScramCredentials, never the password."""
        return hashlib.pbkdf2_hmac(self.hash, password.encode(), salt, iterations)


SCRAM_MECHANISMS: dict[str, ScramMechanism] = {
    SCRAM_SHA_256: ScramMechanism(SCRAM_SHA_256, 1, "sha256"),
    SCRAM_SHA_512: ScramMechanism(SCRAM_SHA_512, 2, "sha512"),
}
SCRAM_BY_ID = {m.id: m for m in SCRAM_MECHANISMS.values()}


@dataclass(frozen=True)
class ScramSecret:
    """What the server keeps of a password (RFC 5802 section 3)."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def scram_secret(mechanism: ScramMechanism, salted_password: bytes, salt: bytes,
                 iterations: int) -> ScramSecret:
    client_key = mechanism.hmac(salted_password, b"Client Key")
    return ScramSecret(salt, mechanism.digest(client_key),
                       mechanism.hmac(salted_password, b"Server Key"), iterations)


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def _attributes(message: str, expected: str) -> list[tuple[str, str]]:
    """`a=x,b=y` -> [(a, x), (b, y)], the first keys being `expected` in order."""
    out = []
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslError(f"malformed SCRAM attribute {part[:40]!r}")
        out.append((key, value))
    if [k for k, _ in out[:len(expected)]] != list(expected):
        raise SaslError(f"SCRAM message does not start with {','.join(expected)}")
    return out


def _decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SaslError(f"{what} is not base64") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _username(saslname: str) -> str:
    """RFC 5802's saslname: ',' and '=' travel as =2C and =3D; any other '=' is an error."""
    if re.search(r"=(?!2C|3D)", saslname):
        raise SaslError("invalid escape in the SCRAM user name")
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _valid_nonce(nonce: str) -> bool:
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


def _text(token: bytes) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError("the token is not UTF-8") from None


TOKEN_AUTH = "tokenauth"  # the SCRAM extension of a delegation token login


def token_password(hmac_bytes: bytes) -> str:
    """A delegation token's SCRAM password: its HMAC in base64, as Kafka's clients send it."""
    return _b64(hmac_bytes)


def _extensions(parts: list[str]) -> dict[str, str]:
    """The `key=value` extensions after the nonce of a client-first message (Kafka's
    ScramExtensions)."""
    out = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z]+", key):
            raise SaslError(f"malformed SCRAM attribute (extension) {part[:40]!r}")
        out[key] = value
    return out


class ScramServer:
    """The broker's half of one SCRAM exchange: `step` takes each client token and returns
    the answer; `complete` once the client proved its password (then `username`, and for
    a delegation token `token_owner`: the token's owner, whom the connection acts as).

    `token_lookup`, when given, answers a `tokenauth=true` login: the token id -> the
    token's secret and its owner's principal name, None when there is no such live token.
    Without it a token login fails as an unknown user would."""

    def __init__(self, mechanism: ScramMechanism,
                 lookup: Callable[[str], ScramSecret | None], nonce: str | None = None,
                 token_lookup: Callable[[str], tuple[ScramSecret, str] | None] | None = None):
        self.mechanism = mechanism
        self._lookup = lookup
        self._token_lookup = token_lookup
        self._server_nonce = nonce or new_nonce()
        self._state = "first"
        self.username: str | None = None
        self.token_owner: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        if self._state == "first":
            return self._first(_text(token))
        if self._state == "final":
            return self._final(_text(token))
        raise SaslError(f"unexpected SCRAM message in state {self._state}")

    def _first(self, message: str) -> bytes:
        self._state = "failed"
        gs2, sep, rest = message.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y"):
            raise SaslError("invalid SCRAM client-first message (channel binding is not "
                            "supported)" if gs2.startswith("p") else
                            "invalid SCRAM client-first message")
        parts = bare.split(",")
        attrs = _attributes(",".join(parts[:2]), "nr")
        extensions = _extensions(parts[2:])
        username = _username(attrs[0][1])
        if authzid and authzid != f"a={attrs[0][1]}":
            raise SaslError("the authorization id is not the user name")
        client_nonce = attrs[1][1]
        if not username or not _valid_nonce(client_nonce):
            raise SaslError("invalid SCRAM client-first message")
        self.username = username
        secret: ScramSecret | None
        if extensions.get(TOKEN_AUTH, "").lower() == "true":
            found = None if self._token_lookup is None else self._token_lookup(username)
            if found is None:
                raise SaslError(f"unknown or expired delegation token {username!r}")
            secret, self.token_owner = found
        else:
            secret = self._lookup(username)
        if secret is None:
            raise SaslError(f"unknown user {username!r} for {self.mechanism.name}")
        if secret.iterations < MIN_ITERATIONS:
            raise SaslError(f"the credential of {username!r} has too few iterations")
        self._secret = secret
        self._gs2_header = message[:len(gs2) + len(authzid) + 2]
        self._nonce = client_nonce + self._server_nonce
        self._server_first = (f"r={self._nonce},s={_b64(secret.salt)},"
                              f"i={secret.iterations}")
        self._client_first_bare = bare
        self._state = "final"
        return self._server_first.encode()

    def _nonce_matches(self, nonce: str) -> bool:
        """RFC 5802: the client repeats the server's nonce. librdkafka before 2.6.1 (Debian's
        kcat among them) prepends its own nonce to it once more (librdkafka#4895); Kafka
        3.8.1-3.9 accepted that by checking the end of the nonce. We accept exactly that
        form and no other: the server's part is still checked whole, so a replayed exchange
        still fails."""
        client_nonce = self._nonce[:-len(self._server_nonce)]
        return (hmac.compare_digest(nonce.encode(), self._nonce.encode())
                or hmac.compare_digest(nonce.encode(), (client_nonce + self._nonce).encode()))

    def _final(self, message: str) -> bytes:
        self._state = "failed"
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise SaslError("the SCRAM client-final message has no proof")
        attrs = _attributes(without_proof, "cr")
        if _decode(attrs[0][1], "channel binding") != self._gs2_header.encode():
            raise SaslError("the channel binding does not match the client-first message")
        if not self._nonce_matches(attrs[1][1]):
            raise SaslError("the SCRAM nonce does not match")
        proof = _decode(proof_text, "client proof")
        m = self.mechanism
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = m.hmac(self._secret.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslError("the client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(m.digest(client_key), self._secret.stored_key):
            raise SaslError(f"wrong password for {self.username!r}")
        self._state = "done"
        self.complete = True
        return f"v={_b64(m.hmac(self._secret.server_key, auth_message))}".encode()


class ScramClient:
    """A node's or client's half of one SCRAM exchange."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str,
                 nonce: str | None = None, token_auth: bool = False):
        self.mechanism = mechanism
        self.username, self.password = username, password
        self._nonce = nonce or new_nonce()
        self._bare = f"n={_saslname(username)},r={self._nonce}"
        if token_auth:  # a delegation token: the username is its id, the password its HMAC
            self._bare += f",{TOKEN_AUTH}=true"
        self._expected_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = _text(server_first)
        attrs = dict(_attributes(text, "rsi")[:3])
        nonce, salt = attrs["r"], _decode(attrs["s"], "salt")
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise SaslError("the server's nonce does not extend ours")
        if not attrs["i"].isdigit() or int(attrs["i"]) < MIN_ITERATIONS:
            raise SaslError(f"the server asks for too few iterations ({attrs['i']})")
        m = self.mechanism
        salted = m.salted_password(self.password, salt, int(attrs["i"]))
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = m.hmac(salted, b"Client Key")
        signature = m.hmac(m.digest(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._expected_signature = m.hmac(m.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        text = _text(server_final)
        if text.startswith("e="):
            raise SaslError(f"the server refused: {text[2:]}")
        if not text.startswith("v=") or not hmac.compare_digest(
                _decode(text[2:], "server signature"), self._expected_signature):
            raise SaslError("the server's signature is wrong: it does not know our password")


def parse_plain(token: bytes) -> tuple[str, str, str]:
    """`authzid NUL authcid NUL passwd` -> (authzid, username, password)."""
    parts = _text(token).split("\0")
    if len(parts) != 3:
        raise SaslError("invalid PLAIN token: expected authzid, username and password")
    authzid, username, password = parts
    if not username or not password:
        raise SaslError("invalid PLAIN token: empty username or password")
    if authzid and authzid != username:
        raise SaslError("the authorization id is not the user name")
    return authzid, username, password


def plain_token(username: str, password: str) -> bytes:
    return f"\0{username}\0{password}".encode()


class PlainServer:
    """PLAIN against a fixed table of users (the JAAS config's user_<name>="password")."""

    mechanism = PLAIN

    def __init__(self, users: dict[str, str]):
        self._users = users
        self.username: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslError("unexpected PLAIN token after authentication")
        _, username, password = parse_plain(token)
        self.username = username
        expected = self._users.get(username)
        matches = hmac.compare_digest(password.encode(), (expected or "").encode())
        if expected is None or not matches:
            raise SaslError(f"wrong password or unknown user {username!r}")
        self.complete = True
        return b""


class SaslClient:
    """The client side of a mechanism as a sequence of tokens: `start()` is the first,
    `challenge(server_token)` the next, or None once the exchange is complete."""

    def __init__(self, mechanism: str, username: str, password: str,
                 token_auth: bool = False):
        self.mechanism = mechanism
        if mechanism == PLAIN:
            if token_auth:
                raise SaslError("delegation tokens log in with SCRAM, not PLAIN")
            self._scram: ScramClient | None = None
        elif mechanism in SCRAM_MECHANISMS:
            self._scram = ScramClient(SCRAM_MECHANISMS[mechanism], username, password,
                                      token_auth=token_auth)
        else:
            raise SaslError(f"unsupported SASL mechanism {mechanism}")
        self.username, self.password = username, password
        self._step = 0

    def start(self) -> bytes:
        self._step = 1
        if self._scram is None:
            return plain_token(self.username, self.password)
        return self._scram.first_message()

    def challenge(self, token: bytes) -> bytes | None:
        self._step += 1
        if self._scram is None:
            return None
        if self._step == 2:
            return self._scram.final_message(token)
        self._scram.verify(token)
        return None


class SaslLoginRefused(Exception):
    """The broker answered a login request with an error: `error_code` (Kafka's), and the
    broker's own words or, for a refused mechanism, the mechanisms it offers."""

    def __init__(self, error_code: int, message: str):
        super().__init__(message)
        self.error_code = error_code


class SaslLogin:
    """The client's side of a login on a SASL listener, as Kafka's SaslClientAuthenticator
    drives it: SaslHandshake v1 naming the mechanism, then each of the mechanism's tokens in
    a SaslAuthenticate at `authenticate_version`. Sans-IO: `request()` is the next (api key,
    version, body) to send, None once logged in; `response(body)` takes its answer and
    raises SaslLoginRefused for an error code, SaslError for a server token that fails the
    mechanism's checks. Our client and a node logging in to another node both run it."""

    def __init__(self, mechanism: str, username: str, password: str,
                 authenticate_version: int = 1, token_auth: bool = False):
        self.mechanism = mechanism
        self._client = SaslClient(mechanism, username, password, token_auth=token_auth)
        self._version = authenticate_version
        self._next: tuple[int, int, dict] | None = (SASL_HANDSHAKE, 1,
                                                     {"mechanism": mechanism})

    def request(self) -> tuple[int, int, dict] | None:
        return self._next

    def response(self, body: Any) -> None:
        assert self._next is not None, "the login is over"
        api_key = self._next[0]
        if body.error_code != ErrorCode.NONE:
            message = (f"{self.mechanism} is not enabled (the broker offers "
                       f"{', '.join(body.mechanisms)})" if api_key == SASL_HANDSHAKE
                       else body.error_message)
            raise SaslLoginRefused(body.error_code, message or "")
        token = (self._client.start() if api_key == SASL_HANDSHAKE
                 else self._client.challenge(bytes(body.auth_bytes)))
        self._next = (None if token is None else
                      (SASL_AUTHENTICATE, self._version, {"auth_bytes": token}))


_JAAS = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*$",
                   re.S)
_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """`org...PlainLoginModule required username="a" user_a="pw";` -> (module, options)."""
    match = _JAAS.match(text or "")
    if match is None:
        raise SaslError("expected '<LoginModule> required key=\"value\" ...;'")
    module, _, rest = match.groups()
    options: dict[str, str] = {}
    pos = 0
    while rest[pos:].strip():
        option = _OPTION.match(rest, pos)
        if option is None:
            raise SaslError(f"cannot read the JAAS options at {rest[pos:pos + 30]!r}")
        value = option.group(2) if option.group(2) is not None else option.group(3)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = option.end()
    return module, options
