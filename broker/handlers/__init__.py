"""Request handlers, one module per API family, and the dispatch table.

Owns: `HANDLERS` (api key -> async handler); what a handler is given, `RequestContext`,
lives in broker.handlers.context. A handler returns a response body as a mapping,
or None when the protocol says no response is sent (acks=0 produce). Errors travel as
Kafka error codes inside the body; a handler raises only on our own bugs.
"""

from __future__ import annotations

from broker.handlers import (
    acls, api_versions, cluster, configs, consumer_group, delete_records, describe_producers,
    fetch, groups, leader_epoch, list_offsets, log_dirs, metadata, offsets, produce,
    producer_id, reassignment, sasl, scram, share_fetch, share_group, share_offsets,
    share_state, telemetry, topics, transactions, txn_markers,
)
from broker.handlers.context import Handler
from protocol import messages as m

HANDLERS: dict[int, Handler] = {
    m.PRODUCE: produce.handle,
    m.FETCH: fetch.handle,
    m.LIST_OFFSETS: list_offsets.handle,
    m.METADATA: metadata.handle,
    m.API_VERSIONS: api_versions.handle,
    m.CREATE_TOPICS: topics.handle_create_topics,
    m.DELETE_TOPICS: topics.handle_delete_topics,
    m.INIT_PRODUCER_ID: producer_id.handle,
    m.OFFSET_FOR_LEADER_EPOCH: leader_epoch.handle,
    m.DESCRIBE_CONFIGS: configs.handle,
    m.CREATE_PARTITIONS: topics.handle_create_partitions,
    m.OFFSET_COMMIT: offsets.handle_offset_commit,
    m.OFFSET_FETCH: offsets.handle_offset_fetch,
    m.OFFSET_DELETE: offsets.handle_offset_delete,
    m.FIND_COORDINATOR: groups.handle_find_coordinator,
    m.JOIN_GROUP: groups.handle_join_group,
    m.HEARTBEAT: groups.handle_heartbeat,
    m.LEAVE_GROUP: groups.handle_leave_group,
    m.SYNC_GROUP: groups.handle_sync_group,
    m.DESCRIBE_GROUPS: groups.handle_describe_groups,
    m.LIST_GROUPS: groups.handle_list_groups,
    m.DELETE_GROUPS: groups.handle_delete_groups,
    m.ELECT_LEADERS: cluster.handle_elect_leaders,
    m.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
    m.DESCRIBE_QUORUM: cluster.handle_describe_quorum,
    m.ALTER_CONFIGS: configs.handle_alter_configs,
    m.DELETE_RECORDS: delete_records.handle,
    m.DESCRIBE_LOG_DIRS: log_dirs.handle,
    m.ALTER_REPLICA_LOG_DIRS: log_dirs.handle_alter,
    m.ALTER_PARTITION_REASSIGNMENTS: reassignment.handle_alter,
    m.LIST_PARTITION_REASSIGNMENTS: reassignment.handle_list,
    m.INCREMENTAL_ALTER_CONFIGS: configs.handle_incremental_alter_configs,
    m.CONSUMER_GROUP_HEARTBEAT: consumer_group.handle_heartbeat,
    m.CONSUMER_GROUP_DESCRIBE: consumer_group.handle_describe,
    m.DESCRIBE_ACLS: acls.handle_describe_acls,
    m.CREATE_ACLS: acls.handle_create_acls,
    m.DELETE_ACLS: acls.handle_delete_acls,
    m.SASL_HANDSHAKE: sasl.handle_handshake,
    m.SASL_AUTHENTICATE: sasl.handle_authenticate,
    m.DESCRIBE_USER_SCRAM_CREDENTIALS: scram.handle_describe,
    m.ALTER_USER_SCRAM_CREDENTIALS: scram.handle_alter,
    m.DESCRIBE_TOPIC_PARTITIONS: metadata.handle_describe_topic_partitions,
    m.GET_TELEMETRY_SUBSCRIPTIONS: telemetry.handle_get_subscriptions,
    m.PUSH_TELEMETRY: telemetry.handle_push,
    m.LIST_CLIENT_METRICS_RESOURCES: telemetry.handle_list_resources,
    m.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions,
    m.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets,
    m.END_TXN: transactions.handle_end_txn,
    m.TXN_OFFSET_COMMIT: transactions.handle_txn_offset_commit,
    m.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
    m.LIST_TRANSACTIONS: transactions.handle_list_transactions,
    m.WRITE_TXN_MARKERS: txn_markers.handle,
    m.DESCRIBE_PRODUCERS: describe_producers.handle,
    m.SHARE_GROUP_HEARTBEAT: share_group.handle_heartbeat,
    m.SHARE_GROUP_DESCRIBE: share_group.handle_describe,
    m.DESCRIBE_SHARE_GROUP_OFFSETS: share_offsets.handle_describe,
    m.ALTER_SHARE_GROUP_OFFSETS: share_offsets.handle_alter,
    m.DELETE_SHARE_GROUP_OFFSETS: share_offsets.handle_delete,
    m.SHARE_FETCH: share_fetch.handle_share_fetch,
    m.SHARE_ACKNOWLEDGE: share_fetch.handle_share_acknowledge,
    m.INITIALIZE_SHARE_GROUP_STATE: share_state.handle_initialize,
    m.READ_SHARE_GROUP_STATE: share_state.handle_read,
    m.WRITE_SHARE_GROUP_STATE: share_state.handle_write,
    m.DELETE_SHARE_GROUP_STATE: share_state.handle_delete,
    m.READ_SHARE_GROUP_STATE_SUMMARY: share_state.handle_read_summary,
}

assert HANDLERS.keys() == m.APIS.keys(), "every declared API needs a handler, and no more"
