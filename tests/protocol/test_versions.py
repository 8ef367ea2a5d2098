"""protocol.versions: what the client-facing broker advertises and accepts, and the caps
that keep declarations made for the KRaft quorum away from clients."""

from __future__ import annotations

from protocol import versions
from protocol.messages import ALL_APIS, APIS, CONTROLLER_APIS, FETCH, METADATA, VOTE


def test_fetch_is_declared_past_12_but_advertised_and_accepted_only_to_12():
    assert APIS[FETCH].request.versions.high >= 16  # declared for the quorum
    assert dict((k, (lo, hi)) for k, lo, hi in versions.advertised())[FETCH] == (0, 12)
    assert versions.implemented(FETCH) == (4, 12)
    assert versions.is_implemented(FETCH, 12) and not versions.is_implemented(FETCH, 13)
    # our client never picks a topic-id version, whatever the broker offers
    assert versions.pick_version(FETCH, 0, 17) == 12


def test_every_cap_lies_inside_its_declaration():
    for key, cap in versions.CLIENT_FACING_MAX.items():
        declared = APIS[key].request.versions
        assert declared.low <= cap < declared.high


def test_other_registries_accept_every_declared_version():
    assert versions.accepts(ALL_APIS, FETCH, 16) and versions.accepts(ALL_APIS, FETCH, 17)
    assert not versions.accepts(APIS, FETCH, 13)
    assert versions.accepts(CONTROLLER_APIS, VOTE, 1) and not versions.accepts(APIS, VOTE, 1)
    assert not versions.accepts(CONTROLLER_APIS, METADATA, 12)
    assert not versions.accepts(ALL_APIS, FETCH, 18)
    assert versions.accepts(APIS, METADATA, 12)
