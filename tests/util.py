"""Helpers shared by all tests.

Tests wait for conditions, never for fixed amounts of time: use ``wait_until`` with a
deadline and a message that says what was expected. (It sleeps blocking; trio tests, where
that would stall the event loop, await ``tests.interop.group_helpers.wait_for`` instead.)
"""

from __future__ import annotations

import inspect
import time
import uuid
from typing import Any, Callable, TypeVar

T = TypeVar("T")

__all__ = ["WaitTimeout", "unique", "wait_until"]


def unique(prefix: str) -> str:
    """A topic or group name no other test uses (tests share brokers)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


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
    predicate: Callable[[], T],
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
        except ignore_exceptions as e:  # type: ignore[misc]
            last_value, last_exc = None, e
        else:
            if last_value:
                return last_value
        now = time.monotonic()
        if now >= deadline:
            raise _timeout_error(predicate, timeout_s, message, attempts, last_value, last_exc)
        time.sleep(min(interval_s, deadline - now))
