"""A broker serving two client listeners, as in a container network: one reached by service
name inside it, one advertised to the host. Each connection is answered with the addresses
advertised on the listener it came through."""

from __future__ import annotations

import functools

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.server import serve
from protocol.errors import ErrorCode
from protocol.messages import FIND_COORDINATOR, METADATA
from harness.ports import free_port

from .test_server_faults import Client


async def _two_listener_broker(tmp_path, nursery) -> tuple[Broker, int, int]:
    inside, outside = free_port(), free_port()
    config = BrokerConfig.load({
        "log.dirs": str(tmp_path / "data"),
        "listeners": f"INTERNAL://127.0.0.1:{inside},EXTERNAL://127.0.0.1:{outside}",
        # the internal name need not resolve here: only the answers are looked at
        "advertised.listeners": f"INTERNAL://broker-0:{inside},EXTERNAL://127.0.0.1:{outside}",
        "inter.broker.listener.name": "INTERNAL",
        "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1"})
    broker = Broker(config)
    broker.open()
    await nursery.start(functools.partial(serve, broker, install_signal_handlers=False))
    return broker, inside, outside


async def _metadata_brokers(port: int) -> list[tuple[int, str, int]]:
    client = await Client.connect(port)
    body = await client.call(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                           "include_cluster_authorized_operations": False,
                                           "include_topic_authorized_operations": False})
    return [(b.node_id, b.host, b.port) for b in body.brokers]


async def test_each_listener_answers_with_its_own_advertised_address(tmp_path, nursery):
    _broker, inside, outside = await _two_listener_broker(tmp_path, nursery)
    assert await _metadata_brokers(inside) == [(0, "broker-0", inside)]
    assert await _metadata_brokers(outside) == [(0, "127.0.0.1", outside)]


async def test_the_group_coordinator_is_named_on_the_clients_listener(tmp_path, nursery):
    _broker, inside, outside = await _two_listener_broker(tmp_path, nursery)
    client = await Client.connect(outside)
    body = await client.call(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
    assert (body.error_code, body.host, body.port) == (ErrorCode.NONE, "127.0.0.1", outside)
