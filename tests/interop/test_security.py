"""TLS and SASL against real clients (confluent-kafka, kafka-python, aiokafka, kcat and our
own): one broker with five listeners side by side.

    PLAINTEXT        the fixture's readiness port, and "another client keeps working"
    SSL              TLS, a client certificate requested (not required)
    MTLS             SSL with ssl.client.auth=required
    SASL_PLAINTEXT   PLAIN (JAAS users admin, alice) and SCRAM
    SASL_SSL         SCRAM-SHA-512 and SCRAM-SHA-256 over TLS

The certificates come from scripts/make_certs.sh (what `make certs` runs), written into the
module's temporary directory. SCRAM users are created with `minibroker users` over the
SASL_PLAINTEXT listener, logged in as the PLAIN admin through --command-config.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import trio
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from broker.events import read_events
from harness.certs import make_certs
from protocol.connection import ClientConnection
from protocol.messages import API_VERSIONS, METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE
from tests.interop.conftest import REPO_ROOT, BrokerFactory, BrokerProcess, free_port
from tests.interop.kcat import kcat
from tests.util import wait_until

HOST = "127.0.0.1"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')


class SecureBroker(BrokerProcess):
    """A broker whose --listen names every listener (the fixture's port is PLAINTEXT)."""

    def __init__(self, base_dir: Path, overrides: dict, ports: dict[str, int]):
        super().__init__(base_dir, overrides, port=ports["PLAINTEXT"])
        self.ports = ports

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--listen") + 1] = ",".join(
            f"{name}://{HOST}:{port}" for name, port in self.ports.items())
        return cmd

    def address(self, listener: str) -> str:
        return f"{HOST}:{self.ports[listener]}"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory, certs) -> SecureBroker:
    ports = {name: free_port() for name in
             ("PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")}
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "ssl.keystore.location": certs / "broker.pem",
        "ssl.truststore.location": certs / "ca.pem",
        "listener.name.ssl.ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
        "sasl.server.max.receive.size": 4096,
    }
    factory = BrokerFactory(tmp_path_factory.mktemp("secure-broker"))
    broker = SecureBroker(factory.base_dir / "broker", overrides, ports)
    factory.brokers.append(broker)
    try:
        broker.start()
        users(broker, certs, "alter", "--entity-name", "alice", "--add-scram",
              "SCRAM-SHA-512=[iterations=8192,password=alice-secret]",
              "--add-scram", "SCRAM-SHA-256=[password=alice-256]")
        yield broker
    finally:
        factory.stop_all()


def users(broker: SecureBroker, certs: Path, *args: str, user: str = "admin",
          password: str = "admin-secret") -> subprocess.CompletedProcess:
    config = certs / f"admin-{user}.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      f"sasl.username={user}\nsasl.password={password}\n")
    done = subprocess.run(
        [sys.executable, "-m", "tools.cli", "users", "--bootstrap-server",
         broker.address("SASL_PLAINTEXT"), "--command-config", str(config), *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    return done


def auth_failures(broker: BrokerProcess, **match) -> list[dict]:
    return [e for e in read_events(broker.data_dir) if e.get("type") == "auth_failure"
            and all(e.get(k) == v for k, v in match.items())]


def wait_auth_failure(broker: BrokerProcess, **match) -> dict:
    return wait_until(lambda: (auth_failures(broker, **match) or [None])[-1], 10,
                      message=f"an auth_failure event with {match}")


def round_trip(bootstrap: str, **security) -> None:
    """Produce three records with confluent-kafka and read them back from the start."""
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **security})
    errors = []
    for i in range(3):
        producer.produce(topic, value=f"v{i}".encode(),
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(20) == 0 and errors == []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, **security})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    try:
        wait_until(lambda: got.extend(m.value() for m in consumer.consume(10, timeout=0.5)
                                      if m.error() is None) or len(got) >= 3, 20,
                   message="the three records back")
    finally:
        consumer.close()
    assert got == [b"v0", b"v1", b"v2"]


def refused(bootstrap: str, **security) -> str:
    """What librdkafka reports when it cannot log in (list_topics fails)."""
    errors: list = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "refused",
                         "error_cb": errors.append, **security})
    try:
        with pytest.raises(KafkaException):
            consumer.list_topics(timeout=3)
    finally:
        consumer.close()
    return " ".join(str(e) for e in errors)


def test_confluent_over_ssl(secure, certs):
    round_trip(secure.address("SSL"), **{"security.protocol": "SSL",
                                         "ssl.ca.location": str(certs / "ca.pem")})


def test_kcat_over_tls(secure, certs):
    topic = f"kcat-tls-{uuid.uuid4().hex[:8]}"
    tls = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs / 'ca.pem'}"]
    kcat("-b", secure.address("SSL"), *tls, "-P", "-t", topic, stdin=b"one\ntwo\n")
    out = kcat("-b", secure.address("SSL"), *tls, "-C", "-t", topic, "-o", "beginning",
               "-e", "-c", "2")
    assert out.split() == ["one", "two"]


