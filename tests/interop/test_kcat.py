"""kcat (Debian's, on librdkafka 2.0.2: the oldest client we serve) against the real broker."""

from __future__ import annotations

import uuid

import pytest

from tests.interop.kcat import kcat

pytestmark = pytest.mark.interop


def test_metadata_listing(shared_broker):
    name = f"kcat-md-{uuid.uuid4().hex[:8]}"
    kcat("-b", shared_broker.bootstrap, "-P", "-t", name, stdin=b"x\n")
    listing = kcat("-b", shared_broker.bootstrap, "-L", "-t", name)
    assert f'topic "{name}" with 1 partitions' in listing
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in listing


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_every_codec(shared_broker, codec):
    name = f"kcat-{codec}-{uuid.uuid4().hex[:8]}"
    lines = [f"key{i}:value {i}" for i in range(200)]
    kcat("-b", shared_broker.bootstrap, "-P", "-t", name, "-z", codec, "-K", ":",
         stdin=("\n".join(lines) + "\n").encode())
    out = kcat("-b", shared_broker.bootstrap, "-C", "-t", name, "-o", "beginning", "-e",
               "-f", "%k:%s:%o\n")
    assert out.splitlines() == [f"{line}:{i}" for i, line in enumerate(lines)]


def test_consume_from_an_offset(shared_broker):
    name = f"kcat-off-{uuid.uuid4().hex[:8]}"
    kcat("-b", shared_broker.bootstrap, "-P", "-t", name,
         stdin=("\n".join(str(i) for i in range(10)) + "\n").encode())
    out = kcat("-b", shared_broker.bootstrap, "-C", "-t", name, "-o", "7", "-e")
    assert out.split() == ["7", "8", "9"]
