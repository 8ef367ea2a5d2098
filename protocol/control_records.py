"""Control records: the key every record of a control batch carries, and the
end-transaction marker that commits or aborts a transaction in a data partition.

Owns `ControlRecordType`, the control key (int16 version 0, int16 type), and
`EndTransactionMarker`: its value (int16 version 0, int32 coordinator epoch), its key and
value bytes, and the one-record control batch a partition leader appends for it (Kafka's
EndTransactionMarker, ControlRecordType and MemoryRecords.withEndTransactionMarker).

Reading follows Kafka's leniency: a key or marker value of a newer version is read as v0,
whose fields a newer version must keep in front, and a type we do not know is returned as
its number, so that a reader can skip it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from protocol.batch_header import NO_PARTITION_LEADER_EPOCH, NO_SEQUENCE
from protocol.record_errors import InvalidRecordError
from protocol.records import Record, encode_batch


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1
    # the KRaft quorum's own, in __cluster_metadata
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5  # KIP-853: KRaftVersionRecord
    KRAFT_VOTERS = 6  # KIP-853: VotersRecord


CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")  # version, type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def encode_control_key(record_type: int) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, record_type)


def decode_control_type(key: bytes | None) -> int:
    """The control record type a key names: a ControlRecordType, or the bare number of a
    type we do not know."""
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(
            f"a control record key needs {_KEY.size} bytes, found {0 if key is None else len(key)}")
    version, record_type = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"control record key version {version}: corrupt data?")
    try:
        return ControlRecordType(record_type)
    except ValueError:
        return record_type


@dataclass(frozen=True)
class EndTransactionMarker:
    """A transaction's end in one partition: committed or aborted, and the epoch of the
    coordinator that wrote it (a leader refuses a marker from an older coordinator)."""

    committed: bool
    coordinator_epoch: int

    @property
    def type(self) -> ControlRecordType:
        return ControlRecordType.COMMIT if self.committed else ControlRecordType.ABORT

    def key(self) -> bytes:
        return encode_control_key(self.type)

    def value(self) -> bytes:
        return _MARKER_VALUE.pack(END_TXN_MARKER_VERSION, self.coordinator_epoch)


def decode_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker:
    """The marker in a control record's key and value; InvalidRecordError if it is none."""
    record_type = decode_control_type(key)
    if record_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidRecordError(f"control record type {record_type} is no transaction marker")
    if value is None or len(value) < _MARKER_VALUE.size:
        raise InvalidRecordError(f"an end transaction marker value needs {_MARKER_VALUE.size} "
                                 f"bytes, found {0 if value is None else len(value)}")
    version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    if version < 0:
        raise InvalidRecordError(f"end transaction marker version {version}: corrupt data?")
    return EndTransactionMarker(record_type == ControlRecordType.COMMIT, coordinator_epoch)


def end_txn_marker_batch(marker: EndTransactionMarker, *, producer_id: int, producer_epoch: int,
                         timestamp_ms: int, base_offset: int = 0,
                         partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """The control batch that ends a producer's transaction in a partition: transactional,
    control, the producer's id and epoch, no sequence, and the marker as its one record."""
    return encode_batch([Record(base_offset, timestamp_ms, marker.key(), marker.value())],
                        base_offset=base_offset, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE,
                        partition_leader_epoch=partition_leader_epoch, is_transactional=True,
                        is_control=True)
