"""Produce (0): record batches in, offsets out. Records stay opaque bytes.

v11 and v12 add no field: v11 lets the broker answer TRANSACTION_ABORTABLE (KIP-890), v12
lets a transactional producer skip AddPartitionsToTxn where the transaction protocol v2 is
on (KIP-890 part 2, Kafka 4.0). Both mean nothing more for a producer outside a
transaction."""

from protocol.schema import F, Message, Struct

ProduceRequest = Message(
    "ProduceRequest", api_key=0, valid="3-12", flexible="9+", fields=[
        F("transactional_id", "string", "3+", nullable="3+"),
        F("acks", "int16"),
        F("timeout_ms", "int32"),
        F("topic_data", [
            F("name", "string"),
            F("partition_data", [
                F("index", "int32"),
                F("records", "records", nullable="0+"),
            ]),
        ]),
    ])

ProduceResponse = Message(
    "ProduceResponse", api_key=0, valid="3-12", flexible="9+", fields=[
        F("responses", [
            F("name", "string"),
            F("partition_responses", [
                F("index", "int32"),
                F("error_code", "int16"),
                F("base_offset", "int64"),
                F("log_append_time_ms", "int64", "2+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("record_errors", [
                    F("batch_index", "int32", "8+"),
                    F("batch_index_error_message", "string", "8+", nullable="8+"),
                ], "8+"),
                F("error_message", "string", "8+", nullable="8+"),
                F("current_leader", Struct([
                    F("leader_id", "int32", "10+", default=-1),
                    F("leader_epoch", "int32", "10+", default=-1),
                ]), "10+", tag=0),
            ]),
        ]),
        F("throttle_time_ms", "int32", "1+"),
        F("node_endpoints", [
            F("node_id", "int32", "10+"),
            F("host", "string", "10+"),
            F("port", "int32", "10+"),
            F("rack", "string", "10+", nullable="10+"),
        ], "10+", tag=0),
    ])

