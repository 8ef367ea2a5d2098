"""The metadata image: the cluster's state as replaying `__cluster_metadata` leaves it.

Owns `MetadataImage`, an immutable value built by replaying the metadata records declared in
`protocol.metadata_records` one at a time (`MetadataImage.EMPTY.apply(type, version, body)`,
or `replay` over many), after Kafka's `MetadataImage` and the deltas that produce one
(`ClusterDelta`, `TopicsDelta`, `ConfigurationsDelta`, `ProducerIdsDelta`, `FeaturesDelta`):

- brokers (`BrokerRegistration`): a RegisterBrokerRecord replaces the broker's registration
  whole, a new incarnation included; FenceBrokerRecord, UnfenceBrokerRecord and
  BrokerRegistrationChangeRecord must name the broker's current epoch, since a record for
  an older registration is a bug upstream. A registration lists the broker's online log
  directories (KIP-858); a change record with a non-empty `log_dirs` replaces them, and
  `(LOST_DIR,)` says that none is left (see `BrokerRegistration.has_online_dir`);
- topics (`TopicImage`) by id and by name; PartitionRecord adds or replaces a partition and
  PartitionChangeRecord is merged by `election.PartitionRegistration.merge`, the same rule the
  controller uses, so that the two cannot drift apart (both carry KIP-966's eligible leader
  replicas and last known ELR from version 2; an older record leaves them empty, or
  unchanged); RemoveTopicRecord drops the topic, its
  partitions and its configs, as Kafka's `MetadataDelta` does;
- configs per (resource type, resource name), where a null value deletes the key;
- the next producer id block (ProducerIdsRecord) and feature levels (FeatureLevelRecord, level
  0 removing the feature); NoOpRecord changes nothing;
- SCRAM credentials by (user, mechanism) (UserScramCredentialRecord replaces one,
  RemoveUserScramCredentialRecord drops it), delegation tokens by id
  (DelegationTokenRecord adds or renews one, RemoveDelegationTokenRecord drops it) and ACLs
  by id (AccessControlEntryRecord, RemoveAccessControlEntryRecord): what every broker
  authenticates and authorizes with;
- client quotas (KIP-546) by entity, a sorted tuple of (entity type, name) pairs, a None
  name being the type's default entity (`QuotaEntity`): ClientQuotaRecord sets or removes
  one key, and an entity left without keys goes, as in Kafka's ClientQuotaControlManager.

A record naming a topic, partition or broker the image does not hold raises
`MetadataImageError`: the log is inconsistent and replaying past it would hide that.

Pure: no I/O and no clock. `apply` copies only the mappings a record touches (each topic keeps
its own partitions mapping), so an image handed to a reader never changes under it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from broker.controller.election import (
    NO_LEADER, LeaderRecoveryState, PartitionChangeRecord, PartitionRegistration,
)
from protocol.metadata_records import MetadataRecordType as T

K = TypeVar("K")
V = TypeVar("V")

# Kafka's ConfigResource.Type numbers for the resources whose configs the log carries
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32


# Kafka's DirectoryId: the first 100 ids are reserved, never a real directory's. LOST stands
# for "offline directories": a registration whose only directory is LOST has none online.
LOST_DIR = uuid.UUID(int=2)
RESERVED_DIRS = 100


def is_reserved_dir(directory: uuid.UUID) -> bool:
    return directory.int < RESERVED_DIRS


class MetadataImageError(ValueError):
    """A record that cannot apply to this image: it names something the image lacks."""


def _frozen(mapping: dict[K, V]) -> Mapping[K, V]:
    return MappingProxyType(mapping)


def _with(mapping: Mapping[K, V], key: K, value: V) -> Mapping[K, V]:
    copy = dict(mapping)
    copy[key] = value
    return _frozen(copy)


def _without(mapping: Mapping[K, V], key: K) -> Mapping[K, V]:
    copy = dict(mapping)
    copy.pop(key, None)
    return _frozen(copy)


def _ints(values: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


def _uuids(values: Iterable[uuid.UUID] | None) -> tuple[uuid.UUID, ...] | None:
    return None if values is None else tuple(values)


@dataclass(frozen=True)
class BrokerEndpoint:
    """One of a broker's listeners, as RegisterBrokerRecord lists them."""

    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True)
