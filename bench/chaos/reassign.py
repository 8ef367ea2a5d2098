"""The reassignment-under-faults fault of the nemesis (`--faults reassign`): a partition
move (KIP-455) with a node killed while the moved replica catches up.

Owns `Mover`. One such fault, aimed at a node N and a partition P of the workload's topic
(both chosen by the seed):
  1. P's replicas shrink to the two others (a reassignment removing N; writes go on with
     min.insync.replicas=2), and the nemesis waits for it to complete;
  2. the follower replication throttle of KIP-73 is set low on N for P (so that catching
     up takes seconds, not milliseconds), and P moves back onto its three replicas: N's
     log of P starts over from the leader's log start;
  3. while N catches up, a node is killed -9 (N itself, or P's leader: the seed says
     which) and started again after the fault's hold;
  4. the throttle is removed and the nemesis waits for the move to complete.
Every step is recorded in the history; a move that does not complete within its deadline
is recorded with `done: false`, which the run reports as stalled once healed. What the
checkers look for is what they always do: no acknowledged write lost, no duplicate, no
offset going backwards, and the replicas identical offset by offset after healing.
"""

from __future__ import annotations

import trio

from broker.replication.quota import FOLLOWER_RATE, FOLLOWER_REPLICAS
from client import AdminClient, TopicPartition
from client.admin import AlterConfigOp, ConfigResource, PartitionInfo

MOVE_TIMEOUT_S = 60.0
CATCH_UP_BYTES_PER_S = 20_000  # the throttle while N catches up: a few seconds of data
POLL_S = 0.2


class Mover:
    """Partition moves of the workload's topic, through our AdminClient."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions

    def partition_of(self, pick: float) -> int:
        return int(pick * 997) % self.partitions

    async def _info(self, admin: AdminClient, partition: int) -> PartitionInfo:
        described = await admin.describe_topics([self.topic])
        return next(p for p in described[self.topic].partitions if p.partition == partition)

    async def replicas(self, admin: AdminClient, partition: int) -> list[int]:
        return list((await self._info(admin, partition)).replicas)

    async def leader(self, admin: AdminClient, partition: int) -> int | None:
        return (await self._info(admin, partition)).leader

    async def start(self, admin: AdminClient, partition: int, replicas: list[int]) -> None:
        tp = TopicPartition(self.topic, partition)
        error = (await admin.alter_partition_reassignments({tp: replicas}))[tp]
        if error is not None:
            raise error

    async def wait_done(self, admin: AdminClient, partition: int, replicas: list[int],
                        timeout_s: float = MOVE_TIMEOUT_S) -> bool:
        """Until the partition is on `replicas` with no move under way; False at the
        deadline (or while the cluster cannot answer)."""
        tp = TopicPartition(self.topic, partition)
        with trio.move_on_after(timeout_s):
            while True:
                try:
                    ongoing = await admin.list_partition_reassignments([tp])
                    if tp not in ongoing and await self.replicas(admin, partition) == replicas:
                        return True
                except Exception:  # noqa: BLE001 - a node down: ask again
                    pass
                await trio.sleep(POLL_S)
        return False

    async def throttle(self, admin: AdminClient, partition: int, node: int, on: bool) -> None:
        if on:
            changes = {
                ConfigResource("topic", self.topic): [
                    AlterConfigOp(FOLLOWER_REPLICAS, f"{partition}:{node}")],
                ConfigResource("broker", str(node)): [
                    AlterConfigOp(FOLLOWER_RATE, str(CATCH_UP_BYTES_PER_S))]}
        else:
            changes = {
                ConfigResource("topic", self.topic): [
                    AlterConfigOp(FOLLOWER_REPLICAS, op="delete")],
                ConfigResource("broker", str(node)): [
                    AlterConfigOp(FOLLOWER_RATE, op="delete")]}
        await admin.incremental_alter_configs(changes)
