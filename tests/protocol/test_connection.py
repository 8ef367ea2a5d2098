"""Framing, headers and the sans-IO connections, driven with plain bytes."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import framing
from protocol.connection import NEED_DATA, ClientConnection, ServerConnection, decode_request
from protocol.errors import DecodeError, FrameTooLarge, ProtocolError, UnsupportedVersion
from protocol.messages import API_VERSIONS, APIS, METADATA, PRODUCE


def _request(api_key, version, correlation_id=7, client_id="c", tail=b""):
    body = struct.pack(">hhi", api_key, version, correlation_id)
    body += struct.pack(">h", len(client_id)) + client_id.encode() + tail
    return framing.frame(body)


def test_frame_decoder_waits_for_whole_frames_split_anywhere():
    client = ClientConnection("test")
    stream = b"".join(client.send_request(METADATA, v, {"topics": None})[1] for v in (1, 9, 12))
    for cut in range(len(stream) + 1):
        server = ServerConnection()
        got = []
        for chunk in (stream[:cut], stream[cut:]):
            server.receive_data(chunk)
            while (r := server.next_request()) is not NEED_DATA:
                got.append(r.api_version)
        assert got == [1, 9, 12]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=20), st.integers(0, 300_000)), min_size=1,
                max_size=5),
       st.lists(st.integers(1, 200_000), min_size=1, max_size=30))
def test_frames_of_any_size_come_out_whole_however_the_bytes_arrive(bodies, reads):
    """Large frames are gathered chunk by chunk; what follows one in the same read is kept."""
    bodies = [b if isinstance(b, bytes) else bytes([b % 251]) * b for b in bodies]
    stream = b"".join(framing.frame(b) for b in bodies)
    decoder = framing.FrameDecoder()
    got, at, sizes = [], 0, itertools.cycle(reads)
    while at < len(stream):
        n = max(next(sizes), len(stream) // 100)  # at most ~100 reads a run
        # a bytearray the caller reuses afterwards must not change what was received
        chunk = bytearray(stream[at:at + n])
        decoder.receive_data(chunk)
        chunk[:] = b"\xee" * len(chunk)
        at += n
        while (frame := decoder.next_frame()) is not None:
            got.append(frame)
        assert decoder.buffered == len(stream[:at]) - sum(4 + len(f) for f in got)
    assert got == bodies and decoder.buffered == 0


@pytest.mark.parametrize("size", [-1, -2**31, 101])
def test_frame_size_outside_limits_is_refused_before_the_body_arrives(size):
    decoder = framing.FrameDecoder(max_frame=100)
    decoder.receive_data(struct.pack(">i", size))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_tls_client_hello_on_the_plaintext_port_is_refused():
    server = ServerConnection()
    server.receive_data(bytes.fromhex("16030100a5010000a103"))  # reads as ~369 MB
    with pytest.raises(FrameTooLarge):
        server.next_request()


def test_request_header_v2_keeps_a_classic_client_id():
    client = ClientConnection("my-client")
    _, raw = client.send_request(API_VERSIONS, 3, {"client_software_name": "x",
                                                   "client_software_version": "1"})
    # after size, key, version and correlation id: int16 length 9, not a compact string
    assert raw[12:14] == b"\x00\x09" and raw[14:23] == b"my-client"
    request = decode_request(raw[4:])
    assert request.header.client_id == "my-client"
    assert request.body.client_software_name == "x"


def test_api_versions_of_an_unknown_version_is_answered_in_v0():
    server = ServerConnection()
    server.receive_data(_request(API_VERSIONS, 99, tail=b"\x00garbage"))
    request = server.next_request()
    assert request.body is None and request.api_version == 99


@pytest.mark.parametrize("api_key,version", [(PRODUCE, 2), (METADATA, 14), (9999, 0)])
def test_unsupported_versions_and_unknown_keys_close_the_connection(api_key, version):
    with pytest.raises(UnsupportedVersion):
        decode_request(_request(api_key, version)[4:])


def test_truncated_bodies_are_refused():
    client = ClientConnection("c")
    _, raw = client.send_request(METADATA, 4, {"topics": [{"name": "t"}]})
    for cut in range(8, len(raw) - 4):
        with pytest.raises(DecodeError):
            decode_request(raw[4:4 + cut])


def test_librdkafka_all_topics_metadata_with_trailing_placeholder_bytes_is_accepted():
    # captured from confluent-kafka 2.16.1 (librdkafka 2.16.0) AdminClient.list_topics():
    # a null compact topics array followed by 3 leftover bytes of its count placeholder
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    request = decode_request(frame)
    assert request.api_version == 12 and request.header.client_id == "rdkafka"
    assert request.body.topics is None


def test_client_connection_matches_responses_by_correlation_id():
    from protocol.connection import encode_response
    client = ClientConnection("c")
    cid_a, raw_a = client.send_request(METADATA, 12, {"topics": None})
    cid_b, raw_b = client.send_request(API_VERSIONS, 3, {})
    req_b = decode_request(raw_b[4:])
    assert client.in_flight == 2
    # ApiVersions answers with header v0 even though v3 is flexible
    resp_b = encode_response(API_VERSIONS, 3, cid_b, {"error_code": 0, "api_keys": [
        {"api_key": 3, "min_version": 0, "max_version": 12}]})
    body_b = APIS[API_VERSIONS].response.build({"error_code": 0, "api_keys": [
        {"api_key": 3, "min_version": 0, "max_version": 12}]}, 3)
    assert resp_b == framing.frame(cid_b.to_bytes(4, "big") + body_b)  # no header tag byte
    client.receive_data(resp_b)
    got = client.next_response()
    assert (got.correlation_id, got.api_key) == (cid_b, API_VERSIONS)
    assert got.body.api_keys[0].max_version == 12
    assert req_b.header.correlation_id == cid_b and client.in_flight == 1
    client.receive_data(encode_response(METADATA, 12, cid_a, {"brokers": [], "topics": []}))
    assert client.next_response().correlation_id == cid_a


def test_api_versions_error_reply_is_decoded_in_the_v0_layout():
    from protocol.connection import encode_response
    client = ClientConnection("c")
    cid, _ = client.send_request(API_VERSIONS, 4, {})
    client.receive_data(encode_response(API_VERSIONS, 0, cid, {
        "error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]}))
    got = client.next_response()
    assert got.api_version == 0 and got.body.error_code == 35
    assert got.body.api_keys[0].max_version == 3


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_frames_yield_requests_or_protocol_errors(raw):
    server = ServerConnection(max_frame=1024)
    server.receive_data(raw)
    try:
        while server.next_request() is not NEED_DATA:
            pass
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([(0, 3), (0, 9), (1, 4), (1, 12), (3, 0), (3, 12), (18, 3), (19, 5),
                        (32, 4), (37, 2), (2, 7), (22, 4), (23, 2)]), st.binary(max_size=120))
def test_fuzz_bodies_behind_a_valid_header(case, tail):
    api_key, version = case
    try:
        decode_request(_request(api_key, version, tail=tail)[4:])
    except ProtocolError:
        pass


def test_a_controller_registry_serves_its_own_apis_and_refuses_the_others():
    from protocol.connection import encode_response
    from protocol.messages import CONTROLLER_APIS, VOTE
    vote = {"cluster_id": "c1", "voter_id": 2, "topics": [{"topic_name": "__cluster_metadata",
            "partitions": [{"partition_index": 0, "candidate_epoch": 3, "candidate_id": 1,
                            "last_offset_epoch": 2, "last_offset": 9}]}]}
    client = ClientConnection("c", apis=CONTROLLER_APIS)
    cid, raw = client.send_request(VOTE, 1, vote)
    with pytest.raises(UnsupportedVersion):
        decode_request(raw[4:])  # the client-facing registry does not know Vote
    server = ServerConnection(apis=CONTROLLER_APIS)
    server.receive_data(raw)
    request = server.next_request()
    assert request.body.voter_id == 2 and request.body.topics[0].partitions[0].last_offset == 9
    answer = {"error_code": 0, "topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0, "leader_id": -1, "leader_epoch": 3, "vote_granted": True}]}]}
    client.receive_data(server.encode_response(request, answer))
    got = client.next_response()
    assert got.correlation_id == cid and got.body.topics[0].partitions[0].vote_granted
    with pytest.raises(UnsupportedVersion):  # and it does not know Metadata
        decode_request(ClientConnection("c").send_request(METADATA, 12, {"topics": None})[1][4:],
                       CONTROLLER_APIS)
    assert encode_response(VOTE, 1, 5, answer, CONTROLLER_APIS)[4:8] == b"\x00\x00\x00\x05"


def test_fetch_with_topic_ids_is_served_by_the_client_facing_broker_and_the_quorum():
    import uuid

    from protocol.messages import ALL_APIS, FETCH
    topic_id = uuid.UUID(int=1)
    body = {"max_wait_ms": 500, "min_bytes": 0, "replica_state": {"replica_id": 2,
            "replica_epoch": 7}, "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "fetch_offset": 4, "last_fetched_epoch": 1,
                 "partition_max_bytes": 1 << 20}]}]}
    raw = ClientConnection("c", apis=ALL_APIS).send_request(FETCH, 16, body)[1]
    for registry in ((), (ALL_APIS,)):  # the broker serves Fetch to v17 (topic ids)
        got = decode_request(raw[4:], *registry).body
        assert got.topics[0].topic_id == topic_id
        assert (got.replica_state.replica_id, got.replica_state.replica_epoch) == (2, 7)