class BrokerRegistration:
    """Kafka's `BrokerRegistration`: one broker as the controller has registered it."""

    broker_id: int
    incarnation_id: uuid.UUID
    epoch: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()  # online; empty for a broker that named none

    @property
    def has_online_dir(self) -> bool:
        """Whether it can host replicas: some directory online. A replica in a failed
        directory of a broker that has others is offline on its own
        (PartitionRegistration.directory_of, MetadataCache.offline_replicas). Kafka likewise
        takes a registration naming no directory (an older broker) to have them online;
        unlike Kafka, whose broker halts when its last directory fails, ours stays up with
        none (`LOST_DIR` alone)."""
        return self.log_dirs != (LOST_DIR,)

    @property
    def active(self) -> bool:
        """May lead and join ISRs (election.py's "active"): unfenced, not shutting down and
        with a log directory online."""
        return not self.fenced and not self.in_controlled_shutdown and self.has_online_dir

    def endpoint(self, listener: str) -> BrokerEndpoint | None:
        return next((e for e in self.endpoints if e.name == listener), None)


@dataclass(frozen=True)
class TopicImage:
    """Kafka's `TopicImage`: a topic's name, id and partitions by partition id."""

    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = field(
        default_factory=lambda: _frozen({}))


@dataclass(frozen=True)
class ScramCredential:
    """One user's salted SCRAM credential for one mechanism (RFC 5802's StoredKey and
    ServerKey, never the password), as UserScramCredentialRecord carries it."""

    user: str
    mechanism: int  # Kafka's ScramMechanism: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True)
class DelegationToken:
    """One delegation token as DelegationTokenRecord carries it (Kafka's TokenInformation):
    principals as "User:name" strings, times in epoch milliseconds. Its HMAC is not kept:
    it is computed from the token id and the cluster's secret (broker.security.tokens)."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int


@dataclass(frozen=True)
class AclBinding:
    """One access control entry on one resource pattern, as AccessControlEntryRecord
    carries it (Kafka's AclBinding; the numbers are Kafka's ResourceType, PatternType,
    AclOperation and AclPermissionType)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


# A client quota entity: ((entity type, name or None for the default), ...), sorted by type
QuotaEntity = tuple[tuple[str, str | None], ...]


