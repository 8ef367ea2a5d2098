"""Batch builders and log helpers for the storage tests (protocol/records encodes)."""

from __future__ import annotations

import os

from broker.log import LogConfig, PartitionLog
from protocol.records import Record, encode_batch, iter_batch_headers, parse_batch_header


def make_batch(n: int = 3, ts: int = 1_000, value_size: int = 10, ts_step: int = 1,
               seed: int = 0) -> bytes:
    """One producer batch of ``n`` records (offsets 0..n-1, as a producer sends them)."""
    return encode_batch([
        Record(i, ts + i * ts_step, b"k%06d-%04d" % (seed, i), bytes([(seed + i) % 256]) * value_size, [])
        for i in range(n)
    ])


def open_log(path, config: LogConfig | None = None, **kwargs) -> PartitionLog:
    return PartitionLog.open(str(path), "t", 0, config or LogConfig(), **kwargs)


def batches_in(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of every batch in ``data``."""
    return [(h.base_offset, h.last_offset) for _, h in iter_batch_headers(data)]


def header_of(data: bytes):
    return parse_batch_header(data, 0)


def log_files(path) -> list[str]:
    return sorted(f for f in os.listdir(path) if f.endswith(".log"))


def close_fds(*segments) -> None:
    """Release descriptors as a killed process would: no flush, no seal. The bytes already
    written are in the page cache, so they survive, exactly as after a process crash."""
    for seg in segments:
        for holder in (seg, seg.offset_index, seg.time_index):
            if holder._file is not None:
                holder._file.close()
                holder._file = None
