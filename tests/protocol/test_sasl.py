"""The sans-IO SASL mechanisms: SCRAM (RFC 5802/7677) both ways, PLAIN, JAAS options."""

from __future__ import annotations

import base64

import pytest

from protocol.sasl import (
    SCRAM_MECHANISMS, PlainServer, SaslClient, SaslError, ScramClient, ScramServer,
    parse_jaas, parse_plain, scram_secret,
)

SHA512 = SCRAM_MECHANISMS["SCRAM-SHA-512"]
SALT = b"0123456789abcdef"


def server(password: str = "alice-secret", iterations: int = 4096, user: str = "alice",
           mechanism=SHA512) -> ScramServer:
    secret = scram_secret(mechanism, mechanism.salted_password(password, SALT, iterations),
                          SALT, iterations)
    return ScramServer(mechanism, lambda name: secret if name == user else None, "srvnonce")


def exchange(srv: ScramServer, client: SaslClient) -> None:
    token = client.start()
    while token is not None:
        token = client.challenge(srv.step(token))


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_right_password_logs_in_and_the_client_checks_the_server(name):
    mechanism = SCRAM_MECHANISMS[name]
    srv = server(mechanism=mechanism, user="al,i=ce")  # escaped as =2C and =3D on the wire
    exchange(srv, SaslClient(name, "al,i=ce", "alice-secret"))
    assert srv.complete and srv.username == "al,i=ce"


