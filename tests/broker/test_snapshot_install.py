"""A metadata snapshot installed while the broker runs (the node fell behind the leader's
log start) is published with the snapshot's records, which name only what the snapshot
holds: the broker diffs the old and new images, so a topic deleted meanwhile loses its
partitions and logs here, and a topic deleted and created again under its name gets a
fresh log rather than the old topic's records."""

import uuid

from broker.controller.snapshot import decode_snapshot, encode_snapshot
from broker.log.manager import PARTITION_METADATA_FILE, base64_uuid
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record
from protocol.records import Record, encode_batch
from tests.inproc import in_process_broker


def decoded(kind: T, **body) -> tuple:
    return tuple(decode_metadata_record(encode_metadata_record(kind, 0, body)))


async def test_topics_missing_from_an_installed_snapshot_are_deleted_here(tmp_path):
    data_dir = tmp_path / "data"
    async with in_process_broker(data_dir) as inproc:
        broker = inproc.broker
        await inproc.create_topic("gone", 1)
        await inproc.create_topic("again", 1)
        again = broker.partition("again", 0)
        again.log.append(bytearray(encode_batch([Record(0, 1000, b"k", b"old", [])])),
                         now_ms=1000)
        old = broker.metadata_cache.image
        new_id = uuid.uuid4()
        # what the leader's snapshot holds: "gone" deleted, "again" deleted and created anew
        snapshot_image = old.replay([
            decoded(T.REMOVE_TOPIC_RECORD, topic_id=old.topic("gone").topic_id),
            decoded(T.REMOVE_TOPIC_RECORD, topic_id=old.topic("again").topic_id),
            decoded(T.TOPIC_RECORD, name="again", topic_id=new_id),
            decoded(T.PARTITION_RECORD, partition_id=0, topic_id=new_id,
                    replicas=[broker.node_id], isr=[broker.node_id], leader=broker.node_id,
                    leader_epoch=0, partition_epoch=0)])
        records = decode_snapshot(encode_snapshot(snapshot_image))
        assert not any(t == T.REMOVE_TOPIC_RECORD for t, _, _ in records)

        broker.apply_metadata(broker.metadata_cache.offset + 10, records, snapshot_image)
        # the new topic's log is made off the event loop
        assert await broker.wait_for_metadata(lambda _cache: broker.serves(["again"]), 10)

        assert broker.partition("gone", 0) is None
        assert not (data_dir / "gone-0").exists()
        fresh = broker.partition("again", 0)
        assert fresh is not None and fresh is not again
        assert fresh.log_end_offset == 0, "the deleted topic's records served as the new one's"
        assert (data_dir / "again-0" / PARTITION_METADATA_FILE).read_text() == (
            f"version: 0\ntopic_id: {base64_uuid(new_id)}\n")
