"""Blocking disk work (fsyncs of checkpoints and segments) run off the event loop.

Owns `run_sync(fn, *args)`: a worker thread, so an fsync never stalls the requests the
loop serves. It is the one place that choice is made, so tests on trio's MockClock can
run the work inline instead (the autojump clock would otherwise run ahead while a thread
works, and "after two intervals" would stop meaning anything).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import trio

T = TypeVar("T")


async def run_sync(fn: Callable[..., T], *args: object) -> T:
    return await trio.to_thread.run_sync(fn, *args)
