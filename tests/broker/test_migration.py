"""A data directory written by the single-broker versions (cluster-metadata.json) opens in
the cluster version with its topics, topic ids, configs, records and producer ids."""

import json
import uuid

from broker.log.manager import LogManager
from protocol.records import Record, decode_batches, encode_batch
from tests.inproc import in_process_broker

TOPIC_ID = uuid.UUID("8f6c2a7e-3b1d-4c55-9a0e-2d4f6b8a1c3e")


def write_old_data_dir(data_dir) -> None:
    logs = LogManager(str(data_dir))
    logs.open(now_ms=0)
    for partition in (0, 1):
        log = logs.get_or_create("legacy", partition, topic_id=TOPIC_ID)
        log.append(bytearray(encode_batch([Record(0, 1000, b"k", b"v%d" % partition, [])])),
                   now_ms=1000)
    logs.close()
    (data_dir / "cluster-metadata.json").write_text(json.dumps({
        "topics": [{"name": "legacy", "topic_id": str(TOPIC_ID), "partitions": 2,
                    "replication_factor": 1, "configs": {"cleanup.policy": ["compact"],
                                                         "retention.ms": 5000},
                    "internal": False}],
        "producer_id_limit": 3000}))


async def test_an_old_data_directory_is_migrated_once_with_everything_it_held(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    write_old_data_dir(data_dir)
    for _run in range(2):  # migrated at the first start, read from the metadata log after
        async with in_process_broker(data_dir) as inproc:
            cache = inproc.broker.metadata_cache
            topic = cache.topic("legacy")
            assert topic is not None and topic.topic_id == TOPIC_ID
            assert sorted(topic.partitions) == [0, 1]
            assert topic.partitions[0].leader == inproc.broker.node_id
            assert dict(cache.topic_configs("legacy")) == {"cleanup.policy": "compact",
                                                          "retention.ms": "5000"}
            assert inproc.broker.partition("legacy", 1).log.config.compacts
            data = inproc.broker.partition("legacy", 1).log.read(0, 1 << 20)
            [(_, [record])] = decode_batches(data)
            assert record.value == b"v1"
            assert await inproc.broker.allocate_producer_id() >= 3000
        assert not (data_dir / "cluster-metadata.json").exists()
        assert (data_dir / "cluster-metadata.json.migrated").exists()
