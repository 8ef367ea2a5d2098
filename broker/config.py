"""Typed, validated broker and topic configuration with Kafka's property names and defaults.

Owns: the table of properties we support (`BROKER_PROPERTIES`, `TOPIC_PROPERTIES`), parsing
of Java-style .properties files and `-o key=value` overrides, and `BrokerConfig`, the one
object the rest of the broker reads. An unknown key or a bad value is refused at start-up
with one line naming the key (`ConfigError`). Topic-level overrides (CreateTopics configs)
are validated against the same table and resolved with `topic_log_config`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Generic, Mapping, TypeVar, overload

from broker.log.config import LogConfig

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A configuration key or value that the broker refuses; the message names the key."""


@dataclass(frozen=True)
class Prop:
    name: str
    kind: str  # int | long | bool | str | list
    default: Any
    doc: str
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    topic_name: str | None = None  # the topic-level property this broker default feeds
    maximum: int | None = None

    def parse(self, raw: Any) -> Any:
        value = raw
        if isinstance(raw, str):
            text = raw.strip()
            try:
                if self.kind in ("int", "long"):
                    value = int(text)
                elif self.kind == "double":
                    value = float(text)
                elif self.kind == "bool":
                    if text.lower() not in ("true", "false"):
                        raise ValueError
                    value = text.lower() == "true"
                elif self.kind == "list":
                    value = tuple(x.strip() for x in text.split(",") if x.strip())
                else:
                    value = text
            except ValueError:
                raise ConfigError(
                    f"invalid value {raw!r} for {self.name}: expected {self.kind}") from None
        if self.kind == "int" and not -2**31 <= value < 2**31:
            raise ConfigError(f"invalid value {raw!r} for {self.name}: out of int32 range")
        if self.minimum is not None and value is not None and value < self.minimum:
            raise ConfigError(f"invalid value {raw!r} for {self.name}: must be >= {self.minimum}")
        if self.maximum is not None and value is not None and value > self.maximum:
            raise ConfigError(f"invalid value {raw!r} for {self.name}: must be <= {self.maximum}")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"invalid value {raw!r} for {self.name}: one of {', '.join(self.choices)}")
        return value


def _props(*props: Prop) -> dict[str, Prop]:
    return {p.name: p for p in props}