def test_kcat_with_scram_over_sasl_ssl(secure, certs):
    """Debian's kcat links librdkafka 2.0, which repeats its own nonce in the SCRAM
    client-final message (librdkafka#4895): it must log in all the same."""
    topic = f"kcat-scram-{uuid.uuid4().hex[:8]}"
    login = ["-X", "security.protocol=sasl_ssl", "-X", f"ssl.ca.location={certs / 'ca.pem'}",
             "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice",
             "-X", "sasl.password=alice-secret"]
    kcat("-b", secure.address("SASL_SSL"), *login, "-P", "-t", topic, stdin=b"one\ntwo\n")
    out = kcat("-b", secure.address("SASL_SSL"), *login, "-C", "-t", topic, "-o", "beginning",
               "-e", "-c", "2")
    assert out.split() == ["one", "two"]


def test_a_client_that_does_not_trust_the_broker_refuses_it(secure, certs):
    message = refused(secure.address("SSL"), **{"security.protocol": "SSL",
                                                "ssl.ca.location": str(certs / "rogue-ca.pem")})
    assert "certificate verify failed" in message


def test_scram_sha_512_over_sasl_ssl_with_confluent(secure, certs):
    tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs / "ca.pem"),
           "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice"}
    round_trip(secure.address("SASL_SSL"), **tls, **{"sasl.password": "alice-secret"})
    message = refused(secure.address("SASL_SSL"), **tls, **{"sasl.password": "wrong"})
    assert "Authentication failed" in message
    event = wait_auth_failure(secure, listener="SASL_SSL", mechanism="SCRAM-SHA-512")
    assert event["principal"] == "User:alice" and "wrong password" in event["reason"]


def test_kafka_python_plain_over_sasl_plaintext(secure):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.errors import KafkaError as KafkaPythonError

    topic = f"kp-sasl-{uuid.uuid4().hex[:8]}"
    sasl = {"bootstrap_servers": secure.address("SASL_PLAINTEXT"),
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "alice"}
    producer = KafkaProducer(**sasl, sasl_plain_password="alice-secret")
    producer.send(topic, b"hello").get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(**sasl, sasl_plain_password="alice-secret",
                             auto_offset_reset="earliest", consumer_timeout_ms=10000)
    consumer.assign([KTopicPartition(topic, 0)])
    assert next(consumer).value == b"hello"
    consumer.close()
    with pytest.raises(KafkaPythonError):
        KafkaProducer(**sasl, sasl_plain_password="wrong", api_version=(2, 5),
                      max_block_ms=3000).send(topic, b"x").get(timeout=3)
    event = wait_auth_failure(secure, listener="SASL_PLAINTEXT", mechanism="PLAIN",
                              principal="User:alice")
    assert "wrong password" in event["reason"]


