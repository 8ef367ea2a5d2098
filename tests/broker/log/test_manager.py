"""LogManager: data-dir layout, checkpoint files, marker, topic deletion; LogConfig mapping."""

import os

import pytest

from broker.log import LogConfig, LogManager
from broker.log.manager import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    parse_partition_dir,
    read_checkpoint,
    write_checkpoint,
)

from .helpers import make_batch


def test_checkpoint_round_trip_in_kafka_format(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    offsets = {("orders-eu", 0): 1200, ("orders-eu", 11): 0, ("__consumer_offsets", 3): 7}
    write_checkpoint(path, offsets)
    assert open(path).read() == (
        "0\n3\n__consumer_offsets 3 7\norders-eu 0 1200\norders-eu 11 0\n")
    assert read_checkpoint(path) == offsets
    write_checkpoint(path, {})
    assert read_checkpoint(path) == {}
    assert read_checkpoint(str(tmp_path / "missing")) == {}
    assert not os.path.exists(path + ".tmp")


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\nt 0 5\n", "0\n1\nt zero 5\n", "0\n1\nt 0\n"])
def test_malformed_checkpoint(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        read_checkpoint(str(path))


def test_partition_dir_names_parse_at_the_last_dash():
    assert parse_partition_dir("my-topic-with-dashes-12") == ("my-topic-with-dashes", 12)
    assert parse_partition_dir("t-0") == ("t", 0)
    for name in ("t", "t-", "-3", "t-0.abc-delete", "t-1-future", "lost+found-1"):
        assert parse_partition_dir(name) is None


def test_manager_lifecycle_and_checkpoints(tmp_path):
    events = []
    on_event = lambda kind, **f: events.append(kind)  # noqa: E731
    mgr = LogManager(str(tmp_path), LogConfig(segment_bytes=300), on_event=on_event)
    assert mgr.open() == [] and mgr.had_clean_shutdown is False
    a = mgr.get_or_create("a-b", 0)
    b = mgr.get_or_create("a-b", 1)
    assert mgr.get_or_create("a-b", 0) is a
    for i in range(10):
        a.append(make_batch(2, seed=i), now_ms=0)
    b.append(make_batch(1), now_ms=0)
    a.delete_records_before(3)
    assert "segment_roll" in events
    mgr.close()
    assert read_checkpoint(str(tmp_path / RECOVERY_POINT_CHECKPOINT)) == {("a-b", 0): 20, ("a-b", 1): 1}
    assert read_checkpoint(str(tmp_path / LOG_START_OFFSET_CHECKPOINT)) == {("a-b", 0): 3, ("a-b", 1): 0}
    mgr = LogManager(str(tmp_path), LogConfig(segment_bytes=300))
    assert mgr.open() == []
    assert mgr.partitions() == [("a-b", 0), ("a-b", 1)]
    assert mgr.get("a-b", 0).log_end_offset == 20
    assert mgr.get("a-b", 0).log_start_offset == 3
    assert mgr.get("a-b", 1).log_end_offset == 1
    mgr.close()


def test_partition_metadata_and_open_now_ms(tmp_path):
    import uuid
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    mgr = LogManager(str(tmp_path), LogConfig(segment_ms=100))
    assert mgr.open(now_ms=0) == [] and mgr.recovered_uncleanly
    mgr.get_or_create("t", 0, topic_id=tid).append(make_batch(1, ts=-1, ts_step=0), now_ms=0)
    text = (tmp_path / "t-0" / "partition.metadata").read_text()
    assert text == "version: 0\ntopic_id: EjRWeBI0VngSNFZ4EjRWeA\n"
    mgr.close()
    mgr = LogManager(str(tmp_path), LogConfig(segment_ms=100))
    assert mgr.open(now_ms=10_000) == [] and not mgr.recovered_uncleanly
    log = mgr.get("t", 0)
    # No timestamps in the batch: the segment's age counts from when it was opened.
    log.append(make_batch(1, ts=-1, ts_step=0), now_ms=10_100)
    assert len(log.segments) == 1
    log.append(make_batch(1, ts=-1, ts_step=0), now_ms=10_101)
    assert len(log.segments) == 2
    mgr.close()


def test_delete_topic(tmp_path):
    mgr = LogManager(str(tmp_path))
    mgr.open()
    for p in range(3):
        mgr.get_or_create("doomed", p).append(make_batch(1), now_ms=0)
    mgr.get_or_create("doomed-not", 0)
    assert mgr.delete_topic("doomed") == [0, 1, 2]
    assert mgr.partitions() == [("doomed-not", 0)]
    assert sorted(n for n in os.listdir(tmp_path) if os.path.isdir(tmp_path / n)) == ["doomed-not-0"]
    mgr.close()


@pytest.mark.parametrize("name", ["", "../etc", "a/b", ".", "..", "x" * 250, "sp ace"])
def test_illegal_topic_names_are_refused(tmp_path, name):
    mgr = LogManager(str(tmp_path))
    mgr.open()
    with pytest.raises(ValueError):
        mgr.get_or_create(name, 0)


def test_manager_retention(tmp_path):
    size = len(make_batch(1))
    mgr = LogManager(str(tmp_path), LogConfig(segment_bytes=2 * size, retention_bytes=2 * size))
    mgr.open()
    log = mgr.get_or_create("t", 0)
    for _ in range(6):
        log.append(make_batch(1), now_ms=0)
    assert mgr.apply_retention(0) == {("t", 0): [0, 2]}
    assert mgr.apply_retention(0, {("t", 0): 4}) == {}
    mgr.close()


def test_log_config_from_kafka_properties():
    c = LogConfig.from_properties({"log.roll.hours": "1", "log.retention.hours": 2,
                                   "log.retention.minutes": 3, "segment.bytes": "1000",
                                   "cleanup.policy": "compact,delete",
                                   "message.timestamp.type": "LogAppendTime",
                                   "unrelated.key": "x"})
    assert c.segment_ms == 3600_000 and c.retention_ms == 180_000 and c.segment_bytes == 1000
    assert c.deletes and c.log_append_time
    assert LogConfig.from_properties({"log.roll.ms": 5, "log.roll.hours": 1}).segment_ms == 5
    d = LogConfig()
    assert (d.segment_bytes, d.retention_ms, d.retention_bytes, d.index_interval_bytes) == (
        1 << 30, 168 * 3600_000, -1, 4096)
    assert (d.max_message_bytes, d.cleanup_policy, d.flush_interval_messages) == (
        1048588, "delete", (1 << 63) - 1)
    with pytest.raises(ValueError):
        LogConfig(cleanup_policy="shred")
    with pytest.raises(ValueError):
        LogConfig(message_timestamp_type="Now")
