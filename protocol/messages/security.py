"""Security RPCs: SaslHandshake (17), SaslAuthenticate (36), DescribeAcls (29), CreateAcls (30),
DeleteAcls (31), DescribeUserScramCredentials (50) and AlterUserScramCredentials (51).

Owns their declarations only, at every version Kafka defines. A client on a SASL listener
names its mechanism with SaslHandshake (v1: the tokens then travel inside SaslAuthenticate;
v0: as bare length-prefixed frames, KIP-152), and sends each mechanism token in a
SaslAuthenticate. The ACL APIs manage the authorizer's access control entries (KIP-290's
pattern types from v1: 1 ANY, 2 MATCH, 3 LITERAL, 4 PREFIXED); the SCRAM ones a user's
salted credentials (KIP-554: the client salts, the broker never sees the password).
"""

from protocol.schema import F, Message

SaslHandshakeRequest = Message(
    "SaslHandshakeRequest", api_key=17, valid="0-1", flexible="none", fields=[
        F("mechanism", "string"),
    ])

SaslHandshakeResponse = Message(
    "SaslHandshakeResponse", api_key=17, valid="0-1", flexible="none", fields=[
        F("error_code", "int16"),
        F("mechanisms", "[]string"),
    ])

SaslAuthenticateRequest = Message(
    "SaslAuthenticateRequest", api_key=36, valid="0-2", flexible="2+", fields=[
        F("auth_bytes", "bytes"),
    ])

SaslAuthenticateResponse = Message(
    "SaslAuthenticateResponse", api_key=36, valid="0-2", flexible="2+", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("auth_bytes", "bytes"),
        F("session_lifetime_ms", "int64", "1+", default=0),
    ])

# One access control entry as the three ACL APIs spell it (pattern type from v1, default
# LITERAL for v0 which knew no other).
_ENTRY = [
    F("principal", "string"),
    F("host", "string"),
    F("operation", "int8"),
    F("permission_type", "int8"),
]

# An ACL filter, as DescribeAcls and each DeleteAcls filter spell it (null: any).
_FILTER = [
    F("resource_type_filter", "int8"),
    F("resource_name_filter", "string", nullable="0+"),
    F("pattern_type_filter", "int8", "1+", default=3),
    F("principal_filter", "string", nullable="0+"),
    F("host_filter", "string", nullable="0+"),
    F("operation", "int8"),
    F("permission_type", "int8"),
]

DescribeAclsRequest = Message(
    "DescribeAclsRequest", api_key=29, valid="0-3", flexible="2+", fields=_FILTER)

DescribeAclsResponse = Message(
    "DescribeAclsResponse", api_key=29, valid="0-3", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resources", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("pattern_type", "int8", "1+", default=3),
            F("acls", _ENTRY),
        ]),
    ])

CreateAclsRequest = Message(
    "CreateAclsRequest", api_key=30, valid="0-3", flexible="2+", fields=[
        F("creations", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("resource_pattern_type", "int8", "1+", default=3),
            *_ENTRY,
        ]),
    ])

CreateAclsResponse = Message(
    "CreateAclsResponse", api_key=30, valid="0-3", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ])

DeleteAclsRequest = Message(
    "DeleteAclsRequest", api_key=31, valid="0-3", flexible="2+", fields=[
        F("filters", _FILTER),
    ])

DeleteAclsResponse = Message(
    "DeleteAclsResponse", api_key=31, valid="0-3", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("filter_results", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("matching_acls", [
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("pattern_type", "int8", "1+", default=3),
                *_ENTRY,
            ]),
        ]),
    ])

DescribeUserScramCredentialsRequest = Message(
    "DescribeUserScramCredentialsRequest", api_key=50, valid="0", flexible="0+", fields=[
        F("users", [F("name", "string")], nullable="0+"),  # null: every user
    ])

DescribeUserScramCredentialsResponse = Message(
    "DescribeUserScramCredentialsResponse", api_key=50, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("results", [
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("credential_infos", [
                F("mechanism", "int8"),
                F("iterations", "int32"),
            ]),
        ]),
    ])

AlterUserScramCredentialsRequest = Message(
    "AlterUserScramCredentialsRequest", api_key=51, valid="0", flexible="0+", fields=[
        F("deletions", [
            F("name", "string"),
            F("mechanism", "int8"),
        ]),
        F("upsertions", [
            F("name", "string"),
            F("mechanism", "int8"),
            F("iterations", "int32"),
            F("salt", "bytes"),
            F("salted_password", "bytes"),
        ]),
    ])

AlterUserScramCredentialsResponse = Message(
    "AlterUserScramCredentialsResponse", api_key=51, valid="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", [
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ])
