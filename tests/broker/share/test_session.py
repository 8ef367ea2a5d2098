"""Share sessions: the epochs that open, continue and close them, and what ends them."""

import uuid

from broker.share.session import ShareSessionCache
from protocol.errors import ErrorCode as E

T = uuid.UUID(int=1)
CONN, OTHER = object(), object()


def test_open_continue_and_close():
    cache = ShareSessionCache()
    opened = cache.begin("g", "m", 0, CONN, [(T, 0)], [], False, 0)
    assert opened.error == E.NONE and opened.ended == []
    session = opened.session
    assert session.partitions == {(T, 0)} and session.epoch == 1
    nxt = cache.begin("g", "m", 1, CONN, [(T, 1)], [(T, 0)], True, 5)
    assert nxt.session is session and session.partitions == {(T, 1)} and session.epoch == 2
    last = cache.begin("g", "m", -1, CONN, [], [], True, 6)
    assert last.session is session
    cache.close(session)
    assert len(cache) == 0


def test_an_open_request_may_not_acknowledge_or_forget():
    cache = ShareSessionCache()
    assert cache.begin("g", "m", 0, CONN, [(T, 0)], [], True, 0).error == E.INVALID_REQUEST
    assert cache.begin("g", "m", 0, CONN, [], [(T, 0)], False, 0).error == E.INVALID_REQUEST
    assert len(cache) == 0


def test_reopening_replaces_the_old_session_whose_records_go_back():
    cache = ShareSessionCache()
    old = cache.begin("g", "m", 0, CONN, [(T, 0)], [], False, 0).session
    again = cache.begin("g", "m", 0, OTHER, [(T, 1)], [], False, 1)
    assert again.ended == [old] and again.session is not old and len(cache) == 1


def test_unknown_session_and_wrong_epoch():
    cache = ShareSessionCache()
    assert cache.begin("g", "m", 3, CONN, [], [], False, 0).error == E.SHARE_SESSION_NOT_FOUND
    assert cache.begin("g", "m", -1, CONN, [], [], True, 0).error == E.SHARE_SESSION_NOT_FOUND
    session = cache.begin("g", "m", 0, CONN, [(T, 0)], [], False, 0).session
    wrong = cache.begin("g", "m", 7, CONN, [], [], False, 0)
    assert wrong.error == E.INVALID_SHARE_SESSION_EPOCH and wrong.ended == [session]
    assert len(cache) == 0  # the client starts afresh with epoch 0


def test_the_final_request_may_not_forget_partitions():
    cache = ShareSessionCache()
    cache.begin("g", "m", 0, CONN, [(T, 0)], [], False, 0)
    assert cache.begin("g", "m", -1, CONN, [], [(T, 0)], False, 0).error == E.INVALID_REQUEST
    assert len(cache) == 1


def test_share_acknowledge_cannot_open_a_session_but_advances_one():
    cache = ShareSessionCache()
    assert cache.acknowledge_only("g", "m", 0, 0).error == E.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledge_only("g", "m", 1, 0).error == E.SHARE_SESSION_NOT_FOUND
    session = cache.begin("g", "m", 0, CONN, [(T, 0)], [], False, 0).session
    assert cache.acknowledge_only("g", "m", 1, 0).session is session and session.epoch == 2
    assert cache.acknowledge_only("g", "m", 1, 0).error == E.INVALID_SHARE_SESSION_EPOCH


def test_a_closed_connection_ends_its_sessions_only():
    cache = ShareSessionCache()
    mine = cache.begin("g", "a", 0, CONN, [(T, 0)], [], False, 0).session
    cache.begin("g", "b", 0, OTHER, [(T, 0)], [], False, 0)
    assert cache.connection_closed(CONN) == [mine]
    assert len(cache) == 1


def test_the_cache_is_bounded():
    cache = ShareSessionCache(max_sessions=1)
    cache.begin("g", "a", 0, CONN, [], [], False, 0)
    assert cache.begin("g", "b", 0, CONN, [], [], False, 0).error \
        == E.SHARE_SESSION_LIMIT_REACHED
    # the member that holds the slot may reopen its own session
    assert cache.begin("g", "a", 0, CONN, [], [], False, 0).error == E.NONE