def quota_entity(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


@dataclass(frozen=True)
class MetadataImage:
    """The whole cluster's metadata after some prefix of the metadata log."""

    EMPTY: ClassVar[MetadataImage]

    brokers: Mapping[int, BrokerRegistration]
    topics_by_id: Mapping[uuid.UUID, TopicImage]
    topic_ids_by_name: Mapping[str, uuid.UUID]
    configs: Mapping[tuple[int, str], Mapping[str, str]]
    features: Mapping[str, int]
    next_producer_id: int = 0
    scram_credentials: Mapping[tuple[str, int], ScramCredential] = field(
        default_factory=lambda: _frozen({}))
    acls: Mapping[uuid.UUID, AclBinding] = field(default_factory=lambda: _frozen({}))
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(
        default_factory=lambda: _frozen({}))
    delegation_tokens: Mapping[str, DelegationToken] = field(
        default_factory=lambda: _frozen({}))

    # --- replay -------------------------------------------------------------------------

    def apply(self, record_type: int, version: int, body: Any) -> MetadataImage:
        """This image after one record, as `decode_metadata_record` returns it. `version`
        is accepted for symmetry with the decoder: every field read here exists in every
        version we declare, and a missing one takes its default."""
        del version
        try:
            kind = T(record_type)
        except ValueError:
            raise MetadataImageError(f"unknown metadata record type {record_type}") from None
        if kind in _BULK or kind in _PARTITION_RECORDS:
            return self.replay([(record_type, 0, body)])
        handler = _HANDLERS[kind]
        return handler(self, body)

    def replay(self, records: Iterable[tuple[int, int, Any]]) -> MetadataImage:
        """The image after `records`. A run of ACL or SCRAM records (CreateAcls writes one
        per ACL) changes one copy of its mapping, not a copy per record: 10,000 ACLs
        replayed one copy each took 21 s, the copies growing with the mapping; so does a
        run of ConfigRecords (IncrementalAlterConfigs writes one per key: 100,000 of them
        took 2.6 s to replay a copy each, a node's restart waiting on it). A run of
        partition records likewise changes one copy of each topic's partitions: a
        CreateTopics of 3,000 partitions copied the growing map 3,000 times, a second of
        the controller's loop."""
        image = self
        scratch: dict[str, dict] = {}  # mapping field -> its working copy
        partitions: dict[uuid.UUID, dict[int, PartitionRegistration]] = {}  # topic id ->
        for record_type, version, body in records:
            if record_type in _PARTITION_RECORDS:
                image = image._with_mappings(scratch)
                scratch = {}
                image._partition_record(record_type, body, partitions)
                continue
            image = image._with_partitions(partitions)
            partitions = {}
            bulk = _BULK.get(record_type)
            if bulk is None:
                image = image._with_mappings(scratch)
                scratch = {}
                image = image.apply(record_type, version, body)
                continue
            name, change = bulk
            if name not in scratch:
                scratch[name] = dict(getattr(image, name))
            change(scratch[name], body)
        return image._with_partitions(partitions)._with_mappings(scratch)

    def _partition_record(self, record_type: int, body: Any,
                          partitions: dict[uuid.UUID, dict[int, PartitionRegistration]]
                          ) -> None:
        """A PartitionRecord or PartitionChangeRecord applied to the working copy of its
        topic's partitions (`_with_partitions` makes the copies part of an image)."""
        adding = record_type == T.PARTITION_RECORD
        what = (f"add partition {body.partition_id} to" if adding
                else f"change partition {body.partition_id} of")
        topic = self._topic_or_raise(body.topic_id, what)
        working = partitions.get(topic.topic_id)
        if working is None:
            working = partitions[topic.topic_id] = dict(topic.partitions)
        if adding:
            working[body.partition_id] = PartitionRegistration(
                replicas=tuple(body.replicas), isr=tuple(body.isr), leader=body.leader,
                leader_epoch=body.leader_epoch, partition_epoch=body.partition_epoch,
                leader_recovery_state=LeaderRecoveryState(body.leader_recovery_state),
                elr=tuple(body.get("eligible_leader_replicas") or ()),
                last_known_elr=tuple(body.get("last_known_elr") or ()),
                adding_replicas=tuple(body.get("adding_replicas") or ()),
                removing_replicas=tuple(body.get("removing_replicas") or ()),
                directories=tuple(body.get("directories") or ()))
            return
        current = working.get(body.partition_id)
        if current is None:
            raise MetadataImageError(f"cannot change partition {body.partition_id} of topic "
                                     f"{topic.name!r}: no such partition")
        working[body.partition_id] = current.merge(PartitionChangeRecord(
            topic_id=body.topic_id, partition_id=body.partition_id, isr=_ints(body.isr),
            leader=body.leader, replicas=_ints(body.replicas),
            removing_replicas=_ints(body.removing_replicas),
            adding_replicas=_ints(body.adding_replicas),
            leader_recovery_state=body.leader_recovery_state,
            elr=_ints(body.get("eligible_leader_replicas")),
            last_known_elr=_ints(body.get("last_known_elr")),
            directories=_uuids(body.get("directories"))))

    def _with_partitions(self, partitions: dict[uuid.UUID, dict[int, PartitionRegistration]]
                         ) -> MetadataImage:
        if not partitions:
            return self
        topics = dict(self.topics_by_id)
        for topic_id, working in partitions.items():
            topics[topic_id] = replace(topics[topic_id], partitions=_frozen(working))
        return replace(self, topics_by_id=_frozen(topics))

    def _with_mappings(self, mappings: dict[str, dict]) -> MetadataImage:
        if not mappings:
            return self
        changes: dict[str, Any] = {name: _FREEZE.get(name, _frozen)(m)
                                   for name, m in mappings.items()}
        return replace(self, **changes)

    def _register_broker(self, body: Any) -> MetadataImage:
        endpoints = tuple(BrokerEndpoint(e.name, e.host, e.port, e.security_protocol)
                          for e in body.end_points)
        broker = BrokerRegistration(
            broker_id=body.broker_id, incarnation_id=body.incarnation_id,
            epoch=body.broker_epoch, endpoints=endpoints, rack=body.rack,
            fenced=body.fenced,
            in_controlled_shutdown=bool(body.get("in_controlled_shutdown", False)),
            log_dirs=tuple(body.get("log_dirs") or ()))
        return replace(self, brokers=_with(self.brokers, broker.broker_id, broker))

    def _unregister_broker(self, body: Any) -> MetadataImage:
        """Kafka's ClusterControlManager.replay(UnregisterBrokerRecord): the registration
        at that epoch goes; the partitions keep naming the broker among their replicas."""
        broker = self._registration(body.broker_id, body.broker_epoch,
                                    f"unregister broker {body.broker_id}")
        return replace(self, brokers=_without(self.brokers, broker.broker_id))

    def _registration(self, broker_id: int, epoch: int, what: str) -> BrokerRegistration:
        """The broker's registration a record names by id and epoch; MetadataImageError,
        saying it cannot do `what`, when there is none at that epoch."""
        broker = self.brokers.get(broker_id)
        if broker is None:
            raise MetadataImageError(f"cannot {what}: not registered")
        if broker.epoch != epoch:
            raise MetadataImageError(f"cannot {what} at epoch {epoch}: its registration "
                                     f"has epoch {broker.epoch}")
        return broker

    def _change_broker_registration(self, body: Any) -> MetadataImage:
        """Kafka's ClusterControlManager.replay(BrokerRegistrationChangeRecord)."""
        what = f"change the registration of broker {body.broker_id}"
        broker = self._registration(body.broker_id, body.broker_epoch, what)
        fenced = body.get("fenced", 0)
        shutdown = body.get("in_controlled_shutdown", 0)
        if fenced not in (-1, 0, 1) or shutdown not in (0, 1):
            raise MetadataImageError(f"cannot {what}: fenced={fenced}, "
                                     f"in_controlled_shutdown={shutdown}")
        changed = broker
        if fenced:
            changed = replace(changed, fenced=fenced == 1)
        if shutdown:
            changed = replace(changed, in_controlled_shutdown=True)
        if body.get("log_dirs"):  # empty means unchanged, as in Kafka
            changed = replace(changed, log_dirs=tuple(body.log_dirs))
        return replace(self, brokers=_with(self.brokers, broker.broker_id, changed))

    def _set_fenced(self, body: Any, fenced: bool) -> MetadataImage:
        action = "fence" if fenced else "unfence"
        broker = self._registration(body.id, body.epoch, f"{action} broker {body.id}")
        changed = replace(broker, fenced=fenced)
        return replace(self, brokers=_with(self.brokers, broker.broker_id, changed))

    def _fence_broker(self, body: Any) -> MetadataImage:
        return self._set_fenced(body, True)

    def _unfence_broker(self, body: Any) -> MetadataImage:
        return self._set_fenced(body, False)

    def _add_topic(self, body: Any) -> MetadataImage:
        name, topic_id = body.name, body.topic_id
        if name in self.topic_ids_by_name:
            raise MetadataImageError(f"topic {name!r} already exists with id "
                                     f"{self.topic_ids_by_name[name]}")
        if topic_id in self.topics_by_id:
            raise MetadataImageError(f"topic id {topic_id} already names topic "
                                     f"{self.topics_by_id[topic_id].name!r}")
        topic = TopicImage(name=name, topic_id=topic_id)
        return replace(self, topics_by_id=_with(self.topics_by_id, topic_id, topic),
                       topic_ids_by_name=_with(self.topic_ids_by_name, name, topic_id))

    def _remove_topic(self, body: Any) -> MetadataImage:
        topic = self._topic_or_raise(body.topic_id, "remove")
        return replace(
            self, topics_by_id=_without(self.topics_by_id, topic.topic_id),
            topic_ids_by_name=_without(self.topic_ids_by_name, topic.name),
            configs=_without(self.configs, (TOPIC_RESOURCE, topic.name)))

    def _set_producer_ids(self, body: Any) -> MetadataImage:
        return replace(self, next_producer_id=body.next_producer_id)

    def _set_feature_level(self, body: Any) -> MetadataImage:
        features = (_without(self.features, body.name) if body.feature_level == 0
                    else _with(self.features, body.name, body.feature_level))
        return replace(self, features=features)

    def _no_op(self, body: Any) -> MetadataImage:
        del body
        return self

    def _topic_or_raise(self, topic_id: uuid.UUID, action: str) -> TopicImage:
        topic = self.topics_by_id.get(topic_id)
        if topic is None:
            raise MetadataImageError(f"cannot {action} topic id {topic_id}: no such topic")
        return topic

    # --- queries ------------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids_by_name.get(name)
        return None if topic_id is None else self.topics_by_id[topic_id]

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)

    def partitions(self, name: str) -> Mapping[int, PartitionRegistration]:
        """The topic's partitions by id; empty for an unknown topic."""
        topic = self.topic(name)
        return _frozen({}) if topic is None else topic.partitions

    def partition(self, name: str, partition_id: int) -> PartitionRegistration | None:
        return self.partitions(name).get(partition_id)

    def leader(self, name: str, partition_id: int) -> int:
        """The partition's leader, NO_LEADER (-1) when offline or unknown."""
        partition = self.partition(name, partition_id)
        return NO_LEADER if partition is None else partition.leader

    def unfenced_brokers(self) -> tuple[BrokerRegistration, ...]:
        """Registered and unfenced brokers, by id: the ones Metadata answers list."""
        return tuple(b for _, b in sorted(self.brokers.items()) if not b.fenced)

    def active_broker_ids(self) -> frozenset[int]:
        """The brokers that may lead and join ISRs: what election.py calls `active`."""
        return frozenset(b.broker_id for b in self.brokers.values() if b.active)

    def topic_configs(self, name: str) -> Mapping[str, str]:
        return self.configs.get((TOPIC_RESOURCE, name), _frozen({}))

    def broker_configs(self, broker: int | str) -> Mapping[str, str]:
        """A broker's dynamic configs; the name "" holds the cluster-wide defaults."""
        return self.configs.get((BROKER_RESOURCE, str(broker)), _frozen({}))

    def group_configs(self, group: str) -> Mapping[str, str]:
        """A group's configs (KIP-848 group configs); a group need not exist to have them."""
        return self.configs.get((GROUP_RESOURCE, group), _frozen({}))


