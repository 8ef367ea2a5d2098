"""The client's side of a secured listener: its TLS context and its SASL login.

Owns: `tls_context` (from the ClientConfig's Java-named ssl_* settings: the CA
certificates trusted, `ssl_truststore_location` or `ssl_truststore_certificates`, else the
system's; a PEM key store for mutual TLS; the host name check unless
`ssl_endpoint_identification_algorithm` is empty), `sasl_credentials` (the mechanism and
the username/password, from `sasl_username`/`sasl_password` as librdkafka spells them or
from `sasl_jaas_config` as Java does, whose `tokenauth="true"` logs in with a delegation
token: the username is the token id, the password its HMAC in base64) and
`SecurityConfigError`.

BrokerConnection wraps the stream in TLS right after connecting, and logs in with
SaslHandshake v1 and SaslAuthenticate right after ApiVersions, before it reports ready.
"""

from __future__ import annotations

import os
import ssl
import tempfile

from client.config import ClientConfig
from protocol.sasl import SaslError, parse_jaas


class SecurityConfigError(ValueError):
    """The client's ssl_* or sasl_* settings cannot be used (the message says which)."""


def tls_context(config: ClientConfig) -> ssl.SSLContext | None:
    if config.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if config.ssl_truststore_location:
            ctx.load_verify_locations(cafile=config.ssl_truststore_location)
        elif config.ssl_truststore_certificates:
            ctx.load_verify_locations(cadata=config.ssl_truststore_certificates)
        else:
            ctx.load_default_certs()
        if config.ssl_keystore_location:
            ctx.load_cert_chain(config.ssl_keystore_location, password=config.ssl_key_password)
        elif config.ssl_keystore_key and config.ssl_keystore_certificate_chain:
            with tempfile.TemporaryDirectory() as private:  # the ssl module reads files only
                path = os.path.join(private, "keystore.pem")
                with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                    f.write(config.ssl_keystore_key.strip() + "\n"
                            + config.ssl_keystore_certificate_chain.strip() + "\n")
                ctx.load_cert_chain(path, password=config.ssl_key_password)
    except (OSError, ssl.SSLError) as e:
        raise SecurityConfigError(f"cannot load the TLS trust or key store: {e}") from e
    ctx.check_hostname = (config.ssl_endpoint_identification_algorithm or "").lower() == "https"
    return ctx


def sasl_credentials(config: ClientConfig) -> tuple[str, str, str, bool] | None:
    """(mechanism, username, password, token_auth) on a SASL listener, else None."""
    if config.security_protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return None
    username, password = config.sasl_username, config.sasl_password
    token_auth = False
    if config.sasl_jaas_config:
        try:
            options = parse_jaas(config.sasl_jaas_config)[1]
        except SaslError as e:
            raise SecurityConfigError(f"sasl_jaas_config: {e}") from None
        username = options.get("username", username)
        password = options.get("password", password)
        token_auth = options.get("tokenauth", "").lower() == "true"
    if not username or password is None:
        raise SecurityConfigError(f"security_protocol {config.security_protocol} needs "
                                  "sasl_username and sasl_password (or sasl_jaas_config)")
    if token_auth and config.sasl_mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise SecurityConfigError("tokenauth (a delegation token) needs a SCRAM sasl_mechanism")
    return config.sasl_mechanism, username, password, token_auth
