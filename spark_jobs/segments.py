"""Reading a broker's log segments for the analysis, without Spark.

Owns: finding the segment files under a data directory (`find_segments`), or under several
brokers' data directories with each partition read from one replica
(`find_replica_segments`, `log_end_offset`), the aborted transactions their .txnindex files
list (`iter_aborted_txns`, decoded by protocol/aborted_txn.py), cutting a segment
into byte ranges on batch boundaries from the headers alone (`split_segment`), and turning
one byte range into rows, record by record or batch by batch (`iter_column_chunks`,
`iter_rows`). Walking batch headers is protocol/batch_walk.py's and decoding
protocol/records.py's; this module reads files and decides what a damaged batch becomes.

Damage is reported, not raised, so one bad batch cannot fail a whole job:
- an incomplete last batch (a torn write, or a segment still being appended to) ends the
  range silently;
- a batch whose CRC fails, or that does not decode, gives ONE row with crc_valid false or
  `error` set and null key/value; its BatchLength is still trusted to find the next batch;
- a header with a bad magic or a negative LastOffsetDelta but a sane BatchLength gives one
  error row, and the walk goes on after it;
- a BatchLength below the v2 minimum gives one error row and ends the range, since the next
  batch's position is then unknown.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple, Sequence, Union

from protocol.batch_walk import CORRUPT, BatchWalk
from protocol.codecs import Codec
from protocol.names import METADATA_LOG_TOPIC, parse_partition_dir
from protocol.records import BATCH_OVERHEAD, BatchHeader, batch_crc_ok, decode_batch

__all__ = [
    "RECORD_COLUMNS", "BATCH_COLUMNS", "DEFAULT_SPLIT_BYTES", "SegmentFile", "ByteRange",
    "find_segments", "find_replica_segments", "log_end_offset", "split_segment",
    "segment_ranges", "LogPath", "ABORTED_TXN_COLUMNS", "iter_aborted_txns",
    "ColumnChunk", "iter_column_chunks", "iter_rows",
]

DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024

# Column order of the two row shapes; spark_jobs.tables declares the same names with types.
RECORD_COLUMNS = (
    "topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers",
    "base_offset", "last_offset", "batch_position", "batch_size", "record_count",
    "producer_id", "producer_epoch", "base_sequence", "partition_leader_epoch", "codec",
    "is_transactional", "is_control", "max_timestamp", "crc_valid", "error", "segment",
)
BATCH_COLUMNS = (
    "topic", "partition", "base_offset", "last_offset", "record_count", "first_timestamp",
    "max_timestamp", "timestamp_type", "batch_position", "batch_size", "producer_id",
    "producer_epoch", "base_sequence", "partition_leader_epoch", "codec", "is_transactional",
    "is_control", "crc_valid", "error", "segment",
)

# What the readers take: one path (a data directory, a partition directory or a segment),
# or a list of brokers' data directories (find_replica_segments)
LogPath = Union[str, os.PathLike, list[Any], tuple[Any, ...]]

_SEGMENT_NAME = re.compile(r"^(\d+)\.log$")
_CODECS = {c.value: c.name.lower() for c in Codec}


class SegmentFile(NamedTuple):
    topic: str
    partition: int
    path: str
    base_offset: int  # from the file name
    size: int         # when found; a live segment may have grown since


class ByteRange(NamedTuple):
    """[start, end) of one segment, starting on a batch boundary. Picklable, so it can be a
    Spark InputPartition's value."""
    topic: str
    partition: int
    path: str
    start: int
    end: int


# --- finding segments --------------------------------------------------------------

def _segments_in(directory: Path, topic: str, partition: int) -> list[SegmentFile]:
    found = []
    for child in directory.iterdir():
        m = _SEGMENT_NAME.match(child.name)
        if m and child.is_file():
            found.append(SegmentFile(topic, partition, str(child), int(m.group(1)),
                                     child.stat().st_size))
    return sorted(found, key=lambda s: s.base_offset)