BROKER_PROPERTIES = _props(
    Prop("broker.id", "int", 0, "This broker's id (node.id is the same).", minimum=0),
    Prop("node.id", "int", None, "This node's id in the cluster; the same as broker.id.",
         minimum=0),
    Prop("process.roles", "list", ("broker", "controller"),
         "broker, controller, or both (a combined node)."),
    Prop("controller.quorum.voters", "str", None,
         "The metadata quorum's voters, ID@HOST:PORT,... (KIP-595); unset: this node alone."),
    Prop("controller.quorum.bootstrap.servers", "str", None,
         "Controllers to find the quorum through, HOST:PORT,... (KIP-853): a dynamic quorum "
         "(kraft.version 1) whose voters AddRaftVoter and RemoveRaftVoter change; with "
         "controller.quorum.voters too, those are its initial voters, else this node joins "
         "as an observer."),
    Prop("controller.listener.names", "list", ("CONTROLLER",),
         "Listeners that carry controller traffic."),
    Prop("inter.broker.listener.name", "str", None,
         "The listener brokers use to reach each other; default the first non-controller one."),
    Prop("listener.security.protocol.map", "str",
         "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
         "Listener name to security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
    # --- security; each may be set for one listener alone as
    # listener.name.<listener>.<property>, as in Kafka
    Prop("ssl.keystore.type", "str", "PEM", "Format of the key store: PEM (KIP-651).",
         choices=("PEM",)),
    Prop("ssl.keystore.location", "str", None,
         "PEM file holding this node's private key and certificate chain."),
    Prop("ssl.keystore.certificate.chain", "str", None,
         "This node's certificate chain, PEM text (instead of ssl.keystore.location)."),
    Prop("ssl.keystore.key", "str", None,
         "This node's private key, PEM text (instead of ssl.keystore.location)."),
    Prop("ssl.key.password", "str", None, "Password of an encrypted private key."),
    Prop("ssl.truststore.type", "str", "PEM", "Format of the trust store: PEM.",
         choices=("PEM",)),
    Prop("ssl.truststore.location", "str", None,
         "PEM file of the CA certificates trusted for peers' certificates."),
    Prop("ssl.truststore.certificates", "str", None,
         "Trusted CA certificates, PEM text (instead of ssl.truststore.location)."),
    Prop("ssl.client.auth", "str", "none",
         "Mutual TLS: required, requested or none; a client certificate's subject becomes "
         "the principal.", choices=("required", "requested", "none")),
    Prop("ssl.principal.mapping.rules", "str", "DEFAULT",
         "How a certificate subject becomes a principal: DEFAULT (User:<the subject>).",
         choices=("DEFAULT",)),
    Prop("ssl.enabled.protocols", "list", ("TLSv1.2", "TLSv1.3"), "TLS versions accepted."),
    Prop("ssl.endpoint.identification.algorithm", "str", "https",
         "https: a node checks the host name in the certificate of a node it connects to; "
         "empty: it does not."),
    Prop("sasl.enabled.mechanisms", "list", ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
         "SASL mechanisms a SASL listener offers."),
    Prop("sasl.mechanism.inter.broker.protocol", "str", "PLAIN",
         "The mechanism a broker authenticates with to other brokers."),
    Prop("sasl.mechanism.controller.protocol", "str", "PLAIN",
         "The mechanism a node authenticates with to the controllers."),
    Prop("sasl.server.max.receive.size", "int", 524288,
         "Largest frame accepted before a connection has authenticated.", minimum=1),
    Prop("authorizer.class.name", "str", "",
         "Empty: no authorization. org.apache.kafka.metadata.authorizer.StandardAuthorizer: "
         "ACLs from the metadata log."),
    Prop("super.users", "str", "",
         "Principals allowed everything, separated by semicolons (User:admin;User:broker)."),
    Prop("allow.everyone.if.no.acl.found", "bool", False,
         "With an authorizer: allow an operation on a resource that no ACL matches."),
    Prop("delegation.token.secret.key", "str", None,
         "The secret delegation tokens' HMACs are keyed with, the same on every node; unset: "
         "delegation tokens are off (DELEGATION_TOKEN_AUTH_DISABLED)."),
    Prop("delegation.token.max.lifetime.ms", "int", 604800000,
         "The longest a delegation token lives, renewals included.", minimum=1),
    Prop("delegation.token.expiry.time.ms", "int", 86400000,
         "How long a delegation token lives from its creation or last renewal.", minimum=1),
    Prop("delegation.token.expiry.check.interval.ms", "int", 3600000,
         "How often the controller removes the delegation tokens whose expiry passed.",
         minimum=1),
    Prop("broker.rack", "str", None, "This broker's rack, for rack-aware replica placement."),
    Prop("controller.quorum.election.timeout.ms", "int", 1000,
         "Time without a leader before a voter stands for election.", minimum=1),
    Prop("controller.quorum.fetch.timeout.ms", "int", 2000,
         "Time without hearing from the leader before a follower stands.", minimum=1),
    Prop("controller.quorum.request.timeout.ms", "int", 2000,
         "How long a quorum request waits for its answer.", minimum=1),
    Prop("controller.quorum.retry.backoff.ms", "int", 20,
         "Pause before a failed quorum request is sent again.", minimum=0),
    Prop("metadata.log.max.record.bytes.between.snapshots", "int", 20 * 1024 * 1024,
         "Bytes of metadata records committed after the latest snapshot that make a node "
         "write a new one (and delete the log behind it).", minimum=1),
    Prop("metadata.log.max.snapshot.interval.ms", "int", 3600000,
         "Longest time a node waits before it snapshots committed records the latest "
         "snapshot does not hold; 0: only by bytes.", minimum=0),
    Prop("metadata.max.idle.interval.ms", "int", 500,
         "How often the active controller appends a NoOpRecord to the metadata log, so "
         "that it advances while nothing changes (KIP-835); 0: never.", minimum=0),
    Prop("broker.heartbeat.interval.ms", "int", 2000,
         "How often a broker heartbeats to the controller.", minimum=1),
    Prop("broker.session.timeout.ms", "int", 9000,
         "Time without a heartbeat after which the controller fences a broker.", minimum=1),
    Prop("unclean.leader.election.enable", "bool", False,
         "Let a replica outside the ISR lead when no ISR member is alive (may lose data).",
         topic_name="unclean.leader.election.enable"),
    Prop("auto.leader.rebalance.enable", "bool", True,
         "Move leadership back to preferred replicas periodically."),
    Prop("leader.imbalance.check.interval.seconds", "long", 300,
         "How often the controller checks leader imbalance.", minimum=1),
    Prop("leader.imbalance.per.broker.percentage", "int", 10,
         "Share of a broker's partitions led elsewhere that triggers a rebalance.", minimum=0),
    Prop("controlled.shutdown.enable", "bool", True,
         "Move leaderships off a broker before it stops (SIGTERM)."),
    Prop("controlled.shutdown.timeout.ms", "int", 5000,
         "minibroker: longest a controlled shutdown waits for the controller.", minimum=0),
    Prop("listeners", "str", "PLAINTEXT://127.0.0.1:9092", "Where the broker listens."),
    Prop("advertised.listeners", "str", None, "Address given to clients; defaults to listeners."),
    Prop("log.dirs", "str", "./data",
         "The log directories, separated by commas; the first also holds the metadata log "
         "and the event log."),
    Prop("log.dir", "str", None, "The one log directory, when log.dirs is not set."),
    Prop("num.partitions", "int", 1, "Partitions of an auto-created topic.", minimum=1),
    Prop("default.replication.factor", "int", 1, "Replication factor of auto-created topics.",
         minimum=1),
    Prop("auto.create.topics.enable", "bool", True, "Create topics named in Metadata requests."),
    Prop("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
    Prop("message.max.bytes", "int", 1048588, "Largest record batch accepted.", minimum=0,
         topic_name="max.message.bytes"),
    Prop("socket.request.max.bytes", "int", 104857600, "Largest request frame.", minimum=1),
    Prop("connections.max.idle.ms", "long", 600000,
         "Close a connection with no request in flight that sends nothing for this long; "
         "-1 never.", minimum=-1),
    Prop("quota.window.num", "int", 11,
         "Samples kept in memory for client quotas' byte and request rates.", minimum=1),
    Prop("quota.window.size.seconds", "int", 1,
         "The time span of each client quota sample.", minimum=1),
    Prop("controller.quota.window.num", "int", 11,
         "Samples kept in memory for controller mutation quotas.", minimum=1),
    Prop("controller.quota.window.size.seconds", "int", 1,
         "The time span of each controller mutation quota sample.", minimum=1),
    Prop("log.segment.bytes", "int", 1073741824, "Segment size before a roll.", minimum=14,
         topic_name="segment.bytes"),
    Prop("log.roll.ms", "long", None, "Segment age before a roll (overrides log.roll.hours).",
         minimum=1, topic_name="segment.ms"),
    Prop("log.roll.hours", "int", 168, "Segment age before a roll.", minimum=1),
    Prop("log.retention.ms", "long", None, "Retention time (overrides minutes/hours); -1 keeps all.",
         minimum=-1, topic_name="retention.ms"),
    Prop("log.retention.minutes", "int", None, "Retention time in minutes.", minimum=-1),
    Prop("log.retention.hours", "int", 168, "Retention time in hours.", minimum=-1),
    Prop("log.retention.bytes", "long", -1, "Retention size per partition; -1 keeps all.",
         minimum=-1, topic_name="retention.bytes"),
    Prop("log.retention.check.interval.ms", "long", 300000, "How often retention runs.",
         minimum=1),
    Prop("log.index.interval.bytes", "int", 4096, "Bytes between offset index entries.",
         minimum=0, topic_name="index.interval.bytes"),
    Prop("log.index.size.max.bytes", "int", 10485760, "Largest index before a roll.", minimum=4,
         topic_name="segment.index.bytes"),
    Prop("log.cleanup.policy", "list", ("delete",), "delete or compact.",
         topic_name="cleanup.policy"),
    Prop("log.segment.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files go.",
         minimum=0, topic_name="file.delete.delay.ms"),
    Prop("log.flush.interval.messages", "long", LONG_MAX, "Records between fsyncs.", minimum=1,
         topic_name="flush.messages"),
    Prop("log.cleaner.delete.retention.ms", "long", 86400000,
         "How long tombstones survive compaction.", minimum=0, topic_name="delete.retention.ms"),
    Prop("log.cleaner.min.cleanable.ratio", "double", 0.5,
         "Dirty share of a compacted log that triggers cleaning.", minimum=0,
         topic_name="min.cleanable.dirty.ratio"),
    Prop("log.cleaner.backoff.ms", "long", 15000, "How often the log cleaner looks for work.",
         minimum=1),
    Prop("log.message.timestamp.type", "str", "CreateTime", "CreateTime or LogAppendTime.",
         choices=("CreateTime", "LogAppendTime"), topic_name="message.timestamp.type"),
    Prop("min.insync.replicas", "int", 1,
         "ISR size acks=all, and the high watermark's advance, need (at most the replica "
         "count).", minimum=1,
         topic_name="min.insync.replicas"),
    Prop("compression.type", "str", "producer", "Only 'producer' (keep the producer's codec).",
         choices=("producer",), topic_name="compression.type"),
    Prop("replica.lag.time.max.ms", "long", 30000,
         "A follower not caught up with the leader for this long leaves the ISR.", minimum=1),
    Prop("num.recovery.threads.per.data.dir", "int", 2,
         "Threads loading (after an unclean shutdown: recovering) the partition logs at start.",
         minimum=1),
    Prop("num.replica.fetchers", "int", 1,
         "Fetcher connections per source broker a follower replicates with.", minimum=1),
    Prop("replica.fetch.max.bytes", "int", 1048576,
         "Bytes a follower asks for per partition in one fetch.", minimum=0),
    Prop("replica.fetch.response.max.bytes", "int", 10485760,
         "Bytes a follower asks for in one fetch response.", minimum=0),
    Prop("replica.fetch.wait.max.ms", "int", 500,
         "Longest a follower's fetch waits at the leader for new data.", minimum=0),
    Prop("replica.fetch.min.bytes", "int", 1,
         "Bytes a follower's fetch waits for at the leader.", minimum=1),
    Prop("max.incremental.fetch.session.cache.slots", "int", 1000,
         "Incremental fetch sessions (KIP-227) the broker keeps at most.", minimum=0),
    Prop("min.incremental.fetch.session.eviction.ms", "int", 120000,
         "minibroker: how long a fetch session is safe from eviction by a new one after "
         "its last use (and, for a follower's, after its creation); a constant in Kafka "
         "(MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS).", minimum=0),
    Prop("replica.fetch.backoff.ms", "int", 1000,
         "Pause after a follower's fetch fails.", minimum=0),
    Prop("leader.replication.throttled.rate", "long", 9223372036854775807,
         "Bytes/s this broker sends to followers of leader-throttled replicas (KIP-73); "
         "a dynamic broker config, set by reassign-partitions --throttle.", minimum=0),
    Prop("follower.replication.throttled.rate", "long", 9223372036854775807,
         "Bytes/s this broker fetches for follower-throttled replicas (KIP-73).", minimum=0),
    Prop("replication.quota.window.num", "int", 11,
         "Windows the replication throttle rates are measured over.", minimum=1),
    Prop("replication.quota.window.size.seconds", "int", 1,
         "Length of each replication throttle window.", minimum=1),
    Prop("replica.high.watermark.checkpoint.interval.ms", "long", 5000,
         "How often the high watermarks are written to replication-offset-checkpoint.",
         minimum=1),
    Prop("offsets.commit.timeout.ms", "int", 5000,
         "Longest an offset commit waits for __consumer_offsets replicas.", minimum=1),
    Prop("request.timeout.ms", "int", 30000,
         "Longest a transaction marker (WriteTxnMarkers) waits for the ISR to hold it.",
         minimum=0),
    Prop("replica.selector.class", "str", None,
         "KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector lets consumers "
         "with client.rack fetch from a replica in their rack."),
    Prop("producer.id.expiration.check.interval.ms", "int", 600000,
         "How often producer state idle past producer.id.expiration.ms is removed.",
         minimum=1),
    Prop("producer.id.expiration.ms", "int", 86400000, "Idle time before producer state goes.",
         minimum=1),
    Prop("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.",
         minimum=1),
    Prop("offsets.topic.replication.factor", "int", 3, "Replication of __consumer_offsets.",
         minimum=1),
    Prop("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets.",
         minimum=1),
    Prop("transaction.state.log.num.partitions", "int", 50,
         "Partitions of __transaction_state.", minimum=1),
    Prop("transaction.state.log.replication.factor", "int", 3,
         "Replication of __transaction_state (capped by the controllers, as for "
         "__consumer_offsets).", minimum=1),
    Prop("transaction.state.log.min.isr", "int", 2,
         "min.insync.replicas of __transaction_state (capped by its replication factor).",
         minimum=1),
    Prop("transaction.state.log.segment.bytes", "int", 104857600,
         "Segment size of __transaction_state.", minimum=1),
    Prop("transaction.max.timeout.ms", "int", 900000,
         "Longest transaction timeout a producer may ask for.", minimum=1),
    Prop("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
         "How often transactions open past their timeout are aborted.", minimum=1),
    Prop("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
         "How often expired transactional ids are removed.", minimum=1),
    Prop("transactional.id.expiration.ms", "int", 604800000,
         "Idle time before a transactional id is forgotten.", minimum=1),
    Prop("transaction.partition.verification.enable", "bool", True,
         "KIP-890: verify a transaction's first batch in a partition with its coordinator."),
    Prop("offsets.retention.minutes", "int", 10080, "How long committed offsets are kept.",
         minimum=1),
    Prop("offsets.retention.check.interval.ms", "long", 600000,
         "How often expired offsets are removed.", minimum=1),
    Prop("offset.metadata.max.bytes", "int", 4096, "Longest metadata of a committed offset.",
         minimum=0),
    Prop("group.min.session.timeout.ms", "int", 6000, "Shortest session timeout a member may ask.",
         minimum=0),
    Prop("group.max.session.timeout.ms", "int", 1800000, "Longest session timeout a member may ask.",
         minimum=0),
    Prop("group.initial.rebalance.delay.ms", "int", 3000,
         "How long a new group waits for more members before its first rebalance.", minimum=0),
    Prop("group.max.size", "int", 2**31 - 1, "Most members a group may have.", minimum=1),
    Prop("group.consumer.heartbeat.interval.ms", "int", 5000,
         "How often members of a consumer group (KIP-848) heartbeat.", minimum=1),
    Prop("group.consumer.session.timeout.ms", "int", 45000,
         "How long a consumer group member may go without a heartbeat.", minimum=1),
    Prop("group.consumer.assignors", "list", ("uniform", "range"),
         "The server-side assignors of consumer groups; the first is the default.",),
    Prop("group.consumer.max.size", "int", 2**31 - 1,
         "Most members a consumer group may have.", minimum=1),
    # KIP-932 share groups: Kafka 4.1's GroupCoordinatorConfig and ShareGroupConfig
    Prop("group.share.enable", "bool", True,
         "Whether share groups (KIP-932) are served: ShareGroupHeartbeat and its kin."),
    Prop("group.share.heartbeat.interval.ms", "int", 5000,
         "How often members of a share group heartbeat.", minimum=1),
    Prop("group.share.min.heartbeat.interval.ms", "int", 5000,
         "The least group.share.heartbeat.interval.ms may be.", minimum=1),
    Prop("group.share.max.heartbeat.interval.ms", "int", 15000,
         "The most group.share.heartbeat.interval.ms may be.", minimum=1),
    Prop("group.share.session.timeout.ms", "int", 45000,
         "How long a share group member may go without a heartbeat.", minimum=1),
    Prop("group.share.min.session.timeout.ms", "int", 45000,
         "The least group.share.session.timeout.ms may be.", minimum=1),
    Prop("group.share.max.session.timeout.ms", "int", 60000,
         "The most group.share.session.timeout.ms may be.", minimum=1),
    Prop("group.share.max.size", "int", 200, "Most members a share group may have.",
         minimum=1, maximum=1000),
    Prop("group.share.record.lock.duration.ms", "int", 30000,
         "How long a share consumer holds a record it acquired before it is released.",
         minimum=1000, maximum=3600000),
    Prop("group.share.min.record.lock.duration.ms", "int", 15000,
         "The least group.share.record.lock.duration.ms may be.",
         minimum=1000, maximum=30000),
    Prop("group.share.max.record.lock.duration.ms", "int", 60000,
         "The most group.share.record.lock.duration.ms may be.",
         minimum=30000, maximum=3600000),
    Prop("group.share.delivery.count.limit", "int", 5,
         "Deliveries of a record to share consumers before it is archived.",
         minimum=2, maximum=10),
    Prop("group.share.partition.max.record.locks", "int", 2000,
         "Records of one share-partition that may be acquired at once.",
         minimum=100, maximum=10000),
    Prop("share.coordinator.state.topic.num.partitions", "int", 50,
         "Partitions of __share_group_state.", minimum=1),
    Prop("share.coordinator.state.topic.replication.factor", "int", 3,
         "Replication of __share_group_state.", minimum=1),
    Prop("share.coordinator.state.topic.min.isr", "int", 2,
         "min.insync.replicas of __share_group_state.", minimum=1),
    Prop("share.coordinator.state.topic.segment.bytes", "int", 104857600,
         "Segment size of __share_group_state.", minimum=1024),
    Prop("share.coordinator.snapshot.update.records.per.snapshot", "int", 500,
         "ShareUpdate records of a share partition between two ShareSnapshots.",
         minimum=0, maximum=500),
    Prop("group.share.max.share.sessions", "int", 2000,
         "Share sessions a broker holds at once; one more is SHARE_SESSION_LIMIT_REACHED.",
         minimum=1),
    Prop("events.segment.bytes", "long", 64 * 1024 * 1024,
         "minibroker: event log file size before rotation.", minimum=1024),
    Prop("events.retention.files", "int", 20, "minibroker: event log files kept.", minimum=1),
    Prop("events.request.sample.per.second", "int", 200,
         "minibroker: request latency events per API per second (0 = none).", minimum=0),
    Prop("events.metrics.interval.ms", "long", 60000,
         "minibroker: how often a `metrics` event records the broker's figures (0 = never; "
         "one is written at shutdown too).", minimum=0),
    Prop("metrics.port", "int", 0,
         "minibroker: the port of the Prometheus endpoint, GET /metrics (0 = off).",
         minimum=0),
    Prop("metrics.host", "str", "127.0.0.1",
         "minibroker: the address the Prometheus endpoint listens on."),
    Prop("telemetry.metrics", "list", (),
         "minibroker: metric name prefixes every client is asked to push (KIP-714), * for "
         "all; empty: the client telemetry APIs are not advertised."),
    Prop("telemetry.push.interval.ms", "int", 300000,
         "minibroker: how often clients push their metrics (KIP-714).", minimum=100),
    Prop("telemetry.max.bytes", "int", 1048576,
         "Largest client telemetry push accepted (KIP-714).", minimum=1),
    Prop("shutdown.drain.timeout.ms", "int", 5000,
         "minibroker: how long a graceful shutdown waits for in-flight requests.", minimum=0),
)

# Topic-level properties a CreateTopics request may set, each with the broker default it
# overrides (the same relation Kafka's LogConfig documents).
TOPIC_PROPERTIES: dict[str, Prop] = {}
for _p in BROKER_PROPERTIES.values():
    if _p.topic_name:
        TOPIC_PROPERTIES[_p.topic_name] = Prop(_p.topic_name, _p.kind, None, _p.doc, _p.minimum,
                                               _p.choices)

# Topic-level properties with no broker default: which replicas the replication throttles
# hold back ("*" or partition:broker,..., broker.replication.quota)
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
ALL_REPLICAS = "*"
for _name, _doc in (
        (LEADER_REPLICAS,
         "Replicas (partition:broker, or *) whose leaders' sends to out-of-sync followers "
         "count against leader.replication.throttled.rate."),
        (FOLLOWER_REPLICAS,
         "Replicas (partition:broker, or *) whose out-of-sync followers' fetches count "
         "against follower.replication.throttled.rate.")):
    TOPIC_PROPERTIES[_name] = Prop(_name, "list", None, _doc)

# Group-level properties (KIP-848's group configs, Kafka's GroupConfig), each with the
# broker property that is its default: set per group with IncrementalAlterConfigs on a
# GROUP resource, read by the consumer group coordinator for that group's members.
GROUP_PROPERTIES: dict[str, Prop] = {
    "consumer.session.timeout.ms": Prop(
        "consumer.session.timeout.ms", "int", None,
        "This group's group.consumer.session.timeout.ms.", minimum=1),
    "consumer.heartbeat.interval.ms": Prop(
        "consumer.heartbeat.interval.ms", "int", None,
        "This group's group.consumer.heartbeat.interval.ms.", minimum=1),
    # KIP-932: a share group's own settings
    "share.record.lock.duration.ms": Prop(
        "share.record.lock.duration.ms", "int", None,
        "This share group's group.share.record.lock.duration.ms.", minimum=1000),
    "share.auto.offset.reset": Prop(
        "share.auto.offset.reset", "str", "latest",
        "Where a share group starts reading a partition it never read: latest, earliest "
        "or by_duration:<ISO-8601 duration>."),
}
# each group property's broker-wide default, where the broker has one (else the Prop's own)
GROUP_PROPERTY_DEFAULTS: dict[str, str | None] = {
    name: f"group.{name}" for name in GROUP_PROPERTIES if f"group.{name}" in BROKER_PROPERTIES}
GROUP_PROPERTY_DEFAULTS["share.auto.offset.reset"] = None


def validate_group_configs(configs: Mapping[str, str | None]) -> dict[str, int]:
    """A group's configs, parsed; ConfigError names the first bad key, or a heartbeat
    interval not below the session timeout (Kafka's GroupConfig check)."""
    parsed = _parse_configs(configs, GROUP_PROPERTIES, "group")
    if "share.auto.offset.reset" in parsed:
        from broker.share.offset_reset import parse_auto_offset_reset
        try:
            parse_auto_offset_reset(parsed["share.auto.offset.reset"])
        except ValueError as e:
            raise ConfigError(f"invalid value for share.auto.offset.reset: {e}") from None
    session = parsed.get("consumer.session.timeout.ms")
    interval = parsed.get("consumer.heartbeat.interval.ms")
    if session is not None and interval is not None and interval >= session:
        raise ConfigError("consumer.heartbeat.interval.ms must be less than "
                          "consumer.session.timeout.ms")
    return parsed


_PYTHON_TYPES: dict[str, type] = {"int": int, "long": int, "bool": bool, "str": str,
                                  "double": float, "list": tuple}
T = TypeVar("T")


class _Typed(Generic[T]):
    """A typed BrokerConfig attribute for the property named like it, dots for underscores:
    `config.group_max_size` reads group.max.size as an int. A misspelt attribute, or a type
    other than the property's kind, fails when the class is defined."""

    def __init__(self, kind: type[T]) -> None:
        self.kind = kind
        self.name = ""

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.name = attribute.replace("_", ".")
        prop = BROKER_PROPERTIES[self.name]
        if _PYTHON_TYPES[prop.kind] is not self.kind:
            raise TypeError(f"{self.name} is a {prop.kind}, not {self.kind.__name__}")
        self._check_default(prop)

    def _check_default(self, prop: Prop) -> None:
        if prop.default is None:
            raise TypeError(f"{prop.name} may be unset: declare it _Nullable")

    @overload
    def __get__(self, config: None, owner: type) -> _Typed[T]: ...
    @overload
    def __get__(self, config: BrokerConfig, owner: type) -> T: ...

    def __get__(self, config: BrokerConfig | None, owner: type) -> T | _Typed[T]:
        return self if config is None else config.values[self.name]


class _Nullable(_Typed[T]):
    """Like _Typed, for a property without a default: None when it is not set."""

    def _check_default(self, prop: Prop) -> None:
        pass

    @overload  # type: ignore[override]
    def __get__(self, config: None, owner: type) -> _Nullable[T]: ...
    @overload
    def __get__(self, config: BrokerConfig, owner: type) -> T | None: ...

    def __get__(self, config: BrokerConfig | None, owner: type) -> T | None | _Nullable[T]:
        return self if config is None else config.values[self.name]


@dataclass(frozen=True)
class BrokerConfig:
    """The resolved broker configuration.

    The broker reads the properties it uses through the typed attributes below, named like
    the properties with underscores for dots; `config["name"]` (Any) is for code that walks
    the property table by name, such as DescribeConfigs."""

    values: dict[str, Any] = field(default_factory=dict)
    # listener.name.<listener>.<property>: {listener (upper case): {property: value}}; a
    # security property, or a SASL mechanism's `<mechanism>.sasl.jaas.config`
    listener_values: dict[str, dict[str, Any]] = field(default_factory=dict)

    broker_id = _Typed(int)
    process_roles = _Typed(tuple)
    controller_quorum_voters = _Nullable(str)
    controller_quorum_bootstrap_servers = _Nullable(str)
    controller_listener_names = _Typed(tuple)
    inter_broker_listener_name = _Nullable(str)
    listener_security_protocol_map = _Typed(str)
    broker_rack = _Nullable(str)
    replica_selector_class = _Nullable(str)
    controller_quorum_election_timeout_ms = _Typed(int)
    controller_quorum_fetch_timeout_ms = _Typed(int)
    controller_quorum_request_timeout_ms = _Typed(int)
    controller_quorum_retry_backoff_ms = _Typed(int)
    metadata_log_max_record_bytes_between_snapshots = _Typed(int)
    metadata_log_max_snapshot_interval_ms = _Typed(int)
    metadata_max_idle_interval_ms = _Typed(int)
    broker_heartbeat_interval_ms = _Typed(int)
    broker_session_timeout_ms = _Typed(int)
    min_insync_replicas = _Typed(int)
    replica_lag_time_max_ms = _Typed(int)
    num_replica_fetchers = _Typed(int)
    num_recovery_threads_per_data_dir = _Typed(int)
    replica_fetch_max_bytes = _Typed(int)
    replica_fetch_response_max_bytes = _Typed(int)
    replica_fetch_wait_max_ms = _Typed(int)
    replica_fetch_min_bytes = _Typed(int)
    replica_fetch_backoff_ms = _Typed(int)
    max_incremental_fetch_session_cache_slots = _Typed(int)
    min_incremental_fetch_session_eviction_ms = _Typed(int)
    replica_high_watermark_checkpoint_interval_ms = _Typed(int)
    offsets_commit_timeout_ms = _Typed(int)
    request_timeout_ms = _Typed(int)
    producer_id_expiration_ms = _Typed(int)
    producer_id_expiration_check_interval_ms = _Typed(int)
    unclean_leader_election_enable = _Typed(bool)
    auto_leader_rebalance_enable = _Typed(bool)
    leader_imbalance_check_interval_seconds = _Typed(int)
    leader_imbalance_per_broker_percentage = _Typed(int)
    controlled_shutdown_enable = _Typed(bool)
    controlled_shutdown_timeout_ms = _Typed(int)
    listeners = _Typed(str)
    advertised_listeners = _Nullable(str)
    log_dirs = _Typed(str)
    log_dir = _Nullable(str)
    num_partitions = _Typed(int)
    default_replication_factor = _Typed(int)
    auto_create_topics_enable = _Typed(bool)
    delete_topic_enable = _Typed(bool)
    socket_request_max_bytes = _Typed(int)
    connections_max_idle_ms = _Typed(int)
    quota_window_num = _Typed(int)
    quota_window_size_seconds = _Typed(int)
    controller_quota_window_num = _Typed(int)
    controller_quota_window_size_seconds = _Typed(int)
    log_retention_ms = _Nullable(int)
    log_retention_minutes = _Nullable(int)
    log_retention_hours = _Typed(int)
    log_retention_check_interval_ms = _Typed(int)
    log_roll_ms = _Nullable(int)
    log_roll_hours = _Typed(int)
    log_cleaner_backoff_ms = _Typed(int)
    offsets_topic_num_partitions = _Typed(int)
    offsets_topic_replication_factor = _Typed(int)
    offsets_topic_segment_bytes = _Typed(int)
    offsets_retention_minutes = _Typed(int)
    transaction_state_log_num_partitions = _Typed(int)
    transaction_state_log_replication_factor = _Typed(int)
    transaction_state_log_min_isr = _Typed(int)
    transaction_state_log_segment_bytes = _Typed(int)
    transaction_max_timeout_ms = _Typed(int)
    transaction_abort_timed_out_transaction_cleanup_interval_ms = _Typed(int)
    transaction_remove_expired_transaction_cleanup_interval_ms = _Typed(int)
    transactional_id_expiration_ms = _Typed(int)
    transaction_partition_verification_enable = _Typed(bool)
    offsets_retention_check_interval_ms = _Typed(int)
    offset_metadata_max_bytes = _Typed(int)
    group_min_session_timeout_ms = _Typed(int)
    group_max_session_timeout_ms = _Typed(int)
    group_initial_rebalance_delay_ms = _Typed(int)
    group_max_size = _Typed(int)
    group_consumer_heartbeat_interval_ms = _Typed(int)
    group_consumer_session_timeout_ms = _Typed(int)
    group_consumer_assignors = _Typed(tuple)
    group_consumer_max_size = _Typed(int)
    group_share_enable = _Typed(bool)
    group_share_heartbeat_interval_ms = _Typed(int)
    group_share_min_heartbeat_interval_ms = _Typed(int)
    group_share_max_heartbeat_interval_ms = _Typed(int)
    group_share_session_timeout_ms = _Typed(int)
    group_share_min_session_timeout_ms = _Typed(int)
    group_share_max_session_timeout_ms = _Typed(int)
    group_share_max_size = _Typed(int)
    group_share_record_lock_duration_ms = _Typed(int)
    group_share_min_record_lock_duration_ms = _Typed(int)
    group_share_max_record_lock_duration_ms = _Typed(int)
    group_share_delivery_count_limit = _Typed(int)
    group_share_partition_max_record_locks = _Typed(int)
    share_coordinator_state_topic_num_partitions = _Typed(int)
    share_coordinator_state_topic_replication_factor = _Typed(int)
    share_coordinator_state_topic_min_isr = _Typed(int)
    share_coordinator_state_topic_segment_bytes = _Typed(int)
    share_coordinator_snapshot_update_records_per_snapshot = _Typed(int)
    group_share_max_share_sessions = _Typed(int)
    events_segment_bytes = _Typed(int)
    events_retention_files = _Typed(int)
    events_request_sample_per_second = _Typed(int)
    events_metrics_interval_ms = _Typed(int)
    metrics_port = _Typed(int)
    metrics_host = _Typed(str)
    telemetry_metrics = _Typed(tuple)
    telemetry_push_interval_ms = _Typed(int)
    telemetry_max_bytes = _Typed(int)
    shutdown_drain_timeout_ms = _Typed(int)
    sasl_server_max_receive_size = _Typed(int)
    authorizer_class_name = _Typed(str)
    super_users = _Typed(str)
    allow_everyone_if_no_acl_found = _Typed(bool)
    delegation_token_secret_key = _Nullable(str)
    delegation_token_max_lifetime_ms = _Typed(int)
    delegation_token_expiry_time_ms = _Typed(int)
    delegation_token_expiry_check_interval_ms = _Typed(int)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @classmethod
    def load(cls, overrides: dict[str, str] | None = None, file_text: str | None = None,
             **cli: Any) -> "BrokerConfig":
        """Defaults, then the properties file, then `-o` overrides, then explicit CLI flags."""
        raw: dict[str, Any] = {}
        if file_text:
            raw.update(parse_properties(file_text))
        raw.update(overrides or {})
        raw.update({k: v for k, v in cli.items() if v is not None})
        values = {name: prop.default for name, prop in BROKER_PROPERTIES.items()}
        listener_values: dict[str, dict[str, Any]] = {}
        for key, value in raw.items():
            if key.startswith(LISTENER_PREFIX):
                listener, name, parsed = _listener_property(key, value)
                listener_values.setdefault(listener, {})[name] = parsed
                continue
            prop = BROKER_PROPERTIES.get(key)
            if prop is None:
                raise ConfigError(f"unknown config key {key!r}")
            values[key] = prop.parse(value)
        _resolve_node_id(raw, values)
        _resolve_log_dirs(raw, values)
        _check_share_group_bounds(values)
        roles = values["process.roles"]
        if not roles or set(roles) - {"broker", "controller"}:
            raise ConfigError(f"invalid value {','.join(roles)!r} for process.roles: "
                              "broker, controller, or broker,controller")
        return cls(values, listener_values)

    def for_listener(self, listener: str, name: str) -> Any:
        """A property as one listener sees it: its listener.name.<listener>.<name> value,
        else the node-wide one (None for a JAAS config with no listener value)."""
        own = self.listener_values.get(listener.upper(), {})
        if name in own:
            return own[name]
        return self.values.get(name)

    @property
    def data_dirs(self) -> tuple[str, ...]:
        """The log directories `log.dirs` names (or `log.dir`), in order; the first is the
        metadata log's and the event log's (Kafka's metadata.log.dir defaults to it)."""
        return split_log_dirs(self.log_dirs)

    @property
    def retention_ms(self) -> int:
        if self.log_retention_ms is not None:
            return self.log_retention_ms
        if self.log_retention_minutes is not None:
            return self.log_retention_minutes * 60_000
        hours = self.log_retention_hours
        return -1 if hours < 0 else hours * 3_600_000

    @property
    def segment_ms(self) -> int:
        if self.log_roll_ms is not None:
            return self.log_roll_ms
        return self.log_roll_hours * 3_600_000

    def topic_defaults(self) -> dict[str, Any]:
        """The value every topic property takes when a topic does not override it."""
        out = {}
        for prop in BROKER_PROPERTIES.values():
            if prop.topic_name:
                out[prop.topic_name] = self.values[prop.name]
        out["retention.ms"] = self.retention_ms
        out["segment.ms"] = self.segment_ms
        return out


LISTENER_PREFIX = "listener.name."
SECURITY_PREFIXES = ("ssl.", "sasl.")
JAAS_SUFFIX = ".sasl.jaas.config"


# (value, least, most): each share group setting must lie within its own min and max, as
# Kafka's GroupCoordinatorConfig and ShareGroupConfig require at start-up
_SHARE_GROUP_BOUNDS = (
    ("group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
     "group.share.max.heartbeat.interval.ms"),
    ("group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
     "group.share.max.session.timeout.ms"),
    ("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
     "group.share.max.record.lock.duration.ms"),
)


def _check_share_group_bounds(values: Mapping[str, Any]) -> None:
    for name, least, most in _SHARE_GROUP_BOUNDS:
        if values[most] < values[least]:
            raise ConfigError(f"{most} must be greater than or equal to {least}")
        if not values[least] <= values[name] <= values[most]:
            raise ConfigError(f"{name} must be greater than or equal to {least} and less "
                              f"than or equal to {most}")
    interval = values["group.share.heartbeat.interval.ms"]
    if interval >= values["group.share.session.timeout.ms"]:
        raise ConfigError("group.share.heartbeat.interval.ms must be less than "
                          "group.share.session.timeout.ms")


def _listener_property(key: str, value: Any) -> tuple[str, str, Any]:
    """`listener.name.<listener>.<property>` -> (LISTENER, property, parsed value)."""
    rest = key[len(LISTENER_PREFIX):]
    listener, _, name = rest.partition(".")
    if not listener or not name:
        raise ConfigError(f"config key {key!r}: expected listener.name.<listener>.<property>")
    if name.endswith(JAAS_SUFFIX) and name[:-len(JAAS_SUFFIX)]:
        return listener.upper(), name.lower(), str(value)
    prop = BROKER_PROPERTIES.get(name)
    if prop is None or not name.startswith(SECURITY_PREFIXES):
        raise ConfigError(f"unknown config key {key!r}: only security properties (ssl.*, "
                          "sasl.*, <mechanism>.sasl.jaas.config) may be set per listener")
    return listener.upper(), name, prop.parse(value)


def split_log_dirs(text: str) -> tuple[str, ...]:
    return tuple(d.strip() for d in text.split(",") if d.strip())


def _resolve_log_dirs(raw: dict[str, Any], values: dict[str, Any]) -> None:
    """log.dirs wins over log.dir, as in Kafka; each directory once, none empty."""
    if raw.get("log.dirs") is None and values["log.dir"] is not None:
        values["log.dirs"] = values["log.dir"]
    dirs = split_log_dirs(values["log.dirs"])
    if not dirs:
        raise ConfigError("log.dirs names no directory")
    if len({os.path.normpath(os.path.abspath(d)) for d in dirs}) != len(dirs):
        raise ConfigError(f"log.dirs names a directory twice: {values['log.dirs']!r}")


def _resolve_node_id(raw: dict[str, Any], values: dict[str, Any]) -> None:
    """node.id and broker.id are one id (KRaft's name and the old one); both may be given,
    but only if they agree."""
    node_id = values["node.id"]
    if node_id is not None:
        if raw.get("broker.id") is not None and values["broker.id"] != node_id:
            raise ConfigError(f"node.id {node_id} and broker.id {values['broker.id']} differ: "
                              "they name the same id, set one")
        values["broker.id"] = node_id
    values["node.id"] = values["broker.id"]


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, Any]:
    """Parse CreateTopics configs; ConfigError names the first bad key."""
    parsed = _parse_configs(configs, TOPIC_PROPERTIES, "topic")
    for key in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
        if key in parsed:
            parse_throttled_replicas(",".join(parsed[key]))
    return parsed


def parse_throttled_replicas(text: str) -> tuple[str, ...]:
    """A throttled-replicas value ("*", or "partition:broker,..."), checked as Kafka's
    ThrottledReplicaListValidator does; ConfigError says what is wrong."""
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if items == (ALL_REPLICAS,):
        return items
    for item in items:
        p, sep, b = item.partition(":")
        if not sep or not p.isdigit() or not b.isdigit():
            raise ConfigError(f"invalid throttled replica {item!r}: expected * or "
                              "partition:broker, e.g. 0:101,1:102")
    return items


def _parse_configs(configs: Mapping[str, str | None], properties: Mapping[str, Prop],
                   kind: str) -> dict[str, Any]:
    parsed = {}
    for key, raw in configs.items():
        prop = properties.get(key)
        if prop is None:
            raise ConfigError(f"unknown {kind} config {key!r}")
        if raw is None:
            raise ConfigError(f"null value for {kind} config {key!r}")
        parsed[key] = prop.parse(raw)
    return parsed


def topic_log_config(broker: BrokerConfig, overrides: dict[str, Any]) -> LogConfig:
    """The LogConfig of one topic: broker defaults, then the topic's own overrides."""
    eff = broker.topic_defaults() | overrides
    if isinstance(eff["cleanup.policy"], (tuple, list)):  # a list once read back from JSON
        eff["cleanup.policy"] = ",".join(eff["cleanup.policy"])
    return LogConfig.from_properties(eff)


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties, the subset Kafka's server.properties uses: key=value, # comments."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigError(f"line {number}: expected key=value, got {line!r}")
        out[line[:sep].strip()] = line[sep + 1:].strip()
    return out

