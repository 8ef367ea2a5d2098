"""Transactions on the wire (KIP-98, KIP-664, KIP-890): AddPartitionsToTxn (24),
AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27), TxnOffsetCommit (28),
DescribeProducers (61), DescribeTransactions (65) and ListTransactions (66).

Owns these eight APIs' request and response declarations, at every version Kafka defines as
stable. All eight are served (broker/handlers/transactions.py, txn_markers.py and
describe_producers.py).

Three of them changed shape along the way, which is why the names below differ by version:

- AddPartitionsToTxn v4+ is the broker's batched form (KIP-890 part 1): a broker asks the
  coordinator about several transactions at once, and with `verify_only` only checks that a
  partition is already in the transaction. Clients keep to v3 and below, whose fields Kafka
  names `V3AndBelow...`; the v4+ response adds a top-level error code.
- EndTxn v5 (KIP-890 part 2, Kafka 4.0) answers with the producer id and epoch, since the
  coordinator bumps the epoch at the end of every transaction.
- WriteTxnMarkers v2 (KIP-1228) tags each marker with the transaction version that wrote
  it; Kafka 4.0 dropped v0, which the October 2024 reference still has, and we keep it.

TxnOffsetCommit v5 and ListTransactions v2 (a transactional id pattern, KIP-1152) are
newer than that reference too; tests/protocol/test_spec_crosscheck.py checks them against
the newer copy kafka-python ships.
"""

from protocol.schema import F, Message


def _topic_partitions(versions: str = "0+") -> list[F]:
    """Kafka's AddPartitionsToTxnTopic: a topic and partition indexes."""
    return [F("name", "string", versions), F("partitions", "[]int32", versions)]


def _topic_results(versions: str = "0+") -> list[F]:
    """Kafka's AddPartitionsToTxnTopicResult: an error code per partition of a topic."""
    return [
        F("name", "string", versions),
        F("results_by_partition", [
            F("partition_index", "int32", versions),
            F("partition_error_code", "int16", versions),
        ], versions),
    ]


AddPartitionsToTxnRequest = Message(
    "AddPartitionsToTxnRequest", api_key=24, valid="0-5", flexible="3+", fields=[
        F("transactions", [
            F("transactional_id", "string", "4+"),
            F("producer_id", "int64", "4+"),
            F("producer_epoch", "int16", "4+"),
            F("verify_only", "bool", "4+", default=False),
            F("topics", _topic_partitions(), "4+"),
        ], "4+"),
        F("v3_and_below_transactional_id", "string", "0-3"),
        F("v3_and_below_producer_id", "int64", "0-3"),
        F("v3_and_below_producer_epoch", "int16", "0-3"),
        F("v3_and_below_topics", _topic_partitions(), "0-3"),
    ])

AddPartitionsToTxnResponse = Message(
    "AddPartitionsToTxnResponse", api_key=24, valid="0-5", flexible="3+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "4+"),
        F("results_by_transaction", [
            F("transactional_id", "string", "4+"),
            F("topic_results", _topic_results(), "4+"),
        ], "4+"),
        F("results_by_topic_v3_and_below", _topic_results(), "0-3"),
    ])

AddOffsetsToTxnRequest = Message(
    "AddOffsetsToTxnRequest", api_key=25, valid="0-4", flexible="3+", fields=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("group_id", "string"),
    ])

AddOffsetsToTxnResponse = Message(
    "AddOffsetsToTxnResponse", api_key=25, valid="0-4", flexible="3+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
    ])

EndTxnRequest = Message(
    "EndTxnRequest", api_key=26, valid="0-5", flexible="3+", fields=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("committed", "bool"),  # false: abort
    ])

EndTxnResponse = Message(
    "EndTxnResponse", api_key=26, valid="0-5", flexible="3+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id", "int64", "5+", default=-1),
        F("producer_epoch", "int16", "5+", default=-1),
    ])

WriteTxnMarkersRequest = Message(
    "WriteTxnMarkersRequest", api_key=27, valid="0-2", flexible="1+", fields=[
        F("markers", [
            F("producer_id", "int64"),
            F("producer_epoch", "int16"),
            F("transaction_result", "bool"),  # false: ABORT, true: COMMIT
            F("topics", [
                F("name", "string"),
                F("partition_indexes", "[]int32"),
            ]),
            F("coordinator_epoch", "int32"),
            F("transaction_version", "int8", "2+"),  # 0 and 1 the classic protocol, 2 TV2
        ]),
    ])

WriteTxnMarkersResponse = Message(
    "WriteTxnMarkersResponse", api_key=27, valid="0-2", flexible="1+", fields=[
        F("markers", [
            F("producer_id", "int64"),
            F("topics", [
                F("name", "string"),
                F("partitions", [
                    F("partition_index", "int32"),
                    F("error_code", "int16"),
                ]),
            ]),
        ]),
    ])

TxnOffsetCommitRequest = Message(
    "TxnOffsetCommitRequest", api_key=28, valid="0-5", flexible="3+", fields=[
        F("transactional_id", "string"),
        F("group_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("generation_id", "int32", "3+", default=-1),
        F("member_id", "string", "3+"),
        F("group_instance_id", "string", "3+", nullable="3+"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "2+", default=-1),
                F("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ])

TxnOffsetCommitResponse = Message(
    "TxnOffsetCommitResponse", api_key=28, valid="0-5", flexible="3+", fields=[
        F("throttle_time_ms", "int32"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ])

DescribeProducersRequest = Message(
    "DescribeProducersRequest", api_key=61, valid="0", flexible="0+", fields=[
        F("topics", [
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ]),
    ])

DescribeProducersResponse = Message(
    "DescribeProducersResponse", api_key=61, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
                F("active_producers", [
                    F("producer_id", "int64"),
                    F("producer_epoch", "int32"),  # int32 here, unlike everywhere else
                    F("last_sequence", "int32", default=-1),
                    F("last_timestamp", "int64", default=-1),
                    F("coordinator_epoch", "int32"),
                    F("current_txn_start_offset", "int64", default=-1),
                ]),
            ]),
        ]),
    ])

DescribeTransactionsRequest = Message(
    "DescribeTransactionsRequest", api_key=65, valid="0", flexible="0+", fields=[
        F("transactional_ids", "[]string"),
    ])

DescribeTransactionsResponse = Message(
    "DescribeTransactionsResponse", api_key=65, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("transaction_states", [
            F("error_code", "int16"),
            F("transactional_id", "string"),
            F("transaction_state", "string"),  # Kafka's state name, e.g. "Ongoing"
            F("transaction_timeout_ms", "int32"),
            F("transaction_start_time_ms", "int64"),
            F("producer_id", "int64"),
            F("producer_epoch", "int16"),
            # partitions without their marker yet, once the transaction prepares to end
            F("topics", [
                F("topic", "string"),
                F("partitions", "[]int32"),
            ]),
        ]),
    ])

ListTransactionsRequest = Message(
    "ListTransactionsRequest", api_key=66, valid="0-2", flexible="0+", fields=[
        F("state_filters", "[]string"),
        F("producer_id_filters", "[]int64"),
        F("duration_filter", "int64", "1+", default=-1),  # negative: no filter
        F("transactional_id_pattern", "string", "2+", nullable="2+"),
    ])

ListTransactionsResponse = Message(
    "ListTransactionsResponse", api_key=66, valid="0-2", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("unknown_state_filters", "[]string"),
        F("transaction_states", [
            F("transactional_id", "string"),
            F("producer_id", "int64"),
            F("transaction_state", "string"),
        ]),
    ])
