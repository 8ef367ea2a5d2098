"""A whole Broker on a simulated disk of its own: everything it keeps goes through the
seam (nothing lands on the real disk), and what it acknowledged survives a power cut."""

from __future__ import annotations

import os
import random

import pytest
import trio

from broker.events import read_events
from broker.storage import SimulatedFileSystem
from client.connection import BrokerConnection, background_nursery
from protocol.errors import ErrorCode
from protocol.messages import PRODUCE
from protocol.records import Record, encode_batch, iter_batch_headers
from tests.inproc import InProcessBroker, in_process_broker

# a path that must never appear on the real disk
ROOT = "/minibroker-simulated-disk-test"
DATA = f"{ROOT}/node-1/data"


def _nothing_on_the_real_disk() -> bool:
    return not os.path.exists(ROOT)


async def _produce(inproc: InProcessBroker, topic: str, values: list[bytes]) -> None:
    async with background_nursery() as nursery:
        conn = BrokerConnection(inproc.broker.advertised.host, inproc.broker.advertised.port)
        await conn.open(nursery)
        for value in values:
            batch = encode_batch([Record(0, 0, b"k", value, [])])
            resp = await conn.request(PRODUCE, {
                "transactional_id": None, "acks": -1, "timeout_ms": 30_000,
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": 0, "records": batch}]}]})
            code = resp.body.responses[0].partition_responses[0].error_code
            assert code == ErrorCode.NONE


async def test_a_broker_keeps_everything_on_its_own_disk_and_restarts_from_it(autojump_clock):
    fs = SimulatedFileSystem(clock=trio.current_time)
    async with in_process_broker(DATA, fs=fs) as inproc:
        await inproc.create_topic("orders", 1)
        await _produce(inproc, "orders", [b"one", b"two", b"three"])
        epoch = inproc.broker.lifecycle.broker_epoch
    assert _nothing_on_the_real_disk()
    kinds = [e["type"] for e in read_events(DATA, fs=fs)]
    assert kinds[0] == "broker_start" and kinds[-1] == "broker_stop" and "topic_create" in kinds
    names = fs.listdir(DATA)
    assert {"meta.properties", "__cluster_metadata-0", "events", "orders-0",
            ".kafka_cleanshutdown"} <= set(names)
    fs.crash(random.Random(3))  # a clean shutdown made all of it durable
    async with in_process_broker(DATA, fs=fs) as inproc:
        assert inproc.broker.clean_start
        # the registration names the epoch the clean shutdown recorded (KIP-966): the
        # controller takes the restart for a clean one and elects the broker from the
        # partition's eligible leader replicas, a clean election
        assert epoch >= 0 and inproc.broker.lifecycle.previous_broker_epoch == epoch
        assert await inproc.broker.wait_for_metadata(
            lambda cache: inproc.broker.serves(["orders"]), 10)
        log = inproc.broker.logs.get("orders", 0)
        assert log is not None and log.log_end_offset == 3
        partition = inproc.broker.metadata_cache.partition("orders", 0)
        assert partition is not None and partition.leader_recovery_state == 0
    assert _nothing_on_the_real_disk()


@pytest.mark.parametrize("seed", range(4))
async def test_after_a_power_cut_the_broker_keeps_its_metadata_and_whole_batches(
        seed, autojump_clock):
    """Killed without a shutdown, then the disk loses what was not fsynced (with a torn
    writeback): the topic is still there (the metadata log fsyncs before it answers),
    the log recovers to whole batches, and the broker serves again."""
    fs = SimulatedFileSystem(clock=trio.current_time)
    async with in_process_broker(DATA, fs=fs, close=False) as inproc:
        await inproc.create_topic("orders", 1)
        await _produce(inproc, "orders", [b"one", b"two", b"three"])
    fs.crash(random.Random(seed))
    async with in_process_broker(DATA, fs=fs) as inproc:
        assert not inproc.broker.clean_start
        assert inproc.broker.lifecycle.previous_broker_epoch == -1
        assert await inproc.broker.wait_for_metadata(
            lambda cache: inproc.broker.serves(["orders"]), 10)
        # an unclean shutdown took it out of the ELR: the only replica is elected as the
        # last known leader, uncleanly
        partition = inproc.broker.metadata_cache.partition("orders", 0)
        assert partition is not None and partition.leader_recovery_state == 1
        log = inproc.broker.logs.get("orders", 0)
        assert log is not None and 0 <= log.log_end_offset <= 3
        survived = log.log_end_offset
        kept = log.read(0, 1 << 20)
        assert [h.base_offset for _, h in iter_batch_headers(kept)] == list(range(survived))
        await _produce(inproc, "orders", [b"four"])
        assert log.log_end_offset == survived + 1
    assert _nothing_on_the_real_disk()
