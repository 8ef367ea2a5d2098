"""`minibroker dump-log`: print the batches (and records) of log segment files, in the
manner of Kafka's kafka-dump-log.sh (DumpLogSegments).

    minibroker dump-log DIR/orders-0/00000000000000000000.log --print-data-log
    minibroker dump-log DIR/__consumer_offsets-7 --offsets-decoder
    minibroker dump-log DIR/__transaction_state-3 --transaction-log-decoder
    minibroker dump-log DIR/orders-0 --json
    minibroker dump-log --cluster-metadata DIR

PATH is a ``.log`` segment or a partition directory (then each of its segments, in offset
order). One line per batch; with ``--print-data-log`` one ``|`` line per record under it;
``--offsets-decoder`` (implies ``--print-data-log``) shows __consumer_offsets keys and
values readably and decodes the consumer protocol's subscriptions and assignments;
``--transaction-log-decoder`` (implies ``--print-data-log``) shows __transaction_state keys
and values (Kafka's ``transaction_metadata::transactionalId=T`` /
``producerId:P,producerEpoch:E,state=Ongoing,partitions=[...],...``); a control batch's
record is shown as its end-transaction marker, ``endTxnMarker: COMMIT coordinatorEpoch: N``;
``--json`` prints one JSON object per file, batch, record and problem instead.

``--cluster-metadata`` reads the KRaft metadata log (Kafka's --cluster-metadata-decoder):
PATH is a data directory, its ``__cluster_metadata-0`` directory or one of that
directory's segments. A directory's ``quorum-state`` and snapshot files come first
(``broker.controller.metadata_log``), then under each batch the Raft entry it holds (offset,
epoch, control flag) and each metadata record of that entry as Kafka's decoder prints
one: ``{"type":"TOPIC_RECORD","version":0,"data":{...}}`` with camelCase field names and
Uuids in base64; a dynamic quorum's VotersRecord entry (KIP-853) prints its voters, each
with its directory id and endpoints.

The file is read with plain Python and never written, so a live segment can be dumped: the
file's size is taken once when it is opened (as Kafka's FileRecords does) and a partial
batch at its end is reported, not decoded. A batch whose CRC does not match is printed
with ``isvalid: false`` and the dump goes on with the next batch; only a header that is
structurally broken (bad magic, impossible length) ends a file's dump, because the next
batch's position cannot be known.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
import struct
import sys
from pathlib import Path
from typing import Any, TextIO

from broker.controller import metadata_log, quorum_state
from broker.controller.raft_batches import batches_to_entries, unpack_records
from broker.log.file_records import (
    SEGMENT_FILE_NAME, Batch, SegmentPathError, Tail, read_segment, segment_files,
)
from protocol.codecs import Codec
from protocol.consumer_protocol import decode_assignment, decode_subscription, partition_names
from protocol.control_records import ControlRecordType, decode_control_type, decode_end_txn_marker
from protocol.errors import DecodeError
from protocol.messages import offsets_topic, transaction_log
from protocol.record_errors import InvalidRecordError
from protocol.metadata_records import decode_metadata_record
from protocol.record_errors import CorruptRecordError
from protocol.records import (
    DELETE_HORIZON_MASK, BatchHeader, RecordError, decode_batch,
)

__all__ = ["dump", "main", "segment_files"]

_INT32_MAX = 2**31 - 1


# One error for every path that cannot be dumped: the reader's (no such file, no segments)
# and this module's own (not a metadata log)
DumpError = SegmentPathError


# --- rendering helpers -------------------------------------------------------------

def _codec_name(codec: int) -> str:
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return f"unknown({codec})"


def _sequence(base_sequence: int, delta: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap at int32 max to 0."""
    if base_sequence < 0:
        return -1
    if base_sequence > _INT32_MAX - delta:
        return delta - (_INT32_MAX - base_sequence) - 1
    return base_sequence + delta


_CONTROL_CHARS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}