def _wanted(value, allowed) -> bool:
    return allowed is None or value in allowed


def find_segments(path: LogPath, topics: Iterable[str] | None = None,
                  partitions: Iterable[int] | None = None) -> list[SegmentFile]:
    """The segment files PATH names, in (topic, partition, base offset) order.

    A list (or tuple) of paths is several brokers' data directories: see
    find_replica_segments.

    PATH is a data directory (its DIR/<topic>-<partition>/*.log; DIR/events and anything
    else that is not a partition directory, and the metadata log, are skipped: the directories the broker loads,
    protocol.names.parse_partition_dir), one partition directory (a
    directory holding .log files) or one .log file. `topics` / `partitions` keep only
    those (None: all). A missing PATH raises FileNotFoundError.
    """
    if isinstance(path, (list, tuple)):
        return find_replica_segments(path, topics, partitions)
    p = Path(path)
    topics = None if topics is None else set(topics)
    partitions = None if partitions is None else set(partitions)
    if p.is_file():
        tp = parse_partition_dir(p.parent.name)
        m = _SEGMENT_NAME.match(p.name)
        if tp is None or m is None:
            raise ValueError(f"{p} is not a segment (<topic>-<partition>/<offset>.log)")
        if not (_wanted(tp[0], topics) and _wanted(tp[1], partitions)):
            return []
        return [SegmentFile(tp[0], tp[1], str(p), int(m.group(1)), p.stat().st_size)]
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: no such file or directory")
    own = parse_partition_dir(p.name)
    if own is not None and any(_SEGMENT_NAME.match(c.name) for c in p.iterdir()):
        dirs = [(p, own)]
    else:
        dirs = sorted(((child, tp) for child in p.iterdir()
                       if child.is_dir() and (tp := parse_partition_dir(child.name))
                       and tp[0] != METADATA_LOG_TOPIC),
                      key=lambda d: d[1])
    out: list[SegmentFile] = []
    for directory, (topic, partition) in dirs:
        if _wanted(topic, topics) and _wanted(partition, partitions):
            out.extend(_segments_in(directory, topic, partition))
    return out


def log_end_offset(segments: Sequence[SegmentFile]) -> int:
    """One past the last offset of a partition's segments (in base offset order), from the
    batch headers of its newest segment holding a whole batch; a partition with none ends
    at its first segment's base offset (0 without segments)."""
    for s in reversed(segments):
        last = _last_offset(s)
        if last is not None:
            return last + 1
    return segments[0].base_offset if segments else 0


def _last_offset(segment: SegmentFile) -> int | None:
    fd = os.open(segment.path, os.O_RDONLY)
    try:
        last = None
        for _, header in BatchWalk(lambda pos, n: os.pread(fd, n, pos), 0, segment.size,
                                   read_size=BATCH_OVERHEAD):
            last = header.last_offset
        return last
    finally:
        os.close(fd)


def find_replica_segments(data_dirs: Sequence[str | os.PathLike],
                          topics: Iterable[str] | None = None,
                          partitions: Iterable[int] | None = None) -> list[SegmentFile]:
    """The segments of every partition found under several brokers' data directories, each
    partition's from ONE of its replicas, in (topic, partition, base offset) order.

    Replicas hold copies of one log: reading them all would count each record once per
    replica. The replica kept is the one whose log reaches furthest (log_end_offset: a
    follower is at most as far as its leader; after an unclean election the survivor's
    log is the one that went on), the first directory given on a tie. The log end offset
    is read only for a partition found in more than one directory."""
    topics = None if topics is None else set(topics)
    partitions = None if partitions is None else set(partitions)
    found: dict[tuple[str, int], list[list[SegmentFile]]] = {}
    for d in data_dirs:
        by_partition: dict[tuple[str, int], list[SegmentFile]] = {}
        for s in find_segments(d, topics, partitions):
            by_partition.setdefault((s.topic, s.partition), []).append(s)
        for tp, segments in by_partition.items():
            found.setdefault(tp, []).append(segments)
    out: list[SegmentFile] = []
    for tp in sorted(found):
        replicas = found[tp]
        if len(replicas) > 1:
            ends = [log_end_offset(r) for r in replicas]
            out.extend(replicas[ends.index(max(ends))])
        else:
            out.extend(replicas[0])
    return out


