"""client.Consumer in subscribe mode against the real broker, in a mixed group with a
confluent-kafka (librdkafka) consumer. Our consumers on their own in a group are
tests/client/test_groups_inproc.py's (the broker in-process, on virtual time)."""

from __future__ import annotations

import pytest
import trio

from client.consumer.consumer import Consumer
from client.types import TopicPartition
from tests.client.test_groups_inproc import _stable
from tests.interop.group_helpers import FAST_GROUP, FAST_GROUP_BROKER
from tests.interop.group_helpers import GroupMember as CKMember
from tests.interop.group_helpers import Recorder, partitions_of, polled_in_a_thread
from tests.interop.librdkafka import create_topic
from tests.util import unique

DEADLINE_S = 40
# the consumers here auto-commit (the default) unless a test says otherwise
GROUP_CONFIG = {k: v for k, v in FAST_GROUP.items() if k != "enable_auto_commit"}


@pytest.fixture
def broker(make_broker):
    return make_broker(**FAST_GROUP_BROKER)


async def test_mixed_group_with_librdkafka_under_range(broker):
    topic, group = unique("grp-mixed"), unique("g")
    create_topic(broker.bootstrap, topic, 6)
    everything = partitions_of(topic, 6)
    ck = CKMember(broker.bootstrap, group, [topic], "ck",
                  **{"partition.assignment.strategy": "range"})
    listener = Recorder()
    with trio.fail_after(DEADLINE_S):
        async with polled_in_a_thread(ck):
            async with Consumer(topic, bootstrap_servers=broker.bootstrap,
                                group_id=group, partition_assignment_strategy="range",
                                **GROUP_CONFIG) as c:
                c.subscribe([topic], listener=listener)
                while True:
                    await c.getmany(timeout_ms=100)
                    ours = c.assignment()
                    theirs = {TopicPartition(t, p) for t, p in ck.owned}
                    if _stable(c) and ours and theirs and ours | theirs == everything \
                            and not ours & theirs:
                        break
                assert len(ours) == len(theirs) == 3
                assert listener.owned == ours
