"""What the broker does not support yet is refused at once: a share-group coordinator key
gets INVALID_REQUEST on a connection that stays up, and an API the broker does not
advertise (AllocateProducerIds, a controller API, here) is refused by the client itself,
from ApiVersions, before anything is sent. An idempotent producer gets its producer id.
"""

from __future__ import annotations

import time

import pytest
import trio
from confluent_kafka import Producer

from client.connection import open_connection
from client.errors import IncompatibleBrokerVersion
from protocol.messages import ALLOCATE_PRODUCER_IDS, FIND_COORDINATOR
from tests.interop.raw import Raw
from tests.util import unique

pytestmark = pytest.mark.interop

PROMPT_S = 3.0  # "within a couple of seconds": the clients' own timeouts are 10 s and more


def test_idempotent_producers_still_get_a_producer_id(shared_broker):
    topic = unique("idem")
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap,
                         "enable.idempotence": True})
    delivered: list = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(30) == 0
    [(err, msg)] = delivered
    assert err is None and msg.offset() == 0


def test_a_malformed_share_coordinator_key_gets_invalid_request_on_the_same_connection(
        shared_broker):
    with Raw(shared_broker) as raw:
        body = raw.call(FIND_COORDINATOR, 4, {"key_type": 2, "coordinator_keys": ["s"]})
        [entry] = body.coordinators
        assert (entry.error_code, entry.error_message) == (
            42, "a share coordinator key is groupId:topicId:partition")
        # the connection stays up: a group lookup on it is answered
        body = raw.call(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        assert body.coordinators[0].key == "g"


def test_an_api_not_advertised_is_refused_by_the_client_at_once(shared_broker):
    """AllocateProducerIds (67) is a controller API, never advertised on a client listener:
    our client refuses it from ApiVersions, before anything is sent. (Every admin call of
    kafka-python and confluent-kafka 2.16 is served now: AlterReplicaLogDirs, then
    UnregisterBroker, were this test's example until they were.)"""
    async def attempt() -> None:
        async with open_connection(shared_broker.host, shared_broker.port) as conn:
            started = time.monotonic()
            with pytest.raises(IncompatibleBrokerVersion, match="does not serve api key 67"):
                await conn.request(ALLOCATE_PRODUCER_IDS, {"broker_id": 7, "broker_epoch": 1})
            assert time.monotonic() - started < PROMPT_S
            # the connection is still usable: nothing went on the wire
            response = await conn.request(FIND_COORDINATOR, {"key_type": 0,
                                                             "coordinator_keys": ["g"]})
            assert response.body.coordinators[0].key == "g"

    trio.run(attempt)
