"""How a broker reaches the active controller: forwarded admin requests and producer ids.

Owns `ControllerUnavailable`, what a request to the controller raises when no controller
answered within the request's timeout (no quorum leader known, or it did not reply). The
channel itself is the broker's wiring and lives here too.
"""

from __future__ import annotations


class ControllerUnavailable(Exception):
    """No active controller answered in time; the caller answers its client with a
    retriable error (REQUEST_TIMED_OUT, COORDINATOR_NOT_AVAILABLE) rather than waiting."""