def test_our_client_with_scram_sha_256_over_sasl_ssl(secure, certs):
    from client import Consumer as OurConsumer
    from client import Producer as OurProducer
    from client.errors import KafkaError

    topic = f"ours-{uuid.uuid4().hex[:8]}"
    settings = {"bootstrap_servers": secure.address("SASL_SSL"),
                "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                "ssl_truststore_location": str(certs / "ca.pem"), "sasl_username": "alice"}

    async def main() -> list[bytes]:
        async with OurProducer(**settings, sasl_password="alice-256") as producer:
            await producer.send(topic, b"scram-256")
        async with OurConsumer(topic, **settings, sasl_password="alice-256",
                               group_id=f"g-{topic}", auto_offset_reset="earliest") as consumer:
            with trio.fail_after(20):
                async for record in consumer:
                    return [record.value]
        return []

    assert trio.run(main) == [b"scram-256"]

    async def wrong() -> None:
        async with OurProducer(**settings, sasl_password="nope", request_timeout_ms=5000,
                               max_block_ms=5000) as producer:
            await producer.send(topic, b"never")

    with pytest.raises(KafkaError, match="SASL_AUTHENTICATION_FAILED|Authentication failed"):
        trio.run(wrong)


def test_users_tool_describes_and_refuses_bad_credentials(secure, certs):
    described = users(secure, certs, "describe", "--entity-name", "alice")
    assert described.returncode == 0, described.stderr
    assert described.stdout.splitlines() == ["alice\tSCRAM-SHA-256\titerations=4096",
                                              "alice\tSCRAM-SHA-512\titerations=8192"]
    few = users(secure, certs, "alter", "--entity-name", "bob", "--add-scram",
                "SCRAM-SHA-512=[iterations=1000,password=x]")
    assert few.returncode == 1 and "UNACCEPTABLE_CREDENTIAL" in few.stderr
    assert "Too few iterations" in few.stderr
    many = users(secure, certs, "alter", "--entity-name", "bob", "--add-scram",
                 "SCRAM-SHA-512=[iterations=20000,password=x]")
    assert many.returncode == 1 and "Too many iterations" in many.stderr
    gone = users(secure, certs, "alter", "--entity-name", "bob", "--delete-scram",
                 "SCRAM-SHA-256")
    assert gone.returncode == 1 and "RESOURCE_NOT_FOUND" in gone.stderr
    missing = users(secure, certs, "describe", "--entity-name", "bob")
    assert missing.returncode == 1 and "RESOURCE_NOT_FOUND" in missing.stderr
    bad_login = users(secure, certs, "describe", user="admin", password="wrong")
    assert bad_login.returncode == 1 and "Authentication failed" in bad_login.stderr


def test_mutual_tls(secure, certs):
    ca = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs / 'ca.pem'}"]
    topic = f"mtls-{uuid.uuid4().hex[:8]}"
    alice = ["-X", f"ssl.certificate.location={certs / 'client.crt'}",
             "-X", f"ssl.key.location={certs / 'client.key'}"]
    kcat("-b", secure.address("MTLS"), *ca, *alice, "-P", "-t", topic, stdin=b"signed\n")
    out = kcat("-b", secure.address("MTLS"), *ca, *alice, "-C", "-t", topic, "-o",
               "beginning", "-e", "-c", "1")
    assert out.split() == ["signed"]
    # no certificate, and one signed by a CA the broker does not trust
    message = refused(secure.address("MTLS"), **{"security.protocol": "SSL",
                                                 "ssl.ca.location": str(certs / "ca.pem")})
    assert message
    wait_auth_failure(secure, listener="MTLS", mechanism="SSL")
    before = len(auth_failures(secure, listener="MTLS"))
    refused(secure.address("MTLS"), **{
        "security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem"),
        "ssl.certificate.location": str(certs / "rogue.crt"),
        "ssl.key.location": str(certs / "rogue.key")})
    wait_until(lambda: len(auth_failures(secure, listener="MTLS")) > before, 10,
               message="an auth_failure for the rogue certificate")
    assert any("certificate" in e["reason"] for e in auth_failures(secure, listener="MTLS"))


# -- bad input: each closes its own connection, logged, with an auth_failure event ------------

def raw_socket(broker: SecureBroker, listener: str) -> socket.socket:
    return socket.create_connection((HOST, broker.ports[listener]), timeout=10)


def closed(sock: socket.socket) -> bool:
    """Read until the broker closes; True when it did (a reset counts)."""
    try:
        while True:
            if sock.recv(65536) == b"":
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def call(sock: socket.socket, conn: ClientConnection, api_key: int, version: int, body):
    _, frame = conn.send_request(api_key, version, body)
    sock.sendall(frame)
    while (response := conn.next_response()) is None:
        data = sock.recv(65536)
        assert data, "the broker closed the connection"
        conn.receive_data(data)
    return response.body


def still_serves(broker: SecureBroker) -> None:
    with raw_socket(broker, "PLAINTEXT") as sock:
        body = call(sock, ClientConnection("check"), METADATA, 1, {"topics": None})
        assert [b.node_id for b in body.brokers] == [0]


@pytest.mark.parametrize("listener, payload, reason", [
    ("SSL", b"\x16\x03\x01\x00\x05garbage-after-a-record-header" * 4, "TLS handshake failed"),
    ("SSL", ClientConnection("plain").send_request(API_VERSIONS, 0, {})[1],
     "TLS handshake failed"),
    ("PLAINTEXT", bytes.fromhex("16030100a5010000a10303") + b"\0" * 40,
     "a TLS handshake on a listener without TLS"),
    ("SASL_PLAINTEXT", ClientConnection("eager").send_request(METADATA, 1, {"topics": None})[1],
     "Metadata request before SASL authentication"),
])
def test_bad_first_bytes_close_that_connection(secure, listener, payload, reason):
    with raw_socket(secure, listener) as sock:
        sock.sendall(payload)
        assert closed(sock)
    event = wait_until(lambda: next((e for e in auth_failures(secure, listener=listener)
                                     if reason in e["reason"]), None), 10,
                       message=f"an auth_failure on {listener}: {reason}")
    assert event["peer"].startswith("127.0.0.1:")
    still_serves(secure)


def sasl_session(secure: SecureBroker) -> tuple[socket.socket, ClientConnection]:
    return raw_socket(secure, "SASL_PLAINTEXT"), ClientConnection("sasl-test")