# --- aborted transactions (.txnindex) -------------------------------------------------

ABORTED_TXN_COLUMNS = ("topic", "partition", "producer_id", "first_offset", "last_offset",
                       "last_stable_offset", "segment")


def iter_aborted_txns(segments: Iterable[SegmentFile]) -> Iterator[dict]:
    """The entries of the .txnindex beside each segment (ABORTED_TXN_COLUMNS; `segment` is
    the .log's path), in segment and marker order. Most segments have no such file. As for
    batches, damage is not raised: a torn last entry is left out, and a file of a newer
    entry version than the broker's decoder knows is skipped whole."""
    from protocol.aborted_txn import NewerAbortedTxnVersion, decode_aborted_txns

    for s in segments:
        try:
            raw = Path(s.path).with_suffix(".txnindex").read_bytes()
        except FileNotFoundError:
            continue
        try:
            entries = decode_aborted_txns(raw)
        except NewerAbortedTxnVersion:
            continue
        for e in entries:
            yield {"topic": s.topic, "partition": s.partition, "producer_id": e.producer_id,
                   "first_offset": e.first_offset, "last_offset": e.last_offset,
                   "last_stable_offset": e.last_stable_offset, "segment": s.path}


# --- splitting ---------------------------------------------------------------------

def split_segment(path: str | os.PathLike, split_bytes: int = DEFAULT_SPLIT_BYTES,
                  size: int | None = None) -> list[tuple[int, int]]:
    """[start, end) byte ranges of about `split_bytes` each, cut only between batches.

    Reads each batch's header and seeks over the rest. The last range runs to `size`
    (default: the file's size now), so a torn tail or a bad header is met by the reader of
    that range, which reports it.
    """
    if split_bytes <= 0:
        raise ValueError(f"split_bytes must be positive, not {split_bytes}")
    fd = os.open(path, os.O_RDONLY)
    try:
        if size is None:
            size = os.fstat(fd).st_size
        ranges = []
        start = 0
        # One header-sized read per batch: the walk seeks over the records.
        walk = BatchWalk(lambda pos, n: os.pread(fd, n, pos), 0, size, read_size=BATCH_OVERHEAD)
        for pos, header in walk:
            end = pos + header.size
            if end - start >= split_bytes and end < size:
                ranges.append((start, end))
                start = end
    finally:
        os.close(fd)
    if size > start:
        ranges.append((start, size))
    return ranges


