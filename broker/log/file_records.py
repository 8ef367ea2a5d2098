"""Reading segment files from outside the broker, read-only: the readers of `minibroker
dump-log` (tools.dump_log) and of the chaos runs' replica comparison (bench.chaos.replicas).

Owns: the segments a path names (`segment_files`: one file, or a partition directory's
<20 digits>.log files in offset order) and reading one open segment into whole batches and
at most one `Tail` (`read_segment`). The file's size is taken once when it is opened, as
Kafka's FileRecords does, so a live segment can be read; how far the batches can be walked
is protocol/batch_walk.py's to decide. The file is never written, and nothing here is the
broker's own log (segment.py, loader.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from protocol.batch_walk import CORRUPT, TORN, BatchWalk
from protocol.records import BATCH_OVERHEAD, BatchHeader, batch_crc_ok

__all__ = ["SEGMENT_FILE_NAME", "Batch", "SegmentPathError", "Tail", "read_segment",
           "segment_files"]

SEGMENT_FILE_NAME = re.compile(r"^(\d{20})\.log$")


class SegmentPathError(Exception):
    """A path that names no segment at all (missing, a directory without segments);
    damage inside a segment is a Tail, or a Batch whose crc_ok is False, instead."""


@dataclass(slots=True)
class Batch:
    position: int
    header: BatchHeader
    data: bytes  # the whole batch
    crc_ok: bool


@dataclass(slots=True)
class Tail:
    """Bytes after the last whole batch, which cannot be read as batches."""
    position: int
    size: int
    reason: str
    partial: bool  # True: an unfinished batch (a live segment or a torn write)


def segment_files(path: str | os.PathLike) -> list[Path]:
    """The segments PATH names: the file itself, or a directory's NNN.log files in order."""
    p = Path(path)
    if p.is_dir():
        found = sorted((int(m.group(1)), child) for child in p.iterdir()
                       if (m := SEGMENT_FILE_NAME.match(child.name)) and child.is_file())
        if not found:
            raise SegmentPathError(f"{p} holds no log segments (files named <20 digits>.log)")
        return [child for _, child in found]
    if not p.exists():
        raise SegmentPathError(f"{p}: no such file or directory")
    return [p]


def read_segment(f, size: int) -> Iterator[Batch | Tail]:
    """Whole batches from an open binary file of `size` bytes, then at most one Tail."""
    def read(position: int, n: int) -> bytes:
        f.seek(position)
        return f.read(n)

    walk = BatchWalk(read, 0, size)
    for pos, header in walk:
        data = bytes(walk.batch(pos, header))
        if len(data) < header.size:  # the file shrank under us (truncation, deletion)
            yield Tail(pos, size - pos, f"a partial batch at position {pos} (the file ended "
                                        f"while it was read)", partial=True)
            return
        yield Batch(pos, header, data, batch_crc_ok(data, 0, header))
    stop = walk.stop
    assert stop is not None
    pos, left = stop.position, size - stop.position
    if stop.reason == CORRUPT:
        yield Tail(pos, left, f"a corrupt batch header at position {pos} ({stop.problem}); "
                              f"the rest of the file cannot be walked", partial=False)
    elif stop.reason == TORN and stop.batch_size is None:
        yield Tail(pos, left, f"an incomplete batch header ({left} of {BATCH_OVERHEAD} "
                              f"bytes)", partial=True)
    elif stop.reason == TORN:
        yield Tail(pos, left, f"a partial batch at position {pos} (its header says "
                              f"{stop.batch_size} bytes, {left} are present)", partial=True)
