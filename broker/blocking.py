"""Blocking disk work (fsyncs of checkpoints and segments) run off the event loop.

Owns `run_sync(fn, *args)`: a worker thread, so an fsync never stalls the requests the
loop serves. It is the one place that choice is made, so tests on trio's MockClock can
run the work inline instead (the autojump clock would otherwise run ahead while a thread
works, and "after two intervals" would stop meaning anything). `run_disk(fs, fn, *args)`
is the same for work on a file system, run inline when that file system wants no
threads (a simulated disk: a thread would make the simulation's order the scheduler's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import trio

from broker.storage import FileSystem

T = TypeVar("T")


async def run_sync(fn: Callable[..., T], *args: object) -> T:
    return await trio.to_thread.run_sync(fn, *args)


async def run_disk(fs: FileSystem, fn: Callable[..., T], *args: object) -> T:
    if not fs.threaded:
        return fn(*args)
    return await run_sync(fn, *args)
