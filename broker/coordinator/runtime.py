"""The trio side of the group coordinator: waiting requests, timers, records on disk.

Owns: `CoordinatorRuntime`, which carries out the effects the pure GroupCoordinator returns
(append records to __consumer_offsets, then replay them; answer waiting requests; write
events), sleeps until the next coordinator timer, expires old offsets, asks the controller
for __consumer_offsets on first need (`ensure_offsets_topic`), and follows this broker's
leadership of its partitions (`on_partition_leadership`): a partition it comes to lead is
loaded in the background (its groups answer COORDINATOR_LOAD_IN_PROGRESS until then), one it
stops leading is unloaded (its groups answer NOT_COORDINATOR, and members waiting in a
rebalance are told so at once).

An answer that depends on records is released only after those records are committed:
effects run in order, an Append precedes the Reply it guards, and the replies after an
append wait until the partition's high watermark covers it (every in-sync replica holds
it, as Kafka's coordinator appends with acks=all), up to offsets.commit.timeout.ms. A
commit that cannot be replicated in time answers COORDINATOR_NOT_AVAILABLE, and one whose
leadership moved while it waited NOT_COORDINATOR (Kafka's mapping of those produce errors),
so the client retries and no commit is acknowledged that a coordinator failover could lose.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from typing import Any, Callable, Iterable, assert_never

import trio

from broker import timeouts
from broker.config import BrokerConfig, ConfigError
from broker.coordinator.assignors import ASSIGNORS
from broker.controller_channel import ControllerUnavailable
from broker.coordinator.consumer_group import ConsumerGroupConfig
from broker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from broker.coordinator.effects import Append, Effect, Emit, Reply
from broker.coordinator.membership import GroupConfig
from broker.coordinator.offsets import OffsetRecord
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.records import Record, decode_batches, encode_batch, parse_batch_header
from broker import planted

log = logging.getLogger("minibroker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_CHUNK_BYTES = 1 << 20
OFFSETS_TOPIC_WAIT_S = 2.0  # FindCoordinator's wait for a new __consumer_offsets; clients retry
CREATE_TOPICS_VERSION = 7


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


def _assignor_name(value: str) -> str:
    """group.consumer.assignors names an assignor as Kafka does, by class name, or by its
    short name (uniform, range)."""
    name = value.strip().rsplit(".", 1)[-1].removesuffix("Assignor").lower()
    if name not in ASSIGNORS:
        raise ConfigError(f"invalid value {value!r} for group.consumer.assignors: one of "
                          f"{', '.join(ASSIGNORS)} (or Kafka's UniformAssignor, RangeAssignor)")
    return name


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
            max_size=c.group_max_size),
        consumer_group=ConsumerGroupConfig(
            session_timeout_ms=c.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=c.group_consumer_heartbeat_interval_ms,
            assignors=tuple(_assignor_name(a) for a in c.group_consumer_assignors),
            max_size=c.group_consumer_max_size))


class CoordinatorRuntime:
    def __init__(self, broker):
        self.broker = broker
        self.coordinator = GroupCoordinator(coordinator_config(broker.config))
        self.coordinator.leads_in_metadata = (
            lambda index: broker.metadata_cache.leader(OFFSETS_TOPIC, index) == broker.node_id)
        self.coordinator.topics = self._topics
        self.coordinator.topic_id = self._topic_id
        self.coordinator.topic_name = self._topic_name
        self.coordinator.consumer_groups.group_configs = broker.metadata_cache.group_configs
        self._timers_changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        # partition -> the load under way; a newer one (or an unload) makes an older stop
        self._loads: dict[int, object] = {}
        self._pending_loads: list[tuple[int, object]] = []  # asked for before run() started
        self._creating: trio.Event | None = None  # set when a CreateTopics in flight ends
        # partition -> offset records appended but not yet below the high watermark, with
        # the log offset each ends at: replayed into the cache only once committed
        self._uncommitted_offsets: dict[int, deque[tuple[int, OffsetRecord]]] = {}

    def _topics(self) -> dict[str, int]:
        """The metadata image's topics for consumer groups' assignments: name -> partition
        count."""
        image = self.broker.metadata_cache.image
        return {t.name: len(t.partitions) for t in image.topics_by_id.values()}

    def _topic_id(self, name: str) -> uuid.UUID | None:
        topic = self.broker.metadata_cache.topic(name)
        return topic.topic_id if topic is not None else None

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.broker.metadata_cache.topic_by_id(topic_id)
        return topic.name if topic is not None else None

    # -- requests -----------------------------------------------------------------------------

    async def call(self, operation: Callable[..., list[Effect]], *args: Any) -> Waiter:
        """Run one coordinator operation for a request and wait for its answer."""
        waiter = Waiter()
        self._replay_committed_offsets()
        self.apply_effects(operation(waiter, *args, self.broker.now_ms()))
        await waiter.event.wait()
        return waiter

    def apply_effects(self, effects: Iterable[Effect]) -> ErrorCode:
        """Carry out effects in order; return the error that kept records from the log, or
        NONE. Once an append fails, the replies after it carry that error instead; while an
        append is not yet below the high watermark, the replies after it wait for it."""
        failed = ErrorCode.NONE
        uncommitted: tuple[int, int] | None = None  # (partition, end offset) to wait for
        deferred: list[tuple[Waiter, Any]] = []
        for effect in effects:
            match effect:
                case Append():
                    if not failed:
                        failed, end = self._append(effect)
                        if end is not None:
                            uncommitted = end
                case Reply(waiter=waiter, body=body):
                    if failed:
                        waiter.fail(failed)  # never acknowledge what is not in the log
                    elif uncommitted is not None and not self._committed(*uncommitted):
                        deferred.append((waiter, body))
                    else:
                        waiter.resolve(body)
                case Emit(type=type_, fields=fields):
                    self.broker.events.emit(type_, **fields)
                case _:
                    # an effect the coordinator learnt to return and this runtime did not
                    assert_never(effect)
        if deferred:
            assert uncommitted is not None
            if self._nursery is None:
                for waiter, _body in deferred:
                    waiter.fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            else:
                self._nursery.start_soon(self._reply_when_committed, *uncommitted, deferred)
        self._timers_changed.set()
        return failed

    def _committed(self, index: int, end: int) -> bool:
        partition = self.broker.partition(OFFSETS_TOPIC, index)
        if planted.on("commit-before-hw"):
            return partition is not None
        return partition is not None and partition.high_watermark >= end

    async def _reply_when_committed(self, index: int, end: int,
                                    deferred: list[tuple[Waiter, Any]]) -> None:
        """Answer once the HW covers `end`; fail the answers if it cannot in time."""
        tp = [(OFFSETS_TOPIC, index)]
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        with timeouts.move_on_after(self.broker.config.offsets_commit_timeout_ms / 1000):
            while True:
                partition = self.broker.partition(OFFSETS_TOPIC, index)
                if partition is None or not partition.is_leader:
                    error = ErrorCode.NOT_COORDINATOR
                    break
                if partition.high_watermark >= end:
                    self._replay_committed_offsets(index)
                    for waiter, body in deferred:
                        waiter.resolve(body)
                    return
                await self.broker.wait_for_data(tp)
        for waiter, _body in deferred:
            waiter.fail(error)

    def _append(self, effect: Append) -> tuple[ErrorCode, tuple[int, int] | None]:
        """Append the records; the error, and where the append ends (to wait for)."""
        if not effect.records:
            return ErrorCode.NONE, None
        index = self.coordinator.partition_for(effect.group_id)
        partition = self.broker.partition(OFFSETS_TOPIC, index)
        if partition is None or not partition.is_leader or self.broker.log_dirs.offline:
            # leadership moved while the request waited, or is about to: its log failed
            return ErrorCode.NOT_COORDINATOR, None
        if partition.under_min_isr():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None  # acks=all would be refused
        now = self.broker.now_ms()
        batch = bytearray(encode_batch([Record(i, now, r.key, r.value, [])
                                        for i, r in enumerate(effect.records)]))
        result = partition.append_batch(batch, parse_batch_header(batch), now)
        if result.error != ErrorCode.NONE:
            log.error("cannot append to %s-%d: %s", OFFSETS_TOPIC, index, result.error.name)
            return ErrorCode.NOT_COORDINATOR, None
        end = result.last_offset + 1
        for record in effect.records:
            if record.entry is not None:
                self._uncommitted_offsets.setdefault(index, deque()).append((end, record))
            else:
                self.coordinator.replay_record(record, now)
        self._replay_committed_offsets(index)
        self.broker.notify_data_arrived(OFFSETS_TOPIC, index)
        return ErrorCode.NONE, (index, end)

    def _replay_committed_offsets(self, index: int | None = None) -> None:
        """Replay the offset records the high watermark now covers (of one partition, or
        of all). Until then OffsetFetch does not see them: a commit that is still only in
        the leader's log may be truncated away by the next leader, and an offset read from
        it would then go backwards (a chaos run saw exactly that, a paused follower in the
        ISR holding the HW back). Kafka's coordinator runtime likewise answers reads from
        the last committed state. A commit whose answer timed out is replayed here once the
        HW covers it after all, as it will be by any later leader's load."""
        for i in ([index] if index is not None else list(self._uncommitted_offsets)):
            queue = self._uncommitted_offsets.get(i)
            partition = self.broker.partition(OFFSETS_TOPIC, i)
            if not queue or partition is None:
                continue
            hw = partition.high_watermark
            while queue and queue[0][0] <= hw:
                self.coordinator.replay_record(queue.popleft()[1], self.broker.now_ms())
            if not queue:
                del self._uncommitted_offsets[i]

    # -- __consumer_offsets ---------------------------------------------------------------------

    async def ensure_offsets_topic(self) -> bool:
        """Whether __consumer_offsets exists, asking the controller to create it first if it
        does not (as Kafka does on first need): compacted, internal, with
        offsets.topic.num.partitions partitions; the controller caps the replication factor at
        the live brokers. Waits briefly for the new topic to reach this broker's image; False
        means not yet (clients retry COORDINATOR_NOT_AVAILABLE)."""
        def exists(cache) -> bool:
            return cache.topic(OFFSETS_TOPIC) is not None

        if exists(self.broker.metadata_cache):
            return True
        if self._creating is None:  # one CreateTopics at a time; later callers wait on it
            self._creating = trio.Event()
            try:
                if not await self._create_offsets_topic():
                    return False  # refused or unanswered: nothing is coming to wait for
            finally:
                self._creating.set()
                self._creating = None
        # and, as after any CreateTopics, until this broker's replicas of it have their logs
        return await self.broker.wait_for_metadata(
            lambda cache: exists(cache) and self.broker.serves([OFFSETS_TOPIC]),
            OFFSETS_TOPIC_WAIT_S)

    async def _create_offsets_topic(self) -> bool:
        """Ask the controller for the topic; False when it was neither created nor there."""
        config = self.broker.config
        request = {
            "topics": [{
                "name": OFFSETS_TOPIC, "num_partitions": self.coordinator.config.num_partitions,
                "replication_factor": -1, "assignments": [],
                "configs": [{"name": "cleanup.policy", "value": "compact"},
                            {"name": "segment.bytes",
                             "value": str(config.offsets_topic_segment_bytes)}],
            }],
            "timeout_ms": int(OFFSETS_TOPIC_WAIT_S * 1000), "validate_only": False,
        }
        body = m.request_body(m.CREATE_TOPICS, CREATE_TOPICS_VERSION, request)
        try:
            response = await self.broker.controller_channel.forward(
                m.CREATE_TOPICS, CREATE_TOPICS_VERSION, body)
        except ControllerUnavailable:
            log.warning("cannot create %s: no controller answered", OFFSETS_TOPIC)
            return False
        created = True
        for t in response["topics"]:
            if t["error_code"] not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.warning("cannot create %s: %s %s", OFFSETS_TOPIC,
                            ErrorCode(t["error_code"]).name, t.get("error_message"))
                created = False
        return created

    # -- leadership of __consumer_offsets partitions -------------------------------------------

    def on_partition_leadership(self, index: int, leader: bool) -> None:
        """This broker became (or stopped being) the leader of __consumer_offsets-`index`,
        whose local log exists. Called by the broker as it applies a metadata delta."""
        if not 0 <= index < self.coordinator.config.num_partitions:
            # a topic made with another partition count: no group routes here
            log.warning("%s-%d is beyond offsets.topic.num.partitions=%d: not served",
                        OFFSETS_TOPIC, index, self.coordinator.config.num_partitions)
            return
        if leader:
            if index in self.coordinator.owned or index in self.coordinator.loading:
                return
            self.coordinator.begin_load(index)
            token = self._loads[index] = object()
            if self._nursery is None:
                self._pending_loads.append((index, token))
            else:
                self._nursery.start_soon(self._load, index, token)
        else:
            self._loads.pop(index, None)  # a load under way stops at its next chunk
            self._uncommitted_offsets.pop(index, None)  # the next leader decides them
            self.apply_effects(self.coordinator.unload(index, self.broker.now_ms()))

    async def _load(self, index: int, token: object) -> None:
        """Replay a partition's records in log order: the state they describe is the state."""
        partition = self.broker.partition(OFFSETS_TOPIC, index)
        if partition is None:
            log.error("cannot load %s-%d: no local log", OFFSETS_TOPIC, index)
            return
        # up to the log end, as Kafka's GroupMetadataManager loads: a new leader's log is
        # never truncated, so what lies above its high watermark will be committed
        end = partition.log_end_offset
        offset, records = partition.log_start_offset, 0
        started = trio.current_time()
        while offset < end:
            data = partition.log.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
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
            if self._loads.get(index) is not token:
                return  # unloaded meanwhile (unload dropped what was replayed so far)
        if self._loads.get(index) is not token:
            return
        del self._loads[index]
        self.coordinator.finish_load(index, self.broker.now_ms())
        self._timers_changed.set()  # loaded members' session timers are new
        if records:
            log.info("loaded %s-%d: %d records in %.3fs", OFFSETS_TOPIC, index, records,
                     trio.current_time() - started)

    # -- background work ------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for index, token in self._pending_loads:
                nursery.start_soon(self._load, index, token)
            self._pending_loads.clear()
            nursery.start_soon(self._timer_loop)
            nursery.start_soon(self._expiry_loop)
            task_status.started()

    async def _timer_loop(self) -> None:
        while True:
            self._timers_changed = trio.Event()
            deadline = self.coordinator.next_deadline()
            if deadline is None:
                await self._timers_changed.wait()
                continue
            delay = (deadline - self.broker.now_ms()) / 1000
            if delay > 0:
                with timeouts.move_on_after(delay):
                    await self._timers_changed.wait()
                continue
            self.apply_effects(self.coordinator.on_timers(self.broker.now_ms()))

    async def _expiry_loop(self) -> None:
        interval = self.broker.config.offsets_retention_check_interval_ms / 1000
        while True:
            await timeouts.sleep(interval)
            self.apply_effects(self.coordinator.expire_offsets(self.broker.now_ms()))
