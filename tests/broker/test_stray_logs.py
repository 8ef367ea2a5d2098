"""Partition logs on disk that the metadata no longer gives this broker are deleted at start,
once the replay of the metadata log has been applied: a topic deleted while the broker was
down, and a directory left by an older topic of the same name (another topic id in its
partition.metadata), whose records must not become the new topic's.

A restart used to apply the metadata log entry by entry, opening each historical topic and
deleting it again on the way; now the replay is one delta (the partitions' leader epochs
depend on it, tests/interop/test_leader_epoch_restarts.py), so these logs are found as Kafka
finds its stray logs.
"""

import shutil
import uuid

from broker.log.manager import PARTITION_METADATA_FILE, base64_uuid
from protocol.records import Record, encode_batch
from tests.inproc import in_process_broker


async def test_stray_and_foreign_logs_are_deleted_at_start(tmp_path):
    data_dir = tmp_path / "data"
    async with in_process_broker(data_dir) as inproc:
        await inproc.create_topic("kept", 1)
        partition = inproc.broker.partition("kept", 0)
        for i in range(3):
            partition.log.append(bytearray(encode_batch([Record(0, 1000, b"k", b"v%d" % i,
                                                                [])])), now_ms=1000)
    # a topic this broker never heard of (deleted while it was down)...
    shutil.copytree(data_dir / "kept-0", data_dir / "gone-0")
    # ...and "kept"'s directory claimed by an older topic of that name
    (data_dir / "kept-0" / PARTITION_METADATA_FILE).write_text(
        f"version: 0\ntopic_id: {base64_uuid(uuid.uuid4())}\n")

    async with in_process_broker(data_dir) as inproc:
        assert not (data_dir / "gone-0").exists()
        assert inproc.broker.logs.get("gone", 0) is None
        kept = inproc.broker.partition("kept", 0)
        assert kept.log_end_offset == 0, "an older topic's records served as this one's"
        topic_id = inproc.broker.metadata_cache.topic("kept").topic_id
        assert (data_dir / "kept-0" / PARTITION_METADATA_FILE).read_text() == (
            f"version: 0\ntopic_id: {base64_uuid(topic_id)}\n")
        kept.log.append(bytearray(encode_batch([Record(0, 1000, b"k", b"new", [])])),
                        now_ms=1000)

    async with in_process_broker(data_dir) as inproc:  # its own directory is kept
        assert inproc.broker.partition("kept", 0).log_end_offset == 1
