"""AdminClient: topics, partitions and groups, on trio.

Owns: `AdminClient` and the plain dataclasses it takes and returns (`NewTopic`,
`CreatedTopic`, `TopicListing`, `TopicDescription`, `PartitionInfo`, `ConfigResource`,
`ConfigEntry`, `GroupListing`, `GroupDescription`, `MemberDescription`,
`ConsumerGroupDescription`, `ConsumerGroupMemberDescription`, `ClusterDescription`,
`QuorumInfo`, `ReplicaState`, `FeatureUpdate`, `FeatureMetadata`, `DelegationToken`,
`AclBinding`,
`AclBindingFilter`, `TransactionListing`,
`TransactionDescription`, `ProducerState`).

    async with AdminClient(bootstrap_servers="127.0.0.1:9092") as admin:
        await admin.create_topics({"orders": 3})          # or [NewTopic("orders", 3, 1)]
        await admin.create_partitions({"orders": 6})      # total, not extra
        [t.name for t in await admin.list_topics()]
        await admin.describe_configs([ConfigResource("topic", "orders")])
        await admin.describe_groups(["billing"])          # {"billing": GroupDescription}
        await admin.describe_consumer_groups(["audit"])   # KIP-848 groups: epochs, targets
        await admin.list_consumer_group_offsets("billing")  # {TopicPartition: offset}
        await admin.list_offsets({TopicPartition("orders", 0): "latest"})
        await admin.alter_consumer_group_offsets("billing", {TopicPartition("orders", 0): 0})
        await admin.delete_consumer_group_offsets("billing", [TopicPartition("orders", 0)])
        await admin.delete_groups(["billing"])
        await admin.incremental_alter_configs(
            {ConfigResource("topic", "orders"): [AlterConfigOp("retention.ms", "1000")]})
        await admin.delete_topics(["orders"])
        await admin.describe_cluster()    # cluster id, active controller, brokers and racks
        await admin.describe_quorum()     # the metadata quorum: leader, epoch, voters' lag
        await admin.unregister_broker(3)  # a decommissioned (stopped) broker's registration
        await admin.describe_features()   # FeatureMetadata: finalized levels, supported ranges
        await admin.update_features({"group.version": FeatureUpdate(0, "safe_downgrade")})
        token = await admin.create_delegation_token(renewers=["User:bob"])  # over SASL/mTLS
        await admin.renew_delegation_token(token.hmac)   # the new expiry
        await admin.describe_delegation_token()          # [DelegationToken]
        await admin.expire_delegation_token(token.hmac)  # -1: at once
        await admin.create_acls([AclBinding(2, "orders", 3, "User:alice", "*", 3, 3)])
        await admin.describe_acls(AclBindingFilter(resource_type=2))  # [AclBinding]
        await admin.delete_acls([AclBindingFilter(principal="User:alice")])  # what went
        await admin.list_transactions(state_filters=["Ongoing"])  # [TransactionListing]
        await admin.describe_transactions(["checkout-1"])  # {id: TransactionDescription}
        await admin.describe_producers([TopicPartition("orders", 0)])  # {tp: [ProducerState]}
        await admin.abort_transaction("orders", 0, producer_id, producer_epoch, coord_epoch)

Kafka errors come back as the typed exceptions of client.errors (TopicAlreadyExistsError,
UnknownTopicOrPartitionError, ...). When a call names several topics, every topic is
attempted and the first failure (in the caller's order) is raised; the others took effect.

Retries: a connection failure, a timeout, and a retriable error code that is about the
broker's state rather than the caller's input (NOT_CONTROLLER, the coordinator errors,
THROTTLING_QUOTA_EXCEEDED, REQUEST_TIMED_OUT, ...) are retried with retry_backoff_ms doubling
up to retry_backoff_max_ms, until default_api_timeout_ms (or the call's `timeout_ms`) runs
out; then KafkaTimeoutError says what was last seen. UNKNOWN_TOPIC_OR_PARTITION, retriable for
a producer that waits for a topic, is an answer here and is raised at once.

Topic calls go to the controller named by Metadata, group calls to the group's coordinator
(FindCoordinator, sent to the least-loaded connection), ListGroups to every broker,
ListOffsets to each partition's leader, the ACL calls to the controller Metadata names, DescribeConfigs of a topic to the least-loaded
connection and of a broker to that broker, IncrementalAlterConfigs to the least-loaded
connection (the broker forwards it to the active controller), DescribeCluster and DescribeQuorum to the
least-loaded connection (a broker answers DescribeQuorum from the active controller, as
Kafka's Admin.describeMetadataQuorum expects), and so does UnregisterBroker (the broker
forwards it to the active controller, as for Kafka's Admin.unregisterBroker). ListTransactions goes to every broker,
DescribeTransactions to each transactional id's coordinator (FindCoordinator key type 1),
DescribeProducers and the ABORT marker of abort_transaction (WriteTxnMarkers) to each
partition's leader. DescribeClientQuotas and AlterClientQuotas go to the least-loaded
connection (the broker forwards an alteration to the active controller).
"""

from __future__ import annotations

import os
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, ClassVar, Iterable, Mapping, Sequence, TypeVar

from client.cluster import (Cluster, ClusterMetadata, TRANSACTION_KEY, find_coordinator,
                            find_group_coordinator)
from client.config import AdminConfig, check_config
from client.connection import BrokerConnection, ConnectionPool
from client.errors import IncompatibleBrokerVersion, KafkaError, for_code
from client.offset_fetch import offset_fetch
from client.retry import retry_until_deadline
from client.types import Node, TopicPartition
from protocol.consumer_protocol import decode_assignment
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import (
    ADD_RAFT_VOTER, ALTER_CLIENT_QUOTAS, ALTER_PARTITION_REASSIGNMENTS, ALTER_REPLICA_LOG_DIRS,
    ALTER_SHARE_GROUP_OFFSETS, ALTER_USER_SCRAM_CREDENTIALS, API_VERSIONS,
    CONSUMER_GROUP_DESCRIBE, CREATE_ACLS, CREATE_DELEGATION_TOKEN, CREATE_PARTITIONS,
    CREATE_TOPICS, DELETE_ACLS, DELETE_GROUPS, DELETE_RECORDS, DELETE_SHARE_GROUP_OFFSETS,
    DELETE_TOPICS, DESCRIBE_ACLS, DESCRIBE_CLIENT_QUOTAS, DESCRIBE_CLUSTER, DESCRIBE_CONFIGS,
    DESCRIBE_DELEGATION_TOKEN, DESCRIBE_GROUPS, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS,
    DESCRIBE_QUORUM, DESCRIBE_SHARE_GROUP_OFFSETS, DESCRIBE_TRANSACTIONS,
    DESCRIBE_USER_SCRAM_CREDENTIALS, EXPIRE_DELEGATION_TOKEN, INCREMENTAL_ALTER_CONFIGS,
    LIST_GROUPS, LIST_OFFSETS, LIST_PARTITION_REASSIGNMENTS, LIST_TRANSACTIONS, OFFSET_COMMIT,
    OFFSET_DELETE, REMOVE_RAFT_VOTER, RENEW_DELEGATION_TOKEN, SHARE_GROUP_DESCRIBE,
    UNREGISTER_BROKER, UPDATE_FEATURES, WRITE_TXN_MARKERS,
)
from protocol.primitives import ZERO_UUID
from protocol.sasl import SCRAM_BY_ID, SCRAM_MECHANISMS

__all__ = ["AclBinding", "AclBindingFilter", "AdminClient", "AlterConfigOp", "ClusterDescription", "ConfigEntry", "ConfigResource", "CreatedTopic",
           "ConsumerGroupDescription", "ConsumerGroupMemberDescription", "DelegationToken", "FeatureMetadata", "FeatureUpdate", "GroupDescription", "GroupListing", "MemberDescription", "NewTopic", "PartitionInfo",
           "ProducerState", "QuorumInfo", "ReplicaState", "ScramCredentialInfo", "TopicDescription",
           "TopicListing", "TransactionDescription", "TransactionListing",
           "UserScramCredentialDeletion", "UserScramCredentialUpsertion"]

T = TypeVar("T")

# Retriable codes that are answers about the caller's input, not the broker's state.
_NOT_RETRIED = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})

# ListOffsets timestamps that name a position rather than a time (Kafka's OffsetSpec)
_OFFSET_SPECS = {"latest": -1, "earliest": -2}
# DescribeConfigs resource types and the config source that means "Kafka's default"
_RESOURCE_TYPES = {"topic": 2, "broker": 4, "group": 32}
_DEFAULT_CONFIG_SOURCE = 5
# The KRaft metadata log, the one partition DescribeQuorum describes
_METADATA_TOPIC = "__cluster_metadata"


def _principal(principal: str) -> tuple[str, str]:
    """"User:alice" -> ("User", "alice"); a bare name is a User."""
    kind, sep, name = principal.partition(":")
    return (kind, name) if sep else ("User", principal)


# -- what goes in and comes out ----------------------------------------------------------

@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 partitions or replication factor: the broker's default
    (num.partitions, default.replication.factor). `replica_assignments` (partition ->
    broker ids) replaces both counts."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str | None] = field(default_factory=dict)
    replica_assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True)
class CreatedTopic:
    name: str
    topic_id: uuid.UUID | None
    num_partitions: int
    replication_factor: int


@dataclass(frozen=True)
class TopicListing:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    num_partitions: int


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True)
class ReplicaInfo:
    """One replica in a log directory (Kafka's ReplicaInfo): its size in bytes, how far
    its log end is behind the high watermark, and whether it is a future replica (one
    being moved between directories)."""

    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    """One log directory of a broker (Kafka's LogDirDescription): `error` None when it is
    online; total and usable bytes -1 when the broker does not say."""

    path: str
    error: KafkaError | None
    replicas: dict[TopicPartition, ReplicaInfo]
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclass(frozen=True)
class ConfigResource:
    """What DescribeConfigs describes: type "topic", "broker" or "group" (KIP-848's group
    configs), and its name (a broker's is its node id as text, "" the cluster-wide
    default)."""

    type: str
    name: str


@dataclass(frozen=True)
class AlterConfigOp:
    """One change of IncrementalAlterConfigs (Kafka's AlterConfigOp): op "set" (the
    default), "delete", "append" or "subtract" (the last two for list configs)."""

    name: str
    value: str | None = None
    op: str = "set"

    OPS: ClassVar[dict[str, int]] = {"set": 0, "delete": 1, "append": 2, "subtract": 3}


