"""The client's metadata cache: brokers, topics, partitions, leaders and topic ids.

Owns: `ClusterMetadata` (the cache itself, pure: it is updated from a Metadata response body
and the time of the update, and answers lookups), the value types it holds
(`TopicMetadata`, `PartitionMetadata`), and `Cluster` (the trio side: sends Metadata through
the ConnectionPool, keeps the pool's node addresses current, and decides when to refresh),
and `find_coordinator` (FindCoordinator for a group or a transactional id).

A refresh happens
- on demand: `await cluster.refresh()` (concurrent calls share one request when a refresh
  that started after the call has completed by the time the caller gets its turn);
- when an error says the cache is wrong: `cluster.note_error(code)` requests an update for
  every code with ErrorCode.refresh_metadata (NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, ...);
- when the cache is older than metadata_max_age_ms.
The last two are carried out by `await cluster.maybe_refresh()` (call it before a lookup) or by
the background task `cluster.run` (start it in a nursery: `await nursery.start(cluster.run)`).
Neither refreshes sooner than retry_backoff_ms after the last refresh (Java's
Metadata.timeToNextUpdate): an error that repeats on every request asks for one Metadata
per backoff. `refresh()` itself always sends.

The first refresh is the bootstrap: with no connection open, the pool tries the bootstrap
addresses in order until one answers (ConnectionPool.least_loaded).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

import trio

from client.config import ClientConfig
from client.connection import ConnectionPool
from client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, for_code
from client.types import Node
from protocol.errors import ErrorCode
from protocol.messages import FIND_COORDINATOR, METADATA
from protocol.primitives import ZERO_UUID

__all__ = ["Cluster", "ClusterMetadata", "PartitionMetadata", "TopicMetadata"]


@dataclass(frozen=True)
class PartitionMetadata:
    topic: str
    partition: int
    leader: int | None  # None: no leader right now (leader_id -1)
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID | None  # None: the broker did not say (Metadata < v10)
    is_internal: bool
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)


class ClusterMetadata:
    """The cache, updated only by `update(body, now, requested)`.

        md = ClusterMetadata()
        md.update(metadata_response_body, now=12.0, requested=None)   # None: all topics
        md.leader_for("orders", 2)        # -> 0
        md.partitions_for("orders")       # -> [0, 1, 2]
        md.is_stale(now=400.0, max_age_ms=300000)   # -> True
    """

    def __init__(self) -> None:
        self.brokers: dict[int, Node] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.topic_errors: dict[str, ErrorCode] = {}  # topics the last answer refused
        self.cluster_id: str | None = None
        self.controller_id: int | None = None
        self.updated_at: float | None = None  # trio clock of the last update
        self.listed_all = False  # the last update answered for every topic (requested None)

    def update(self, body: Any, now: float, requested: list[str] | None) -> None:
        """Apply a Metadata response. `requested` None (every topic) replaces the topic set;
        a list updates those topics only (dropping any the broker says are unknown)."""
        self.brokers = {b.node_id: Node(b.node_id, b.host, b.port, b.get("rack"))
                        for b in body.brokers}
        self.cluster_id = body.get("cluster_id")
        controller = body.get("controller_id", -1)
        self.controller_id = controller if controller >= 0 else None
        topics: dict[str, TopicMetadata] = {} if requested is None else dict(self.topics)
        errors: dict[str, ErrorCode] = {} if requested is None else dict(self.topic_errors)
        for t in body.topics:
            name = t.name
            if name is None:
                continue
            code = ErrorCode.of(t.error_code)
            if code is not ErrorCode.NONE:
                topics.pop(name, None)
                errors[name] = code
                continue
            errors.pop(name, None)
            topic_id = t.get("topic_id")
            topics[name] = TopicMetadata(
                name, None if topic_id in (None, ZERO_UUID) else topic_id,
                bool(t.get("is_internal", False)),
                {p.partition_index: PartitionMetadata(
                    name, p.partition_index, p.leader_id if p.leader_id >= 0 else None,
                    p.get("leader_epoch", -1), tuple(p.replica_nodes), tuple(p.isr_nodes),
                    tuple(p.get("offline_replicas") or ()), ErrorCode.of(p.error_code))
                 for p in t.partitions})
        self.topics, self.topic_errors = topics, errors
        self.updated_at = now
        self.listed_all = requested is None

    # -- lookups -----------------------------------------------------------------------

    def is_stale(self, now: float, max_age_ms: int) -> bool:
        return self.updated_at is None or now >= self.updated_at + max_age_ms / 1000

    def exists(self, topic: str) -> bool | None:
        """Whether the topic exists as far as the cache knows: True when it is listed;
        False when the broker said UNKNOWN_TOPIC_OR_PARTITION for it, or listed every topic
        without it (a deleted topic); None when the cache has no answer about it (not
        asked yet, or another error such as LEADER_NOT_AVAILABLE)."""
        if topic in self.topics:
            return True
        error = self.topic_errors.get(topic)
        if error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or (error is None and self.listed_all):
            return False
        return None

    def partitions_for(self, topic: str) -> list[int] | None:
        """Partition numbers of a known topic, ascending; None if the topic is unknown."""
        t = self.topics.get(topic)
        return None if t is None else sorted(t.partitions)

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)

    def leader_for(self, topic: str, partition: int) -> int | None:
        p = self.partition(topic, partition)
        return None if p is None else p.leader

    def topic_id(self, topic: str) -> uuid.UUID | None:
        t = self.topics.get(topic)
        return None if t is None else t.topic_id

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return next((t.name for t in self.topics.values() if t.topic_id == topic_id), None)

    def node(self, node_id: int) -> Node | None:
        return self.brokers.get(node_id)


def metadata_request(version: int, topics: list[str] | None,
                     allow_auto_topic_creation: bool) -> dict:
    """A Metadata request body for `topics` (None: every topic)."""
    wire: list[dict] | None
    if topics is None:
        wire = [] if version == 0 else None  # v0: an empty list means every topic
    else:
        wire = [{"name": n} for n in topics]
    return {"topics": wire, "allow_auto_topic_creation": allow_auto_topic_creation,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}


class Cluster:
    """The metadata cache kept current over a ConnectionPool.

        async with ConnectionPool(config) as pool:
            cluster = Cluster(pool, config)            # every topic (topics=None)
            await cluster.refresh()                     # bootstrap
            cluster.metadata.leader_for("orders", 0)
            cluster.note_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)   # -> refresh soon
            await cluster.maybe_refresh()

    `topics` None tracks every topic in the cluster; a set tracks only those (add more with
    `add_topics`), as a producer or a consumer does.
    """

    def __init__(self, pool: ConnectionPool, config: ClientConfig | None = None, *,
                 topics: Iterable[str] | None = None,
                 allow_auto_topic_creation: bool = False):
        self.pool = pool
        self.config = config if config is not None else pool.config
        self.metadata = ClusterMetadata()
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.generation = 0  # successful refreshes so far
        self._topics: set[str] | None = None if topics is None else set(topics)
        self._lock = trio.Lock()
        self._started = 0  # refreshes begun, numbered from 1
        self._done_started = 0  # the number of the last refresh that completed
        self._update_requested = False
        self._last_refresh_at: float | None = None  # when the last refresh ended, ok or not
        self.last_error: KafkaError | None = None  # why the last refresh failed; None if ok
        self._wakeup = trio.Event()  # set when an update is requested (for `run`)
        self._refreshed = trio.Event()  # set (and replaced) after every refresh

    # -- what to track -----------------------------------------------------------------

    @property
    def tracked_topics(self) -> set[str] | None:
        return None if self._topics is None else set(self._topics)

    def add_topics(self, topics: Iterable[str]) -> None:
        """Track more topics; an update is requested if any is new."""
        if self._topics is None:
            return
        new = set(topics) - self._topics
        if new:
            self._topics |= new
            self.request_update()

    def track_all_topics(self) -> None:
        """Track every topic in the cluster from now on (a pattern subscription)."""
        if self._topics is not None:
            self._topics = None
            self.request_update()

    # -- when to refresh ---------------------------------------------------------------

    def request_update(self) -> None:
        self._update_requested = True
        self._wakeup.set()

    def note_error(self, code: int | ErrorCode) -> bool:
        """Request an update if the error code says the cache may be wrong; returns
        whether it did."""
        if ErrorCode.of(int(code)).refresh_metadata:
            self.request_update()
            return True
        return False

    def refresh_due_at(self) -> float:
        """When the next refresh is due, on the trio clock (Java's
        Metadata.timeToNextUpdate): at once when an update was requested (or nothing is
        cached yet), else when the cache reaches metadata_max_age_ms; either way no sooner
        than retry_backoff_ms after the last refresh ended, so that an error repeated on
        every fetch (the partitions of a deleted topic) asks for one Metadata per backoff,
        not one per fetch."""
        updated = self.metadata.updated_at
        if self._update_requested or updated is None:
            due = -math.inf
        else:
            due = updated + self.config.metadata_max_age_ms / 1000
        if self._last_refresh_at is not None:
            due = max(due, self._last_refresh_at + self.config.retry_backoff_ms / 1000)
        return due

    @property
    def needs_refresh(self) -> bool:
        return trio.current_time() >= self.refresh_due_at()

    async def maybe_refresh(self) -> ClusterMetadata:
        """Refresh if an update was requested or the cache is older than its max age."""
        if self.needs_refresh:
            await self.refresh()
        return self.metadata

    async def wait_for_refresh(self, after_generation: int) -> None:
        """Return once a refresh beyond `after_generation` has completed."""
        while self.generation <= after_generation:
            await self._refreshed.wait()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Background refresher: refreshes when asked to (note_error, request_update,
        add_topics) and whenever the cache reaches metadata_max_age_ms. A failed refresh
        is retried after retry_backoff_ms (doubling up to retry_backoff_max_ms)."""
        task_status.started()
        failures = 0
        while True:
            due = self.refresh_due_at()
            if trio.current_time() < due:
                # an update requested meanwhile moves the time due: look again
                with trio.move_on_at(due):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
                continue
            self._wakeup = trio.Event()
            try:
                await self.refresh()
            except KafkaError as e:
                if not e.retriable:
                    raise
                await trio.sleep(self.config.retry_backoff_s(failures))
                failures += 1
            else:
                failures = 0

    # -- refreshing --------------------------------------------------------------------

    async def refresh(self, topics: Iterable[str] | None = None) -> ClusterMetadata:
        """Send Metadata for the tracked topics (or exactly `topics`, which are not then
        tracked) and update the cache. Retries on another connection after a connection
        failure or timeout; raises the last error (KafkaConnectionError,
        NoBrokersAvailable, KafkaTimeoutError) when every attempt failed."""
        names = None if topics is None else sorted(set(topics))
        ticket = self._started
        async with self._lock:
            if names is None and self._done_started > ticket:
                return self.metadata  # a refresh that began after our call has finished
            self._started += 1
            number = self._started
            requested = names if names is not None else (
                None if self._topics is None else sorted(self._topics))
            if names is None:
                self._update_requested = False
            try:
                body = await self._fetch(requested)
            except BaseException as e:
                if names is None:
                    self._update_requested = True
                if isinstance(e, KafkaError):
                    self.last_error = e
                raise
            finally:
                self._last_refresh_at = trio.current_time()
            self.last_error = None
            self.metadata.update(body, trio.current_time(), requested)
            self.pool.update_nodes({n.node_id: n.address
                                    for n in self.metadata.brokers.values()})
            self._done_started = number
            self.generation += 1
            self._refreshed.set()
            self._refreshed = trio.Event()
            return self.metadata

    async def _fetch(self, requested: list[str] | None) -> Any:
        attempts = max(2, len(self.pool.nodes) + len(self.config.bootstrap_servers))
        last: KafkaError | None = None
        for attempt in range(attempts):
            if attempt:
                await trio.sleep(self.config.retry_backoff_s(attempt - 1))
            conn = await self.pool.least_loaded()
            version = conn.version_for(METADATA)
            try:
                resp = await conn.request(METADATA, metadata_request(
                    version, requested, self.allow_auto_topic_creation), version)
            except KafkaTimeoutError as e:
                last = e
                await conn.close()  # a broker that does not answer Metadata is not used
            except KafkaConnectionError as e:
                last = e
            else:
                return resp.body
        assert last is not None
        raise last


