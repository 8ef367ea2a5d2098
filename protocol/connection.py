"""Sans-IO connections: bytes in, requests or responses out, and back (in the manner of h11).

Owns: `ServerConnection` (the broker's view: frames -> `Request`, response body -> bytes)
and `ClientConnection` (the client's view: request -> bytes, with the correlation table
that remembers each request's api key and version, which a response needs to be decoded).
Neither touches a socket or a clock; tests drive them with plain bytes.

Both take the registry of APIs they speak, `APIS` (the client-facing broker) by default: a
controller listener serves `CONTROLLER_APIS` plus the client APIs it chooses, and a node
talking to one speaks the same registry. A registry other than `APIS` accepts every version
its declarations cover (protocol.versions.accepts).
"""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass
from typing import Any, Mapping

from construct import Container

from protocol import framing, headers
from protocol.errors import DecodeError, ErrorCode, UnsupportedVersion
from protocol.headers import API_VERSIONS_KEY, RequestHeader
from protocol.messages import APIS, Api
from protocol.versions import accepts

NEED_DATA = framing.NEED_DATA


@dataclass(slots=True)
class Request:
    header: RequestHeader
    body: Container | None  # None: an ApiVersions request of a version we do not know
    size: int  # frame bytes, for request metrics

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version


class ServerConnection:
    """One client connection as the broker sees it."""

    def __init__(self, max_frame: int = framing.DEFAULT_MAX_FRAME,
                 apis: Mapping[int, Api] = APIS):
        self._frames = framing.FrameDecoder(max_frame)
        self.apis = apis

    @property
    def max_frame(self) -> int:
        return self._frames.max_frame

    @max_frame.setter
    def max_frame(self, size: int) -> None:
        # raised once a SASL client has logged in (sasl.server.max.receive.size before)
        self._frames.max_frame = size

    def receive_data(self, data: bytes | bytearray) -> None:
        self._frames.receive_data(data)

    def next_frame(self) -> bytes | None:
        """The next whole frame undecoded (a bare SASL token after SaslHandshake v0)."""
        return self._frames.next_frame()

    def next_request(self) -> Request | None:
        """The next whole request, or NEED_DATA; ProtocolError means close the connection."""
        frame = self._frames.next_frame()
        if frame is NEED_DATA:
            return NEED_DATA
        return decode_request(frame, self.apis)

    def encode_response(self, request: Request, body: Any) -> bytes:
        return encode_response(request.api_key, request.api_version,
                               request.header.correlation_id, body, self.apis)


def decode_request(frame: bytes, apis: Mapping[int, Api] = APIS) -> Request:
    stream = io.BytesIO(frame)
    header = headers.parse_request_header(stream, flexible=None)
    api = apis.get(header.api_key)
    if api is None:
        raise UnsupportedVersion(f"unknown api key {header.api_key}")
    if not accepts(apis, header.api_key, header.api_version):
        if header.api_key == API_VERSIONS_KEY:
            return Request(header, None, len(frame))
        raise UnsupportedVersion(f"{api.name} v{header.api_version} is not implemented")
    if api.request.is_flexible(header.api_version):
        headers.read_request_tags(stream)
    # Bytes after the body are ignored, as Apache Kafka's parser ignores them: librdkafka 2.16
    # leaves 3 bytes of its array-count placeholder after a null compact array (Metadata v12
    # for all topics), and a broker that refused them would refuse a real client.
    body = api.request.parse_stream(stream, header.api_version)
    return Request(header, body, len(frame))


def encode_response(api_key: int, version: int, correlation_id: int, body: Any,
                    apis: Mapping[int, Api] = APIS) -> bytes:
    message = apis[api_key].response
    flexible = headers.response_header_flexible(api_key, message.is_flexible(version))
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(headers.encode_response_header(correlation_id, flexible))
    message.build_into(body, version, out)
    buf = out.getbuffer()
    buf[0:4] = (len(buf) - 4).to_bytes(4, "big")
    del buf
    return out.getvalue()


@dataclass(slots=True)
class Response:
    correlation_id: int
    api_key: int
    api_version: int
    body: Container


class ClientConnection:
    """One connection to a broker as a client sees it: pipelined, in order."""

    def __init__(self, client_id: str | None = "minibroker",
                 max_frame: int = framing.DEFAULT_MAX_FRAME,
                 apis: Mapping[int, Api] = APIS):
        self.client_id = client_id
        self.apis = apis
        self._frames = framing.FrameDecoder(max_frame)
        self._ids = itertools.count(1)
        self._in_flight: dict[int, tuple[int, int]] = {}

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def send_request(self, api_key: int, version: int, body: Any,
                     expect_response: bool = True) -> tuple[int, bytes]:
        """Encode one request; returns (correlation_id, framed bytes to write)."""
        correlation_id = next(self._ids) & 0x7FFFFFFF
        message = self.apis[api_key].request
        flexible = message.is_flexible(version)
        header = RequestHeader(api_key, version, correlation_id, self.client_id)
        out = io.BytesIO()
        out.write(headers.encode_request_header(header, flexible))
        message.build_into(body, version, out)
        if expect_response:
            self._in_flight[correlation_id] = (api_key, version)
        return correlation_id, framing.frame(out.getvalue())

    def receive_data(self, data: bytes | bytearray) -> None:
        self._frames.receive_data(data)

    def next_response(self) -> Response | None:
        frame = self._frames.next_frame()
        if frame is NEED_DATA:
            return NEED_DATA
        if len(frame) < 4:
            raise DecodeError("response shorter than its header")
        correlation_id = int.from_bytes(frame[:4], "big", signed=True)
        pending = self._in_flight.pop(correlation_id, None)
        if pending is None:
            raise DecodeError(f"response for unknown correlation id {correlation_id}")
        api_key, version = pending
        message = self.apis[api_key].response
        flexible = headers.response_header_flexible(api_key, message.is_flexible(version))
        stream = io.BytesIO(frame)
        headers.parse_response_header(stream, flexible)
        if api_key == API_VERSIONS_KEY and frame[4:6] == ErrorCode.UNSUPPORTED_VERSION.to_bytes(
                2, "big"):
            # KIP-511: a broker that does not know our version answers in the v0 layout
            version = 0
        body = message.parse(frame[stream.tell():], version)
        return Response(correlation_id, api_key, version, body)
