"""Delegation tokens (KIP-48): CreateDelegationToken (38), RenewDelegationToken (39),
ExpireDelegationToken (40) and DescribeDelegationToken (41), as Kafka's reference
definitions have them (v0 deprecated; v2 flexible; v3 of Create and Describe name an owner
other than the requester). A token is a principal's SCRAM credential on loan: its id is
the SCRAM user name, its HMAC the password (broker.security.tokens)."""

from protocol.schema import F, Message


def _principal(prefix: str = "", versions: str = "0+") -> list[F]:
    return [F(f"{prefix}principal_type", "string", versions),
            F(f"{prefix}principal_name", "string", versions)]


CreateDelegationTokenRequest = Message(
    "CreateDelegationTokenRequest", api_key=38, valid="0-3", flexible="2+", fields=[
        F("owner_principal_type", "string", "3+", nullable="3+", default=None),
        F("owner_principal_name", "string", "3+", nullable="3+", default=None),
        F("renewers", _principal()),
        F("max_lifetime_ms", "int64", default=-1),  # -1: the broker's maximum
    ])

CreateDelegationTokenResponse = Message(
    "CreateDelegationTokenResponse", api_key=38, valid="0-3", flexible="2+", fields=[
        F("error_code", "int16"),
        *_principal(),
        *_principal("token_requester_", "3+"),
        F("issue_timestamp_ms", "int64"),
        F("expiry_timestamp_ms", "int64"),
        F("max_timestamp_ms", "int64"),
        F("token_id", "string"),
        F("hmac", "bytes"),
        F("throttle_time_ms", "int32"),
    ])

RenewDelegationTokenRequest = Message(
    "RenewDelegationTokenRequest", api_key=39, valid="0-2", flexible="2+", fields=[
        F("hmac", "bytes"),
        F("renew_period_ms", "int64"),
    ])

RenewDelegationTokenResponse = Message(
    "RenewDelegationTokenResponse", api_key=39, valid="0-2", flexible="2+", fields=[
        F("error_code", "int16"),
        F("expiry_timestamp_ms", "int64"),
        F("throttle_time_ms", "int32"),
    ])

ExpireDelegationTokenRequest = Message(
    "ExpireDelegationTokenRequest", api_key=40, valid="0-2", flexible="2+", fields=[
        F("hmac", "bytes"),
        F("expiry_time_period_ms", "int64"),
    ])

ExpireDelegationTokenResponse = Message(
    "ExpireDelegationTokenResponse", api_key=40, valid="0-2", flexible="2+", fields=[
        F("error_code", "int16"),
        F("expiry_timestamp_ms", "int64"),
        F("throttle_time_ms", "int32"),
    ])

DescribeDelegationTokenRequest = Message(
    "DescribeDelegationTokenRequest", api_key=41, valid="0-3", flexible="2+", fields=[
        F("owners", _principal(), nullable="0+", default=None),  # null: every token
    ])

DescribeDelegationTokenResponse = Message(
    "DescribeDelegationTokenResponse", api_key=41, valid="0-3", flexible="2+", fields=[
        F("error_code", "int16"),
        F("tokens", [
            *_principal(),
            *_principal("token_requester_", "3+"),
            F("issue_timestamp", "int64"),
            F("expiry_timestamp", "int64"),
            F("max_timestamp", "int64"),
            F("token_id", "string"),
            F("hmac", "bytes"),
            F("renewers", _principal()),
        ]),
        F("throttle_time_ms", "int32"),
    ])
