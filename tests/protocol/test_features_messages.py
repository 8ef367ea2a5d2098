"""UpdateFeatures (57) and ApiVersions' feature fields, laid out byte by byte in the order
of Kafka's definitions: UpdateFeatures is flexible from v0 (compact strings and arrays,
tagged fields closing each struct), v0's AllowDowngrade became v1's UpgradeType int8, and
v2's response has no per-feature results; ApiVersions v3 carries the features as tagged
fields 0-2 of the response."""

from __future__ import annotations

import struct

from protocol.messages.api_versions import ApiVersionsResponse
from protocol.messages.features import UpdateFeaturesRequest, UpdateFeaturesResponse
from tests.protocol.test_share_messages import TAGS, arr, cstr, i16, i32

NULL = b"\x00"


def test_update_features_v0_request_says_allow_downgrade():
    raw = i32(60000) + arr(1) + cstr("group.version") + i16(0) + b"\x01" + TAGS + TAGS
    body = UpdateFeaturesRequest.parse(raw, 0)
    (u,) = body.feature_updates
    assert (u.feature, u.max_version_level, u.allow_downgrade) == ("group.version", 0, True)
    assert UpdateFeaturesRequest.build(body, 0) == raw


def test_update_features_v1_request_has_an_upgrade_type_and_validate_only():
    raw = (i32(30000) + arr(2)
           + cstr("metadata.version") + i16(17) + b"\x02" + TAGS
           + cstr("share.version") + i16(1) + b"\x01" + TAGS
           + b"\x01" + TAGS)
    body = UpdateFeaturesRequest.parse(raw, 1)
    assert [(u.feature, u.max_version_level, u.upgrade_type) for u in body.feature_updates] \
        == [("metadata.version", 17, 2), ("share.version", 1, 1)]
    assert body.validate_only is True and body.timeout_ms == 30000
    assert UpdateFeaturesRequest.build(body, 1) == raw


def test_update_features_response_v1_has_results_and_v2_only_the_top_level_error():
    message = "Invalid update version 2 for feature group.version."
    body = {"throttle_time_ms": 0, "error_code": 95, "error_message": message,
            "results": [{"feature": "group.version", "error_code": 95,
                         "error_message": message}]}
    head = i32(0) + i16(95) + cstr(message)
    assert UpdateFeaturesResponse.build(body, 1) == (
        head + arr(1) + cstr("group.version") + i16(95) + cstr(message) + TAGS + TAGS)
    assert UpdateFeaturesResponse.build(body, 2) == head + TAGS


def test_api_versions_v3_carries_the_features_as_tagged_fields():
    body = {"error_code": 0, "api_keys": [{"api_key": 57, "min_version": 0,
                                           "max_version": 2}],
            "throttle_time_ms": 0,
            "supported_features": [{"name": "metadata.version", "min_version": 1,
                                    "max_version": 21}],
            "finalized_features_epoch": 42,
            "finalized_features": [{"name": "metadata.version", "max_version_level": 21,
                                    "min_version_level": 21}]}
    supported = arr(1) + cstr("metadata.version") + i16(1) + i16(21) + TAGS
    epoch = struct.pack(">q", 42)
    finalized = arr(1) + cstr("metadata.version") + i16(21) + i16(21) + TAGS
    tagged = (b"\x03"
              + b"\x00" + bytes([len(supported)]) + supported
              + b"\x01" + bytes([len(epoch)]) + epoch
              + b"\x02" + bytes([len(finalized)]) + finalized)
    raw = i16(0) + arr(1) + i16(57) + i16(0) + i16(2) + TAGS + i32(0) + tagged
    assert ApiVersionsResponse.build(body, 3) == raw
    parsed = ApiVersionsResponse.parse(raw, 3)
    assert parsed.finalized_features_epoch == 42
    assert [(f.name, f.max_version_level) for f in parsed.finalized_features] == [
        ("metadata.version", 21)]
