"""The broker's ApiVersions answer: Fetch to v17 (topic ids, ReplicaState), as declared."""

from __future__ import annotations

from types import SimpleNamespace

from broker.handlers import api_versions
from protocol.messages import APIS, FETCH


async def test_the_broker_advertises_fetch_up_to_17():
    answer = await api_versions.handle(SimpleNamespace(body={}))
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert ranges[FETCH] == (0, 17)
    assert APIS[FETCH].request.versions.high == 17
    assert ranges.keys() == APIS.keys()
