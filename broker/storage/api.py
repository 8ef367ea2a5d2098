"""The storage seam: the one small interface through which the broker reaches its disk.

Owns the `FileSystem` and `FileHandle` protocols. Every byte the broker keeps -- log
segments and their indexes, the checkpoints, ``partition.metadata``, ``meta.properties``,
the KRaft metadata log and quorum-state, the event log -- is written and read through
them, so that a test can give each broker its own simulated disk (`SimulatedFileSystem`)
that loses what was not fsynced when it "crashes" and fails on command, while a real
broker keeps today's calls (`RealFileSystem`).

The vocabulary is POSIX's, deliberately thin: positioned reads and writes on an open file,
fsync of a file and of a directory (which makes creations, renames and removals in it
durable), truncate, rename, remove, list. Errors are `OSError`s with the errno a kernel
would give (ENOENT, EIO, ENOSPC, EACCES), so callers keep handling them as they do.
"""

from __future__ import annotations

from typing import Protocol

Bytes = bytes | bytearray | memoryview


class FileHandle(Protocol):
    """An open file (a descriptor opened read-write, or append-only for `append`)."""

    path: str

    def pread(self, size: int, position: int) -> bytes:
        """Up to ``size`` bytes at ``position`` (fewer only at the end of the file)."""

    def pwrite(self, data: Bytes, position: int) -> None:
        """Write all of ``data`` at ``position``; the file grows if it must."""

    def append(self, data: Bytes) -> None:
        """Write all of ``data`` at the end of the file."""

    def size(self) -> int: ...

    def truncate(self, length: int) -> None: ...

    def fsync(self) -> None:
        """Make the file's bytes durable (not its name: see `FileSystem.fsync_dir`)."""

    def close(self) -> None: ...


class FileSystem(Protocol):
    """A disk. Paths are ordinary path strings (or os.PathLike)."""

    # False when the work must run inline rather than on worker threads: a simulated disk
    # is part of a deterministic run, and a thread would make its order the scheduler's.
    threaded: bool

    def open(self, path: str, *, create: bool = True, append: bool = False) -> FileHandle:
        """Open read-write (``append``: write-only, every write at the end), creating the
        file (empty) if ``create`` and it is absent; ENOENT otherwise."""

    def exists(self, path: str) -> bool: ...

    def isdir(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def makedirs(self, path: str) -> None:
        """Create the directory and its parents; nothing if it exists."""

    def rename(self, src: str, dst: str) -> None:
        """Atomically rename a file or directory, replacing a file at ``dst``."""

    def remove(self, path: str) -> None:
        """Unlink a file (ENOENT if absent)."""

    def rmtree(self, path: str) -> None:
        """Remove a directory and everything under it, ignoring errors, as a best effort."""

    def fsync_dir(self, path: str) -> None:
        """Make the creations, renames and removals of entries in ``path`` durable."""

    def file_size(self, path: str) -> int: ...

    def mtime_ns(self, path: str) -> int: ...

    def set_mtime_ns(self, path: str, mtime_ns: int) -> None: ...

