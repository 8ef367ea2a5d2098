"""Share sessions (KIP-932): which partitions a share consumer fetches from this broker,
and the epoch that orders its requests. Pure: no I/O, time passed in.

Owns: `ShareSessionCache`, one per broker, keyed by (group id, member id) as Kafka's
ShareSessionCache is, and its rules for a request's ShareSessionEpoch:

- 0 opens a session with the partitions the request names; one already open for the
  member is replaced, and the records it had acquired go back (the caller releases them).
  An open request carries no acknowledgements (INVALID_REQUEST).
- n > 0 continues the session whose next epoch is n: the request names the partitions it
  adds, ForgottenTopicsData those it drops. No session: SHARE_SESSION_NOT_FOUND; another
  epoch: INVALID_SHARE_SESSION_EPOCH, and the session is dropped with its locks, so a
  client that lost count starts afresh with epoch 0 (as librdkafka does).
- -1 is the member's last request: its acknowledgements are applied, then the session
  closes and what it still holds goes back. It may not forget partitions (INVALID_REQUEST).

A session belongs to the connection that opened it: when that connection closes, the
session closes with it (Kafka 4.1 releases a disconnected member's records at once rather
than after their locks expire). At most `max_sessions` are open; one more is
SHARE_SESSION_LIMIT_REACHED.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from protocol.errors import ErrorCode as E

INITIAL_EPOCH, FINAL_EPOCH = 0, -1

SessionPartition = tuple[uuid.UUID, int]  # (topic id, partition)


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    connection: object
    epoch: int = 1  # the epoch the next request must carry
    partitions: set[SessionPartition] = field(default_factory=set)
    last_used_ms: int = 0


@dataclass
class Opened:
    """A request's session, and the sessions it ended (whose records go back)."""
    session: ShareSession | None
    ended: list[ShareSession]
    error: E = E.NONE


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int = 2000):
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def begin(self, group_id: str, member_id: str, epoch: int, connection: object,
              named: list[SessionPartition], forgotten: list[SessionPartition],
              acknowledges: bool, now_ms: int) -> Opened:
        """The session a ShareFetch (`named` partitions, `forgotten` ones, with or without
        acknowledgements) runs in, opened or advanced; or the error that refuses it."""
        key = (group_id, member_id)
        old = self.sessions.get(key)
        if epoch == INITIAL_EPOCH:
            if acknowledges or forgotten:
                return Opened(None, [], E.INVALID_REQUEST)
            ended = [self.sessions.pop(key)] if old is not None else []
            if len(self.sessions) >= self.max_sessions:
                return Opened(None, ended, E.SHARE_SESSION_LIMIT_REACHED)
            session = ShareSession(group_id, member_id, connection, partitions=set(named),
                                   last_used_ms=now_ms)
            self.sessions[key] = session
            return Opened(session, ended)
        if old is not None and epoch == FINAL_EPOCH and forgotten:
            return Opened(None, [], E.INVALID_REQUEST)
        opened = self._continue(old, epoch, connection, now_ms)
        if opened.session is not None and epoch != FINAL_EPOCH:
            opened.session.partitions.update(named)
            opened.session.partitions.difference_update(forgotten)
        return opened

    def acknowledge_only(self, group_id: str, member_id: str, epoch: int,
                         now_ms: int) -> Opened:
        """The session a ShareAcknowledge runs in: as `begin`, except that it cannot open
        one (epoch 0 is INVALID_SHARE_SESSION_EPOCH) and names no partitions."""
        if epoch == INITIAL_EPOCH:
            return Opened(None, [], E.INVALID_SHARE_SESSION_EPOCH)
        return self._continue(self.sessions.get((group_id, member_id)), epoch, None, now_ms)

    def _continue(self, old: ShareSession | None, epoch: int, connection: object | None,
                  now_ms: int) -> Opened:
        """A request with epoch n > 0 or -1 in session `old`: SHARE_SESSION_NOT_FOUND
        without one; a wrong n ends it (INVALID_SHARE_SESSION_EPOCH); else it is used now
        and, for n, its epoch moves on (and it follows the request's connection, when
        given)."""
        if old is None:
            return Opened(None, [], E.SHARE_SESSION_NOT_FOUND)
        if epoch != FINAL_EPOCH:
            if epoch != old.epoch:
                del self.sessions[(old.group_id, old.member_id)]
                return Opened(None, [old], E.INVALID_SHARE_SESSION_EPOCH)
            old.epoch = _next_epoch(old.epoch)
            if connection is not None:
                old.connection = connection
        old.last_used_ms = now_ms
        return Opened(old, [])

    def close(self, session: ShareSession) -> None:
        """The member's final request is done: the session goes (its records go back)."""
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]

    def connection_closed(self, connection: object) -> list[ShareSession]:
        """The sessions of a connection that closed, removed: their records go back."""
        gone = [s for s in self.sessions.values() if s.connection is connection]
        for s in gone:
            del self.sessions[(s.group_id, s.member_id)]
        return gone

    def member_left(self, group_id: str, member_id: str) -> ShareSession | None:
        """A member the group coordinator removed: its session here ends too."""
        return self.sessions.pop((group_id, member_id), None)
