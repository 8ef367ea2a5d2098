"""The active controller: admin and broker-lifecycle requests in, metadata records out.

Owns `QuorumController`, the facade after Kafka's `QuorumController`, and
`ControllerSettings`. It routes each request to the control manager that answers it and
owns what they share: the metadata image being built, the settings (from which it builds
the managers, each with the ones it reads), time (`tick` at `next_deadline`: stale broker
sessions fenced, the automatic preferred-leader rebalance when due) and activation. The
managers, each a module of its own:
- `cluster_control.ClusterControlManager` (with its `BrokerHeartbeatManager`): broker
  registration, heartbeats, fencing, controlled shutdown, UnregisterBroker;
- `replication_control.ReplicationControlManager`: topics and partitions, leaders and
  ISRs (CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders, AlterPartition), and
  what a broker's changes of state do to its partitions;
- `config_control` (ConfigurationControlManager): IncrementalAlterConfigs;
- `scram_control` (ScramControlManager), `acl_control` (AclControlManager),
  `quota_control` (ClientQuotaControlManager), `producer_id_control`
  (ProducerIdControlManager);
- `delegation_token_control` (DelegationTokenControlManager): CreateDelegationToken,
  RenewDelegationToken, ExpireDelegationToken, which act for the forwarding client's
  principal, and the periodic removal of expired tokens;
- `features` (FeatureControlManager): UpdateFeatures, and the levels a new cluster
  finalizes;
- `activation` (ActivationRecordsGenerator): the bootstrap and migration records.

Every request becomes a `ControllerResult` (controller_result.py): the metadata records to
append as ONE Raft entry, and the response to send once that entry commits (at once when
there are no records). Nothing here or in the managers does I/O or reads a clock: `now_ms`
is an argument, randomness (topic ids, placement's start index, ACL ids) comes from the
injected `random.Random`.

The image. `image` is the metadata image including every record this controller has
produced, committed or not, as in Kafka, where the active controller replays its own
records as soon as it appends them. An operation never changes `image` itself: the caller
appends a result's records and then hands them back through `replay` (decoded, as a
follower would read them) before the next call, so that the active controller and every
standby build their image by the one code path (`MetadataImage.apply`). Within one
operation the records are built on a scratch image (`controller_result.Batch`), so that,
say, fencing a broker and then electing leaders sees the fence.

Controller memory that is not in the log: the broker sessions (ClusterControlManager's)
and when the next automatic leader rebalance is due (here). `reset` forgets both, and
`activate` starts them afresh.

Error codes and messages follow Kafka's; the admin request bodies are the construct
Containers of protocol/messages, the responses plain dicts with the response
declarations' field names, so the runtime encodes them at the request's version.
"""

from __future__ import annotations

import base64
import random
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from broker.controller import (
    acl_control, activation, config_control, delegation_token_control, features,
    producer_id_control, quota_control, scram_control,
)
from broker.controller.activation import LegacySource
from broker.controller.cluster_control import ClusterControlManager
from broker.controller.controller_result import Batch, ControllerResult, Record
from broker.controller.image import MetadataImage
from broker.controller.replication_control import ReplicationControlManager
from protocol.metadata_records import MetadataRecordType as T

NO_DEADLINE = 2**63 - 1
NO_OP: Record = (T.NO_OP_RECORD, 0, {})


@dataclass(frozen=True)
class ControllerSettings:
    """The controller's configuration, with Kafka's property defaults."""

    node_id: int
    voters: tuple[int, ...]
    default_num_partitions: int = 1
    default_replication_factor: int = 1
    offsets_topic_replication_factor: int = 3
    transaction_state_replication_factor: int = 3  # transaction.state.log.replication.factor
    # share.coordinator.state.topic.replication.factor
    share_state_replication_factor: int = 3
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    heartbeat_interval_ms: int = 2000
    unclean_leader_election_enable: bool = False
    # the brokers' min.insync.replicas, for a topic that sets none (KIP-966's ELR)
    min_insync_replicas: int = 1
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300000
    leader_imbalance_per_broker_percentage: int = 10
    producer_id_block_size: int = 1000
    max_partitions_per_request: int = 10000
    delete_topic_enable: bool = True
    # metadata.max.idle.interval.ms (KIP-835): 0 writes no NoOpRecords
    max_idle_interval_ms: int = 500
    # delegation tokens (KIP-48): no secret key, no tokens
    delegation_token_secret_key: str | None = None
    delegation_token_max_lifetime_ms: int = 604800000
    delegation_token_expiry_time_ms: int = 86400000
    delegation_token_expiry_check_interval_ms: int = 3600000


