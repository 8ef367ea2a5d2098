"""DeleteRecords (21): move partitions' log start offsets forward (Kafka's
Admin.deleteRecords, kafka-delete-records.sh). v1 is v0; v2 is flexible."""

from protocol.schema import F, Message

DeleteRecordsRequest = Message(
    "DeleteRecordsRequest", api_key=21, valid="0-2", flexible="2+", fields=[
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("offset", "int64"),  # -1: the high watermark
            ]),
        ]),
        F("timeout_ms", "int32"),
    ])

DeleteRecordsResponse = Message(
    "DeleteRecordsResponse", api_key=21, valid="0-2", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("topics", [
            F("name", "string"),
            F("partitions", [
                F("partition_index", "int32"),
                F("low_watermark", "int64"),
                F("error_code", "int16"),
            ]),
        ]),
    ])
