"""The transactional producer's requests to the coordinators, on trio.

Owns: `Transactions`, the trio side of one producer's TransactionManager
(transaction_manager.py): it finds the transaction coordinator of the transactional id
(FindCoordinator key type 1) and the group coordinator of a group (key type 0), and sends
InitProducerId, AddPartitionsToTxn (v3 and below: the client's form), AddOffsetsToTxn,
TxnOffsetCommit and EndTxn, retrying what Java's TransactionManager retries
(`transaction_manager.outcome_of`): a coordinator that moved or cannot be reached is looked
up again, COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS are asked again after
the backoff (retry_backoff_ms doubling to retry_backoff_max_ms), until the call's budget
runs out (then KafkaTimeoutError, and the call may be made again). An answer that ends the
transaction or the producer moves the TransactionManager to ABORTABLE_ERROR or FATAL_ERROR
before the error is raised.

One request at a time goes to the coordinators (a lock), as Java's sender has at most one
transactional request in flight: AddPartitionsToTxn from the sender's task and the
application's AddOffsetsToTxn or EndTxn never race each other at the coordinator.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping, TypeVar

import trio

from client.cluster import GROUP_KEY, TRANSACTION_KEY, find_coordinator
from client.config import ProducerConfig
from client.connection import BrokerConnection, ConnectionPool
from client.errors import KafkaError, KafkaTimeoutError
from client.producer.accumulator import RecordAccumulator
from client.producer.transaction_manager import (
    Outcome, TransactionManager, error_for, outcome_of,
)
from client.retry import retry_until_deadline
from client.types import ConsumerGroupMetadata, TopicPartition
from protocol.errors import ErrorCode
from protocol.messages import (
    ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, END_TXN, INIT_PRODUCER_ID, TXN_OFFSET_COMMIT,
)

__all__ = ["Transactions"]

T = TypeVar("T")

ADD_PARTITIONS_CLIENT_MAX = 3  # v4+ is the brokers' batched form (KIP-890)
BUMP_WITH_EXPECTED_EPOCH = 3  # InitProducerId v3+ takes the producer id and epoch (KIP-360)


class Transactions:
    def __init__(self, config: ProducerConfig, pool: ConnectionPool, txn: TransactionManager,
                 accumulator: RecordAccumulator):
        assert config.transactional_id is not None
        self.config = config
        self.pool = pool
        self.txn = txn
        self.acc = accumulator
        self.transactional_id: str = config.transactional_id
        self.coordinator_id: int | None = None
        self._group_coordinators: dict[str, int] = {}
        self._lock = trio.Lock()
        self._adding = 0  # AddPartitionsToTxn calls under way
        self._adds_done = trio.Event()
        self._adds_done.set()

    # -- the coordinators ---------------------------------------------------------------

    async def _transaction_coordinator(self) -> BrokerConnection:
        if self.coordinator_id is None:
            self.coordinator_id, conn = await find_coordinator(
                self.pool, self.transactional_id, TRANSACTION_KEY)
            return conn
        return await self.pool.get(self.coordinator_id)

    async def _group_coordinator(self, group_id: str) -> BrokerConnection:
        node = self._group_coordinators.get(group_id)
        if node is None:
            node, conn = await find_coordinator(self.pool, group_id, GROUP_KEY)
            self._group_coordinators[group_id] = node
            return conn
        return await self.pool.get(node)

    async def _call(self, api: str, attempt: Callable[[], Awaitable[T]], budget_ms: int,
                    group_id: str | None = None) -> T:
        """`attempt` until it returns, retrying what `outcome_of(api, code)` says is to be
        retried; an error that ends the transaction (or the producer) moves the
        TransactionManager there before it is raised."""
        def retry(e: KafkaError) -> bool:
            return outcome_of(api, e.code) in (Outcome.RETRY, Outcome.REFIND)

        def forget(e: KafkaError) -> None:
            if outcome_of(api, e.code) is Outcome.REFIND:
                if group_id is None:
                    self.coordinator_id = None
                else:
                    self._group_coordinators.pop(group_id, None)

        async def locked() -> T:
            async with self._lock:
                return await attempt()

        what = f"{api} for transactional id '{self.transactional_id}'"
        try:
            return await retry_until_deadline(what, locked, budget_ms=budget_ms,
                                              backoff_s=self.config.retry_backoff_s,
                                              should_retry=retry, on_retry=forget)
        except KafkaTimeoutError:
            raise  # the call may be made again
        except KafkaError as e:
            outcome = outcome_of(api, e.code)
            if outcome is Outcome.FATAL:
                self.txn.fatal_error(e)
            elif outcome is Outcome.ABORTABLE:
                self.txn.abortable_error(e)
            raise

    def _ids(self) -> dict[str, Any]:
        return {"transactional_id": self.transactional_id,
                "producer_id": self.acc.producer_id, "producer_epoch": self.acc.producer_epoch}

    # -- InitProducerId ---------------------------------------------------------------------

    async def init(self) -> None:
        """InitProducerId with the transactional id: the producer id and epoch, fencing any
        older producer of the id (whose open transaction the coordinator aborts first)."""
        self.txn.begin_init()
        await self._init_producer_id(bump=False)

    async def bump_epoch(self) -> None:
        """A new epoch after an abort that left a sequence gap (KIP-360; a broker without
        InitProducerId v3 bumps it for a new InitProducerId of the id all the same)."""
        await self._init_producer_id(bump=True)

    async def _init_producer_id(self, bump: bool) -> None:
        async def attempt() -> tuple[int, int]:
            conn = await self._transaction_coordinator()
            version = conn.version_for(INIT_PRODUCER_ID)
            expected = bump and version >= BUMP_WITH_EXPECTED_EPOCH
            resp = await conn.request(INIT_PRODUCER_ID, {
                "transactional_id": self.transactional_id,
                "transaction_timeout_ms": self.config.transaction_timeout_ms,
                "producer_id": self.acc.producer_id if expected else -1,
                "producer_epoch": self.acc.producer_epoch if expected else -1}, version)
            _raise_for("InitProducerId", resp.body.error_code)
            return resp.body.producer_id, resp.body.producer_epoch

        producer_id, epoch = await self._call("InitProducerId", attempt, self.config.max_block_ms)
        self.acc.reset_producer(producer_id, epoch)
        self.txn.initialized()

    # -- AddPartitionsToTxn -------------------------------------------------------------------

    async def add_partitions(self, tps: list[TopicPartition]) -> None:
        """AddPartitionsToTxn for `tps` (the sender calls it before their first batch);
        their batches may go once it returns. Bounded by delivery_timeout_ms, past which
        the batches would have expired anyway: then the transaction is abortable."""
        async def attempt() -> None:
            conn = await self._transaction_coordinator()
            version = min(conn.version_for(ADD_PARTITIONS_TO_TXN), ADD_PARTITIONS_CLIENT_MAX)
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            ids = self._ids()
            resp = await conn.request(ADD_PARTITIONS_TO_TXN, {
                "v3_and_below_transactional_id": ids["transactional_id"],
                "v3_and_below_producer_id": ids["producer_id"],
                "v3_and_below_producer_epoch": ids["producer_epoch"],
                "v3_and_below_topics": [{"name": t, "partitions": ps}
                                        for t, ps in by_topic.items()]}, version)
            # the worst answer decides: fatal, then abortable, then retry
            worst: tuple[int, ErrorCode, str] | None = None
            for t in resp.body.results_by_topic_v3_and_below:
                for r in t.results_by_partition:
                    code = ErrorCode.of(r.partition_error_code)
                    rank = _RANK[outcome_of("AddPartitionsToTxn", code)]
                    if rank and (worst is None or rank > worst[0]):
                        worst = (rank, code, f"{t.name}-{r.partition_index}")
            if worst is not None:
                raise error_for("AddPartitionsToTxn", worst[1], worst[2])

        self._adding += 1
        self._adds_done = trio.Event()
        try:
            await self._call("AddPartitionsToTxn", attempt, self.config.delivery_timeout_ms)
        except KafkaTimeoutError as e:
            self.txn.abortable_error(e)
            raise
        else:
            self.txn.partitions_added(tps)
        finally:
            self._adding -= 1
            if not self._adding:
                self._adds_done.set()

    async def wait_for_adds(self) -> None:
        """Return once no AddPartitionsToTxn is under way: whether the coordinator knows
        of the transaction (`txn.started`) is settled then."""
        await self._adds_done.wait()

    # -- the group's offsets --------------------------------------------------------------------

    async def send_offsets(self, offsets: Mapping[TopicPartition, tuple[int, str | None]],
                           group: ConsumerGroupMetadata) -> None:
        """AddOffsetsToTxn to the transaction coordinator (the group's __consumer_offsets
        partition joins the transaction), then TxnOffsetCommit to the group's coordinator
        with the consumer's generation, member id and group instance id (v3+): the offsets
        count once the transaction commits."""
        group_id = group.group_id

        async def add_offsets() -> None:
            conn = await self._transaction_coordinator()
            resp = await conn.request(ADD_OFFSETS_TO_TXN, {**self._ids(), "group_id": group_id})
            _raise_for("AddOffsetsToTxn", resp.body.error_code, f"group '{group_id}'")

        await self._call("AddOffsetsToTxn", add_offsets, self.config.max_block_ms)
        self.txn.offsets_added()

        async def commit() -> None:
            conn = await self._group_coordinator(group_id)
            topics: dict[str, list] = {}
            for tp, (offset, metadata) in offsets.items():
                topics.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "committed_offset": offset,
                    "committed_leader_epoch": -1, "committed_metadata": metadata})
            resp = await conn.request(TXN_OFFSET_COMMIT, {
                **self._ids(), "group_id": group_id, "generation_id": group.generation_id,
                "member_id": group.member_id, "group_instance_id": group.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            worst: tuple[int, ErrorCode, str] | None = None
            for t in resp.body.topics:
                for p in t.partitions:
                    code = ErrorCode.of(p.error_code)
                    rank = _RANK[outcome_of("TxnOffsetCommit", code)]
                    if rank and (worst is None or rank > worst[0]):
                        worst = (rank, code, f"{t.name}-{p.partition_index} for group "
                                             f"'{group_id}'")
            if worst is not None:
                raise error_for("TxnOffsetCommit", worst[1], worst[2])

        await self._call("TxnOffsetCommit", commit, self.config.max_block_ms, group_id=group_id)

    # -- EndTxn ---------------------------------------------------------------------------------

    async def end(self, commit: bool) -> None:
        """EndTxn: the coordinator writes its decision, then the markers (the answer comes
        once the decision is written; the markers follow in the background)."""
        async def attempt() -> None:
            conn = await self._transaction_coordinator()
            resp = await conn.request(END_TXN, {**self._ids(), "committed": commit})
            _raise_for("EndTxn", resp.body.error_code)

        await self._call("EndTxn", attempt, self.config.max_block_ms)


# how bad each outcome is, to pick the answer that decides for a request of many partitions
_RANK = {Outcome.DONE: 0, Outcome.RETRY: 1, Outcome.REFIND: 2, Outcome.ABORTABLE: 3,
         Outcome.FATAL: 4}


def _raise_for(api: str, error_code: int, what: str | None = None) -> None:
    code = ErrorCode.of(error_code)
    if code is not ErrorCode.NONE:
        raise error_for(api, code, what)
