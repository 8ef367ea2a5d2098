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


@pytest.fixture
def certs(tmp_path):
    from harness.certs import make_certs
    return make_certs(tmp_path)


async def test_drain_decrypted_returns_every_record_already_received(certs):
    """A client writes many small TLS records; the server's one receive_some yields one
    record, and drain_decrypted adds the others already received, in order, without
    reading the transport again."""
    import ssl

    import trio
    import trio.testing

    from broker.security.tls import drain_decrypted

    tmp_path = certs
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "broker.pem")
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    client_raw, server_raw = trio.testing.memory_stream_pair()
    client = trio.SSLStream(client_raw, client_ctx, server_hostname="localhost")
    server = trio.SSLStream(server_raw, server_ctx, server_side=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.do_handshake)
        await server.do_handshake()
    records = [bytes([i]) * 1000 for i in range(20)]
    for record in records:  # one send_all each: one TLS record each
        await client.send_all(record)
    first = await server.receive_some(1 << 20)
    assert len(first) == 1000  # trio hands out one record per call
    got = drain_decrypted(server, first, 1 << 20)
    assert len(got) > 1000  # more than the one record, with no receive_some in between
    while len(got) < 20_000:  # the rest, if the first refill did not hold every record
        got += drain_decrypted(server, await server.receive_some(1 << 20), 1 << 20)
    assert bytes(got) == b"".join(records)
    assert len(drain_decrypted(server, first, 500)) == len(first)  # limit: nothing more
    # not a TLS stream: returned as it is
    plain = b"x" * 10
    assert drain_decrypted(object(), plain, 100) is plain
