"""What the broker does not support yet is refused at once, with an error each real client
treats as final: a transactional producer's initialisation (confluent-kafka, aiokafka,
kafka-python) fails within seconds instead of retrying until its timeout, and an idempotent
producer, which asks for a producer id the same way without a transactional id, still works.
An API the broker does not advertise (DeleteRecords here) is refused by the clients
themselves, from ApiVersions, before anything is sent.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import TransactionalIdAuthorizationFailed
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka import TopicPartition as KPTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import IncompatibleBrokerVersion, TransactionalIdAuthorizationFailedError

from protocol.messages import FIND_COORDINATOR
from tests.interop.raw import Raw
from tests.util import unique

pytestmark = pytest.mark.interop

PROMPT_S = 3.0  # "within a couple of seconds": the clients' own timeouts are 10 s and more
REASON = "transactions are not supported by this broker yet"


def test_confluent_init_transactions_fails_fatally_naming_the_reason(shared_broker):
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap,
                         "transactional.id": unique("tx")})
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(30)
    elapsed = time.monotonic() - started
    error = raised.value.args[0]
    assert elapsed < PROMPT_S, f"init_transactions took {elapsed:.1f} s"
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error.fatal() and not error.retriable()
    assert REASON in error.str()


def test_aiokafka_transactional_start_fails_promptly(shared_broker):
    async def start() -> float:
        producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                                    transactional_id=unique("tx"))
        started = time.monotonic()
        try:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                await asyncio.wait_for(producer.start(), 30)
            return time.monotonic() - started
        finally:
            await producer.stop()

    elapsed = asyncio.run(start())
    assert elapsed < PROMPT_S, f"start() took {elapsed:.1f} s"


def test_kafka_python_init_transactions_fails_promptly(shared_broker):
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                             transactional_id=unique("tx"), max_block_ms=30_000)
    try:
        started = time.monotonic()
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
        elapsed = time.monotonic() - started
        assert elapsed < PROMPT_S, f"init_transactions took {elapsed:.1f} s"
    finally:
        producer.close(timeout=5)


def test_idempotent_producers_still_get_a_producer_id(shared_broker):
    topic = unique("idem")
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap,
                         "enable.idempotence": True})
    delivered: list = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(30) == 0
    [(err, msg)] = delivered
    assert err is None and msg.offset() == 0


def test_a_share_group_key_gets_invalid_request_on_the_same_connection(shared_broker):
    with Raw(shared_broker) as raw:
        body = raw.call(FIND_COORDINATOR, 4, {"key_type": 2, "coordinator_keys": ["s"]})
        [entry] = body.coordinators
        assert (entry.error_code, entry.error_message) == (
            42, "share groups are not supported by this broker")
        # the connection stays up: a group lookup on it is answered
        body = raw.call(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        assert body.coordinators[0].key == "g"


def test_an_api_not_advertised_is_refused_by_the_clients_at_once(shared_broker):
    topic = unique("records")
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        for future in admin.delete_records([TopicPartition(topic, 0, 0)]).values():
            future.result(30)
    assert raised.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
    assert time.monotonic() - started < PROMPT_S

    kp_admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        started = time.monotonic()
        with pytest.raises(IncompatibleBrokerVersion, match="DeleteRecords"):
            kp_admin.delete_records({KPTopicPartition(topic, 0): 0})
        assert time.monotonic() - started < PROMPT_S
    finally:
        kp_admin.close()
