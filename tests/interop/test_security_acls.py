"""Authentication and authorization together, with real clients: principals that logged in
over SASL_SSL (SCRAM-SHA-512, confluent-kafka and our client) and SASL_PLAINTEXT (PLAIN,
kafka-python) are held to the ACLs of the metadata log.

One broker for the module: PLAINTEXT on loopback for the administrator (User:ANONYMOUS is
the super user, as README.md's walk-through sets it up), SASL_SSL with SCRAM users alice,
bob and carol, and SASL_PLAINTEXT whose JAAS config accepts alice and bob. The ACLs each
test needs are created through the PLAINTEXT port with confluent-kafka's AdminClient.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import trio
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType,
    ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

from client import Producer as OurProducer
from client.errors import TopicAuthorizationFailedError as OurTopicAuthorizationFailed
from tests.interop.conftest import BrokerFactory, free_port
from tests.interop.group_helpers import wait_for_error
from harness.certs import make_certs
from tests.interop.test_security import SecureBroker
from tests.util import wait_until

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-plain" user_bob="bob-plain";')
SCRAM_USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT")}
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "ssl.keystore.location": certs / "broker.pem",
        "ssl.truststore.location": certs / "ca.pem",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": STANDARD,
        "super.users": "User:ANONYMOUS",
    }
    factory = BrokerFactory(tmp_path_factory.mktemp("secure-acl-broker"))
    process = SecureBroker(factory.base_dir / "broker", overrides, ports)
    factory.brokers.append(process)
    try:
        process.start()
        process.certs = certs  # type: ignore[attr-defined]
        admin = AdminClient({"bootstrap.servers": process.address("PLAINTEXT")})
        upserts = [UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode())
            for user, password in SCRAM_USERS.items()]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(20)
        yield process
    finally:
        factory.stop_all()


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})


def allow(broker, principal: str, rtype, name: str, op, *, perm=ALLOW,
          pattern=ResourcePatternType.LITERAL) -> None:
    client = admin(broker)
    for future in client.create_acls([AclBinding(rtype, name, pattern, principal, "*", op,
                                                 perm)]).values():
        future.result(10)


def create_topic(broker, name: str) -> None:
    client = admin(broker)
    client.create_topics([NewTopic(name, 1, 1)])[name].result(20)


def scram(broker, user: str) -> dict:
    certs: Path = broker.certs
    return {"bootstrap.servers": broker.address("SASL_SSL"), "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs / "ca.pem"), "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": SCRAM_USERS[user]}


def produce_error(conf: dict, topic: str):
    """The delivery error of one record through librdkafka (None when delivered)."""
    producer = Producer({**conf, "message.timeout.ms": 5000, "enable.idempotence": False})
    errors: list = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert len(errors) == 1
    return errors[0]


def code(error) -> int | None:
    return None if error is None else error.code()


def test_a_scram_principal_without_acls_gets_the_authorization_error_codes(broker):
    topic = unique("orders-")
    create_topic(broker, topic)
    assert code(produce_error(scram(broker, "carol"), topic)) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    # with READ on the topic but nothing on the group, joining is refused
    allow(broker, "User:carol", ResourceType.TOPIC, topic, AclOperation.READ)
    wait_for_error({**scram(broker, "carol"), "group.id": unique("g-")}, topic,
                   KafkaError.GROUP_AUTHORIZATION_FAILED)


def test_a_prefixed_acl_grants_the_scram_user_exactly_its_prefix(broker):
    prefix = unique("pay-")
    allow(broker, "User:alice", ResourceType.TOPIC, prefix + "-", AclOperation.ALL,
          pattern=ResourcePatternType.PREFIXED)
    alice = scram(broker, "alice")
    assert produce_error(alice, prefix + "-eu") is None  # auto-created: CREATE is in ALL
    # the prefix is a string prefix: a name that stops short of it is another resource
    create_topic(broker, prefix)
    assert code(produce_error(alice, prefix)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # and the grant is alice's alone: bob, logged in the same way, is refused
    assert code(produce_error(scram(broker, "bob"), prefix + "-eu")) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_deny_beats_an_allow_for_a_plain_user_with_kafka_python(broker):
    topic = unique("shared-")
    create_topic(broker, topic)
    allow(broker, "User:*", ResourceType.TOPIC, topic, AclOperation.WRITE)
    allow(broker, "User:bob", ResourceType.TOPIC, topic, AclOperation.WRITE, perm=DENY)

    def producer(user: str) -> KafkaProducer:
        return KafkaProducer(bootstrap_servers=broker.address("SASL_PLAINTEXT"),
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username=user,
                             sasl_plain_password=f"{user}-plain", retries=0,
                             request_timeout_ms=5000, max_block_ms=10000)

    alice = producer("alice")
    try:
        alice.send(topic, b"from alice").get(timeout=10)  # User:* WRITE allows her
    finally:
        alice.close()
    bob = producer("bob")
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            bob.send(topic, b"from bob").get(timeout=10)
    finally:
        bob.close()


def test_a_plain_user_without_group_read_is_refused_by_kafka_python(broker):
    topic = unique("grp-")
    create_topic(broker, topic)
    allow(broker, "User:alice", ResourceType.TOPIC, topic, AclOperation.READ)
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.address("SASL_PLAINTEXT"),
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="alice", sasl_plain_password="alice-plain",
                             group_id=unique("g-"))
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            wait_until(lambda: consumer.poll(timeout_ms=500) and False, 20,
                       message="GroupAuthorizationFailedError from poll")
    finally:
        consumer.close()


def test_our_producer_fails_a_send_to_a_topic_it_may_not_describe_at_once(broker):
    granted, denied = unique("mine-"), unique("theirs-")
    create_topic(broker, denied)
    allow(broker, "User:alice", ResourceType.TOPIC, granted, AclOperation.WRITE)
    settings = {"bootstrap_servers": broker.address("SASL_SSL"),
                "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                "ssl_truststore_location": str(broker.certs / "ca.pem"),
                "sasl_username": "alice", "sasl_password": SCRAM_USERS["alice"]}

    async def main() -> float:
        async with OurProducer(**settings) as producer:
            started = time.monotonic()
            with pytest.raises(OurTopicAuthorizationFailed, match=denied):
                await producer.send_and_wait(denied, b"v")
            return time.monotonic() - started

    elapsed = trio.run(main)
    assert elapsed < 2.0, f"the send failed after {elapsed:.1f} s"
