"""How the metadata log's Raft entries look as bytes: on disk and inside Fetch responses.

Owns: `pack_records` / `unpack_records` (the records of one controller operation as one
entry's payload) and `entry_to_batch` / `batches_to_entries` (an entry as a RecordBatch v2).

One Raft entry is one controller operation: CreateTopics of 1,000 partitions is one entry
holding the TopicRecord and its 1,000 PartitionRecords. Kafka gets the same all-or-nothing
effect from atomic batches; here an entry is the unit Raft commits or truncates, so a
topic can never be committed without its partitions.

An entry travels as one RecordBatch v2 (our segment format, what `dump-log` reads):
BaseOffset is the entry's Raft offset (one offset per entry, so LastOffsetDelta is 0),
PartitionLeaderEpoch its epoch, and its single record's value the payload. A control
entry (the first entry of a leader's epoch) is a control batch. The payload is a count
and then each framed metadata record (`protocol.metadata_records`) with its length, all
unsigned varints. An entry holding a voter set (KIP-853) is a control batch of one
VotersRecord (control type 6). Kafka writes a KRaftVersionRecord (type 5) beside it; here
an entry is one offset and one record, and kraft.version 1 goes without saying wherever a
VotersRecord is (a static quorum, kraft.version 0, never writes one).
"""

from __future__ import annotations

from typing import Iterable

from broker.controller.raft_log import Entry
from broker.controller.voter_set import VoterSetError, decode_voters, encode_voters
from protocol.control_records import ControlRecordType, decode_control_type, encode_control_key
from protocol.batch_walk import BatchWalk
from protocol.record_errors import CorruptRecordError, InvalidRecordError
from protocol.primitives import uvarint_bytes
from protocol.records import Record, decode_batch, encode_batch

# Kafka's ControlRecordType.LEADER_CHANGE key: version 0, type 2
LEADER_CHANGE_KEY = b"\x00\x00\x00\x02"
MAX_RECORDS_PER_ENTRY = 1_000_000


def pack_records(records: Iterable[bytes]) -> bytes:
    items = list(records)
    out = bytearray(uvarint_bytes(len(items)))
    for r in items:
        out += uvarint_bytes(len(r))
        out += r
    return bytes(out)


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise CorruptRecordError("truncated or overlong varint in a metadata entry")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def unpack_records(payload: bytes) -> list[bytes]:
    """The framed records of an entry's payload; CorruptRecordError if they do not fill it."""
    count, pos = _uvarint(payload, 0)
    if count > MAX_RECORDS_PER_ENTRY or count > len(payload):
        raise CorruptRecordError(f"a metadata entry claims {count} records")
    out = []
    for _ in range(count):
        size, pos = _uvarint(payload, pos)
        if pos + size > len(payload):
            raise CorruptRecordError("a metadata record runs past its entry")
        out.append(payload[pos:pos + size])
        pos += size
    if pos != len(payload):
        raise CorruptRecordError("bytes after the last record of a metadata entry")
    return out


def entry_to_batch(entry: Entry, timestamp_ms: int = 0) -> bytes:
    if entry.voters is not None:
        return encode_batch([
            Record(entry.offset, timestamp_ms, encode_control_key(ControlRecordType.KRAFT_VOTERS),
                   encode_voters(entry.voters))],
            base_offset=entry.offset, partition_leader_epoch=entry.epoch, is_control=True)
    key = LEADER_CHANGE_KEY if entry.control else None
    return encode_batch([Record(entry.offset, timestamp_ms, key, entry.record)],
                        base_offset=entry.offset, partition_leader_epoch=entry.epoch,
                        is_control=entry.control)


def entries_to_batches(entries: Iterable[Entry]) -> bytes:
    return b"".join(entry_to_batch(e) for e in entries)


def batches_to_entries(buf: bytes) -> list[Entry]:
    """Every whole, CRC-valid batch in `buf` as an entry, stopping at the first torn or
    corrupt one (what follows it cannot be trusted)."""
    out = []
    for pos, header in BatchWalk(buf):
        try:
            _, records = decode_batch(buf, pos)
        except CorruptRecordError:
            break
        if len(records) != 1:
            break  # not a batch this module wrote
        record = records[0]
        if header.is_control and record.key != LEADER_CHANGE_KEY:
            try:
                if decode_control_type(record.key) != ControlRecordType.KRAFT_VOTERS:
                    break
                voters = decode_voters(record.value or b"")
            except (VoterSetError, InvalidRecordError):
                break
            out.append(Entry(header.base_offset, header.partition_leader_epoch, b"", True,
                             voters))
            continue
        out.append(Entry(header.base_offset, header.partition_leader_epoch,
                         record.value or b"", header.is_control))
    return out
