"""The broker's ApiVersions answer: Fetch stays at v12 although it is declared further."""

from __future__ import annotations

from types import SimpleNamespace

from broker.handlers import api_versions
from protocol.messages import APIS, FETCH


async def test_the_broker_advertises_fetch_up_to_12_only():
    answer = await api_versions.handle(SimpleNamespace(body={}))
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert ranges[FETCH] == (0, 12)
    assert APIS[FETCH].request.versions.high > 12  # so the cap is what keeps it at 12
    assert ranges.keys() == APIS.keys()
