"""Delegation tokens (KIP-48) against the real broker: created, described, renewed and
expired over an authenticated SASL_PLAINTEXT connection with our AdminClient and with
`minibroker delegation-tokens`, refused over PLAINTEXT and to a token's own login; a token
logs in with SCRAM and `tokenauth=true` (our client; librdkafka sends no extension, so for
it the token id is an unknown user) and acts as its owner under the ACLs.

One broker, two listeners: PLAINTEXT (the harness's readiness port, allowed everything as
super user ANONYMOUS) and SASL_PLAINTEXT with PLAIN users alice, bob and carol, and SCRAM.
alice may create topics named alice-*, nobody else anything."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, KafkaException

from client import AdminClient, errors
from client.admin import AclBinding
from harness.broker import BrokerProcess
from tests.interop.conftest import REPO_ROOT, BrokerFactory, free_port

pytestmark = pytest.mark.interop

HOST = "127.0.0.1"
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret";')
DEADLINE_S = 20


class TokenBroker(BrokerProcess):
    def __init__(self, base_dir: Path, overrides: dict, sasl_port: int):
        super().__init__(base_dir, overrides)
        self.sasl_port = sasl_port

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--listen") + 1] = (f"PLAINTEXT://{HOST}:{self.port},"
                                          f"SASL_PLAINTEXT://{HOST}:{self.sasl_port}")
        return cmd

    @property
    def sasl(self) -> str:
        return f"{HOST}:{self.sasl_port}"


@pytest.fixture(scope="module")
def tokens_broker(tmp_path_factory) -> TokenBroker:
    factory = BrokerFactory(tmp_path_factory.mktemp("tokens-broker"))
    broker = TokenBroker(factory.base_dir / "broker", {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS",
        "delegation.token.secret.key": "the-cluster-secret",
    }, free_port())
    factory.brokers.append(broker)
    try:
        broker.start()
        trio.run(_grant_alice, broker.bootstrap)
        yield broker
    finally:
        factory.stop_all()


async def _grant_alice(bootstrap: str) -> None:
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        # TOPIC, PREFIXED, CREATE and DESCRIBE, ALLOW
        await admin.create_acls([AclBinding(2, "alice-", 4, "User:alice", "*", op, 3)
                                 for op in (5, 8)])


def as_user(broker: TokenBroker, user: str) -> AdminClient:
    return AdminClient(bootstrap_servers=broker.sasl, security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="PLAIN", sasl_username=user,
                       sasl_password=f"{user}-secret", default_api_timeout_ms=5000)


def with_token(broker: TokenBroker, token_id: str, hmac: bytes) -> AdminClient:
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{token_id}" password="{base64.b64encode(hmac).decode()}" '
            'tokenauth="true";')
    return AdminClient(bootstrap_servers=broker.sasl, security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="SCRAM-SHA-512", sasl_jaas_config=jaas,
                       default_api_timeout_ms=5000)


async def test_tokens_are_refused_over_plaintext(tokens_broker):
    with trio.fail_after(DEADLINE_S):
        async with AdminClient(bootstrap_servers=tokens_broker.bootstrap) as admin:
            with pytest.raises(errors.KafkaError, match="DELEGATION_TOKEN_REQUEST_NOT_ALLOWED"):
                await admin.create_delegation_token()
            with pytest.raises(errors.KafkaError, match="DELEGATION_TOKEN_REQUEST_NOT_ALLOWED"):
                await admin.describe_delegation_token()


async def test_a_token_lives_renews_logs_in_as_its_owner_and_expires(tokens_broker):
    with trio.fail_after(DEADLINE_S):
        async with as_user(tokens_broker, "alice") as alice:
            token = await alice.create_delegation_token(renewers=["User:bob"])
            assert (token.owner, token.requester, token.renewers) == (
                "User:alice", "User:alice", ("User:bob",))
            assert token.issue_timestamp_ms < token.expiry_timestamp_ms <= token.max_timestamp_ms
            [described] = [t for t in await alice.describe_delegation_token()
                           if t.token_id == token.token_id]
            assert described.hmac == token.hmac and described.renewers == ("User:bob",)

        async with as_user(tokens_broker, "bob") as bob:  # a renewer
            assert token.token_id in {t.token_id for t in await bob.describe_delegation_token()}
            assert await bob.renew_delegation_token(token.hmac, renew_period_ms=60_000) \
                <= token.expiry_timestamp_ms
        async with as_user(tokens_broker, "carol") as carol:  # neither owner nor renewer
            assert await carol.describe_delegation_token() == []
            with pytest.raises(errors.KafkaError, match="DELEGATION_TOKEN_OWNER_MISMATCH"):
                await carol.renew_delegation_token(token.hmac)
            with pytest.raises(errors.KafkaError, match="DELEGATION_TOKEN_NOT_FOUND"):
                await carol.expire_delegation_token(b"no such hmac")

        # logged in with the token, the connection is alice's: her topics only
        async with with_token(tokens_broker, token.token_id, token.hmac) as as_token:
            await as_token.create_topics({"alice-by-token": 1})
            with pytest.raises(errors.KafkaError, match="TOPIC_AUTHORIZATION_FAILED"):
                await as_token.create_topics({"bob-by-token": 1})
            # a token's login may not ask for tokens
            with pytest.raises(errors.KafkaError, match="DELEGATION_TOKEN_REQUEST_NOT_ALLOWED"):
                await as_token.create_delegation_token()

        async with as_user(tokens_broker, "alice") as alice:
            assert await alice.expire_delegation_token(token.hmac) > 0
            assert token.token_id not in {t.token_id
                                          for t in await alice.describe_delegation_token()}
        with pytest.raises(errors.KafkaError, match="SASL_AUTHENTICATION_FAILED"):
            async with with_token(tokens_broker, token.token_id, token.hmac) as gone:
                await gone.describe_cluster()


async def test_librdkafka_cannot_log_in_with_a_token(tokens_broker):
    """librdkafka's SCRAM client-first message has no extensions (rdkafka_sasl_scram.c
    writes `n,,n=%s,r=%s`), so a token id and HMAC are taken for a user and refused."""
    with trio.fail_after(DEADLINE_S):
        async with as_user(tokens_broker, "alice") as alice:
            token = await alice.create_delegation_token()
    errors_seen: list = []
    consumer = Consumer({"bootstrap.servers": tokens_broker.sasl, "group.id": "t",
                         "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": token.token_id,
                         "sasl.password": base64.b64encode(token.hmac).decode(),
                         "error_cb": errors_seen.append})
    try:
        with pytest.raises(KafkaException):
            consumer.list_topics(timeout=3)
    finally:
        consumer.close()
    assert "Authentication failed" in " ".join(str(e) for e in errors_seen)


def test_the_tool_creates_describes_renews_and_expires(tokens_broker, tmp_path):
    config = tmp_path / "alice.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      "sasl.username=alice\nsasl.password=alice-secret\n")

    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "cli", "delegation-tokens", "--bootstrap-server",
             tokens_broker.sasl, "--command-config", str(config), *args],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)

    done = tool("--create", "--renewer-principal", "User:bob", "--max-life-time-period",
                "3600000")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("Calling create token operation with renewers :[User:bob] , "
                        "max-life-time-period :3600000")
    token_id = lines[1].removeprefix("Created delegation token with tokenId : ")
    assert lines[2].split() == ["TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS",
                                "ISSUEDATE", "EXPIRYDATE", "MAXDATE"]
    row = lines[3].split()
    assert row[0] == token_id and row[2:5] == ["User:alice", "User:alice", "[User:bob]"]
    hmac = row[1]

    done = tool("--describe", "--owner-principal", "User:alice")
    assert "Total number of tokens : " in done.stdout and token_id in done.stdout
    done = tool("--renew", "--hmac", hmac, "--renew-time-period", "600000")
    assert done.returncode == 0 and done.stdout.startswith(
        "Completed renew operation. New expiry date : "), done.stderr
    done = tool("--expire", "--hmac", hmac)
    assert done.returncode == 0 and done.stdout.startswith(
        "Completed expire operation. New expiry date : "), done.stderr
    done = tool("--renew", "--hmac", hmac)
    assert done.returncode == 1 and "DELEGATION_TOKEN_NOT_FOUND" in done.stderr
