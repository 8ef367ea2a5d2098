"""Feature levels (KIP-584, KIP-778): what this software supports, what a new cluster
finalizes, and UpdateFeatures (Kafka's FeatureControlManager and QuorumFeatures).

Owns `SUPPORTED` (each feature's supported range, the same on every node since every
node runs this software), `BOOTSTRAP` (the levels a new cluster's controller finalizes
when it first activates), the metadata.version table (`MetadataVersion`: Kafka's level
numbers and release names, and which levels changed the metadata records), and
`update_features`, the controller operation.

The levels chosen (docs/BROKER.md, "Feature levels"):
- metadata.version 1-21 (3.0-IV1 to 3.9-IV0), 21 finalized: Kafka 3.9's range; 4.0's
  levels are not supported. The controller writes the same records at every level;
- group.version 0-1, 1 finalized: the KIP-848 consumer group protocol is served;
- transaction.version 0-1, 1 finalized: transactions V1 (the flexible transaction log
  value); level 2, KIP-890 part 2, is not implemented, so it cannot be finalized and
  clients never switch to it;
- share.version 0-1, 1 finalized: KIP-932 share groups are served.
A cluster bootstrapped before UpdateFeatures existed finalized only metadata.version;
the others read as level 0 there until upgraded. The levels are recorded and advertised
(ApiVersions v3+); the broker serves the same APIs at every level.

UpdateFeatures follows Kafka 4's rules: every update is checked before any record is
written, and the first failure fails the request whole (INVALID_UPDATE_VERSION with
Kafka's message). A level outside the supported range, or a feature this software does
not know (unless asked for level 0), is refused; lowering a level needs SAFE_DOWNGRADE or
UNSAFE_DOWNGRADE, raising it UPGRADE. metadata.version cannot go below 3.3-IV0 (the first
with FeatureLevelRecord), and a downgrade across a level that changed the metadata
records is refused: as SAFE_DOWNGRADE because it might lose metadata, as UNSAFE_DOWNGRADE
because Kafka does not support one. validate_only answers the same and writes nothing.
Not modelled: Kafka 4's dependencies between features (group.version 1 on
metadata.version 4.0-IV0 and the like), since our metadata.version stops at 3.9.

Pure: a function of the image.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.controller.controller_result import Record
from broker.controller.image import MetadataImage
from protocol.errors import ErrorCode
from protocol.messages.features import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE
from protocol.metadata_records import MetadataRecordType as T

METADATA_VERSION = "metadata.version"
GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"
SHARE_VERSION = "share.version"


class MetadataVersion(NamedTuple):
    """One level of Kafka's MetadataVersion: its release name and whether the metadata
    records changed at it (Kafka's didMetadataChange)."""

    level: int
    release: str
    metadata_changed: bool


METADATA_VERSIONS: dict[int, MetadataVersion] = {mv.level: mv for mv in (
    MetadataVersion(*v) for v in (
        (1, "3.0-IV1", True), (2, "3.1-IV0", False), (3, "3.2-IV0", True),
        (4, "3.3-IV0", True), (5, "3.3-IV1", True), (6, "3.3-IV2", True),
        (7, "3.3-IV3", True), (8, "3.4-IV0", True), (9, "3.5-IV0", False),
        (10, "3.5-IV1", True), (11, "3.5-IV2", True), (12, "3.6-IV0", False),
        (13, "3.6-IV1", True), (14, "3.6-IV2", True), (15, "3.7-IV0", True),
        (16, "3.7-IV1", False), (17, "3.7-IV2", True), (18, "3.7-IV3", False),
        (19, "3.7-IV4", False), (20, "3.8-IV0", False), (21, "3.9-IV0", False)))}
MINIMUM_BOOTSTRAP_METADATA_VERSION = 4  # 3.3-IV0, the first with FeatureLevelRecord
LATEST_METADATA_VERSION = max(METADATA_VERSIONS)

SUPPORTED: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (min(METADATA_VERSIONS), LATEST_METADATA_VERSION),
    GROUP_VERSION: (0, 1),
    SHARE_VERSION: (0, 1),
    TRANSACTION_VERSION: (0, 1),
}
BOOTSTRAP: dict[str, int] = {METADATA_VERSION: LATEST_METADATA_VERSION, GROUP_VERSION: 1,
                             SHARE_VERSION: 1, TRANSACTION_VERSION: 1}


def release_of(level: int) -> str:
    """metadata.version's release name ("3.9-IV0"), as kafka-features.sh prints it."""
    mv = METADATA_VERSIONS.get(level)
    return mv.release if mv is not None else str(level)


