"""Client quotas against the real broker: `minibroker configs` for users, clients, both and
defaults, as kafka-configs.sh spells them; kafka-python's own encoding of
DescribeClientQuotas and AlterClientQuotas (its admin has no quota calls, its protocol
package has the messages; confluent-kafka 2.16's admin has none at all); and librdkafka
throttled: a confluent-kafka producer over its producer_byte_rate is told a throttle time
(its throttle_cb) while one with another client id is not."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from tests.interop.librdkafka import create_topic
from tests.interop.test_console_tools import cli
from tests.util import unique

pytestmark = pytest.mark.interop

INVALID_REQUEST = 42


def configs(bootstrap: str, *args: str) -> str:
    done = cli("configs", "--bootstrap-server", bootstrap, *args)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def test_configs_alter_describe_and_delete_client_quotas(shared_broker):
    bs = shared_broker.bootstrap
    client = unique("quota-client")
    assert configs(bs, "--alter", "--add-config",
                   "producer_byte_rate=1024,consumer_byte_rate=2048",
                   "--entity-type", "clients", "--entity-name", client) == \
        f"Completed updating config for client {client}.\n"
    assert configs(bs, "--alter", "--entity-type", "users", "--entity-name", "alice",
                   "--entity-type", "clients", "--entity-default",
                   "--add-config", "request_percentage=50") == \
        "Completed updating config for user alice.\n"
    assert configs(bs, "--alter", "--entity-type", "users", "--entity-default",
                   "--add-config", "controller_mutation_rate=10") == \
        "Completed updating default config for users in the cluster.\n"
    assert configs(bs, "--describe", "--entity-type", "clients", "--entity-name", client) == (
        f"Quota configs for client-id '{client}' are consumer_byte_rate=2048.0, "
        "producer_byte_rate=1024.0\n")
    assert configs(bs, "--describe", "--entity-type", "users", "--entity-name", "alice",
                   "--entity-type", "clients", "--entity-default") == (
        "Quota configs for user-principal 'alice', the default client-id are "
        "request_percentage=50.0\n")
    # the users alone (strict): the default user's, not alice's client-id pair
    assert configs(bs, "--describe", "--entity-type", "users") == (
        "Quota configs for the default user-principal are controller_mutation_rate=10.0\n")
    assert configs(bs, "--alter", "--entity-type", "clients", "--entity-name", client,
                   "--delete-config", "consumer_byte_rate") == \
        f"Completed updating config for client {client}.\n"
    assert configs(bs, "--describe", "--entity-type", "clients", "--entity-name", client) == \
        f"Quota configs for client-id '{client}' are producer_byte_rate=1024.0\n"
    # an unknown key or a negative value: Kafka's INVALID_REQUEST, nothing changed
    for bad in ("bogus_rate=5", "producer_byte_rate=-1"):
        refused = cli("configs", "--bootstrap-server", bs, "--alter", "--entity-type",
                      "clients", "--entity-name", client, "--add-config", bad)
        assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr, refused.stderr
    assert configs(bs, "--describe", "--entity-type", "clients", "--entity-name", client) == \
        f"Quota configs for client-id '{client}' are producer_byte_rate=1024.0\n"


def test_kafka_python_encodes_both_quota_apis(shared_broker):
    bs = shared_broker.bootstrap
    client = unique("kp-quota")
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        def send(request):
            return admin._manager.run(admin._manager.send, request)

        entity = [AlterClientQuotasRequest.EntryData.EntityData(entity_type="client-id",
                                                                 entity_name=client)]
        Op = AlterClientQuotasRequest.EntryData.OpData
        altered = send(AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
            entity=entity, ops=[Op(key="producer_byte_rate", value=4096.0, remove=False)])],
            validate_only=False))
        assert [e.error_code for e in altered.entries] == [0]
        refused = send(AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
            entity=entity, ops=[Op(key="producer_byte_rate", value=-1.0, remove=False)])],
            validate_only=False))
        assert [e.error_code for e in refused.entries] == [INVALID_REQUEST]
        Component = DescribeClientQuotasRequest.ComponentData
        described = send(DescribeClientQuotasRequest(components=[Component(
            entity_type="client-id", match_type=0, match=client)], strict=True))
        assert described.error_code == 0
        assert [([(e.entity_type, e.entity_name) for e in entry.entity],
                 [(v.key, v.value) for v in entry.values]) for entry in described.entries] == \
            [([("client-id", client)], [("producer_byte_rate", 4096.0)])]
    finally:
        admin.close()
    assert configs(bs, "--describe", "--entity-type", "clients", "--entity-name", client) == \
        f"Quota configs for client-id '{client}' are producer_byte_rate=4096.0\n"


def test_librdkafka_is_told_its_throttle_time_and_another_client_is_not(shared_broker):
    bs = shared_broker.bootstrap
    topic = unique("quota-topic")
    create_topic(bs, topic, 1)
    slow, fast = unique("slow"), unique("fast")
    configs(bs, "--alter", "--entity-type", "clients", "--entity-name", slow,
            "--add-config", "producer_byte_rate=20000")
    throttles: dict[str, list[int]] = {slow: [], fast: []}

    def producer(client_id: str) -> Producer:
        return Producer({"bootstrap.servers": bs, "client.id": client_id, "linger.ms": 5,
                         "throttle_cb": lambda e: throttles[client_id].append(
                             e.throttle_time)})

    value = b"x" * 10_000
    for client_id in (slow, fast):
        p = producer(client_id)
        started = time.monotonic()
        delivered = []
        # 1 MB: far more than the 200 kB the first ten seconds of a 20 kB/s quota allow
        for _ in range(100):
            p.produce(topic, value, on_delivery=lambda err, msg, out=delivered: out.append(err))
            p.poll(0)
        assert p.flush(60) == 0
        p.poll(0.5)  # throttle events are served by poll
        assert delivered == [None] * 100
        elapsed = time.monotonic() - started
        if client_id == slow:
            assert throttles[slow] and max(throttles[slow]) > 0
            # 1 MB at 20 kB/s after a 200 kB head start takes some 40 s: muted, it cannot
            # have gone much faster than that (generously)
            assert elapsed > 10
    assert not any(throttles[fast])
