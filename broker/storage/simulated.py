"""A simulated disk for deterministic tests: `SimulatedFileSystem`, in memory and pure.

Owns the model of what a crash keeps. Each file (an inode, shared by the handles open on
it, surviving renames as a descriptor does) holds what reads see, the bytes made durable
by its last fsync, and the writes and truncations made since, in order. Names are
durable separately: creating, renaming or removing a file becomes durable when its
directory is fsynced (`fsync_dir`), as on ext4 and XFS. `crash(rng)` keeps the durable
names with their durable bytes; with an ``rng`` it also lets a random prefix of each file's
unsynced writes reach the platter and tears the write at the boundary at a random byte,
as a power cut during writeback would. Without one every unsynced byte is lost.

Simplifications, on purpose: directories themselves (mkdir, a directory's rename,
removing a tree) are durable at once -- the broker fsyncs its data directories' parents
nowhere, as Kafka does not; and a failed fsync leaves the bytes volatile (it does not
drop the dirty pages as Linux does), so a later fsync can still succeed.

Faults, for paths under a prefix (the disk is one node's, so "a chosen node" is the
file system given to that broker): `fail(op, prefix, errno)` makes reads, writes,
truncations, fsyncs, creations, renames or removals raise (EIO by default, EACCES for a
read-only directory); `limit_space(n)` lets ``n`` more bytes of growth in (a truncation
gives them back), the write that crosses it landing short and then ENOSPC, as on a real
device; `heal()` ends all faults.

Nothing here reads a clock or a thread: file mtimes come from the ``clock`` given (the
broker's), and `threaded` is False so the broker runs its disk work inline.
"""

from __future__ import annotations

import errno
import os
import posixpath
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .api import Bytes

# The operations a fault can target.
OPS = ("read", "write", "truncate", "fsync", "create", "rename", "remove")


def _norm(path: str | os.PathLike) -> str:
    return posixpath.normpath(os.path.abspath(os.fspath(path)))


def _error(code: int, path: str) -> OSError:
    cls = {errno.ENOENT: FileNotFoundError, errno.EEXIST: FileExistsError,
           errno.EACCES: PermissionError, errno.EISDIR: IsADirectoryError,
           errno.ENOTDIR: NotADirectoryError}.get(code, OSError)
    return cls(code, os.strerror(code), path)


class _Inode:
    __slots__ = ("data", "durable", "pending", "mtime_ns")

    def __init__(self, mtime_ns: int) -> None:
        self.data = bytearray()
        self.durable = b""
        # ("w", position, bytes) and ("t", length), in order, since the last fsync
        self.pending: list[tuple] = []
        self.mtime_ns = mtime_ns

    def write(self, data: bytes, position: int) -> None:
        end = position + len(data)
        if position > len(self.data):
            self.data.extend(bytes(position - len(self.data)))
        self.data[position:end] = data
        self.pending.append(("w", position, data))

    def truncate(self, length: int) -> None:
        if length < len(self.data):
            del self.data[length:]
        else:
            self.data.extend(bytes(length - len(self.data)))
        self.pending.append(("t", length))

    def sync(self) -> None:
        self.durable = bytes(self.data)
        self.pending = []

    def after_crash(self, rng: random.Random | None) -> _Inode:
        """What the platter holds: the durable bytes, plus (with ``rng``) a prefix of the
        unsynced operations, the last one possibly torn."""
        survivor = _Inode(self.mtime_ns)
        survivor.data = bytearray(self.durable)
        if rng is not None and self.pending:
            kept = rng.randint(0, len(self.pending))
            for op in self.pending[:kept]:
                _apply(survivor.data, op)
            if kept < len(self.pending) and self.pending[kept][0] == "w" and rng.random() < 0.5:
                _, position, data = self.pending[kept]
                _apply(survivor.data, ("w", position, data[:rng.randint(0, len(data))]))
        survivor.durable = bytes(survivor.data)
        return survivor


def _apply(buf: bytearray, op: tuple) -> None:
    if op[0] == "w":
        _, position, data = op
        if position > len(buf):
            buf.extend(bytes(position - len(buf)))
        buf[position:position + len(data)] = data
    else:
        length = op[1]
        if length < len(buf):
            del buf[length:]
        else:
            buf.extend(bytes(length - len(buf)))


@dataclass
class Fault:
    """Fail ``op`` with ``errno`` for paths under ``prefix``; ``times`` failures (None:
    until healed). ``hits`` counts the failures raised."""

    op: str
    prefix: str
    errno: int = errno.EIO
    times: int | None = None
    hits: int = 0

    def matches(self, op: str, path: str) -> bool:
        if op != self.op or (self.times is not None and self.hits >= self.times):
            return False
        return path == self.prefix or path.startswith(self.prefix.rstrip("/") + "/")


@dataclass
class _SpaceLimit:
    prefix: str
    budget: int
    hits: int = 0


