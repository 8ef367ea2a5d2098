"""Rate-limited warnings: say a failure at once, then at a bounded rate while it lasts.

Owns: `RateLimitedWarning`, what the connection pool uses to warn about an address that
cannot be reached and what getmany uses to say why it is retrying: the first failure of a
kind is logged at once, repeats at most every `interval_s` (with how many were held back),
and `recovered()` logs once that it is over, so a broker down for an hour costs a few
hundred lines, not one per reconnect attempt.

    warn = RateLimitedWarning(log, interval_s=10)
    warn.failed(("127.0.0.1", 9092), "cannot connect to 127.0.0.1:9092: Connection refused")
    warn.recovered(("127.0.0.1", 9092), "connected to 127.0.0.1:9092 again")
"""

from __future__ import annotations

import logging
import time
from typing import Hashable

__all__ = ["RateLimitedWarning", "WARN_INTERVAL_S"]

WARN_INTERVAL_S = 10.0


class RateLimitedWarning:
    """Per key: the first failure warned at once, then one warning per `interval_s`."""

    def __init__(self, logger: logging.Logger, interval_s: float = WARN_INTERVAL_S,
                 level: int = logging.WARNING):
        self.log = logger
        self.interval_s = interval_s
        self.level = level
        self._last: dict[Hashable, float] = {}  # key -> when it was last logged
        self._held: dict[Hashable, int] = {}  # key -> failures not logged since

    def failed(self, key: Hashable, message: str) -> bool:
        """Log `message` unless this key was logged less than interval_s ago; returns
        whether it was logged. Wall-clock time: trio's clock may be a test's autojump."""
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now < last + self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        held = self._held.pop(key, 0)
        suffix = f" ({held} more since the last warning)" if held else ""
        self.log.log(self.level, "%s%s", message, suffix)
        self._last[key] = now
        return True

    def recovered(self, key: Hashable, message: str) -> None:
        """The failure is over: log `message` (info) if a failure was logged for `key`."""
        if self._last.pop(key, None) is not None:
            self._held.pop(key, None)
            self.log.info("%s", message)
