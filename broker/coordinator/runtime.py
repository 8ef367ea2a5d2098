"""The trio side of the group coordinator: waiting requests, timers, records on disk.

Owns: `CoordinatorRuntime`, which carries out the effects the pure GroupCoordinator returns
(append records to __consumer_offsets, then replay them; answer waiting requests; write
events), sleeps until the next coordinator timer, expires old offsets, creates
__consumer_offsets on first need and loads its partitions at start-up (their groups answer
COORDINATOR_LOAD_IN_PROGRESS until then).

An answer that depends on records is released only after those records are in the log:
effects run in order and an Append precedes the Reply it guards. With replication this is
where "committed" (below the high watermark) will be awaited.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, assert_never

import trio

from broker.config import BrokerConfig, validate_topic_configs
from broker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from broker.coordinator.membership import Append, Effect, Emit, GroupConfig, Reply
from protocol.errors import ErrorCode
from protocol.records import Record, decode_batches, encode_batch, parse_batch_header

log = logging.getLogger("minibroker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_CHUNK_BYTES = 1 << 20


class Waiter:
    """One request waiting for its answer from the coordinator."""

    __slots__ = ("event", "body", "error")

    def __init__(self):
        self.event = trio.Event()
        self.body: Any = None
        self.error = ErrorCode.NONE

    def resolve(self, body: Any) -> None:
        if not self.event.is_set():
            self.body = body
            self.event.set()

    def fail(self, error: ErrorCode) -> None:
        if not self.event.is_set():
            self.error = error
            self.event.set()


def coordinator_config(broker_config: BrokerConfig) -> CoordinatorConfig:
    c = broker_config
    return CoordinatorConfig(
        num_partitions=c.offsets_topic_num_partitions,
        offsets_retention_ms=c.offsets_retention_minutes * 60_000,
        offset_metadata_max_bytes=c.offset_metadata_max_bytes,
        group=GroupConfig(
            min_session_timeout_ms=c.group_min_session_timeout_ms,
            max_session_timeout_ms=c.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
            max_size=c.group_max_size))


class CoordinatorRuntime:
    def __init__(self, broker):
        self.broker = broker
        self.coordinator = GroupCoordinator(coordinator_config(broker.config))
        self._timers_changed = trio.Event()

    # -- requests -----------------------------------------------------------------------------

    async def call(self, operation: Callable[..., list[Effect]], *args: Any) -> Waiter:
        """Run one coordinator operation for a request and wait for its answer."""
        waiter = Waiter()
        self.apply_effects(operation(waiter, *args, self.broker.now_ms()))
        await waiter.event.wait()
        return waiter

    def apply_effects(self, effects: Iterable[Effect]) -> ErrorCode:
        """Carry out effects in order; return the error that kept records from the log, or
        NONE. Once an append fails, the replies after it carry that error instead."""
        failed = ErrorCode.NONE
        for effect in effects:
            match effect:
                case Append():
                    failed = failed or self._append(effect)
                case Reply(waiter=waiter, body=body):
                    if failed:
                        waiter.fail(failed)  # never acknowledge what is not in the log
                    else:
                        waiter.resolve(body)
                case Emit(type=type_, fields=fields):
                    self.broker.events.emit(type_, **fields)
                case _:
                    # an effect the coordinator learnt to return and this runtime did not
                    assert_never(effect)
        self._timers_changed.set()
        return failed

    def _append(self, effect: Append) -> ErrorCode:
        if not effect.records:
            return ErrorCode.NONE
        index = self.coordinator.partition_for(effect.group_id)
        partition = self.broker.partition(OFFSETS_TOPIC, index)
        if partition is None:
            return ErrorCode.NOT_COORDINATOR
        now = self.broker.now_ms()
        batch = bytearray(encode_batch([Record(i, now, r.key, r.value, [])
                                        for i, r in enumerate(effect.records)]))
        result = partition.append_batch(batch, parse_batch_header(batch), now)
        if result.error != ErrorCode.NONE:
            log.error("cannot append to %s-%d: %s", OFFSETS_TOPIC, index, result.error.name)
            return ErrorCode.NOT_COORDINATOR
        for record in effect.records:
            self.coordinator.replay_record(record, now)
        self.broker.notify_data_arrived(OFFSETS_TOPIC, index)
        return ErrorCode.NONE

    # -- __consumer_offsets ---------------------------------------------------------------------

    def ensure_offsets_topic(self) -> None:
        """Create __consumer_offsets on first need, as Kafka does; compacted and internal."""
        if OFFSETS_TOPIC in self.broker.metadata.topics:
            return
        config = self.broker.config
        configs = validate_topic_configs({
            "cleanup.policy": "compact",
            "segment.bytes": str(config.offsets_topic_segment_bytes)})
        replication = min(config.offsets_topic_replication_factor, 1)  # live brokers: 1
        self.broker.create_topic(OFFSETS_TOPIC, self.coordinator.config.num_partitions,
                                 replication, configs, internal=True)
        now = self.broker.now_ms()
        for index in self.coordinator.offsets_topic_partitions():
            self.coordinator.finish_load(index, now)  # new and empty: nothing to load

    async def load_all(self) -> None:
        if OFFSETS_TOPIC not in self.broker.metadata.topics:
            return
        partitions = list(self.coordinator.offsets_topic_partitions())
        for index in partitions:
            self.coordinator.begin_load(index)
        for index in partitions:
            await self._load(index)

    async def _load(self, index: int) -> None:
        """Replay a partition's records in log order: the state they describe is the state."""
        partition = self.broker.partition(OFFSETS_TOPIC, index)
        offset, records = partition.log_start_offset, 0
        started = trio.current_time()
        while offset < partition.high_watermark:
            data = partition.log.read(offset, LOAD_CHUNK_BYTES, max_offset=partition.high_watermark)
            if not data:
                break
            now = self.broker.now_ms()
            for header, batch in decode_batches(data):
                for record in batch:
                    if record.key is None:
                        continue  # every coordinator record has a key: nothing to replay
                    self.coordinator.replay(record.key, record.value, now, loading=True)
                    records += 1
                offset = header.last_offset + 1
            await trio.lowlevel.checkpoint()  # let other connections in while a big partition loads
        self.coordinator.finish_load(index, self.broker.now_ms())
        if records:
            log.info("loaded %s-%d: %d records in %.3fs", OFFSETS_TOPIC, index, records,
                     trio.current_time() - started)

    # -- background work ------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.load_all)
            nursery.start_soon(self._timer_loop)
            nursery.start_soon(self._expiry_loop)
            task_status.started()

    async def _timer_loop(self) -> None:
        timers = self.coordinator.timers
        while True:
            self._timers_changed = trio.Event()
            deadline = timers.next_deadline()
            if deadline is None:
                await self._timers_changed.wait()
                continue
            delay = (deadline - self.broker.now_ms()) / 1000
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._timers_changed.wait()
                continue
            self.apply_effects(self.coordinator.on_timers(self.broker.now_ms()))

    async def _expiry_loop(self) -> None:
        interval = self.broker.config.offsets_retention_check_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            self.apply_effects(self.coordinator.expire_offsets(self.broker.now_ms()))
