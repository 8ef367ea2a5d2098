"""The broker's ApiVersions answer: Fetch to v17 (topic ids, ReplicaState), as declared."""

from __future__ import annotations

from types import SimpleNamespace

from broker.handlers import api_versions
from protocol.messages import (APIS, FETCH, GET_TELEMETRY_SUBSCRIPTIONS,
                               LIST_CLIENT_METRICS_RESOURCES, PUSH_TELEMETRY)


def _ctx(telemetry: bool) -> SimpleNamespace:
    return SimpleNamespace(body={}, broker=SimpleNamespace(
        telemetry=SimpleNamespace(enabled=telemetry)))


async def test_the_broker_advertises_fetch_up_to_17():
    answer = await api_versions.handle(_ctx(telemetry=True))
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert ranges[FETCH] == (0, 17)
    assert APIS[FETCH].request.versions.high == 17
    assert ranges.keys() == APIS.keys()


async def test_client_telemetry_is_advertised_only_with_a_subscription():
    answer = await api_versions.handle(_ctx(telemetry=False))
    keys = {k["api_key"] for k in answer["api_keys"]}
    assert keys == APIS.keys() - {GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY,
                                  LIST_CLIENT_METRICS_RESOURCES}
