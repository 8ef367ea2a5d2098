"""The broker's ApiVersions answer: Fetch to v17 (topic ids, ReplicaState), as declared;
from v3 the supported and finalized features of its metadata image."""

from __future__ import annotations

from types import SimpleNamespace

from broker.controller.image import MetadataImage
from broker.handlers import api_versions
from protocol.metadata_records import MetadataRecordType as T
from protocol.messages import (APIS, FETCH, GET_TELEMETRY_SUBSCRIPTIONS,
                               LIST_CLIENT_METRICS_RESOURCES, PUSH_TELEMETRY)


def _ctx(telemetry: bool = True, version: int = 4,
         image: MetadataImage = MetadataImage.EMPTY, offset: int = 0) -> SimpleNamespace:
    return SimpleNamespace(body={}, version=version, broker=SimpleNamespace(
        telemetry=SimpleNamespace(enabled=telemetry),
        metadata_cache=SimpleNamespace(image=image, offset=offset)))


def _finalized(**levels: int) -> MetadataImage:
    return MetadataImage.EMPTY.replay(
        (T.FEATURE_LEVEL_RECORD, 0, SimpleNamespace(name=name.replace("_", "."),
                                                    feature_level=level))
        for name, level in levels.items())


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


async def test_v4_lists_every_supported_feature_and_the_finalized_levels():
    image = _finalized(metadata_version=21, group_version=1)
    answer = await api_versions.handle(_ctx(image=image, offset=43))
    assert {f["name"]: (f["min_version"], f["max_version"])
            for f in answer["supported_features"]} == {
        "metadata.version": (1, 21), "group.version": (0, 1), "share.version": (0, 1),
        "transaction.version": (0, 1)}
    assert answer["finalized_features"] == [
        {"name": "group.version", "max_version_level": 1, "min_version_level": 1},
        {"name": "metadata.version", "max_version_level": 21, "min_version_level": 21}]
    # the epoch is the offset of the last entry applied (the cache keeps the next one)
    assert answer["finalized_features_epoch"] == 42


async def test_v3_leaves_out_features_whose_minimum_is_0():
    answer = await api_versions.handle(_ctx(version=3, image=_finalized(metadata_version=21),
                                            offset=5))
    assert [f["name"] for f in answer["supported_features"]] == ["metadata.version"]


async def test_nothing_finalized_has_the_unknown_epoch():
    answer = await api_versions.handle(_ctx())
    assert answer["finalized_features"] == [] and answer["finalized_features_epoch"] == -1