def test_rfc7677_test_vector():
    """RFC 7677 section 3: user, password, nonces and salt as the RFC gives them."""
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-256"]
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    secret = scram_secret(mechanism, mechanism.salted_password("pencil", salt, 4096), salt, 4096)
    srv = ScramServer(mechanism, lambda _: secret, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    client = ScramClient(mechanism, "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    assert srv.step(client.first_message()) == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = client.final_message(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                 b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert srv.step(final) == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert srv.complete


def test_a_wrong_password_fails_and_the_server_answers_no_signature():
    srv = server()
    client = SaslClient("SCRAM-SHA-512", "alice", "wrong")
    second = client.challenge(srv.step(client.start()))
    with pytest.raises(SaslError, match="wrong password"):
        srv.step(second)
    assert not srv.complete


def test_unknown_user_fails_at_the_first_message():
    with pytest.raises(SaslError, match="unknown user"):
        server().step(b"n,,n=bob,r=abc")


@pytest.mark.parametrize("token, reason", [
    (b"", "invalid SCRAM client-first"),
    (b"n,,", "malformed SCRAM attribute"),
    (b"p=tls-unique,,n=alice,r=abc", "channel binding is not supported"),
    (b"n,,r=abc,n=alice", "does not start with n,r"),
    (b"n,,n=al=ice,r=abc", "invalid escape"),
    (b"n,,n=alice,r=a,b", "malformed SCRAM attribute"),
    (b"n,a=bob,n=alice,r=abc", "authorization id"),
    (b"\xff\xfe", "not UTF-8"),
])
def test_malformed_first_messages_fail(token, reason):
    with pytest.raises(SaslError, match=reason):
        server().step(token)


def test_client_final_checks_nonce_binding_proof_and_replay():
    srv = server()
    client = ScramClient(SHA512, "alice", "alice-secret", "clientnonce")
    server_first = srv.step(client.first_message())
    final = client.final_message(server_first)
    for bad, reason in [
        (final.replace(b"srvnonce", b"othernce"), "nonce does not match"),
        (final.replace(b"c=biws", b"c=eSws"), "channel binding does not match"),
        (final.split(b",p=")[0], "no proof"),
        (final.split(b",p=")[0] + b",p=AAAA", "wrong length"),
        (final.split(b",p=")[0] + b",p=!!", "not base64"),
    ]:
        fresh = server()
        fresh.step(client.first_message())
        with pytest.raises(SaslError, match=reason):
            fresh.step(bad)
    srv.step(final)
    with pytest.raises(SaslError, match="unexpected SCRAM message"):
        srv.step(final)  # a replayed final message after success


def test_a_short_exchange_cannot_skip_to_the_final_message():
    with pytest.raises(SaslError):
        server().step(b"c=biws,r=clientnoncesrvnonce,p=AAAA")


def test_too_few_iterations_are_refused_by_both_ends():
    srv = server(iterations=1000)
    with pytest.raises(SaslError, match="too few iterations"):
        srv.step(b"n,,n=alice,r=abc")
    client = ScramClient(SHA512, "alice", "pw", "abc")
    client.first_message()
    with pytest.raises(SaslError, match="too few iterations"):
        client.final_message(b"r=abcdef,s=AAAA,i=100")


def test_the_client_refuses_a_server_that_does_not_know_the_password():
    srv = server(password="other")
    client = SaslClient("SCRAM-SHA-512", "alice", "other")
    second = client.challenge(srv.step(client.start()))
    srv.step(second)
    impostor = SaslClient("SCRAM-SHA-512", "alice", "other")
    impostor.challenge(server(password="other").step(impostor.start()))
    with pytest.raises(SaslError, match="signature is wrong"):
        impostor.challenge(b"v=" + base64.b64encode(b"x" * 64))


def test_plain():
    assert parse_plain(b"\0alice\0secret") == ("", "alice", "secret")
    assert parse_plain(b"alice\0alice\0secret") == ("alice", "alice", "secret")
    for bad in (b"alice\0secret", b"\0\0secret", b"\0alice\0", b"bob\0alice\0pw", b"\0a\0b\0c"):
        with pytest.raises(SaslError):
            parse_plain(bad)
    plain = PlainServer({"alice": "secret"})
    with pytest.raises(SaslError):
        plain.step(b"\0alice\0wrong")
    with pytest.raises(SaslError):
        PlainServer({"alice": "secret"}).step(b"\0mallory\0secret")
    plain = PlainServer({"alice": "secret"})
    assert plain.step(b"\0alice\0secret") == b"" and plain.complete


def test_jaas():
    module, options = parse_jaas(
        'org.apache.kafka.common.security.plain.PlainLoginModule required\n'
        '  username="admin" password="a \\"quoted\\" secret" user_alice="alice-secret";')
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options == {"username": "admin", "password": 'a "quoted" secret',
                       "user_alice": "alice-secret"}
    for bad in ("", "required username=x;", 'Module required username="x" =;'):
        with pytest.raises(SaslError):
            parse_jaas(bad)


def _final_with_nonce(server_first: bytes, client_first_bare: str, nonce: str,
                      password: str = "alice-secret") -> bytes:
    """A client-final message whose r= is `nonce`, with a proof that is right for it."""
    attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = SHA512.salted_password(password, base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = SHA512.hmac(salted, b"Client Key")
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    signature = SHA512.hmac(SHA512.digest(client_key), auth_message)
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_librdkafkas_doubled_client_nonce_is_accepted_and_nothing_looser():
    """librdkafka before 2.6.1 (Debian's kcat) sends r=<client nonce><server's nonce>, the
    client's part twice (librdkafka#4895); exactly that form logs in, other prefixes and a
    wrong server part do not."""
    for nonce, accepted in [("clientnonceclientnoncesrvnonce", True),
                            ("clientnoncesrvnonce", True),
                            ("xclientnoncesrvnonce", False),
                            ("clientnonceclientnoncesrvnonceX", False),
                            ("clientnonceclientnonceothernce", False)]:
        srv = server()
        srv.step(b"n,,n=alice,r=clientnonce")
        server_first = f"r=clientnoncesrvnonce,s={base64.b64encode(SALT).decode()},i=4096"
        final = _final_with_nonce(server_first.encode(), "n=alice,r=clientnonce", nonce)
        if accepted:
            srv.step(final)
            assert srv.complete and srv.username == "alice"
        else:
            with pytest.raises(SaslError, match="nonce does not match"):
                srv.step(final)


def test_sasl_login_runs_handshake_then_tokens_and_reports_refusals():
    from types import SimpleNamespace as Body

    from protocol.errors import ErrorCode
    from protocol.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE
    from protocol.sasl import SaslLogin, SaslLoginRefused

    srv = server()
    login = SaslLogin("SCRAM-SHA-512", "alice", "alice-secret", authenticate_version=2)
    assert login.request() == (SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
    login.response(Body(error_code=0, mechanisms=["SCRAM-SHA-512"]))
    sent = 0
    while (request := login.request()) is not None:
        api_key, version, body = request
        assert (api_key, version) == (SASL_AUTHENTICATE, 2)
        login.response(Body(error_code=0, auth_bytes=srv.step(body["auth_bytes"])))
        sent += 1
    assert sent == 2 and srv.complete and srv.username == "alice"

    refused = SaslLogin("PLAIN", "alice", "x")
    with pytest.raises(SaslLoginRefused, match="offers SCRAM-SHA-256") as e:
        refused.response(Body(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                              mechanisms=["SCRAM-SHA-256"]))
    assert e.value.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    wrong = SaslLogin("PLAIN", "alice", "x")
    wrong.response(Body(error_code=0, mechanisms=["PLAIN"]))
    with pytest.raises(SaslLoginRefused, match="Invalid username") as e:
        wrong.response(Body(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                            error_message="Invalid username or password", auth_bytes=b""))
    assert e.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_a_delegation_token_logs_in_with_the_tokenauth_extension():
    """KIP-48: client-first `n,,n=<token id>,r=<nonce>,tokenauth=true`, the password the
    token's HMAC in base64; the server looks the token up, not a user of that name."""
    from broker.security.tokens import token_hmac, token_scram_secret
    from protocol.sasl import token_password

    token_id, key = "tok-1", "secret-key"
    tokens = {token_id: (token_scram_secret(SHA512, key, token_id), "alice")}
    srv = ScramServer(SHA512, lambda name: None, "srvnonce", token_lookup=tokens.get)
    client = SaslClient("SCRAM-SHA-512", token_id, token_password(token_hmac(key, token_id)),
                        token_auth=True)
    first = client.start()
    assert first.decode().startswith("n,,n=tok-1,r=") and first.endswith(b",tokenauth=true")
    token = first
    while token is not None:
        token = client.challenge(srv.step(token))
    assert srv.complete and srv.token_owner == "alice"

    # without the extension the token id is looked up as a user name, and is none
    srv = ScramServer(SHA512, lambda name: None, "srvnonce", token_lookup=tokens.get)
    with pytest.raises(SaslError, match="unknown user"):
        exchange(srv, SaslClient("SCRAM-SHA-512", token_id, "whatever"))
    # a wrong HMAC fails like a wrong password
    srv = ScramServer(SHA512, lambda name: None, "srvnonce", token_lookup=tokens.get)
    with pytest.raises(SaslError, match="wrong password"):
        exchange(srv, SaslClient("SCRAM-SHA-512", token_id, "bm90LXRoZS1obWFj",
                                 token_auth=True))
    # an unknown or expired token
    srv = ScramServer(SHA512, lambda name: None, "srvnonce", token_lookup={}.get)
    with pytest.raises(SaslError, match="delegation token"):
        exchange(srv, SaslClient("SCRAM-SHA-512", token_id, "x", token_auth=True))