def _text(data: bytes | None) -> str | None:
    """Bytes as UTF-8 text; undecodable bytes as \\xNN (as Python escapes them)."""
    return None if data is None else data.decode("utf-8", "backslashreplace")


def _one_line(text: str) -> str:
    """Control characters escaped, so that every record stays on one line."""
    return text.translate(_CONTROL_CHARS)


def _timestamp_type(header: BatchHeader) -> str:
    return "LogAppendTime" if header.timestamp_type else "CreateTime"


def _batch_fields(b: Batch) -> dict[str, Any]:
    h = b.header
    return {
        "baseOffset": h.base_offset, "lastOffset": h.last_offset, "count": h.records_count,
        "baseSequence": h.base_sequence,
        "lastSequence": _sequence(h.base_sequence, h.last_offset_delta),
        "producerId": h.producer_id, "producerEpoch": h.producer_epoch,
        "partitionLeaderEpoch": h.partition_leader_epoch,
        "isTransactional": h.is_transactional, "isControl": h.is_control,
        "deleteHorizonMs": h.base_timestamp if h.attributes & DELETE_HORIZON_MASK else None,
        "position": b.position, "timestampType": _timestamp_type(h),
        "maxTimestamp": h.max_timestamp, "size": h.size, "magic": h.magic,
        "compresscodec": _codec_name(h.compression), "crc": h.crc, "crcValid": b.crc_ok,
    }


def _bool(v: bool) -> str:
    return "true" if v else "false"


def format_batch(b: Batch) -> str:
    """Kafka's batch line (DumpLogSegments.printBatchLevel); deleteHorizonMs only when the
    batch has one (a compacted batch holding tombstones)."""
    f = _batch_fields(b)
    horizon = "" if f["deleteHorizonMs"] is None else f" deleteHorizonMs: {f['deleteHorizonMs']}"
    return (f"baseOffset: {f['baseOffset']} lastOffset: {f['lastOffset']} count: {f['count']}"
            f" baseSequence: {f['baseSequence']} lastSequence: {f['lastSequence']}"
            f" producerId: {f['producerId']} producerEpoch: {f['producerEpoch']}"
            f" partitionLeaderEpoch: {f['partitionLeaderEpoch']}"
            f" isTransactional: {_bool(f['isTransactional'])}"
            f" isControl: {_bool(f['isControl'])}{horizon} position: {f['position']}"
            f" {f['timestampType']}: {f['maxTimestamp']} size: {f['size']} magic: {f['magic']}"
            f" compresscodec: {f['compresscodec']} crc: {f['crc']} isvalid: {_bool(f['crcValid'])}")


# --- __consumer_offsets ------------------------------------------------------------

def _java_list(items) -> str:
    return "[" + ", ".join(items) + "]"


def _member_assignment_text(protocol_type: str, member) -> str:
    """Kafka's GroupMetadataManager formatting: member=[t-0, t-1] (plus :hex user data)
    for the consumer protocol, member=hex bytes otherwise."""
    if protocol_type == "consumer":
        try:
            a = decode_assignment(member.assignment)
        except Exception:  # noqa: BLE001 - undecodable bytes are shown as hex
            return f"{member.member_id}={member.assignment.hex()}"
        text = f"{member.member_id}={_java_list(partition_names(a.partitions))}"
        return f"{text}:{a.user_data.hex()}" if a.user_data else text
    return f"{member.member_id}={member.assignment.hex()}"


def _member_subscription_text(protocol_type: str, member) -> str:
    if protocol_type == "consumer":
        try:
            s = decode_subscription(member.subscription)
        except Exception:  # noqa: BLE001
            return f"{member.member_id}={member.subscription.hex()}"
        return f"{member.member_id}={_java_list(s.topics)}"
    return f"{member.member_id}={member.subscription.hex()}"


