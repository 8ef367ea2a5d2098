"""Helpers shared by all tests.

Tests wait for conditions, never for fixed amounts of time: use ``wait_until`` with a
deadline and a message that says what was expected (trio tests await ``wait_for``). Both
are harness.wait's, named here too because tests have always imported them from here.
"""

from __future__ import annotations

import uuid

from harness.wait import WaitTimeout, wait_for, wait_until

__all__ = ["WaitTimeout", "unique", "wait_for", "wait_until"]


def unique(prefix: str) -> str:
    """A topic or group name no other test uses (tests share brokers)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
