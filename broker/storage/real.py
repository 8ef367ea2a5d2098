"""The real disk: `RealFileSystem`, the os calls the broker always made, behind the seam.

Owns nothing but the mapping to os: same open flags (O_RDWR|O_CREAT, 0o644; O_APPEND for
append-only files), raw descriptors with ``os.pread``/``os.pwrite`` on the hot path (no
buffering layer, no extra copy), fsync exactly where the caller asks. Every call goes
through the ``os`` module at call time, so a test that patches ``os.pwrite`` still sees it.
"""

from __future__ import annotations

import os
import shutil

from .api import Bytes


class RealFile:
    """An open descriptor. ``fd`` is public for the few callers that batch fsyncs."""

    __slots__ = ("path", "fd")

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd

    def pread(self, size: int, position: int) -> bytes:
        data = os.pread(self.fd, size, position)
        # A regular file returns short reads only at EOF; loop anyway, it is cheap.
        while 0 < len(data) < size:
            more = os.pread(self.fd, size - len(data), position + len(data))
            if not more:
                break
            data += more
        return data

    def pwrite(self, data: Bytes, position: int) -> None:
        view = memoryview(data).cast("B")
        while view:  # os.pwrite may write less than asked
            n = os.pwrite(self.fd, view, position)
            view = view[n:]
            position += n

    def append(self, data: Bytes) -> None:
        view = memoryview(data).cast("B")
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def truncate(self, length: int) -> None:
        os.ftruncate(self.fd, length)

    def fsync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)

    def __repr__(self) -> str:
        return f"RealFile({self.path!r}, fd={self.fd})"


class RealFileSystem:
    threaded = True

    def open(self, path: str, *, create: bool = True, append: bool = False) -> RealFile:
        path = os.fspath(path)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        if append:
            flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0)
        return RealFile(path, os.open(path, flags, 0o644))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)  # replaces a file at dst, as os.replace does on POSIX

    def remove(self, path: str) -> None:
        os.unlink(path)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def file_size(self, path: str) -> int:
        return os.stat(path).st_size

    def mtime_ns(self, path: str) -> int:
        return os.stat(path).st_mtime_ns

    def set_mtime_ns(self, path: str, mtime_ns: int) -> None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


REAL = RealFileSystem()