def _subscription_json(protocol_type: str, data: bytes) -> Any:
    if protocol_type != "consumer":
        return data.hex()
    try:
        s = decode_subscription(data)
    except Exception:  # noqa: BLE001
        return data.hex()
    return {"version": s.version, "topics": s.topics,
            "userData": None if s.user_data is None else s.user_data.hex(),
            "ownedPartitions": s.owned_partitions, "generationId": s.generation_id,
            "rackId": s.rack_id}


def _assignment_json(protocol_type: str, data: bytes) -> Any:
    if protocol_type != "consumer":
        return data.hex()
    try:
        a = decode_assignment(data)
    except Exception:  # noqa: BLE001
        return data.hex()
    return {"version": a.version, "partitions": a.partitions,
            "userData": None if a.user_data is None else a.user_data.hex()}


def _skipped(offset: int, reason: str) -> tuple[str, None, dict]:
    """An internal topic's record that does not decode: Kafka's decoders' text for it."""
    msg = f"Error at offset {offset}, skipping. {reason}"
    return msg, None, {"error": msg}


def decode_offsets_record(offset: int, key: bytes | None, value: bytes | None
                          ) -> tuple[str | None, str | None, dict]:
    """(key text, payload text, JSON fields) of one __consumer_offsets record.

    Texts follow Kafka's offsets decoder: ``offset_commit::group=G,partition=T-P`` /
    ``offset=N leaderEpoch=E metadata=M``, ``group_metadata::group=G`` / a JSON summary,
    ``<DELETE>`` for a tombstone. A payload text of None prints no payload.
    """
    if key is None:
        return _skipped(offset, "The record has no key.")
    try:
        k = offsets_topic.decode_key(key)
    except Exception as e:  # noqa: BLE001 - a bad record is reported, not fatal
        return _skipped(offset, str(e))
    if k is None:
        version = struct.unpack_from(">h", key)[0]
        msg = f"Unknown record type {version} at offset {offset}, skipping."
        return msg, None, {"error": msg}
    if isinstance(k, offsets_topic.OffsetKey):
        key_text = f"offset_commit::group={k.group},partition={k.topic}-{k.partition}"
        key_json = {"type": "offset_commit", "group": k.group, "topic": k.topic,
                    "partition": k.partition}
    else:
        key_text = f"group_metadata::group={k.group}"
        key_json = {"type": "group_metadata", "group": k.group}
    try:
        v = offsets_topic.decode_value(k, value)
    except Exception as e:  # noqa: BLE001
        msg = f"Error at offset {offset}, skipping. {e}"
        return key_text, f"<{msg}>", {"key": key_json, "error": msg}
    if v is None:
        return key_text, "<DELETE>", {"key": key_json, "payload": None}
    if isinstance(k, offsets_topic.OffsetKey):
        payload = {"offset": v.offset, "leaderEpoch": v.get("leader_epoch", -1),
                   "metadata": v.metadata, "commitTimestamp": v.commit_timestamp}
        if "expire_timestamp" in v:
            payload["expireTimestamp"] = v.expire_timestamp
        text = f"offset={v.offset} leaderEpoch={payload['leaderEpoch']} metadata={v.metadata}"
        return key_text, text, {"key": key_json, "payload": payload}
    ptype = v.protocol_type
    members = list(v.members)
    summary = {
        "protocolType": ptype, "protocol": v.protocol, "generationId": v.generation,
        "assignment": "{" + ",".join(_member_assignment_text(ptype, m) for m in members) + "}",
        "subscription": "{" + ",".join(_member_subscription_text(ptype, m)
                                       for m in members) + "}",
    }
    payload = {
        "protocolType": ptype, "protocol": v.protocol, "generationId": v.generation,
        "leader": v.leader, "currentStateTimestamp": v.get("current_state_timestamp", -1),
        "members": [{
            "memberId": m.member_id, "groupInstanceId": m.get("group_instance_id"),
            "clientId": m.client_id, "clientHost": m.client_host,
            "rebalanceTimeout": m.get("rebalance_timeout", -1),
            "sessionTimeout": m.session_timeout,
            "subscription": _subscription_json(ptype, m.subscription),
            "assignment": _assignment_json(ptype, m.assignment),
        } for m in members],
    }
    return (key_text, json.dumps(summary, separators=(",", ":"), ensure_ascii=False),
            {"key": key_json, "payload": payload})


