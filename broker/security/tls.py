"""TLS for SSL and SASL_SSL listeners: the `ssl.SSLContext` each end needs, from Kafka's
PEM properties (KIP-651), and the principal a client certificate carries.

Owns: `server_context` (a listener's: its key and certificate chain, the CAs it trusts for
client certificates, `ssl.client.auth`), `client_context` (what this node presents and
trusts when it connects to another node's listener), `principal_from_cert` (Kafka's DEFAULT
`ssl.principal.mapping.rules`: `User:` and the subject as an RFC 2253 distinguished name,
most specific attribute first, e.g. `User:CN=alice,OU=eng`), `TlsConfigError`, and
`drain_decrypted` (the hot path's read of every TLS record already received).

Every property is read as the listener sees it (`listener.name.<listener>.<property>`
first). The key store is either one PEM file (`ssl.keystore.location`, key and chain) or
PEM text (`ssl.keystore.key` and `ssl.keystore.certificate.chain`); the trust store a PEM
file of CA certificates or their text. The `ssl` module reads a key only from a file, so
PEM text is written to a private temporary file that is removed once loaded.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Any

from broker.config import BrokerConfig, ConfigError

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}

# the attribute keywords of RFC 2253 (and Java's X500Principal), by the names Python's
# getpeercert() gives them
_KEYWORDS = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
             "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
             "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}
_EMAIL_OID = "1.2.840.113549.1.9.1"


def drain_decrypted(stream: object, data: bytes | bytearray, limit: int) -> bytes | bytearray:
    """`data` (what `trio.SSLStream.receive_some` returned) with whatever more the stream
    can decrypt from bytes it has already received, up to `limit` bytes in all.

    SSLStream.receive_some returns one TLS record at a time (OpenSSL's SSL_read does), and
    every call is a trip through trio's scheduler: librdkafka writes records of a few KB,
    so a 1 MB produce request took ~250 trips and TLS produce ran at 54% of PLAINTEXT,
    the broker's CPU spent in the scheduler, not in AES. The records already in the
    stream's incoming buffer are decrypted here without yielding. trio.SSLStream cannot be
    subclassed and has no public call for this, so it reads its SSLObject and incoming BIO
    (trio 0.35); without them this returns `data` unchanged. Anything but data (no whole
    record left, close_notify, an error) stops the drain and is left for the next
    receive_some to meet through trio's own code."""
    ssl_object = getattr(stream, "_ssl_object", None)
    incoming = getattr(stream, "_incoming", None)
    if ssl_object is None or incoming is None or not data:
        return data
    chunks = [data]
    total = len(data)
    while total < limit and (incoming.pending or ssl_object.pending()):
        try:
            more = ssl_object.read(limit - total)
        except ssl.SSLError:  # SSLWantReadError: only part of a record is here
            break
        if not more:
            break
        chunks.append(more)
        total += len(more)
    return b"".join(chunks) if len(chunks) > 1 else data


class TlsConfigError(ConfigError):
    """A listener's TLS properties do not make a usable context (named in the message)."""


def _versions(ctx: ssl.SSLContext, enabled: Any) -> None:
    chosen = sorted(_VERSIONS[v] for v in enabled if v in _VERSIONS)
    if not chosen:
        raise TlsConfigError(f"ssl.enabled.protocols: none of {list(enabled)} is supported "
                             "(TLSv1.2, TLSv1.3)")
    ctx.minimum_version, ctx.maximum_version = chosen[0], chosen[-1]


def _load_keystore(ctx: ssl.SSLContext, config: BrokerConfig, listener: str,
                   required: bool) -> None:
    location = config.for_listener(listener, "ssl.keystore.location")
    chain = config.for_listener(listener, "ssl.keystore.certificate.chain")
    key = config.for_listener(listener, "ssl.keystore.key")
    password = config.for_listener(listener, "ssl.key.password")
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
        elif chain and key:
            with tempfile.TemporaryDirectory() as private:  # mode 0700
                path = os.path.join(private, "keystore.pem")
                with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                    f.write(key.strip() + "\n" + chain.strip() + "\n")
                ctx.load_cert_chain(path, password=password)
        elif required:
            raise TlsConfigError(f"listener {listener}: TLS needs ssl.keystore.location, or "
                                 "ssl.keystore.key and ssl.keystore.certificate.chain")
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"listener {listener}: cannot load the key store: {e}") from e


def _load_truststore(ctx: ssl.SSLContext, config: BrokerConfig, listener: str) -> bool:
    location = config.for_listener(listener, "ssl.truststore.location")
    certificates = config.for_listener(listener, "ssl.truststore.certificates")
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
        elif certificates:
            ctx.load_verify_locations(cadata=certificates)
        else:
            return False
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"listener {listener}: cannot load the trust store: {e}") from e
    return True


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, config.for_listener(listener, "ssl.enabled.protocols"))
    _load_keystore(ctx, config, listener, required=True)
    client_auth = config.for_listener(listener, "ssl.client.auth")
    ctx.verify_mode = _CLIENT_AUTH[client_auth]
    if not _load_truststore(ctx, config, listener) and client_auth != "none":
        raise TlsConfigError(f"listener {listener}: ssl.client.auth={client_auth} needs a "
                             "trust store (ssl.truststore.location or .certificates)")
    return ctx


def client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """What this node uses to reach another node's `listener`: its trust store (else the
    system's), its own certificate when it has one (for ssl.client.auth), and the host
    name check of ssl.endpoint.identification.algorithm."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, config.for_listener(listener, "ssl.enabled.protocols"))
    if not _load_truststore(ctx, config, listener):
        ctx.load_default_certs()
    _load_keystore(ctx, config, listener, required=False)
    algorithm = config.for_listener(listener, "ssl.endpoint.identification.algorithm") or ""
    ctx.check_hostname = algorithm.lower() == "https"
    return ctx


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    if name == "emailAddress":
        # Java writes attributes without an RFC 2253 keyword by OID, the value as its DER
        # encoding in hex (an IA5String here)
        data = value.encode("ascii", "replace")
        return f"{_EMAIL_OID}=#16{len(data):02x}{data.hex()}"
    return f"{name}={_escape(value)}"


def subject_name(cert: dict[str, Any]) -> str:
    """The certificate's subject as RFC 2253 writes it: most specific RDN first."""
    rdns = cert.get("subject") or ()
    return ",".join("+".join(_attribute(n, v) for n, v in rdn) for rdn in reversed(rdns))


def principal_from_cert(cert: dict[str, Any] | None) -> str | None:
    """Kafka's DEFAULT mapping; None for a connection without a (verified) certificate."""
    if not cert or not cert.get("subject"):
        return None
    return f"User:{subject_name(cert)}"
