"""Waiting on a condition with a deadline, never for a fixed time: `wait_until` for plain
code (it sleeps blocking between checks) and `wait_for` for trio code (it lets the other
tasks run). Both raise `WaitTimeout`, an AssertionError naming what was expected, so that
pytest reports it as a failure with the message; a benchmark turns it into its own error.
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Awaitable, Callable, TypeVar

import trio

T = TypeVar("T")

__all__ = ["WaitTimeout", "wait_for", "wait_until"]


class WaitTimeout(AssertionError):
    """The condition did not become true before the deadline.

    An AssertionError, so pytest reports it as a test failure with the message.
    """


def _describe(predicate: Callable[..., Any]) -> str:
    name = getattr(predicate, "__qualname__", None) or repr(predicate)
    if getattr(predicate, "__name__", None) == "<lambda>":
        try:
            return inspect.getsource(predicate).strip()
        except (OSError, TypeError):
            pass
    return name


def _timeout_error(predicate, timeout_s, message, attempts, last_value, last_exc) -> WaitTimeout:
    what = message or f"condition {_describe(predicate)}"
    detail = f"after {timeout_s:g}s ({attempts} checks); last value: {last_value!r}"
    if last_exc is not None:
        detail += f"; last ignored exception: {type(last_exc).__name__}: {last_exc}"
    err = WaitTimeout(f"timed out waiting for {what}: {detail}")
    err.__cause__ = last_exc
    return err


def wait_until(
    predicate: Callable[[], T | None],
    timeout_s: float,
    interval_s: float = 0.05,
    message: str = "",
    *,
    ignore_exceptions: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate()`` until it returns a truthy value; return that value.

    Checks at once, then every ``interval_s`` seconds, and at least once more at the
    deadline. Raises ``WaitTimeout`` (an AssertionError) naming ``message`` after
    ``timeout_s`` seconds. Exceptions from the predicate propagate unless they are
    instances of ``ignore_exceptions`` (for example ``(ConnectionError,)`` while a
    server starts), which count as "not yet".
    """
    if timeout_s < 0 or interval_s <= 0:
        raise ValueError("timeout_s must be >= 0 and interval_s > 0")
    deadline = time.monotonic() + timeout_s
    attempts = 0
    last_value: Any = None
    last_exc: BaseException | None = None
    while True:
        attempts += 1
        try:
            last_value = predicate()
        except ignore_exceptions as e:
            last_value, last_exc = None, e
        else:
            if last_value:
                return last_value
        now = time.monotonic()
        if now >= deadline:
            raise _timeout_error(predicate, timeout_s, message, attempts, last_value, last_exc)
        time.sleep(min(interval_s, deadline - now))


async def wait_for(predicate: Callable[[], Any | Awaitable[Any]], timeout_s: float,
                   message: str = "", interval_s: float = 0.02) -> Any:
    """wait_until for trio code: check `predicate` (plain or async) until it is truthy,
    letting the other tasks run between checks; WaitTimeout naming `message` after
    `timeout_s`."""
    deadline = trio.current_time() + timeout_s
    last = None
    while True:
        last = predicate()
        if isinstance(last, Awaitable):
            last = await last
        if last:
            return last
        if trio.current_time() >= deadline:
            raise WaitTimeout(f"timed out after {timeout_s:g}s waiting for "
                              f"{message or predicate}; last value: {last!r}")
        await trio.sleep(interval_s)