def segment_ranges(segments: Iterable[SegmentFile],
                   split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[ByteRange]:
    """Every segment's byte ranges (empty segments have none)."""
    return [ByteRange(s.topic, s.partition, s.path, start, end)
            for s in segments
            for start, end in split_segment(s.path, split_bytes, s.size)]


# --- rows --------------------------------------------------------------------------

class _Batch(NamedTuple):
    position: int                # in the segment
    base_offset: int
    size: int | None             # None when BatchLength is unusable
    header: BatchHeader | None   # None when the header does not parse
    records: list | None         # decoded records; None at batch level or on failure
    crc_valid: bool
    error: str | None


def _read(path: str, start: int, end: int) -> bytes:
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        return f.read(end - start)


def _walk(r: ByteRange, decode: bool) -> Iterator[_Batch]:
    buf = _read(r.path, r.start, r.end)
    n = len(buf)  # may be short of end - start if the file was truncated meanwhile
    pos = 0
    while True:
        walk = BatchWalk(buf, pos, n)
        for pos, header in walk:
            yield _batch(buf, pos, r.start + pos, header, decode)
        stop = walk.stop
        assert stop is not None
        if stop.reason != CORRUPT:
            return  # the end, or a torn tail: ends the range silently
        where = r.start + stop.position
        assert stop.base_offset is not None  # a CORRUPT stop has read the header's offset
        if stop.batch_size is None:
            yield _Batch(where, stop.base_offset, None, None, None, False,
                         f"{stop.problem} at position {where}; the rest of the range "
                         f"cannot be walked")
            return
        if stop.position + stop.batch_size > n:
            return  # torn as well: nothing to step over
        # A bad magic (or LastOffsetDelta) with a sane BatchLength: report it, step over it.
        yield _Batch(where, stop.base_offset, stop.batch_size, None, None, False,
                     f"{stop.problem} at position {where}")
        pos = stop.position + stop.batch_size


def _batch(buf: bytes, pos: int, where: int, header: BatchHeader, decode: bool) -> _Batch:
    size = header.size
    if not decode:
        return _Batch(where, header.base_offset, size, header, None,
                      batch_crc_ok(buf, pos, header), None)
    try:
        _, records = decode_batch(buf, pos)
    except Exception as e:  # noqa: BLE001 - one row for the batch, then go on
        if batch_crc_ok(buf, pos, header):
            return _Batch(where, header.base_offset, size, header, None, True,
                          f"batch at position {where} does not decode: {e}")
        return _Batch(where, header.base_offset, size, header, None, False, None)
    return _Batch(where, header.base_offset, size, header, records, True, None)


def _codec(header: BatchHeader) -> str:
    c = header.compression
    return _CODECS.get(c, f"unknown({c})")


def _header_values(h: BatchHeader | None) -> tuple:
    """(last_offset, record_count, base_timestamp, max_timestamp, timestamp_type,
    producer_id, producer_epoch, base_sequence, partition_leader_epoch, codec,
    is_transactional, is_control), all None without a header."""
    if h is None:
        return (None,) * 12
    return (h.last_offset, h.records_count, h.base_timestamp, h.max_timestamp,
            "LogAppendTime" if h.timestamp_type else "CreateTime", h.producer_id,
            h.producer_epoch, h.base_sequence, h.partition_leader_epoch, _codec(h),
            h.is_transactional, h.is_control)


def _text_keys(headers: list) -> list:
    # Header keys are str with surrogateescape for bytes that are not UTF-8; Arrow's
    # strings must be valid UTF-8, so such bytes are shown escaped instead.
    out = []
    for key, value in headers:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            key = key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        out.append((key, value))
    return out


_PER_RECORD = ("offset", "timestamp", "key", "value", "headers")
# A batch's records -> one column's values (list comprehensions: the per-record hot loop)
_PER_RECORD_VALUES = {
    "offset": lambda recs: [x.offset for x in recs],
    "timestamp": lambda recs: [x.timestamp for x in recs],
    "key": lambda recs: [x.key for x in recs],
    "value": lambda recs: [x.value for x in recs],
    "headers": lambda recs: [_text_keys(x.headers) if x.headers else [] for x in recs],
}
# The batch's own values of a record row, in RECORD_COLUMNS order (see iter_column_chunks).
_RECORD_BATCH_COLUMNS = tuple(n for n in RECORD_COLUMNS if n not in _PER_RECORD)


class ColumnChunk:
    """Rows of whole batches, column by column. A batch's own values (topic, header
    fields, crc_valid, ...) are kept once per batch with `counts` saying how many rows
    each covers, so Arrow can repeat them in C instead of Python building one per record.
    `names` may be any subset of the level's columns, in its order.
    """

    def __init__(self, names: tuple[str, ...], level: str = "record") -> None:
        self.names = names
        self.per_record: dict[str, list] = {n: [] for n in names if n in _PER_RECORD} \
            if level == "record" else {}
        self.per_batch: dict[str, list] = {n: [] for n in names if n not in self.per_record}
        self.counts: list[int] = []
        self.rows = 0

    def columns(self) -> dict[str, list]:
        """{name: one value per row}, in the table's column order."""
        out = {}
        for name in self.names:
            if name in self.per_record:
                out[name] = self.per_record[name]
            else:
                out[name] = [v for v, n in zip(self.per_batch[name], self.counts)
                             for _ in range(n)]
        return out

    def to_arrow(self, arrow_schema):
        """A pyarrow.RecordBatch with `arrow_schema` (the table's schema in Arrow terms)."""
        import numpy as np
        import pyarrow as pa

        expand = None
        if self.per_record:
            expand = pa.array(np.repeat(np.arange(len(self.counts), dtype=np.int32),
                                        self.counts))
        arrays = []
        for name in self.names:
            kind = arrow_schema.field(name).type
            if name in self.per_record:
                arrays.append(pa.array(self.per_record[name], type=kind))
            else:
                column = pa.array(self.per_batch[name], type=kind)
                arrays.append(column if expand is None else column.take(expand))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def iter_column_chunks(r: ByteRange, level: str = "record", chunk_rows: int = 8192,
                       columns: Iterable[str] | None = None) -> Iterator[ColumnChunk]:
    """The rows of one byte range (RECORD_COLUMNS or BATCH_COLUMNS, or only `columns` of
    them, in the level's order), in chunks of whole batches of about `chunk_rows` rows.

    Leaving out columns a query does not read saves building them: a record's value and
    headers cost more to turn into Python lists and Arrow arrays than to decode."""
    names: tuple[str, ...]
    if level == "record":
        names, decode = RECORD_COLUMNS, True
    elif level == "batch":
        names, decode = BATCH_COLUMNS, False
    else:
        raise ValueError(f"level must be 'record' or 'batch', not {level!r}")
    if columns is not None:
        wanted = set(columns)
        unknown = wanted.difference(names)
        if unknown:
            raise ValueError(f"no column(s) {sorted(unknown)} at level {level!r}")
        names = tuple(n for n in names if n in wanted)
    chunk = ColumnChunk(names, level)
    # where each kept per-batch column sits in the tuple of all of a batch's values below
    all_batch = BATCH_COLUMNS if level == "batch" else _RECORD_BATCH_COLUMNS
    picks = [all_batch.index(n) for n in chunk.per_batch]
    record_columns = [n for n in _PER_RECORD if n in chunk.per_record]
    for b in _walk(r, decode):
        (last_offset, count, first_ts, max_ts, ts_type, pid, pepoch, bseq, ple, codec,
         txn, control) = _header_values(b.header)
        values: tuple[Any, ...]
        if level == "batch":
            n = 1
            values = (r.topic, r.partition, b.base_offset, last_offset, count, first_ts,
                      max_ts, ts_type, b.position, b.size, pid, pepoch, bseq, ple, codec, txn,
                      control, b.crc_valid, b.error, r.path)
        else:
            recs = b.records
            if recs is not None and not recs:
                continue  # a batch compaction emptied: it holds no record to show
            cols = chunk.per_record
            if recs:
                n = len(recs)
                for name in record_columns:
                    cols[name].extend(_PER_RECORD_VALUES[name](recs))
            else:  # a batch that did not decode gives one row
                n = 1
                failed = {"offset": b.base_offset, "timestamp": first_ts, "key": None,
                          "value": None, "headers": []}
                for name in record_columns:
                    cols[name].append(failed[name])
            values = (r.topic, r.partition, ts_type, b.base_offset, last_offset, b.position,
                      b.size, count, pid, pepoch, bseq, ple, codec, txn, control, max_ts,
                      b.crc_valid, b.error, r.path)
        for column, i in zip(chunk.per_batch.values(), picks):
            column.append(values[i])
        chunk.counts.append(n)
        chunk.rows += n
        if chunk.rows >= chunk_rows:
            yield chunk
            chunk = ColumnChunk(names, level)
    if chunk.rows:
        yield chunk


def iter_rows(r: ByteRange, level: str = "record") -> Iterator[dict]:
    """The rows of one byte range, one dict per row (for tests and small tools)."""
    for chunk in iter_column_chunks(r, level):
        cols = chunk.columns()
        names = list(cols)
        for values in zip(*(cols[name] for name in names)):
            yield dict(zip(names, values))
