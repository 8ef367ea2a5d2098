"""ApiVersions (18): the version handshake every client starts with.

Its response always travels with header v0 (protocol.headers); an unknown request version
is answered with error 35 and a v0 body (broker.handlers.api_versions)."""

from protocol.schema import F, Message

ApiVersionsRequest = Message(
    "ApiVersionsRequest", api_key=18, valid="0-4", flexible="3+", fields=[
        F("client_software_name", "string", "3+"),
        F("client_software_version", "string", "3+"),
    ])

ApiVersionsResponse = Message(
    "ApiVersionsResponse", api_key=18, valid="0-4", flexible="3+", fields=[
        F("error_code", "int16"),
        F("api_keys", [
            F("api_key", "int16"),
            F("min_version", "int16"),
            F("max_version", "int16"),
        ]),
        F("throttle_time_ms", "int32", "1+"),
        F("supported_features", [
            F("name", "string", "3+"),
            F("min_version", "int16", "3+"),
            F("max_version", "int16", "3+"),
        ], "3+", tag=0),
        F("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
        F("finalized_features", [
            F("name", "string", "3+"),
            F("max_version_level", "int16", "3+"),
            F("min_version_level", "int16", "3+"),
        ], "3+", tag=2),
        F("zk_migration_ready", "bool", "3+", tag=3),
    ])

