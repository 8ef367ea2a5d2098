"""Client quotas (KIP-546): DescribeClientQuotas (48) and AlterClientQuotas (49).

Owns their declarations only, at every version Kafka defines (v1 is v0 made flexible). A
quota entity is a list of (entity type, entity name) pairs, the types being Kafka's "user",
"client-id" and "ip", a null name standing for the type's default entity. A describe
filter's match type is 0 exact name, 1 the default entity, 2 any named entity.
"""

from protocol.schema import F, Message

# one (entity type, name) pair of a quota entity, as every message and the record spell it
ENTITY = [
    F("entity_type", "string"),
    F("entity_name", "string", nullable="0+"),  # null: the default entity of that type
]

DescribeClientQuotasRequest = Message(
    "DescribeClientQuotasRequest", api_key=48, valid="0-1", flexible="1+", fields=[
        F("components", [
            F("entity_type", "string"),
            F("match_type", "int8"),
            F("match", "string", nullable="0+"),
        ]),
        F("strict", "bool"),
    ])

DescribeClientQuotasResponse = Message(
    "DescribeClientQuotasResponse", api_key=48, valid="0-1", flexible="1+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("entries", [
            F("entity", ENTITY),
            F("values", [
                F("key", "string"),
                F("value", "float64"),
            ]),
        ], nullable="0+"),
    ])

AlterClientQuotasRequest = Message(
    "AlterClientQuotasRequest", api_key=49, valid="0-1", flexible="1+", fields=[
        F("entries", [
            F("entity", ENTITY),
            F("ops", [
                F("key", "string"),
                F("value", "float64"),
                F("remove", "bool"),
            ]),
        ]),
        F("validate_only", "bool"),
    ])

AlterClientQuotasResponse = Message(
    "AlterClientQuotasResponse", api_key=49, valid="0-1", flexible="1+", fields=[
        F("throttle_time_ms", "int32"),
        F("entries", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("entity", ENTITY),
        ]),
    ])
