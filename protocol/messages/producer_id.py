"""InitProducerId (22): producer ids and epochs for idempotent producers."""

from protocol.schema import F, Message

InitProducerIdRequest = Message(
    "InitProducerIdRequest", api_key=22, valid="0-4", flexible="2+", fields=[
        F("transactional_id", "string", nullable="0+"),
        F("transaction_timeout_ms", "int32"),
        F("producer_id", "int64", "3+", default=-1),
        F("producer_epoch", "int16", "3+", default=-1),
    ])

InitProducerIdResponse = Message(
    "InitProducerIdResponse", api_key=22, valid="0-4", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id", "int64", default=-1),
        F("producer_epoch", "int16"),
    ])

