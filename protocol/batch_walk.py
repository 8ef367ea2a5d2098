"""Walking a run of RecordBatch v2 batches header by header (Kafka's LogInputStream:
FileLogInputStream over a file, ByteBufferLogInputStream over a buffer).

Owns: `BatchWalk`, the one place that decides how far a run of batches can be walked and
why it stops there -- `WalkStop`: the end was reached, a torn tail (a batch or header that
runs past the end: an unfinished write, or a file still being appended to), or a corrupt
header (the next batch's position cannot be trusted). What to do about a stop is the
caller's: log recovery truncates there, dump-log prints it, the Spark reader reports a row.

Only the 61-byte header is read (batch_header.BatchHeader); records are never decoded and
the CRC is not checked (batch_header.batch_crc_ok does that on `BatchWalk.batch`'s bytes).
Sans-IO: the source is a buffer, or a ``read(position, size) -> bytes`` function the caller
binds to its file; the walk asks for chunks of `read_size` bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

# The header struct and NamedTuple constructor themselves: the walk checks the fields
# it needs inline instead of paying for parse_batch_header's exceptions per batch.
from .batch_header import (BATCH_OVERHEAD, LOG_OVERHEAD, MAGIC, MIN_BATCH_LENGTH, BatchHeader,
                           _HEADER, _new_header)

__all__ = ["END", "TORN", "CORRUPT", "WalkStop", "BatchWalk", "DEFAULT_READ_SIZE"]

END = "end"
TORN = "torn"
CORRUPT = "corrupt"

DEFAULT_READ_SIZE = 64 * 1024

Read = Callable[[int, int], bytes]


class WalkStop(NamedTuple):
    """Where and why a walk ended. [start, position) held only whole, walkable batches.

    reason: END (position is the end), TORN or CORRUPT. batch_size: the size the header at
    `position` claims, when its BatchLength was usable -- None for a header cut short or a
    BatchLength below the minimum; a TORN stop with a size is a batch whose body is cut
    short, and a CORRUPT stop with a size could be stepped over. base_offset: that
    header's BaseOffset, when the whole header was there. problem: what is wrong, for
    CORRUPT (None otherwise).
    """

    position: int
    reason: str
    batch_size: int | None = None
    base_offset: int | None = None
    problem: str | None = None


class BatchWalk:
    """Iterate ``(position, header)`` over the whole batches of ``source[start:end]``;
    afterwards `stop` says where and why the walk ended.

    ``source`` is bytes/bytearray/memoryview (``end`` defaults to its length) or a
    function ``read(position, size)`` returning up to ``size`` bytes at ``position``
    (``end`` required; a short read counts as the end of the data, a TORN stop).

    A header ends the walk (CORRUPT) when its BatchLength is below the v2 minimum (Kafka's
    FileLogInputStream stops there too: the next position is unknown), its magic is not 2
    (the only format read here) or its LastOffsetDelta is negative (a batch that would end
    before it begins). Fewer than 61 bytes left, or a batch that runs past ``end``, is TORN.
    """

    __slots__ = ("_read", "start", "end", "_read_size", "_buf", "_buf_start", "stop")

    def __init__(self, source, start: int = 0, end: int | None = None, *,
                 read_size: int = DEFAULT_READ_SIZE) -> None:
        if callable(source):
            if end is None:
                raise ValueError("a walk through a read function needs an end")
            self._read: Read | None = source
            self._buf = b""
            self._buf_start = start
        else:
            self._read = None
            end = len(source) if end is None else min(end, len(source))
            self._buf = source
            self._buf_start = 0
        self.start = start
        self.end = end
        self._read_size = max(read_size, BATCH_OVERHEAD)
        self.stop: WalkStop | None = None

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        return self._walk()

    def _walk(self) -> Iterator[tuple[int, BatchHeader]]:
        unpack = _HEADER.unpack_from
        read = self._read
        end = self.end
        pos = self.start
        buf, buf_start = self._buf, self._buf_start
        while True:
            left = end - pos
            if left < BATCH_OVERHEAD:
                self.stop = WalkStop(pos, END if left <= 0 else TORN)
                return
            rel = pos - buf_start
            if read is not None and (rel < 0 or rel + BATCH_OVERHEAD > len(buf)):
                buf = read(pos, min(self._read_size, left))
                buf_start, rel = pos, 0
                self._buf, self._buf_start = buf, buf_start
                if len(buf) < BATCH_OVERHEAD:  # the data ended before `end`
                    self.stop = WalkStop(pos, TORN)
                    return
            fields = unpack(buf, rel)
            length = fields[1]
            if length < MIN_BATCH_LENGTH or fields[3] != MAGIC or fields[6] < 0:
                self.stop = _corrupt(pos, fields)
                return
            size = LOG_OVERHEAD + length
            if size > left:
                self.stop = WalkStop(pos, TORN, size, fields[0])
                return
            yield pos, _new_header(BatchHeader, fields)
            # `batch` may have read the batch into a new buffer: continue in that one.
            buf, buf_start = self._buf, self._buf_start
            pos += size

    def batch(self, position: int, header: BatchHeader):
        """The bytes of the batch the walk just yielded at ``position`` (a memoryview; no
        copy when the source is a buffer). Through a read function it is read whole, with
        the chunk after it, so the walk goes on in the same buffer; it is shorter than
        ``header.size`` only if the data ended early."""
        size = header.size
        rel = position - self._buf_start
        if 0 <= rel and rel + size <= len(self._buf):
            return memoryview(self._buf)[rel:rel + size]
        assert self._read is not None  # a buffer source holds every batch the walk yields
        want = max(size, min(self._read_size, self.end - position))
        self._buf, self._buf_start = self._read(position, want), position
        return memoryview(self._buf)[:size]


def _corrupt(pos: int, fields: tuple) -> WalkStop:
    base_offset, length, magic, last_offset_delta = fields[0], fields[1], fields[3], fields[6]
    size = LOG_OVERHEAD + length if length >= MIN_BATCH_LENGTH else None
    if magic != MAGIC:
        problem = f"magic {magic}, expected {MAGIC}"
    elif size is None:
        problem = f"batch length {length} is below {MIN_BATCH_LENGTH}"
    else:
        problem = f"lastOffsetDelta {last_offset_delta}"
    return WalkStop(pos, CORRUPT, size, base_offset, problem)