@dataclass(frozen=True)
class ConfigEntry:
    """One config of a resource, as DescribeConfigs reports it. `source` is Kafka's
    ConfigSource id (1 a topic override, 4 the broker's static config, 5 the default, -1
    when the broker's version does not say); `is_default` is what Kafka's
    ConfigEntry.isDefault() answers."""

    name: str
    value: str | None
    source: int
    is_default: bool
    read_only: bool
    is_sensitive: bool
    # (name, value, source) of each place the value could come from, the one in force
    # first; only when asked for (describe_configs(include_synonyms=True))
    synonyms: tuple[tuple[str, str | None, int], ...] = ()


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None  # None: the broker's ListGroups version does not say (< v4)
    coordinator: int  # node id of the broker that answered for it
    group_type: str | None = None  # "classic" or "consumer" (KIP-848); None before v5


@dataclass(frozen=True)
class ConsumerGroupMemberDescription:
    """A member of a KIP-848 consumer group, as ConsumerGroupDescribe answers: its epoch,
    what it holds now and what the coordinator's target gives it."""
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[TopicPartition, ...]
    target_assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    state: str  # "Empty", "Assigning", "Reconciling", "Stable", "Dead"
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ConsumerGroupMemberDescription, ...]
    coordinator: int


@dataclass(frozen=True)
class ShareGroupMemberDescription:
    """A member of a KIP-932 share group, as ShareGroupDescribe answers."""
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ShareGroupDescription:
    group_id: str
    state: str  # "Empty", "Stable", "Dead"
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareGroupMemberDescription, ...]
    coordinator: int


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]  # decoded for protocol type "consumer"
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str  # "Stable", "Empty", "PreparingRebalance", ..., "Dead" (no such group)
    protocol_type: str
    protocol: str  # the chosen assignor ("range", "cooperative-sticky", ...) when stable
    members: tuple[MemberDescription, ...]
    coordinator: int


@dataclass(frozen=True)
class FeatureUpdate:
    """One UpdateFeatures change (Kafka's FeatureUpdate): the new level, and how it may
    move: "upgrade", "safe_downgrade" or "unsafe_downgrade"."""

    max_version_level: int
    upgrade_type: str = "upgrade"

    TYPES: ClassVar[dict[str, int]] = {"upgrade": 1, "safe_downgrade": 2,
                                       "unsafe_downgrade": 3}


@dataclass(frozen=True)
class FeatureMetadata:
    """What describe_features reads from ApiVersions v3+ (Kafka's FeatureMetadata): the
    cluster's finalized levels and their epoch (None when unknown), and the ranges the
    broker asked supports."""

    finalized: dict[str, int]
    finalized_epoch: int | None
    supported: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class DelegationToken:
    """A delegation token (KIP-48; Kafka's DelegationToken and TokenInformation): log in
    with SCRAM as `token_id`, the password `base64(hmac)`, and `tokenauth="true"` in
    sasl_jaas_config. Principals as "User:name", times in epoch milliseconds."""

    token_id: str
    hmac: bytes
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp_ms: int
    expiry_timestamp_ms: int
    max_timestamp_ms: int


@dataclass(frozen=True)
class ClusterDescription:
    """What DescribeCluster answers: the cluster id, the active controller (None if the
    broker knows of none) and the brokers it lists (the unfenced ones), by id."""

    cluster_id: str
    controller: int | None
    brokers: tuple[Node, ...]


@dataclass(frozen=True)
class ReplicaState:
    """One replica of the metadata log as the quorum leader sees it (Kafka's
    QuorumInfo.ReplicaState): its log end offset, and when it last fetched and was last
    caught up, in ms since the epoch (None: the leader does not know or the version does
    not say)."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int | None
    last_caught_up_timestamp: int | None
    directory_id: uuid.UUID | None = None  # DescribeQuorum v2 (KIP-853); None before


@dataclass(frozen=True)
class QuorumInfo:
    """What DescribeQuorum answers (Kafka's QuorumInfo): the leader (None if there is none),
    its epoch, the high watermark, the voters and observers, and the voters' controller
    endpoints by node id (DescribeQuorum v2; empty before)."""

    leader_id: int | None
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]
    nodes: Mapping[int, tuple[str, int]] = field(default_factory=dict)

    def lag(self, replica: ReplicaState) -> int:
        """How many entries `replica` is behind the leader's log end (as
        kafka-metadata-quorum.sh counts lag); 0 for the leader."""
        leader = next((r for r in self.voters if r.replica_id == self.leader_id), None)
        if leader is None:
            return 0
        return max(0, leader.log_end_offset - replica.log_end_offset)


@dataclass(frozen=True)
class TransactionListing:
    """A transaction as ListTransactions lists it (Kafka's TransactionListing), with the
    node id of the broker that coordinates it."""

    transactional_id: str
    producer_id: int
    state: str  # Kafka's TransactionState name: "Empty", "Ongoing", "PrepareCommit", ...
    coordinator: int


@dataclass(frozen=True)
class TransactionDescription:
    """A transactional id's state on its coordinator, from DescribeTransactions (Kafka's
    TransactionDescription): the partitions of its ongoing transaction, or those whose
    markers are still being written."""

    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None  # None: no transaction started
    topic_partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ProducerState:
    """A producer as a partition's replica remembers it, from DescribeProducers (Kafka's
    ProducerState): the last sequence it wrote (-1: none), when it last wrote, the epoch of
    the last coordinator whose marker reached the partition (None: none yet) and the first
    offset of its open transaction there (None: none open)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None
    current_transaction_start_offset: int | None


# -- the client -------------------------------------------------------------------------

@dataclass(frozen=True)
class AclBinding:
    """One ACL, with Kafka's numbers: ResourceType (2 topic, 3 group, 4 cluster, 5
    transactional id), PatternType (3 literal, 4 prefixed), AclOperation (2 all, 3 read, 4
    write, ... 8 describe, ...) and AclPermissionType (2 deny, 3 allow)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None matches any name, principal or host, 1 (ANY) any
    type, pattern, operation or permission; pattern type 2 (MATCH) selects the ACLs that
    apply to the named resource (literal, wildcard and prefixes)."""

    resource_type: int = 1
    resource_name: str | None = None
    pattern_type: int = 1
    principal: str | None = None
    host: str | None = None
    operation: int = 1
    permission_type: int = 1

    def body(self) -> dict:
        return {"resource_type_filter": self.resource_type,
                "resource_name_filter": self.resource_name,
                "pattern_type_filter": self.pattern_type,
                "principal_filter": self.principal, "host_filter": self.host,
                "operation": self.operation, "permission_type": self.permission_type}