# --- __transaction_state -----------------------------------------------------------

def decode_transaction_log_record(offset: int, key: bytes | None, value: bytes | None
                                  ) -> tuple[str | None, str | None, dict]:
    """(key text, payload text, JSON fields) of one __transaction_state record, as Kafka's
    TransactionLog.formatRecordKeyAndValue prints it: ``transaction_metadata::
    transactionalId=T`` / ``producerId:P,producerEpoch:E,state=S,partitions=[t-0,...],
    txnLastUpdateTimestamp=MS,txnTimeoutMs=MS``, ``<DELETE>`` for a tombstone (an expired
    id), ``unknown::version=V`` for a key version we do not know."""
    if key is None:
        return _skipped(offset, "The record has no key.")
    try:
        tid = transaction_log.decode_key(key)
    except Exception as e:  # noqa: BLE001 - a bad record is reported, not fatal
        return _skipped(offset, str(e))
    if tid is None:
        version = struct.unpack_from(">h", key)[0]
        return f"unknown::version={version}", None, {"key": {"type": "unknown",
                                                             "version": version}}
    key_text = f"transaction_metadata::transactionalId={tid}"
    key_json = {"type": "transaction_metadata", "transactionalId": tid}
    try:
        v = transaction_log.decode_value(value)
        state = None if v is None else transaction_log.TransactionState(v.transaction_status)
    except Exception as e:  # noqa: BLE001
        msg = f"Error at offset {offset}, skipping. {e}"
        return key_text, f"<{msg}>", {"key": key_json, "error": msg}
    if v is None or state is None:  # a tombstone (state is None only then)
        return key_text, "<DELETE>", {"key": key_json, "payload": None}
    partitions = sorted(f"{tp.topic}-{p}" for tp in (v.transaction_partitions or [])
                        for p in tp.partition_ids)
    text = (f"producerId:{v.producer_id},producerEpoch:{v.producer_epoch},"
            f"state={state.kafka_name},partitions=[{','.join(partitions)}],"
            f"txnLastUpdateTimestamp={v.transaction_last_update_timestamp_ms},"
            f"txnTimeoutMs={v.transaction_timeout_ms}")
    payload = {
        "producerId": v.producer_id, "previousProducerId": v.get("previous_producer_id", -1),
        "nextProducerId": v.get("next_producer_id", -1), "producerEpoch": v.producer_epoch,
        "state": state.kafka_name, "partitions": partitions,
        "txnTimeoutMs": v.transaction_timeout_ms,
        "txnStartTimestamp": v.transaction_start_timestamp_ms,
        "txnLastUpdateTimestamp": v.transaction_last_update_timestamp_ms,
        "clientTransactionVersion": v.get("client_transaction_version", 0),
    }
    return key_text, text, {"key": key_json, "payload": payload}


# --- __cluster_metadata --------------------------------------------------------------

