"""The controller's UpdateFeatures (Kafka's FeatureControlManager): levels within the
supported ranges, downgrades only with a downgrade type and, for metadata.version, only
across levels that did not change the metadata records; the whole request refused at the
first bad update; validate_only writing nothing. Records are replayed through their bytes."""

from __future__ import annotations

import pytest

from broker.controller import features
from broker.controller.image import MetadataImage
from protocol.errors import ErrorCode as E
from protocol.messages import UPDATE_FEATURES, request_body
from protocol.messages.features import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record


def replay(image: MetadataImage, records) -> MetadataImage:
    return image.replay(decode_metadata_record(encode_metadata_record(*r)) for r in records)


BOOTSTRAPPED = replay(MetadataImage.EMPTY, features.bootstrap_records(MetadataImage.EMPTY))


def update(image: MetadataImage, *updates: tuple[str, int, int], validate_only=False):
    body = request_body(UPDATE_FEATURES, 1, {
        "feature_updates": [{"feature": f, "max_version_level": level, "upgrade_type": kind}
                            for f, level, kind in updates],
        "validate_only": validate_only})
    records, response = features.update_features(image, body, node_id=1)
    return replay(image, records), records, response


def test_a_new_cluster_finalizes_every_feature_once():
    assert dict(BOOTSTRAPPED.features) == {"metadata.version": 21, "group.version": 1,
                                           "share.version": 1, "transaction.version": 1}
    assert features.bootstrap_records(BOOTSTRAPPED) == []


def test_a_downgrade_with_its_type_then_an_upgrade_back():
    image, records, response = update(BOOTSTRAPPED, ("group.version", 0, SAFE_DOWNGRADE))
    assert response["error_code"] == E.NONE
    assert response["results"] == [{"feature": "group.version", "error_code": E.NONE,
                                    "error_message": None}]
    # level 0 removes the feature from the finalized set, as Kafka's FeaturesDelta does
    assert records == [(T.FEATURE_LEVEL_RECORD, 0, {"name": "group.version",
                                                    "feature_level": 0})]
    assert "group.version" not in image.features
    image, _, response = update(image, ("group.version", 1, UPGRADE))
    assert response["error_code"] == E.NONE and image.features["group.version"] == 1


@pytest.mark.parametrize("update_, message", [
    (("group.version", 2, UPGRADE),
     "Invalid update version 2 for feature group.version. Local controller 1 only supports "
     "versions 0-1"),
    (("transaction.version", 2, UPGRADE),  # KIP-890 part 2 is not implemented
     "Invalid update version 2 for feature transaction.version. Local controller 1 only "
     "supports versions 0-1"),
    (("metadata.version", 22, UPGRADE),  # 4.0-IV0: past what this software supports
     "Invalid update version 22 for feature metadata.version. Local controller 1 only "
     "supports versions 1-21"),
    (("no.such.feature", 1, UPGRADE),
     "Invalid update version 1 for feature no.such.feature. Local controller 1 does not "
     "support this feature."),
    (("group.version", -1, SAFE_DOWNGRADE),
     "Invalid update version -1 for feature group.version. A feature version cannot be less "
     "than 0."),
    (("group.version", 0, UPGRADE),
     "Invalid update version 0 for feature group.version. Can't downgrade the version of "
     "this feature without setting the upgrade type to either safe or unsafe downgrade."),
    (("group.version", 1, 7),
     "Invalid update version 1 for feature group.version. The controller does not support "
     "the given upgrade type."),
    (("metadata.version", 3, SAFE_DOWNGRADE),
     "Invalid metadata.version 3. Unable to set a metadata.version less than 3.3-IV0"),
    (("metadata.version", 16, SAFE_DOWNGRADE),  # 3.7-IV2 (17) changed the records
     "Invalid metadata.version 16. Refusing to perform the requested downgrade because it "
     "might delete metadata information. Retry using UNSAFE_DOWNGRADE if you want to force "
     "the downgrade to proceed."),
    (("metadata.version", 16, UNSAFE_DOWNGRADE),
     "Invalid metadata.version 16. Unsafe metadata downgrade is not supported in this "
     "version."),
])
def test_refused_updates_change_nothing(update_, message):
    image, records, response = update(BOOTSTRAPPED, ("share.version", 0, SAFE_DOWNGRADE),
                                      update_)
    # the first update was fine, but the request is refused whole
    assert records == [] and image == BOOTSTRAPPED
    assert response["error_code"] == E.INVALID_UPDATE_VERSION
    assert response["error_message"] == message
    assert [r["error_code"] for r in response["results"]] == [E.INVALID_UPDATE_VERSION] * 2


def test_raising_a_level_with_a_downgrade_type_is_refused():
    image, _, _ = update(BOOTSTRAPPED, ("metadata.version", 17, SAFE_DOWNGRADE))
    _, records, response = update(image, ("metadata.version", 21, SAFE_DOWNGRADE))
    assert records == [] and response["error_message"] == (
        "Invalid update version 21 for feature metadata.version. Can't downgrade to a newer "
        "version.")


def test_metadata_version_goes_down_safely_across_levels_that_changed_nothing():
    # 3.9-IV0 (21) down to 3.7-IV2 (17): 18-21 left the records as they were
    image, records, response = update(BOOTSTRAPPED, ("metadata.version", 17, SAFE_DOWNGRADE))
    assert response["error_code"] == E.NONE and image.features["metadata.version"] == 17
    image, _, response = update(image, ("metadata.version", 21, UPGRADE))
    assert response["error_code"] == E.NONE and image.features["metadata.version"] == 21


def test_validate_only_answers_the_same_and_writes_nothing():
    _, records, response = update(BOOTSTRAPPED, ("group.version", 0, SAFE_DOWNGRADE),
                                  validate_only=True)
    assert records == [] and response["error_code"] == E.NONE
    _, records, response = update(BOOTSTRAPPED, ("group.version", 5, UPGRADE),
                                  validate_only=True)
    assert records == [] and response["error_code"] == E.INVALID_UPDATE_VERSION


def test_an_unchanged_level_writes_no_record():
    image, records, response = update(BOOTSTRAPPED, ("group.version", 1, UPGRADE))
    assert response["error_code"] == E.NONE and records == [] and image == BOOTSTRAPPED


def test_a_cluster_bootstrapped_before_update_features_upgrades_its_other_features():
    old = replay(MetadataImage.EMPTY, [(T.FEATURE_LEVEL_RECORD, 0, {
        "name": "metadata.version", "feature_level": 21})])
    assert features.bootstrap_records(old) == []  # activation does not touch it again
    image, _, response = update(old, ("share.version", 1, UPGRADE),
                                ("transaction.version", 1, UPGRADE))
    assert response["error_code"] == E.NONE
    assert image.features == {"metadata.version": 21, "share.version": 1,
                              "transaction.version": 1}


def test_release_names():
    assert features.release_of(21) == "3.9-IV0"
    assert features.metadata_version_level("3.9") == 21
    assert features.metadata_version_level("3.7") == 19
    assert features.metadata_version_level("3.7-IV2") == 17
    assert features.metadata_version_level("2.8") is None