def test_unknown_mechanism_answers_33_with_the_enabled_ones_and_closes(secure):
    sock, conn = sasl_session(secure)
    with sock:
        body = call(sock, conn, SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert body.error_code == 33
        assert body.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert closed(sock)
    wait_auth_failure(secure, reason="unsupported SASL mechanism 'GSSAPI'")
    still_serves(secure)


def test_authenticate_before_handshake_is_illegal_sasl_state(secure):
    sock, conn = sasl_session(secure)
    with sock:
        body = call(sock, conn, SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"})
        assert body.error_code == 34
        assert closed(sock)
    still_serves(secure)


@pytest.mark.parametrize("mechanism, token", [
    ("PLAIN", b"no-separators"),
    ("PLAIN", b"\xff\0alice\0x"),
    ("SCRAM-SHA-512", b"n,,n=alice"),  # short: no nonce
    ("SCRAM-SHA-512", b"c=biws,r=replayed,p=AAAA"),  # a final message first
])
def test_malformed_tokens_fail_with_58_and_close(secure, mechanism, token):
    sock, conn = sasl_session(secure)
    with sock:
        assert call(sock, conn, SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == 0
        body = call(sock, conn, SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        assert body.error_code == 58 and "Authentication failed" in body.error_message
        assert closed(sock)
    wait_auth_failure(secure, listener="SASL_PLAINTEXT", mechanism=mechanism)
    still_serves(secure)


def test_an_oversized_frame_before_authentication_closes_before_it_is_read(secure):
    sock, conn = sasl_session(secure)
    with sock:
        assert call(sock, conn, SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
        # 4096 is this broker's sasl.server.max.receive.size: the size alone closes it
        sock.sendall((4097).to_bytes(4, "big") + b"x" * 100)
        assert closed(sock)
    event = wait_until(lambda: next((e for e in auth_failures(secure, mechanism="PLAIN")
                                     if "frame size 4097" in e["reason"]), None), 10,
                       message="an auth_failure for the oversized frame")
    assert event["listener"] == "SASL_PLAINTEXT"
    still_serves(secure)


def test_handshake_v0_then_bare_tokens(secure):
    sock, conn = sasl_session(secure)
    with sock:
        assert call(sock, conn, API_VERSIONS, 0, {}).error_code == 0
        assert call(sock, conn, SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        token = b"\0alice\0alice-secret"
        sock.sendall(len(token).to_bytes(4, "big") + token)
        assert sock.recv(4) == b"\0\0\0\0"  # an empty bare token: logged in
        body = call(sock, conn, METADATA, 1, {"topics": None})
        assert [b.port for b in body.brokers] == [secure.ports["SASL_PLAINTEXT"]]
        # after the login, SaslHandshake is answered ILLEGAL_SASL_STATE and serving goes on
        assert call(sock, conn, SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 34
        assert call(sock, conn, API_VERSIONS, 0, {}).error_code == 0


def test_a_tls_client_with_a_bad_handshake_does_not_stop_another(secure, certs):
    """A TLS client that stalls mid-handshake holds only its own connection."""
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    with raw_socket(secure, "SSL") as stalled:
        stalled.sendall(b"\x16\x03\x01")  # the start of a record, never finished
        with socket.create_connection((HOST, secure.ports["SSL"]), timeout=10) as tcp, \
                ctx.wrap_socket(tcp, server_hostname=HOST) as tls:
            body = call(tls, ClientConnection("tls"), METADATA, 1, {"topics": None})
            assert [b.port for b in body.brokers] == [secure.ports["SSL"]]


@pytest.mark.parametrize("mechanism,password", [("SCRAM-SHA-512", "alice-secret"),
                                                ("SCRAM-SHA-256", "alice-256")])
def test_aiokafka_with_scram_over_sasl_ssl(secure, certs, mechanism, password):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition
    from aiokafka.errors import KafkaError as AioKafkaError
    from aiokafka.helpers import create_ssl_context

    topic = f"aio-sasl-{uuid.uuid4().hex[:8]}"

    def login(secret: str) -> dict:
        return {"bootstrap_servers": secure.address("SASL_SSL"),
                "security_protocol": "SASL_SSL", "sasl_mechanism": mechanism,
                "sasl_plain_username": "alice", "sasl_plain_password": secret,
                "ssl_context": create_ssl_context(cafile=str(certs / "ca.pem"))}

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**login(password))
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, b"a%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(auto_offset_reset="earliest", **login(password))
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            got: list[bytes] = []
            while len(got) < 3:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 15)
                got.extend(m.value for m in batch.get(tp, []))
            return got
        finally:
            await consumer.stop()

    async def wrong() -> None:
        producer = AIOKafkaProducer(request_timeout_ms=5000, **login("wrong"))
        try:
            await producer.start()
        finally:
            await producer.stop()

    assert asyncio.run(run()) == [b"a0", b"a1", b"a2"]
    with pytest.raises(AioKafkaError):
        asyncio.run(wrong())
