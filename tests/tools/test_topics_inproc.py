"""`minibroker topics describe`'s partition reports against a broker (tests/inproc.py): the
options reach the filter, min.insync.replicas is read from the topic's configs and the live
brokers from DescribeCluster. One broker at replication factor 1 has no short ISR and no
leaderless partition, so those two reports must print nothing here; the min-ISR reports
pick partitions of a topic whose min.insync.replicas is above or at its ISR. A cluster test
showing a real under-replicated partition belongs with the replication tests."""

from __future__ import annotations

import argparse
import io

from tools import topics
from tools.admin_session import open_admin


def _args(**reports: bool) -> argparse.Namespace:
    flags = {"under_replicated_partitions": False, "unavailable_partitions": False,
             "under_min_isr_partitions": False, "at_min_isr_partitions": False}
    flags.update(reports)
    return argparse.Namespace(topic=None, exclude_internal=True, **flags)


async def test_partition_reports_on_a_single_broker(inproc, autojump_clock):
    await inproc.create_topic("strict", 2, **{"min.insync.replicas": "2"})
    await inproc.create_topic("relaxed", 1)
    node = inproc.broker.node_id
    async with open_admin(inproc.bootstrap, timeout_ms=10_000,
                          client_id="topics-test") as admin:
        async def describe(**reports: bool) -> list[str]:
            out = io.StringIO()
            await topics.describe(admin, _args(**reports), out)
            return out.getvalue().splitlines()

        def line(topic: str, partition: int) -> str:
            return (f"\tTopic: {topic}\tPartition: {partition}\tLeader: {node}"
                    f"\tReplicas: {node}\tIsr: {node}")

        everything = await describe()
        assert [x for x in everything if x.startswith("\t")] == [
            line("relaxed", 0), line("strict", 0), line("strict", 1)]
        assert await describe(under_replicated_partitions=True) == []
        assert await describe(unavailable_partitions=True) == []
        assert await describe(under_min_isr_partitions=True) == [line("strict", 0),
                                                                 line("strict", 1)]
        assert await describe(at_min_isr_partitions=True) == [line("relaxed", 0)]
        assert await describe(at_min_isr_partitions=True, under_min_isr_partitions=True) == [
            line("relaxed", 0), line("strict", 0), line("strict", 1)]
