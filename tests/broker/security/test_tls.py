"""Kafka's DEFAULT principal mapping: User: and the subject in RFC 2253 form."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.security.tls import TlsConfigError, principal_from_cert, server_context


def test_subject_is_written_most_specific_first_with_rfc2253_escapes():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc."),),
                        (("organizationalUnitName", "eng"), ("userId", "7")),
                        (("commonName", " alice+bob "),))}
    assert principal_from_cert(cert) == "User:CN=\\ alice\\+bob\\ ,OU=eng+UID=7," \
                                        "O=Acme\\, Inc.,C=US"
    email = {"subject": ((("emailAddress", "a@b.c"),), (("commonName", "x"),))}
    # no RFC 2253 keyword: the OID and the DER value in hex (IA5String, 5 bytes), as Java
    assert principal_from_cert(email) == "User:CN=x,1.2.840.113549.1.9.1=#16056140622e63"
    assert principal_from_cert(None) is None and principal_from_cert({}) is None


def test_a_tls_listener_without_a_key_store_is_a_config_error():
    config = BrokerConfig.load({"listener.security.protocol.map": "PLAINTEXT:SSL"})
    with pytest.raises(TlsConfigError, match="ssl.keystore.location"):
        server_context(config, "PLAINTEXT")