MetadataImage.EMPTY = MetadataImage(
    brokers=_frozen({}), topics_by_id=_frozen({}), topic_ids_by_name=_frozen({}),
    configs=_frozen({}), features=_frozen({}))

_HANDLERS = {
    T.REGISTER_BROKER_RECORD: MetadataImage._register_broker,
    T.UNREGISTER_BROKER_RECORD: MetadataImage._unregister_broker,
    T.FENCE_BROKER_RECORD: MetadataImage._fence_broker,
    T.UNFENCE_BROKER_RECORD: MetadataImage._unfence_broker,
    T.BROKER_REGISTRATION_CHANGE_RECORD: MetadataImage._change_broker_registration,
    T.TOPIC_RECORD: MetadataImage._add_topic,
    T.REMOVE_TOPIC_RECORD: MetadataImage._remove_topic,
    T.PRODUCER_IDS_RECORD: MetadataImage._set_producer_ids,
    T.FEATURE_LEVEL_RECORD: MetadataImage._set_feature_level,
    T.NO_OP_RECORD: MetadataImage._no_op,
}


# --- the security records: changes to one mapping, applied to a working copy ------------

def _set_scram_credential(credentials: dict, body: Any) -> None:
    credentials[(body.name, body.mechanism)] = ScramCredential(
        body.name, body.mechanism, bytes(body.salt), bytes(body.stored_key),
        bytes(body.server_key), body.iterations)