GROUP_KEY = 0  # FindCoordinator key types
TRANSACTION_KEY = 1


async def find_group_coordinator(pool, group_id: str):
    """FindCoordinator for a group (key type 0) on the least-loaded node (Java's lookupCoordinator);
    returns (node id, connection to it). Errors come back typed (client.errors)."""
    return await find_coordinator(pool, group_id, GROUP_KEY)


async def find_coordinator(pool, key: str, key_type: int):
    """FindCoordinator for a group (key type 0) or a transactional id (1) on the
    least-loaded node; returns (node id, connection to it). Errors come back typed."""
    kind = "group" if key_type == GROUP_KEY else "transactional id"
    conn = await pool.least_loaded()
    version = conn.version_for(FIND_COORDINATOR)
    resp = await conn.request(FIND_COORDINATOR, {
        "key": key, "key_type": key_type, "coordinator_keys": [key]}, version)
    body = resp.body
    if version >= 4:  # the batched form
        c = next((c for c in body.coordinators if c.key == key), None)
        if c is None:
            raise for_code(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           f"FindCoordinator named no coordinator for {kind} '{key}'")
        code, node_id, host, port = c.error_code, c.node_id, c.host, c.port
        message = c.get("error_message")
    else:
        code, node_id, host, port = body.error_code, body.node_id, body.host, body.port
        message = body.get("error_message")
    if code != ErrorCode.NONE:
        raise for_code(code, message or f"FindCoordinator for {kind} '{key}'")
    if node_id not in pool.nodes:
        pool.update_nodes({**pool.nodes, node_id: (host, port)})
    return node_id, await pool.get(node_id)
