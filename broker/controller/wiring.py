"""Assembling one node's quorum from its configuration: the metadata log store, the Raft
node, the controller (on controller nodes) and the runtime that drives them.

Owns: `build_quorum`, `check_voters`, the refusal of a data directory whose quorum was
formed with other voters than the ones configured now, and `bootstrap_voter_set`, the
initial voter set of a dynamic quorum (controller.quorum.bootstrap.servers, KIP-853).
"""

from __future__ import annotations

import os
import random
from typing import Any, Callable

from broker.config import BrokerConfig, ConfigError
from broker.controller.metadata_log import METADATA_LOG_DIR, MetadataLogStore
from broker.controller.quorum_controller import ControllerSettings, QuorumController
from broker.controller.raft import QuorumConfig, RaftNode
from broker.controller.runtime import QuorumRuntime
from broker.controller.voter_set import Endpoint, Voter, VoterSet
from broker.listeners import NodeAddresses
from broker.storage import REAL, FileSystem


def check_voters(persisted: tuple[int, ...], configured: tuple[int, ...]) -> None:
    if persisted and tuple(sorted(persisted)) != tuple(sorted(configured)):
        raise ConfigError(
            f"controller.quorum.voters names voters {','.join(map(str, sorted(configured)))} "
            f"but this data directory's quorum has voters "
            f"{','.join(map(str, sorted(persisted)))}")


def bootstrap_voter_set(addresses: NodeAddresses) -> VoterSet:
    """The voters a dynamic quorum starts with: controller.quorum.voters's, each with its
    controller endpoint. Every initial node must build the same set (the first leader writes
    its own into the log), so none names a directory id: like voters that came from a static
    configuration in Kafka, theirs is the zero id, which RemoveRaftVoter then names."""
    return VoterSet.of(
        Voter(i, endpoints=(Endpoint(addresses.controller_listener_name, host, port),))
        for i, (host, port) in addresses.voters.items())


def controller_settings(c: BrokerConfig, addresses: NodeAddresses) -> ControllerSettings:
    # the voter count caps the internal topics' replication factor (a small cluster); a
    # controller that joins a dynamic quorum knows its bootstrap servers, not the voters
    voters = tuple(sorted(addresses.voters)) or tuple(range(len(addresses.bootstrap)))
    return ControllerSettings(
        node_id=addresses.node_id, voters=voters,
        default_num_partitions=c.num_partitions,
        default_replication_factor=c.default_replication_factor,
        offsets_topic_replication_factor=c.offsets_topic_replication_factor,
        transaction_state_replication_factor=c.transaction_state_log_replication_factor,
        share_state_replication_factor=c.share_coordinator_state_topic_replication_factor,
        session_timeout_ms=c.broker_session_timeout_ms,
        heartbeat_interval_ms=c.broker_heartbeat_interval_ms,
        unclean_leader_election_enable=c.unclean_leader_election_enable,
        min_insync_replicas=c.min_insync_replicas,
        auto_leader_rebalance_enable=c.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_ms=c.leader_imbalance_check_interval_seconds * 1000,
        leader_imbalance_per_broker_percentage=c.leader_imbalance_per_broker_percentage,
        max_idle_interval_ms=c.metadata_max_idle_interval_ms,
        delegation_token_secret_key=c.delegation_token_secret_key,
        delegation_token_max_lifetime_ms=c.delegation_token_max_lifetime_ms,
        delegation_token_expiry_time_ms=c.delegation_token_expiry_time_ms,
        delegation_token_expiry_check_interval_ms=c.delegation_token_expiry_check_interval_ms)


def build_quorum(config: BrokerConfig, addresses: NodeAddresses, legacy: Any,
                 emit: Callable[..., None], fs: FileSystem = REAL,
                 wall_clock_ms: Callable[[], int] | None = None) -> QuorumRuntime:
    """The quorum of the node `addresses` describes, on `config`'s data directory (on
    the file system `fs`); `wall_clock_ms`, the node's clock, dates delegation tokens."""
    voters = tuple(sorted(addresses.voters))
    store = MetadataLogStore.open(os.path.join(config.data_dirs[0], METADATA_LOG_DIR), fs)
    if store.election is not None and not addresses.dynamic:
        check_voters(tuple(store.election.voters), voters)
    quorum = QuorumConfig(
        voters=voters,
        election_timeout_ms=config.controller_quorum_election_timeout_ms,
        fetch_timeout_ms=config.controller_quorum_fetch_timeout_ms,
        election_backoff_max_ms=config.controller_quorum_election_timeout_ms,
        request_timeout_ms=config.controller_quorum_request_timeout_ms,
        retry_backoff_ms=config.controller_quorum_retry_backoff_ms,
        bootstrap_voters=bootstrap_voter_set(addresses) if addresses.dynamic else None)
    node = RaftNode(addresses.node_id, quorum, random.Random(), election=store.election,
                    log=store.raft_log)
    controller = None
    if addresses.is_controller:
        controller = QuorumController(controller_settings(config, addresses), random.Random(),
                                      wall_clock_ms=wall_clock_ms)
    return QuorumRuntime(
        node, store, controller, None, legacy=legacy, on_controller_event=emit,
        snapshot_max_bytes=config.metadata_log_max_record_bytes_between_snapshots,
        snapshot_interval_ms=config.metadata_log_max_snapshot_interval_ms, fs=fs)