class AdminClient:
    """Administrative operations on a Kafka cluster; an async context manager.

    `AdminClient(bootstrap_servers="h1:9092,h2:9092", request_timeout_ms=..., ...)` takes
    AdminConfig's names (client.config); an unknown name is a TypeError."""

    def __init__(self, bootstrap_servers: str | Sequence[str] = "localhost:9092",
                 **config: Any):
        self.config: AdminConfig = check_config(
            "admin", bootstrap_servers=bootstrap_servers, **config)  # type: ignore[assignment]
        self._pool: ConnectionPool | None = None
        self._cluster: Cluster | None = None
        self._exit_stack: AsyncExitStack | None = None

    async def __aenter__(self) -> "AdminClient":
        async with AsyncExitStack() as stack:
            self._pool = await stack.enter_async_context(ConnectionPool(self.config))
            self._cluster = Cluster(self._pool, self.config)
            self._exit_stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info) -> None:
        stack, self._exit_stack = self._exit_stack, None
        self._pool, self._cluster = None, None
        if stack is not None:
            await stack.aclose()

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            raise RuntimeError("the AdminClient is not open (use `async with`)")
        return self._cluster

    @property
    def pool(self) -> ConnectionPool:
        if self._pool is None:
            raise RuntimeError("the AdminClient is not open (use `async with`)")
        return self._pool

    # -- topics ------------------------------------------------------------------------

    async def create_topics(self, topics: Iterable[NewTopic | str] | Mapping[str, int], *,
                            validate_only: bool = False,
                            timeout_ms: int | None = None) -> dict[str, CreatedTopic]:
        """Create topics: a list of NewTopic (or names, for broker defaults), or a dict
        name -> partition count. Returns what the broker created, by name, in order."""
        if isinstance(topics, Mapping):
            wanted = [NewTopic(name, n) for name, n in topics.items()]
        else:
            wanted = [NewTopic(t) if isinstance(t, str) else t for t in topics]
        remaining = {t.name: t for t in wanted}
        created: dict[str, CreatedTopic] = {}
        failed: dict[str, KafkaError] = {}

        async def attempt() -> None:
            conn = await self._controller()
            version = conn.version_for(CREATE_TOPICS)
            body = {"topics": [_new_topic_body(t, version) for t in remaining.values()],
                    "timeout_ms": self._op_timeout(timeout_ms),
                    "validate_only": validate_only}
            resp = await conn.request(CREATE_TOPICS, body, version)
            self._settle(resp.body.topics, remaining, failed, lambda r: created.__setitem__(
                r.name, CreatedTopic(r.name, _uuid(r.get("topic_id")),
                                     r.get("num_partitions", -1),
                                     r.get("replication_factor", -1))))

        await self._retrying("CreateTopics", attempt, timeout_ms)
        self.cluster.request_update()
        _raise_first(wanted, failed)
        return {t.name: created[t.name] for t in wanted if t.name in created}

    async def delete_topics(self, names: Iterable[str], *,
                            timeout_ms: int | None = None) -> None:
        """Delete topics by name (UnknownTopicOrPartitionError if one does not exist)."""
        wanted = list(dict.fromkeys(names))
        remaining = {n: n for n in wanted}
        failed: dict[str, KafkaError] = {}

        async def attempt() -> None:
            conn = await self._controller()
            body = {"topics": [{"name": n} for n in remaining],
                    "topic_names": list(remaining), "timeout_ms": self._op_timeout(timeout_ms)}
            resp = await conn.request(DELETE_TOPICS, body)
            self._settle(resp.body.responses, remaining, failed, lambda r: None)

        await self._retrying("DeleteTopics", attempt, timeout_ms)
        self.cluster.request_update()
        _raise_first(wanted, failed)

    async def create_partitions(self, new_totals: Mapping[str, int], *,
                                validate_only: bool = False,
                                timeout_ms: int | None = None) -> None:
        """Grow topics to the given total partition counts ({"orders": 6})."""
        wanted = list(new_totals)
        remaining = dict(new_totals)
        failed: dict[str, KafkaError] = {}

        async def attempt() -> None:
            conn = await self._controller()
            body = {"topics": [{"name": n, "count": c, "assignments": None}
                               for n, c in remaining.items()],
                    "timeout_ms": self._op_timeout(timeout_ms), "validate_only": validate_only}
            resp = await conn.request(CREATE_PARTITIONS, body)
            self._settle(resp.body.results, remaining, failed, lambda r: None)

        await self._retrying("CreatePartitions", attempt, timeout_ms)
        self.cluster.request_update()
        _raise_first(wanted, failed)

    async def list_topics(self, *, include_internal: bool = False,
                          timeout_ms: int | None = None) -> list[TopicListing]:
        """Every topic in the cluster (internal ones only if asked), sorted by name."""
        metadata = await self._retrying("Metadata", self.cluster.refresh, timeout_ms)
        return [TopicListing(t.name, t.topic_id, t.is_internal, len(t.partitions))
                for name, t in sorted(metadata.topics.items())
                if include_internal or not t.is_internal]

    async def describe_topics(self, names: Iterable[str], *,
                              timeout_ms: int | None = None) -> dict[str, TopicDescription]:
        """Partitions, leaders and replicas of the named topics, by name, in order."""
        wanted = list(dict.fromkeys(names))
        metadata = await self._retrying(
            "Metadata", lambda: self.cluster.refresh(wanted), timeout_ms)
        out = {}
        for name in wanted:
            t = metadata.topics.get(name)
            if t is None:
                code = metadata.topic_errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                raise for_code(code, f"topic '{name}'")
            out[name] = TopicDescription(
                name, t.topic_id, t.is_internal,
                tuple(PartitionInfo(p.partition, p.leader, p.replicas, p.isr)
                      for _, p in sorted(t.partitions.items())))
        return out

    async def describe_configs(self, resources: Iterable[ConfigResource], *,
                               include_synonyms: bool = False,
                               timeout_ms: int | None = None
                               ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource, by resource in order, each by config name."""
        wanted = list(dict.fromkeys(resources))
        _check_resource_types(wanted)
        by_node: dict[int | None, list[ConfigResource]] = {}
        for r in wanted:
            by_node.setdefault(int(r.name) if r.type == "broker" and r.name else None,
                               []).append(r)
        found: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        failed: dict[ConfigResource, KafkaError] = {}
        for node_id, group in by_node.items():
            async def attempt(node_id: int | None = node_id,
                              group: list[ConfigResource] = group) -> Any:
                if node_id is None:
                    conn = await self.pool.least_loaded()
                else:
                    await self.cluster.maybe_refresh()
                    conn = await self.pool.get(node_id)
                resp = await conn.request(DESCRIBE_CONFIGS, {
                    "resources": [{"resource_type": _RESOURCE_TYPES[r.type],
                                   "resource_name": r.name, "configuration_keys": None}
                                  for r in group],
                    "include_synonyms": include_synonyms, "include_documentation": False})
                return resp.body

            body = await self._retrying("DescribeConfigs", attempt, timeout_ms)
            types = {v: k for k, v in _RESOURCE_TYPES.items()}
            for result in body.results:
                resource = ConfigResource(types.get(result.resource_type, "?"),
                                          result.resource_name)
                code = ErrorCode.of(result.error_code)
                if code is not ErrorCode.NONE:
                    detail = result.get("error_message")
                    failed[resource] = for_code(code, f"{resource.type} '{resource.name}'"
                                                + (f": {detail}" if detail else ""))
                    continue
                found[resource] = {c.name: _config_entry(c) for c in result.configs}
        for r in wanted:
            if r in failed:
                raise failed[r]
        return {r: found[r] for r in wanted if r in found}

    async def incremental_alter_configs(
            self, changes: Mapping[ConfigResource, Iterable[AlterConfigOp]], *,
            validate_only: bool = False, timeout_ms: int | None = None) -> None:
        """IncrementalAlterConfigs (KIP-339): each resource's changes, key by key. Every
        resource is attempted; the first refused one (in the caller's order) is raised
        (INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION, ...), the others took effect."""
        wanted = {r: list(ops) for r, ops in changes.items()}
        _check_resource_types(wanted)
        for ops in wanted.values():
            for op in ops:
                if op.op not in AlterConfigOp.OPS:
                    raise ValueError(f"config operation must be one of "
                                     f"{', '.join(AlterConfigOp.OPS)}, got {op.op!r}")
        types = {v: k for k, v in _RESOURCE_TYPES.items()}
        remaining = dict(wanted)
        failed: dict[ConfigResource, KafkaError] = {}

        async def attempt() -> None:
            conn = await self.pool.least_loaded()
            resp = await conn.request(INCREMENTAL_ALTER_CONFIGS, {
                "resources": [{"resource_type": _RESOURCE_TYPES[r.type],
                               "resource_name": r.name,
                               "configs": [{"name": op.name,
                                            "config_operation": AlterConfigOp.OPS[op.op],
                                            "value": op.value} for op in ops]}
                              for r, ops in remaining.items()],
                "validate_only": validate_only})
            retry: KafkaError | None = None
            for result in resp.body.responses:
                resource = ConfigResource(types.get(result.resource_type, "?"),
                                          result.resource_name)
                if resource not in remaining:
                    continue
                code = ErrorCode.of(result.error_code)
                if code is not ErrorCode.NONE:
                    detail = result.get("error_message")
                    error = for_code(code, f"{resource.type} '{resource.name}'"
                                     + (f": {detail}" if detail else ""))
                    if _should_retry(error):
                        retry = retry or error
                        continue
                    failed[resource] = error
                del remaining[resource]
            if remaining:
                raise retry or for_code(ErrorCode.UNKNOWN_SERVER_ERROR,
                                        f"IncrementalAlterConfigs did not answer for "
                                        f"{len(remaining)} resources")

        await self._retrying("IncrementalAlterConfigs", attempt, timeout_ms)
        for r in wanted:
            if r in failed:
                raise failed[r]

    async def list_offsets(self, specs: Mapping[TopicPartition, str | int], *,
                           timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """Offsets from each partition's leader (Kafka's Admin.listOffsets): a spec is
        "latest" (the log end offset), "earliest" (the log start offset) or a timestamp in
        ms (the first offset at or after it; -1 when there is none). read_uncommitted."""
        timestamps = {}
        for tp, spec in specs.items():
            ts = _OFFSET_SPECS.get(spec) if isinstance(spec, str) else spec
            if not isinstance(ts, int):
                raise ValueError(f"offset spec must be latest, earliest or a timestamp, "
                                 f"got {spec!r}")
            timestamps[TopicPartition(tp[0], tp[1])] = ts

        async def ask(conn: BrokerConnection, tps: list[TopicPartition]
                      ) -> list[tuple[TopicPartition, ErrorCode, int]]:
            version = conn.version_for(LIST_OFFSETS)
            topics: dict[str, list[dict]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "timestamp": timestamps[tp],
                    "max_num_offsets": 1})
            # timeout_ms (v10+) bounds a broker's lookup in remote storage: Java's
            # ListOffsetsHandler gives it the call's timeout, as here
            resp = await conn.request(LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "timeout_ms": self._op_timeout(timeout_ms)}, version)
            out = []
            for t in resp.body.topics:
                for p in t.partitions:
                    if version == 0:
                        offsets = p.get("old_style_offsets") or []
                        offset = offsets[0] if offsets else -1
                    else:
                        offset = p.offset
                    out.append((TopicPartition(t.name, p.partition_index),
                                ErrorCode.of(p.error_code), offset))
            return out

        return await self._on_leaders("ListOffsets", list(timestamps), ask, timeout_ms)

    async def delete_records(self, offsets: Mapping[TopicPartition, int], *,
                             timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """Delete every record below each offset (-1: the high watermark) at the partition
        leaders (DeleteRecords, Kafka's Admin.deleteRecords); returns each partition's low
        watermark, the log start offset all its in-sync replicas have reached."""
        wanted = {TopicPartition(tp[0], tp[1]): o for tp, o in offsets.items()}

        async def ask(conn: BrokerConnection, tps: list[TopicPartition]
                      ) -> list[tuple[TopicPartition, ErrorCode, int]]:
            topics: dict[str, list[dict]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append({"partition_index": tp.partition,
                                                        "offset": wanted[tp]})
            resp = await conn.request(DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "timeout_ms": self._op_timeout(timeout_ms)})
            return [(TopicPartition(t.name, p.partition_index), ErrorCode.of(p.error_code),
                     p.low_watermark) for t in resp.body.topics for p in t.partitions]

        return await self._on_leaders("DeleteRecords", list(wanted), ask, timeout_ms)

    async def _on_leaders(self, what: str, wanted: list[TopicPartition],
                          ask: Callable[[BrokerConnection, list[TopicPartition]],
                                        Awaitable[list[tuple[TopicPartition, ErrorCode, T]]]],
                          timeout_ms: int | None) -> dict[TopicPartition, T]:
        """A per-partition request to each partition's leader (`ask` sends one leader its
        partitions and gives each one's error and value), retried with fresh metadata while
        a partition's error is retriable; the first final error is raised."""
        remaining = set(wanted)
        found: dict[TopicPartition, T] = {}
        failed: dict[TopicPartition, KafkaError] = {}

        async def attempt() -> None:
            metadata = await self.cluster.maybe_refresh()
            by_leader: dict[int, list[TopicPartition]] = {}
            retry: KafkaError | None = None
            for tp in sorted(remaining):
                if tp.topic not in metadata.topics:
                    code = metadata.topic_errors.get(tp.topic,
                                                     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    failed[tp] = for_code(code, f"topic '{tp.topic}'")
                    remaining.discard(tp)
                    continue
                leader = metadata.leader_for(tp.topic, tp.partition)
                if leader is None:
                    retry = retry or for_code(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp}")
                    continue
                by_leader.setdefault(leader, []).append(tp)
            for leader, tps in sorted(by_leader.items()):
                conn = await self.pool.get(leader)
                for tp, code, value in await ask(conn, tps):
                    if tp not in remaining:
                        continue
                    if code is not ErrorCode.NONE:
                        error = for_code(code, f"{what} {tp.topic}-{tp.partition}")
                        if _should_retry(error):
                            retry = retry or error
                            continue
                        failed[tp] = error
                    else:
                        found[tp] = value
                    remaining.discard(tp)
            if remaining:
                raise retry or for_code(ErrorCode.LEADER_NOT_AVAILABLE,
                                        f"no answer for {len(remaining)} partitions")

        await self._retrying(what, attempt, timeout_ms)
        for tp in wanted:
            if tp in failed:
                raise failed[tp]
        return {tp: found[tp] for tp in wanted}

    # -- groups ------------------------------------------------------------------------

    async def list_groups(self, *, timeout_ms: int | None = None) -> list[GroupListing]:
        """Every group on every broker, sorted by group id."""
        metadata = await self._retrying("Metadata", self.cluster.maybe_refresh, timeout_ms)
        found: dict[str, GroupListing] = {}
        for node_id in sorted(metadata.brokers):
            async def attempt(node_id: int = node_id) -> Any:
                conn = await self.pool.get(node_id)
                resp = await conn.request(LIST_GROUPS, {"states_filter": [],
                                                        "types_filter": []})
                if resp.body.error_code != ErrorCode.NONE:
                    raise for_code(resp.body.error_code, f"ListGroups on node {node_id}")
                return resp.body

            body = await self._retrying(f"ListGroups on node {node_id}", attempt, timeout_ms)
            for g in body.groups:
                found[g.group_id] = GroupListing(g.group_id, g.protocol_type,
                                                 g.get("group_state"), node_id,
                                                 g.get("group_type") or None)
        return [found[g] for g in sorted(found)]

    async def describe_groups(self, group_ids: Iterable[str], *,
                              timeout_ms: int | None = None) -> dict[str, GroupDescription]:
        """State, protocol and members of each group, by id, in order. A group that does
        not exist is described with state "Dead" and no members, as Kafka does."""
        out: dict[str, GroupDescription] = {}
        for group_id in dict.fromkeys(group_ids):
            async def attempt(group_id: str = group_id) -> GroupDescription:
                node_id, conn = await self._coordinator(group_id)
                resp = await conn.request(DESCRIBE_GROUPS, {
                    "groups": [group_id], "include_authorized_operations": False})
                g = next((g for g in resp.body.groups if g.group_id == group_id), None)
                if g is None:
                    raise for_code(ErrorCode.UNKNOWN_SERVER_ERROR,
                                   f"DescribeGroups did not describe group '{group_id}'")
                if g.error_code != ErrorCode.NONE:
                    raise for_code(g.error_code, f"group '{group_id}'")
                return _group_description(g, node_id)

            out[group_id] = await self._retrying(f"DescribeGroups({group_id})", attempt,
                                                 timeout_ms)
        return out

    async def describe_consumer_groups(self, group_ids: Iterable[str], *,
                                       timeout_ms: int | None = None
                                       ) -> dict[str, ConsumerGroupDescription]:
        """KIP-848 consumer groups by id (ConsumerGroupDescribe on each one's coordinator):
        GroupIdNotFoundError for a group that does not exist or is a classic group."""
        return await self._describe_on_coordinators(
            "ConsumerGroupDescribe", CONSUMER_GROUP_DESCRIBE, group_ids,
            _consumer_group_description, timeout_ms)

    async def describe_share_groups(self, group_ids: Iterable[str], *,
                                    timeout_ms: int | None = None
                                    ) -> dict[str, ShareGroupDescription]:
        """KIP-932 share groups by id (ShareGroupDescribe on each one's coordinator):
        GroupIdNotFoundError for a group that does not exist or is not a share group."""
        return await self._describe_on_coordinators(
            "ShareGroupDescribe", SHARE_GROUP_DESCRIBE, group_ids, _share_group_description,
            timeout_ms)

    async def _describe_on_coordinators(self, name: str, api_key: int,
                                        group_ids: Iterable[str], parse: Any,
                                        timeout_ms: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for group_id in dict.fromkeys(group_ids):
            async def attempt(group_id: str = group_id) -> Any:
                node_id, conn = await self._coordinator(group_id)
                resp = await conn.request(api_key, {
                    "group_ids": [group_id], "include_authorized_operations": False})
                g = next((g for g in resp.body.groups if g.group_id == group_id), None)
                if g is None:
                    raise for_code(ErrorCode.UNKNOWN_SERVER_ERROR,
                                   f"{name} did not describe '{group_id}'")
                if g.error_code != ErrorCode.NONE:
                    raise for_code(g.error_code, g.error_message or f"group '{group_id}'")
                return parse(g, node_id)

            out[group_id] = await self._retrying(f"{name}({group_id})", attempt, timeout_ms)
        return out

    async def list_consumer_group_offsets(self, group_id: str, *,
                                          timeout_ms: int | None = None
                                          ) -> dict[TopicPartition, int]:
        """The group's committed offsets, every partition it has one for, sorted (OffsetFetch
        with null topics, v2+). A group that does not exist has none: {}."""
        async def attempt() -> dict[TopicPartition, int]:
            _, conn = await self._coordinator(group_id)
            try:
                committed = await offset_fetch(conn, group_id, None)
            except KafkaError as e:
                if e.code is ErrorCode.GROUP_ID_NOT_FOUND:
                    return {}
                raise
            return dict(sorted((tp, o) for tp, o in committed.items() if o is not None))

        return await self._retrying(f"OffsetFetch({group_id})", attempt, timeout_ms)

    async def alter_consumer_group_offsets(self, group_id: str,
                                           offsets: Mapping[TopicPartition, int], *,
                                           timeout_ms: int | None = None) -> None:
        """Set the group's committed offsets (Kafka's Admin.alterConsumerGroupOffsets):
        OffsetCommit without a member (generation -1), which the coordinator accepts only
        while the group has no members; the first refused partition's error is raised."""
        topics: dict[str, list[dict]] = {}
        for tp, offset in offsets.items():
            if offset < 0:
                raise ValueError(f"offset must be >= 0, got {offset} for {tp}")
            topics.setdefault(tp[0], []).append({
                "partition_index": tp[1], "committed_offset": offset,
                "committed_leader_epoch": -1, "committed_metadata": ""})
        if not topics:
            return

        async def attempt() -> None:
            _, conn = await self._coordinator(group_id)
            resp = await conn.request(OFFSET_COMMIT, {
                "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            _raise_partition_error(resp.body.topics, f"OffsetCommit for group '{group_id}'")

        await self._retrying(f"OffsetCommit({group_id})", attempt, timeout_ms)

    async def delete_consumer_group_offsets(self, group_id: str,
                                            partitions: Iterable[TopicPartition], *,
                                            timeout_ms: int | None = None
                                            ) -> dict[TopicPartition, KafkaError | None]:
        """OffsetDelete (KIP-496): forget the group's committed offsets of `partitions`.
        Returns each partition's outcome (None: deleted; GROUP_SUBSCRIBED_TO_TOPIC when an
        active member subscribes to its topic), as Kafka's DeleteConsumerGroupOffsetsResult;
        a group-level refusal is raised (GROUP_ID_NOT_FOUND for a group the coordinator
        does not know)."""
        wanted = list(dict.fromkeys(TopicPartition(tp[0], tp[1]) for tp in partitions))
        topics: dict[str, list[dict]] = {}
        for tp in wanted:
            topics.setdefault(tp.topic, []).append({"partition_index": tp.partition})
        what = f"OffsetDelete for group '{group_id}'"

        async def attempt() -> dict[TopicPartition, KafkaError | None]:
            _, conn = await self._coordinator(group_id)
            resp = await conn.request(OFFSET_DELETE, {
                "group_id": group_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            code = ErrorCode.of(resp.body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, what)
            return _partition_outcomes(resp.body.topics, what)

        results = await self._retrying(f"OffsetDelete({group_id})", attempt, timeout_ms)
        return {tp: results.get(tp) for tp in wanted}

    # -- share groups' offsets (KIP-932) ---------------------------------------------------

    async def list_share_group_offsets(self, group_id: str,
                                       partitions: Iterable[TopicPartition] | None = None, *,
                                       timeout_ms: int | None = None
                                       ) -> dict[TopicPartition, int | None]:
        """The share group's start offset on each partition (DescribeShareGroupOffsets):
        every partition it has state on, or those named; None where it has none. A group
        that does not exist, or is not a share group, raises GroupIdNotFoundError."""
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for tp in partitions:
                topics.setdefault(tp[0], []).append(tp[1])
        what = f"DescribeShareGroupOffsets for group '{group_id}'"

        async def attempt() -> dict[TopicPartition, int | None]:
            _, conn = await self._coordinator(group_id)
            resp = await conn.request(DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{
                "group_id": group_id,
                "topics": None if topics is None else [
                    {"topic_name": t, "partitions": ps} for t, ps in topics.items()]}]})
            g = next((g for g in resp.body.groups if g.group_id == group_id), None)
            if g is None:
                raise for_code(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: no answer")
            if g.error_code != ErrorCode.NONE:
                raise for_code(g.error_code, g.error_message or what)
            _raise_partition_error(g.topics, what, "topic_name")
            return dict(sorted(
                (TopicPartition(t.topic_name, p.partition_index),
                 p.start_offset if p.start_offset >= 0 else None)
                for t in g.topics for p in t.partitions))

        return await self._retrying(f"DescribeShareGroupOffsets({group_id})", attempt, timeout_ms)

    async def alter_share_group_offsets(self, group_id: str,
                                        offsets: Mapping[TopicPartition, int], *,
                                        timeout_ms: int | None = None) -> None:
        """Set the share group's start offsets (AlterShareGroupOffsets), which the
        coordinator accepts only while the group has no members: the records below each
        are done with, those from it on are delivered again. The first refused
        partition's error is raised."""
        topics: dict[str, list[dict]] = {}
        for tp, offset in offsets.items():
            if offset < 0:
                raise ValueError(f"offset must be >= 0, got {offset} for {tp}")
            topics.setdefault(tp[0], []).append({"partition_index": tp[1],
                                                 "start_offset": offset})
        if not topics:
            return
        what = f"AlterShareGroupOffsets for group '{group_id}'"

        async def attempt() -> None:
            _, conn = await self._coordinator(group_id)
            resp = await conn.request(ALTER_SHARE_GROUP_OFFSETS, {
                "group_id": group_id,
                "topics": [{"topic_name": t, "partitions": ps} for t, ps in topics.items()]})
            code = ErrorCode.of(resp.body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, resp.body.error_message or what)
            _raise_partition_error(resp.body.responses, what, "topic_name")

        await self._retrying(f"AlterShareGroupOffsets({group_id})", attempt, timeout_ms)

    async def delete_share_group_offsets(self, group_id: str, topics: Iterable[str], *,
                                         timeout_ms: int | None = None) -> None:
        """Delete the share group's state on whole topics (DeleteShareGroupOffsets): the
        next member starts there as share.auto.offset.reset says. Only while the group has
        no members; the first refused topic's error is raised."""
        names = list(dict.fromkeys(topics))
        what = f"DeleteShareGroupOffsets for group '{group_id}'"

        async def attempt() -> None:
            _, conn = await self._coordinator(group_id)
            resp = await conn.request(DELETE_SHARE_GROUP_OFFSETS, {
                "group_id": group_id, "topics": [{"topic_name": t} for t in names]})
            code = ErrorCode.of(resp.body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, resp.body.error_message or what)
            errors = [for_code(t.error_code, f"{what}: {t.topic_name}")
                      for t in resp.body.responses if t.error_code != ErrorCode.NONE]
            if errors:  # a final error first: retrying cannot help the others then
                raise next((e for e in errors if not _should_retry(e)), errors[0])

        if names:
            await self._retrying(f"DeleteShareGroupOffsets({group_id})", attempt, timeout_ms)

    async def delete_groups(self, group_ids: Iterable[str], *,
                            timeout_ms: int | None = None) -> None:
        """DeleteGroups on each group's coordinator: the group and its committed offsets.
        Every group is attempted; the first refused one is raised (NON_EMPTY_GROUP while it
        has members, GROUP_ID_NOT_FOUND), the others are gone."""
        wanted = list(dict.fromkeys(group_ids))
        failed: dict[str, KafkaError] = {}
        for group_id in wanted:
            async def attempt(group_id: str = group_id) -> None:
                _, conn = await self._coordinator(group_id)
                resp = await conn.request(DELETE_GROUPS, {"groups_names": [group_id]})
                result = next((r for r in resp.body.results if r.group_id == group_id), None)
                if result is None:
                    raise for_code(ErrorCode.UNKNOWN_SERVER_ERROR,
                                   f"DeleteGroups did not answer for group '{group_id}'")
                code = ErrorCode.of(result.error_code)
                if code is not ErrorCode.NONE:
                    raise for_code(code, f"group '{group_id}'")

            try:
                await self._retrying(f"DeleteGroups({group_id})", attempt, timeout_ms)
            except KafkaError as e:
                failed[group_id] = e
        _raise_first(wanted, failed)

    # -- the cluster -------------------------------------------------------------------

    async def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """The cluster id, the active controller and the brokers, from DescribeCluster."""
        async def attempt() -> ClusterDescription:
            conn = await self.pool.least_loaded()
            resp = await conn.request(DESCRIBE_CLUSTER, {
                "include_cluster_authorized_operations": False, "endpoint_type": 1})
            body = resp.body
            code = ErrorCode.of(body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, body.get("error_message") or "DescribeCluster")
            controller = body.controller_id
            return ClusterDescription(
                body.cluster_id, controller if controller >= 0 else None,
                tuple(sorted((Node(b.broker_id, b.host, b.port, b.get("rack"))
                              for b in body.brokers), key=lambda n: n.node_id)))

        return await self._retrying("DescribeCluster", attempt, timeout_ms)

    async def unregister_broker(self, broker_id: int, *,
                                timeout_ms: int | None = None) -> None:
        """Remove a broker's registration (UnregisterBroker, Kafka's Admin.unregisterBroker):
        the last step of decommissioning, once its replicas were moved away and the node
        stopped (a node still running registers again). BrokerIdNotRegisteredError for an
        id the controller does not know."""
        async def attempt() -> None:
            conn = await self.pool.least_loaded()
            body = (await conn.request(UNREGISTER_BROKER, {"broker_id": broker_id})).body
            code = ErrorCode.of(body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, body.get("error_message") or f"broker {broker_id}")

        await self._retrying("UnregisterBroker", attempt, timeout_ms)

    async def alter_partition_reassignments(
            self, reassignments: Mapping[TopicPartition, Sequence[int] | None], *,
            timeout_ms: int | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Move partitions' replicas to new brokers, or (None) cancel a move in progress
        (AlterPartitionReassignments, KIP-455). Each partition's outcome: None when the
        controller took it (the move runs on; list_partition_reassignments follows it)."""
        topics: dict[str, list[dict]] = {}
        for tp, replicas in reassignments.items():
            topics.setdefault(tp[0], []).append({
                "partition_index": tp[1],
                "replicas": None if replicas is None else list(replicas)})

        async def attempt() -> dict[TopicPartition, KafkaError | None]:
            conn = await self.pool.least_loaded()
            resp = await conn.request(ALTER_PARTITION_REASSIGNMENTS, {
                "timeout_ms": self._op_timeout(timeout_ms),
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            code = ErrorCode.of(resp.body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, resp.body.error_message or "AlterPartitionReassignments")
            return _partition_outcomes(resp.body.responses, "AlterPartitionReassignments")

        return await self._retrying("AlterPartitionReassignments", attempt, timeout_ms)

    async def list_partition_reassignments(
            self, partitions: Iterable[TopicPartition] | None = None, *,
            timeout_ms: int | None = None
            ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """The moves in progress (ListPartitionReassignments): each partition's replicas,
        adding replicas and removing replicas; of `partitions`, or every one."""
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for tp in partitions:
                topics.setdefault(tp[0], []).append(tp[1])

        async def attempt() -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
            conn = await self.pool.least_loaded()
            resp = await conn.request(LIST_PARTITION_REASSIGNMENTS, {
                "timeout_ms": self._op_timeout(timeout_ms),
                "topics": None if topics is None else [
                    {"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
            code = ErrorCode.of(resp.body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, resp.body.error_message or "ListPartitionReassignments")
            return {TopicPartition(t.name, p.partition_index):
                    (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                    for t in resp.body.topics for p in t.partitions}

        return await self._retrying("ListPartitionReassignments", attempt, timeout_ms)

    async def describe_log_dirs(self, broker_ids: Iterable[int] | None = None,
                                partitions: Iterable[TopicPartition] | None = None, *,
                                timeout_ms: int | None = None
                                ) -> dict[int, list[LogDirDescription]]:
        """Each broker's log directories and the replicas in them (DescribeLogDirs to each
        broker: every broker of the cluster, or `broker_ids`; every replica, or those of
        `partitions`)."""
        metadata = await self._retrying("Metadata", self.cluster.maybe_refresh, timeout_ms)
        wanted = sorted(metadata.brokers) if broker_ids is None else list(broker_ids)
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for tp in partitions:
                topics.setdefault(tp[0], []).append(tp[1])
        out: dict[int, list[LogDirDescription]] = {}
        for node_id in wanted:
            async def attempt(node_id: int = node_id) -> list[LogDirDescription]:
                conn = await self.pool.get(node_id)
                resp = await conn.request(DESCRIBE_LOG_DIRS, {"topics": None if topics is None
                                                              else [{"topic": t, "partitions": ps}
                                                                    for t, ps in topics.items()]})
                code = ErrorCode.of(resp.body.get("error_code", 0))
                if code is not ErrorCode.NONE:
                    raise for_code(code, f"DescribeLogDirs on broker {node_id}")
                return [LogDirDescription(
                    r.log_dir,
                    None if r.error_code == 0 else for_code(r.error_code, r.log_dir),
                    {TopicPartition(t.name, p.partition_index):
                     ReplicaInfo(p.partition_size, p.offset_lag, p.is_future_key)
                     for t in r.topics for p in t.partitions},
                    r.get("total_bytes", -1), r.get("usable_bytes", -1))
                    for r in resp.body.results]

            out[node_id] = await self._retrying(f"DescribeLogDirs({node_id})", attempt,
                                                timeout_ms)
        return out

    async def describe_features(self, *, timeout_ms: int | None = None) -> FeatureMetadata:
        """The cluster's finalized feature levels and a broker's supported ranges, from
        ApiVersions v3+ (KIP-584; Kafka's Admin.describeFeatures)."""
        async def attempt() -> FeatureMetadata:
            conn = await self.pool.least_loaded()
            resp = await conn.request(API_VERSIONS, {
                "client_software_name": "minibroker-admin", "client_software_version": "1"})
            if resp.api_version < 3:
                raise IncompatibleBrokerVersion("the broker does not report features "
                                                "(ApiVersions v3+)")
            body = resp.body
            if body.error_code != ErrorCode.NONE:
                raise for_code(body.error_code, "ApiVersions")
            epoch = body.finalized_features_epoch
            return FeatureMetadata(
                {f.name: f.max_version_level for f in body.finalized_features or []},
                epoch if epoch >= 0 else None,
                {f.name: (f.min_version, f.max_version) for f in body.supported_features or []})

        return await self._retrying("DescribeFeatures", attempt, timeout_ms)

    async def update_features(self, updates: Mapping[str, FeatureUpdate], *,
                              validate_only: bool = False,
                              timeout_ms: int | None = None) -> None:
        """Finalize feature levels (UpdateFeatures, KIP-584/KIP-778): all or none; the
        controller's refusal (INVALID_UPDATE_VERSION with its reason) is raised."""
        unknown = [u.upgrade_type for u in updates.values()
                   if u.upgrade_type not in FeatureUpdate.TYPES]
        if unknown:
            raise ValueError(f"unknown upgrade type {unknown[0]!r}: one of "
                             f"{', '.join(FeatureUpdate.TYPES)}")

        async def attempt() -> None:
            conn = await self.pool.least_loaded()
            resp = await conn.request(UPDATE_FEATURES, {
                "timeout_ms": self._op_timeout(timeout_ms), "validate_only": validate_only,
                "feature_updates": [
                    {"feature": name, "max_version_level": u.max_version_level,
                     "allow_downgrade": u.upgrade_type != "upgrade",
                     "upgrade_type": FeatureUpdate.TYPES[u.upgrade_type]}
                    for name, u in updates.items()]})
            body = resp.body
            if body.error_code != ErrorCode.NONE:
                raise for_code(body.error_code, body.error_message or "UpdateFeatures")
            for r in body.get("results") or []:
                if r.error_code != ErrorCode.NONE:
                    raise for_code(r.error_code, r.error_message or f"UpdateFeatures {r.feature}")

        await self._retrying("UpdateFeatures", attempt, timeout_ms)

    async def create_delegation_token(self, *, renewers: Iterable[str] = (),
                                      max_lifetime_ms: int = -1, owner: str | None = None,
                                      timeout_ms: int | None = None) -> DelegationToken:
        """CreateDelegationToken: a token for this connection's principal, or for `owner`
        ("User:name", which needs CREATE_TOKENS on that user); `renewers` may renew it;
        max_lifetime_ms -1 takes the broker's delegation.token.max.lifetime.ms."""
        renewer_list = [dict(zip(("principal_type", "principal_name"), _principal(r)))
                        for r in renewers]
        owner_type, owner_name = _principal(owner) if owner else (None, None)

        async def attempt() -> DelegationToken:
            conn = await self.pool.least_loaded()
            resp = await conn.request(CREATE_DELEGATION_TOKEN, {
                "owner_principal_type": owner_type, "owner_principal_name": owner_name,
                "renewers": renewer_list, "max_lifetime_ms": max_lifetime_ms})
            b = resp.body
            if b.error_code != ErrorCode.NONE:
                raise for_code(b.error_code, "CreateDelegationToken")
            requester = (f"{b.token_requester_principal_type}:{b.token_requester_principal_name}"
                         if b.get("token_requester_principal_name") else "")
            return DelegationToken(
                b.token_id, bytes(b.hmac), f"{b.principal_type}:{b.principal_name}", requester,
                tuple(f"{r['principal_type']}:{r['principal_name']}" for r in renewer_list),
                b.issue_timestamp_ms, b.expiry_timestamp_ms, b.max_timestamp_ms)

        return await self._retrying("CreateDelegationToken", attempt, timeout_ms)

    async def renew_delegation_token(self, hmac: bytes, *, renew_period_ms: int = -1,
                                     timeout_ms: int | None = None) -> int:
        """RenewDelegationToken: the token's new expiry (epoch ms)."""
        return await self._token_change(RENEW_DELEGATION_TOKEN, "RenewDelegationToken", {
            "hmac": hmac, "renew_period_ms": renew_period_ms}, timeout_ms)

    async def expire_delegation_token(self, hmac: bytes, *, expiry_time_period_ms: int = -1,
                                      timeout_ms: int | None = None) -> int:
        """ExpireDelegationToken: expire the token after the period, at once (removed)
        when it is negative; the new expiry (epoch ms)."""
        return await self._token_change(EXPIRE_DELEGATION_TOKEN, "ExpireDelegationToken", {
            "hmac": hmac, "expiry_time_period_ms": expiry_time_period_ms}, timeout_ms)

    async def _token_change(self, api_key: int, what: str, body: dict,
                            timeout_ms: int | None) -> int:
        async def attempt() -> int:
            conn = await self.pool.least_loaded()
            resp = await conn.request(api_key, body)
            if resp.body.error_code != ErrorCode.NONE:
                raise for_code(resp.body.error_code, what)
            return resp.body.expiry_timestamp_ms

        return await self._retrying(what, attempt, timeout_ms)

    async def describe_delegation_token(self, owners: Iterable[str] | None = None, *,
                                        timeout_ms: int | None = None
                                        ) -> list[DelegationToken]:
        """DescribeDelegationToken: the tokens of `owners` ("User:name"; None: every owner)
        this principal owns, may renew or may describe."""
        owner_list = (None if owners is None else
                      [dict(zip(("principal_type", "principal_name"), _principal(o)))
                       for o in owners])

        async def attempt() -> list[DelegationToken]:
            conn = await self.pool.least_loaded()
            resp = await conn.request(DESCRIBE_DELEGATION_TOKEN, {"owners": owner_list})
            b = resp.body
            if b.error_code != ErrorCode.NONE:
                raise for_code(b.error_code, "DescribeDelegationToken")
            return [DelegationToken(
                t.token_id, bytes(t.hmac), f"{t.principal_type}:{t.principal_name}",
                (f"{t.token_requester_principal_type}:{t.token_requester_principal_name}"
                 if t.get("token_requester_principal_name") else ""),
                tuple(f"{r.principal_type}:{r.principal_name}" for r in t.renewers),
                t.issue_timestamp, t.expiry_timestamp, t.max_timestamp) for t in b.tokens]

        return await self._retrying("DescribeDelegationToken", attempt, timeout_ms)

    async def alter_replica_log_dirs(self, moves: dict[tuple[TopicPartition, int], str], *,
                                     timeout_ms: int | None = None
                                     ) -> dict[tuple[TopicPartition, int], KafkaError | None]:
        """Move replicas between the log directories of their brokers (Kafka's
        alterReplicaLogDirs): {(partition, broker id): absolute directory path} -> the same
        keys, None where the move was accepted (it then runs in the background; see
        `describe_log_dirs`' future replicas), else the error (LogDirNotFound,
        KafkaStorageError, ReplicaNotAvailable, UnknownTopicOrPartition, ...)."""
        by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
        for (tp, broker_id), path in moves.items():
            by_broker.setdefault(broker_id, {}).setdefault(path, {}).setdefault(
                tp[0], []).append(tp[1])
        out: dict[tuple[TopicPartition, int], KafkaError | None] = {}
        for node_id, dirs in sorted(by_broker.items()):
            body = {"dirs": [{"path": path, "topics": [
                {"name": t, "partitions": ps} for t, ps in topics.items()]}
                for path, topics in dirs.items()]}

            async def attempt(node_id: int = node_id, body: dict = body) -> Any:
                conn = await self.pool.get(node_id)
                return await conn.request(ALTER_REPLICA_LOG_DIRS, body)

            resp = await self._retrying(f"AlterReplicaLogDirs({node_id})", attempt, timeout_ms)
            for t in resp.body.results:
                for p in t.partitions:
                    out[(TopicPartition(t.topic_name, p.partition_index), node_id)] = (
                        None if p.error_code == 0
                        else for_code(p.error_code, f"{t.topic_name}-{p.partition_index}"))
        return out

    async def describe_quorum(self, *, timeout_ms: int | None = None) -> QuorumInfo:
        """The metadata quorum (KIP-595) as its leader sees it, from DescribeQuorum."""
        async def attempt() -> QuorumInfo:
            conn = await self.pool.least_loaded()
            resp = await conn.request(DESCRIBE_QUORUM, {"topics": [{
                "topic_name": _METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
            body = resp.body
            code = ErrorCode.of(body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, body.get("error_message") or "DescribeQuorum")
            partition = next((p for t in body.topics if t.topic_name == _METADATA_TOPIC
                              for p in t.partitions if p.partition_index == 0), None)
            if partition is None:
                raise for_code(ErrorCode.UNKNOWN_SERVER_ERROR,
                               f"DescribeQuorum did not describe {_METADATA_TOPIC}-0")
            code = ErrorCode.of(partition.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, partition.get("error_message") or
                               f"DescribeQuorum of {_METADATA_TOPIC}-0")
            nodes = {n.node_id: (n.listeners[0].host, n.listeners[0].port)
                     for n in body.get("nodes") or () if n.listeners}
            leader = partition.leader_id
            return QuorumInfo(leader if leader >= 0 else None, partition.leader_epoch,
                              partition.high_watermark,
                              tuple(_replica_state(r) for r in partition.current_voters),
                              tuple(_replica_state(r) for r in partition.observers), nodes)

        return await self._retrying("DescribeQuorum", attempt, timeout_ms)

    async def add_raft_voter(self, voter_id: int, directory_id: uuid.UUID,
                             endpoints: Sequence[tuple[str, str, int]], *,
                             timeout_ms: int | None = None) -> None:
        """AddRaftVoter (KIP-853): make the controller `voter_id` (whose metadata log
        directory has `directory_id`, reachable at the (listener name, host, port)
        `endpoints`) a voter. It must be running and caught up as an observer first; the
        leader answers REQUEST_TIMED_OUT until it is, which is retried to the deadline."""
        body = {"cluster_id": None, "timeout_ms": self.config.request_timeout_ms,
                "voter_id": voter_id, "voter_directory_id": directory_id,
                "listeners": [{"name": n, "host": h, "port": p} for n, h, p in endpoints]}
        await self._voter_change("AddRaftVoter", ADD_RAFT_VOTER, body, timeout_ms)

    async def remove_raft_voter(self, voter_id: int, directory_id: uuid.UUID, *,
                                timeout_ms: int | None = None) -> None:
        """RemoveRaftVoter (KIP-853): `voter_id` of `directory_id` votes no more."""
        body = {"cluster_id": None, "voter_id": voter_id, "voter_directory_id": directory_id}
        await self._voter_change("RemoveRaftVoter", REMOVE_RAFT_VOTER, body, timeout_ms)

    async def _voter_change(self, what: str, api_key: int, body: dict,
                            timeout_ms: int | None) -> None:
        async def attempt() -> None:
            conn = await self.pool.least_loaded()
            resp = await conn.request(api_key, body)
            code = ErrorCode.of(resp.body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, resp.body.get("error_message") or what)

        await self._retrying(what, attempt, timeout_ms)

    # -- ACLs ----------------------------------------------------------------------------

    async def create_acls(self, bindings: Iterable[AclBinding], *,
                          timeout_ms: int | None = None) -> None:
        """CreateAcls; the first refused binding's error is raised (the others took
        effect)."""
        wanted = list(bindings)

        async def attempt() -> None:
            conn = await self._controller()
            resp = await conn.request(CREATE_ACLS, {"creations": [
                {"resource_type": b.resource_type, "resource_name": b.resource_name,
                 "resource_pattern_type": b.pattern_type, "principal": b.principal,
                 "host": b.host, "operation": b.operation,
                 "permission_type": b.permission_type} for b in wanted]})
            for binding, result in zip(wanted, resp.body.results):
                code = ErrorCode.of(result.error_code)
                if code is not ErrorCode.NONE:
                    raise for_code(code, result.get("error_message") or f"CreateAcls {binding}")

        await self._retrying("CreateAcls", attempt, timeout_ms)

    async def describe_acls(self, acl_filter: AclBindingFilter = AclBindingFilter(), *,
                            timeout_ms: int | None = None) -> list[AclBinding]:
        """DescribeAcls: every ACL the filter matches."""
        async def attempt() -> list[AclBinding]:
            conn = await self.pool.least_loaded()
            resp = await conn.request(DESCRIBE_ACLS, acl_filter.body())
            body = resp.body
            code = ErrorCode.of(body.error_code)
            if code is not ErrorCode.NONE:
                raise for_code(code, body.get("error_message") or "DescribeAcls")
            return [AclBinding(r.resource_type, r.resource_name, r.get("pattern_type", 3),
                               a.principal, a.host, a.operation, a.permission_type)
                    for r in body.resources for a in r.acls]

        return await self._retrying("DescribeAcls", attempt, timeout_ms)

    async def delete_acls(self, filters: Iterable[AclBindingFilter], *,
                          timeout_ms: int | None = None) -> list[AclBinding]:
        """DeleteAcls: the ACLs deleted (each filter's matches, in order)."""
        wanted = list(filters)

        async def attempt() -> list[AclBinding]:
            conn = await self._controller()
            resp = await conn.request(DELETE_ACLS, {"filters": [f.body() for f in wanted]})
            deleted: list[AclBinding] = []
            for result in resp.body.filter_results:
                code = ErrorCode.of(result.error_code)
                if code is not ErrorCode.NONE:
                    raise for_code(code, result.get("error_message") or "DeleteAcls")
                deleted += [AclBinding(a.resource_type, a.resource_name,
                                       a.get("pattern_type", 3), a.principal, a.host,
                                       a.operation, a.permission_type)
                            for a in result.matching_acls]
            return deleted

        return await self._retrying("DeleteAcls", attempt, timeout_ms)

    # -- plumbing ----------------------------------------------------------------------

    async def describe_user_scram_credentials(
            self, users: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        """Each user's SCRAM mechanisms and iterations (every user's when `users` is None);
        a named user with no credential raises RESOURCE_NOT_FOUND."""
        names = None if users is None else list(users)

        async def attempt() -> dict[str, list[ScramCredentialInfo]]:
            conn = await self.pool.least_loaded()
            resp = await conn.request(DESCRIBE_USER_SCRAM_CREDENTIALS, {
                "users": None if names is None else [{"name": n} for n in names]})
            body = resp.body
            if body.error_code != ErrorCode.NONE:
                raise for_code(body.error_code, body.error_message)
            out = {}
            for r in body.results:
                if r.error_code != ErrorCode.NONE:
                    raise for_code(r.error_code, r.error_message)
                out[r.user] = [ScramCredentialInfo(SCRAM_BY_ID[c.mechanism].name, c.iterations)
                               for c in r.credential_infos if c.mechanism in SCRAM_BY_ID]
            return out

        return await self._retrying("DescribeUserScramCredentials", attempt, timeout_ms)

    async def alter_user_scram_credentials(
            self, alterations: Iterable[UserScramCredentialUpsertion
                                        | UserScramCredentialDeletion],
            *, timeout_ms: int | None = None) -> None:
        """KIP-554: add, replace or delete SCRAM credentials. The password is salted here
        (a random salt, PBKDF2), so it never leaves this process; the first refused
        alteration is raised (UNACCEPTABLE_CREDENTIAL, RESOURCE_NOT_FOUND...)."""
        deletions, upsertions = [], []
        for a in alterations:
            mechanism = SCRAM_MECHANISMS.get(a.mechanism.upper())
            if mechanism is None:
                raise for_code(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                               f"unknown SCRAM mechanism {a.mechanism!r}")
            if isinstance(a, UserScramCredentialDeletion):
                deletions.append({"name": a.user, "mechanism": mechanism.id})
                continue
            salt = a.salt if a.salt is not None else os.urandom(32)
            upsertions.append({
                "name": a.user, "mechanism": mechanism.id, "iterations": a.iterations,
                "salt": salt,
                "salted_password": mechanism.salted_password(a.password, salt, a.iterations)
                if a.iterations > 0 else b""})

        async def attempt() -> None:
            conn = await self.pool.least_loaded()
            resp = await conn.request(ALTER_USER_SCRAM_CREDENTIALS,
                                      {"deletions": deletions, "upsertions": upsertions})
            for r in resp.body.results:
                if r.error_code != ErrorCode.NONE:
                    raise for_code(r.error_code, f"{r.user}: {r.error_message}")

        await self._retrying("AlterUserScramCredentials", attempt, timeout_ms)

    # -- client quotas (KIP-546) ---------------------------------------------------------

    async def describe_client_quotas(
            self, components: Iterable[ClientQuotaFilterComponent] = (), *,
            strict: bool = False, timeout_ms: int | None = None
    ) -> dict[QuotaEntity, dict[str, float]]:
        """The quotas of every entity the filter matches (Kafka's ClientQuotaFilter: no
        component and not strict matches every entity), by entity: ((entity type, name or
        None for the default), ...) sorted by type."""
        wanted = [{"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match}
                  for c in components]

        async def attempt() -> dict[QuotaEntity, dict[str, float]]:
            conn = await self.pool.least_loaded()
            resp = await conn.request(DESCRIBE_CLIENT_QUOTAS,
                                      {"components": wanted, "strict": strict})
            body = resp.body
            if body.error_code != ErrorCode.NONE:
                raise for_code(body.error_code, body.error_message)
            return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
                    {v.key: v.value for v in entry["values"]} for entry in body.entries or ()}

        return await self._retrying("DescribeClientQuotas", attempt, timeout_ms)

    async def alter_client_quotas(self, alterations: Iterable[ClientQuotaAlteration], *,
                                  validate_only: bool = False,
                                  timeout_ms: int | None = None) -> None:
        """Set (a number) or remove (None) quota keys of entities; the first refused entry
        is raised (INVALID_REQUEST for an unknown key or a negative value...), the others
        took effect."""
        entries = [{"entity": [{"entity_type": t, "entity_name": n}
                               for t, n in a.entity.items()],
                    "ops": [{"key": k, "value": 0.0 if v is None else float(v),
                             "remove": v is None} for k, v in a.ops.items()]}
                   for a in alterations]

        async def attempt() -> None:
            conn = await self.pool.least_loaded()
            resp = await conn.request(ALTER_CLIENT_QUOTAS,
                                      {"entries": entries, "validate_only": validate_only})
            for r in resp.body.entries:
                if r.error_code != ErrorCode.NONE:
                    entity = ",".join(f"{e.entity_type}={e.entity_name}" for e in r.entity)
                    raise for_code(r.error_code, f"{entity}: {r.error_message}")

        await self._retrying("AlterClientQuotas", attempt, timeout_ms)

    # -- transactions ------------------------------------------------------------------

    async def list_transactions(self, *, state_filters: Iterable[str] = (),
                                producer_id_filters: Iterable[int] = (),
                                duration_filter_ms: int = -1,
                                transactional_id_pattern: str | None = None,
                                timeout_ms: int | None = None) -> list[TransactionListing]:
        """The transactions every broker coordinates (ListTransactions to each, merged, as
        Kafka's Admin.listTransactions), sorted by transactional id. The filters are Kafka's
        ListTransactionsOptions: state names ("Ongoing", ...), producer ids, running at
        least `duration_filter_ms` (needs ListTransactions v1), a regular expression the
        whole id matches (v2); IncompatibleBrokerVersion when a broker cannot take one
        given."""
        states, producer_ids = list(state_filters), list(producer_id_filters)
        metadata = await self._retrying("Metadata", self.cluster.maybe_refresh, timeout_ms)
        found: dict[str, TransactionListing] = {}
        for node_id in sorted(metadata.brokers):
            async def attempt(node_id: int = node_id) -> Any:
                conn = await self.pool.get(node_id)
                version = conn.version_for(LIST_TRANSACTIONS)
                if ((duration_filter_ms >= 0 and version < 1)
                        or (transactional_id_pattern and version < 2)):
                    raise IncompatibleBrokerVersion(
                        f"ListTransactions v{version} on node {node_id} cannot filter by "
                        f"{'duration' if duration_filter_ms >= 0 else 'transactional id'}")
                resp = await conn.request(LIST_TRANSACTIONS, {
                    "state_filters": states, "producer_id_filters": producer_ids,
                    "duration_filter": duration_filter_ms,
                    "transactional_id_pattern": transactional_id_pattern or None}, version)
                if resp.body.error_code != ErrorCode.NONE:
                    raise for_code(resp.body.error_code, f"ListTransactions on node {node_id}")
                return resp.body

            body = await self._retrying(f"ListTransactions on node {node_id}", attempt,
                                        timeout_ms)
            for s in body.transaction_states:
                found[s.transactional_id] = TransactionListing(
                    s.transactional_id, s.producer_id, s.transaction_state, node_id)
        return [found[t] for t in sorted(found)]

    async def describe_transactions(self, transactional_ids: Iterable[str], *,
                                    timeout_ms: int | None = None
                                    ) -> dict[str, TransactionDescription]:
        """Each transactional id's state on its coordinator (FindCoordinator key type 1,
        then DescribeTransactions), by id, in order; TransactionalIdNotFoundError for an id
        the coordinator does not know."""
        out: dict[str, TransactionDescription] = {}
        for transactional_id in dict.fromkeys(transactional_ids):
            async def attempt(tid: str = transactional_id) -> TransactionDescription:
                node_id, conn = await find_coordinator(self.pool, tid, TRANSACTION_KEY)
                resp = await conn.request(DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})
                s = next((s for s in resp.body.transaction_states
                          if s.transactional_id == tid), None)
                if s is None:
                    raise for_code(ErrorCode.UNKNOWN_SERVER_ERROR,
                                   f"DescribeTransactions did not describe '{tid}'")
                if s.error_code != ErrorCode.NONE:
                    raise for_code(s.error_code, f"transactional id '{tid}'")
                return TransactionDescription(
                    tid, node_id, s.transaction_state, s.producer_id, s.producer_epoch,
                    s.transaction_timeout_ms,
                    s.transaction_start_time_ms if s.transaction_start_time_ms >= 0 else None,
                    tuple(sorted(TopicPartition(t.topic, p)
                                 for t in s.topics for p in t.partitions)))

            out[transactional_id] = await self._retrying(
                f"DescribeTransactions({transactional_id})", attempt, timeout_ms)
        return out

    async def describe_producers(self, partitions: Iterable[TopicPartition], *,
                                 broker_id: int | None = None, timeout_ms: int | None = None
                                 ) -> dict[TopicPartition, list[ProducerState]]:
        """The producers each partition remembers (DescribeProducers, KIP-664), asked of its
        leader, or of the replica on `broker_id` (Kafka's DescribeProducersOptions.brokerId:
        there NOT_LEADER_OR_FOLLOWER, no replica, is raised rather than retried). By
        partition, in order; the first partition that fails raises."""
        wanted = list(dict.fromkeys(TopicPartition(t, p) for t, p in partitions))
        remaining = set(wanted)
        found: dict[TopicPartition, list[ProducerState]] = {}
        failed: dict[TopicPartition, KafkaError] = {}

        async def attempt() -> None:
            metadata = await self.cluster.maybe_refresh()
            if broker_id is not None and broker_id not in metadata.brokers:
                raise for_code(ErrorCode.BROKER_NOT_AVAILABLE,
                               f"broker {broker_id} is not in the cluster metadata")
            by_node: dict[int, list[TopicPartition]] = {}
            retry: KafkaError | None = None
            for tp in wanted:
                if tp not in remaining:
                    continue
                node = broker_id
                if node is None:
                    error, node = _leader_or_error(metadata, tp)
                    if error is not None:
                        if _should_retry(error):
                            retry = retry or error
                        else:
                            failed[tp] = error
                            remaining.discard(tp)
                        continue
                assert node is not None
                by_node.setdefault(node, []).append(tp)
            for node, tps in sorted(by_node.items()):
                conn = await self.pool.get(node)
                topics: dict[str, list[int]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(tp.partition)
                resp = await conn.request(DESCRIBE_PRODUCERS, {"topics": [
                    {"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
                for t in resp.body.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if tp not in remaining:
                            continue
                        code = ErrorCode.of(p.error_code)
                        if code is not ErrorCode.NONE:
                            error = for_code(code, p.get("error_message")
                                             or f"DescribeProducers {tp.topic}-{tp.partition} "
                                                f"on node {node}")
                            if _should_retry(error) and not (
                                    broker_id is not None
                                    and code is ErrorCode.NOT_LEADER_OR_FOLLOWER):
                                retry = retry or error
                                continue
                            failed[tp] = error
                        else:
                            found[tp] = [_producer_state(s) for s in p.active_producers]
                        remaining.discard(tp)
            if remaining:
                raise retry or for_code(ErrorCode.LEADER_NOT_AVAILABLE,
                                        f"no answer for {len(remaining)} partitions")

        await self._retrying("DescribeProducers", attempt, timeout_ms)
        for tp in wanted:
            if tp in failed:
                raise failed[tp]
        return {tp: found[tp] for tp in wanted}

    async def abort_transaction(self, topic: str, partition: int, producer_id: int,
                                producer_epoch: int, coordinator_epoch: int, *,
                                timeout_ms: int | None = None) -> None:
        """Write an ABORT marker for this producer's transaction in one partition, on its
        leader (WriteTxnMarkers, as Kafka's Admin.abortTransaction does): how an operator
        ends a hanging transaction that holds the partition's last stable offset back. The
        principal needs CLUSTER_ACTION. The leader refuses an epoch older than the
        producer's (InvalidProducerEpochError) and a coordinator epoch older than its last
        marker's (TransactionCoordinatorFencedError)."""
        tp = TopicPartition(topic, partition)
        what = (f"ABORT marker of producer {producer_id} (epoch {producer_epoch}, coordinator "
                f"epoch {coordinator_epoch}) in {topic}-{partition}")

        async def attempt() -> None:
            metadata = await self.cluster.maybe_refresh()
            error, leader = _leader_or_error(metadata, tp)
            if error is not None:
                raise error
            assert leader is not None
            conn = await self.pool.get(leader)
            resp = await conn.request(WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch,
                "transaction_result": False, "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": topic, "partition_indexes": [partition]}]}]})
            answers = [(m.producer_id, t.name, p.partition_index, p.error_code)
                       for m in resp.body.markers for t in m.topics for p in t.partitions]
            if len(answers) != 1 or answers[0][:3] != (producer_id, topic, partition):
                raise for_code(ErrorCode.UNKNOWN_SERVER_ERROR,
                               f"WriteTxnMarkers answered {answers} for the {what}")
            code = ErrorCode.of(answers[0][3])
            if code is not ErrorCode.NONE:
                raise for_code(code, what)

        await self._retrying("WriteTxnMarkers", attempt, timeout_ms)

    def _op_timeout(self, timeout_ms: int | None) -> int:
        """The broker-side timeout_ms of topic operations."""
        return self.config.request_timeout_ms if timeout_ms is None else timeout_ms

    async def _controller(self) -> BrokerConnection:
        """The controller's connection (Metadata names it), else the least-loaded one."""
        metadata = await self.cluster.maybe_refresh()
        node_id = metadata.controller_id
        if node_id is not None and node_id in self.pool.nodes:
            return await self.pool.get(node_id)
        return await self.pool.least_loaded()

    async def _coordinator(self, group_id: str) -> tuple[int, BrokerConnection]:
        return await find_group_coordinator(self.pool, group_id)

    def _settle(self, results: Iterable[Any], remaining: dict, failed: dict[str, KafkaError],
                on_success: Callable[[Any], None]) -> None:
        """Sort per-topic results: successes and final errors leave `remaining`; when a
        retriable error remains, raise it so that `_retrying` tries those topics again."""
        retry: KafkaError | None = None
        for r in results:
            name = r.name
            if name not in remaining:
                continue
            code = ErrorCode.of(r.error_code)
            if code is ErrorCode.NONE:
                on_success(r)
                del remaining[name]
                continue
            detail = r.get("error_message")
            error = for_code(code, f"topic '{name}'" + (f": {detail}" if detail else ""))
            if _should_retry(error):
                retry = retry or error
            else:
                failed[name] = error
                del remaining[name]
        if retry is not None and remaining:
            raise retry

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]],
                        timeout_ms: int | None) -> T:
        """Run `attempt` until it succeeds, raises a non-retriable error, or the call's
        deadline (default_api_timeout_ms) passes; back off between tries."""
        def on_retry(e: KafkaError) -> None:
            if e.refresh_metadata or e.code is ErrorCode.NOT_CONTROLLER:
                self.cluster.request_update()

        return await retry_until_deadline(
            what, attempt,
            budget_ms=self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms,
            backoff_s=self.config.retry_backoff_s, should_retry=_should_retry,
            on_retry=on_retry, max_retries=self.config.retries)


# a client quota entity: ((entity type, name or None for the default), ...) sorted by type
QuotaEntity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class ClientQuotaFilterComponent:
    """One component of a DescribeClientQuotas filter (Kafka's ClientQuotaFilterComponent):
    match_type 0 the entity named `match`, 1 the default entity, 2 any entity of the type."""
    entity_type: str  # "user", "client-id" or "ip"
    match: str | None = None
    match_type: int = 0

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, name, 0)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, None, 1)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, None, 2)


@dataclass(frozen=True)
class ClientQuotaAlteration:
    """Quota keys to set (a number) or remove (None) on one entity (Kafka's
    ClientQuotaAlteration); the entity maps entity types to names, None the default."""
    entity: Mapping[str, str | None]
    ops: Mapping[str, float | None]


@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    iterations: int


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    """Add or replace `user`'s credential for `mechanism` (salt: random unless given)."""
    user: str
    mechanism: str
    password: str
    iterations: int = 4096
    salt: bytes | None = None


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    user: str
    mechanism: str


def _should_retry(error: KafkaError) -> bool:
    return error.retriable and error.code not in _NOT_RETRIED


def _leader_or_error(metadata: ClusterMetadata, tp: TopicPartition
                     ) -> tuple[KafkaError | None, int | None]:
    """The partition's leader, or the error to raise instead: the topic's own error, or
    UNKNOWN_TOPIC_OR_PARTITION, for a topic or partition the metadata does not have;
    LEADER_NOT_AVAILABLE (retriable) while it has no leader."""
    if tp.topic not in metadata.topics:
        code = metadata.topic_errors.get(tp.topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return for_code(code, f"topic '{tp.topic}'"), None
    if tp.partition not in (metadata.partitions_for(tp.topic) or ()):
        return for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"topic '{tp.topic}' has no partition {tp.partition}"), None
    leader = metadata.leader_for(tp.topic, tp.partition)
    if leader is None:
        return for_code(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp.topic}-{tp.partition}"), None
    return None, leader


def _producer_state(s: Any) -> ProducerState:
    return ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                         s.coordinator_epoch if s.coordinator_epoch >= 0 else None,
                         s.current_txn_start_offset if s.current_txn_start_offset >= 0
                         else None)


def _raise_first(order: Iterable[Any], failed: dict[str, KafkaError]) -> None:
    for item in order:
        name = item.name if isinstance(item, NewTopic) else item
        if name in failed:
            raise failed[name]


def _check_resource_types(resources: Iterable[ConfigResource]) -> None:
    for r in resources:
        if r.type not in _RESOURCE_TYPES:
            raise ValueError(f"config resource type must be one of "
                             f"{', '.join(_RESOURCE_TYPES)}, got {r.type!r}")


def _partition_outcomes(topics: Any, what: str) -> dict[TopicPartition, KafkaError | None]:
    """Each partition's outcome in an answer listing topics by name (None: done); a
    retriable error is raised, for the caller's `_retrying` to ask again."""
    out: dict[TopicPartition, KafkaError | None] = {}
    for t in topics:
        for p in t.partitions:
            code = ErrorCode.of(p.error_code)
            error = (None if code is ErrorCode.NONE else for_code(
                code, p.get("error_message") or f"{what}: {t.name}-{p.partition_index}"))
            if error is not None and _should_retry(error):
                raise error
            out[TopicPartition(t.name, p.partition_index)] = error
    return out


def _raise_partition_error(topics: Any, what: str, name_field: str = "name") -> None:
    """The first partition error of an OffsetCommit / OffsetDelete / AlterShareGroupOffsets
    answer, raised; a retriable one only when no final one is there."""
    retry: KafkaError | None = None
    for t in topics:
        for p in t.partitions:
            code = ErrorCode.of(p.error_code)
            if code is ErrorCode.NONE:
                continue
            error = for_code(code, f"{what}: {getattr(t, name_field)}-{p.partition_index}")
            if not _should_retry(error):
                raise error
            retry = retry or error
    if retry is not None:
        raise retry


def _uuid(value: Any) -> uuid.UUID | None:
    return None if value in (None, ZERO_UUID) else value


def _new_topic_body(t: NewTopic, version: int) -> dict:
    partitions, rf = t.num_partitions, t.replication_factor
    assignments = []
    if t.replica_assignments is not None:
        assignments = [{"partition_index": p, "broker_ids": list(b)}
                       for p, b in sorted(t.replica_assignments.items())]
        partitions, rf = -1, -1
    elif version < 4:  # -1 (broker default) needs CreateTopics v4 (KIP-464)
        partitions = 1 if partitions == -1 else partitions
        rf = 1 if rf == -1 else rf
    return {"name": t.name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": assignments,
            "configs": [{"name": k, "value": v} for k, v in t.configs.items()]}


def _replica_state(r: Any) -> ReplicaState:
    def known(ms: int) -> int | None:
        return ms if ms >= 0 else None
    return ReplicaState(r.replica_id, r.log_end_offset,
                        known(r.get("last_fetch_timestamp", -1)),
                        known(r.get("last_caught_up_timestamp", -1)),
                        r.get("replica_directory_id"))


def _config_entry(c: Any) -> ConfigEntry:
    source = c.get("config_source", -1)
    is_default = (source == _DEFAULT_CONFIG_SOURCE if source >= 0
                  else bool(c.get("is_default", False)))
    return ConfigEntry(c.name, c.value, source, is_default, bool(c.read_only),
                       bool(c.is_sensitive),
                       tuple((y.name, y.value, y.source) for y in c.get("synonyms") or ()))


def _group_description(g: Any, node_id: int) -> GroupDescription:
    members = []
    for m in g.members:
        assignment: tuple[TopicPartition, ...] = ()
        if g.protocol_type == "consumer" and m.member_assignment:
            try:
                decoded = decode_assignment(m.member_assignment)
            except ProtocolError:
                decoded = None
            if decoded is not None:
                assignment = tuple(sorted(TopicPartition(t, p)
                                          for t, ps in decoded.partitions.items() for p in ps))
        members.append(MemberDescription(
            m.member_id, m.get("group_instance_id"), m.client_id, m.client_host, assignment,
            bytes(m.member_metadata), bytes(m.member_assignment)))
    return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data,
                            tuple(members), node_id)


def _topic_partitions(assignment: Any) -> tuple[TopicPartition, ...]:
    return tuple(sorted(TopicPartition(t.topic_name, p)
                        for t in assignment.topic_partitions for p in t.partitions))


def _share_group_description(g: Any, node_id: int) -> ShareGroupDescription:
    return ShareGroupDescription(
        g.group_id, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name,
        tuple(ShareGroupMemberDescription(
            m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
            tuple(m.subscribed_topic_names), _topic_partitions(m.assignment))
            for m in g.members), node_id)


def _consumer_group_description(g: Any, node_id: int) -> ConsumerGroupDescription:
    return ConsumerGroupDescription(
        g.group_id, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name,
        tuple(ConsumerGroupMemberDescription(
            m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
            tuple(m.subscribed_topic_names), m.subscribed_topic_regex,
            _topic_partitions(m.assignment), _topic_partitions(m.target_assignment))
            for m in g.members), node_id)