def _remove_scram_credential(credentials: dict, body: Any) -> None:
    if credentials.pop((body.name, body.mechanism), None) is None:
        raise MetadataImageError(f"cannot remove the SCRAM credential of {body.name!r} "
                                 f"(mechanism {body.mechanism}): there is none")


def _set_config(configs: dict, body: Any) -> None:
    """A ConfigRecord on the working copy of `configs`: a resource's entries are copied
    the first time the run changes them (an image's are read-only), and frozen again by
    `_freeze_configs`. A null value deletes the key; a resource left without keys goes."""
    resource = (body.resource_type, body.resource_name)
    entries = configs.get(resource)
    if entries is None:
        entries = {}
    elif not isinstance(entries, dict):
        entries = dict(entries)
    if body.value is None:
        entries.pop(body.name, None)
    else:
        entries[body.name] = body.value
    if entries:
        configs[resource] = entries
    else:
        configs.pop(resource, None)


def _freeze_configs(configs: dict) -> Mapping:
    return _frozen({resource: _frozen(entries) if isinstance(entries, dict) else entries
                    for resource, entries in configs.items()})


def _add_acl(acls: dict, body: Any) -> None:
    acls[body.id] = AclBinding(body.resource_type, body.resource_name, body.pattern_type,
                               body.principal, body.host, body.operation,
                               body.permission_type)


