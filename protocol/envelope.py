"""Envelope (KIP-590) contents, sans-IO: a client's request wrapped with its principal for
the active controller, and the controller's response unwrapped again.

Owns `wrap_request` (the EnvelopeRequest body: the request's header and body bytes, the
principal as DefaultPrincipalData, the client's address), `unwrap_request` (back to the
request and who sent it), `wrap_response` and `unwrap_response` (the response's header
and body bytes). As in Kafka, RequestData and ResponseData carry no size prefix.
"""

from __future__ import annotations

import io
from typing import Any

from protocol import headers
from protocol.connection import Request, decode_request, encode_response
from protocol.headers import RequestHeader
from protocol.messages import ALL_APIS
from protocol.messages.envelope import DefaultPrincipalData

FORWARDING_CLIENT_ID = "forwarded"


def wrap_request(api_key: int, version: int, body: Any, principal: str,
                 token_authenticated: bool = False, client_host: bytes = b"") -> dict:
    message = ALL_APIS[api_key].request
    out = io.BytesIO()
    out.write(headers.encode_request_header(
        RequestHeader(api_key, version, 0, FORWARDING_CLIENT_ID), message.is_flexible(version)))
    message.build_into(body, version, out)
    kind, _, name = principal.partition(":")
    return {"request_data": out.getvalue(),
            "request_principal": DefaultPrincipalData.build(
                {"type": kind, "name": name, "token_authenticated": token_authenticated}, 0),
            "client_host_address": client_host}


def unwrap_request(envelope: Any) -> tuple[Request, str, bool]:
    """(the request, its principal "Type:name", whether it logged in with a token).
    Raises protocol errors (ProtocolError) on bytes that do not decode."""
    request = decode_request(bytes(envelope.request_data), ALL_APIS)
    raw = envelope.request_principal
    if raw is None:
        return request, "User:ANONYMOUS", False
    data = DefaultPrincipalData.parse(bytes(raw), 0)
    return request, f"{data.type}:{data.name}", bool(data.token_authenticated)


def wrap_response(request: Request, body: Any) -> bytes:
    return encode_response(request.api_key, request.api_version,
                           request.header.correlation_id, body, ALL_APIS)[4:]


def unwrap_response(api_key: int, version: int, data: bytes) -> Any:
    message = ALL_APIS[api_key].response
    stream = io.BytesIO(bytes(data))
    headers.parse_response_header(
        stream, headers.response_header_flexible(api_key, message.is_flexible(version)))
    return message.parse_stream(stream, version)
