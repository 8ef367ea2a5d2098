"""The trio side of a coordinator hosted on an internal topic: waiting requests, timers,
records on disk, leadership. One runtime for every coordinator of the family, as Kafka 4's
coordinator-common CoordinatorRuntime hosts the group and share coordinators.

Owns: `CoordinatorRuntime`, the machinery shared by broker.coordinator.group_runtime (the
group coordinator on __consumer_offsets) and broker.transaction.runtime (the transaction
coordinator on __transaction_state): it carries out the effects a pure coordinator returns
(append records to the coordinator's partition; answer waiting requests; write events),
sleeps until the coordinator's next timer, asks the controller for the internal topic on
first need (`ensure_topic`), and follows this broker's leadership of its partitions
(`on_partition_leadership`): a partition it comes to lead is loaded in the background (its
keys answer COORDINATOR_LOAD_IN_PROGRESS until then), one it stops leading is unloaded
(NOT_COORDINATOR from then on). A subclass says what its coordinator's records are, how
they are replayed, and what its own effects do (the hooks at the end of the class).

An answer that depends on records is released only after those records are committed:
effects run in order, an append precedes the Reply it guards, and the replies after an
append wait until the partition's high watermark covers it (every in-sync replica holds
it, as Kafka's coordinators append with acks=all), up to `commit_timeout_ms`. A write that
cannot be replicated in time answers COORDINATOR_NOT_AVAILABLE, and one whose leadership
moved while it waited NOT_COORDINATOR (Kafka's mapping of those produce errors), so the
client retries and nothing is acknowledged that a coordinator failover could lose.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

import trio

from broker import planted, timeouts
from broker.controller_channel import ControllerUnavailable
from broker.coordinator.effects import Emit, Reply
from broker.partition import COORDINATOR
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.batch_header import BatchHeader
from protocol.records import Record, decode_batches, encode_batch, parse_batch_header

log = logging.getLogger("minibroker.coordinator")

LOAD_CHUNK_BYTES = 1 << 20
TOPIC_WAIT_S = 2.0  # FindCoordinator's wait for a new internal topic; clients retry
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

    def answer(self, fallback: dict) -> Any:
        """The coordinator's answer, or `fallback` with the error that stopped its records
        reaching the log."""
        if self.error != ErrorCode.NONE:
            return dict(fallback, error_code=self.error)
        return self.body

    def error_code(self) -> ErrorCode:
        """The answer's one error code: the append's failure, else the body's."""
        return self.error if self.error != ErrorCode.NONE else ErrorCode(self.body["error_code"])


class AppendFailed(Exception):
    """Records that did not reach the coordinator's log, with the error to answer."""

    def __init__(self, error: ErrorCode):
        super().__init__(error.name)
        self.error = error


def _answer_later(waiter: Waiter, body: Any) -> Callable[[ErrorCode], None]:
    def then(error: ErrorCode) -> None:
        if error:
            waiter.fail(error)
        else:
            waiter.resolve(body)
    return then


