"""Bugs planted on purpose, off unless a test or `minibroker sim --plant` turns one on.

Owns `BUGS` (name -> what goes wrong) and `on(name)`. Each is a known way to lose data or
safety, kept in the product's code at the one place it would happen, so that the
simulation (sim/) and its checkers are shown to catch it: a checker that no planted bug
ever trips proves nothing. Nothing outside tests and `minibroker sim --plant` may call
`plant`; `on` costs one lookup in an empty set.
"""

from __future__ import annotations

BUGS = {
    "hw-ignores-isr": "a leader's HW follows its own log end, not the ISR's least LEO: "
                      "acks=all answered before any follower holds the records",
    "no-truncation": "a follower never truncates on a leader-epoch change: its log keeps "
                     "the records the new leader never had",
    "commit-before-hw": "an offset commit answered before the HW of __consumer_offsets "
                        "covers it: a new coordinator may not have it",
    "vote-without-log-check": "a Raft vote granted without comparing logs: a voter missing "
                              "committed metadata may lead",
    "metadata-fsync-skipped": "the metadata log's appends are not fsynced before they count: "
                              "a crash loses what the quorum acknowledged",
    "aborted-transactions-unreported": "a read_committed Fetch answers without the aborted "
                                       "transactions: readers take aborted records for "
                                       "committed ones",
}

ACTIVE: set[str] = set()


def on(name: str) -> bool:
    return name in ACTIVE


def plant(name: str) -> None:
    if name not in BUGS:
        raise ValueError(f"no planted bug {name!r}; one of {sorted(BUGS)}")
    ACTIVE.add(name)


def clear() -> None:
    ACTIVE.clear()
