"""The broker's state, shared by every handler: config, metadata, partitions, events.

Owns: `Broker`, which opens the data directory (log recovery, then the metadata quorum's
log), publishes each committed metadata entry to the local replicas (`apply_metadata`:
partition logs made for the replicas this broker holds, deleted with their topic, and
leaderships taken or given up, which also moves group coordination), reserves producer ids
from the controller, and wakes long-polling fetches when data arrives. Topics are never
made here directly: every change goes through the active controller and comes back as a
committed record. It does no socket I/O (broker.server does) and reads the wall clock only
through `now_ms`, which tests can replace.

The metadata cache takes every committed entry from the start (the restart's replay
included, which the heartbeats report); the replicas take none until this process has
registered and applied its metadata past its registration (BrokerLifecycle's initial
catch-up). Then the whole image is published to them as one delta
(`_publish_first_image`, Kafka's first publish of BrokerMetadataPublisher), stray logs
are deleted, the broker says it is ready to unfence, and from then on each entry is
published as it commits. So a restarted node never leads at its previous incarnation's
leader epochs, which its own metadata log names until the controller fences them.

New partitions' logs are made off the event loop once the broker runs (`_log_maker`):
directories, first segments and ``partition.metadata`` in a worker thread, a batch at a time,
made durable together (`LogManager.sync_new_logs`), so creating thousands of partitions
never holds up the requests being served. Until its log is made a partition is "being
created" (`creating`): it has no `Partition` yet, so it neither leads nor follows, and a
request naming it is answered NOT_LEADER_OR_FOLLOWER (Kafka's answer for a partition in the
metadata whose log this broker has not made: the client refreshes its metadata and tries
again). Its leadership is taken from the image current when the log is adopted.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, Callable, Iterable, Mapping, TypeVar

import trio

from broker import timeouts
from broker import blocking
from broker.config import BrokerConfig, ConfigError, topic_log_config, validate_topic_configs
from broker.controller.image import TOPIC_RESOURCE, MetadataImage, TopicImage
from broker.controller.runtime import QuorumRuntime
from broker.controller.transport import PeerTransport
from broker.controller.wiring import build_quorum
from broker.controller_channel import ControllerChannel, ControllerUnavailable
from broker.events import EventLog
from broker.fetch_session import FetchSessionCache
from broker.lifecycle import BrokerLifecycle
from broker.listeners import Endpoint, NodeAddresses, format_voters
from broker.log.config import LogConfig
from broker.log.errors import KafkaStorageError
from broker.log.log import PartitionLog
from broker.log.dirs import LogDirs
from broker.log.manager import read_partition_metadata
from broker.log_dirs import LogDir, LogDirFailureChannel
from broker.metrics import BrokerMetrics, figures
from broker.telemetry import ClientTelemetry
from broker.metadata import (LEGACY_FILE, LegacyMetadata, cluster_id_for_voters,
                             load_cluster_id, load_log_dir_ids)
from broker.metadata_cache import MetadataCache
from broker.quotas import BrokerQuotas
from broker.partition import Partition
from broker.storage import REAL, FileSystem
from broker.replication.leader_epochs import LeaderEpochCache, new_log_cache, open_cache
from broker.replication.alter_log_dirs import ReplicaAlterLogDirs
from broker.replication.directory_assignments import DirectoryAssignments
from broker.replication.manager import ReplicaManager
from broker.replication.quota import ReplicationQuotas
from broker.security.authorize import authorizer_for
from broker.security.authenticator import ListenerSecurity
from broker.security.peer import Opener, node_opener
from protocol.messages import ALLOCATE_PRODUCER_IDS, request_body
from protocol.metadata_records import MetadataRecordType as T

_TOPIC_RECORDS = frozenset({T.TOPIC_RECORD, T.PARTITION_RECORD, T.PARTITION_CHANGE_RECORD,
                            T.REMOVE_TOPIC_RECORD})

VERSION = "0.1.0"
# new partitions' logs made per worker-thread call (their fsyncs go together), and adopted
# per turn of the event loop (a Partition, its leadership and first epoch checkpoint each:
# about a millisecond apiece on a busy machine, so that no request waits behind many)
LOG_BATCH = 100
ADOPT_SLICE = 20

log = logging.getLogger("minibroker.broker")
K = TypeVar("K")


def _vanished(old: Mapping[K, Any], new: Mapping[K, Any]) -> list[K]:
    """The keys of `old` that `new` lacks; nothing to compare when the mapping is the same
    one (a record that did not touch it)."""
    if old is new or len(old) == 0:
        return []
    return [key for key in old if key not in new]


class Broker:
    def __init__(self, config: BrokerConfig, clock: Callable[[], float] = time.time,
                 dial: Opener | None = None, fs: FileSystem = REAL):
        """`clock`: the wall clock in seconds; `dial`: how connections to the other nodes
        are opened (TCP when None); `fs`: the disk. The simulation (sim/) gives its own."""
        self.config = config
        # every byte this broker keeps goes through `fs` (broker/storage): the real disk,
        # or a simulated one of its own in a deterministic test
        self.fs = fs
        self.node_id: int = config.broker_id
        self.addresses = NodeAddresses.resolve(config)
        client = self.addresses.client or self.addresses.controller
        assert client is not None
        self.listener: Endpoint = client
        self.advertised: Endpoint = (self.addresses.advertised[0] if self.addresses.advertised
                                     else client)
        self.listener_name = client.name
        # each listener's TLS context and SASL settings, and how this node reaches the
        # other nodes' listeners: built now, so a bad security property stops the start
        self.listener_security = {e.name: ListenerSecurity.build(config, e) for e in (
            *self.addresses.clients,
            *([self.addresses.controller] if self.addresses.controller else []))}
        self.inter_broker_opener = node_opener(
            config, self.addresses, self.addresses.inter_broker,
            "sasl.mechanism.inter.broker.protocol", f"replica-fetcher-{self.node_id}", dial)
        self.controller_opener = None if self.addresses.single_node else node_opener(
            config, self.addresses, self.addresses.controller_listener_name,
            "sasl.mechanism.controller.protocol", f"minibroker-{self.node_id}", dial)
        # log.dirs, in order; the first also holds the metadata log, the event log and the
        # cluster id the others must share (Kafka's metadata.log.dir default)
        self.data_dirs = config.data_dirs
        self.data_dir = self.data_dirs[0]
        self._clock = clock
        self.events = EventLog(self.data_dir, self.node_id,
                               segment_bytes=config.events_segment_bytes,
                               retention_files=config.events_retention_files, clock=clock,
                               fs=fs)
        # a dynamic quorum's nodes share their bootstrap servers, a joining controller has
        # no voters to name
        derived = (None if self.addresses.single_node
                   else cluster_id_for_voters("bootstrap:" + ",".join(
                       f"{h}:{p}" for h, p in self.addresses.bootstrap))
                   if self.addresses.dynamic
                   else cluster_id_for_voters(format_voters(self.addresses.voters)))
        self.metadata_cache = MetadataCache(load_cluster_id(self.data_dir, self.node_id, derived,
                                                            fs=fs))
        # None without authorizer.class.name: every request is allowed, as before ACLs
        self.authorizer = authorizer_for(config)
        # client quotas' rates (the quotas themselves are the image's client_quotas)
        self.quotas = BrokerQuotas(config.quota_window_num,
                                   config.quota_window_size_seconds * 1000,
                                   config.controller_quota_window_num,
                                   config.controller_quota_window_size_seconds * 1000)
        self.log_dirs = LogDirFailureChannel(
            list(zip(self.data_dirs, load_log_dir_ids(self.data_dirs, self.node_id,
                                                      self.cluster_id, fs=fs))),
            can_fail_over=self._another_broker_can_lead)
        self.log_dirs.listeners.append(self._log_dir_failed)
        self.legacy = LegacyMetadata.load(self.data_dir, fs=fs)
        self.logs = LogDirs(self.data_dirs, on_event=self.events.emit,
                            recovery_threads=config.num_recovery_threads_per_data_dir, fs=fs,
                            is_offline=self.log_dirs.is_offline)
        # replicas of an offline log directory (Kafka's HostedPartition.Offline): not
        # served, not fetched, not made again elsewhere, until a restart
        self.offline_partitions: dict[tuple[str, int], Partition] = {}
        # one writer of the checkpoint files at a time: the periodic checkpoint and
        # DeleteRecords, which makes its new log start offsets durable before answering
        self.checkpoint_lock = trio.Lock()
        self.metrics = BrokerMetrics()
        self.telemetry = ClientTelemetry(config)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.log_dir_moves = ReplicaAlterLogDirs(self)
        self.dir_assignments = DirectoryAssignments(self)
        # partitions whose log is being made off the event loop (by topic id), and of those
        # the ones no worker has taken up yet; until `_log_maker` runs (a Broker that was
        # never started), logs are made inline as the metadata is applied
        self.creating: dict[tuple[str, int], uuid.UUID] = {}
        self._to_make: dict[tuple[str, int], uuid.UUID] = {}
        self._logs_wanted = trio.Event()
        self._log_maker_running = False
        # fetches long-polling each partition; an append wakes only its own partition's
        self._fetch_waiters: dict[tuple[str, int], set[_Waiter]] = {}
        # KIP-227's incremental fetch sessions, told of every partition that moves
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots,
                                                config.min_incremental_fetch_session_eviction_ms)
        self._metadata_changed = trio.Event()
        self.runtime: QuorumRuntime | None = None
        self.controller_channel = ControllerChannel(
            None, None, config.controller_quorum_request_timeout_ms / 1000 * 5)
        self.lifecycle = BrokerLifecycle(self.config, self.addresses, self.metadata_cache,
                                         self.controller_channel, self.log_dirs)
        # Kafka's firstPublishFuture: set once the replicas have had their first image
        self.first_publish = trio.Event()
        self.lifecycle.catch_up_listeners.append(self._publish_first_image)
        self._producer_ids: range = range(0)
        self._producer_ids_lock = trio.Lock()
        from broker.coordinator.group_runtime import GroupRuntime
        from broker.transaction.runtime import TransactionRuntime
        from broker.share.manager import SharePartitionManager
        from broker.share_coordinator.runtime import ShareCoordinatorRuntime
        self.groups = GroupRuntime(self)
        self.transactions = TransactionRuntime(self)
        self.share_coordinator = ShareCoordinatorRuntime(self)
        # internal topic -> the coordinator hosted on its partitions
        self.coordinators = {self.groups.topic: self.groups,
                             self.transactions.topic: self.transactions,
                             self.share_coordinator.topic: self.share_coordinator}
        # the share partitions this broker leads (KIP-932), and their share sessions
        self.shares = SharePartitionManager(self)
        self.replicas = ReplicaManager(self)
        # replication throttles (KIP-73), following the image's broker and topic configs
        self.replication_quotas = ReplicationQuotas(self.node_id, config.values)
        self._checkpointed_hws: dict[tuple[str, int], int] = {}
        self.started_ms = self.now_ms()
        self.clean_start = True

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    @property
    def cluster_id(self) -> str:
        return self.metadata_cache.cluster_id

    # -- life cycle -------------------------------------------------------------------------

    def open(self) -> None:
        started = time.monotonic()
        reports = self.logs.open(now_ms=self.now_ms())
        if reports:  # Kafka's "Loaded N logs in X ms": what recovery cost the start
            log.info("loaded %d partition logs in %.0f ms (%s shutdown, %d recovered)",
                     len(self.logs.partitions()), (time.monotonic() - started) * 1000,
                     "clean" if self.logs.had_clean_shutdown else "unclean", len(reports))
        self._checkpointed_hws = self.replicas.read_checkpoint()
        fresh = not self.logs.partitions()  # a new data directory has nothing to recover
        self.clean_start = fresh or not self.logs.recovered_uncleanly
        self.lifecycle.previous_broker_epoch = self.logs.clean_shutdown_broker_epoch
        for r in reports:
            self.events.emit("log_recovery", topic=r.topic, partition=r.partition,
                             truncated_bytes=r.truncated_bytes,
                             segments_recovered=r.segments_recovered,
                             log_end_offset=r.log_end_offset, duration_ms=r.duration_ms)
        self.runtime = build_quorum(self.config, self.addresses, self.legacy, self.events.emit,
                                    self.fs, self.now_ms)
        self.runtime.listeners.append(self.apply_metadata)
        self.runtime.leader_listeners.append(self._on_quorum_leader)
        self.controller_channel.runtime = self.runtime
        self.events.emit("broker_start", listener=f"{self.listener.host}:{self.listener.port}",
                         data_dir=str(self.data_dir), cluster_id=self.cluster_id,
                         clean_shutdown=self.clean_start, version=VERSION)
        self.events.flush()

    def close(self, reason: str = "shutdown") -> None:
        if self.runtime is not None:
            try:
                self.runtime.store.close()
            except OSError as e:
                log.error("could not close the metadata log (%s)", e)
        self.replicas.write_checkpoint()
        try:
            # the epoch goes into the clean-shutdown marker: the next registration names it
            self.logs.close(broker_epoch=self.lifecycle.broker_epoch)
        except OSError as e:
            log.error("could not flush the logs at shutdown (%s); the next start recovers "
                      "them as after a crash", e)
        self.emit_metrics()
        self.events.emit("broker_stop", reason=reason, uptime_ms=self.now_ms() - self.started_ms)
        self.events.close()

    async def start(self, nursery: trio.Nursery) -> None:
        """The background work of a node: the quorum (and, while it leads, the active
        controller), group coordination, and this broker's registration and heartbeats."""
        assert self.runtime is not None, "open() first"
        if not self.addresses.single_node:
            transport = PeerTransport(self.node_id, self.addresses.voters, self.cluster_id,
                                      nursery,
                                      self.config.controller_quorum_request_timeout_ms / 1000,
                                      opener=self.controller_opener,
                                      bootstrap=self.addresses.bootstrap,
                                      resolve=self._voter_address)
            self.runtime.transport = transport
            self.controller_channel.set_peers(transport.controller_peer)
        if self.addresses.is_broker:
            await nursery.start(self._log_maker)
        await nursery.start(self.log_dir_moves.run)
        if self.addresses.is_broker:
            await nursery.start(self.dir_assignments.run)
        await nursery.start(self.runtime.run)
        await nursery.start(self.groups.run)
        await nursery.start(self.transactions.run)
        await nursery.start(self.share_coordinator.run)
        await nursery.start(self.shares.run)
        if self.addresses.is_broker:
            await nursery.start(self.replicas.run)
            await nursery.start(self.lifecycle.run)

    async def stop_gracefully(self) -> None:
        """Controlled shutdown (leaderships moved first), then hand the quorum on."""
        others = [b for b in self.metadata_cache.brokers() if b.broker_id != self.node_id]
        # with no other live broker there is nowhere to move leaderships: taking them away
        # would only take every partition offline and back at each restart
        if self.addresses.is_broker and self.config.controlled_shutdown_enable and others:
            started = trio.current_time()
            confirmed = await self.lifecycle.shutdown()
            log.info("controlled shutdown %s in %.0f ms",
                     "confirmed" if confirmed else "not confirmed",
                     (trio.current_time() - started) * 1000)
        if self.runtime is not None:
            self.runtime.resign()

    # -- the metadata publisher -------------------------------------------------------------

    def _metadata_changed_now(self) -> None:
        """Wake every `wait_for_metadata` to look at the metadata again."""
        self._metadata_changed.set()
        self._metadata_changed = trio.Event()

    def _voter_address(self, node_id: int) -> tuple[str, int] | None:
        """Where a voter of a dynamic quorum serves controller traffic: its endpoint in the
        voter set the log holds (KIP-853)."""
        assert self.runtime is not None
        voter = self.runtime.node.voter_set.get(node_id)
        if voter is None or not voter.endpoints:
            return None
        name = self.addresses.controller_listener_name
        endpoint = next((e for e in voter.endpoints if e.name.upper() == name),
                        voter.endpoints[0])
        return endpoint.host, endpoint.port

    def _on_quorum_leader(self, leader: int, epoch: int) -> None:
        self.metadata_cache.controller_id = leader
        self._metadata_changed_now()

    def apply_metadata(self, offset: int, records: list, image: MetadataImage) -> None:
        """One committed metadata entry: the cache takes the new image, and the local
        replicas follow it (logs made or deleted, leaderships taken or given up) once
        their first image has been published (`_publish_first_image`); until then the
        entry may be the one that completes the initial catch-up, which publishes it."""
        old = self.metadata_cache.image
        self.metadata_cache.image = image
        self.metadata_cache.offset = offset
        self.replication_quotas.follow(image)
        # Topics and topic configs that vanished without a record saying so: a snapshot
        # installed from the leader replaces the image whole, and its records name only what
        # it holds. Diffed first, so that a topic deleted and created again under its name
        # is forgotten before the new one's partitions are opened.
        touched: dict[uuid.UUID, None] = dict.fromkeys(_vanished(old.topics_by_id,
                                                                 image.topics_by_id))
        config_topics: set[str] = {name for (kind, name) in _vanished(old.configs, image.configs)
                                   if kind == TOPIC_RESOURCE}
        # the cluster's events are written once, by the active controller's node, and not
        # again when a restarted node replays the log
        events = (self.runtime is not None and self.runtime.active
                  and not self.runtime.catching_up)
        for record_type, _version, body in records:
            if record_type in _TOPIC_RECORDS:
                touched[body.topic_id] = None
            elif record_type == T.CONFIG_RECORD and body.resource_type == TOPIC_RESOURCE:
                config_topics.add(body.resource_name)
            if events:
                self._controller_event(record_type, body, old, image)
        if self.legacy is not None and image.topics_by_id and self.legacy.topics:
            self._legacy_migrated()
        published = self.first_publish.is_set()
        for topic_id in touched:
            before, after = old.topic_by_id(topic_id), image.topic_by_id(topic_id)
            if events:
                self._topic_event(before, after)
            if published:
                self._sync_topic(before, after)
        if published:
            for name in config_topics:
                self._sync_configs(name)
        else:
            self.lifecycle.metadata_applied()  # perhaps past the registration: publishes
        self._metadata_changed_now()

    def _publish_first_image(self) -> None:
        """The replicas' first image (Kafka's BrokerMetadataPublisher's first publish): the
        whole image as one delta from the empty one, once this process has registered and
        applied its metadata past its registration (BrokerLifecycle's initial catch-up).

        Why not at the restart's catch-up: the log replayed may still name this broker's
        previous incarnation, unfenced, as leader of its partitions at their old leader
        epochs, until the controller fences that registration (its session expires, or
        the new registration finds it still active). Led then, with the HW of the
        checkpoint, they would sit beside the leaders the others elect meanwhile. By the
        new registration's entry the old leaderships have moved, or, where this broker was
        the last of the ISR, wait leaderless for its unfencing, which elects it at a new
        leader epoch. Stray logs are judged on this image too (Kafka's
        initializeManagers)."""
        image = self.metadata_cache.image
        log.info("broker %d publishing its first metadata image to its replicas at offset %d "
                 "(%d topics)", self.node_id, self.metadata_cache.offset,
                 len(image.topics_by_id))
        for topic in list(image.topics_by_id.values()):
            self._sync_topic(None, topic)
        self._delete_stray_logs(image)
        self.first_publish.set()
        self.lifecycle.set_ready_to_unfence()
        self._metadata_changed_now()

    def _legacy_migrated(self) -> None:
        assert self.legacy is not None
        try:
            self.legacy.mark_migrated()
        except OSError as e:
            log.error("could not rename the migrated %s (%s)", self.legacy.path, e)
        log.info("migrated %d topics from %s into the metadata log", len(self.legacy.topics),
                 LEGACY_FILE)
        self.legacy = None
        if self.runtime is not None:
            self.runtime.legacy = None

    def _controller_event(self, record_type: int, body: Any, old: MetadataImage,
                          new: MetadataImage) -> None:
        """The control plane's events (registration, fencing, leadership)."""
        if record_type == T.REGISTER_BROKER_RECORD:
            self.events.emit("broker_registered", broker_id=body.broker_id,
                             broker_epoch=body.broker_epoch, rack=body.get("rack"),
                             incarnation_id=str(body.incarnation_id))
        elif record_type == T.FENCE_BROKER_RECORD:
            self.events.emit("broker_fenced", broker_id=body.id, broker_epoch=body.epoch)
        elif record_type == T.UNFENCE_BROKER_RECORD:
            self.events.emit("broker_unfenced", broker_id=body.id, broker_epoch=body.epoch)
        elif record_type == T.UNREGISTER_BROKER_RECORD:
            self.events.emit("broker_unregistered", broker_id=body.broker_id,
                             broker_epoch=body.broker_epoch)
        elif record_type == T.PARTITION_CHANGE_RECORD:
            topic = new.topic_by_id(body.topic_id)
            before = old.topic_by_id(body.topic_id)
            if topic is None:
                return
            p = topic.partitions.get(body.partition_id)
            q = before.partitions.get(body.partition_id) if before else None
            if p is not None and (q is None or q.leader != p.leader):
                self.events.emit("leader_change", topic=topic.name,
                                 partition=body.partition_id, old_leader=q.leader if q else -1,
                                 new_leader=p.leader, leader_epoch=p.leader_epoch,
                                 reason="offline" if p.leader < 0 else "election")

    def _topic_event(self, old: TopicImage | None, new: TopicImage | None) -> None:
        if new is None:
            if old is not None:
                self.events.emit("topic_delete", topic=old.name, topic_id=str(old.topic_id))
        elif old is None:
            self.events.emit("topic_create", topic=new.name, topic_id=str(new.topic_id),
                             partitions=len(new.partitions),
                             replication_factor=max((len(p.replicas) for p in
                                                     new.partitions.values()), default=0),
                             configs=json.dumps(dict(self.metadata_cache.topic_configs(new.name))),
                             auto=False)
        elif len(new.partitions) > len(old.partitions):
            self.events.emit("partitions_create", topic=new.name, old_count=len(old.partitions),
                             new_count=len(new.partitions))

    def _sync_topic(self, old: TopicImage | None, new: TopicImage | None) -> None:
        if new is None:
            if old is not None:
                self._stop_making(old.name, None)
                self._forget_partitions(old.name, [i for (t, i) in self.partitions
                                                   if t == old.name])
            return
        gone = []
        # a replay shares the registrations no record changed: only the partitions a record
        # touched are followed again, so one partition's move in a topic of thousands costs
        # one partition's work on every broker, not the topic's
        unchanged = old.partitions if old is not None else {}
        for index, registration in new.partitions.items():
            key = (new.name, index)
            local = self.partitions.get(key)
            if key in self.offline_partitions:
                if self.node_id not in registration.replicas:
                    gone.append(index)
                continue  # its directory failed: nothing until a restart
            if (local is not None and unchanged.get(index) is registration
                    and self.node_id in registration.replicas):
                continue
            if self.node_id not in registration.replicas:
                if local is not None:
                    gone.append(index)
                self._stop_making(new.name, index)
                continue
            if local is None:
                if key in self.creating:  # its leadership is read when the log is adopted
                    self.creating[key] = new.topic_id
                    if key in self._to_make:
                        self._to_make[key] = new.topic_id
                    continue
                if self._log_maker_running and self.logs.get(new.name, index) is None:
                    self.creating[key] = self._to_make[key] = new.topic_id
                    self._logs_wanted.set()
                    continue
                try:
                    local = self._open_partition(new, index)
                except OSError as e:
                    log.error("cannot open the log of %s-%d (%s); it is unavailable here",
                              new.name, index, e)
                    continue
            self._follow(new.name, local, registration, fresh=old is None)
        if gone:
            self._forget_partitions(new.name, gone)

    def _follow(self, topic: str, local: Partition, registration: Any, fresh: bool) -> None:
        """A local replica takes the registration: leads, follows, or neither; waiters see
        a new leadership, and group coordination moves with `__consumer_offsets`."""
        was_leader, epoch, isr = local.is_leader, local.leader_epoch, local.isr
        self.replicas.apply_registration(local, registration, self.now_ms())
        self.dir_assignments.check(topic, local.index, registration)
        # A new ISR counts as a change too: a follower the controller dropped from it (its
        # broker fenced) is caught up on an idle partition, so its incremental fetches do
        # not name that partition again, and the leader would never look at its offset to
        # let it back in; marked, the partition is read at its next fetch and again at
        # each one after, until the follower is back in the ISR (fetch.py's rejoining).
        if local.is_leader != was_leader or local.leader_epoch != epoch or local.isr != isr:
            self.notify_data_arrived(topic, local.index)  # waiters see the new leadership
        coordinator = self.coordinators.get(topic)
        if coordinator is not None and (local.is_leader != was_leader
                                        or (local.is_leader and fresh)):
            coordinator.on_partition_leadership(local.index, local.is_leader)

    # -- new partitions' logs, made off the event loop ------------------------------------

    def serves(self, topics: Iterable[str]) -> bool:
        """No partition of these topics has its log still being made here."""
        names = set(topics)
        return not any(t in names for t, _ in self.creating)

    def _stop_making(self, topic: str, index: int | None) -> None:
        """A partition (every one of the topic's, with None) no longer wanted here: a log
        being made for it is discarded when it is done."""
        keys = ([k for k in self.creating if k[0] == topic] if index is None
                else [(topic, index)])
        for key in keys:
            self.creating.pop(key, None)
            self._to_make.pop(key, None)

    async def _log_maker(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Make the logs `_sync_topic` asked for, LOG_BATCH at a time, in a worker thread,
        and adopt each batch on the event loop."""
        self._log_maker_running = True
        task_status.started()
        while True:
            await self._logs_wanted.wait()
            self._logs_wanted = trio.Event()
            while self._to_make:
                batch = list(self._to_make.items())[:LOG_BATCH]
                for key, _ in batch:
                    del self._to_make[key]
                specs = [(t, i, self._topic_log_config(t), topic_id, self._leading_at(t, i))
                         for (t, i), topic_id in batch]
                made: list[tuple[PartitionLog, uuid.UUID, LeaderEpochCache]] = []
                failed: list[tuple[str, int, OSError]] = []
                try:
                    await blocking.run_disk(self.fs, self._make_logs, specs, made, failed)
                    # a cancel waits for the thread, then arrives at the next checkpoint
                    await trio.lowlevel.checkpoint_if_cancelled()
                    self._adopt_logs([], failed)
                    while made:
                        self._adopt_logs(made[:ADOPT_SLICE], [])
                        del made[:ADOPT_SLICE]
                        await trio.lowlevel.checkpoint()  # waiting requests go first
                except trio.Cancelled:  # shutting down: close() closes them with the rest
                    for plog, _, _ in made:
                        self.logs.adopt(plog)
                    raise

    def _leading_at(self, topic: str, index: int) -> int | None:
        """The leader epoch the image has this broker lead the partition at, or None."""
        registration = self.metadata_cache.partition(topic, index)
        return (registration.leader_epoch if registration is not None
                and registration.leader == self.node_id else None)

    def _make_logs(self, specs: list[tuple[str, int, LogConfig, uuid.UUID, int | None]],
                   made: list[tuple[PartitionLog, uuid.UUID, LeaderEpochCache]],
                   failed: list[tuple[str, int, OSError]]) -> None:
        """On a worker thread: make each log (with the first leader epoch it is to lead at
        in its epoch cache), then make them all durable at once. A log the file system
        refuses goes to `failed`; if the batch cannot be made durable, every log of it
        does."""
        batch: list[tuple[PartitionLog, uuid.UUID, LeaderEpochCache]] = []
        for topic, index, config, topic_id, leader_epoch in specs:
            try:
                plog = self.logs.make_log(topic, index, config, topic_id=topic_id)
            except OSError as e:
                failed.append((topic, index, e))
                continue
            try:
                batch.append((plog, topic_id,
                              new_log_cache(plog.directory, leader_epoch, fs=self.fs)))
            except OSError as e:
                self.logs.discard_new_log(plog)
                failed.append((topic, index, e))
        try:
            self.logs.sync_new_logs([plog for plog, _, _ in batch])
        except OSError as e:
            for plog, _, _ in batch:
                self.logs.discard_new_log(plog)
                failed.append((plog.topic, plog.partition, e))
            return
        made.extend(batch)

    def _adopt_logs(self, made: list[tuple[PartitionLog, uuid.UUID, LeaderEpochCache]],
                    failed: list[tuple[str, int, OSError]]) -> None:
        """Register the logs made and give each its replica's leadership from the image as
        it is now; a log whose partition is no longer ours (its topic deleted, or deleted
        and created again under another id, meanwhile) is deleted, and made again when the
        newer topic wants it here."""
        image = self.metadata_cache.image
        for plog, topic_id, epochs in made:
            key = (plog.topic, plog.partition)
            wanted = self.creating.pop(key, None)
            topic = image.topic(plog.topic)
            registration = topic.partitions.get(plog.partition) if topic else None
            if (wanted != topic_id or topic is None or topic.topic_id != topic_id
                    or registration is None or self.node_id not in registration.replicas):
                self.logs.discard_new_log(plog)
                if wanted is not None:
                    self.creating[key] = self._to_make[key] = wanted
                    self._logs_wanted.set()
                continue
            self.logs.adopt(plog)
            partition = self._partition(plog, epochs)
            self._follow(plog.topic, partition, registration, fresh=True)
        for topic_name, index, e in failed:
            self.creating.pop((topic_name, index), None)
            log.error("cannot make the log of %s-%d (%s); it is unavailable here",
                      topic_name, index, e)
        self._metadata_changed_now()  # a wait for `serves` looks again

    def _topic_log_config(self, name: str) -> LogConfig:
        try:
            overrides = validate_topic_configs(dict(self.metadata_cache.topic_configs(name)))
        except ConfigError as e:  # the controller validated it: a newer version's key
            log.warning("topic %s: ignoring configs this version does not know (%s)", name, e)
            overrides = {}
        return topic_log_config(self.config, overrides)

    def _sync_configs(self, name: str) -> None:
        config = self._topic_log_config(name)
        for (topic, index), partition in self.partitions.items():
            if topic == name and partition.set_config(config):
                self.notify_data_arrived(topic, index, high_watermark_only=True)

    def _delete_stray_logs(self, image: MetadataImage) -> None:
        """At the replicas' first image: delete the partition logs on disk that the
        image gives this broker no replica of -- a topic deleted, or a replica moved away,
        while this node was down or before it finished applying the change (Kafka's stray
        logs). Replaying the log entry by entry used to open and delete them on the way;
        a replay published as one delta never sees them. Not while a pre-cluster data
        directory waits for its topics to be migrated into the metadata log."""
        if self.legacy is not None:
            return
        for topic, index in self.logs.partitions():
            if (topic, index) in self.partitions or (topic, index) in self.creating:
                continue
            topic_image = image.topic(topic)
            registration = topic_image.partitions.get(index) if topic_image else None
            if registration is not None and self.node_id in registration.replicas:
                continue  # ours, but its log could not be opened: not stray
            log.warning("deleting the log of %s-%d: the metadata gives this broker no "
                        "replica of it (deleted or moved while the broker was down)",
                        topic, index)
            try:
                self.logs.delete_partition(topic, index)
            except OSError as e:
                log.error("could not delete the stray log of %s-%d (%s)", topic, index, e)

    def _open_partition(self, topic: TopicImage, index: int) -> Partition:
        config = self._topic_log_config(topic.name)
        existing = self.logs.get(topic.name, index)
        if existing is not None and self.legacy is None:
            recorded = read_partition_metadata(existing.directory, fs=self.fs)
            if recorded is not None and recorded != topic.topic_id:
                # an older topic of the same name, deleted while this broker was down: its
                # records must not become the new topic's
                log.warning("deleting the log of %s-%d: it belongs to topic id %s, the "
                            "metadata's topic of that name is %s", topic.name, index,
                            recorded, topic.topic_id)
                self.logs.delete_partition(topic.name, index)
        plog = self.logs.get_or_create(topic.name, index, config, topic_id=topic.topic_id)
        plog.config = config
        epochs = open_cache(plog.directory, lambda: (
            (h.partition_leader_epoch, h.base_offset)
            for segment in plog.segments for _pos, h in segment.headers()),
            log_start_offset=plog.log_start_offset, log_end_offset=plog.log_end_offset,
            fs=self.fs)
        return self._partition(plog, epochs)

    def _partition(self, plog: PartitionLog, epochs: Any) -> Partition:
        partition = Partition(plog.topic, plog.partition, plog, node_id=self.node_id,
                              epochs=epochs,
                              on_storage_failure=lambda reason: self.log_dirs.storage_failed(
                                  reason, partition.log.directory))
        partition.state.restore_high_watermark(
            self._checkpointed_hws.get((plog.topic, plog.partition), 0), plog.log_end_offset)
        # a move between log directories found at start resumes (alter_log_dirs.py)
        partition.future_log = self.logs.futures.get((plog.topic, plog.partition))
        self.partitions[(plog.topic, plog.partition)] = partition
        return partition

    def _forget_partitions(self, topic: str, indexes: list[int]) -> None:
        """Drop these partitions of a topic and delete their directories. Deletion is best
        effort: a directory the file system will not let go is named in the log."""
        for index in indexes:
            partition = self.partitions.pop((topic, index), None)
            if (topic, index) in self.offline_partitions:
                # its directory failed: the files stay until a restart deletes them as stray
                del self.offline_partitions[(topic, index)]
                self.notify_data_arrived(topic, index)
                continue
            self.replicas.forget(topic, index)
            if topic in self.coordinators and partition is not None and partition.is_leader:
                self.coordinators[topic].on_partition_leadership(index, False)
            try:
                self.logs.delete_partition(topic, index, background=True)
            except OSError as e:
                log.error("could not finish deleting %s-%d (%s); if its directory is still "
                          "there, remove it before creating the topic again", topic, index, e)
            self.notify_data_arrived(topic, index)  # fetches waiting on it answer at once

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def reopen_partition(self, topic: str, index: int) -> Partition | None:
        """A replica the image gives this broker whose log the file system refused to make
        (full disk, unwritable directory): try again, as a request for it arrives. None when
        this broker holds no such replica; KafkaStorageError while the disk still refuses."""
        image = self.metadata_cache.topic(topic)
        registration = image.partitions.get(index) if image is not None else None
        if (image is None or registration is None or self.node_id not in registration.replicas
                or not self.first_publish.is_set()):
            return None
        if (topic, index) in self.creating:
            return None  # a worker is making it: NOT_LEADER_OR_FOLLOWER until adopted
        try:
            partition = self._open_partition(image, index)
        except OSError as e:
            raise KafkaStorageError(f"cannot open the log of {topic}-{index}: {e}") from e
        self.replicas.apply_registration(partition, registration, self.now_ms())
        if topic in self.coordinators and partition.is_leader:
            self.coordinators[topic].on_partition_leadership(index, True)
        return partition

    async def wait_for_metadata(self, predicate: Callable[[MetadataCache], bool],
                                timeout_s: float) -> bool:
        """Until the applied metadata satisfies `predicate` (True) or the timeout (False)."""
        with timeouts.move_on_after(timeout_s):
            while not predicate(self.metadata_cache):
                await self._metadata_changed.wait()
            return True
        return predicate(self.metadata_cache)

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before in this cluster: from a block the
        controller reserved for this broker (AllocateProducerIds)."""
        async with self._producer_ids_lock:
            if not self._producer_ids:
                response = await self.controller_channel.forward(
                    ALLOCATE_PRODUCER_IDS, 0, request_body(ALLOCATE_PRODUCER_IDS, 0, {
                        "broker_id": self.node_id,
                        "broker_epoch": self.lifecycle.broker_epoch}))
                if response.get("error_code", 0) != 0:
                    raise ControllerUnavailable(
                        f"AllocateProducerIds answered error {response['error_code']}")
                start = response["producer_id_start"]
                self._producer_ids = range(start, start + response["producer_id_len"])
            pid = self._producer_ids[0]
            self._producer_ids = self._producer_ids[1:]
            return pid

    # -- data arrival, for long-polling fetches -------------------------------------------

    def notify_data_arrived(self, topic: str, partition: int,
                            high_watermark_only: bool = False) -> None:
        """Wake the fetches waiting on this partition, and only those; the fetch sessions
        holding it read it at their next fetch (its data, HW, log start or leadership
        moved: every change a fetch answer reports comes through here). A move of the HW
        alone does not wake followers' sessions (`FetchSessionCache.mark_changed`)."""
        for waiter in self._fetch_waiters.pop((topic, partition), ()):
            waiter.woken.add((topic, partition))
            waiter.event.set()
        self.fetch_sessions.mark_changed(topic, partition, high_watermark_only)

    async def wait_for_data(self, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """Return when any of these partitions has an append (the caller bounds the wait):
        the partitions that had one (empty when the caller's deadline came first)."""
        waiter = _Waiter()
        for tp in partitions:
            self._fetch_waiters.setdefault(tp, set()).add(waiter)
        try:
            await waiter.event.wait()
            return waiter.woken
        finally:
            for tp in partitions:
                waiters = self._fetch_waiters.get(tp)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._fetch_waiters[tp]

    # -- a failed log directory (broker/log_dirs.py) -----------------------------------------

    def _another_broker_can_lead(self) -> bool:
        return bool(self.metadata_cache.image.active_broker_ids() - {self.node_id})

    def _log_dir_failed(self, directory: LogDir, reason: str) -> None:
        """A log directory went offline (Kafka's ReplicaManager.handleLogDirFailure): its
        partitions stop being served, fetched and moved, coordinators hosted on them stop,
        and the fetches waiting on them answer now (KAFKA_STORAGE_ERROR) rather than at
        their max_wait. Partitions in other directories go on."""
        hosted = sorted(key for key, p in self.partitions.items()
                        if directory.holds(p.log.directory))
        self.events.emit("log_dir_failure", log_dir=directory.path,
                         directory_id=str(directory.directory_id), reason=reason,
                         replicas_held=[f"{t}-{i}" for t, i in hosted])
        for topic, index in hosted:
            partition = self.partitions.pop((topic, index))
            self.offline_partitions[(topic, index)] = partition
            self.replicas.forget(topic, index)
            self.log_dir_moves.cancel(topic, index)
            if topic in self.coordinators and partition.is_leader:
                self.coordinators[topic].on_partition_leadership(index, False)
            self.notify_data_arrived(topic, index)
        for key in list(self.logs.futures):  # moves into the failed directory
            future_dir = self.logs.future_dir(*key)
            if future_dir is not None and directory.holds(future_dir):
                self.log_dir_moves.cancel(*key)

    # -- housekeeping -----------------------------------------------------------------------

    def emit_metrics(self) -> None:
        """A `metrics` event: the figures the Prometheus endpoint serves (broker.metrics);
        and, sampled at the same times, the share partitions' `share_partition_state`
        events (broker.share.manager)."""
        try:
            values = figures(self)
        except Exception:  # noqa: BLE001  a bug of ours must not cost the shutdown's events
            log.exception("could not compute the metrics event")
        else:
            self.events.emit("metrics", **values)
        self.shares.emit_state()

    def apply_retention(self) -> None:
        for topic, index in self.logs.apply_retention(self.now_ms()):
            self.notify_data_arrived(topic, index)  # a new log start offset to report

    def clean_compacted(self) -> None:
        for topic, partition, r in self.logs.clean_compacted(self.now_ms()):
            self.events.emit("log_clean", topic=topic, partition=partition,
                             bytes_before=r.bytes_before, bytes_after=r.bytes_after,
                             records_removed=r.records_removed,
                             tombstones_removed=r.tombstones_removed, duration_ms=r.duration_ms)


class _Waiter:
    """One fetch (or produce) waiting on partitions, and which of them woke it."""
    __slots__ = ("event", "woken")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.woken: set[tuple[str, int]] = set()
