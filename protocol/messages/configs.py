"""DescribeConfigs (32): the topic and broker configuration clients ask to see;
IncrementalAlterConfigs (44): changes to it, key by key (KIP-339); and the legacy AlterConfigs
(33), which replaces a resource's whole set of dynamic configs (kafka-python's admin sends it)."""

from protocol.schema import F, Message

DescribeConfigsRequest = Message(
    "DescribeConfigsRequest", api_key=32, valid="0-4", flexible="4+", fields=[
        F("resources", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configuration_keys", "[]string", nullable="0+"),
        ]),
        F("include_synonyms", "bool", "1+"),
        F("include_documentation", "bool", "3+"),
    ])

DescribeConfigsResponse = Message(
    "DescribeConfigsResponse", api_key=32, valid="0-4", flexible="4+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", [
                F("name", "string"),
                F("value", "string", nullable="0+"),
                F("read_only", "bool"),
                F("is_default", "bool", "0"),
                F("config_source", "int8", "1+", default=-1),
                F("is_sensitive", "bool"),
                F("synonyms", [
                    F("name", "string", "1+"),
                    F("value", "string", "1+", nullable="0+"),
                    F("source", "int8", "1+"),
                ], "1+"),
                F("config_type", "int8", "3+"),
                F("documentation", "string", "3+", nullable="0+"),
            ]),
        ]),
    ])


def _alter_request(name: str, api_key: int, valid: str, flexible: str,
                   config_fields: list[F]) -> Message:
    return Message(name, api_key=api_key, valid=valid, flexible=flexible, fields=[
        F("resources", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", [F("name", "string"), *config_fields]),
        ]),
        F("validate_only", "bool"),
    ])


def _alter_response(name: str, api_key: int, valid: str, flexible: str) -> Message:
    return Message(name, api_key=api_key, valid=valid, flexible=flexible, fields=[
        F("throttle_time_ms", "int32"),
        F("responses", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ])


IncrementalAlterConfigsRequest = _alter_request(
    "IncrementalAlterConfigsRequest", 44, "0-1", "1+", [
        # 0 set, 1 delete, 2 append, 3 subtract (Kafka's AlterConfigOp.OpType)
        F("config_operation", "int8"),
        F("value", "string", nullable="0+"),
    ])
IncrementalAlterConfigsResponse = _alter_response("IncrementalAlterConfigsResponse", 44,
                                                  "0-1", "1+")

AlterConfigsRequest = _alter_request("AlterConfigsRequest", 33, "0-2", "2+", [
    F("value", "string", nullable="0+"),
])
AlterConfigsResponse = _alter_response("AlterConfigsResponse", 33, "0-2", "2+")