def _remove_acl(acls: dict, body: Any) -> None:
    if acls.pop(body.id, None) is None:
        raise MetadataImageError(f"cannot remove ACL {body.id}: no such ACL")


def _set_client_quota(quotas: dict, body: Any) -> None:
    """A ClientQuotaRecord on the working copy of `client_quotas`, copied and frozen again
    as `_set_config` does configs."""
    entity = quota_entity((e.entity_type, e.entity_name) for e in body.entity)
    entries = quotas.get(entity)
    entries = {} if entries is None else dict(entries)
    if body.remove:
        entries.pop(body.key, None)
    else:
        entries[body.key] = body.value
    if entries:
        quotas[entity] = entries
    else:
        quotas.pop(entity, None)


def _set_delegation_token(tokens: dict, body: Any) -> None:
    tokens[body.token_id] = DelegationToken(
        body.token_id, body.owner, body.requester, tuple(body.renewers),
        body.issue_timestamp, body.max_timestamp, body.expiration_timestamp)


def _remove_delegation_token(tokens: dict, body: Any) -> None:
    # Kafka's DelegationTokenControlManager tolerates removing a token already gone (an
    # expiry and an ExpireDelegationToken may both name it)
    tokens.pop(body.token_id, None)


_PARTITION_RECORDS = frozenset({T.PARTITION_RECORD, T.PARTITION_CHANGE_RECORD})

_BULK: dict[int, tuple[str, Callable[[dict, Any], None]]] = {
    T.USER_SCRAM_CREDENTIAL_RECORD: ("scram_credentials", _set_scram_credential),
    T.REMOVE_USER_SCRAM_CREDENTIAL_RECORD: ("scram_credentials", _remove_scram_credential),
    T.ACCESS_CONTROL_ENTRY_RECORD: ("acls", _add_acl),
    T.REMOVE_ACCESS_CONTROL_ENTRY_RECORD: ("acls", _remove_acl),
    T.CONFIG_RECORD: ("configs", _set_config),
    T.CLIENT_QUOTA_RECORD: ("client_quotas", _set_client_quota),
    T.DELEGATION_TOKEN_RECORD: ("delegation_tokens", _set_delegation_token),
    T.REMOVE_DELEGATION_TOKEN_RECORD: ("delegation_tokens", _remove_delegation_token),
}
# how a working copy becomes an image's mapping again (default: frozen as it is)
_FREEZE: dict[str, Callable[[dict], Mapping]] = {"configs": _freeze_configs,
                                                  "client_quotas": _freeze_configs}