class QuorumController:
    """The active controller's state machine (see the module docstring)."""

    def __init__(self, settings: ControllerSettings, rng: random.Random,
                 image: MetadataImage = MetadataImage.EMPTY,
                 wall_clock_ms: Callable[[], int] | None = None) -> None:
        self.settings = settings
        self.rng = rng
        self.image = image
        # delegation tokens carry dates (epoch ms) that every node and client compares with
        # its own wall clock, where `now_ms` is the runtime's monotonic clock; injected, so
        # that a test or the simulation decides it (None: now_ms is the wall clock)
        self.wall_clock_ms = wall_clock_ms
        self.replication = ReplicationControlManager(
            rng, default_num_partitions=settings.default_num_partitions,
            default_replication_factor=settings.default_replication_factor,
            offsets_topic_replication_factor=min(settings.offsets_topic_replication_factor,
                                                 len(settings.voters)),
            transaction_state_replication_factor=min(
                settings.transaction_state_replication_factor, len(settings.voters)),
            share_state_replication_factor=min(
                settings.share_state_replication_factor, len(settings.voters)),
            max_partitions_per_request=settings.max_partitions_per_request,
            delete_topic_enable=settings.delete_topic_enable,
            unclean_leader_election_enable=settings.unclean_leader_election_enable,
            leader_imbalance_per_broker_percentage=(
                settings.leader_imbalance_per_broker_percentage),
            min_insync_replicas=settings.min_insync_replicas)
        self.cluster = ClusterControlManager(settings.session_timeout_ms, self.replication)
        self._next_rebalance_ms: int | None = None
        self._next_no_op_ms: int | None = None
        self._next_token_sweep_ms: int | None = None

    # --- the log --------------------------------------------------------------------

    def replay(self, records: Iterable[tuple[int, int, Any]]) -> None:
        """Apply decoded records: this controller's own, after it appended them, or a
        standby's view of the log."""
        self.image = self.image.replay(records)

    def reset(self, image: MetadataImage) -> None:
        """Leadership lost or the image rebuilt (a snapshot loaded): start from `image`,
        forgetting sessions, which only the active controller keeps."""
        self.image = image
        self.cluster.heartbeats.reset()
        self._next_rebalance_ms = None
        self._next_no_op_ms = None
        self._next_token_sweep_ms = None

    def activate(self, now_ms: int,
                 legacy: LegacySource | None = None) -> ControllerResult | None:
        """This node became the active controller: fresh sessions for every registered
        broker, and the bootstrap records a new cluster (or a migrated data dir) needs."""
        s = self.settings
        self.cluster.heartbeats.reset(self.image.brokers, now_ms)
        self._next_rebalance_ms = (now_ms + s.leader_imbalance_check_interval_ms
                                   if s.auto_leader_rebalance_enable else None)
        self._next_no_op_ms = (now_ms + s.max_idle_interval_ms
                               if s.max_idle_interval_ms > 0 else None)
        self._next_token_sweep_ms = (now_ms + s.delegation_token_expiry_check_interval_ms
                                     if s.delegation_token_secret_key else None)
        records = activation.activation_records(self.image, s.node_id, legacy)
        return self._records_result(records, None) if records else None

    # --- brokers (broker.controller.cluster_control) -----------------------------------

    def register_broker(self, body: Any, now_ms: int, offset: int, *,
                        own_broker: bool = False) -> ControllerResult:
        """BrokerRegistration; `offset`, the Raft offset of this entry, is the new epoch;
        `own_broker` when the broker of this controller's own process registers."""
        return self.cluster.register_broker(self.image, body, now_ms, offset,
                                            own_broker=own_broker)

    def broker_heartbeat(self, body: Any, now_ms: int,
                         offset: int | None = None) -> ControllerResult:
        """BrokerHeartbeat; `offset`, when given, is the Raft offset this heartbeat's entry
        would get, from which a controlled shutdown it begins waits for the other brokers."""
        return self.cluster.broker_heartbeat(self.image, body, now_ms, offset)

    def unregister_broker(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.cluster.unregister_broker(self.image, body)

    # --- time -----------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[ControllerResult]:
        """Fence brokers whose session expired (one result each), when due run the
        automatic preferred leader rebalance, and every metadata.max.idle.interval.ms
        write a NoOpRecord.

        The NoOpRecord is Kafka's (KIP-835, QuorumController's writeNoOpRecord task): the
        metadata log advances even while nothing changes, so that a broker or standby can
        tell from its last applied offset's age that it is behind, and a voter cut off
        for more than the interval holds a log older than the quorum's, which the vote's
        log comparison then sees. Written whatever else was written meanwhile, as Kafka's
        periodic task does."""
        results, image = self.cluster.fence_stale_brokers(self.image, now_ms)
        if self._next_rebalance_ms is not None and now_ms >= self._next_rebalance_ms:
            self._next_rebalance_ms = now_ms + self.settings.leader_imbalance_check_interval_ms
            batch = Batch(image)
            self.replication.balance_partition_leaders(batch)
            if batch.records:
                results.append(batch.result(None))
        if self._next_token_sweep_ms is not None and now_ms >= self._next_token_sweep_ms:
            self._next_token_sweep_ms = (now_ms
                                         + self.settings.delegation_token_expiry_check_interval_ms)
            swept = delegation_token_control.sweep_expired(image, self._wall(now_ms))
            if swept:
                results.append(self._records_result(swept, None))
        if self._next_no_op_ms is not None and now_ms >= self._next_no_op_ms:
            self._next_no_op_ms = now_ms + self.settings.max_idle_interval_ms
            results.append(ControllerResult((NO_OP,), None))
        return results

    def next_deadline(self) -> int:
        """When `tick` next has something to do (NO_DEADLINE when nothing is pending)."""
        deadlines = self.cluster.heartbeats.deadlines(self.image)
        if self._next_rebalance_ms is not None:
            deadlines.append(self._next_rebalance_ms)
        if self._next_no_op_ms is not None:
            deadlines.append(self._next_no_op_ms)
        if self._next_token_sweep_ms is not None:
            deadlines.append(self._next_token_sweep_ms)
        return min(deadlines, default=NO_DEADLINE)

    # --- topics and partitions (broker.controller.replication_control) -----------------

    def create_topics(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.create_topics(self.image, body)

    def delete_topics(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.delete_topics(self.image, body)

    def create_partitions(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.create_partitions(self.image, body)

    def elect_leaders(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.elect_leaders(self.image, body)

    def alter_partition_reassignments(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.alter_partition_reassignments(self.image, body)

    def alter_partition(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.alter_partition(self.image, body)

    def assign_replicas_to_dirs(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self.replication.assign_replicas_to_dirs(self.image, body)

    # --- configs (broker.controller.config_control) ----------------------------------

    def incremental_alter_configs(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return config_control.incremental_alter_configs(
            self.image, body, self.replication.topic_configs_altered)

    # --- producer ids (broker.controller.producer_id_control) -------------------------

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ControllerResult:
        return self._records_result(*producer_id_control.allocate_producer_ids(
            self.image, broker_id, broker_epoch, self.settings.producer_id_block_size))

    # --- SCRAM credentials (broker.controller.scram_control) ---------------------------

    def alter_user_scram_credentials(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self._records_result(
            *scram_control.alter_user_scram_credentials(self.image, body))

    # --- client quotas (broker.controller.quota_control) ------------------------------

    def alter_client_quotas(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self._records_result(*quota_control.alter_client_quotas(self.image, body))

    # --- delegation tokens (broker.controller.delegation_token_control) -----------------

    def create_delegation_token(self, body: Any, principal: str,
                                now_ms: int) -> ControllerResult:
        return self._records_result(*delegation_token_control.create(
            self.image, body, principal, self._wall(now_ms), self.settings,
            self._new_token_id))

    def renew_delegation_token(self, body: Any, principal: str,
                               now_ms: int) -> ControllerResult:
        return self._records_result(*delegation_token_control.renew(
            self.image, body, principal, self._wall(now_ms), self.settings))

    def expire_delegation_token(self, body: Any, principal: str,
                                now_ms: int) -> ControllerResult:
        return self._records_result(*delegation_token_control.expire(
            self.image, body, principal, self._wall(now_ms), self.settings))

    def _wall(self, now_ms: int) -> int:
        return now_ms if self.wall_clock_ms is None else self.wall_clock_ms()

    def _new_token_id(self) -> str:
        """Kafka's Uuid.randomUuid().toString(): 16 random bytes, URL-safe base64."""
        raw = uuid.UUID(int=self.rng.getrandbits(128), version=4).bytes
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    # --- feature levels (broker.controller.features) ------------------------------------

    def update_features(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self._records_result(
            *features.update_features(self.image, body, self.settings.node_id))

    # --- ACLs (the records and answers are broker.controller.acl_control's) ------------

    def create_acls(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self._records_result(*acl_control.create_acls(
            self.image, body, lambda: uuid.UUID(int=self.rng.getrandbits(128), version=4)))

    def delete_acls(self, body: Any, now_ms: int) -> ControllerResult:
        del now_ms
        return self._records_result(*acl_control.delete_acls(self.image, body))

    def _records_result(self, records: list[Record], response: Any) -> ControllerResult:
        """A stateless manager's records and answer, checked on a scratch image as every
        operation's are."""
        batch = Batch(self.image)
        batch.extend(records)
        return batch.result(response)
