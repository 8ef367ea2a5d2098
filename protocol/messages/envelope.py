"""Envelope (58, KIP-590): a request a broker forwards to the active controller on a
client's behalf, wrapped with who the client is. RequestData is the client's request
(header and body) as it would travel, RequestPrincipal the client's principal as
DefaultPrincipalData, ClientHostAddress its address's bytes; ResponseData is the
controller's response (header and body). Served only on the controller listener."""

from protocol.schema import F, Message

EnvelopeRequest = Message(
    "EnvelopeRequest", api_key=58, valid="0", flexible="0+", fields=[
        F("request_data", "bytes"),
        F("request_principal", "bytes", nullable="0+"),
        F("client_host_address", "bytes"),
    ])

EnvelopeResponse = Message(
    "EnvelopeResponse", api_key=58, valid="0", flexible="0+", fields=[
        F("response_data", "bytes", nullable="0+", default=None),
        F("error_code", "int16"),
    ])

# how Kafka's DefaultKafkaPrincipalBuilder serializes a principal (v0, flexible)
DefaultPrincipalData = Message(
    "DefaultPrincipalData", valid="0", flexible="0+", fields=[
        F("type", "string"),
        F("name", "string"),
        F("token_authenticated", "bool"),
    ])
