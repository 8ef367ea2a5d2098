"""The controller's producer ids: AllocateProducerIds hands a broker the next block
(Kafka's ProducerIdControlManager).

Owns `allocate_producer_ids`, a pure function of the image and the request that returns
the records to append and the response: one ProducerIdsRecord that moves the image's next
producer id past the block. A broker that is not registered at the epoch it names gets
STALE_BROKER_EPOCH, and a block that would pass the largest long UNKNOWN_SERVER_ERROR, as
in Kafka; neither writes anything.
"""

from __future__ import annotations

from broker.controller.controller_result import Record
from broker.controller.image import MetadataImage
from protocol.errors import ErrorCode
from protocol.metadata_records import MetadataRecordType as T

LONG_MAX = 2**63 - 1


def allocate_producer_ids(image: MetadataImage, broker_id: int, broker_epoch: int,
                          block_size: int) -> tuple[list[Record], dict]:
    """AllocateProducerIds: the next block of producer ids for a broker."""
    broker = image.brokers.get(broker_id)
    if broker is None or broker.epoch != broker_epoch:
        return [], {"throttle_time_ms": 0, "error_code": int(ErrorCode.STALE_BROKER_EPOCH),
                    "producer_id_start": -1, "producer_id_len": 0}
    start = image.next_producer_id
    if start > LONG_MAX - block_size:
        return [], {"throttle_time_ms": 0, "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                    "producer_id_start": -1, "producer_id_len": 0}
    record = (int(T.PRODUCER_IDS_RECORD), 0, {"broker_id": broker_id,
                                              "broker_epoch": broker_epoch,
                                              "next_producer_id": start + block_size})
    return [record], {"throttle_time_ms": 0, "error_code": int(ErrorCode.NONE),
                      "producer_id_start": start, "producer_id_len": block_size}
