"""Request and response headers.

Owns: request header v1/v2 and response header v0/v1, and the rule that picks them.

Two rules that trip implementations (docs/PROTOCOL.md §2):
- in request header v2 the client_id keeps its int16-length encoding, never compact, so any
  broker can read the header of an ApiVersions request of a version it does not know;
- the ApiVersions response always uses header v0, even for its flexible versions.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from construct import ConstructError

from protocol import primitives as p
from protocol.errors import DecodeError

API_VERSIONS_KEY = 18

_FIXED = struct.Struct(">hhi")
_CLIENT_ID = p.KString(compact=False, nullable=True)
_NO_TAGS = p.TaggedFields({})
_EMPTY_TAGS = b"\x00"


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def parse_request_header(stream: io.BytesIO, flexible: bool | None) -> RequestHeader:
    """Read a v1 header, plus the v2 tag section when `flexible` (the api version decides).

    `flexible=None` reads only the fixed part and client_id: enough to reject a request or to
    answer an ApiVersions of unknown version without touching its body.
    """
    try:
        raw = stream.read(8)
        if len(raw) < 8:
            raise DecodeError("request header truncated")
        api_key, api_version, correlation_id = _FIXED.unpack(raw)
        client_id = _CLIENT_ID._parse(stream, None, "client_id")
        if flexible:
            _NO_TAGS._parse(stream, None, "header tags")
    except ConstructError as e:
        raise DecodeError(f"request header: {e}") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def read_request_tags(stream: io.BytesIO) -> None:
    try:
        _NO_TAGS._parse(stream, None, "header tags")
    except ConstructError as e:
        raise DecodeError(f"request header tags: {e}") from None


def encode_request_header(header: RequestHeader, flexible: bool) -> bytes:
    out = io.BytesIO()
    out.write(_FIXED.pack(header.api_key, header.api_version, header.correlation_id))
    _CLIENT_ID._build(header.client_id, out, None, "client_id")
    if flexible:
        out.write(_EMPTY_TAGS)
    return out.getvalue()


def response_header_flexible(api_key: int, body_flexible: bool) -> bool:
    return body_flexible and api_key != API_VERSIONS_KEY


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    head = correlation_id.to_bytes(4, "big", signed=True)
    return head + _EMPTY_TAGS if flexible else head


def parse_response_header(stream: io.BytesIO, flexible: bool) -> int:
    raw = stream.read(4)
    if len(raw) < 4:
        raise DecodeError("response header truncated")
    if flexible:
        read_request_tags(stream)
    return int.from_bytes(raw, "big", signed=True)
