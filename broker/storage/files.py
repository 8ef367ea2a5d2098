"""Whole-file helpers over the seam: read a small file, replace one crash-safely.

Owns `write_atomically` (temp file, fsync, rename, fsync of the directory: Kafka's
CheckpointFile discipline), used by every checkpoint, ``partition.metadata``,
``meta.properties``, quorum-state and the metadata snapshots.
"""

from __future__ import annotations

import os

from .api import Bytes, FileSystem
from .real import REAL


def read_file(path: str | os.PathLike, *, fs: FileSystem = REAL, limit: int | None = None) -> bytes:
    """The content of an existing file (its first ``limit`` bytes); ENOENT when absent."""
    handle = fs.open(os.fspath(path), create=False)
    try:
        size = handle.size() if limit is None else min(limit, handle.size())
        return handle.pread(size, 0) if size else b""
    finally:
        handle.close()


def write_atomically(path: str | os.PathLike, data: str | Bytes, *, sync_dir: bool = True,
                     suffix: str = ".tmp", sync: bool = True, fs: FileSystem = REAL) -> None:
    """Replace ``path`` with ``data`` (text, written as UTF-8, or bytes): temp file, fsync,
    rename, and (``sync_dir``) fsync the directory, so a crash leaves either the old or the
    new file, never half. ``sync=False`` leaves out both fsyncs, for a caller that makes
    the file durable later (`LogManager.sync_new_logs`: many at once) or can rebuild it."""
    path = os.fspath(path)
    tmp = path + suffix
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        handle = fs.open(tmp)
        try:
            handle.truncate(0)
            handle.pwrite(payload, 0)
            if sync:
                handle.fsync()
        finally:
            handle.close()
        fs.rename(tmp, path)
    except OSError:
        # a full disk: give back what the half-written copy holds; the old file is intact
        try:
            fs.remove(tmp)
        except OSError:
            pass
        raise
    if sync_dir and sync:
        fs.fsync_dir(os.path.dirname(os.path.abspath(path)))