class SimFile:
    """A handle on a simulated file: reads and writes go to its inode, under the faults."""

    __slots__ = ("path", "_fs", "_inode", "_generation", "_append", "_closed")

    def __init__(self, fs: SimulatedFileSystem, path: str, inode: _Inode, append: bool) -> None:
        self.path = path
        self._fs = fs
        self._inode = inode
        self._generation = fs.generation
        self._append = append
        self._closed = False

    def _live(self, op: str) -> _Inode:
        if self._closed or self._generation != self._fs.generation:
            # closed, or opened before a crash: the process that held it is gone
            raise _error(errno.EBADF, self.path)
        self._fs._check(op, self.path)
        return self._inode

    def pread(self, size: int, position: int) -> bytes:
        inode = self._live("read")
        return bytes(inode.data[position:position + size])

    def pwrite(self, data: Bytes, position: int) -> None:
        inode = self._live("write")
        if self._append:
            position = len(inode.data)  # O_APPEND: Linux's pwrite appends too
        payload = bytes(memoryview(data).cast("B"))
        grow = max(0, position + len(payload) - len(inode.data))
        allowed = self._fs._take_space(self.path, grow)
        if allowed < grow:
            # what fits lands (a short write), then the device is full
            keep = len(payload) - (grow - allowed)
            if keep > 0:
                inode.write(payload[:keep], position)
            raise _error(errno.ENOSPC, self.path)
        inode.write(payload, position)
        inode.mtime_ns = self._fs._now_ns()

    def append(self, data: Bytes) -> None:
        self.pwrite(data, len(self._live("write").data))

    def size(self) -> int:
        if self._closed or self._generation != self._fs.generation:
            raise _error(errno.EBADF, self.path)
        return len(self._inode.data)

    def truncate(self, length: int) -> None:
        inode = self._live("truncate")
        self._fs._take_space(self.path, length - len(inode.data))  # < 0: space given back
        inode.truncate(length)
        inode.mtime_ns = self._fs._now_ns()

    def fsync(self) -> None:
        self._live("fsync").sync()

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"SimFile({self.path!r})"