def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _json_value(value: Any) -> Any:
    """A decoded metadata field as Kafka's JSON converters print it."""
    if isinstance(value, dict):  # construct's Container is a dict
        return {_camel(k): _json_value(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, uuid.UUID):
        return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    return value


def decode_metadata_entry(record: bytes, control: bool) -> list[dict]:
    """Each metadata record of an entry's payload as ``{"type", "version", "data"}``, or
    ``{"error"}`` for a record (or a payload) that does not decode. A control entry (the
    leader's first entry of its epoch) holds no metadata records."""
    if control:
        return []
    try:
        framed = unpack_records(record)
    except CorruptRecordError as e:
        return [{"error": str(e)}]
    out: list[dict] = []
    for data in framed:
        try:
            rtype, version, body = decode_metadata_record(data)
        except DecodeError as e:
            out.append({"error": str(e)})
            continue
        out.append({"type": rtype.name, "version": version, "data": _json_value(body)})
    return out


def metadata_paths(path: str | os.PathLike) -> tuple[Path | None, list[Path]]:
    """(the metadata directory or None for a lone segment file, its segments)."""
    p = Path(path)
    if p.is_dir() and (p / metadata_log.METADATA_LOG_DIR).is_dir():
        p = p / metadata_log.METADATA_LOG_DIR
    if p.is_dir():
        segments = [child for _, child in metadata_log.list_segments(p)]
        if not (segments or p.name == metadata_log.METADATA_LOG_DIR
                or (p / metadata_log.QUORUM_STATE_FILE).exists()
                or metadata_log.list_snapshots(p)):
            raise DumpError(f"{p} is neither a data directory holding "
                            f"{metadata_log.METADATA_LOG_DIR} nor a metadata log directory")
        return p, segments
    if not p.exists():
        raise DumpError(f"{p}: no such file or directory")
    return None, [p]


# --- dumping -----------------------------------------------------------------------

class _Printer:
    def __init__(self, out: TextIO, as_json: bool, print_data: bool, offsets: bool,
                 cluster_metadata: bool = False, transaction_log: bool = False):
        self.out = out
        self.as_json = as_json
        self.print_data = print_data or offsets or transaction_log
        self.offsets = offsets
        self.transaction_log = transaction_log
        self.cluster_metadata = cluster_metadata

    def emit(self, obj: dict) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")

    def line(self, text: str) -> None:
        self.out.write(text + "\n")

    def file(self, path: Path) -> None:
        m = SEGMENT_FILE_NAME.match(path.name)
        start = int(m.group(1)) if m else None
        if self.as_json:
            self.emit({"type": "file", "file": str(path), "logStartOffset": start})
            return
        self.line(f"Dumping {path}")
        if start is not None:
            self.line(f"Log starting offset: {start}")

    def batch(self, path: Path, b: Batch) -> None:
        if self.as_json:
            self.emit({"type": "batch", "file": str(path), **_batch_fields(b)})
        else:
            self.line(format_batch(b))
        if not self.print_data and not self.cluster_metadata:
            return
        if not b.crc_ok:
            self.records_error(path, b, "the batch CRC does not match")
            return
        if self.cluster_metadata:
            self.entry(path, b)
            return
        try:
            header, records = decode_batch(b.data)
        except RecordError as e:
            self.records_error(path, b, str(e))
            return
        for r in records:
            self.record(path, header, r)

    def entry(self, path: Path, b: Batch) -> None:
        found = batches_to_entries(b.data)
        if len(found) != 1:
            self.records_error(path, b, "not a Raft entry (one record per batch)")
            return
        e = found[0]
        records = decode_metadata_entry(e.record, e.control)
        voters = None if e.voters is None else [
            {"voterId": v.voter_id, "voterDirectoryId": _json_value(v.directory_id),
             "endpoints": [f"{p.name}://{p.host}:{p.port}" for p in v.endpoints]}
            for v in e.voters.voters]
        if self.as_json:
            entry = {"type": "entry", "file": str(path), "offset": e.offset,
                     "epoch": e.epoch, "isControl": e.control, "records": records}
            if voters is not None:
                entry["voters"] = voters  # KIP-853's VotersRecord
            self.emit(entry)
            return
        kind = (" LeaderChange" if e.control and voters is None
                else " KRaftVoters: " + json.dumps(voters, separators=(",", ":"))
                if voters is not None else f" records: {len(records)}")
        self.line(f"| offset: {e.offset} epoch: {e.epoch} isControl: {_bool(e.control)}{kind}")
        self.payloads(records)

    def payloads(self, records: list[dict]) -> None:
        for r in records:
            if "error" in r:
                self.line(f"|   error: {_one_line(r['error'])}")
            else:
                payload = json.dumps(r, separators=(",", ":"), ensure_ascii=False)
                self.line(f"|   payload: {_one_line(payload)}")

    def metadata_dir(self, directory: Path) -> None:
        if self.as_json:
            self.emit({"type": "directory", "directory": str(directory)})
        else:
            self.line(f"Dumping {directory}")
        self.quorum_state(directory / metadata_log.QUORUM_STATE_FILE)
        for _, path in metadata_log.list_snapshots(directory):
            self.snapshot(path)

    def quorum_state(self, path: Path) -> None:
        try:
            state: quorum_state.ElectionState | None = quorum_state.decode(path.read_bytes())
            error = None
        except FileNotFoundError:
            state, error = None, "none"
        except OSError as e:
            state, error = None, f"cannot read: {e.strerror or e}"
        except quorum_state.QuorumStateError as e:
            state, error = None, f"unreadable: {e}"
        if self.as_json:
            fields: dict[str, Any] = {"error": error} if state is None else {
                "leaderEpoch": state.epoch, "leaderId": state.leader_id,
                "votedId": state.voted_id, "voters": list(state.voters)}
            self.emit({"type": "quorumState", "file": str(path), **fields})
        elif state is None:
            self.line(f"Quorum state: {error}")
        else:
            self.line(f"Quorum state: leaderEpoch: {state.epoch} leaderId: {state.leader_id}"
                      f" votedId: {state.voted_id} voters: "
                      f"{_java_list(str(v) for v in state.voters)}")

    def snapshot(self, path: Path) -> None:
        try:
            snap = metadata_log.read_snapshot_file(path)
        except metadata_log.SnapshotError as e:
            if self.as_json:
                self.emit({"type": "snapshot", "file": str(path), "isValid": False,
                           "error": str(e)})
            else:
                self.line(f"Snapshot {path.name}: isvalid: false {e}")
            return
        sid = snap.snapshot_id
        # the image as the metadata records that rebuild it, laid out as an entry's payload
        records = decode_metadata_entry(snap.data, False)
        if self.as_json:
            self.emit({"type": "snapshot", "file": str(path), "endOffset": sid.end_offset,
                       "epoch": sid.epoch, "size": len(snap.data), "isValid": True,
                       "records": records})
            return
        self.line(f"Snapshot {path.name}: endOffset: {sid.end_offset} epoch: {sid.epoch}"
                  f" size: {len(snap.data)} isvalid: true")
        self.payloads(records)

    def records_error(self, path: Path, b: Batch, reason: str) -> None:
        if self.as_json:
            self.emit({"type": "error", "file": str(path), "position": b.position,
                       "baseOffset": b.header.base_offset,
                       "error": f"records not decoded: {reason}"})
        else:
            self.line(f"| records not decoded: {reason}")

    def record(self, path: Path, h: BatchHeader, r) -> None:
        ts_type = _timestamp_type(h)
        key_size = -1 if r.key is None else len(r.key)
        value_size = -1 if r.value is None else len(r.value)
        seq = _sequence(h.base_sequence, r.offset - h.base_offset)
        header_keys = [k for k, _ in r.headers]
        control = None
        if h.is_control:
            control = _control_marker(r.key, r.value)
            key_text = payload_text = None
            extra: dict = {"control": control}
        elif self.offsets:
            key_text, payload_text, extra = decode_offsets_record(r.offset, r.key, r.value)
        elif self.transaction_log:
            key_text, payload_text, extra = decode_transaction_log_record(r.offset, r.key,
                                                                          r.value)
        else:
            key_text, payload_text = _text(r.key), _text(r.value)
            extra = {"key": key_text, "payload": payload_text}
        if self.as_json:
            self.emit({"type": "record", "file": str(path), "offset": r.offset,
                       "timestampType": ts_type, "timestamp": r.timestamp,
                       "keySize": key_size, "valueSize": value_size, "sequence": seq,
                       "headerKeys": header_keys, **extra})
            return
        text = (f"| offset: {r.offset} {ts_type}: {r.timestamp} keySize: {key_size}"
                f" valueSize: {value_size} sequence: {seq}"
                f" headerKeys: [{_one_line(','.join(header_keys))}]")
        if control is not None:
            text += f" {control}"
        if key_text is not None:
            text += f" key: {_one_line(key_text)}"
        if payload_text is not None:
            text += f" payload: {_one_line(payload_text)}"
        self.line(text)

    def tail(self, path: Path, t: Tail) -> None:
        if self.as_json:
            self.emit({"type": "tail", "file": str(path), "position": t.position,
                       "invalidBytes": t.size, "partial": t.partial, "reason": t.reason})
            return
        note = "; a torn write, or a segment still being appended to" if t.partial else ""
        self.line(f"Found {t.size} invalid bytes at the end of {path.name}: {t.reason}{note}")


def _control_marker(key: bytes | None, value: bytes | None) -> str:
    """Kafka's text for an end-transaction marker (DumpLogSegments), or the control type:
    its name (the KRaft quorum's own types), its number when unknown, UNKNOWN when the key
    does not decode."""
    try:
        ctype = decode_control_type(key)
    except InvalidRecordError:
        return "controlType: UNKNOWN"
    if ctype not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        name = ctype.name if isinstance(ctype, ControlRecordType) else f"UNKNOWN({ctype})"
        return f"controlType: {name}"
    try:
        marker = decode_end_txn_marker(key, value)
    except InvalidRecordError:
        return f"endTxnMarker: {ControlRecordType(ctype).name} coordinatorEpoch: ?"
    return f"endTxnMarker: {marker.type.name} coordinatorEpoch: {marker.coordinator_epoch}"


def dump(paths: list[str | os.PathLike], *, print_data_log: bool = False,
         offsets_decoder: bool = False, as_json: bool = False, cluster_metadata: bool = False,
         transaction_log_decoder: bool = False, out: TextIO | None = None) -> None:
    """Dump every segment the paths name to `out` (stdout). Raises DumpError for a path
    that cannot be dumped at all; what is wrong inside a segment is printed."""
    out = sys.stdout if out is None else out
    printer = _Printer(out, as_json, print_data_log, offsets_decoder, cluster_metadata,
                       transaction_log_decoder)
    if not cluster_metadata:
        _dump_files(printer, [f for p in paths for f in segment_files(p)])
        return
    resolved = [metadata_paths(p) for p in paths]
    for directory, files in resolved:
        if directory is not None:
            printer.metadata_dir(directory)
        _dump_files(printer, files)


def _dump_files(printer: _Printer, files: list[Path]) -> None:
    for path in files:
        try:
            f = open(path, "rb")
        except OSError as e:
            raise DumpError(f"cannot read {path}: {e.strerror or e}") from None
        with f:
            printer.file(path)
            size = os.fstat(f.fileno()).st_size
            for item in read_segment(f, size):
                if isinstance(item, Batch):
                    printer.batch(path, item)
                else:
                    printer.tail(path, item)


def add_arguments(parser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a .log segment file or a partition directory (with "
                             "--cluster-metadata: a data directory or its "
                             "__cluster_metadata-0)")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print every record (offset, timestamp, sizes, headers, key, "
                             "payload)")
    parser.add_argument("--offsets-decoder", action="store_true",
                        help="decode __consumer_offsets records (implies --print-data-log)")
    parser.add_argument("--transaction-log-decoder", action="store_true",
                        help="decode __transaction_state records (implies --print-data-log)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per file, batch, record and problem")
    parser.add_argument("--cluster-metadata", action="store_true",
                        help="PATH is a data directory or its __cluster_metadata-0: print "
                             "the quorum-state, the snapshots and each Raft entry with its "
                             "metadata records decoded")


def main(args) -> int:
    try:
        dump(args.paths, print_data_log=args.print_data_log,
             offsets_decoder=args.offsets_decoder, as_json=args.json,
             cluster_metadata=args.cluster_metadata,
             transaction_log_decoder=args.transaction_log_decoder)
    except DumpError as e:
        print(f"minibroker dump-log: {e}", file=sys.stderr)
        return 1
    return 0