class CoordinatorRuntime:
    """Hosts one pure coordinator (`self.coordinator`) on the partitions of `topic`."""

    topic: str
    coordinator: Any  # the pure coordinator: partition_for, owned, loading, next_deadline

    def __init__(self, broker):
        self.broker = broker
        self._timers_changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        # partition -> the load under way; a newer one (or an unload) makes an older stop
        self._loads: dict[int, object] = {}
        self._pending_loads: list[tuple[int, object]] = []  # asked for before run() started
        self._creating: trio.Event | None = None  # set when a CreateTopics in flight ends
        self.channels: Any = None  # BrokerChannels, while hold_channels runs

    # -- requests -----------------------------------------------------------------------------

    async def call(self, operation: Callable[..., list], *args: Any,
                   verification: object | None = None) -> Waiter:
        """Run one coordinator operation for a request and wait for its answer.
        `verification` is the KIP-890 guard (Partition.start_verification) its
        transactional append presents, when that append was verified first."""
        waiter = Waiter()
        self.before_operation()
        self.apply_effects(operation(waiter, *args, self.broker.now_ms()), verification)
        await waiter.event.wait()
        return waiter

    def apply_effects(self, effects: Iterable[Any],
                      verification: object | None = None) -> ErrorCode:
        """Carry out effects in order; return the error that kept records from the log, or
        NONE. Once an append fails, what follows it is told that error (a Reply carries
        it); while an append is not yet below the high watermark, what follows waits for it
        (`after_commit`)."""
        failed = ErrorCode.NONE
        uncommitted: tuple[int, int] | None = None  # (partition, end offset) to wait for
        deferred: list[Callable[[ErrorCode], None]] = []
        for effect in effects:
            if isinstance(effect, Reply):
                waiter, body = effect.waiter, effect.body
                if failed:
                    waiter.fail(failed)  # never acknowledge what is not in the log
                elif uncommitted is not None and not self._committed(*uncommitted):
                    deferred.append(_answer_later(waiter, body))
                else:
                    waiter.resolve(body)
            elif isinstance(effect, Emit):
                self.broker.events.emit(effect.type, **effect.fields)
            elif (target := self.records_of(effect)) is not None:
                if not target[1]:
                    continue  # nothing to write
                if failed:
                    self.append_failed(effect)
                    continue
                try:
                    index, end = self._append(*target, self.producer_of(effect),
                                              verification)
                except AppendFailed as e:
                    failed = e.error
                    self.append_failed(effect)
                    continue
                self.appended(effect, index, end)
                self._replay_committed(index)
                uncommitted = (index, end)
            else:
                # an effect of the subclass's own (e.g. markers to write): it runs once
                # what came before it is committed, with the error that stopped it if any
                self.carry_out(effect, failed, uncommitted)
        if deferred:
            assert uncommitted is not None
            if self._nursery is None:
                for then in deferred:
                    then(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            else:
                self._nursery.start_soon(self._after_commit, *uncommitted, deferred)
        self._timers_changed.set()
        return failed

    def _committed(self, index: int, end: int) -> bool:
        partition = self.broker.partition(self.topic, index)
        if planted.on("commit-before-hw"):
            return partition is not None
        return partition is not None and partition.high_watermark >= end

    async def wait_committed(self, index: int, end: int,
                             timeout_s: float | None) -> ErrorCode:
        """NONE once the HW of partition `index` covers `end`; NOT_COORDINATOR as soon as
        this broker no longer leads it; COORDINATOR_NOT_AVAILABLE after `timeout_s` (None:
        no limit but the leadership)."""
        tp = [(self.topic, index)]
        with timeouts.move_on_after(timeout_s if timeout_s is not None else float("inf")):
            while True:
                partition = self.broker.partition(self.topic, index)
                if partition is None or not partition.is_leader:
                    return ErrorCode.NOT_COORDINATOR
                if self._committed(index, end):
                    self._replay_committed(index)
                    return ErrorCode.NONE
                await self.broker.wait_for_data(tp)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def _after_commit(self, index: int, end: int,
                            deferred: list[Callable[[ErrorCode], None]]) -> None:
        error = await self.wait_committed(index, end, self.commit_timeout_ms / 1000)
        for then in deferred:
            then(error)

    def _append(self, index: int, records: list[tuple[bytes, bytes | None]],
                producer: tuple[int, int] | None = None,
                verification: object | None = None) -> tuple[int, int]:
        """Append key/value records to partition `index`, in a transactional batch of
        `producer` (id, epoch) when given, presenting its KIP-890 `verification` guard;
        (index, the offset after them)."""
        partition = self.broker.partition(self.topic, index)
        if (partition is None or not partition.is_leader
                or self.broker.log_dirs.is_offline(partition.log.directory)):
            # leadership moved while the request waited, or is about to: its log failed
            raise AppendFailed(ErrorCode.NOT_COORDINATOR)
        if partition.under_min_isr():
            raise AppendFailed(ErrorCode.COORDINATOR_NOT_AVAILABLE)  # acks=all is refused
        now = self.broker.now_ms()
        txn: dict[str, Any] = {} if producer is None else {
            "producer_id": producer[0], "producer_epoch": producer[1], "is_transactional": True}
        batch = bytearray(encode_batch([Record(i, now, key, value, [])
                                        for i, (key, value) in enumerate(records)], **txn))
        result = partition.append_batch(
            batch, parse_batch_header(batch), now,
            **({} if producer is None else {"origin": COORDINATOR,
                                            "verification": verification}))
        if result.error == ErrorCode.INVALID_TXN_STATE and producer is not None:
            # the transaction ended since it was verified (its marker withdrew the guard)
            raise AppendFailed(ErrorCode.INVALID_TXN_STATE)
        if result.error != ErrorCode.NONE:
            log.error("cannot append to %s-%d: %s", self.topic, index, result.error.name)
            raise AppendFailed(ErrorCode.NOT_COORDINATOR)
        self.broker.notify_data_arrived(self.topic, index)
        return index, result.last_offset + 1

    def _replay_committed(self, index: int | None = None) -> None:
        partition = None if index is None else self.broker.partition(self.topic, index)
        if index is None or partition is not None:
            self.on_committed(index, partition.high_watermark if partition else None)

    # -- the internal topic ---------------------------------------------------------------------

    async def ensure_topic(self) -> bool:
        """Whether the coordinator's topic exists, asking the controller to create it first
        if it does not (as Kafka does on first need): compacted, internal, with
        `num_partitions` partitions; the controller caps the replication factor at the live
        brokers. Waits briefly for the new topic to reach this broker's image; False means
        not yet (clients retry COORDINATOR_NOT_AVAILABLE)."""
        def exists(cache) -> bool:
            return cache.topic(self.topic) is not None

        if exists(self.broker.metadata_cache):
            return True
        if self._creating is None:  # one CreateTopics at a time; later callers wait on it
            self._creating = trio.Event()
            try:
                if not await self._create_topic():
                    return False  # refused or unanswered: nothing is coming to wait for
            finally:
                self._creating.set()
                self._creating = None
        # and, as after any CreateTopics, until this broker's replicas of it have their logs
        return await self.broker.wait_for_metadata(
            lambda cache: exists(cache) and self.broker.serves([self.topic]), TOPIC_WAIT_S)

    async def _create_topic(self) -> bool:
        """Ask the controller for the topic; False when it was neither created nor there."""
        request = {
            "topics": [{
                "name": self.topic, "num_partitions": self.num_partitions,
                "replication_factor": -1, "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in self.topic_configs().items()],
            }],
            "timeout_ms": int(TOPIC_WAIT_S * 1000), "validate_only": False,
        }
        body = m.request_body(m.CREATE_TOPICS, CREATE_TOPICS_VERSION, request)
        try:
            response = await self.broker.controller_channel.forward(
                m.CREATE_TOPICS, CREATE_TOPICS_VERSION, body)
        except ControllerUnavailable:
            log.warning("cannot create %s: no controller answered", self.topic)
            return False
        created = True
        for t in response["topics"]:
            if t["error_code"] not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.warning("cannot create %s: %s %s", self.topic,
                            ErrorCode(t["error_code"]).name, t.get("error_message"))
                created = False
        return created

    def coordinator_node(self, key: str) -> tuple[ErrorCode, int, str]:
        """FindCoordinator's answer for `key` once the topic exists: the leader of the key's
        partition (error, node id, message)."""
        index = self.coordinator.partition_for(key)
        leader = self.broker.metadata_cache.leader(self.topic, index)
        if leader < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, f"{self.topic}-{index} has no leader"
        return ErrorCode.NONE, leader, ""

    # -- leadership of the topic's partitions -------------------------------------------------

    def on_partition_leadership(self, index: int, leader: bool) -> None:
        """This broker became (or stopped being) the leader of partition `index` of the
        topic, whose local log exists. Called by the broker as it applies a metadata delta."""
        if not 0 <= index < self.num_partitions:
            # a topic made with another partition count: no key routes here
            log.warning("%s-%d is beyond the %d partitions configured: not served",
                        self.topic, index, self.num_partitions)
            return
        if leader:
            if index in self.coordinator.owned or index in self.coordinator.loading:
                return
            partition = self.broker.partition(self.topic, index)
            self.begin_load(index, partition.leader_epoch if partition is not None else 0)
            token = self._loads[index] = object()
            if self._nursery is None:
                self._pending_loads.append((index, token))
            else:
                self._nursery.start_soon(self._load, index, token)
        else:
            self._loads.pop(index, None)  # a load under way stops at its next chunk
            self.apply_effects(self.unload(index, self.broker.now_ms()))

    async def _load(self, index: int, token: object) -> None:
        """Replay a partition's records in log order: the state they describe is the state."""
        partition = self.broker.partition(self.topic, index)
        if partition is None:
            log.error("cannot load %s-%d: no local log", self.topic, index)
            return
        # up to the log end, as Kafka's coordinators load: a new leader's log is never
        # truncated, so what lies above its high watermark will be committed
        end = partition.log_end_offset
        offset, records = partition.log_start_offset, 0
        started = trio.current_time()
        while offset < end:
            data = partition.log.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
            if not data:
                break
            now = self.broker.now_ms()
            for header, batch in decode_batches(data):
                records += self.replay_batch(header, batch, now)
                offset = header.last_offset + 1
            await trio.lowlevel.checkpoint()  # let other connections in while a big partition loads
            if self._loads.get(index) is not token:
                return  # unloaded meanwhile (unload dropped what was replayed so far)
        if self._loads.get(index) is not token:
            return
        del self._loads[index]
        self.apply_effects(self.finish_load(index, self.broker.now_ms()))
        if records:
            log.info("loaded %s-%d: %d records in %.3fs", self.topic, index, records,
                     trio.current_time() - started)

    # -- background work ------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for index, token in self._pending_loads:
                nursery.start_soon(self._load, index, token)
            self._pending_loads.clear()
            nursery.start_soon(self._timer_loop)
            for task in self.background_tasks():
                nursery.start_soon(task)
            task_status.started()

    def start_soon(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Run `fn` in the runtime's nursery; False before run() has started it."""
        if self._nursery is None:
            return False
        self._nursery.start_soon(fn, *args)
        return True

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
            self.apply_effects(self.on_timers(self.broker.now_ms()))

    # -- what a hosted coordinator says -------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        raise NotImplementedError

    @property
    def commit_timeout_ms(self) -> int:
        """How long a reply waits for its records to be committed."""
        raise NotImplementedError

    def topic_configs(self) -> dict[str, str]:
        """The configs the topic is created with."""
        raise NotImplementedError

    def records_of(self, effect: Any) -> tuple[int, list[tuple[bytes, bytes | None]]] | None:
        """For an effect that appends: its partition and its records' keys and values."""
        raise NotImplementedError

    def producer_of(self, effect: Any) -> tuple[int, int] | None:
        """For an effect whose records belong to a producer's transaction: (id, epoch)."""
        return None

    def appended(self, effect: Any, index: int, end: int) -> None:
        """The effect's records are in the leader's log, ending before offset `end`."""

    def append_failed(self, effect: Any) -> None:
        """The effect's records did not reach the log (nor will they)."""

    def on_committed(self, index: int | None, high_watermark: int | None) -> None:
        """The HW of partition `index` (None: of every partition) may have moved."""

    def before_operation(self) -> None:
        """Called before each request's operation runs."""

    def carry_out(self, effect: Any, failed: ErrorCode,
                  uncommitted: tuple[int, int] | None) -> None:
        """An effect of the coordinator's own, after the appends before it: `failed` is the
        error that kept one of them from the log, `uncommitted` the (partition, end) still
        to be committed."""
        raise TypeError(f"{type(self).__name__} cannot carry out {effect!r}")

    def begin_load(self, index: int, leader_epoch: int) -> None:
        raise NotImplementedError

    def replay_batch(self, header: BatchHeader, records: list[Record], now_ms: int) -> int:
        """Replay one batch of the log while loading; how many records it replayed."""
        raise NotImplementedError

    def finish_load(self, index: int, now_ms: int) -> list:
        raise NotImplementedError

    def unload(self, index: int, now_ms: int) -> list:
        raise NotImplementedError

    def on_timers(self, now_ms: int) -> list:
        raise NotImplementedError

    def background_tasks(self) -> list[Callable[[], Any]]:
        return []

    # -- the coordinator's own requests to other brokers -----------------------------------------

    async def hold_channels(self, client_id: str) -> None:
        """Keep inter-broker channels open (`self.channels`) for as long as the runtime runs,
        for a coordinator that sends requests of its own (markers, share-state requests);
        a subclass starts it from background_tasks."""
        from broker.net.broker_channels import BrokerChannels
        async with trio.open_nursery() as nursery:
            self.channels = BrokerChannels(self.broker, nursery, client_id)
            self.channels_opened()
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await self.channels.aclose()

    def channels_opened(self) -> None:
        """`self.channels` has just been opened."""
