"""protocol.versions: what the client-facing broker advertises and accepts, and the caps
that keep declarations made for the KRaft quorum away from clients."""

from __future__ import annotations

from protocol import versions
from protocol.messages import ALL_APIS, APIS, CONTROLLER_APIS, FETCH, METADATA, VOTE


def test_fetch_is_served_to_17_and_our_client_speaks_12():
    assert dict((k, (lo, hi)) for k, lo, hi in versions.advertised())[FETCH] == (0, 17)
    assert versions.implemented(FETCH) == (4, 17)
    assert versions.is_implemented(FETCH, 13) and versions.is_implemented(FETCH, 17)
    # our consumer names topics: it never picks a topic-id version, whatever is offered
    assert versions.pick_version(FETCH, 0, 17) == 12
    assert versions.pick_version(FETCH, 0, 11) == 11


def test_every_cap_lies_inside_its_declaration():
    for caps in (versions.CLIENT_FACING_MAX, versions.OUR_CLIENT_MAX):
        for key, cap in caps.items():
            declared = APIS[key].request.versions
            assert declared.low <= cap < declared.high


def test_other_registries_accept_every_declared_version():
    assert versions.accepts(ALL_APIS, FETCH, 16) and versions.accepts(ALL_APIS, FETCH, 17)
    assert versions.accepts(APIS, FETCH, 17) and not versions.accepts(APIS, FETCH, 18)
    assert versions.accepts(CONTROLLER_APIS, VOTE, 1) and not versions.accepts(APIS, VOTE, 1)
    assert not versions.accepts(CONTROLLER_APIS, METADATA, 12)
    assert not versions.accepts(ALL_APIS, FETCH, 18)
    assert versions.accepts(APIS, METADATA, 12)