class SimulatedFileSystem:
    """One node's disk, in memory. ``clock`` (seconds, like the broker's) gives mtimes."""

    threaded = False

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.clock = clock
        # path -> inode: the names the running process sees, and those a crash keeps
        self._live: dict[str, _Inode] = {}
        self._durable: dict[str, _Inode] = {}
        self._dirs: set[str] = {"/"}
        self.faults: list[Fault] = []
        self._space: list[_SpaceLimit] = []
        self.generation = 0  # bumped by a crash: older handles are dead
        self.crashes = 0

    # ------------------------------------------------------------------ faults

    def fail(self, op: str, prefix: str = "/", code: int = errno.EIO, *,
             times: int | None = None) -> Fault:
        """From now on ``op`` (one of `OPS`) on a path under ``prefix`` raises ``code``."""
        if op not in OPS:
            raise ValueError(f"unknown operation {op!r}; one of {OPS}")
        fault = Fault(op, _norm(prefix), code, times)
        self.faults.append(fault)
        return fault

    def limit_space(self, budget: int, prefix: str = "/") -> None:
        """Let ``budget`` more bytes of file growth under ``prefix`` in, then ENOSPC."""
        self._space.append(_SpaceLimit(_norm(prefix), budget))

    def heal(self) -> None:
        self.faults.clear()
        self._space.clear()

    def _check(self, op: str, path: str) -> None:
        for fault in self.faults:
            if fault.matches(op, path):
                fault.hits += 1
                raise _error(fault.errno, path)

    def _take_space(self, path: str, grow: int) -> int:
        """How many of ``grow`` new bytes the space limits let in (taking them); a
        negative ``grow`` (a truncation) gives space back."""
        allowed = grow
        for limit in self._space:
            if path == limit.prefix or path.startswith(limit.prefix.rstrip("/") + "/"):
                allowed = min(allowed, limit.budget)
        for limit in self._space:
            if path == limit.prefix or path.startswith(limit.prefix.rstrip("/") + "/"):
                limit.budget -= allowed
                if allowed < grow:
                    limit.hits += 1
        return allowed

    def _now_ns(self) -> int:
        return int(self.clock() * 1e9) if self.clock is not None else 0

    # ------------------------------------------------------------------ crash

    def crash(self, rng: random.Random | None = None) -> None:
        """Power off and on: every handle dies, names are the durable ones, files hold
        their durable bytes (with ``rng``: plus a random, possibly torn, prefix of their
        unsynced writes). Faults stay (a failing device still fails)."""
        self.generation += 1
        self.crashes += 1
        survivors: dict[int, _Inode] = {}
        recovered: dict[str, _Inode] = {}
        for path in sorted(self._durable):  # sorted: the rng is drawn in a fixed order
            inode = self._durable[path]
            if id(inode) not in survivors:
                survivors[id(inode)] = inode.after_crash(rng)
            recovered[path] = survivors[id(inode)]
        self._live = recovered
        self._durable = dict(recovered)

    # ------------------------------------------------------------------ inspection

    def durable_content(self, path: str) -> bytes | None:
        """What a crash without writeback would leave at ``path`` (None: no such name)."""
        inode = self._durable.get(_norm(path))
        return None if inode is None else inode.durable

    def content(self, path: str) -> bytes:
        return bytes(self._inode(_norm(path)).data)

    # ------------------------------------------------------------------ FileSystem

    def _inode(self, path: str) -> _Inode:
        inode = self._live.get(path)
        if inode is None:
            raise _error(errno.EISDIR if path in self._dirs else errno.ENOENT, path)
        return inode

    def _parent_must_exist(self, path: str) -> None:
        parent = posixpath.dirname(path)
        if parent not in self._dirs:
            raise _error(errno.ENOENT, path)

    def open(self, path: str, *, create: bool = True, append: bool = False) -> SimFile:
        p = _norm(path)
        inode = self._live.get(p)
        if inode is None:
            if p in self._dirs:
                raise _error(errno.EISDIR, p)
            if not create:
                raise _error(errno.ENOENT, p)
            self._parent_must_exist(p)
            self._check("create", p)
            inode = _Inode(self._now_ns())
            self._live[p] = inode
        return SimFile(self, p, inode, append)

    def exists(self, path: str) -> bool:
        p = _norm(path)
        return p in self._live or p in self._dirs

    def isdir(self, path: str) -> bool:
        return _norm(path) in self._dirs

    def listdir(self, path: str) -> list[str]:
        p = _norm(path)
        if p not in self._dirs:
            raise _error(errno.ENOTDIR if p in self._live else errno.ENOENT, p)
        names = {posixpath.basename(q) for q in self._live if posixpath.dirname(q) == p}
        names |= {posixpath.basename(d) for d in self._dirs if d != p and posixpath.dirname(d) == p}
        return sorted(names)

    def makedirs(self, path: str) -> None:
        p = _norm(path)
        missing = []
        while p not in self._dirs:
            if p in self._live:
                raise _error(errno.EEXIST, p)
            missing.append(p)
            p = posixpath.dirname(p)
        for d in reversed(missing):
            self._check("create", d)
            self._dirs.add(d)

    def rename(self, src: str, dst: str) -> None:
        s, d = _norm(src), _norm(dst)
        self._check("rename", s)
        self._check("rename", d)
        if s in self._dirs:
            self._rename_dir(s, d)
            return
        inode = self._inode(s)
        self._parent_must_exist(d)
        if d in self._dirs:
            raise _error(errno.EISDIR, d)
        del self._live[s]
        self._live[d] = inode

    def _rename_dir(self, s: str, d: str) -> None:
        # durable at once (see the module docstring), the files under it with it
        self._parent_must_exist(d)
        if d in self._dirs or d in self._live:
            raise _error(errno.EEXIST, d)

        def moved(paths: Iterable[str]) -> dict[str, str]:
            return {q: d + q[len(s):] for q in paths if q == s or q.startswith(s + "/")}

        for table in (self._live, self._durable):
            for old, new in moved(list(table)).items():
                table[new] = table.pop(old)
        for old, new in moved(list(self._dirs)).items():
            self._dirs.discard(old)
            self._dirs.add(new)

    def remove(self, path: str) -> None:
        p = _norm(path)
        self._inode(p)
        self._check("remove", p)
        del self._live[p]

    def rmtree(self, path: str) -> None:
        p = _norm(path)
        if p not in self._dirs:
            return
        try:
            self._check("remove", p)
        except OSError:
            return  # shutil.rmtree(ignore_errors=True) gives up quietly too

        def under(q: str) -> bool:
            return q == p or q.startswith(p + "/")

        for table in (self._live, self._durable):
            for q in [q for q in table if under(q)]:
                del table[q]
        self._dirs = {q for q in self._dirs if not under(q)}

    def fsync_dir(self, path: str) -> None:
        p = _norm(path)
        if p in self._live:  # fsync through a read-only descriptor on a file
            self._check("fsync", p)
            self._live[p].sync()
            return
        if p not in self._dirs:
            raise _error(errno.ENOENT, p)
        self._check("fsync", p)
        for q in [q for q in self._durable if posixpath.dirname(q) == p]:
            del self._durable[q]
        for q, inode in self._live.items():
            if posixpath.dirname(q) == p:
                self._durable[q] = inode

    def file_size(self, path: str) -> int:
        return len(self._inode(_norm(path)).data)

    def mtime_ns(self, path: str) -> int:
        return self._inode(_norm(path)).mtime_ns

    def set_mtime_ns(self, path: str, mtime_ns: int) -> None:
        self._inode(_norm(path)).mtime_ns = mtime_ns
