"""A broker restarted again and again keeps its partitions' leader-epoch history (issue 28's
reproduction): each start leads at a new epoch, and the epochs of the earlier starts stay in
`leader-epoch-checkpoint`, so OffsetForLeaderEpoch still answers where each one ended.

The bug this pins: a restart published the metadata log's history to the replicas entry by
entry, so a partition was first told to lead at its first registration's epoch (0) and cut
its epoch cache back to it.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from tests.interop.epoch_history import check_history
from tests.interop.group_helpers import FAST_GROUP_BROKER
from tests.util import unique

pytestmark = pytest.mark.interop

STARTS = 4
PER_START = 5


def produce_and_read(bootstrap: str, topic: str, group: str, expected: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(PER_START):
        p.produce(topic, value=f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    read, deadline = 0, time.monotonic() + 30
    try:
        while read < PER_START and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                read += 1
                assert msg.offset() < expected
    finally:
        c.close()
    assert read == PER_START, f"read {read} of the {PER_START} new records"


def test_restarts_keep_every_leader_epoch_entry(make_broker):
    broker = make_broker(**FAST_GROUP_BROKER)
    topic, group = unique("epochs"), unique("g")
    for start in range(STARTS):
        if start:
            broker.start()
        produce_and_read(broker.bootstrap, topic, group, (start + 1) * PER_START)
        assert broker.stop() == 0
    broker.start()
    written = check_history(broker.port, broker.data_dir, topic, STARTS * PER_START)
    # every start led at its own epoch, and each wrote where the previous one ended
    assert [e.start_offset for e in written] == [i * PER_START for i in range(STARTS)]
    assert len({e.epoch for e in written}) == STARTS
    log = broker.log_path.read_text()
    assert "dropped the entries it contradicts" not in log
    assert "leadership is not taken" not in log
