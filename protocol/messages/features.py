"""UpdateFeatures (57): finalizing the cluster's feature levels (KIP-584, KIP-778's upgrade
types). v0-2 as Kafka's reference definitions have them: v1 replaces AllowDowngrade with
UpgradeType and adds ValidateOnly, v2 drops the per-feature results (a failure is the
top-level error). What a cluster supports and has finalized travels in ApiVersions v3+
(protocol.messages.api_versions)."""

from protocol.schema import F, Message

# FeatureUpdate.UpgradeType's wire codes
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3

UpdateFeaturesRequest = Message(
    "UpdateFeaturesRequest", api_key=57, valid="0-2", flexible="0+", fields=[
        F("timeout_ms", "int32", default=60000),
        F("feature_updates", [
            F("feature", "string"),
            F("max_version_level", "int16"),
            F("allow_downgrade", "bool", "0"),
            F("upgrade_type", "int8", "1+", default=UPGRADE),
        ]),
        F("validate_only", "bool", "1+", default=False),
    ])

UpdateFeaturesResponse = Message(
    "UpdateFeaturesResponse", api_key=57, valid="0-2", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("results", [
            F("feature", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ], "0-1"),
    ])