def metadata_version_level(release: str) -> int | None:
    """The level of a release ("3.9" takes its last level, "3.7-IV2" that one)."""
    levels = [mv.level for mv in METADATA_VERSIONS.values()
              if mv.release == release or mv.release.split("-")[0] == release]
    return max(levels) if levels else None


def metadata_changed(high: int, low: int) -> bool:
    """Kafka's MetadataVersion.checkIfMetadataChanged: did any level above `low`, up to
    `high`, change the metadata records?"""
    return any(METADATA_VERSIONS[v].metadata_changed for v in range(low + 1, high + 1))


def bootstrap_records(image: MetadataImage) -> list[Record]:
    """The FeatureLevelRecords of a new cluster (none once metadata.version is set)."""
    if METADATA_VERSION in image.features:
        return []
    return [(int(T.FEATURE_LEVEL_RECORD), 0, {"name": name, "feature_level": level})
            for name, level in BOOTSTRAP.items()]


class _Refused(Exception):
    pass


def _invalid(feature: str, level: int, message: str) -> _Refused:
    return _Refused(f"Invalid update version {level} for feature {feature}. {message}")


def _not_supported(feature: str, level: int, node_id: int) -> str | None:
    """Kafka's QuorumFeatures.reasonNotSupported for this node (every node runs this
    software, so its range is the cluster's)."""
    low, high = SUPPORTED.get(feature, (0, 0))
    if low <= level <= high:
        return None
    what = f"Local controller {node_id}"
    return (f"{what} does not support this feature." if high == 0
            else f"{what} only supports versions {low}-{high}")


def _check(image: MetadataImage, feature: str, level: int, upgrade_type: int,
           node_id: int) -> Record:
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        raise _invalid(feature, level, "The controller does not support the given upgrade "
                                       "type.")
    current = image.features.get(feature, 0)
    if level < 0:
        raise _invalid(feature, level, "A feature version cannot be less than 0.")
    reason = _not_supported(feature, level, node_id)
    if reason is not None:
        raise _invalid(feature, level, reason)
    if level < current and upgrade_type == UPGRADE:
        raise _invalid(feature, level, "Can't downgrade the version of this feature without "
                                       "setting the upgrade type to either safe or unsafe "
                                       "downgrade.")
    if level > current and upgrade_type != UPGRADE:
        raise _invalid(feature, level, "Can't downgrade to a newer version.")
    if feature == METADATA_VERSION:
        _check_metadata_version(current, level, upgrade_type)
    return (int(T.FEATURE_LEVEL_RECORD), 0, {"name": feature, "feature_level": level})


def _check_metadata_version(current: int, level: int, upgrade_type: int) -> None:
    def invalid(message: str) -> _Refused:
        return _Refused(f"Invalid metadata.version {level}. {message}")
    if level < MINIMUM_BOOTSTRAP_METADATA_VERSION:
        raise invalid("Unable to set a metadata.version less than "
                      f"{release_of(MINIMUM_BOOTSTRAP_METADATA_VERSION)}")
    if level < current and metadata_changed(current, level):
        if upgrade_type == UNSAFE_DOWNGRADE:
            raise invalid("Unsafe metadata downgrade is not supported in this version.")
        raise invalid("Refusing to perform the requested downgrade because it might delete "
                      "metadata information. Retry using UNSAFE_DOWNGRADE if you want to "
                      "force the downgrade to proceed.")


def update_features(image: MetadataImage, body: Any, node_id: int
                    ) -> tuple[list[Record], dict]:
    """UpdateFeatures, the request shaped as v1+ (upgrade_type set): the records and the
    answer, results per feature (v0-1) and the top-level error (v2 has only that)."""
    records: list[Record] = []
    error: tuple[ErrorCode, str | None] = (ErrorCode.NONE, None)
    for update in body.feature_updates:
        try:
            record = _check(image, update.feature, update.max_version_level,
                            update.upgrade_type, node_id)
        except _Refused as e:
            error = (ErrorCode.INVALID_UPDATE_VERSION, str(e))
            break
        if record[2]["feature_level"] != image.features.get(update.feature, 0):
            records.append(record)
    code, message = error
    if code or body.validate_only:
        records = []
    return records, {
        "throttle_time_ms": 0, "error_code": code, "error_message": message,
        "results": [{"feature": u.feature, "error_code": code, "error_message": message}
                    for u in body.feature_updates]}
