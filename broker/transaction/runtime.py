"""The transaction coordinator hosted on __transaction_state.

Owns: `TransactionRuntime`, broker.coordinator.runtime's CoordinatorRuntime for the pure
TransactionCoordinator (broker.transaction.coordinator): its records are Kafka's
TransactionLogKey/TransactionLogValue, its topic is created with the transaction.state.log.*
settings (min.insync.replicas capped by the replication factor the controller can give,
so a single broker serves transactions as it does groups), producer ids come from the
blocks the controller hands this broker, and it carries out the coordinator's
`WriteTxnMarkers` effects with broker.transaction.markers.

A transition's record is replayed into the coordinator as soon as it is in the leader's
log (the pending state refuses any other transition meanwhile), and the answer waits for
the high watermark, as for groups. Markers are written only once the PrepareCommit or
PrepareAbort record before them is committed, however long that takes while this broker
leads the partition: a decision a failover could lose must never reach a partition, or one
transaction could end committed in one partition and aborted in another. A coordinator that
loses the partition stops writing; the next one loads the record and writes the markers
again (`finish_load`).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

import trio

from broker import timeouts
from broker.coordinator.runtime import CoordinatorRuntime, Waiter
from broker.transaction.coordinator import TransactionConfig, TransactionCoordinator
from broker.transaction.effects import Append, WriteTxnMarkers
from broker.net.peer import PeerUnavailable
from broker.transaction.markers import LocalWriter, MarkerWriter
from broker.transaction.records import decode_value, encode_value
from broker.transaction.state import TransactionState
from protocol.batch_header import BatchHeader
from protocol.errors import DecodeError, ErrorCode
from protocol import messages as m
from protocol.messages import transaction_log
from protocol.records import Record

log = logging.getLogger("minibroker.transaction")

TRANSACTION_STATE_TOPIC = "__transaction_state"
COMPLETE_RETRY_S = 0.1
VERIFY_VERSION = 4  # AddPartitionsToTxn's broker form
VERIFY_TIMEOUT_S = 10.0
_RETRIABLE_VERIFICATION = {e: ErrorCode.NOT_ENOUGH_REPLICAS for e in (
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS)}


def transaction_config(c) -> TransactionConfig:
    return TransactionConfig(
        transaction_max_timeout_ms=c.transaction_max_timeout_ms,
        transactional_id_expiration_ms=c.transactional_id_expiration_ms,
        abort_timed_out_transaction_cleanup_interval_ms=(
            c.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        remove_expired_transaction_cleanup_interval_ms=(
            c.transaction_remove_expired_transaction_cleanup_interval_ms),
        num_partitions=c.transaction_state_log_num_partitions,
        offsets_topic_num_partitions=c.offsets_topic_num_partitions)


class TransactionRuntime(CoordinatorRuntime):
    topic = TRANSACTION_STATE_TOPIC

    def __init__(self, broker):
        super().__init__(broker)
        self.coordinator = TransactionCoordinator(transaction_config(broker.config),
                                                  self._take_producer_id)
        self._producer_ids: range = range(0)
        self._markers: MarkerWriter | None = None
        # how markers for partitions this broker leads are written in process: the data
        # plane's Server hands over the WriteTxnMarkers handler's own function (whenever
        # it is made, before or after this runtime starts); without it they go through
        # this broker's listener like the others
        self.local_markers: LocalWriter | None = None
        # transactional id -> requests parked until its transaction completes: each
        # (waiter, operation, args) runs right after the Complete record is appended
        self._parked: dict[str, list[tuple[Waiter, Any, tuple]]] = {}
        self._completions: list[str] = []  # ids whose parked requests may now run
        self._depth = 0  # apply_effects calls under way (parked requests run at the outermost)

    # -- producer ids --------------------------------------------------------------------------

    def _take_producer_id(self) -> int | None:
        if not self._producer_ids:
            return None
        pid = self._producer_ids[0]
        self._producer_ids = self._producer_ids[1:]
        return pid

    async def ensure_producer_id(self) -> bool:
        """A producer id is at hand for the next InitProducerId (the pure coordinator takes
        ids synchronously); False when no controller answered."""
        if self._producer_ids:
            return True
        from broker.controller_channel import ControllerUnavailable
        try:
            pid = await self.broker.allocate_producer_id()
        except ControllerUnavailable:
            return False
        if not self._producer_ids:
            self._producer_ids = range(pid, pid + 1)
        return True

    # -- CoordinatorRuntime's hooks -------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self.coordinator.config.num_partitions

    @property
    def commit_timeout_ms(self) -> int:
        return self.broker.config.request_timeout_ms  # what Kafka's coordinator waits for acks

    def topic_configs(self) -> dict[str, str]:
        c = self.broker.config
        brokers = max(1, len(self.broker.metadata_cache.image.brokers))
        min_isr = min(c.transaction_state_log_min_isr, c.transaction_state_log_replication_factor,
                      brokers)
        return {"cleanup.policy": "compact",
                "segment.bytes": str(c.transaction_state_log_segment_bytes),
                "min.insync.replicas": str(min_isr),
                "unclean.leader.election.enable": "false"}

    def records_of(self, effect: Any) -> tuple[int, list[tuple[bytes, bytes | None]]] | None:
        if not isinstance(effect, Append):
            return None
        return (self.coordinator.partition_for(effect.transactional_id),
                [(transaction_log.encode_key(effect.transactional_id),
                  encode_value(effect.value))])

    def appended(self, effect: Any, index: int, end: int) -> None:
        self.coordinator.replay(effect.transactional_id, effect.value)
        v = effect.value
        if v is None or v.transaction_status in (TransactionState.COMPLETE_COMMIT,
                                                 TransactionState.COMPLETE_ABORT):
            self._completions.append(effect.transactional_id)
        if v is not None:
            self.broker.events.emit(
                "txn_state", transactional_id=effect.transactional_id,
                producer_id=v.producer_id, producer_epoch=v.producer_epoch,
                state=v.transaction_status.value,
                topic_partitions=[f"{t}-{p}" for t, p in sorted(v.transaction_partitions)],
                start_ms=v.transaction_start_timestamp_ms, timeout_ms=v.transaction_timeout_ms,
                log_offset=end - 1)  # the one record records_of gave

    def append_failed(self, effect: Any) -> None:
        self.coordinator.append_failed(effect.transactional_id)

    def carry_out(self, effect: Any, failed: ErrorCode,
                  uncommitted: tuple[int, int] | None) -> None:
        if not isinstance(effect, WriteTxnMarkers):
            super().carry_out(effect, failed, uncommitted)
            return
        if failed:
            return  # the decision is not in the log: the transition was taken back
        if not self.start_soon(self._write_markers, effect, uncommitted):
            log.warning("markers of %r not written: the runtime is not running",
                        effect.transactional_id)

    async def _write_markers(self, effect: WriteTxnMarkers,
                             uncommitted: tuple[int, int] | None) -> None:
        if uncommitted is not None and await self.wait_committed(*uncommitted, None):
            return  # the partition moved before the decision was committed
        index = self.coordinator.partition_for(effect.transactional_id)

        def still_coordinator() -> bool:
            return (index in self.coordinator.owned
                    and self.coordinator.coordinator_epochs.get(index) == effect.coordinator_epoch)

        assert self._markers is not None
        started = trio.current_time()
        if not await self._markers.write(effect, still_coordinator):
            return
        self.broker.events.emit(
            "txn_markers_written", transactional_id=effect.transactional_id,
            producer_id=effect.producer_id, producer_epoch=effect.producer_epoch,
            result=effect.result.name, partitions=len(effect.partitions),
            duration_ms=round((trio.current_time() - started) * 1000, 3))
        # the Complete record: retried while the ISR is too small to take it, as Kafka
        # retries it; a coordinator that moved leaves it to the next one's load
        while still_coordinator():
            error = self.apply_effects(self.coordinator.markers_written(
                effect.transactional_id, effect.producer_id, effect.producer_epoch,
                effect.result, self.broker.now_ms()))
            if error != ErrorCode.COORDINATOR_NOT_AVAILABLE:
                return
            await timeouts.sleep(COMPLETE_RETRY_S)

    def begin_load(self, index: int, leader_epoch: int) -> None:
        self.coordinator.begin_load(index, leader_epoch)

    def replay_batch(self, header: BatchHeader, records: list[Record], now_ms: int) -> int:
        replayed = 0
        for record in records:
            if record.key is None:
                continue
            try:
                transactional_id = transaction_log.decode_key(record.key)
                value = decode_value(record.value)
            except (DecodeError, ValueError) as e:
                log.error("%s: record at offset %d does not decode (%s): skipped",
                          TRANSACTION_STATE_TOPIC, record.offset, e)
                continue
            if transactional_id is None:
                continue  # a key version Kafka would skip too
            self.coordinator.replay(transactional_id, value, loading=True)
            replayed += 1
        return replayed

    def finish_load(self, index: int, now_ms: int) -> list:
        return list(self.coordinator.finish_load(index))

    def unload(self, index: int, now_ms: int) -> list:
        self.coordinator.unload(index)
        # parked requests are answered now (NOT_COORDINATOR, by the coordinator that
        # no longer owns them) by apply_effects
        self._completions.extend(t for t in self._parked
                                 if self.coordinator.partition_for(t) == index)
        return []

    def apply_effects(self, effects, verification: object | None = None) -> ErrorCode:
        self._depth += 1
        try:
            error = super().apply_effects(effects, verification)
        finally:
            self._depth -= 1
        while self._depth == 0 and self._completions:
            for waiter, operation, args in self._parked.pop(self._completions.pop(0), []):
                self.before_operation()
                self.apply_effects(operation(waiter, *args, self.broker.now_ms()))
        return error

    async def call_when_completed(self, transactional_id: str, timeout_s: float,
                                  operation: Any, *args: Any) -> Waiter | None:
        """Run `operation` as `call` does, once the transaction of this id that is being
        ended (its markers being written) completes: in the same step as its Complete
        record, so that the next transaction's record follows it into the log before a
        follower's fetch can take the one without the other, and both are replicated in
        one round. None when no transaction of this id is being ended. After `timeout_s`
        without completion the operation runs anyway (and answers what it answers then)."""
        md = self.coordinator.transactions.get(transactional_id)
        if md is None or md.state not in (TransactionState.PREPARE_COMMIT,
                                          TransactionState.PREPARE_ABORT):
            return None
        waiter = Waiter()
        entry = (waiter, operation, args)
        parked = self._parked.setdefault(transactional_id, [])
        parked.append(entry)
        with trio.move_on_after(timeout_s):
            await waiter.event.wait()
            return waiter
        if entry not in parked:  # it ran and waits for its records to be committed
            await waiter.event.wait()
            return waiter
        parked.remove(entry)
        if not parked:
            self._parked.pop(transactional_id, None)
        return await self.call(operation, *args)

    def on_timers(self, now_ms: int) -> list:
        return self.coordinator.tick(now_ms)

    def background_tasks(self) -> list:
        return [lambda: self.hold_channels(f"txn-coordinator-{self.broker.node_id}")]

    def channels_opened(self) -> None:
        self._markers = MarkerWriter(self.broker, self.channels, lambda: self.local_markers)
        self.apply_effects(self.coordinator.tick(self.broker.now_ms()))  # schedules timers

    # -- KIP-890 part 1: a partition leader's question ----------------------------------------

    async def verify_partitions(self, transactional_id: str, producer_id: int,
                                producer_epoch: int, partitions: list[tuple[str, int]]
                                ) -> dict[tuple[str, int], ErrorCode]:
        """Ask the transactional id's coordinator whether these partitions are in the
        producer's ongoing transaction (AddPartitionsToTxn v4, verify_only), before this
        leader appends the transaction's first batch to them: this broker's own coordinator
        is asked directly. An answer that only says "not now" (no coordinator, loading,
        concurrent transactions, no answer) is NOT_ENOUGH_REPLICAS, which every producer
        retries, as Kafka's AddPartitionsToTxnManager maps it."""
        index = self.coordinator.partition_for(transactional_id)
        leader = self.broker.metadata_cache.leader(TRANSACTION_STATE_TOPIC, index)
        errors: dict[tuple[str, int], ErrorCode]
        if leader == self.broker.node_id:
            errors = self.coordinator.verify_partitions(transactional_id, producer_id,
                                                        producer_epoch, partitions)
        else:
            errors = await self._verify_remotely(leader, transactional_id, producer_id,
                                                 producer_epoch, partitions)
        return {tp: _RETRIABLE_VERIFICATION.get(e, e) for tp, e in errors.items()}

    async def verify_first_appends(self, transactional_id: str, producer_id: int,
                                   producer_epoch: int, partitions: Iterable[tuple[Any, Any]]
                                   ) -> dict[tuple[str, int], tuple[ErrorCode, object]]:
        """KIP-890 part 1 for a leader about to append a producer's transactional batch
        to these (topic-partition, Partition) pairs, a Produce's or a TxnOffsetCommit's:
        those where the batch would open the producer's transaction get a guard
        (Partition.start_verification) and are verified with the coordinator
        (`verify_partitions`); each maps to (the coordinator's answer, the guard its append
        presents). Partitions with the transaction already open here are left out."""
        guards = {tp: partition.start_verification(producer_id)
                  for tp, partition in partitions
                  if partition.needs_verification(producer_id)}
        if not guards:
            return {}
        answers = await self.verify_partitions(transactional_id, producer_id, producer_epoch,
                                               list(guards))
        return {tp: (answers.get(tp, ErrorCode.NONE), guard) for tp, guard in guards.items()}

    async def _verify_remotely(self, leader: int, transactional_id: str, producer_id: int,
                               producer_epoch: int, partitions: list[tuple[str, int]]
                               ) -> dict[tuple[str, int], ErrorCode]:
        unavailable = {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in partitions}
        channel = self.channels.get(leader) if leader >= 0 and self.channels else None
        if channel is None:
            return unavailable
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        body = m.request_body(m.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id,
            "producer_epoch": producer_epoch, "verify_only": True,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]})
        try:
            response = await channel.request(m.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, body,
                                             VERIFY_TIMEOUT_S)
        except PeerUnavailable:
            return unavailable
        if response["error_code"]:
            return {tp: ErrorCode(response["error_code"]) for tp in partitions}
        out = dict(unavailable)
        for txn in response["results_by_transaction"]:
            for topic in txn["topic_results"]:
                for r in topic["results_by_partition"]:
                    out[(topic["name"], r["partition_index"])] = ErrorCode(
                        r["partition_error_code"])
        return out
